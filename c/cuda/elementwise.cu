/* elementwise.cu: shim_unary, shim_binary and shim_binary_scalar on the device.
 *
 * The semantics are the cpu's, point for point (c/cpu/elementwise.c has the full list): f16
 * and bf16 compute in float and round back once; integers wrap; integer div truncates and
 * INT_MIN / -1 wraps; floor_divide and remainder are Python's (floats by torch's fmod
 * formulas); maximum, minimum and relu propagate NaN; bool add/maximum are or,
 * mul/minimum are and; which dtypes each op takes and whether it writes bool are its row's
 * flags in c/shim.h's table (floating-only, rounding, predicates); the scalar of
 * shim_binary_scalar is converted to the type the op computes in. Results may differ from the
 * cpu's in the last bit only where CUDA's exp, log, tanh and pow differ from the C library's.
 *
 * A zero integer divisor (div, floor_divide, remainder) or a negative integer exponent fails the op with SHIM_E_INVALID before
 * anything is written, as on the cpu. When that operand is on the device, a scan kernel looks
 * for one and the host waits for its answer: integer division and pow with a tensor divisor
 * (or exponent) are the only host-synchronous ops here.
 *
 * Kernels are grid-stride loops. When every full operand and the output are 16-byte aligned
 * (always, for the allocator's blocks) each thread moves 16 bytes of input per access (four
 * f32, eight f16 or bf16, ...), and a scalar loop does the tail. out may be an input: every
 * element is read before it is written, by the same thread. */
#include <type_traits>

#include "elements.h"

using namespace shim;

