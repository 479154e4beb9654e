// Generated from c/shim.h by scripts/abi.ts: do not edit (tests/ffi/symbols.test.ts checks it).

/** Status codes every shim function returns. */
export const ShimStatus = {
  OK: 0,
  INVALID: 1,
  NOMEM: 2,
  UNSUPPORTED: 3,
  BACKEND: 4,
  COMM: 5,
  TIMEOUT: 6,
  UNAVAILABLE: 7,
} as const

/** Element type codes (src/protocol/values.ts's DTYPES is in this order). */
export const DTypeCode = {
  f32: 0,
  f64: 1,
  f16: 2,
  bf16: 3,
  i32: 4,
  i64: 5,
  u8: 6,
  bool: 7,
} as const

export const MAX_DIMS = 8

/** shim_unary's op codes. */
export const UnaryOp = {
  neg: 0,
  abs: 1,
  exp: 2,
  log: 3,
  sqrt: 4,
  relu: 5,
  tanh: 6,
  sigmoid: 7,
  erf: 8,
  log1p: 9,
  expm1: 10,
  sin: 11,
  cos: 12,
  rsqrt: 13,
  reciprocal: 14,
  silu: 15,
  gelu: 16,
  gelu_tanh: 17,
  floor: 18,
  ceil: 19,
  round: 20,
  trunc: 21,
} as const
export type UnaryOpName = keyof typeof UnaryOp

/** shim_binary's and shim_binary_scalar's op codes. */
export const BinaryOp = {
  add: 0,
  sub: 1,
  mul: 2,
  div: 3,
  maximum: 4,
  minimum: 5,
  pow: 6,
  eq: 7,
  ne: 8,
  lt: 9,
  le: 10,
  gt: 11,
  ge: 12,
} as const
export type BinaryOpName = keyof typeof BinaryOp

/** shim_reduce's op codes. */
export const ReduceOp = {
  sum: 0,
  mean: 1,
  max: 2,
  min: 3,
  prod: 4,
} as const
export type ReduceOpName = keyof typeof ReduceOp

/** The collectives' reduce op codes. */
export const CommOp = {
  sum: 0,
  prod: 1,
  min: 2,
  max: 3,
  avg: 4,
} as const
export type CommOpName = keyof typeof CommOp

export const ALL_DIMS = -1

/** shim_p2p's kinds. */
export const P2P = {
  send: 0,
  recv: 1,
} as const
