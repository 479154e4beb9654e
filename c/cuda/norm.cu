/* norm.cu: shim_rms_norm on the device, by the cpu's rules (c/cpu/norm.c): a thread per row
 * sums the squares in double, then scales each element in the compute type. */
#include "elements.h"

using namespace shim;

namespace {

template <typename D>
__global__ void rms_rows(typename D::T *out, const typename D::T *x, const typename D::T *w, int64_t rows, int64_t n, double eps) {
  using V = typename D::V;
  const int64_t stride = (int64_t)gridDim.x * blockDim.x;
  for (int64_t row = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; row < rows; row += stride) {
    const typename D::T *xs = x + row * n;
    double ss = 0;
    for (int64_t i = 0; i < n; i++) {
      const double v = D::load(xs[i]);
      ss += v * v;
    }
    const V r = (V)(1.0 / sqrt(ss / (double)n + eps));
    for (int64_t i = 0; i < n; i++) {
      const V y = D::load(xs[i]) * r;
      out[row * n + i] = D::store(w ? y * D::load(w[i]) : y);
    }
  }
}

}  // namespace

int shim_rms_norm(shim_tensor *out, const shim_tensor *a, const shim_tensor *weight, int64_t inner, double eps, shim_stream *s) {
  int64_t rows;
  SHIM_TRY(shim_check_rms_norm(out, a, weight, inner, &rows));
  if (a->numel == 0) return SHIM_OK;
  shim_cuda_track(s, out);
  shim_cuda_track(s, a);
  shim_cuda_track(s, weight);
  cudaStream_t stream = shim_cuda_stream(s);
  return dispatch(a->dtype, [&](auto dt) -> int {
    using D = decltype(dt);
    if constexpr (D::kind != Kind::Float) {
      return shim_fail(SHIM_E_UNSUPPORTED, "shim_rms_norm: not a floating dtype");
    } else {
      using T = typename D::T;
      rms_rows<D><<<shim_cuda_blocks(rows), SHIM_CUDA_THREADS, 0, stream>>>(
          (T *)shim_cuda_data(out), (const T *)shim_cuda_data(a), weight ? (const T *)shim_cuda_data(weight) : nullptr, rows, inner, eps);
      CUDA_CHECK_LAUNCH("rms_rows");
      return SHIM_OK;
    }
  });
}