namespace {

/* Comparisons and logical_and/or: their rows write bool. */
__host__ __device__ constexpr bool is_comparison(int op) { return (binary_flags(op) & SHIM_OPF_WRITES_BOOL) != 0; }

/* ---- device arithmetic ---------------------------------------------------------------- */

template <typename V>
__device__ __forceinline__ V wrap_neg(V x) {
  using U = std::make_unsigned_t<V>;
  return (V)(U)((U)0 - (U)x);
}

template <typename V>
__device__ __forceinline__ V wrap_add(V x, V y) {
  using U = std::make_unsigned_t<V>;
  return (V)(U)((U)x + (U)y);
}

template <typename V>
__device__ __forceinline__ V wrap_sub(V x, V y) {
  using U = std::make_unsigned_t<V>;
  return (V)(U)((U)x - (U)y);
}

template <typename V>
__device__ __forceinline__ V wrap_mul(V x, V y) {
  using U = std::common_type_t<std::make_unsigned_t<V>, unsigned>; /* u8 would promote to int */
  return (V)(U)((U)x * (U)y);
}

/* Truncating division; the divisor is nonzero (checked before the launch). */
template <typename V>
__device__ __forceinline__ V int_div(V x, V y) {
  if constexpr (std::is_signed_v<V>)
    if (y == (V)-1) return wrap_neg(x); /* INT_MIN / -1 wraps to INT_MIN */
  return (V)(x / y);
}

/* Power by squaring, wrapping like int64 arithmetic truncated to V; the exponent is >= 0. */
template <typename V>
__device__ __forceinline__ V int_pow(V base, V exponent) {
  uint64_t result = 1, b = (uint64_t)(int64_t)base;
  for (uint64_t e = (uint64_t)(int64_t)exponent; e; e >>= 1, b *= b)
    if (e & 1) result *= b;
  return (V)result;
}

__device__ __forceinline__ float m_abs(float x) { return fabsf(x); }
__device__ __forceinline__ double m_abs(double x) { return fabs(x); }
__device__ __forceinline__ float m_exp(float x) { return expf(x); }
__device__ __forceinline__ double m_exp(double x) { return exp(x); }
__device__ __forceinline__ float m_log(float x) { return logf(x); }
__device__ __forceinline__ double m_log(double x) { return log(x); }
__device__ __forceinline__ float m_sqrt(float x) { return sqrtf(x); }
__device__ __forceinline__ double m_sqrt(double x) { return sqrt(x); }
__device__ __forceinline__ float m_tanh(float x) { return tanhf(x); }
__device__ __forceinline__ double m_tanh(double x) { return tanh(x); }
__device__ __forceinline__ float m_pow(float x, float y) { return powf(x, y); }
__device__ __forceinline__ double m_pow(double x, double y) { return pow(x, y); }
__device__ __forceinline__ float m_fmod(float x, float y) { return fmodf(x, y); }
__device__ __forceinline__ double m_fmod(double x, double y) { return fmod(x, y); }
__device__ __forceinline__ float m_copysign(float x, float y) { return copysignf(x, y); }
__device__ __forceinline__ double m_copysign(double x, double y) { return copysign(x, y); }
__device__ __forceinline__ float m_erf(float x) { return erff(x); }
__device__ __forceinline__ double m_erf(double x) { return erf(x); }
__device__ __forceinline__ float m_log1p(float x) { return log1pf(x); }
__device__ __forceinline__ double m_log1p(double x) { return log1p(x); }
__device__ __forceinline__ float m_expm1(float x) { return expm1f(x); }
__device__ __forceinline__ double m_expm1(double x) { return expm1(x); }
__device__ __forceinline__ float m_sin(float x) { return sinf(x); }
__device__ __forceinline__ double m_sin(double x) { return sin(x); }
__device__ __forceinline__ float m_cos(float x) { return cosf(x); }
__device__ __forceinline__ double m_cos(double x) { return cos(x); }
__device__ __forceinline__ float m_floor(float x) { return floorf(x); }
__device__ __forceinline__ double m_floor(double x) { return floor(x); }
__device__ __forceinline__ float m_ceil(float x) { return ceilf(x); }
__device__ __forceinline__ double m_ceil(double x) { return ceil(x); }
__device__ __forceinline__ float m_rint(float x) { return rintf(x); } /* half to even */
__device__ __forceinline__ double m_rint(double x) { return rint(x); }
__device__ __forceinline__ float m_trunc(float x) { return truncf(x); }
__device__ __forceinline__ double m_trunc(double x) { return trunc(x); }

/* torch's div_floor_floating and float remainder (c/cpu/elementwise.c has the same). */
template <typename V>
__device__ __forceinline__ V float_floor_divide(V a, V b) {
  if (b == (V)0) return a / b;
  V mod = m_fmod(a, b), div = (a - mod) / b;
  if (mod != (V)0 && (b < (V)0) != (mod < (V)0)) div -= (V)1;
  if (div == (V)0) return m_copysign((V)0, a / b);
  V floordiv = m_floor(div);
  return div - floordiv > (V)0.5 ? floordiv + (V)1 : floordiv;
}

template <typename V>
__device__ __forceinline__ V float_remainder(V a, V b) {
  V mod = m_fmod(a, b);
  return mod != (V)0 && (b < (V)0) != (mod < (V)0) ? mod + b : mod;
}

/* Python's // and % on integers; the divisor is nonzero (checked before the launch). */
template <typename V>
__device__ __forceinline__ V int_floor_divide(V x, V y) {
  if constexpr (std::is_signed_v<V>) {
    if (y == (V)-1) return wrap_neg(x);
    V q = (V)(x / y), r = (V)(x % y);
    return r != 0 && (r < 0) != (y < 0) ? (V)(q - 1) : q;
  } else {
    return (V)(x / y);
  }
}

template <typename V>
__device__ __forceinline__ V int_remainder(V x, V y) {
  if constexpr (std::is_signed_v<V>) {
    if (y == (V)-1) return 0;
    V r = (V)(x % y);
    return r != 0 && (r < 0) != (y < 0) ? (V)(r + y) : r;
  } else {
    return (V)(x % y);
  }
}

/* C's % on integers (the dividend's sign); the divisor is nonzero (checked before the launch). */
template <typename V>
__device__ __forceinline__ V int_fmod(V x, V y) {
  if constexpr (std::is_signed_v<V>) {
    if (y == (V)-1) return 0;
  }
  return (V)(x % y);
}

/* One unary op on a value of D's compute type. Ops the host rejected for D never get here;
 * the predicates (isnan, isinf, logical_not) are unary_predicate's. A row without its branch
 * here does not compile (no_case). */
template <typename D, int Op>
__device__ __forceinline__ typename D::V unary_op(typename D::V x) {
  using V = typename D::V;
  if constexpr (Op == SHIM_SIGN) {
    if constexpr (D::kind == Kind::Float) return (V)((x > (V)0) - (x < (V)0));
    else if constexpr (std::is_signed_v<V>) return (V)((x > 0) - (x < 0));
    else return (V)(x != 0);
  } else if constexpr (D::kind == Kind::Float) {
    const V one = 1, half = (V)0.5;
    if constexpr (Op == SHIM_NEG) return -x;
    else if constexpr (Op == SHIM_ABS) return m_abs(x);
    else if constexpr (Op == SHIM_EXP) return m_exp(x);
    else if constexpr (Op == SHIM_LOG) return m_log(x);
    else if constexpr (Op == SHIM_SQRT) return m_sqrt(x);
    else if constexpr (Op == SHIM_RELU) return x < (V)0 ? (V)0 : x;
    else if constexpr (Op == SHIM_TANH) return m_tanh(x);
    else if constexpr (Op == SHIM_SIGMOID) return one / (one + m_exp(-x));
    else if constexpr (Op == SHIM_ERF) return m_erf(x);
    else if constexpr (Op == SHIM_LOG1P) return m_log1p(x);
    else if constexpr (Op == SHIM_EXPM1) return m_expm1(x);
    else if constexpr (Op == SHIM_RSQRT) return one / m_sqrt(x);
    else if constexpr (Op == SHIM_RECIPROCAL) return one / x;
    else if constexpr (Op == SHIM_SIN) return m_sin(x);
    else if constexpr (Op == SHIM_COS) return m_cos(x);
    else if constexpr (Op == SHIM_SILU) return x / (one + m_exp(-x));
    else if constexpr (Op == SHIM_SOFTPLUS) return x > (V)20 ? x : m_log1p(m_exp(x));
    else if constexpr (Op == SHIM_GELU) return half * x * (one + m_erf(x * (V)0.70710678118654752440));
    else if constexpr (Op == SHIM_GELU_TANH) return half * x * (one + m_tanh((V)0.79788456080286535588 * (x + (V)0.044715 * x * x * x)));
    else if constexpr (Op == SHIM_FLOOR) return m_floor(x);
    else if constexpr (Op == SHIM_CEIL) return m_ceil(x);
    else if constexpr (Op == SHIM_ROUND) return m_rint(x);
    else if constexpr (Op == SHIM_TRUNC) return m_trunc(x);
    else static_assert(no_case<Op>, "a unary op without its floating branch in unary_op");
  } else if constexpr (Op == SHIM_NEG) {
    return wrap_neg(x);
  } else if constexpr (std::is_signed_v<V> && (Op == SHIM_ABS || Op == SHIM_RELU)) {
    if constexpr (Op == SHIM_ABS) return x < 0 ? wrap_neg(x) : x;
    else return x < 0 ? (V)0 : x; /* relu */
  } else if constexpr (Op == SHIM_ABS || Op == SHIM_RELU || (unary_flags(Op) & SHIM_OPF_ROUNDING)) {
    return x; /* abs and relu of u8 and bool; the rounding ops of integers */
  } else {
    static_assert(no_case<Op>, "a unary op without its integer branch in unary_op");
  }
}

/* isnan, isinf and logical_not as a 0/1 byte; integers are never NaN or infinite. */
template <typename D, int Op>
__device__ __forceinline__ uint8_t unary_predicate(typename D::V x) {
  using V = typename D::V;
  if constexpr (Op == SHIM_LOGICAL_NOT) return (uint8_t)(x == (V)0);
  else if constexpr (Op != SHIM_ISNAN && Op != SHIM_ISINF) static_assert(no_case<Op>, "a predicate without its branch in unary_predicate");
  else if constexpr (D::kind != Kind::Float) return 0;
  else if constexpr (Op == SHIM_ISNAN) return (uint8_t)(x != x);
  else return (uint8_t)(x == (V)INFINITY || x == -(V)INFINITY);
}

/* One binary op: D's compute type for arithmetic, 0 or 1 for comparisons. */
template <typename D, int Op>
__device__ __forceinline__ auto binary_op(typename D::V x, typename D::V y) {
  using V = typename D::V;
  if constexpr (Op == SHIM_EQ) return (uint8_t)(x == y);
  else if constexpr (Op == SHIM_NE) return (uint8_t)(x != y);
  else if constexpr (Op == SHIM_LT) return (uint8_t)(x < y);
  else if constexpr (Op == SHIM_LE) return (uint8_t)(x <= y);
  else if constexpr (Op == SHIM_GT) return (uint8_t)(x > y);
  else if constexpr (Op == SHIM_GE) return (uint8_t)(x >= y);
  else if constexpr (Op == SHIM_LOGICAL_AND) return (uint8_t)((x != (V)0) & (y != (V)0));
  else if constexpr (Op == SHIM_LOGICAL_OR) return (uint8_t)((x != (V)0) | (y != (V)0));
  else if constexpr (is_comparison(Op)) static_assert(no_case<Op>, "a comparison without its branch in binary_op");
  else if constexpr (D::kind == Kind::Bool) {
    if constexpr (Op == SHIM_ADD || Op == SHIM_MAXIMUM) return (V)(x | y);
    else if constexpr (Op == SHIM_MUL || Op == SHIM_MINIMUM) return (V)(x & y);
    else static_assert(no_case<Op>, "a bool binary op without its branch in binary_op");
  } else if constexpr (D::kind == Kind::Float) {
    if constexpr (Op == SHIM_ADD) return x + y;
    else if constexpr (Op == SHIM_SUB) return x - y;
    else if constexpr (Op == SHIM_MUL) return x * y;
    else if constexpr (Op == SHIM_DIV) return x / y;
    else if constexpr (Op == SHIM_MAXIMUM) return (x > y || x != x) ? x : y;
    else if constexpr (Op == SHIM_MINIMUM) return (x < y || x != x) ? x : y;
    else if constexpr (Op == SHIM_FLOOR_DIVIDE) return float_floor_divide(x, y);
    else if constexpr (Op == SHIM_REMAINDER) return float_remainder(x, y);
    else if constexpr (Op == SHIM_FMOD) return m_fmod(x, y);
    else if constexpr (Op == SHIM_POW) return m_pow(x, y);
    else static_assert(no_case<Op>, "a binary op without its floating branch in binary_op");
  } else {
    if constexpr (Op == SHIM_ADD) return wrap_add(x, y);
    else if constexpr (Op == SHIM_SUB) return wrap_sub(x, y);
    else if constexpr (Op == SHIM_MUL) return wrap_mul(x, y);
    else if constexpr (Op == SHIM_DIV) return int_div(x, y);
    else if constexpr (Op == SHIM_MAXIMUM) return x > y ? x : y;
    else if constexpr (Op == SHIM_MINIMUM) return x < y ? x : y;
    else if constexpr (Op == SHIM_FLOOR_DIVIDE) return int_floor_divide(x, y);
    else if constexpr (Op == SHIM_REMAINDER) return int_remainder(x, y);
    else if constexpr (Op == SHIM_FMOD) return int_fmod(x, y);
    else if constexpr (Op == SHIM_POW) return int_pow(x, y);
    else static_assert(no_case<Op>, "a binary op without its integer branch in binary_op");
  }
}

/* What binary_op's result is stored as: a bool byte for comparisons, else an element of D. */
template <typename D, int Op>
__device__ __forceinline__ auto binary_store(typename D::V x, typename D::V y) {
  if constexpr (is_comparison(Op)) return binary_op<D, Op>(x, y);
  else return D::store(binary_op<D, Op>(x, y));
}

/* ---- kernels -------------------------------------------------------------------------- */

/* A binary operand: a full tensor read at i (at i % period when period is set: an operand that
 * repeats), or one value every element reuses (read from a one-element tensor when p is set,
 * else the scalar `value`). */
template <typename D>
struct Operand {
  const typename D::T *p;
  typename D::V value;
  bool full;
  int64_t period = 0;
};

template <typename D>
__device__ __forceinline__ typename D::V single_value(const Operand<D> &o) {
  return o.p != nullptr ? D::load(o.p[0]) : o.value;
}

template <typename D, int Op>
__global__ void unary_kernel(typename D::T *out, const typename D::T *a, int64_t n, bool vec) {
  using T = typename D::T;
  constexpr int P = pack_width<T>();
  const int64_t tid = (int64_t)blockIdx.x * blockDim.x + threadIdx.x, stride = (int64_t)gridDim.x * blockDim.x;
  int64_t done = 0;
  if (vec) {
    const int64_t packs = n / P;
    for (int64_t p = tid; p < packs; p += stride) {
      Pack<T, P> x = reinterpret_cast<const Pack<T, P> *>(a)[p];
#pragma unroll
      for (int j = 0; j < P; j++) x.v[j] = D::store(unary_op<D, Op>(D::load(x.v[j])));
      reinterpret_cast<Pack<T, P> *>(out)[p] = x;
    }
    done = packs * P;
  }
  for (int64_t i = done + tid; i < n; i += stride) out[i] = D::store(unary_op<D, Op>(D::load(a[i])));
}

template <typename D, int Op>
__global__ void predicate_kernel(uint8_t *out, const typename D::T *a, int64_t n) {
  const int64_t stride = (int64_t)gridDim.x * blockDim.x;
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
    out[i] = unary_predicate<D, Op>(D::load(a[i]));
}

template <typename D, int Op>
__global__ void binary_kernel(void *out, Operand<D> a, Operand<D> b, int64_t n, bool vec) {
  using T = typename D::T;
  using V = typename D::V;
  using O = std::conditional_t<is_comparison(Op), uint8_t, T>;
  constexpr int P = pack_width<T>();
  O *o = static_cast<O *>(out);
  const V xa = a.full ? V() : single_value(a), xb = b.full ? V() : single_value(b);
  const int64_t tid = (int64_t)blockIdx.x * blockDim.x + threadIdx.x, stride = (int64_t)gridDim.x * blockDim.x;
  int64_t done = 0;
  if (vec) {
    const int64_t packs = n / P;
    for (int64_t p = tid; p < packs; p += stride) {
      Pack<T, P> pa{}, pb{};
      if (a.full) pa = reinterpret_cast<const Pack<T, P> *>(a.p)[p];
      if (b.full) pb = reinterpret_cast<const Pack<T, P> *>(b.p)[p];
      Pack<O, P> po;
#pragma unroll
      for (int j = 0; j < P; j++)
        po.v[j] = binary_store<D, Op>(a.full ? D::load(pa.v[j]) : xa, b.full ? D::load(pb.v[j]) : xb);
      reinterpret_cast<Pack<O, P> *>(o)[p] = po;
    }
    done = packs * P;
  }
  for (int64_t i = done + tid; i < n; i += stride)
    o[i] = binary_store<D, Op>(a.full ? D::load(a.p[a.period ? i % a.period : i]) : xa,
                               b.full ? D::load(b.p[b.period ? i % b.period : i]) : xb);
}

/* Sets *flag when any of y's n elements is zero (div) or negative (pow). */
template <typename D, bool Pow>
__global__ void find_bad_operand(const typename D::T *y, int64_t n, int32_t *flag) {
  using V = typename D::V;
  const int64_t stride = (int64_t)gridDim.x * blockDim.x;
  bool bad = false;
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
    V v = D::load(y[i]);
    if constexpr (Pow) {
      if constexpr (std::is_signed_v<V>) bad |= v < 0;
    } else {
      bad |= v == 0;
    }
  }
  if (bad) *flag = 1;
}

