/* tensor.c: host tensors. A tensor is a shape over refcounted storage (internal.h), so a view
 * keeps its memory alive after the tensor it came from is freed. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cpu.h"

const char *shim_cpu_describe(const shim_tensor *t, char *buf, size_t cap) {
  size_t used = (size_t)snprintf(buf, cap, "%s[", shim_dtype_name(t->dtype));
  for (int32_t i = 0; i < t->ndim && used < cap; i++)
    used += (size_t)snprintf(buf + used, cap - used, i ? ", %lld" : "%lld", (long long)t->shape[i]);
  if (used < cap) snprintf(buf + used, cap - used, "]");
  return buf;
}

/* Cache-line alignment lets the elementwise loops use aligned vector loads. */
enum { ALIGNMENT = 64 };

static int new_tensor(shim_storage *storage, int32_t dtype, int32_t ndim, const int64_t *shape, int64_t numel,
                      shim_tensor **out) {
  shim_tensor *t = calloc(1, sizeof *t);
  if (t == NULL) return shim_fail(SHIM_E_NOMEM, "out of host memory for a tensor header");
  t->storage = storage;
  t->dtype = dtype;
  t->ndim = ndim;
  if (ndim > 0) memcpy(t->shape, shape, (size_t)ndim * sizeof(int64_t));
  t->numel = numel;
  storage->refs++;
  *out = t;
  return SHIM_OK;
}

int shim_tensor_alloc(int32_t dtype, int32_t ndim, const int64_t *shape, shim_tensor **out) {
  SHIM_REQUIRE(out, "out");
  int64_t numel;
  SHIM_TRY(shim_check_shape(dtype, ndim, shape, &numel));
  int64_t nbytes = numel * shim_dtype_size(dtype);
  shim_storage *storage = calloc(1, sizeof *storage);
  if (storage == NULL) return shim_fail(SHIM_E_NOMEM, "out of host memory for a tensor header");
  /* aligned_alloc wants a multiple of the alignment; 0 elements still get a real pointer. */
  size_t padded = ((size_t)nbytes + ALIGNMENT - 1) / ALIGNMENT * ALIGNMENT;
  storage->data = aligned_alloc(ALIGNMENT, padded ? padded : ALIGNMENT);
  if (storage->data == NULL) {
    free(storage);
    return shim_fail(SHIM_E_NOMEM, "shim_tensor_alloc: out of host memory for %lld bytes", (long long)nbytes);
  }
  storage->nbytes = nbytes;
  int status = new_tensor(storage, dtype, ndim, shape, numel, out);
  if (status != SHIM_OK) {
    free(storage->data);
    free(storage);
  }
  return status;
}

int shim_tensor_view(shim_tensor *src, int32_t ndim, const int64_t *shape, shim_tensor **out) {
  SHIM_REQUIRE(src, "src");
  SHIM_REQUIRE(out, "out");
  int64_t numel;
  SHIM_TRY(shim_check_shape(src->dtype, ndim, shape, &numel));
  if (numel != src->numel) {
    char buf[128];
    return shim_fail(SHIM_E_INVALID, "shim_tensor_view: %lld elements cannot view %s",
                     (long long)numel, shim_cpu_describe(src, buf, sizeof buf));
  }
  return new_tensor(src->storage, src->dtype, ndim, shape, numel, out);
}

int shim_tensor_free(shim_tensor *t) {
  SHIM_REQUIRE(t, "t");
  shim_storage *storage = t->storage;
  free(t);
  if (--storage->refs == 0) {
    free(storage->data);
    free(storage);
  }
  return SHIM_OK;
}

static int check_bytes(const char *fn, const shim_tensor *t, int64_t nbytes) {
  int64_t expected = t->numel * shim_dtype_size(t->dtype);
  if (nbytes == expected) return SHIM_OK;
  char buf[128];
  return shim_fail(SHIM_E_INVALID, "%s: %lld bytes for %s, which holds %lld", fn, (long long)nbytes,
                   shim_cpu_describe(t, buf, sizeof buf), (long long)expected);
}

int shim_tensor_copy_in(shim_tensor *t, const void *src, int64_t nbytes, shim_stream *s) {
  SHIM_REQUIRE(t, "t");
  SHIM_TRY(check_bytes(__func__, t, nbytes));
  if (nbytes == 0) return SHIM_OK;
  SHIM_REQUIRE(src, "src");
  memcpy(shim_cpu_data(t), src, (size_t)nbytes);
  return SHIM_OK;
}

int shim_tensor_copy_out(const shim_tensor *t, void *dst, int64_t nbytes, shim_stream *s) {
  SHIM_REQUIRE(t, "t");
  SHIM_TRY(check_bytes(__func__, t, nbytes));
  if (nbytes == 0) return SHIM_OK;
  SHIM_REQUIRE(dst, "dst");
  memcpy(dst, shim_cpu_data(t), (size_t)nbytes);
  return SHIM_OK;
}
