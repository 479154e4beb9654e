/**
 * The worker's side of the registry: each declared op bound to the shim calls that run it.
 * This is the only module of src/ops that loads native code; the controller never imports it.
 * `KERNELS` is typed over every op name, so an op declared without a kernel does not compile,
 * and each kernel sees its op's arguments bound by name (tensors as worker Tensors).
 */
import * as k from "../../ffi/ops.ts"
import type { BinaryOpName, ReduceOpName, UnaryOpName } from "../../ffi/symbols.ts"
import { Tensor } from "../../ffi/tensor.ts"
import type { FunctionContext, RemoteFunction } from "./function.ts"
import { OpArgumentError } from "./meta.ts"
import type { Bound } from "./params.ts"
import { OPS, opNamed, type Op, type OpName, type ParamsOf } from "./registry.ts"
import type { OpSpec } from "./spec.ts"
import { arangeBounds } from "./specs/creation.ts"
import { reshapeShape, transposeDims } from "./specs/layout.ts"
import { normDim } from "./rules.ts"

/**
 * Computes into `outs`, allocated from the op's rule. A view op allocates nothing and
 * returns its result instead; an in-place op writes its input.
 */
export type Kernel<N extends OpName> = (ctx: FunctionContext, outs: ReadonlyArray<Tensor>, a: Bound<ParamsOf<N>, Tensor>, op: N) => Tensor | void

type Kernels = { readonly [N in OpName]: Kernel<N> }

const fill = (value: number) => (ctx: FunctionContext, [out]: ReadonlyArray<Tensor>) => k.fill(out!, value, ctx.stream)

const random = (normal: boolean) => (ctx: FunctionContext, [out]: ReadonlyArray<Tensor>, a: { seed: number; offset: number }) =>
  k.rand(out!, a.seed, a.offset, normal, ctx.stream)

const unary = (op: UnaryOpName) => (ctx: FunctionContext, [out]: ReadonlyArray<Tensor>, a: { input: Tensor }) => k.unary(op, out!, a.input, ctx.stream)

const binaryInto = (op: BinaryOpName, ctx: FunctionContext, out: Tensor, a: Tensor | number, b: Tensor | number): void => {
  if (typeof a !== "number" && typeof b !== "number") k.binary(op, out, a, b, ctx.stream)
  else if (typeof a !== "number") k.binaryScalar(op, out, a, b as number, false, ctx.stream)
  else k.binaryScalar(op, out, b as Tensor, a, true, ctx.stream)
}

const binary = (op: BinaryOpName) => (ctx: FunctionContext, [out]: ReadonlyArray<Tensor>, a: { input: Tensor | number; other: Tensor | number }) =>
  binaryInto(op, ctx, out!, a.input, a.other)

const binaryInPlace = (op: BinaryOpName) => (ctx: FunctionContext, _: ReadonlyArray<Tensor>, a: { input: Tensor; other: Tensor | number }) =>
  binaryInto(op, ctx, a.input, a.input, a.other)

const reduce = (op: ReduceOpName) => (ctx: FunctionContext, [out]: ReadonlyArray<Tensor>, a: { input: Tensor; dim: number | null }, name: string) =>
  // A 0-dim tensor's one element is all of its dim 0.
  k.reduce(op, out!, a.input, a.dim === null || a.input.shape.length === 0 ? undefined : normDim(name, a.dim, a.input.shape.length), ctx.stream)

const transpose = (ctx: FunctionContext, out: Tensor, a: Tensor, d0: number, d1: number, op: string): void =>
  // A 0-dim tensor transposed is itself (a copy).
  a.shape.length === 0 ? k.cast(out, a, ctx.stream) : k.transpose(out, a, ...transposeDims(op, a, d0, d1), ctx.stream)

const cast = (ctx: FunctionContext, [out]: ReadonlyArray<Tensor>, a: { input: Tensor }) => k.cast(out!, a.input, ctx.stream)

