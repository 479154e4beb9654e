/* nn.cu: shim_softmax and shim_layer_norm on the device, by the cpu's rules (c/cpu/nn.c).
 * softmax: a read as [outer, r, inner]; one thread per row of r elements subtracts the row's
 * maximum, sums exp in the compute type (float; double for f64) and divides (or subtracts the
 * log of the sum). layer_norm: one warp per row of m elements, the sums in double. */
#include "elements.h"

using namespace shim;

namespace {

template <typename D>
__global__ void softmax_rows(typename D::T *out, const typename D::T *x, int64_t outer, int64_t r, int64_t inner, int log) {
  using V = typename D::V;
  const int64_t rows = outer * inner, stride = (int64_t)gridDim.x * blockDim.x;
  for (int64_t row = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; row < rows; row += stride) {
    const int64_t base = (row / inner) * r * inner + row % inner;
    V m = -INFINITY;
    for (int64_t j = 0; j < r; j++) {
      V v = D::load(x[base + j * inner]);
      if (v > m || v != v) m = v;
      if (m != m) break;
    }
    V sum = 0;
    for (int64_t j = 0; j < r; j++) sum += exp(D::load(x[base + j * inner]) - m);
    if (log) {
      const V shift = m + ::log(sum);
      for (int64_t j = 0; j < r; j++) out[base + j * inner] = D::store(D::load(x[base + j * inner]) - shift);
    } else {
      for (int64_t j = 0; j < r; j++) out[base + j * inner] = D::store(exp(D::load(x[base + j * inner]) - m) / sum);
    }
  }
}

/* One warp per row: each lane sums a stride of the row, then the warp adds its lanes. */
__device__ __forceinline__ double warp_sum(double v) {
  for (int offset = 16; offset > 0; offset /= 2) v += __shfl_down_sync(0xffffffffu, v, offset);
  return __shfl_sync(0xffffffffu, v, 0);
}

template <typename D>
__global__ void layer_norm_rows(typename D::T *out, const typename D::T *x, const typename D::T *w, const typename D::T *b,
                                int64_t rows, int64_t m, double eps) {
  using V = typename D::V;
  const int lane = threadIdx.x % 32;
  const int64_t warps = (int64_t)gridDim.x * blockDim.x / 32;
  for (int64_t row = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) / 32; row < rows; row += warps) {
    const typename D::T *xs = x + row * m;
    double sum = 0, sq = 0;
    for (int64_t j = lane; j < m; j += 32) sum += (double)D::load(xs[j]);
    const double mean = warp_sum(sum) / (double)m;
    for (int64_t j = lane; j < m; j += 32) {
      const double d = (double)D::load(xs[j]) - mean;
      sq += d * d;
    }
    const V rstd = (V)(1.0 / sqrt(warp_sum(sq) / (double)m + eps)), vmean = (V)mean;
    for (int64_t j = lane; j < m; j += 32) {
      V y = (D::load(xs[j]) - vmean) * rstd;
      if (w != nullptr) y *= D::load(w[j]);
      if (b != nullptr) y += D::load(b[j]);
      out[row * m + j] = D::store(y);
    }
  }
}

}  // namespace

int shim_softmax(shim_tensor *out, const shim_tensor *a, int32_t dim, int32_t log, shim_stream *s) {
  shim_reduce_dims d;
  SHIM_TRY(shim_check_softmax(out, a, dim, log, &d));
  if (a->numel == 0) return SHIM_OK;
  shim_cuda_track(s, out);
  shim_cuda_track(s, a);
  cudaStream_t stream = shim_cuda_stream(s);
  return dispatch(a->dtype, [&](auto dt) -> int {
    using D = decltype(dt);
    if constexpr (D::kind != Kind::Float) {
      return shim_fail(SHIM_E_UNSUPPORTED, "shim_softmax: not a floating dtype");
    } else {
      softmax_rows<D><<<shim_cuda_blocks(d.outer * d.inner), SHIM_CUDA_THREADS, 0, stream>>>(
          (typename D::T *)shim_cuda_data(out), (const typename D::T *)shim_cuda_data(a), d.outer, d.r, d.inner, log);
      CUDA_CHECK_LAUNCH("softmax_rows");
      return SHIM_OK;
    }
  });
}

int shim_layer_norm(shim_tensor *out, const shim_tensor *a, const shim_tensor *weight, const shim_tensor *bias, int64_t m, double eps,
                    shim_stream *s) {
  int64_t rows;
  SHIM_TRY(shim_check_layer_norm(out, a, weight, bias, m, &rows));
  if (a->numel == 0) return SHIM_OK;
  shim_cuda_track(s, out);
  shim_cuda_track(s, a);
  if (weight) shim_cuda_track(s, weight);
  if (bias) shim_cuda_track(s, bias);
  cudaStream_t stream = shim_cuda_stream(s);
  return dispatch(a->dtype, [&](auto dt) -> int {
    using D = decltype(dt);
    using T = typename D::T;
    if constexpr (D::kind != Kind::Float) {
      return shim_fail(SHIM_E_UNSUPPORTED, "shim_layer_norm: not a floating dtype");
    } else {
      layer_norm_rows<D><<<shim_cuda_blocks(rows * 32), SHIM_CUDA_THREADS, 0, stream>>>(
          (T *)shim_cuda_data(out), (const T *)shim_cuda_data(a), weight ? (const T *)shim_cuda_data(weight) : nullptr,
          bias ? (const T *)shim_cuda_data(bias) : nullptr, rows, m, eps);
      CUDA_CHECK_LAUNCH("layer_norm_rows");
      return SHIM_OK;
    }
  });
}
