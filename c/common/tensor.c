/* tensor.c: tensor headers, the same on both backends. A tensor is a dtype, shape and strides
 * over refcounted storage (internal.h); each backend allocates and frees the storage itself
 * (host or device memory), and everything that only touches headers lives here, the views
 * whole: a view shares its source's storage (from an offset into it, under its own strides),
 * so it is never a backend's business. */
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
  shim_contiguous_strides(ndim, shape, t->strides);
  t->contiguous = 1;
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
  char buf[128];
  if (!src->contiguous)
    return shim_fail(SHIM_E_INVALID, "shim_tensor_view: %s is not contiguous, so it has no flat blocks (use shim_tensor_as_strided)",
                     shim_describe(src, buf, sizeof buf));
  if (offset < 0 || offset > src->numel || numel > src->numel - offset)
    return shim_fail(SHIM_E_INVALID, "shim_tensor_view: %lld elements from element %lld do not fit in %s", (long long)numel,
                     (long long)offset, shim_describe(src, buf, sizeof buf));
  shim_tensor *t;
  SHIM_TRY(shim_tensor_new(src->storage, src->dtype, ndim, shape, numel, &t));
  t->offset = src->offset + offset * shim_dtype_size(src->dtype);
  *out = t;
  return SHIM_OK;
}

int shim_tensor_as_strided(shim_tensor *src, int32_t ndim, const int64_t *shape, const int64_t *strides, int64_t storage_offset,
                           shim_tensor **out) {
  const char *fn = "shim_tensor_as_strided";
  SHIM_REQUIRE(src, "src");
  SHIM_REQUIRE(out, "out");
  int64_t numel;
  SHIM_TRY(shim_check_shape(src->dtype, ndim, shape, &numel));
  if (ndim > 0) SHIM_REQUIRE(strides, "strides");
  const int64_t size = shim_dtype_size(src->dtype), capacity = src->storage->nbytes / size;
  for (int32_t d = 0; d < ndim; d++)
    if (strides[d] < 0) return shim_fail(SHIM_E_INVALID, "%s: stride %lld of dim %d is negative", fn, (long long)strides[d], d);
  /* The last element reached: storage_offset + sum (shape[d] - 1) * strides[d], which must lie
   * inside the storage; a view with no element reaches none, so any offset will do (torch's: a
   * slice past the end of a dim of a view further in can start past the storage's end). */
  int64_t last = storage_offset;
  int overflow = storage_offset < 0;
  for (int32_t d = 0; d < ndim && numel > 0 && !overflow; d++) {
    int64_t span;
    overflow = __builtin_mul_overflow(shape[d] - 1, strides[d], &span) || __builtin_add_overflow(last, span, &last);
  }
  if (overflow || (numel > 0 && last >= capacity)) {
    char buf[128];
    return shim_fail(SHIM_E_INVALID, "%s: a %s view from element %lld reaches element %lld, outside its storage of %lld elements (%s)", fn,
                     shim_dtype_name(src->dtype), (long long)storage_offset, overflow ? -1LL : (long long)last, (long long)capacity,
                     shim_describe(src, buf, sizeof buf));
  }
  shim_tensor *t;
  SHIM_TRY(shim_tensor_new(src->storage, src->dtype, ndim, shape, numel, &t));
  t->offset = storage_offset * size;
  if (ndim > 0) memcpy(t->strides, strides, (size_t)ndim * sizeof(int64_t));
  t->contiguous = shim_strides_contiguous(ndim, shape, strides);
  *out = t;
  return SHIM_OK;
}

int shim_tensor_layout(const shim_tensor *t, int64_t *strides, int64_t *storage_offset, int32_t *contiguous) {
  SHIM_REQUIRE(t, "t");
  if (t->ndim > 0) SHIM_REQUIRE(strides, "strides");
  SHIM_REQUIRE(storage_offset, "storage_offset");
  SHIM_REQUIRE(contiguous, "contiguous");
  if (t->ndim > 0) memcpy(strides, t->strides, (size_t)t->ndim * sizeof(int64_t));
  *storage_offset = t->offset / shim_dtype_size(t->dtype);
  *contiguous = t->contiguous;
  return SHIM_OK;
}

