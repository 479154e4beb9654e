/* tensor.c: tensor headers, the same on both backends. A tensor is a dtype and shape over
 * refcounted storage (internal.h); each backend allocates and frees the storage itself (host
 * or device memory), and everything that only touches headers lives here, shim_tensor_view
 * whole: a view shares its source's storage (from a byte offset into it), so it is never a
 * backend's business. */
#include <stdlib.h>
#include <string.h>

#include "internal.h"

int shim_check_shape(int32_t dtype, int32_t ndim, const int64_t *shape, int64_t *numel) {
  if (shim_dtype_size(dtype) == 0) return shim_fail(SHIM_E_INVALID, "unknown dtype code %d", dtype);
  if (ndim < 0 || ndim > SHIM_MAX_DIMS)
    return shim_fail(SHIM_E_INVALID, "ndim %d outside 0..%d", ndim, SHIM_MAX_DIMS);
  if (ndim > 0 && shape == NULL) return shim_fail(SHIM_E_INVALID, "shape is null");
  int64_t n = 1;
  for (int32_t i = 0; i < ndim; i++) {
    if (shape[i] < 0) return shim_fail(SHIM_E_INVALID, "dim %d has negative size %lld", i, (long long)shape[i]);
    if (shape[i] != 0 && n > INT64_MAX / shape[i]) return shim_fail(SHIM_E_INVALID, "shape overflows int64");
    n *= shape[i];
  }
  if (n > INT64_MAX / 8) return shim_fail(SHIM_E_INVALID, "tensor too large");
  *numel = n;
  return SHIM_OK;
}

int shim_tensor_new(shim_storage *storage, int32_t dtype, int32_t ndim, const int64_t *shape, int64_t numel,
                    shim_tensor **out) {
  shim_tensor *t = calloc(1, sizeof *t);
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

shim_storage *shim_tensor_drop(shim_tensor *t) {
  shim_storage *storage = t->storage;
  free(t);
  return __atomic_sub_fetch(&storage->refs, 1, __ATOMIC_ACQ_REL) == 0 ? storage : NULL;
}

int shim_tensor_view(shim_tensor *src, int64_t offset, int32_t ndim, const int64_t *shape, shim_tensor **out) {
  SHIM_REQUIRE(src, "src");
  SHIM_REQUIRE(out, "out");
  int64_t numel;
  SHIM_TRY(shim_check_shape(src->dtype, ndim, shape, &numel));
  if (offset < 0 || offset > src->numel || numel > src->numel - offset) {
    char buf[128];
    return shim_fail(SHIM_E_INVALID, "shim_tensor_view: %lld elements from element %lld do not fit in %s", (long long)numel,
                     (long long)offset, shim_describe(src, buf, sizeof buf));
  }
  shim_tensor *t;
  SHIM_TRY(shim_tensor_new(src->storage, src->dtype, ndim, shape, numel, &t));
  t->offset = src->offset + offset * shim_dtype_size(src->dtype);
  *out = t;
  return SHIM_OK;
}

int shim_tensors_overlap(const shim_tensor *a, const shim_tensor *b) {
  if (a->storage != b->storage || a->numel == 0 || b->numel == 0) return 0;
  int64_t a_end = a->offset + a->numel * shim_dtype_size(a->dtype), b_end = b->offset + b->numel * shim_dtype_size(b->dtype);
  return a->offset < b_end && b->offset < a_end;
}

int shim_check_no_partial_overlap(const char *fn, const shim_tensor *out, const shim_tensor *a, const char *what) {
  if (!shim_tensors_overlap(out, a)) return SHIM_OK;
  if (out->offset == a->offset && out->numel == a->numel && out->dtype == a->dtype) return SHIM_OK;
  char bo[128], ba[128];
  return shim_fail(SHIM_E_INVALID, "%s: out %s and %s %s share some of their memory but are not the same elements (write into a clone)",
                   fn, shim_describe(out, bo, sizeof bo), what, shim_describe(a, ba, sizeof ba));
}
