/* layout_checks.c: the argument and shape checks of the layout family's fused ops (triangles,
 * scatter, cat, index_add), made once for both backends like checks.c's: each runs before the
 * op touches tensor memory and hands back what it derived from the shapes. */
#include "internal.h"

enum { CAP = 128 }; /* room for one shim_describe */

int shim_check_triangle(const shim_tensor *out, const shim_tensor *a, int32_t upper, shim_matrix_dims *dims) {
  const char *fn = upper ? "shim_triangle(triu)" : "shim_triangle(tril)";
  SHIM_REQUIRE_IN(fn, out, "out");
  SHIM_REQUIRE_IN(fn, a, "a");
  char ba[CAP], bo[CAP];
  if (upper != 0 && upper != 1) return shim_fail(SHIM_E_INVALID, "%s: upper must be 0 or 1, not %d", fn, upper);
  if (a->ndim < 2) return shim_fail(SHIM_E_INVALID, "%s: a %s needs at least 2 dims", fn, shim_describe(a, ba, sizeof ba));
  if (out->dtype != a->dtype || out->numel != a->numel)
    return shim_fail(SHIM_E_INVALID, "%s: out is %s but a is %s (same dtype and element count needed)", fn,
                     shim_describe(out, bo, sizeof bo), shim_describe(a, ba, sizeof ba));
  dims->rows = a->shape[a->ndim - 2];
  dims->cols = a->shape[a->ndim - 1];
  dims->batch = dims->rows * dims->cols == 0 ? 0 : a->numel / (dims->rows * dims->cols);
  return SHIM_OK;
}

int shim_check_scatter(int32_t op, const shim_tensor *out, int32_t dim, const shim_tensor *index, const shim_tensor *src,
                       shim_scatter_dims *dims) {
  const char *fn = op == SHIM_SCATTER_ADD ? "shim_scatter(add)" : "shim_scatter";
  SHIM_REQUIRE_IN(fn, out, "out");
  SHIM_REQUIRE_IN(fn, index, "index");
  SHIM_REQUIRE_IN(fn, src, "src");
  char bo[CAP], bi[CAP], bs[CAP];
  shim_describe(out, bo, sizeof bo);
  shim_describe(index, bi, sizeof bi);
  shim_describe(src, bs, sizeof bs);
  if (op != SHIM_SCATTER_ASSIGN && op != SHIM_SCATTER_ADD) return shim_fail(SHIM_E_INVALID, "shim_scatter: unknown op code %d", op);
  if (index->dtype != SHIM_I64) return shim_fail(SHIM_E_INVALID, "%s: index is %s, not i64", fn, bi);
  if (src->dtype != out->dtype) return shim_fail(SHIM_E_INVALID, "%s: src %s and out %s need one dtype", fn, bs, bo);
  if (index->ndim != out->ndim || src->ndim != out->ndim)
    return shim_fail(SHIM_E_INVALID, "%s: index %s, src %s and out %s need one rank", fn, bi, bs, bo);
  if (dim < 0 || dim >= (out->ndim > 0 ? out->ndim : 1)) return shim_fail(SHIM_E_INVALID, "%s: dim %d is out of range for %s", fn, dim, bo);
  for (int32_t d = 0; d < out->ndim; d++)
    if (index->shape[d] > src->shape[d] || (d != dim && index->shape[d] > out->shape[d]))
      return shim_fail(SHIM_E_INVALID, "%s: index %s is larger than src %s, or than out %s outside dim %d", fn, bi, bs, bo, dim);
  dims->ndim = out->ndim;
  dims->dim = dim;
  dims->r = out->ndim > 0 ? out->shape[dim] : 1;
  int64_t so = 1, ss = 1;
  for (int32_t d = out->ndim - 1; d >= 0; d--) {
    dims->shape[d] = index->shape[d];
    dims->out_stride[d] = so;
    dims->src_stride[d] = ss;
    so *= out->shape[d];
    ss *= src->shape[d];
  }
  if (index->numel > 0 && dims->r == 0) return shim_fail(SHIM_E_INVALID, "%s: out %s is empty along dim %d", fn, bo, dim);
  if (shim_tensors_overlap(out, src) || shim_tensors_overlap(out, index))
    return shim_fail(SHIM_E_INVALID, "%s: out %s shares memory with src or index (write into a clone)", fn, bo);
  return SHIM_OK;
}

