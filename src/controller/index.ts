/**
 * monarch-bun's controller library: drive a mesh of workers from one Effect program.
 *
 *   Effect.gen(function* () {
 *     const ctl = yield* Controller
 *     const mesh = yield* ctl.mesh({ dp: 2, tp: 2 })
 *     const x = yield* mesh.call("ops.ones", [[4]])
 *     const s = yield* mesh.reduce(x, "dp", "sum")
 *     return yield* mesh.fetch(s)
 *   }).pipe(Effect.provide(Controller.local({ world: 4 })))
 */
export { Controller, type AttachOptions, type ControllerApi, type LocalOptions, type RecoveryFailure } from "./controller.ts"
export type { RecoverOptions, RecoveryReport, Start } from "./recovery.ts"
export type { HangReport, RankAt, WorkerInfo } from "./core.ts"
export { ControllerError, DeadlineExceeded, RemoteError, StartError, WorkerLost, type RefusalReason, type WorkerFrame } from "./errors.ts"
export { LiveCount, RemoteStream } from "./handles.ts"
export { grad, gradGenerator, RemoteTensor } from "./tensor.ts"
export { escape, inStep, scoped, StepScope, stepScope } from "./lifetime.ts"
export { compile, type Compiled, type CompileOptions } from "./compile/index.ts"
export { param, Param, type WithParams } from "./compile/params.ts"
export {
  CheckpointError, exportFile, importFile, load, perRank, PerRank, readCheckpoint, restoreInto, save, tensorsOf,
  type Loaded, type PendingSave, type RankWrite, type SaveOptions, type Saved, type State,
} from "./checkpoint.ts"
export { Mesh, type CallOptions, type FetchOptions } from "./mesh.ts"
export { AUTOCAST_LISTS, autocast, autocastDtype, type AutocastLists, type LowDType } from "./autocast.ts"
export { customGrad, noGrad, recordBackward, zeroGrad, type TensorGrad } from "./autograd.ts"
export { allGather, allReduce, allToAll, copyTo, reduceScatter, sendTo } from "./meshgrad.ts"
export { blockOf, partial, replicate, replicated, shard, shardedDims, type DimPlacement, type Placement, type PlacementSpec } from "./placement.ts"
export { eager, fromHost, ops, opsOn, type FromHostOptions, type OpFunction, type OpMethod, type Ops, type TensorMethods } from "./ops.ts"
export type { TensorMeta } from "../ops/meta.ts"
export { defineFunction, type FunctionContext, type Group, type GroupReduction, type RemoteFunction } from "../worker/function.ts"
export { float, FloatNumber, HostTensor, type DType } from "../protocol/values.ts"