/* ---- host side ------------------------------------------------------------------------ */

template <typename V>
constexpr bool is_negative(V v) {
  if constexpr (std::is_signed_v<V>) return v < 0;
  else return false;
}

/* Integer div and pow with the divisor (exponent) on the device: scans its count elements and
 * waits for the answer. */
template <typename D>
int check_device_operand(const char *fn, int32_t op, const typename D::T *y, int64_t count, const char *what,
                         shim_stream *s) {
  if constexpr (D::kind != Kind::Int) {
    return SHIM_OK;
  } else {
    if ((!shim_is_division(op) && op != SHIM_POW) || count == 0) return SHIM_OK;
    cudaStream_t stream = shim_cuda_stream(s);
    ShimScratch flag;
    SHIM_TRY(flag.alloc(sizeof(int32_t), s));
    CUDA_CHECK(cudaMemsetAsync(flag.data(), 0, sizeof(int32_t), stream));
    if (op != SHIM_POW) find_bad_operand<D, false><<<shim_cuda_blocks(count), SHIM_CUDA_THREADS, 0, stream>>>(y, count, (int32_t *)flag.data());
    else find_bad_operand<D, true><<<shim_cuda_blocks(count), SHIM_CUDA_THREADS, 0, stream>>>(y, count, (int32_t *)flag.data());
    CUDA_CHECK_LAUNCH("find_bad_operand");
    int32_t bad = 0;
    CUDA_CHECK(cudaMemcpyAsync(&bad, flag.data(), sizeof bad, cudaMemcpyDeviceToHost, stream));
    CUDA_CHECK(cudaStreamSynchronize(stream));
    return bad ? shim_fail_bad_operand(fn, op, D::code, what) : SHIM_OK;
  }
}

