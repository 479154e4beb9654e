// The NCCL communicator against the Gloo one, each with one member (the one GPU of a test
// machine can host no more), in one process: every collective over every dtype must give the
// cpu's bytes, and every refused call the cpu's status and message. One member still runs the
// whole path (the unique id, non-blocking init, each call's dtype, counts and byte sizes, the
// wait on its completion, finalize), so a wrong NCCL declaration or size shows up here rather
// than only in a multi-GPU job. Skipped, saying why, when the cuda backend cannot load.
import { afterAll, beforeAll, describe, expect, test } from "bun:test"
import { testUnless } from "../skip.ts"
import { Comm } from "../../ffi/comm.ts"
import { loadNative, type Native } from "../../ffi/native.ts"
import { alike } from "./alike.ts"
import type { CommOpName } from "../../ffi/symbols.ts"
import { Tensor } from "../../ffi/tensor.ts"
import { DTYPES, HostTensor, ITEM_SIZE, type DType } from "../../src/protocol/values.ts"

let cuda: Native | undefined
try {
  cuda = loadNative("cuda")
} catch (e) {
  console.log(`tests/cuda/comm: skipped, the cuda backend cannot load: ${(e as Error).message}`)
}
const cpu = loadNative("cpu")
const parity = testUnless(cuda === undefined ? "the cuda backend cannot load (tests/cuda/comm said why above)" : undefined)

const TIMEOUT_MS = 30_000
const N = 37 // odd, so no count is a multiple of a vector width by chance

/** Whole numbers in [-100, 100] (exact in every float dtype; bool 0 or 1, u8 taken mod 256). */
const bytesOf = (dtype: DType, n: number, seed: number): Uint8Array => {
  const out = new Uint8Array(n * ITEM_SIZE[dtype])
  const view = new DataView(out.buffer)
  for (let i = 0; i < n; i++) {
    const x = ((i * 7919 + seed * 104729) % 201) - 100
    const at = i * ITEM_SIZE[dtype]
    switch (dtype) {
      case "f32": view.setFloat32(at, x, true); break
      case "f64": view.setFloat64(at, x, true); break
      case "f16": view.setFloat16(at, x, true); break
      case "bf16": view.setUint16(at, new Uint32Array(new Float32Array([x]).buffer)[0]! >>> 16, true); break
      case "i32": view.setInt32(at, x, true); break
      case "i64": view.setBigInt64(at, BigInt(x), true); break
      case "u8": view.setUint8(at, x & 255); break
      case "bool": view.setUint8(at, x & 1); break
    }
  }
  return out
}

/** A one-member communicator, connected, with the timeout given. */
const single = (native: Native, timeoutMs: number): Comm => {
  const comm = Comm.create(native, 0, 1, timeoutMs)
  comm.connect([comm.address()])
  return comm
}

let comms: [Comm, Comm] | undefined
beforeAll(() => {
  if (cuda !== undefined) comms = [single(cpu, TIMEOUT_MS), single(cuda, TIMEOUT_MS)]
})
afterAll(() => comms?.forEach((c) => c.destroy()))

/** The same tensor on each side: host bytes, or uninitialised. */
const pair = (dtype: DType, shape: ReadonlyArray<number>, bytes?: Uint8Array): [Tensor, Tensor] =>
  bytes === undefined
    ? [Tensor.empty(cpu, dtype, shape), Tensor.empty(cuda!, dtype, shape)]
    : [Tensor.fromHost(cpu, new HostTensor(dtype, shape, bytes)), Tensor.fromHost(cuda!, new HostTensor(dtype, shape, bytes))]

const freeAll = (...ts: Tensor[]) => ts.forEach((t) => t.free())

const sameBytes = (what: string, [x, y]: [Tensor, Tensor]): string[] => {
  const a = x.toHost().data, b = y.toHost().data
  return a.length === b.length && a.every((v, i) => v === b[i]) ? [] : [`${what}: cpu ${a.join(",")}, cuda ${b.join(",")}`]
}

describe("a one-member NCCL communicator matches a one-member Gloo one", () => {
  parity("all_reduce with every op, all_gather, reduce_scatter, all_to_all and broadcast, over every dtype", () => {
    const bad: string[] = []
    for (const dtype of DTYPES) {
      const bytes = bytesOf(dtype, N, DTYPES.indexOf(dtype))
      for (const op of ["sum", "prod", "min", "max", "avg"] as CommOpName[]) {
        const input = pair(dtype, [N], bytes), out = pair(dtype, [N])
        if (alike(`all_reduce ${op} ${dtype}`, (w) => comms![w].allReduce(out[w], input[w], op))) bad.push(...sameBytes(`all_reduce ${op} ${dtype}`, out))
        if (alike(`all_reduce ${op} ${dtype} in place`, (w) => comms![w].allReduce(input[w], input[w], op)))
          bad.push(...sameBytes(`all_reduce ${op} ${dtype} in place`, input))
        const scattered = pair(dtype, [N])
        if (alike(`reduce_scatter ${op} ${dtype}`, (w) => comms![w].reduceScatter(scattered[w], input[w], op)))
          bad.push(...sameBytes(`reduce_scatter ${op} ${dtype}`, scattered))
        freeAll(...input, ...out, ...scattered)
      }
      const input = pair(dtype, [N], bytes), gathered = pair(dtype, [1, N]), swapped = pair(dtype, [N])
      if (alike(`all_gather ${dtype}`, (w) => comms![w].allGather(gathered[w], input[w]))) bad.push(...sameBytes(`all_gather ${dtype}`, gathered))
      if (alike(`all_to_all ${dtype}`, (w) => comms![w].allToAll(swapped[w], input[w]))) bad.push(...sameBytes(`all_to_all ${dtype}`, swapped))
      if (alike(`broadcast ${dtype}`, (w) => comms![w].broadcast(input[w], 0))) bad.push(...sameBytes(`broadcast ${dtype}`, input))
      freeAll(...input, ...gathered, ...swapped)
    }
    alike("barrier", (w) => comms![w].barrier())
    expect(bad).toEqual([])
  }, 60_000)

  parity("refused calls fail alike and leave the communicator usable", () => {
    const x = pair("f32", [4], bytesOf("f32", 4, 1)), y = pair("f32", [3]), flags = pair("bool", [4], bytesOf("bool", 4, 2))
    alike("all_gather into the wrong size", (w) => comms![w].allGather(y[w], x[w]))
    alike("all_reduce of another dtype", (w) => comms![w].allReduce(flags[w], x[w], "sum"))
    alike("avg of bool", (w) => comms![w].allReduce(flags[w], flags[w], "avg"))
    alike("all_to_all in place", (w) => comms![w].allToAll(x[w], x[w]))
    alike("broadcast from a member that is not there", (w) => comms![w].broadcast(x[w], 1))
    alike("p2p to itself", (w) => comms![w].p2p([{ kind: "send", peer: 0, tensor: x[w] }]))
    expect(alike("all_reduce after the refusals", (w) => comms![w].allReduce(x[w], x[w], "sum"))).toBe(true)
    freeAll(...x, ...y, ...flags)
  }, 60_000)

  parity("a timeout too long to count in nanoseconds still connects and completes", () => {
    using comm = single(cuda!, Number.MAX_SAFE_INTEGER)
    using t = Tensor.fromHost(cuda!, new HostTensor("i32", [2], new Uint8Array(new Int32Array([3, -4]).buffer)))
    comm.allReduce(t, t, "sum")
    comm.barrier()
    expect([...new Int32Array(t.toHost().data.slice().buffer)]).toEqual([3, -4])
  }, 60_000)
})
