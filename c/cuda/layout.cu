/* layout.cu: shim_transpose on the device. Swapping dims d0 < d1 of a contiguous tensor is a
 * copy between [A, S0, B, S1, C] and [A, S1, B, S0, C] (A, B, C: the products of the dims
 * before, between and after). With C == 1 each (A, B) plane is an S0 x S1 matrix transposed
 * through shared memory in 32 x 32 tiles, so reads and writes both stay coalesced; with
 * C > 1 every output element gathers its source, runs of C elements reading contiguously.
 * Elements move as opaque 1-, 2-, 4- or 8-byte words. */
#include "elements.h"

namespace {

enum { TILE = 32, ROWS = 8 }; /* a 32 x 8 block moves a 32 x 32 tile, four rows per thread */

template <typename U>
__global__ void transpose_tiles(U *dst, const U *src, int64_t A, int64_t S0, int64_t B, int64_t S1) {
  __shared__ U tile[TILE][TILE + 1]; /* + 1: columns fall in different banks */
  const int tx = threadIdx.x, ty = threadIdx.y;
  const int64_t tiles0 = (S0 + TILE - 1) / TILE, tiles1 = (S1 + TILE - 1) / TILE, per_plane = tiles0 * tiles1;
  for (int64_t t = blockIdx.x; t < A * B * per_plane; t += gridDim.x) { /* the same trip count for the whole block */
    const int64_t plane = t / per_plane, i0 = (t % per_plane) / tiles1 * TILE, j0 = (t % per_plane) % tiles1 * TILE;
    const int64_t x = plane / B, y = plane % B;
    for (int r = ty; r < TILE; r += ROWS) {
      const int64_t i = i0 + r, j = j0 + tx;
      if (i < S0 && j < S1) tile[r][tx] = src[((x * S0 + i) * B + y) * S1 + j];
    }
    __syncthreads();
    for (int r = ty; r < TILE; r += ROWS) {
      const int64_t j = j0 + r, i = i0 + tx;
      if (i < S0 && j < S1) dst[((x * S1 + j) * B + y) * S0 + i] = tile[tx][r];
    }
    __syncthreads();
  }
}

template <typename U>
__global__ void transpose_gather(U *dst, const U *src, int64_t numel, int64_t S0, int64_t B, int64_t S1, int64_t C) {
  const int64_t stride = (int64_t)gridDim.x * blockDim.x;
  for (int64_t o = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; o < numel; o += stride) {
    int64_t rest = o;
    const int64_t c = rest % C;
    rest /= C;
    const int64_t i = rest % S0;
    rest /= S0;
    const int64_t y = rest % B;
    rest /= B;
    const int64_t j = rest % S1, x = rest / S1;
    dst[o] = src[(((x * S0 + i) * B + y) * S1 + j) * C + c];
  }
}

template <typename U>
int transpose_as(void *dst, const void *src, int64_t numel, int64_t A, int64_t S0, int64_t B, int64_t S1, int64_t C,
                 cudaStream_t stream) {
  if (C == 1) {
    const int64_t tiles = A * B * ((S0 + TILE - 1) / TILE) * ((S1 + TILE - 1) / TILE);
    const unsigned blocks = tiles > SHIM_CUDA_MAX_BLOCKS ? SHIM_CUDA_MAX_BLOCKS : (unsigned)tiles;
    transpose_tiles<U><<<blocks, dim3(TILE, ROWS), 0, stream>>>((U *)dst, (const U *)src, A, S0, B, S1);
    CUDA_CHECK_LAUNCH("transpose_tiles");
  } else {
    transpose_gather<U><<<shim_cuda_blocks(numel), SHIM_CUDA_THREADS, 0, stream>>>((U *)dst, (const U *)src, numel, S0,
                                                                                   B, S1, C);
    CUDA_CHECK_LAUNCH("transpose_gather");
  }
  return SHIM_OK;
}

}  // namespace

int shim_transpose(shim_tensor *out, const shim_tensor *a, int32_t dim0, int32_t dim1, shim_stream *s) {
  SHIM_REQUIRE(out, "out");
  SHIM_REQUIRE(a, "a");
  char ba[128], bo[128];
  shim_cuda_describe(a, ba, sizeof ba);
  shim_cuda_describe(out, bo, sizeof bo);
  if (dim0 < 0 || dim0 >= a->ndim || dim1 < 0 || dim1 >= a->ndim)
    return shim_fail(SHIM_E_INVALID, "shim_transpose: dims %d and %d are out of range for a %s", dim0, dim1, ba);
  bool out_ok = out->dtype == a->dtype && out->ndim == a->ndim;
  for (int32_t i = 0; out_ok && i < a->ndim; i++) out_ok = out->shape[i] == a->shape[i == dim0 ? dim1 : i == dim1 ? dim0 : i];
  if (!out_ok)
    return shim_fail(SHIM_E_INVALID, "shim_transpose: out is %s but swapping dims %d and %d of %s gives another dtype or shape",
                     bo, dim0, dim1, ba);
  int64_t size = shim_dtype_size(a->dtype);
  void *dst = shim_cuda_data(out);
  const void *src = shim_cuda_data(a);
  cudaStream_t stream = shim_cuda_stream(s);
  if (dim0 == dim1 || a->numel == 0) {
    if (dst != src && a->numel > 0) {
      shim_cuda_track(s, out);
      shim_cuda_track(s, a);
      CUDA_CHECK(cudaMemcpyAsync(dst, src, (size_t)(a->numel * size), cudaMemcpyDeviceToDevice, stream));
    }
    return SHIM_OK;
  }
  if (out->storage == a->storage) return shim_fail(SHIM_E_INVALID, "shim_transpose: out %s shares memory with a", bo);
  shim_cuda_track(s, out);
  shim_cuda_track(s, a);
  int32_t d0 = dim0 < dim1 ? dim0 : dim1, d1 = dim0 < dim1 ? dim1 : dim0;
  int64_t A = 1, B = 1, C = 1;
  for (int32_t i = 0; i < d0; i++) A *= a->shape[i];
  for (int32_t i = d0 + 1; i < d1; i++) B *= a->shape[i];
  for (int32_t i = d1 + 1; i < a->ndim; i++) C *= a->shape[i];
  int64_t S0 = a->shape[d0], S1 = a->shape[d1];
  switch (size) {
    case 1: return transpose_as<uint8_t>(dst, src, a->numel, A, S0, B, S1, C, stream);
    case 2: return transpose_as<uint16_t>(dst, src, a->numel, A, S0, B, S1, C, stream);
    case 4: return transpose_as<uint32_t>(dst, src, a->numel, A, S0, B, S1, C, stream);
    default: return transpose_as<uint64_t>(dst, src, a->numel, A, S0, B, S1, C, stream);
  }
}
