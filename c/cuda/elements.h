/* elements.h: the cuda backend's element types and conversions, usable on host and device.
 * The conversion rules are the cpu backend's (c/cpu/cpu.h, convert.c), so both give the same
 * bits: floating to integer truncates toward zero and saturates, NaN becomes 0; integer to
 * integer wraps; bool is nonzero -> 1 (so NaN is true); f16 and bf16 round once, to nearest
 * even, from any source (a double goes through float rounded to odd, which makes the second
 * rounding exact); f16 and bf16 compute in float. */
#ifndef MONARCH_SHIM_CUDA_ELEMENTS_H
#define MONARCH_SHIM_CUDA_ELEMENTS_H

#include <math.h>
#include <stdint.h>

#include <type_traits>

#include <cuda_fp16.h>

#include "../common/numeric.h"
#include "cuda_shim.h"

#define SHIM_HDI __host__ __device__ __forceinline__

namespace shim {

enum class Kind { Float, Int, Bool };

/* f16 bits -> float. The hardware conversion is exact; a NaN goes through numeric.h so its
 * payload bits are the cpu's. */
SHIM_HDI float f16_to_f32(uint16_t h) {
#ifdef __CUDA_ARCH__
  float f = __half2float(__ushort_as_half(h));
  return f == f ? f : shim_f16_to_f32(h);
#else
  return shim_f16_to_f32(h);
#endif
}

/* float -> f16 bits, nearest even. The hardware rounds like numeric.h except for a NaN's bits,
 * which are made numeric.h's (sign | 0x7e00). */
SHIM_HDI uint16_t f32_to_f16(float f) {
#ifdef __CUDA_ARCH__
  if (f != f) return (uint16_t)(((shim_f32_bits(f) >> 16) & 0x8000u) | 0x7e00u);
  return __half_as_ushort(__float2half_rn(f));
#else
  return shim_f32_to_f16(f);
#endif
}

/* double -> float rounded to odd: a later rounding to f16 or bf16 then equals one direct
 * rounding of the double. */
SHIM_HDI float f64_to_f32_odd(double d) {
  float f = (float)d;
  if ((double)f == d || d != d) return f;
  uint32_t u = shim_f32_bits(f);
  if (fabs((double)f) > fabs(d)) u -= 1; /* one step toward zero (sign-magnitude) */
  return shim_bits_f32(u | 1u);
}

SHIM_HDI int64_t f64_to_i64(double d) {
  if (d != d) return 0;
  if (d >= 9223372036854775807.0) return INT64_MAX; /* the literal is 2^63 */
  if (d <= -9223372036854775808.0) return INT64_MIN;
  return (int64_t)d;
}

SHIM_HDI int32_t f64_to_i32(double d) {
  if (d != d) return 0;
  if (d >= 2147483647.0) return INT32_MAX;
  if (d <= -2147483648.0) return INT32_MIN;
  return (int32_t)d;
}

SHIM_HDI uint8_t f64_to_u8(double d) {
  if (d != d || d <= 0.0) return 0;
  if (d >= 255.0) return 255;
  return (uint8_t)d;
}

/* One dtype: T is the stored element, V the type arithmetic runs in. load/store move between
 * them; to_f64/to_i64 and from_f64/from_i64 are the conversions shim_cast and the reductions
 * use (cpu.h's load and store rules). */
template <int Code>
struct Dtype;

template <>
struct Dtype<SHIM_F32> {
  static constexpr int32_t code = SHIM_F32;
  using T = float;
  using V = float;
  static constexpr Kind kind = Kind::Float;
  static SHIM_HDI V load(T x) { return x; }
  static SHIM_HDI T store(V v) { return v; }
  static SHIM_HDI double to_f64(T x) { return x; }
  static SHIM_HDI int64_t to_i64(T x) { return f64_to_i64(x); }
  static SHIM_HDI T from_f64(double d) { return (float)d; }
  static SHIM_HDI T from_i64(int64_t i) { return (float)i; }
};

template <>
struct Dtype<SHIM_F64> {
  static constexpr int32_t code = SHIM_F64;
  using T = double;
  using V = double;
  static constexpr Kind kind = Kind::Float;
  static SHIM_HDI V load(T x) { return x; }
  static SHIM_HDI T store(V v) { return v; }
  static SHIM_HDI double to_f64(T x) { return x; }
  static SHIM_HDI int64_t to_i64(T x) { return f64_to_i64(x); }
  static SHIM_HDI T from_f64(double d) { return d; }
  static SHIM_HDI T from_i64(int64_t i) { return (double)i; }
};

template <>
struct Dtype<SHIM_F16> {
  static constexpr int32_t code = SHIM_F16;
  using T = uint16_t;
  using V = float;
  static constexpr Kind kind = Kind::Float;
  static SHIM_HDI V load(T x) { return f16_to_f32(x); }
  static SHIM_HDI T store(V v) { return f32_to_f16(v); }
  static SHIM_HDI double to_f64(T x) { return f16_to_f32(x); }
  static SHIM_HDI int64_t to_i64(T x) { return f64_to_i64(f16_to_f32(x)); }
  static SHIM_HDI T from_f64(double d) { return f32_to_f16(f64_to_f32_odd(d)); }
  static SHIM_HDI T from_i64(int64_t i) { return f32_to_f16(f64_to_f32_odd((double)i)); }
};

template <>
struct Dtype<SHIM_BF16> {
  static constexpr int32_t code = SHIM_BF16;
  using T = uint16_t;
  using V = float;
  static constexpr Kind kind = Kind::Float;
  static SHIM_HDI V load(T x) { return shim_bf16_to_f32(x); }
  static SHIM_HDI T store(V v) { return shim_f32_to_bf16(v); }
  static SHIM_HDI double to_f64(T x) { return shim_bf16_to_f32(x); }
  static SHIM_HDI int64_t to_i64(T x) { return f64_to_i64(shim_bf16_to_f32(x)); }
  static SHIM_HDI T from_f64(double d) { return shim_f32_to_bf16(f64_to_f32_odd(d)); }
  static SHIM_HDI T from_i64(int64_t i) { return shim_f32_to_bf16(f64_to_f32_odd((double)i)); }
};

template <>
struct Dtype<SHIM_I32> {
  static constexpr int32_t code = SHIM_I32;
  using T = int32_t;
  using V = int32_t;
  static constexpr Kind kind = Kind::Int;
  static SHIM_HDI V load(T x) { return x; }
  static SHIM_HDI T store(V v) { return v; }
  static SHIM_HDI double to_f64(T x) { return (double)x; }
  static SHIM_HDI int64_t to_i64(T x) { return x; }
  static SHIM_HDI T from_f64(double d) { return f64_to_i32(d); }
  static SHIM_HDI T from_i64(int64_t i) { return (int32_t)(uint32_t)(uint64_t)i; }
};

template <>
struct Dtype<SHIM_I64> {
  static constexpr int32_t code = SHIM_I64;
  using T = int64_t;
  using V = int64_t;
  static constexpr Kind kind = Kind::Int;
  static SHIM_HDI V load(T x) { return x; }
  static SHIM_HDI T store(V v) { return v; }
  static SHIM_HDI double to_f64(T x) { return (double)x; }
  static SHIM_HDI int64_t to_i64(T x) { return x; }
  static SHIM_HDI T from_f64(double d) { return f64_to_i64(d); }
  static SHIM_HDI T from_i64(int64_t i) { return i; }
};

template <>
struct Dtype<SHIM_U8> {
  static constexpr int32_t code = SHIM_U8;
  using T = uint8_t;
  using V = uint8_t;
  static constexpr Kind kind = Kind::Int;
  static SHIM_HDI V load(T x) { return x; }
  static SHIM_HDI T store(V v) { return v; }
  static SHIM_HDI double to_f64(T x) { return x; }
  static SHIM_HDI int64_t to_i64(T x) { return x; }
  static SHIM_HDI T from_f64(double d) { return f64_to_u8(d); }
  static SHIM_HDI T from_i64(int64_t i) { return (uint8_t)(uint64_t)i; }
};

/* bool reads any nonzero byte as true and writes 0 or 1. */
template <>
struct Dtype<SHIM_BOOL> {
  static constexpr int32_t code = SHIM_BOOL;
  using T = uint8_t;
  using V = uint8_t;
  static constexpr Kind kind = Kind::Bool;
  static SHIM_HDI V load(T x) { return x != 0; }
  static SHIM_HDI T store(V v) { return v != 0; }
  static SHIM_HDI double to_f64(T x) { return x != 0; }
  static SHIM_HDI int64_t to_i64(T x) { return x != 0; }
  static SHIM_HDI T from_f64(double d) { return d != 0.0; }
  static SHIM_HDI T from_i64(int64_t i) { return i != 0; }
};

/* Calls f(Dtype<code>{}) for a runtime dtype code and returns its status. */
template <typename F>
int dispatch(int32_t dtype, F &&f) {
  switch (dtype) {
    case SHIM_F32: return f(Dtype<SHIM_F32>{});
    case SHIM_F64: return f(Dtype<SHIM_F64>{});
    case SHIM_F16: return f(Dtype<SHIM_F16>{});
    case SHIM_BF16: return f(Dtype<SHIM_BF16>{});
    case SHIM_I32: return f(Dtype<SHIM_I32>{});
    case SHIM_I64: return f(Dtype<SHIM_I64>{});
    case SHIM_U8: return f(Dtype<SHIM_U8>{});
    case SHIM_BOOL: return f(Dtype<SHIM_BOOL>{});
  }
  return shim_fail(SHIM_E_INVALID, "unknown dtype code %d", dtype);
}

/* ---- the op tables (c/shim.h) at compile time ------------------------------------------ */

/* A row's flags by code, for `if constexpr` over an op (-1: no row). */
#define SHIM_CUDA_FLAGS_CASE(id, code, name, flags) \
  case id: return (flags);
__host__ __device__ constexpr int unary_flags(int op) { switch (op) { SHIM_UNARY_OPS(SHIM_CUDA_FLAGS_CASE) default: return -1; } }
__host__ __device__ constexpr int binary_flags(int op) { switch (op) { SHIM_BINARY_OPS(SHIM_CUDA_FLAGS_CASE) default: return -1; } }
__host__ __device__ constexpr int ternary_flags(int op) { switch (op) { SHIM_TERNARY_OPS(SHIM_CUDA_FLAGS_CASE) default: return -1; } }
#undef SHIM_CUDA_FLAGS_CASE

/* Whether a row's op is defined on dtype D (floating always, else by SHIM_OPF_INT or _BOOL). */
template <typename D>
__host__ __device__ constexpr bool defined_on(int flags) {
  if constexpr (D::kind == Kind::Float) return true;
  else if constexpr (D::kind == Kind::Bool) return (flags & SHIM_OPF_BOOL) != 0;
  else return (flags & SHIM_OPF_INT) != 0;
}

/* Calls f(std::integral_constant<int, code>{}) for the row of a runtime op code, one case per
 * row of the family's table; a code the table lacks fails fn (SHIM_E_INVALID, naming it). */
#define SHIM_CUDA_OP_CASE(id, code, name, flags) \
  case id: return f(std::integral_constant<int, id>{});
#define SHIM_CUDA_WITH_OP(NAME, TABLE)                                                      \
  template <typename F>                                                                     \
  int NAME(const char *fn, int32_t op, int32_t dtype, F &&f) {                              \
    switch (op) {                                                                           \
      TABLE(SHIM_CUDA_OP_CASE)                                                              \
      default: return shim_fail_no_kernel(fn, NULL, op, dtype);                             \
    }                                                                                       \
  }
SHIM_CUDA_WITH_OP(with_unary_op, SHIM_UNARY_OPS)
SHIM_CUDA_WITH_OP(with_binary_op, SHIM_BINARY_OPS)
SHIM_CUDA_WITH_OP(with_ternary_op, SHIM_TERNARY_OPS)
SHIM_CUDA_WITH_OP(with_reduce_op, SHIM_REDUCE_OPS)
#undef SHIM_CUDA_WITH_OP
#undef SHIM_CUDA_OP_CASE

/* For `static_assert(no_case<Op>, ...)` at the end of an if-constexpr chain over op codes: a row
 * whose kernel lacks its branch does not compile. */
template <int Op>
inline constexpr bool no_case = false;

/* Stores element i of a tensor of runtime dtype from a double or an int64 (cpu.h's rules);
 * the reductions' epilogue, where the output dtype is a parameter rather than a template. */
__device__ __forceinline__ void store_f64_as(int32_t dtype, void *base, int64_t i, double v) {
  switch (dtype) {
    case SHIM_F32: ((float *)base)[i] = Dtype<SHIM_F32>::from_f64(v); break;
    case SHIM_F64: ((double *)base)[i] = v; break;
    case SHIM_F16: ((uint16_t *)base)[i] = Dtype<SHIM_F16>::from_f64(v); break;
    case SHIM_BF16: ((uint16_t *)base)[i] = Dtype<SHIM_BF16>::from_f64(v); break;
    case SHIM_I32: ((int32_t *)base)[i] = Dtype<SHIM_I32>::from_f64(v); break;
    case SHIM_I64: ((int64_t *)base)[i] = Dtype<SHIM_I64>::from_f64(v); break;
    case SHIM_U8: ((uint8_t *)base)[i] = Dtype<SHIM_U8>::from_f64(v); break;
    default: ((uint8_t *)base)[i] = Dtype<SHIM_BOOL>::from_f64(v); break;
  }
}

__device__ __forceinline__ void store_i64_as(int32_t dtype, void *base, int64_t i, int64_t v) {
  switch (dtype) {
    case SHIM_F32: ((float *)base)[i] = Dtype<SHIM_F32>::from_i64(v); break;
    case SHIM_F64: ((double *)base)[i] = Dtype<SHIM_F64>::from_i64(v); break;
    case SHIM_F16: ((uint16_t *)base)[i] = Dtype<SHIM_F16>::from_i64(v); break;
    case SHIM_BF16: ((uint16_t *)base)[i] = Dtype<SHIM_BF16>::from_i64(v); break;
    case SHIM_I32: ((int32_t *)base)[i] = Dtype<SHIM_I32>::from_i64(v); break;
    case SHIM_I64: ((int64_t *)base)[i] = v; break;
    case SHIM_U8: ((uint8_t *)base)[i] = Dtype<SHIM_U8>::from_i64(v); break;
    default: ((uint8_t *)base)[i] = Dtype<SHIM_BOOL>::from_i64(v); break;
  }
}

/* The type a dtype's elements are read into to compute with (the reductions' accumulator,
 * sort's key): double for floating ones, int64 for integers and bool. */
template <typename D>
using WideOf = std::conditional_t<D::kind == Kind::Float, double, int64_t>;

template <typename D>
__device__ __forceinline__ WideOf<D> widen(typename D::T x) {
  if constexpr (D::kind == Kind::Float) return D::to_f64(x);
  else return D::to_i64(x);
}

/* N elements loaded or stored with one aligned access (16 bytes for the input side). */
template <typename T, int N>
struct alignas(sizeof(T) * N) Pack {
  T v[N];
};

/* Elements of T per 16-byte access. */
template <typename T>
__host__ __device__ constexpr int pack_width() {
  return 16 / (int)sizeof(T);
}

static inline bool aligned16(const void *p) { return ((uintptr_t)p & 15u) == 0; }

/* Calls f with an unsigned word of `size` bytes (1, 2, 4 or 8): ops that move elements unchanged. */
template <typename F>
int by_size(int64_t size, F &&f) {
  switch (size) {
    case 1: return f(uint8_t{});
    case 2: return f(uint16_t{});
    case 4: return f(uint32_t{});
    default: return f(uint64_t{});
  }
}

}  // namespace shim

#endif
