/**
 * Meshes and communication: CreateDeviceMesh, Reduce (every collective) and SendTensor.
 * A rank whose input is poisoned (or cannot be read at all) still takes part, with zeros from
 * the factory, because the other ranks cannot know to skip it; it then defines its own result
 * as that poison (or fails with why it could not read the input).
 */
import { Effect } from "effect"
import type { Comm, Work } from "../../../ffi/comm.ts"
import type { CommOpName } from "../../../ffi/symbols.ts"
import * as k from "../../../ffi/ops.ts"
import type { Stream } from "../../../ffi/stream.ts"
import { Tensor } from "../../../ffi/tensor.ts"
import { commError } from "../../comm/communicators.ts"
import { CommError } from "../../comm/errors.ts"
import type { CreateDeviceMesh, Reduce, SendTensor } from "../../protocol/messages.ts"
import { HostTensor, Ref, type TensorFactory } from "../../protocol/values.ts"
import { planCollective } from "../../ops/collectives.ts"
import { sameShape } from "../../ops/meta.ts"
import { DependentOnError, InputMismatch } from "../errors.ts"
import { throughDense } from "../dense.ts"
import { EXPANDED_WRITE } from "../kernels/staging.ts"
import { DeviceMesh } from "../mesh.ts"
import { getAs } from "../refs.ts"
import { announce, poison, reject, tryDefine, type Session } from "../session.ts"
import { blocking, streamOf } from "../streams.ts"

export const createDeviceMesh = (s: Session) => (m: CreateDeviceMesh) => Effect.sync(() => {
  const coords = m.ranks.coordinates(s.rank)
  if (coords === undefined) return reject(s, `CreateDeviceMesh ${m.result.id}: rank ${s.rank} is not in ${m.ranks}`)
  if (m.names.length !== m.ranks.ndim) return reject(s, `CreateDeviceMesh ${m.result.id}: ${m.names.length} names for ${m.ranks.ndim} dims`)
  const mesh = new DeviceMesh(m.result.id, m.names, m.ranks, s.rank, coords, s.comms)
  s.env.define(m.result, mesh)
  s.coords = mesh.coords
})

const zeros = (s: Session, f: TensorFactory, stream: Stream): Tensor => {
  const t = Tensor.empty(s.native, f.dtype, f.shape)
  k.fill(t, 0, stream)
  return t
}

/**
 * This rank's input: the tensor, or factory zeros and the failure to raise afterwards (the
 * stored poison, why the ref could not be read: unknown, not a tensor, or a tensor other than
 * the factory declares; one `written` in place that is an expanded view, as torch refuses).
 * Not joining would leave the peers waiting out the comm timeout, and the communicator
 * unusable after it; joining with a tensor of another size would have them read or write past
 * what they hold.
 */
const inputOf = (s: Session, what: string, ref: Ref, factory: TensorFactory, stream: Stream, written = false): { tensor: Tensor; failure: unknown } => {
  let failure: unknown
  try {
    const tensor = getAs(s.env, ref, Tensor, "a tensor")
    if (written && tensor.expanded) failure = new InputMismatch({ message: `${what}: in place: ${EXPANDED_WRITE}` })
    else if (tensor.dtype === factory.dtype && sameShape(tensor.shape, factory.shape)) return { tensor, failure: undefined }
    else failure = new InputMismatch({ message: `${what}: the input is ${tensor.dtype}[${tensor.shape}], the factory declares ${factory.dtype}[${factory.shape}]` })
  } catch (e) {
    failure = e
  }
  return { tensor: zeros(s, factory, stream), failure }
}

/**
 * A Reduce this rank cannot plan (its factory is not what the others were given): the
 * collective it names is still made, with the input as it is, so that the shim refuses it
 * there and tells the other members, who would otherwise wait out the comm timeout in it.
 */
const joinRefusing = (s: Session, comm: Comm, input: Tensor, m: Reduce, stream: Stream): void => {
  const naive = (shape: ReadonlyArray<number>) => Tensor.empty(s.native, input.dtype, shape)
  const op = m.reduction as CommOpName
  const call = m.reduction === "stack"
    ? m.scatter ? (out: Tensor) => comm.allToAll(out, input, stream) : (out: Tensor) => comm.allGather(out, input, stream)
    : m.scatter ? (out: Tensor) => comm.reduceScatter(out, input, op, stream) : (out: Tensor) => comm.allReduce(out, input, op, stream)
  const out = naive(m.reduction === "stack" && !m.scatter ? [comm.size, ...input.shape] : m.scatter && m.reduction !== "stack" ? input.shape.slice(1) : input.shape)
  try {
    call(out)
  } catch {
    // The refusal is this rank's own plan failure, raised by the caller.
  } finally {
    out.free()
  }
}

