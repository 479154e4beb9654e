/* layout.cu: shim_transpose on the device. Swapping dims d0 < d1 of a contiguous tensor is a
 * copy between [A, S0, B, S1, C] and [A, S1, B, S0, C] (A, B, C: the products of the dims
 * before, between and after). With C == 1 each (A, B) plane is an S0 x S1 matrix transposed
 * through shared memory in 32 x 32 tiles, so reads and writes both stay coalesced; with
 * C > 1 every output element gathers its source, runs of C elements reading contiguously.
 * Elements move as opaque 1-, 2-, 4- or 8-byte words. shim_triangle: a thread per element. */
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
int transpose_as(void *dst, const void *src, int64_t numel, const shim_transpose_dims &dims, cudaStream_t stream) {
  const int64_t A = dims.before, S0 = dims.s0, B = dims.between, S1 = dims.s1, C = dims.after;
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

template <typename U>
__global__ void triangle_kernel(U *out, const U *a, int64_t n, int64_t rows, int64_t cols, int64_t diagonal, int upper) {
  const int64_t stride = (int64_t)gridDim.x * blockDim.x;
  for (int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; e < n; e += stride) {
    const int64_t j = e % cols, i = (e / cols) % rows, off = j - i;
    out[e] = (upper ? off >= diagonal : off <= diagonal) ? a[e] : (U)0;
  }
}

}  // namespace

int shim_transpose(shim_tensor *out, const shim_tensor *a, int32_t dim0, int32_t dim1, shim_stream *s) {
  shim_transpose_dims dims;
  SHIM_TRY(shim_check_transpose(out, a, dim0, dim1, &dims));
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
  shim_cuda_track(s, out);
  shim_cuda_track(s, a);
  switch (size) {
    case 1: return transpose_as<uint8_t>(dst, src, a->numel, dims, stream);
    case 2: return transpose_as<uint16_t>(dst, src, a->numel, dims, stream);
    case 4: return transpose_as<uint32_t>(dst, src, a->numel, dims, stream);
    default: return transpose_as<uint64_t>(dst, src, a->numel, dims, stream);
  }
}

int shim_triangle(shim_tensor *out, const shim_tensor *a, int64_t diagonal, int32_t upper, shim_stream *s) {
  shim_matrix_dims d;
  SHIM_TRY(shim_check_triangle(out, a, upper, &d));
  if (a->numel == 0) return SHIM_OK;
  shim_cuda_track(s, out);
  shim_cuda_track(s, a);
  cudaStream_t stream = shim_cuda_stream(s);
  return shim::by_size(shim_dtype_size(a->dtype), [&](auto word) -> int {
    using U = decltype(word);
    triangle_kernel<U><<<shim_cuda_blocks(a->numel), SHIM_CUDA_THREADS, 0, stream>>>(
        (U *)shim_cuda_data(out), (const U *)shim_cuda_data(a), a->numel, d.rows, d.cols, diagonal, upper);
    CUDA_CHECK_LAUNCH("triangle_kernel");
    return SHIM_OK;
  });
}