int shim_check_cat(const shim_tensor *out, int32_t count, const shim_tensor *const *parts, int32_t dim, int64_t *outer,
                   int64_t *inner) {
  const char *fn = "shim_cat";
  SHIM_REQUIRE_IN(fn, out, "out");
  SHIM_REQUIRE_IN(fn, parts, "parts");
  char bo[CAP], bp[CAP];
  shim_describe(out, bo, sizeof bo);
  if (count < 1) return shim_fail(SHIM_E_INVALID, "%s: %d parts (at least one is needed)", fn, count);
  if (dim < 0 || dim >= out->ndim) return shim_fail(SHIM_E_INVALID, "%s: dim %d is out of range for out %s", fn, dim, bo);
  int64_t along = 0;
  for (int32_t k = 0; k < count; k++) {
    const shim_tensor *p = parts[k];
    if (p == NULL) return shim_fail(SHIM_E_INVALID, "%s: part %d is NULL", fn, k);
    int fits = p->dtype == out->dtype && p->ndim == out->ndim;
    for (int32_t d = 0; fits && d < out->ndim; d++) fits = d == dim || p->shape[d] == out->shape[d];
    if (!fits)
      return shim_fail(SHIM_E_INVALID, "%s: part %d %s does not fit out %s (one dtype and rank, equal sizes but along dim %d)", fn, k,
                       shim_describe(p, bp, sizeof bp), bo, dim);
    along += p->shape[dim];
  }
  if (along != out->shape[dim])
    return shim_fail(SHIM_E_INVALID, "%s: the parts hold %lld along dim %d but out %s holds %lld", fn, (long long)along, dim, bo,
                     (long long)out->shape[dim]);
  *outer = 1, *inner = 1;
  for (int32_t d = 0; d < dim; d++) *outer *= out->shape[d];
  for (int32_t d = dim + 1; d < out->ndim; d++) *inner *= out->shape[d];
  return SHIM_OK;
}

/* A dim's size, a 0-d tensor read as [1]. */
static int64_t size_at(const shim_tensor *t, int32_t d) { return t->ndim > 0 ? t->shape[d] : 1; }

int shim_check_index_add(const shim_tensor *out, int32_t dim, const shim_tensor *index, const shim_tensor *src,
                         shim_reduce_dims *dims) {
  const char *fn = "shim_index_add";
  SHIM_REQUIRE_IN(fn, out, "out");
  SHIM_REQUIRE_IN(fn, index, "index");
  SHIM_REQUIRE_IN(fn, src, "src");
  char bo[CAP], bi[CAP], bs[CAP];
  shim_describe(out, bo, sizeof bo);
  shim_describe(index, bi, sizeof bi);
  shim_describe(src, bs, sizeof bs);
  if (index->dtype != SHIM_I64 || index->ndim > 1) return shim_fail(SHIM_E_INVALID, "%s: index is %s, not 0-D or 1-D i64", fn, bi);
  if (src->dtype != out->dtype) return shim_fail(SHIM_E_INVALID, "%s: src %s and out %s need one dtype", fn, bs, bo);
  const int32_t rank = out->ndim > 0 ? out->ndim : 1;
  if (dim < 0 || dim >= rank) return shim_fail(SHIM_E_INVALID, "%s: dim %d is out of range for %s", fn, dim, bo);
  if ((src->ndim > 0 ? src->ndim : 1) != rank) return shim_fail(SHIM_E_INVALID, "%s: src %s and out %s need one rank", fn, bs, bo);
  for (int32_t d = 0; d < rank; d++)
    if (size_at(src, d) != (d == dim ? index->numel : size_at(out, d)))
      return shim_fail(SHIM_E_INVALID, "%s: src %s must be out %s with index %s's count along dim %d", fn, bs, bo, bi, dim);
  dims->outer = 1, dims->r = size_at(out, dim), dims->inner = 1;
  for (int32_t d = 0; d < dim; d++) dims->outer *= out->shape[d];
  for (int32_t d = dim + 1; d < out->ndim; d++) dims->inner *= out->shape[d];
  if (index->numel > 0 && dims->r == 0) return shim_fail(SHIM_E_INVALID, "%s: out %s is empty along dim %d", fn, bo, dim);
  return SHIM_OK;
}
