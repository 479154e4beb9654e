/* tensor.cu: device tensors. A tensor is a shape over refcounted device storage (internal.h,
 * alloc.cu), so a view keeps its memory alive after the tensor it came from is freed. Copies
 * to and from the host are ordered on the given stream; the driver stages pageable host
 * memory through its own pinned buffers, so no staging of ours is added (bench/cuda.ts
 * measures the copy rates should that change). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_shim.h"

const char *shim_cuda_describe(const shim_tensor *t, char *buf, size_t cap) {
  size_t used = (size_t)snprintf(buf, cap, "%s[", shim_dtype_name(t->dtype));
  for (int32_t i = 0; i < t->ndim && used < cap; i++)
    used += (size_t)snprintf(buf + used, cap - used, i ? ", %lld" : "%lld", (long long)t->shape[i]);
  if (used < cap) snprintf(buf + used, cap - used, "]");
  return buf;
}

static int new_tensor(shim_storage *storage, int32_t dtype, int32_t ndim, const int64_t *shape, int64_t numel,
                      shim_tensor **out) {
  shim_tensor *t = (shim_tensor *)calloc(1, sizeof *t);
  if (t == NULL) return shim_fail(SHIM_E_NOMEM, "out of host memory for a tensor header");
  t->storage = storage;
  t->dtype = dtype;
  t->ndim = ndim;
  if (ndim > 0) memcpy(t->shape, shape, (size_t)ndim * sizeof(int64_t));
  t->numel = numel;
  __atomic_add_fetch(&storage->refs, 1, __ATOMIC_RELAXED);
  *out = t;
  return SHIM_OK;
}

int shim_tensor_alloc(int32_t dtype, int32_t ndim, const int64_t *shape, shim_tensor **out) {
  SHIM_REQUIRE(out, "out");
  int64_t numel;
  SHIM_TRY(shim_check_shape(dtype, ndim, shape, &numel));
  shim_cuda_storage *storage;
  SHIM_TRY(shim_cuda_storage_alloc(numel * shim_dtype_size(dtype), &storage));
  int status = new_tensor(&storage->base, dtype, ndim, shape, numel, out);
  if (status != SHIM_OK) shim_cuda_storage_release(storage);
  return status;
}

int shim_tensor_view(shim_tensor *src, int32_t ndim, const int64_t *shape, shim_tensor **out) {
  SHIM_REQUIRE(src, "src");
  SHIM_REQUIRE(out, "out");
  int64_t numel;
  SHIM_TRY(shim_check_shape(src->dtype, ndim, shape, &numel));
  if (numel != src->numel) {
    char buf[128];
    return shim_fail(SHIM_E_INVALID, "shim_tensor_view: %lld elements cannot view %s", (long long)numel,
                     shim_cuda_describe(src, buf, sizeof buf));
  }
  return new_tensor(src->storage, src->dtype, ndim, shape, numel, out);
}

int shim_tensor_free(shim_tensor *t) {
  SHIM_REQUIRE(t, "t");
  shim_storage *storage = t->storage;
  free(t);
  if (__atomic_sub_fetch(&storage->refs, 1, __ATOMIC_ACQ_REL) == 0)
    return shim_cuda_storage_release((shim_cuda_storage *)storage);
  return SHIM_OK;
}

static int check_bytes(const char *fn, const shim_tensor *t, int64_t nbytes) {
  int64_t expected = shim_cuda_nbytes(t);
  if (nbytes == expected) return SHIM_OK;
  char buf[128];
  return shim_fail(SHIM_E_INVALID, "%s: %lld bytes for %s, which holds %lld", fn, (long long)nbytes,
                   shim_cuda_describe(t, buf, sizeof buf), (long long)expected);
}

/* From pageable memory the copy returns once src has been staged, so src may be reused. Page-
 * locked memory is read by the DMA engine later, so for it the stream is waited on. */
int shim_tensor_copy_in(shim_tensor *t, const void *src, int64_t nbytes, shim_stream *s) {
  SHIM_REQUIRE(t, "t");
  SHIM_TRY(check_bytes(__func__, t, nbytes));
  if (nbytes == 0) return SHIM_OK;
  SHIM_REQUIRE(src, "src");
  shim_cuda_track(s, t);
  cudaStream_t stream = shim_cuda_stream(s);
  cudaPointerAttributes attributes;
  CUDA_CHECK(cudaPointerGetAttributes(&attributes, src));
  CUDA_CHECK(cudaMemcpyAsync(shim_cuda_data(t), src, (size_t)nbytes, cudaMemcpyHostToDevice, stream));
  if (attributes.type == cudaMemoryTypeHost) CUDA_CHECK(cudaStreamSynchronize(stream));
  return SHIM_OK;
}

/* Ordered after the stream's earlier work; the stream sync makes the wait explicit rather than
 * relying on pageable copies being synchronous (they are not for pinned destinations). */
int shim_tensor_copy_out(const shim_tensor *t, void *dst, int64_t nbytes, shim_stream *s) {
  SHIM_REQUIRE(t, "t");
  SHIM_TRY(check_bytes(__func__, t, nbytes));
  if (nbytes == 0) return SHIM_OK;
  SHIM_REQUIRE(dst, "dst");
  shim_cuda_track(s, t);
  cudaStream_t stream = shim_cuda_stream(s);
  CUDA_CHECK(cudaMemcpyAsync(dst, shim_cuda_data(t), (size_t)nbytes, cudaMemcpyDeviceToHost, stream));
  CUDA_CHECK(cudaStreamSynchronize(stream));
  return SHIM_OK;
}