/** The collective a Reduce names (docs/design.md, Reduce), returning the result tensor. */
const collective = (s: Session, comm: Comm, input: Tensor, m: Reduce, stream: Stream): Tensor => {
  const plan = planCollective(input, comm.size, m.reduction, m.scatter, m.inplace)
  if (typeof plan === "string") {
    joinRefusing(s, comm, input, m, stream)
    throw new CommError({ reason: "invalid", message: `Reduce: ${plan}` })
  }
  /** Runs op into out, freeing out if it was made here and op fails. */
  const into = (out: Tensor, op: (out: Tensor) => void): Tensor => {
    try {
      op(out)
      return out
    } catch (e) {
      if (out !== input) out.free()
      throw e
    }
  }
  const output = () => (m.inplace ? input : Tensor.empty(s.native, plan.result.dtype, plan.result.shape))
  const op = m.reduction as CommOpName
  switch (plan.collective) {
    case "all_gather": return into(output(), (out) => comm.allGather(out, input, stream))
    case "reduce_scatter": return into(output(), (out) => comm.reduceScatter(out, input, op, stream))
    case "all_reduce": return into(output(), (out) => comm.allReduce(out, input, op, stream))
    case "all_to_all": {
      if (!m.inplace) return into(output(), (out) => comm.allToAll(out, input, stream))
      // all_to_all cannot read and write one buffer: in place goes through a copy.
      const source = Tensor.empty(s.native, input.dtype, input.shape)
      try {
        k.cast(source, input, stream)
        return into(input, (out) => comm.allToAll(out, source, stream))
      } finally {
        source.free()
      }
    }
  }
}

/**
 * A Reduce started on the communication thread (docs/design.md, The execution model): an
 * all-reduce over a group whose communicator is open, with no member known lost, when overlap
 * is on. Its result is defined at once as the output tensor, which the work holds until it is
 * settled (inflight.ts); false when the Reduce runs here instead (nothing was started).
 * A poisoned input joins with zeros, as here, and poisons the result now.
 */
const startReduce = (s: Session, m: Reduce, mesh: DeviceMesh, stream: Stream): boolean => {
  if (m.reduction === "stack" || m.scatter) return false
  const members = () => mesh.members(m.dims)
  const comm = s.comms.current(mesh.id, m.dims, members)
  if (comm === undefined || comm.size === 1) return false
  const input = inputOf(s, `Reduce ${m.ident}`, m.tensor, m.factory, stream, m.inplace)
  const plan = planCollective(input.tensor, comm.size, m.reduction, m.scatter, m.inplace)
  // A strided view runs here, through a dense copy: the started work would hold the copy past this command.
  if (typeof plan === "string" || plan.collective !== "all_reduce" || !input.tensor.contiguous) {
    if (input.failure !== undefined) input.tensor.free()
    return false
  }
  const out = m.inplace ? input.tensor : Tensor.empty(s.native, plan.result.dtype, plan.result.shape)
  let work: Work
  try {
    work = comm.allReduceStart(out, input.tensor, m.reduction as CommOpName, stream)
  } catch (e) {
    if (out !== input.tensor) out.free()
    if (input.failure !== undefined) input.tensor.free()
    throw commError(e)
  }
  const tensors = out === input.tensor ? [out] : [input.tensor, out]
  s.inflight.start({
    ident: m.ident,
    name: `all_reduce ${m.reduction} [${m.dims.join(", ")}]`,
    stream: m.stream.id,
    comm,
    work,
    holds: tensors,
    owns: input.failure === undefined ? [] : tensors,
    finish: (failure) => (failure === undefined ? undefined : failedLater(s, m, mesh, comm, input, out, stream, failure)),
  })
  if (input.failure !== undefined) throw input.failure
  s.env.define(m.result, out)
  return true
}

/**
 * A started Reduce whose all-reduce failed: the comm recovery as for one that ran here
 * (Communicators.failedStarted, which may run it again, here, on a new communicator); then its
 * result is what it would have been, or poisoned with the failure, which is reported.
 */
const failedLater = (s: Session, m: Reduce, mesh: DeviceMesh, comm: Comm, input: { tensor: Tensor; failure: unknown }, out: Tensor, stream: Stream, failure: unknown): Effect.Effect<void> => {
  /** Whether the result still names what the start defined it as (a later command may have let it go or redefined it). */
  const current = () => {
    const v = s.env.peek(m.result.id)
    return v === out || (input.failure !== undefined && v === input.failure)
  }
  return s.comms.failedStarted(mesh.id, m.dims, () => mesh.members(m.dims), comm, m.ident, failure, (c) => collective(s, c, input.tensor, m, stream)).pipe(
    Effect.matchEffect({
      onSuccess: (again) => Effect.sync(() => {
        if (input.failure === undefined && current()) s.env.define(m.result, again)
        else if (again !== input.tensor && again !== out) again.free()
      }),
      onFailure: (error) => poison(s, m.ident, current() ? [m.result] : [], error),
    }),
  )
}

