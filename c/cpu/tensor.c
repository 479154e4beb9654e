/* tensor.c: host tensors. A tensor is a shape over refcounted storage (internal.h), so a view
 * keeps its memory alive after the tensor it came from is freed; headers and views are shared
 * with the cuda backend (c/common/tensor.c), the host memory behind them is made here. */
#include <stdlib.h>
#include <string.h>

#include "cpu.h"

/* Cache-line alignment lets the elementwise loops use aligned vector loads. */
enum { ALIGNMENT = 64 };

static void free_storage(shim_storage *storage) {
  shim_memory_release(storage->nbytes);
  free(storage->data);
  free(storage);
}

int shim_tensor_alloc(int32_t dtype, int32_t ndim, const int64_t *shape, shim_tensor **out) {
  SHIM_REQUIRE(out, "out");
  int64_t numel;
  SHIM_TRY(shim_check_shape(dtype, ndim, shape, &numel));
  int64_t nbytes = numel * shim_dtype_size(dtype);
  SHIM_TRY(shim_memory_reserve(__func__, nbytes));
  shim_storage *storage = calloc(1, sizeof *storage);
  if (storage == NULL) {
    shim_memory_release(nbytes);
    return shim_fail(SHIM_E_NOMEM, "out of host memory for a tensor header");
  }
  /* aligned_alloc wants a multiple of the alignment; 0 elements still get a real pointer. */
  size_t padded = ((size_t)nbytes + ALIGNMENT - 1) / ALIGNMENT * ALIGNMENT;
  storage->data = aligned_alloc(ALIGNMENT, padded ? padded : ALIGNMENT);
  if (storage->data == NULL) {
    free(storage);
    shim_memory_release(nbytes);
    return shim_fail(SHIM_E_NOMEM, "shim_tensor_alloc: out of host memory for %lld bytes", (long long)nbytes);
  }
  storage->nbytes = nbytes;
  int status = shim_tensor_new(storage, dtype, ndim, shape, numel, out);
  if (status != SHIM_OK) free_storage(storage);
  return status;
}

int shim_tensor_free(shim_tensor *t) {
  SHIM_REQUIRE(t, "t");
  shim_storage *last = shim_tensor_drop(t);
  if (last != NULL) free_storage(last);
  return SHIM_OK;
}

int shim_tensor_copy_in(shim_tensor *t, const void *src, int64_t nbytes, shim_stream *s) {
  SHIM_TRY(shim_check_copy(__func__, t, src, "src", nbytes));
  if (nbytes == 0) return SHIM_OK;
  memcpy(shim_cpu_data(t), src, (size_t)nbytes);
  return SHIM_OK;
}

int shim_tensor_copy_out(const shim_tensor *t, void *dst, int64_t nbytes, shim_stream *s) {
  SHIM_TRY(shim_check_copy(__func__, t, dst, "dst", nbytes));
  if (nbytes == 0) return SHIM_OK;
  memcpy(dst, shim_cpu_data(t), (size_t)nbytes);
  return SHIM_OK;
}
