/* convert.cu: shim_cast on the device, element by element by the rules of elements.h (the
 * cpu's convert.c): between f32, f16 and bf16 through float (exact, and NaN bits kept as the
 * cpu keeps them), from another floating dtype through double, from an integer or bool through
 * int64. The same dtype is a device-to-device copy. */
#include "elements.h"

using namespace shim;

/* The dtypes float holds exactly. */
__host__ __device__ constexpr bool is_single(int32_t code) { return code == SHIM_F32 || code == SHIM_F16 || code == SHIM_BF16; }

template <typename From, typename To>
__global__ void cast_kernel(typename To::T *out, const typename From::T *in, int64_t n) {
  const int64_t stride = (int64_t)gridDim.x * blockDim.x;
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
    if constexpr (is_single(From::code) && is_single(To::code)) out[i] = To::store(From::load(in[i]));
    else if constexpr (From::kind == Kind::Float) out[i] = To::from_f64(From::to_f64(in[i]));
    else out[i] = To::from_i64(From::to_i64(in[i]));
  }
}

int shim_cast(shim_tensor *out, const shim_tensor *a, shim_stream *s) {
  SHIM_TRY(shim_check_cast(out, a));
  if (!shim_cuda_all_contiguous(out, 1, &a)) return shim_cuda_densely(out, 1, &a, s, [&](shim_tensor *o, const shim_tensor *const *in) { return shim_cast(o, in[0], s); });
  if (a->numel == 0) return SHIM_OK;
  shim_cuda_track(s, out);
  shim_cuda_track(s, a);
  cudaStream_t stream = shim_cuda_stream(s);
  void *dst = shim_cuda_data(out);
  const void *src = shim_cuda_data(a);
  if (out->dtype == a->dtype) {
    if (dst != src) CUDA_CHECK(cudaMemcpyAsync(dst, src, (size_t)shim_cuda_nbytes(a), cudaMemcpyDeviceToDevice, stream));
    return SHIM_OK;
  }
  return dispatch(a->dtype, [&](auto from) -> int {
    return dispatch(out->dtype, [&](auto to) -> int {
      using From = decltype(from);
      using To = decltype(to);
      cast_kernel<From, To><<<shim_cuda_blocks(a->numel), SHIM_CUDA_THREADS, 0, stream>>>(
          (typename To::T *)dst, (const typename From::T *)src, a->numel);
      CUDA_CHECK_LAUNCH("cast_kernel");
      return SHIM_OK;
    });
  });
}
