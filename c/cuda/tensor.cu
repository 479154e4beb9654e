/* tensor.cu: device tensors. A tensor is a shape over refcounted device storage (internal.h,
 * alloc.cu), so a view keeps its memory alive after the tensor it came from is freed; headers
 * and views are shared with the cpu backend (c/common/tensor.c), the device memory behind
 * them comes from alloc.cu. Copies to and from the host are ordered on the given stream; the
 * driver stages pageable host memory through its own pinned buffers, so no staging of ours is
 * added (bench/cuda.ts measures the copy rates should that change). */
#include "cuda_shim.h"

int shim_tensor_alloc(int32_t dtype, int32_t ndim, const int64_t *shape, shim_tensor **out) {
  SHIM_REQUIRE(out, "out");
  int64_t numel;
  SHIM_TRY(shim_check_shape(dtype, ndim, shape, &numel));
  shim_cuda_storage *storage;
  SHIM_TRY(shim_cuda_storage_alloc(numel * shim_dtype_size(dtype), &storage));
  int status = shim_tensor_new(&storage->base, dtype, ndim, shape, numel, out);
  if (status != SHIM_OK) shim_cuda_storage_release(storage);
  return status;
}

int shim_tensor_free(shim_tensor *t) {
  SHIM_REQUIRE(t, "t");
  shim_storage *last = shim_tensor_drop(t);
  if (last != NULL) return shim_cuda_storage_release((shim_cuda_storage *)last);
  return SHIM_OK;
}

/* From pageable memory the copy returns once src has been staged, so src may be reused. Page-
 * locked memory is read by the DMA engine later, so for it the stream is waited on. */
int shim_tensor_copy_in(shim_tensor *t, const void *src, int64_t nbytes, shim_stream *s) {
  SHIM_TRY(shim_check_copy(__func__, t, src, "src", nbytes));
  SHIM_TRY(shim_check_writable(__func__, t, "t"));
  if (nbytes == 0) return SHIM_OK;
  if (!t->contiguous) /* into a contiguous copy, then through the strided copy kernel */
    return shim_cuda_densely(t, 0, nullptr, s, [&](shim_tensor *o, const shim_tensor *const *in) { return shim_tensor_copy_in(o, src, nbytes, s); });
  shim_cuda_track(s, t);
  cudaStream_t stream = shim_cuda_stream(s);
  cudaPointerAttributes attributes;
  CUDA_CHECK(cudaPointerGetAttributes(&attributes, src));
  CUDA_CHECK(cudaMemcpyAsync(shim_cuda_data(t), src, (size_t)nbytes, cudaMemcpyHostToDevice, stream));
  if (attributes.type == cudaMemoryTypeHost) CUDA_CHECK(cudaStreamSynchronize(stream));
  return SHIM_OK;
}

/* Device memory: host code cannot touch it in place. */
int shim_tensor_host_data(const shim_tensor *t, void **out) {
  SHIM_REQUIRE(t, "t");
  SHIM_REQUIRE(out, "out");
  SHIM_TRY(shim_require_contiguous(__func__, t, "t"));
  *out = NULL;
  return SHIM_OK;
}

/* Ordered after the stream's earlier work; the stream sync makes the wait explicit rather than
 * relying on pageable copies being synchronous (they are not for pinned destinations). */
int shim_tensor_copy_out(const shim_tensor *t, void *dst, int64_t nbytes, shim_stream *s) {
  SHIM_TRY(shim_check_copy(__func__, t, dst, "dst", nbytes));
  if (nbytes == 0) return SHIM_OK;
  if (!t->contiguous) { /* a contiguous copy of its elements, then out */
    ShimDense dense;
    SHIM_TRY(dense.stage(t, true, s));
    return shim_tensor_copy_out(dense.t, dst, nbytes, s);
  }
  shim_cuda_track(s, t);
  cudaStream_t stream = shim_cuda_stream(s);
  CUDA_CHECK(cudaMemcpyAsync(dst, shim_cuda_data(t), (size_t)nbytes, cudaMemcpyDeviceToHost, stream));
  CUDA_CHECK(cudaStreamSynchronize(stream));
  return SHIM_OK;
}