void shim_contiguous_strides(int32_t ndim, const int64_t *shape, int64_t *strides) {
  int64_t acc = 1;
  for (int32_t d = ndim - 1; d >= 0; d--) {
    strides[d] = acc;
    acc *= shape[d] > 1 ? shape[d] : 1;
  }
}

int shim_strides_contiguous(int32_t ndim, const int64_t *shape, const int64_t *strides) {
  for (int32_t d = 0; d < ndim; d++)
    if (shape[d] == 0) return 1; /* no elements: any strides */
  int64_t acc = 1;
  for (int32_t d = ndim - 1; d >= 0; d--) {
    if (shape[d] == 1) continue;
    if (strides[d] != acc) return 0;
    acc *= shape[d];
  }
  return 1;
}

int shim_require_contiguous(const char *fn, const shim_tensor *t, const char *what) {
  if (t == NULL || t->contiguous) return SHIM_OK;
  char buf[128];
  return shim_fail(SHIM_E_INVALID, "%s: %s %s is not contiguous (this op reads it flat: make it contiguous first)", fn, what,
                   shim_describe(t, buf, sizeof buf));
}

int shim_check_writable(const char *fn, const shim_tensor *t, const char *what) {
  /* An empty tensor has no element to share a location (torch's: it is contiguous). */
  if (t->numel == 0) return SHIM_OK;
  for (int32_t d = 0; d < t->ndim; d++)
    if (t->strides[d] == 0 && t->shape[d] > 1) {
      char buf[128];
      return shim_fail(SHIM_E_INVALID,
                       "%s: %s %s is expanded (stride 0 along dim %d): more than one of its elements refers to a single memory "
                       "location (write into a clone)",
                       fn, what, shim_describe(t, buf, sizeof buf), d);
    }
  return SHIM_OK;
}

/* The bytes from storage->data to t's lowest element and just past its highest. */
static void span(const shim_tensor *t, int64_t *begin, int64_t *end) {
  const int64_t size = shim_dtype_size(t->dtype);
  int64_t last = 0;
  for (int32_t d = 0; d < t->ndim; d++) last += (t->shape[d] - 1) * t->strides[d];
  *begin = t->offset;
  *end = t->offset + (last + 1) * size;
}

int shim_tensors_overlap(const shim_tensor *a, const shim_tensor *b) {
  if (a->storage != b->storage || a->numel == 0 || b->numel == 0) return 0;
  int64_t a_begin, a_end, b_begin, b_end;
  span(a, &a_begin, &a_end);
  span(b, &b_begin, &b_end);
  return a_begin < b_end && b_begin < a_end;
}

/* Whether a and b are the same elements in the same order: one offset and layout. */
static int same_elements(const shim_tensor *a, const shim_tensor *b) {
  if (a->offset != b->offset || a->numel != b->numel || a->dtype != b->dtype) return 0;
  if (a->contiguous && b->contiguous) return 1;
  if (a->ndim != b->ndim) return 0;
  for (int32_t d = 0; d < a->ndim; d++)
    if (a->shape[d] != b->shape[d] || (a->shape[d] > 1 && a->strides[d] != b->strides[d])) return 0;
  return 1;
}

/* As torch's assert_no_partial_overlap: two dense blocks that intersect must be the same
 * block; where either is strided the overlap is too hard to tell cheaply, and it passes. */
int shim_check_no_partial_overlap(const char *fn, const shim_tensor *out, const shim_tensor *a, const char *what) {
  if (!shim_tensors_overlap(out, a) || same_elements(out, a) || !out->contiguous || !a->contiguous) return SHIM_OK;
  char bo[128], ba[128];
  return shim_fail(SHIM_E_INVALID, "%s: out %s and %s %s share some of their memory but are not the same elements (write into a clone)",
                   fn, shim_describe(out, bo, sizeof bo), what, shim_describe(a, ba, sizeof ba));
}