/* Launches the binary kernel for a dtype and an op code checked by shim_check_binary. */
template <typename D>
int launch_binary(const char *fn, int32_t op, void *out, const Operand<D> &a, const Operand<D> &b, int64_t n, cudaStream_t stream) {
  if (n == 0) return SHIM_OK;
  using T = typename D::T;
  bool vec = aligned16(out) && (!a.full || aligned16(a.p)) && (!b.full || aligned16(b.p)) && !a.period && !b.period;
  unsigned blocks = shim_cuda_blocks(vec ? n / pack_width<T>() + 1 : n);
  return with_binary_op(fn, op, D::code, [&](auto code) -> int {
    constexpr int Op = decltype(code)::value;
    if constexpr (!defined_on<D>(binary_flags(Op))) {
      return shim_fail(SHIM_E_UNSUPPORTED, "binary op %d on %s", Op, shim_dtype_name(D::code)); /* shim_check_binary refused it already */
    } else {
      binary_kernel<D, Op><<<blocks, SHIM_CUDA_THREADS, 0, stream>>>(out, a, b, n, vec);
      CUDA_CHECK_LAUNCH("binary_kernel");
      return SHIM_OK;
    }
  });
}

}  // namespace

int shim_binary(int32_t op, shim_tensor *out, const shim_tensor *a, const shim_tensor *b, shim_stream *s) {
  int64_t n;
  SHIM_TRY(shim_check_binary(op, out, a, b, &n));
  shim_cuda_track(s, out);
  shim_cuda_track(s, a);
  shim_cuda_track(s, b);
  return dispatch(a->dtype, [&](auto d) -> int {
    using D = decltype(d);
    using T = typename D::T;
    const T *x = (const T *)shim_cuda_data(a), *y = (const T *)shim_cuda_data(b);
    SHIM_TRY(check_device_operand<D>("shim_binary", op, y, b->numel, "b", s));
    /* A count between 1 and n repeats (shim_check_binary made it divide n). */
    Operand<D> oa{x, typename D::V(), a->numel == n || a->numel > 1, a->numel > 1 && a->numel < n ? a->numel : 0},
        ob{y, typename D::V(), b->numel == n || b->numel > 1, b->numel > 1 && b->numel < n ? b->numel : 0};
    return launch_binary<D>("shim_binary", op, shim_cuda_data(out), oa, ob, n, shim_cuda_stream(s));
  });
}

