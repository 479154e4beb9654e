/* creation.cu: fill, arange and rand on the device. Values are computed in double and stored
 * by the conversion rules of elements.h (the cpu's); rand draws element i from
 * c/common/numeric.h at index offset + i, so cpu and cuda give the same values. */
#include "elements.h"

using namespace shim;

/* Every element = value: 16-byte stores over the aligned bulk, then the tail. */
template <typename U>
__global__ void fill_kernel(U *out, U value, int64_t n, bool vec) {
  constexpr int P = pack_width<U>();
  const int64_t tid = (int64_t)blockIdx.x * blockDim.x + threadIdx.x, stride = (int64_t)gridDim.x * blockDim.x;
  int64_t done = 0;
  if (vec) {
    Pack<U, P> pack;
#pragma unroll
    for (int j = 0; j < P; j++) pack.v[j] = value;
    const int64_t packs = n / P;
    for (int64_t p = tid; p < packs; p += stride) reinterpret_cast<Pack<U, P> *>(out)[p] = pack;
    done = packs * P;
  }
  for (int64_t i = done + tid; i < n; i += stride) out[i] = value;
}

template <typename U>
static int fill_as(void *out, U value, int64_t n, cudaStream_t stream) {
  bool vec = aligned16(out);
  fill_kernel<U><<<shim_cuda_blocks(vec ? n / pack_width<U>() + 1 : n), SHIM_CUDA_THREADS, 0, stream>>>(
      (U *)out, value, n, vec);
  CUDA_CHECK_LAUNCH("fill_kernel");
  return SHIM_OK;
}

int shim_fill(shim_tensor *out, double value, shim_stream *s) {
  SHIM_REQUIRE(out, "out");
  SHIM_TRY(shim_check_writable("shim_fill", out, "out"));
  if (!out->contiguous) return shim_cuda_densely(out, 0, nullptr, s, [&](shim_tensor *o, const shim_tensor *const *in) { return shim_fill(o, value, s); });
  if (out->numel == 0) return SHIM_OK;
  uint64_t element = 0; /* the value's bytes in out's dtype */
  SHIM_TRY(dispatch(out->dtype, [&](auto d) -> int {
    using D = decltype(d);
    typename D::T v = D::from_f64(value);
    memcpy(&element, &v, sizeof v);
    return SHIM_OK;
  }));
  shim_cuda_track(s, out);
  cudaStream_t stream = shim_cuda_stream(s);
  void *data = shim_cuda_data(out);
  int64_t size = shim_dtype_size(out->dtype), n = out->numel;
  bool bytes_equal = true; /* then a memset does it */
  for (int64_t i = 1; i < size; i++) bytes_equal &= ((element >> (8 * i)) & 0xff) == (element & 0xff);
  if (bytes_equal) {
    CUDA_CHECK(cudaMemsetAsync(data, (int)(element & 0xff), (size_t)(n * size), stream));
    return SHIM_OK;
  }
  switch (size) {
    case 2: return fill_as<uint16_t>(data, (uint16_t)element, n, stream);
    case 4: return fill_as<uint32_t>(data, (uint32_t)element, n, stream);
    default: return fill_as<uint64_t>(data, element, n, stream);
  }
}

/* Element i is start + (double)i * step, rounded after the product and after the sum as the
 * cpu does (the _rn intrinsics keep nvcc from fusing them into one fma). */
template <typename D>
__global__ void arange_kernel(typename D::T *out, double start, double step, int64_t n) {
  const int64_t stride = (int64_t)gridDim.x * blockDim.x;
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
    out[i] = D::from_f64(__dadd_rn(start, __dmul_rn((double)i, step)));
}

int shim_arange(shim_tensor *out, double start, double step, shim_stream *s) {
  SHIM_REQUIRE(out, "out");
  SHIM_TRY(shim_require_contiguous("shim_arange", out, "out"));
  if (out->numel == 0) return SHIM_OK;
  shim_cuda_track(s, out);
  return dispatch(out->dtype, [&](auto d) -> int {
    using D = decltype(d);
    arange_kernel<D><<<shim_cuda_blocks(out->numel), SHIM_CUDA_THREADS, 0, shim_cuda_stream(s)>>>(
        (typename D::T *)shim_cuda_data(out), start, step, out->numel);
    CUDA_CHECK_LAUNCH("arange_kernel");
    return SHIM_OK;
  });
}

template <typename D>
__global__ void rand_kernel(typename D::T *out, uint64_t seed, uint64_t offset, int32_t normal, double top, int64_t n) {
  const int64_t stride = (int64_t)gridDim.x * blockDim.x;
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
    double v;
    if (normal) {
      v = shim_normal_at(seed, offset + (uint64_t)i);
    } else {
      double u = shim_uniform_at(seed, offset + (uint64_t)i);
      v = u < top ? u : top;
    }
    out[i] = D::from_f64(v);
  }
}

int shim_rand(shim_tensor *out, uint64_t seed, uint64_t offset, int32_t normal, shim_stream *s) {
  SHIM_TRY(shim_check_rand(out, normal));
  if (out->numel == 0) return SHIM_OK;
  shim_cuda_track(s, out);
  double top = shim_uniform_top(out->dtype);
  return dispatch(out->dtype, [&](auto d) -> int {
    using D = decltype(d);
    if constexpr (D::kind == Kind::Float) {
      rand_kernel<D><<<shim_cuda_blocks(out->numel), SHIM_CUDA_THREADS, 0, shim_cuda_stream(s)>>>(
          (typename D::T *)shim_cuda_data(out), seed, offset, normal, top, out->numel);
      CUDA_CHECK_LAUNCH("rand_kernel");
    }
    return SHIM_OK;
  });
}
