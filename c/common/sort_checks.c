/* sort_checks.c: the argument checks of the sorting and scanning ops (shim_cumulative,
 * shim_sort, shim_searchsorted), made once for both backends so a bad call fails alike on each. */
#include "internal.h"

enum { DESCRIPTION_CAP = 128 }; /* room for one shim_describe */

/* a read as [outer, r, inner] around dim (0 <= dim < ndim, or 0 for a 0-d a). */
static int line_dims(const char *fn, const shim_tensor *a, int32_t dim, shim_reduce_dims *dims) {
  char ba[DESCRIPTION_CAP];
  if (dim < 0 || dim >= (a->ndim > 0 ? a->ndim : 1))
    return shim_fail(SHIM_E_INVALID, "%s: dim %d is out of range for %s", fn, dim, shim_describe(a, ba, sizeof ba));
  dims->outer = 1, dims->r = a->ndim > 0 ? a->shape[dim] : 1, dims->inner = 1;
  for (int32_t i = 0; i < dim; i++) dims->outer *= a->shape[i];
  for (int32_t i = dim + 1; i < a->ndim; i++) dims->inner *= a->shape[i];
  return SHIM_OK;
}

/* t (named what) has dtype and a's element count and shares no memory with a. */
static int check_result(const char *fn, const shim_tensor *t, const char *what, int32_t dtype, const shim_tensor *a) {
  char bt[DESCRIPTION_CAP], ba[DESCRIPTION_CAP];
  if (t->dtype != dtype || t->numel != a->numel)
    return shim_fail(SHIM_E_INVALID, "%s: %s is %s but must be %lld elements of %s (a is %s)", fn, what, shim_describe(t, bt, sizeof bt),
                     (long long)a->numel, shim_dtype_name(dtype), shim_describe(a, ba, sizeof ba));
  if (shim_tensors_overlap(t, a)) return shim_fail(SHIM_E_INVALID, "%s: %s shares memory with a", fn, what);
  return SHIM_OK;
}

int shim_check_cumulative(int32_t op, const shim_tensor *out, const shim_tensor *indices, const shim_tensor *a, int32_t dim,
                          shim_reduce_dims *dims) {
  const char *fn = "shim_cumulative";
  SHIM_REQUIRE_IN(fn, out, "out");
  SHIM_REQUIRE_IN(fn, a, "a");
  SHIM_TRY(shim_require_contiguous(fn, out, "out"));
  SHIM_TRY(shim_require_contiguous(fn, a, "a"));
  if (op != SHIM_PROD && op != SHIM_MAX && op != SHIM_MIN) return shim_fail(SHIM_E_INVALID, "%s: op must be prod, max or min, not code %d", fn, op);
  if (op == SHIM_PROD) {
    if (indices != NULL) return shim_fail(SHIM_E_INVALID, "%s(prod): indices must be null", fn);
    char bo[DESCRIPTION_CAP];
    if (out->numel != a->numel) return shim_fail(SHIM_E_INVALID, "%s(prod): out is %s but a has %lld elements", fn, shim_describe(out, bo, sizeof bo), (long long)a->numel);
    if (shim_tensors_overlap(out, a)) return shim_fail(SHIM_E_INVALID, "%s: out shares memory with a", fn);
  } else {
    SHIM_REQUIRE_IN(fn, indices, "indices");
    SHIM_TRY(shim_require_contiguous(fn, indices, "indices"));
    SHIM_TRY(check_result(fn, out, "out", a->dtype, a));
    SHIM_TRY(check_result(fn, indices, "indices", SHIM_I64, a));
    if (shim_tensors_overlap(out, indices)) return shim_fail(SHIM_E_INVALID, "%s: out shares memory with indices", fn);
  }
  return line_dims(fn, a, dim, dims);
}

int shim_check_sort(const shim_tensor *values, const shim_tensor *indices, const shim_tensor *a, int32_t dim,
                    shim_reduce_dims *dims) {
  const char *fn = "shim_sort";
  SHIM_REQUIRE_IN(fn, values, "values");
  SHIM_REQUIRE_IN(fn, indices, "indices");
  SHIM_REQUIRE_IN(fn, a, "a");
  SHIM_TRY(shim_require_contiguous(fn, values, "values"));
  SHIM_TRY(shim_require_contiguous(fn, indices, "indices"));
  SHIM_TRY(shim_require_contiguous(fn, a, "a"));
  SHIM_TRY(check_result(fn, values, "values", a->dtype, a));
  SHIM_TRY(check_result(fn, indices, "indices", SHIM_I64, a));
  if (shim_tensors_overlap(values, indices)) return shim_fail(SHIM_E_INVALID, "%s: values share memory with indices", fn);
  return line_dims(fn, a, dim, dims);
}

int shim_check_searchsorted(const shim_tensor *out, const shim_tensor *sorted, const shim_tensor *values, shim_search_dims *dims) {
  const char *fn = "shim_searchsorted";
  SHIM_REQUIRE_IN(fn, out, "out");
  SHIM_REQUIRE_IN(fn, sorted, "sorted");
  SHIM_REQUIRE_IN(fn, values, "values");
  SHIM_TRY(shim_require_contiguous(fn, out, "out"));
  SHIM_TRY(shim_require_contiguous(fn, sorted, "sorted"));
  SHIM_TRY(shim_require_contiguous(fn, values, "values"));
  char bs[DESCRIPTION_CAP], bv[DESCRIPTION_CAP], bo[DESCRIPTION_CAP];
  shim_describe(sorted, bs, sizeof bs);
  shim_describe(values, bv, sizeof bv);
  shim_describe(out, bo, sizeof bo);
  if (sorted->dtype != values->dtype) return shim_fail(SHIM_E_INVALID, "%s: sorted %s and values %s need one dtype", fn, bs, bv);
  if ((out->dtype != SHIM_I64 && out->dtype != SHIM_I32) || out->numel != values->numel)
    return shim_fail(SHIM_E_INVALID, "%s: out is %s but must be i64 or i32 with the %lld elements of values %s", fn, bo, (long long)values->numel, bv);
  if (sorted->ndim == 0) return shim_fail(SHIM_E_INVALID, "%s: sorted %s needs at least 1 dim", fn, bs);
  dims->m = sorted->shape[sorted->ndim - 1];
  dims->shared = sorted->ndim == 1;
  if (dims->shared) {
    dims->rows = 1, dims->n = values->numel;
  } else {
    if (values->ndim != sorted->ndim) return shim_fail(SHIM_E_INVALID, "%s: sorted %s and values %s need one rank", fn, bs, bv);
    for (int32_t d = 0; d + 1 < sorted->ndim; d++)
      if (sorted->shape[d] != values->shape[d]) return shim_fail(SHIM_E_INVALID, "%s: sorted %s and values %s need the same leading dims", fn, bs, bv);
    dims->n = values->shape[values->ndim - 1];
    dims->rows = 1;
    for (int32_t d = 0; d + 1 < sorted->ndim; d++) dims->rows *= sorted->shape[d];
  }
  return SHIM_OK;
}