int shim_binary_scalar(int32_t op, shim_tensor *out, const shim_tensor *a, double b, int32_t scalar_first, shim_stream *s) {
  SHIM_TRY(shim_check_binary_scalar(op, out, a));
  shim_cuda_track(s, out);
  shim_cuda_track(s, a);
  return dispatch(a->dtype, [&](auto d) -> int {
    using D = decltype(d);
    using T = typename D::T;
    using V = typename D::V;
    /* The type the op computes in: f16 and bf16 keep the scalar a float; the others take it as
     * one element of a's dtype (f32: a float; integers truncate and saturate; bool: nonzero). */
    V scalar;
    if constexpr (std::is_same_v<T, uint16_t>) scalar = (float)b;
    else scalar = D::load(D::from_f64(b));
    const T *t = (const T *)shim_cuda_data(a);
    int64_t n = a->numel;
    if (scalar_first) {
      SHIM_TRY(check_device_operand<D>("shim_binary_scalar", op, t, n, "a", s));
    } else if constexpr (D::kind == Kind::Int) {
      if ((shim_is_division(op) && scalar == 0) || (op == SHIM_POW && is_negative(scalar)))
        return shim_fail_bad_operand("shim_binary_scalar", op, a->dtype, "the scalar");
    }
    Operand<D> tensor{t, V(), true}, value{nullptr, scalar, false};
    return scalar_first ? launch_binary<D>("shim_binary_scalar", op, shim_cuda_data(out), value, tensor, n, shim_cuda_stream(s))
                        : launch_binary<D>("shim_binary_scalar", op, shim_cuda_data(out), tensor, value, n, shim_cuda_stream(s));
  });
}