/** Whether `v` holds a Ref to `id` (a command's fields, walked as inflight.ts walks them). */
const mentions = (v: unknown, id: number): boolean => {
  if (v instanceof Ref) return v.id === id
  if (v === null || typeof v !== "object" || v instanceof HostTensor || ArrayBuffer.isView(v)) return false
  if (Array.isArray(v)) return v.some((x) => mentions(x, id))
  for (const key in v) if (mentions((v as Record<string, unknown>)[key], id)) return true
  return false
}

/**
 * Whether the command after `m` in its group or recording (past releases) names its result:
 * that command would wait for it at once, so the thread would only add a handoff each way to
 * the critical path (a tensor-parallel all-reduce, read by the next op). Such a Reduce runs here.
 */
const readNext = (s: Session, m: Reduce): boolean => {
  const batch = s.batch
  if (batch === undefined || (batch[s.at] as Partial<Reduce> | undefined)?.result !== m.result) return false
  for (let k = s.at + 1; k < batch.length; k++) {
    const c = batch[k]!
    if (c._tag !== "DeleteRefs") return mentions(c, m.result.id)
    if (c.refs.includes(m.result.id)) return false
  }
  return false
}

export const reduce = (s: Session) => (m: Reduce) =>
  tryDefine(s, m.ident, [m.result], () => {
    const stream = streamOf(s.env, m.stream)
    const mesh = getAs(s.env, m.mesh, DeviceMesh, "a mesh")
    announce(s, m.ident)
    if (s.overlap && !readNext(s, m) && startReduce(s, m, mesh, stream)) return
    // Retried once on a new communicator when a peer had given the old one up (Communicators).
    const attempt = (comm: Comm) => {
      const input = inputOf(s, `Reduce ${m.ident}`, m.tensor, m.factory, stream, m.inplace)
      try {
        // A strided view joins as a dense copy (Gloo and NCCL read one buffer), in place written back through it.
        return { input, out: throughDense(input.tensor, stream, m.inplace, (t) => collective(s, comm, t, m, stream)) }
      } catch (e) {
        if (input.failure !== undefined) input.tensor.free()
        throw e
      }
    }
    const finish = ({ input, out }: ReturnType<typeof attempt>) => {
      if (input.failure === undefined) return s.env.define(m.result, out)
      out.free()
      if (out !== input.tensor) input.tensor.free()
      throw input.failure
    }
    const here = blocking(() => {
      const done = s.comms.collective(mesh.id, m.dims, () => mesh.members(m.dims), m.ident, attempt)
      return Effect.isEffect(done) ? Effect.map(done, finish) : finish(done)
    })
    // It runs on this thread: the started ones on its communicator end first (all of them when it is to be opened).
    if (s.inflight.size === 0) return here
    const open = s.comms.current(mesh.id, m.dims, () => mesh.members(m.dims))
    return Effect.andThen(open === undefined ? s.inflight.settleAll() : s.inflight.settleOn(open), here)
  })

export const sendTensor = (s: Session) => (m: SendTensor) =>
  tryDefine(s, m.ident, [m.result], () => blocking(() => {
    const stream = streamOf(s.env, m.stream)
    const sendAt = m.fromRanks.indexOf(s.rank), recvAt = m.toRanks.indexOf(s.rank)
    if (sendAt >= 0 || recvAt >= 0) announce(s, m.ident)
    const sending = sendAt >= 0 ? inputOf(s, `SendTensor ${m.ident}`, m.tensor, m.factory, stream) : undefined
    const to = sendAt >= 0 ? m.toRanks.rankAt(sendAt) : -1
    const from = recvAt >= 0 ? m.fromRanks.rankAt(recvAt) : -1
    const received = recvAt >= 0 ? Tensor.empty(s.native, m.factory.dtype, m.factory.shape) : undefined
    const ops = [
      ...(sending && to !== s.rank ? [{ kind: "send" as const, peer: to, tensor: sending.tensor }] : []),
      ...(received && from !== s.rank ? [{ kind: "recv" as const, peer: from, tensor: received }] : []),
    ]
    try {
      // Sending to oneself is a copy, with no p2p (the Python worker also posted a recv).
      if (received && from === s.rank) k.cast(received, sending!.tensor, stream)
      const gone = s.comms.lostAmong(ops.map((o) => o.peer), `SendTensor ${m.ident}`)
      if (gone !== undefined) throw gone
      // A strided view is sent as a dense copy of its elements.
      const send = ops.find((o) => o.kind === "send")
      if (send === undefined) s.comms.world.p2p(ops, stream)
      else throughDense(send.tensor, stream, false, (tensor) => s.comms.world.p2p(ops.map((o) => (o === send ? { ...o, tensor } : o)), stream))
    } catch (e) {
      received?.free()
      throw commError(e)
    } finally {
      if (sending?.failure !== undefined) sending.tensor.free()
    }
    // A poisoned input poisons only a copy to oneself: what came from a peer is good. An input
    // that could not be read at all is this command's own failure, reported as such.
    const failure = sending?.failure
    if (failure !== undefined && (from === s.rank || !(failure instanceof DependentOnError))) {
      received?.free()
      throw failure
    }
    if (received) s.env.define(m.result, received)
  }))
