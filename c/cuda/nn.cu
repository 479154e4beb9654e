/* nn.cu: shim_softmax on the device, by the cpu's rules (c/cpu/nn.c): a read as [outer, r,
 * inner]; one thread per row of r elements subtracts the row's maximum, sums exp in the
 * compute type (float; double for f64) and divides (or subtracts the log of the sum). */
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
