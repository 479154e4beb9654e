/* strided.cu: shim_copy_strided, shim_gather, shim_index_select and shim_cat on the device. Each thread computes its
 * element's source (and destination) offset from its flat index over the collapsed shape;
 * elements move as opaque 1-, 2-, 4- or 8-byte words. */
#include <string.h>

#include "elements.h"

using namespace shim;

namespace {

template <typename U>
__global__ void copy_strided_kernel(U *dst, const U *src, shim_strided_plan p) {
  const int64_t stride = (int64_t)gridDim.x * blockDim.x;
  for (int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; e < p.numel; e += stride) {
    int64_t rest = e, doff = p.dst_offset, soff = p.src_offset;
    for (int32_t d = p.ndim - 1; d >= 0; d--) {
      const int64_t i = rest % p.shape[d];
      rest /= p.shape[d];
      doff += i * p.dst_strides[d];
      soff += i * p.src_strides[d];
    }
    dst[doff] = src[soff];
  }
}

/* What gather needs of the shapes: index's, and a's contiguous strides. */
struct GatherDims {
  int32_t ndim, dim;
  int64_t r;
  int64_t shape[SHIM_MAX_DIMS];
  int64_t stride[SHIM_MAX_DIMS];
};

__global__ void find_bad_index(const int64_t *index, int64_t n, int64_t r, int32_t *flag) {
  const int64_t stride = (int64_t)gridDim.x * blockDim.x;
  bool bad = false;
  for (int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; e < n; e += stride) bad |= index[e] < 0 || index[e] >= r;
  if (bad) *flag = 1;
}

template <typename U>
__global__ void gather_kernel(U *out, const U *a, const int64_t *index, int64_t n, GatherDims g) {
  const int64_t stride = (int64_t)gridDim.x * blockDim.x;
  for (int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; e < n; e += stride) {
    int64_t rest = e, off = 0;
    for (int32_t d = g.ndim - 1; d >= 0; d--) {
      const int64_t i = rest % g.shape[d];
      rest /= g.shape[d];
      off += (d == g.dim ? index[e] : i) * g.stride[d];
    }
    out[e] = a[off];
  }
}

/* out[x, j, i] = a[x, index[j], i] over [outer, n, inner]. */
template <typename U>
__global__ void index_select_kernel(U *out, const U *a, const int64_t *index, int64_t total, int64_t n, int64_t r, int64_t inner) {
  const int64_t stride = (int64_t)gridDim.x * blockDim.x;
  for (int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; e < total; e += stride) {
    const int64_t i = e % inner, j = (e / inner) % n, x = e / (inner * n);
    out[e] = a[(x * r + index[j]) * inner + i];
  }
}

}  // namespace

int shim_cuda_check_indices(const char *fn, const int64_t *ix, int64_t n, int64_t r, int32_t dim, shim_stream *s) {
  cudaStream_t stream = shim_cuda_stream(s);
  ShimScratch flag;
  SHIM_TRY(flag.alloc(sizeof(int32_t), s));
  CUDA_CHECK(cudaMemsetAsync(flag.data(), 0, sizeof(int32_t), stream));
  find_bad_index<<<shim_cuda_blocks(n), SHIM_CUDA_THREADS, 0, stream>>>(ix, n, r, (int32_t *)flag.data());
  CUDA_CHECK_LAUNCH("find_bad_index");
  int32_t bad = 0;
  CUDA_CHECK(cudaMemcpyAsync(&bad, flag.data(), sizeof bad, cudaMemcpyDeviceToHost, stream));
  CUDA_CHECK(cudaStreamSynchronize(stream));
  if (bad) return shim_fail(SHIM_E_INVALID, "%s: an index is out of range for dim %d of size %lld", fn, dim, (long long)r);
  return SHIM_OK;
}

int shim_copy_strided(shim_tensor *dst, int64_t dst_offset, const int64_t *dst_strides, const shim_tensor *src,
                      int64_t src_offset, const int64_t *src_strides, int32_t ndim, const int64_t *shape, shim_stream *s) {
  shim_strided_plan p;
  SHIM_TRY(shim_check_copy_strided(dst, dst_offset, dst_strides, src, src_offset, src_strides, ndim, shape, &p));
  if (p.numel == 0) return SHIM_OK;
  shim_cuda_track(s, dst);
  shim_cuda_track(s, src);
  cudaStream_t stream = shim_cuda_stream(s);
  return by_size(shim_dtype_size(dst->dtype), [&](auto word) -> int {
    using U = decltype(word);
    copy_strided_kernel<U><<<shim_cuda_blocks(p.numel), SHIM_CUDA_THREADS, 0, stream>>>((U *)shim_cuda_data(dst),
                                                                                    (const U *)shim_cuda_data(src), p);
    CUDA_CHECK_LAUNCH("copy_strided_kernel");
    return SHIM_OK;
  });
}

