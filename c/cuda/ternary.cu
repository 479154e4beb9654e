/* ternary.cu: shim_ternary on the device: where, lerp, addcmul, addcdiv. The semantics are
 * the cpu's (c/cpu/ternary.c): f16 and bf16 compute in float and round once; addcmul of
 * integers wraps in int64 with value truncated to the dtype; lerp is torch's two-sided form;
 * where copies elements and reads any condition dtype as nonzero. Grid-stride loops; an
 * operand of one element is read for every output element. */
#include <type_traits>

#include "elements.h"

using namespace shim;

namespace {

/* Element i of a full operand, or the one element of a broadcast one. */
template <typename T>
__device__ __forceinline__ T at(const T *p, bool full, int64_t i) {
  return p[full ? i : 0];
}

template <typename C, typename D>
__global__ void where_kernel(typename D::T *out, const typename C::T *cond, bool fa, const typename D::T *b, bool fb,
                             const typename D::T *c, bool fc, int64_t n) {
  const int64_t stride = (int64_t)gridDim.x * blockDim.x;
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
    out[i] = C::load(at(cond, fa, i)) != (typename C::V)0 ? at(b, fb, i) : at(c, fc, i);
}

template <typename V>
__device__ __forceinline__ V lerp(V a, V b, V w) {
  return (w < (V)0 ? -w : w) < (V)0.5 ? a + w * (b - a) : b - (b - a) * ((V)1 - w);
}

/* lerp, addcmul, addcdiv in D's compute type (int64 for integer addcmul). */
template <typename D, int Op>
__global__ void arithmetic_kernel(typename D::T *out, const typename D::T *a, bool fa, const typename D::T *b, bool fb,
                                  const typename D::T *c, bool fc, typename D::V value, int64_t n) {
  using V = typename D::V;
  const int64_t stride = (int64_t)gridDim.x * blockDim.x;
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
    V x = D::load(at(a, fa, i)), y = D::load(at(b, fb, i)), z = D::load(at(c, fc, i));
    if constexpr (D::kind == Kind::Int) {
      out[i] = D::from_i64((int64_t)((uint64_t)(int64_t)x + (uint64_t)(int64_t)value * (uint64_t)(int64_t)y * (uint64_t)(int64_t)z));
    } else if constexpr (Op == SHIM_LERP) {
      out[i] = D::store(lerp(x, y, z));
    } else if constexpr (Op == SHIM_ADDCMUL) {
      out[i] = D::store(x + value * y * z);
    } else if constexpr (Op == SHIM_ADDCDIV) {
      out[i] = D::store(x + value * y / z);
    } else {
      static_assert(no_case<Op>, "a ternary op without its branch in arithmetic_kernel");
    }
  }
}

}  // namespace

int shim_ternary(int32_t op, shim_tensor *out, const shim_tensor *a, const shim_tensor *b, const shim_tensor *c,
                 double value, shim_stream *s) {
  SHIM_TRY(shim_check_ternary(op, out, a, b, c));
  int64_t n = out->numel;
  if (n == 0) return SHIM_OK;
  shim_cuda_track(s, out);
  shim_cuda_track(s, a);
  shim_cuda_track(s, b);
  shim_cuda_track(s, c);
  bool fa = a->numel == n, fb = b->numel == n, fc = c->numel == n;
  cudaStream_t stream = shim_cuda_stream(s);
  unsigned blocks = shim_cuda_blocks(n);
  return dispatch(out->dtype, [&](auto d) -> int {
    using D = decltype(d);
    using T = typename D::T;
    using V = typename D::V;
    T *o = (T *)shim_cuda_data(out);
    const T *y = (const T *)shim_cuda_data(b), *z = (const T *)shim_cuda_data(c);
    if (op == SHIM_WHERE) {
      return dispatch(a->dtype, [&](auto cd) -> int {
        using C = decltype(cd);
        where_kernel<C, D><<<blocks, SHIM_CUDA_THREADS, 0, stream>>>(o, (const typename C::T *)shim_cuda_data(a), fa, y, fb, z, fc, n);
        CUDA_CHECK_LAUNCH("where_kernel");
        return SHIM_OK;
      });
    }
    const T *x = (const T *)shim_cuda_data(a);
    return with_ternary_op("shim_ternary", op, D::code, [&](auto code) -> int {
      constexpr int Op = decltype(code)::value;
      if constexpr (Op == SHIM_WHERE) {
        return SHIM_OK; /* where's kernel ran above */
      } else if constexpr (!defined_on<D>(ternary_flags(Op))) {
        return shim_fail(SHIM_E_UNSUPPORTED, "ternary op %d on %s", Op, shim_dtype_name(D::code)); /* shim_check_ternary refused it already */
      } else {
        /* The scalar as binary_scalar's: float for f16/bf16/f32, double for f64, else the dtype's. */
        V v;
        if constexpr (D::kind == Kind::Float) v = (V)value;
        else v = D::load(D::from_f64(value));
        arithmetic_kernel<D, Op><<<blocks, SHIM_CUDA_THREADS, 0, stream>>>(o, x, fa, y, fb, z, fc, v, n);
        CUDA_CHECK_LAUNCH("arithmetic_kernel");
        return SHIM_OK;
      }
    });
  });
}
