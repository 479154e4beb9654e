/* dropout.cu: shim_dropout on the device: element i's draw is c/common/numeric.h's uniform at
 * (seed, offset + i), as on the cpu (c/cpu/dropout.c), so both backends drop the same elements. */
#include "elements.h"

using namespace shim;

namespace {

template <typename D>
__global__ void dropout_kernel(typename D::T *out, uint8_t *mask, const typename D::T *x, int64_t n, double p, typename D::V scale,
                               uint64_t seed, uint64_t offset) {
  const int64_t stride = (int64_t)gridDim.x * blockDim.x;
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
    const bool keep = shim_uniform_at(seed, offset + (uint64_t)i) >= p;
    mask[i] = keep;
    out[i] = D::store(keep ? D::load(x[i]) * scale : (typename D::V)0);
  }
}

}  // namespace

int shim_dropout(shim_tensor *out, shim_tensor *mask, const shim_tensor *a, double p, uint64_t seed, uint64_t offset, shim_stream *s) {
  SHIM_TRY(shim_check_dropout(out, mask, a, p));
  if (a->numel == 0) return SHIM_OK;
  shim_cuda_track(s, out);
  shim_cuda_track(s, mask);
  shim_cuda_track(s, a);
  cudaStream_t stream = shim_cuda_stream(s);
  const double scale = p < 1.0 ? 1.0 / (1.0 - p) : 0.0;
  return dispatch(a->dtype, [&](auto dt) -> int {
    using D = decltype(dt);
    if constexpr (D::kind != Kind::Float) {
      return shim_fail(SHIM_E_UNSUPPORTED, "shim_dropout: not a floating dtype");
    } else {
      using T = typename D::T;
      dropout_kernel<D><<<shim_cuda_blocks(a->numel), SHIM_CUDA_THREADS, 0, stream>>>(
          (T *)shim_cuda_data(out), (uint8_t *)shim_cuda_data(mask), (const T *)shim_cuda_data(a), a->numel, p,
          (typename D::V)scale, seed, offset);
      CUDA_CHECK_LAUNCH("dropout_kernel");
      return SHIM_OK;
    }
  });
}