int ShimDense::stage(const shim_tensor *src, bool gather, shim_stream *s) {
  t = src;
  if (src == nullptr || src->contiguous) return SHIM_OK;
  SHIM_TRY(scratch.alloc(src->numel * shim_dtype_size(src->dtype), s));
  header.storage = &scratch.st->base;
  header.offset = 0;
  header.dtype = src->dtype;
  header.ndim = src->ndim;
  memcpy(header.shape, src->shape, sizeof header.shape);
  shim_contiguous_strides(src->ndim, src->shape, header.strides);
  header.numel = src->numel;
  header.contiguous = 1;
  t = &header;
  if (!gather) return SHIM_OK;
  return shim_copy_strided(&header, 0, header.strides, src, 0, src->strides, src->ndim, src->shape, s);
}

int ShimDense::write_back(shim_tensor *target, shim_stream *s) {
  if (t != &header) return SHIM_OK;
  return shim_copy_strided(target, 0, target->strides, &header, 0, header.strides, target->ndim, target->shape, s);
}

int shim_gather(shim_tensor *out, const shim_tensor *a, int32_t dim, const shim_tensor *index, shim_stream *s) {
  SHIM_TRY(shim_check_gather(out, a, dim, index));
  const int64_t n = index->numel;
  if (n == 0) return SHIM_OK;
  GatherDims g;
  g.ndim = a->ndim;
  g.dim = dim;
  g.r = a->ndim > 0 ? a->shape[dim] : 1;
  int64_t acc = 1;
  for (int32_t d = a->ndim - 1; d >= 0; d--) {
    g.shape[d] = index->shape[d];
    g.stride[d] = acc;
    acc *= a->shape[d];
  }
  shim_cuda_track(s, out);
  shim_cuda_track(s, a);
  shim_cuda_track(s, index);
  cudaStream_t stream = shim_cuda_stream(s);
  const int64_t *ix = (const int64_t *)shim_cuda_data(index);
  SHIM_TRY(shim_cuda_check_indices("shim_gather", ix, n, g.r, dim, s));
  return by_size(shim_dtype_size(a->dtype), [&](auto word) -> int {
    using U = decltype(word);
    gather_kernel<U><<<shim_cuda_blocks(n), SHIM_CUDA_THREADS, 0, stream>>>((U *)shim_cuda_data(out),
                                                                          (const U *)shim_cuda_data(a), ix, n, g);
    CUDA_CHECK_LAUNCH("gather_kernel");
    return SHIM_OK;
  });
}

int shim_index_select(shim_tensor *out, const shim_tensor *a, int32_t dim, const shim_tensor *index, shim_stream *s) {
  shim_reduce_dims d;
  SHIM_TRY(shim_check_index_select(out, a, dim, index, &d));
  const int64_t n = index->numel, total = out->numel;
  if (n == 0) return SHIM_OK;
  shim_cuda_track(s, out);
  shim_cuda_track(s, a);
  shim_cuda_track(s, index);
  const int64_t *ix = (const int64_t *)shim_cuda_data(index);
  SHIM_TRY(shim_cuda_check_indices("shim_index_select", ix, n, d.r, dim, s));
  if (total == 0) return SHIM_OK;
  cudaStream_t stream = shim_cuda_stream(s);
  return by_size(shim_dtype_size(a->dtype), [&](auto word) -> int {
    using U = decltype(word);
    index_select_kernel<U><<<shim_cuda_blocks(total), SHIM_CUDA_THREADS, 0, stream>>>((U *)shim_cuda_data(out),
                                                                                    (const U *)shim_cuda_data(a), ix, total, n, d.r, d.inner);
    CUDA_CHECK_LAUNCH("index_select_kernel");
    return SHIM_OK;
  });
}

/* cat: one 2-D copy per part, its rows into out's at the part's offset along dim (each row of
 * out holds outer-many runs, one per part). */
int shim_cat(shim_tensor *out, int32_t count, const shim_tensor *const *parts, int32_t dim, shim_stream *s) {
  int64_t outer, inner;
  SHIM_TRY(shim_check_cat(out, count, parts, dim, &outer, &inner));
  const int64_t unit = inner * shim_dtype_size(out->dtype), row_bytes = out->shape[dim] * unit;
  if (row_bytes == 0 || outer == 0) return SHIM_OK;
  shim_cuda_track(s, out);
  cudaStream_t stream = shim_cuda_stream(s);
  int64_t at = 0;
  for (int32_t k = 0; k < count; k++) {
    const int64_t bytes = parts[k]->shape[dim] * unit;
    if (bytes > 0) {
      shim_cuda_track(s, parts[k]);
      CUDA_CHECK(cudaMemcpy2DAsync((char *)shim_cuda_data(out) + at, (size_t)row_bytes, shim_cuda_data(parts[k]), (size_t)bytes,
                                   (size_t)bytes, (size_t)outer, cudaMemcpyDeviceToDevice, stream));
    }
    at += bytes;
  }
  return SHIM_OK;
}
