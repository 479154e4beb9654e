/* tensor.c: tensor headers, the same on both backends. A tensor is a dtype and shape over
 * refcounted storage (internal.h); each backend allocates and frees the storage itself (host
 * or device memory), and everything that only touches headers lives here, shim_tensor_view
 * whole: a view shares its source's storage, so it is never a backend's business. */
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

int shim_tensor_view(shim_tensor *src, int32_t ndim, const int64_t *shape, shim_tensor **out) {
  SHIM_REQUIRE(src, "src");
  SHIM_REQUIRE(out, "out");
  int64_t numel;
  SHIM_TRY(shim_check_shape(src->dtype, ndim, shape, &numel));
  if (numel != src->numel) {
    char buf[128];
    return shim_fail(SHIM_E_INVALID, "shim_tensor_view: %lld elements cannot view %s", (long long)numel,
                     shim_describe(src, buf, sizeof buf));
  }
  return shim_tensor_new(src->storage, src->dtype, ndim, shape, numel, out);
}
