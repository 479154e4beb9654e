// User functions that run their own collectives (FunctionContext.group), for usergroup.test.ts
// ("tests/comm/groupfns:<export>").
import type { Tensor } from "../../ffi/tensor.ts"
import { defineFunction, type GroupReduction } from "../../src/worker/function.ts"
import { op } from "../../src/worker/ops.ts"

/**
 * A row-parallel linear over the call's tp group: this member's columns of x (its K / tp
 * block) times its rows of w, all-reduced (sum) over tp: x @ w on every member.
 */
export const tpLinear = defineFunction((ctx, x: Tensor, w: Tensor) => {
  const tp = ctx.group("tp"), k = x.shape[1]! / tp.size
  const xs = op(ctx, "contiguous", [op(ctx, "narrow", [x, 1, tp.rank * k, k])])
  const ws = op(ctx, "contiguous", [op(ctx, "narrow", [w, 0, tp.rank * k, k])])
  const partial = op(ctx, "matmul", [xs, ws])
  xs.free()
  ws.free()
  return tp.allReduce(partial, "sum", { inplace: true })
})

/** This member's block of x's columns times its rows of w, by its mesh coordinate (the built-in path's input). */
export const tpPartial = defineFunction((ctx, x: Tensor, w: Tensor, tpSize: number) => {
  const tpRank = ctx.coords.tp!, k = x.shape[1]! / tpSize
  return op(ctx, "matmul", [op(ctx, "contiguous", [op(ctx, "narrow", [x, 1, tpRank * k, k])]), op(ctx, "contiguous", [op(ctx, "narrow", [w, 0, tpRank * k, k])])])
})

/** t scaled by (group rank + 1): each member's input differs. */
const mine = (ctx: Parameters<typeof tpLinear>[0], t: Tensor) => op(ctx, "mul", [t, ctx.group().rank + 1])

/** One of the group's operations over this member's own input (t * (group rank + 1)). */
export const groupOp = defineFunction((ctx, kind: string, t: Tensor, arg: unknown) => {
  const g = ctx.group(), x = mine(ctx, t)
  switch (kind) {
    case "allReduce": return g.allReduce(x, arg as GroupReduction)
    case "allGather": return g.allGather(x)
    case "reduceScatter": return g.reduceScatter(x, arg as GroupReduction)
    case "broadcast": return g.broadcast(x, arg as number)
    case "sendRecv": {
      // Member 0 sends its input to the last member, which sends its own back: each gets the other's.
      const out = op(ctx, "zeros_like", [x]), last = g.size - 1
      if (g.rank === 0) g.exchange([{ send: x, to: last }, { recv: out, from: last }])
      else if (g.rank === last) g.exchange([{ send: x, to: 0 }, { recv: out, from: 0 }])
      return out
    }
    case "sendThenRecv": {
      // A plain send on member 0 and the matching recv on member 1; the others return zeros.
      const out = op(ctx, "zeros_like", [x])
      if (g.rank === 0) g.send(x, 1)
      else if (g.rank === 1) g.recv(out, 0)
      return out
    }
    default: throw new Error(`unknown kind ${kind}`)
  }
})

/**
 * One of the group's operations on a strided view of this member's input x (t * (group rank
 * + 1), [6]): its even elements (shape [3], stride 2). In place and receives return x, whose
 * odd elements no call may touch.
 */
export const viewGroupOp = defineFunction((ctx, kind: string, t: Tensor) => {
  const g = ctx.group(), x = mine(ctx, t), even = x.asStrided([3], [2], 0)
  try {
    switch (kind) {
      case "allReduceInPlace": return (g.allReduce(even, "sum", { inplace: true }), x)
      case "broadcastInPlace": return (g.broadcast(even, 1, { inplace: true }), x)
      case "allGather": return g.allGather(even)
      case "sendRecv": {
        // Member 0's even elements into member 1's odd ones.
        const odd = x.asStrided([3], [2], 1)
        try {
          if (g.rank === 0) g.send(even, 1)
          else if (g.rank === 1) g.recv(odd, 0)
        } finally {
          odd.free()
        }
        return x
      }
      case "expandedInPlace": {
        const expanded = x.asStrided([2, 3], [0, 1], 0)
        try {
          return (g.allReduce(expanded, "sum", { inplace: true }), x)
        } finally {
          expanded.free()
        }
      }
      default: throw new Error(`unknown kind ${kind}`)
    }
  } finally {
    even.free()
  }
})

/** An all_reduce in which the last member passes something else: its own shape or its own reduction. */
export const disagreeing = defineFunction((ctx, how: "shape" | "op", t: Tensor) => {
  const g = ctx.group(), odd = g.rank === g.size - 1
  if (how === "shape" && odd) return g.allReduce(op(ctx, "cat", [[t, t]]))
  return g.allReduce(t, how === "op" && odd ? "max" : "sum")
})

/** Catches its group's failure and returns normally: the command still fails. */
export const swallowing = defineFunction((ctx, t: Tensor) => {
  const g = ctx.group()
  try {
    g.allReduce(g.rank === 0 ? op(ctx, "cat", [[t, t]]) : t)
  } catch {
    // ignored on purpose
  }
  return op(ctx, "clone", [t])
})

/**
 * A call over dp and tp: t * (rank + 1) summed along tp, then along dp (each dim's own group),
 * and gathered over both (the whole group, members in dp-then-tp order).
 */
export const twoDims = defineFunction((ctx, t: Tensor) => {
  const x = op(ctx, "mul", [t, ctx.rank + 1])
  const alongTp = ctx.group("tp").allReduce(x)
  const both = ctx.group("dp").allReduce(alongTp, "sum", { inplace: true })
  return [both, ctx.group(["dp", "tp"]).allGather(x)]
})

/** Asks for a group other than the one its call declared. */
export const wrongGroup = defineFunction((ctx, t: Tensor) => ctx.group("dp").allReduce(t))

/** Blocks one rank's whole process for `ms` before a sum over the group. */
export const blockThenSum = defineFunction((ctx, rank: number, ms: number, t: Tensor) => {
  if (ctx.rank === rank) Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, ms)
  return ctx.group().allReduce(t)
})

/** Throws on one rank before the group's sum: the others wait in it for that rank. */
export const throwThenSum = defineFunction((ctx, rank: number, t: Tensor) => {
  if (ctx.rank === rank) throw new Error(`deliberate failure on rank ${rank}`)
  return ctx.group().allReduce(t)
})

export const pid = defineFunction(() => process.pid)