export const KERNELS: Kernels = {
  zeros: fill(0),
  ones: fill(1),
  full: (ctx, [out], a) => k.fill(out!, a.fill_value, ctx.stream),
  arange: (ctx, [out], a, op) => {
    const [start, step] = arangeBounds(a, op)
    k.arange(out!, start, step, ctx.stream)
  },
  rand: random(false),
  randn: random(true),
  neg: unary("neg"), abs: unary("abs"), exp: unary("exp"), log: unary("log"), sqrt: unary("sqrt"),
  relu: unary("relu"), tanh: unary("tanh"), sigmoid: unary("sigmoid"),
  add: binary("add"), sub: binary("sub"), mul: binary("mul"), div: binary("div"),
  maximum: binary("maximum"), minimum: binary("minimum"), pow: binary("pow"),
  eq: binary("eq"), ne: binary("ne"), lt: binary("lt"), le: binary("le"), gt: binary("gt"), ge: binary("ge"),
  add_: binaryInPlace("add"), sub_: binaryInPlace("sub"), mul_: binaryInPlace("mul"), div_: binaryInPlace("div"),
  sum: reduce("sum"), prod: reduce("prod"), mean: reduce("mean"), max: reduce("max"), min: reduce("min"),
  matmul: (ctx, [out], a) => k.matmul(out!, a.input, a.other, ctx.stream),
  transpose: (ctx, [out], a, op) => transpose(ctx, out!, a.input, a.dim0, a.dim1, op),
  t: (ctx, [out], a, op) => transpose(ctx, out!, a.input, 0, 1, op),
  reshape: (_, __, a, op) => a.input.view(reshapeShape(op, a.input, a.shape)),
  to: cast,
  clone: cast,
  copy_: (ctx, _, a) => k.cast(a.input, a.src, ctx.stream),
  fill_: (ctx, _, a) => k.fill(a.input, a.value, ctx.stream),
  noop: () => undefined,
}

const isTensor = (v: unknown): v is Tensor => v instanceof Tensor

/**
 * An op as a RemoteFunction: binds the arguments (ctx.kwargs included), allocates the
 * results its rule gives, runs its kernel; one result is returned bare.
 */
const asRemoteFunction = <N extends OpName>(op: Op<N>): RemoteFunction => {
  const kernel = KERNELS[op.name] as Kernel<OpName>, rule = (op as OpSpec).outputs
  return (ctx, ...args) => {
    const bound = op.bind(args, ctx.kwargs, isTensor)
    const metas = rule(bound as never, op.name)
    if (op.view) return kernel(ctx, [], bound as never, op.name)
    const outs: Tensor[] = []
    try {
      for (const m of metas) outs.push(Tensor.empty(ctx.native, m.dtype, m.shape))
      kernel(ctx, outs, bound as never, op.name)
    } catch (e) {
      for (const t of outs) t.free()
      throw e
    }
    return outs.length === 1 ? outs[0] : outs.length === 0 ? undefined : outs
  }
}

const functions = new Map<string, RemoteFunction>()

/** The RemoteFunction of `ops.<name>`, or undefined when no op has that name. */
export const builtinFunction = (name: string): RemoteFunction | undefined => {
  let fn = functions.get(name)
  if (fn === undefined) {
    const op = opNamed(name)
    if (op === undefined) return undefined
    functions.set(name, (fn = asRemoteFunction(op)))
  }
  return fn
}

/**
 * Runs a built-in from code on a worker (a user function) and returns its one output, e.g.
 * `op(ctx, "matmul", [x, w])` or `op(ctx, "randn", [[4, 4]], { seed: 1 })`.
 */
export const op = (ctx: FunctionContext, name: OpName, args: ReadonlyArray<unknown>, kwargs: Readonly<Record<string, unknown>> = {}): Tensor => {
  const fn = builtinFunction(name)
  if (!fn) throw new OpArgumentError({ message: `no built-in ops.${name}` })
  const out = fn({ ...ctx, kwargs }, ...args)
  if (!(out instanceof Tensor)) throw new OpArgumentError({ message: `ops.${name} does not return one tensor` })
  return out
}
