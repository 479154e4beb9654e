/**
 * The wire protocol in one import: vocabulary, codec, framing and its error. NOTE: the
 * ProtocolError *message* of messages.ts is re-exported as ProtocolErrorMessage, since
 * ProtocolError here is the error class of errors.ts.
 */
export * from "./codec.ts"
export * from "./errors.ts"
export * from "./framing.ts"
export { MESSAGE_CODES, MESSAGE_FIELDS, REDUCTIONS } from "./messages.ts"
export type {
  BorrowCreate, BorrowDrop, BorrowFirstUse, BorrowLastUse, CallFunction, CommandGroup, ControllerMessage, CreateDeviceMesh,
  CreateStream, DeleteRefs, Exit, FetchResult, FetchValue, Message, ProtocolError as ProtocolErrorMessage, Reduce, Reduction,
  RemoteFunctionFailed, RequestStatus, Restarted, SendTensor, Status, Value, WorkerHello, WorkerMessage,
} from "./messages.ts"
export * from "./ndslice.ts"
export * from "./values.ts"