int shim_unary(int32_t op, shim_tensor *out, const shim_tensor *a, shim_stream *s) {
  SHIM_TRY(shim_check_unary(op, out, a));
  int32_t dtype = a->dtype;
  int64_t n = a->numel;
  if (n == 0) return SHIM_OK;
  shim_cuda_track(s, out);
  shim_cuda_track(s, a);
  return dispatch(dtype, [&](auto d) -> int {
    using D = decltype(d);
    using T = typename D::T;
    T *o = (T *)shim_cuda_data(out);
    const T *x = (const T *)shim_cuda_data(a);
    bool vec = aligned16(o) && aligned16(x);
    unsigned blocks = shim_cuda_blocks(vec ? n / pack_width<T>() + 1 : n);
    return with_unary_op("shim_unary", op, dtype, [&](auto code) -> int {
      constexpr int Op = decltype(code)::value, flags = unary_flags(Op);
      if constexpr ((flags & SHIM_OPF_WRITES_BOOL) != 0) {
        predicate_kernel<D, Op><<<shim_cuda_blocks(n), SHIM_CUDA_THREADS, 0, shim_cuda_stream(s)>>>((uint8_t *)o, x, n);
        CUDA_CHECK_LAUNCH("predicate_kernel");
        return SHIM_OK;
      } else if constexpr (!defined_on<D>(flags)) {
        return shim_fail(SHIM_E_UNSUPPORTED, "unary op %d on %s", Op, shim_dtype_name(D::code)); /* shim_check_unary refused it already */
      } else {
        unary_kernel<D, Op><<<blocks, SHIM_CUDA_THREADS, 0, shim_cuda_stream(s)>>>(o, x, n, vec);
        CUDA_CHECK_LAUNCH("unary_kernel");
        return SHIM_OK;
      }
    });
  });
}
