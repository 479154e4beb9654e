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

/** An op table row's flags (or'ed): what the op is defined on and writes. */
export const OpFlag = {
  int: 1,
  bool: 2,
  writes_bool: 4,
  rounding: 8,
  division: 16,
} as const

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
  rsqrt: 11,
  reciprocal: 12,
  sin: 13,
  cos: 14,
  silu: 15,
  softplus: 16,
  gelu: 17,
  gelu_tanh: 18,
  floor: 19,
  ceil: 20,
  round: 21,
  trunc: 22,
  sign: 23,
  isnan: 24,
  isinf: 25,
  logical_not: 26,
} as const
export type UnaryOpName = keyof typeof UnaryOp
/** Each UnaryOp row's flags (OpFlag, or'ed), from c/shim.h's table. */
export const UnaryOpFlags: { readonly [K in UnaryOpName]: number } = {
  neg: 1,
  abs: 3,
  exp: 0,
  log: 0,
  sqrt: 0,
  relu: 3,
  tanh: 0,
  sigmoid: 0,
  erf: 0,
  log1p: 0,
  expm1: 0,
  rsqrt: 0,
  reciprocal: 0,
  sin: 0,
  cos: 0,
  silu: 0,
  softplus: 0,
  gelu: 0,
  gelu_tanh: 0,
  floor: 9,
  ceil: 9,
  round: 9,
  trunc: 9,
  sign: 3,
  isnan: 7,
  isinf: 7,
  logical_not: 7,
}

/** shim_binary's and shim_binary_scalar's op codes. */
export const BinaryOp = {
  add: 0,
  sub: 1,
  mul: 2,
  div: 3,
  maximum: 4,
  minimum: 5,
  pow: 6,
  floor_divide: 7,
  remainder: 8,
  eq: 9,
  ne: 10,
  lt: 11,
  le: 12,
  gt: 13,
  ge: 14,
  logical_and: 15,
  logical_or: 16,
  fmod: 17,
} as const
export type BinaryOpName = keyof typeof BinaryOp
/** Each BinaryOp row's flags (OpFlag, or'ed), from c/shim.h's table. */
export const BinaryOpFlags: { readonly [K in BinaryOpName]: number } = {
  add: 3,
  sub: 1,
  mul: 3,
  div: 17,
  maximum: 3,
  minimum: 3,
  pow: 1,
  floor_divide: 17,
  remainder: 17,
  eq: 7,
  ne: 7,
  lt: 7,
  le: 7,
  gt: 7,
  ge: 7,
  logical_and: 7,
  logical_or: 7,
  fmod: 17,
}

/** shim_ternary's op codes. */
export const TernaryOp = {
  where: 0,
  lerp: 1,
  addcmul: 2,
  addcdiv: 3,
} as const
export type TernaryOpName = keyof typeof TernaryOp
/** Each TernaryOp row's flags (OpFlag, or'ed), from c/shim.h's table. */
export const TernaryOpFlags: { readonly [K in TernaryOpName]: number } = {
  where: 3,
  lerp: 0,
  addcmul: 1,
  addcdiv: 0,
}

/** shim_reduce's op codes. */
export const ReduceOp = {
  sum: 0,
  mean: 1,
  max: 2,
  min: 3,
  prod: 4,
  any: 5,
  all: 6,
  norm1: 7,
  norm2: 8,
  norm_inf: 9,
} as const
export type ReduceOpName = keyof typeof ReduceOp
/** Each ReduceOp row's flags (OpFlag, or'ed), from c/shim.h's table. */
export const ReduceOpFlags: { readonly [K in ReduceOpName]: number } = {
  sum: 3,
  mean: 3,
  max: 3,
  min: 3,
  prod: 3,
  any: 3,
  all: 3,
  norm1: 0,
  norm2: 0,
  norm_inf: 0,
}

/** shim_scatter's op codes. */
export const ScatterOp = {
  assign: 0,
  add: 1,
} as const
export type ScatterOpName = keyof typeof ScatterOp

/** shim_nll_loss's and shim_mse_loss's reductions. */
export const LossReduction = {
  none: 0,
  sum: 1,
  mean: 2,
} as const
export type LossReductionName = keyof typeof LossReduction

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

/** shim_matmul's transpose flags (or'ed). */
export const MatmulFlag = {
  transpose_a: 1,
  transpose_b: 2,
} as const

/** shim_sgd's and shim_adamw's flags (or'ed). */
export const OptimFlag = {
  nesterov: 1,
  maximize: 2,
  first: 4,
  amsgrad: 8,
} as const
