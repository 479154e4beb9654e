/* checks.c: the argument and shape checks of the tensor ops, made once for both backends, so a
 * bad call fails alike on each (tests/cuda/parity.test.ts holds them to it). Each check runs
 * before the op reads or writes tensor memory; what it derives from the shapes (a matmul's
 * batch and sizes, a reduction's or transpose's blocks) it hands back, so the backends do not
 * derive it again. */
#include <stdio.h>

#include "internal.h"

static int is_float(int32_t dtype) { return dtype <= SHIM_BF16; }

enum { DESCRIPTION_CAP = 128 }; /* room for one shim_describe */

int shim_check_copy(const char *fn, const shim_tensor *t, const void *host, const char *host_name, int64_t nbytes) {
  SHIM_REQUIRE_IN(fn, t, "t");
  int64_t expected = t->numel * shim_dtype_size(t->dtype);
  if (nbytes != expected) {
    char buf[DESCRIPTION_CAP];
    return shim_fail(SHIM_E_INVALID, "%s: %lld bytes for %s, which holds %lld", fn, (long long)nbytes,
                     shim_describe(t, buf, sizeof buf), (long long)expected);
  }
  if (nbytes > 0) SHIM_REQUIRE_IN(fn, host, host_name);
  return SHIM_OK;
}

int shim_check_rand(const shim_tensor *out, int32_t normal) {
  SHIM_REQUIRE_IN("shim_rand", out, "out");
  if (!is_float(out->dtype))
    return shim_fail(SHIM_E_UNSUPPORTED, "shim_rand: out must have a floating dtype, not %s", shim_dtype_name(out->dtype));
  if (normal != 0 && normal != 1) return shim_fail(SHIM_E_INVALID, "shim_rand: normal must be 0 or 1, not %d", normal);
  return SHIM_OK;
}

int shim_check_unary(int32_t op, const shim_tensor *out, const shim_tensor *a) {
  SHIM_REQUIRE_IN("shim_unary", out, "out");
  SHIM_REQUIRE_IN("shim_unary", a, "a");
  const shim_op_row *row = shim_unary_row(op);
  if (row == NULL) return shim_fail(SHIM_E_INVALID, "shim_unary: unknown op code %d", op);
  const char *name = row->name;
  char bo[DESCRIPTION_CAP], ba[DESCRIPTION_CAP];
  int predicate = (row->flags & SHIM_OPF_WRITES_BOOL) != 0;
  if (out->dtype != (predicate ? SHIM_BOOL : a->dtype) || out->numel != a->numel)
    return shim_fail(SHIM_E_INVALID, "shim_unary(%s): out is %s but a is %s (%s and the same element count needed)", name,
                     shim_describe(out, bo, sizeof bo), shim_describe(a, ba, sizeof ba), predicate ? "bool" : "a's dtype");
  if (!shim_op_defined_on(row, a->dtype))
    return shim_fail(SHIM_E_UNSUPPORTED, "shim_unary(%s): not defined on %s (cast to a floating dtype first)", name,
                     shim_dtype_name(a->dtype));
  return shim_check_no_partial_overlap("shim_unary", out, a, "a");
}

/* What every binary op needs of op, dtype and out, the result having n elements. */
static int check_binary_result(const char *fn, int32_t op, int32_t dtype, const shim_tensor *out, int64_t n) {
  const shim_op_row *row = shim_binary_row(op);
  if (row == NULL) return shim_fail(SHIM_E_INVALID, "%s: unknown op code %d", fn, op);
  const char *name = row->name;
  if (!shim_op_defined_on(row, dtype))
    return shim_fail(SHIM_E_UNSUPPORTED, "%s(%s): not defined on %s (cast to %s first)", fn, name, shim_dtype_name(dtype),
                     dtype == SHIM_BOOL && (row->flags & SHIM_OPF_INT) ? "an integer or floating dtype" : "a floating dtype");
  int32_t want = row->flags & SHIM_OPF_WRITES_BOOL ? SHIM_BOOL : dtype;
  char buf[DESCRIPTION_CAP];
  if (out->dtype != want)
    return shim_fail(SHIM_E_INVALID, "%s(%s): out is %s but must be %s", fn, name, shim_describe(out, buf, sizeof buf),
                     shim_dtype_name(want));
  if (out->numel != n)
    return shim_fail(SHIM_E_INVALID, "%s(%s): out is %s but the result has %lld elements", fn, name,
                     shim_describe(out, buf, sizeof buf), (long long)n);
  return SHIM_OK;
}

int shim_check_binary(int32_t op, const shim_tensor *out, const shim_tensor *a, const shim_tensor *b, int64_t *n) {
  SHIM_REQUIRE_IN("shim_binary", out, "out");
  SHIM_REQUIRE_IN("shim_binary", a, "a");
  SHIM_REQUIRE_IN("shim_binary", b, "b");
  const shim_op_row *row = shim_binary_row(op);
  const char *name = row != NULL ? row->name : "?";
  char ba[DESCRIPTION_CAP], bb[DESCRIPTION_CAP];
  if (a->dtype != b->dtype)
    return shim_fail(SHIM_E_INVALID, "shim_binary(%s): dtypes differ: a is %s, b is %s", name,
                     shim_describe(a, ba, sizeof ba), shim_describe(b, bb, sizeof bb));
  const int64_t small = a->numel < b->numel ? a->numel : b->numel, big = a->numel < b->numel ? b->numel : a->numel;
  if (a->numel != b->numel && a->numel != 1 && b->numel != 1 && (small == 0 || big % small != 0))
    return shim_fail(SHIM_E_INVALID, "shim_binary(%s): sizes differ and neither repeats to the other's: a is %s, b is %s", name,
                     shim_describe(a, ba, sizeof ba), shim_describe(b, bb, sizeof bb));
  *n = a->numel == 1 ? b->numel : b->numel == 1 ? a->numel : big;
  SHIM_TRY(check_binary_result("shim_binary", op, a->dtype, out, *n));
  SHIM_TRY(shim_check_no_partial_overlap("shim_binary", out, a, "a"));
  return shim_check_no_partial_overlap("shim_binary", out, b, "b");
}

int shim_check_binary_scalar(int32_t op, const shim_tensor *out, const shim_tensor *a) {
  SHIM_REQUIRE_IN("shim_binary_scalar", out, "out");
  SHIM_REQUIRE_IN("shim_binary_scalar", a, "a");
  SHIM_TRY(check_binary_result("shim_binary_scalar", op, a->dtype, out, a->numel));
  return shim_check_no_partial_overlap("shim_binary_scalar", out, a, "a");
}

int shim_fail_bad_operand(const char *fn, int32_t op, int32_t dtype, const char *what) {
  if (shim_is_division(op))
    return shim_fail(SHIM_E_INVALID, "%s(%s): integer division by zero (%s has a zero element)", fn, shim_binary_row(op)->name, what);
  return shim_fail(SHIM_E_INVALID, "%s(pow): %s integer to a negative power (%s has a negative element)", fn,
                   shim_dtype_name(dtype), what);
}

int shim_check_ternary(int32_t op, const shim_tensor *out, const shim_tensor *a, const shim_tensor *b,
                       const shim_tensor *c) {
  const char *fn = "shim_ternary";
  SHIM_REQUIRE_IN(fn, out, "out");
  SHIM_REQUIRE_IN(fn, a, "a");
  SHIM_REQUIRE_IN(fn, b, "b");
  SHIM_REQUIRE_IN(fn, c, "c");
  const shim_op_row *row = shim_ternary_row(op);
  if (row == NULL) return shim_fail(SHIM_E_INVALID, "%s: unknown op code %d", fn, op);
  const char *name = row->name;
  char bo[DESCRIPTION_CAP], ba[DESCRIPTION_CAP], bb[DESCRIPTION_CAP], bc[DESCRIPTION_CAP];
  shim_describe(out, bo, sizeof bo);
  shim_describe(a, ba, sizeof ba);
  shim_describe(b, bb, sizeof bb);
  shim_describe(c, bc, sizeof bc);
  if (b->dtype != out->dtype || c->dtype != out->dtype || (op != SHIM_WHERE && a->dtype != out->dtype))
    return shim_fail(SHIM_E_INVALID, "%s(%s): dtypes differ: out %s, a %s, b %s, c %s", fn, name, bo, ba, bb, bc);
  int64_t n = out->numel;
  if ((a->numel != n && a->numel != 1) || (b->numel != n && b->numel != 1) || (c->numel != n && c->numel != 1))
    return shim_fail(SHIM_E_INVALID, "%s(%s): each operand needs out's %lld elements or one: a %s, b %s, c %s", fn, name,
                     (long long)n, ba, bb, bc);
  if (!shim_op_defined_on(row, out->dtype))
    return shim_fail(SHIM_E_UNSUPPORTED, "%s(%s): not defined on %s", fn, name, shim_dtype_name(out->dtype));
  SHIM_TRY(shim_check_no_partial_overlap(fn, out, a, "a"));
  SHIM_TRY(shim_check_no_partial_overlap(fn, out, b, "b"));
  return shim_check_no_partial_overlap(fn, out, c, "c");
}

int shim_check_reduce(int32_t op, const shim_tensor *out, const shim_tensor *a, int32_t dim, shim_reduce_dims *dims) {
  SHIM_REQUIRE_IN("shim_reduce", out, "out");
  SHIM_REQUIRE_IN("shim_reduce", a, "a");
  const shim_op_row *row = shim_reduce_row(op);
  if (row == NULL) return shim_fail(SHIM_E_INVALID, "shim_reduce: unknown op code %d", op);
  const char *name = row->name;
  char ba[DESCRIPTION_CAP], bo[DESCRIPTION_CAP];
  if (!shim_op_defined_on(row, a->dtype))
    return shim_fail(SHIM_E_UNSUPPORTED, "shim_reduce(%s): not defined on %s (cast to a floating dtype first)", name,
                     shim_describe(a, ba, sizeof ba));
  if (dim != SHIM_ALL_DIMS && (dim < 0 || dim >= a->ndim))
    return shim_fail(SHIM_E_INVALID, "shim_reduce(%s): dim %d is out of range for a %s", name, dim,
                     shim_describe(a, ba, sizeof ba));
  int64_t outer = 1, r = a->numel, inner = 1;
  if (dim != SHIM_ALL_DIMS) {
    r = a->shape[dim];
    for (int32_t i = 0; i < dim; i++) outer *= a->shape[i];
    for (int32_t i = dim + 1; i < a->ndim; i++) inner *= a->shape[i];
  }
  if (out->numel != outer * inner) {
    char which[32];
    if (dim == SHIM_ALL_DIMS) snprintf(which, sizeof which, "all dims");
    else snprintf(which, sizeof which, "dim %d", dim);
    return shim_fail(SHIM_E_INVALID, "shim_reduce(%s): out is %s but reducing %s of %s leaves %lld elements", name,
                     shim_describe(out, bo, sizeof bo), which, shim_describe(a, ba, sizeof ba),
                     (long long)(outer * inner));
  }
  if (r == 0 && (op == SHIM_MAX || op == SHIM_MIN))
    return shim_fail(SHIM_E_INVALID, "shim_reduce(%s): the reduced dim of %s is empty and %s has no identity", name,
                     shim_describe(a, ba, sizeof ba), name);
  dims->outer = outer;
  dims->r = r;
  dims->inner = inner;
  return SHIM_OK;
}

int shim_check_argreduce(int32_t op, const shim_tensor *indices, const shim_tensor *a, int32_t dim, shim_reduce_dims *dims) {
  const char *fn = "shim_argreduce";
  SHIM_REQUIRE_IN(fn, indices, "indices");
  SHIM_REQUIRE_IN(fn, a, "a");
  if (op != SHIM_MAX && op != SHIM_MIN) return shim_fail(SHIM_E_INVALID, "%s: op must be max or min, not code %d", fn, op);
  char bi[DESCRIPTION_CAP], ba[DESCRIPTION_CAP];
  shim_describe(indices, bi, sizeof bi);
  shim_describe(a, ba, sizeof ba);
  if (indices->dtype != SHIM_I64) return shim_fail(SHIM_E_INVALID, "%s: indices is %s, not i64", fn, bi);
  if (dim != SHIM_ALL_DIMS && (dim < 0 || dim >= a->ndim))
    return shim_fail(SHIM_E_INVALID, "%s: dim %d is out of range for a %s", fn, dim, ba);
  dims->outer = 1, dims->r = a->numel, dims->inner = 1;
  if (dim != SHIM_ALL_DIMS) {
    dims->r = a->shape[dim];
    for (int32_t i = 0; i < dim; i++) dims->outer *= a->shape[i];
    for (int32_t i = dim + 1; i < a->ndim; i++) dims->inner *= a->shape[i];
  }
  if (indices->numel != dims->outer * dims->inner)
    return shim_fail(SHIM_E_INVALID, "%s: indices is %s but reducing %s leaves %lld elements", fn, bi, ba,
                     (long long)(dims->outer * dims->inner));
  if (dims->r == 0 && indices->numel > 0)
    return shim_fail(SHIM_E_INVALID, "%s(%s): the reduced dim of %s is empty", fn, shim_reduce_row(op)->name, ba);
  return SHIM_OK;
}

int shim_check_cumsum(const shim_tensor *out, const shim_tensor *a, int32_t dim, shim_reduce_dims *dims) {
  const char *fn = "shim_cumsum";
  SHIM_REQUIRE_IN(fn, out, "out");
  SHIM_REQUIRE_IN(fn, a, "a");
  char bo[DESCRIPTION_CAP], ba[DESCRIPTION_CAP];
  shim_describe(out, bo, sizeof bo);
  shim_describe(a, ba, sizeof ba);
  if (out->numel != a->numel) return shim_fail(SHIM_E_INVALID, "%s: out is %s but a is %s", fn, bo, ba);
  if (dim < 0 || dim >= (a->ndim > 0 ? a->ndim : 1)) return shim_fail(SHIM_E_INVALID, "%s: dim %d is out of range for %s", fn, dim, ba);
  if (shim_tensors_overlap(out, a)) return shim_fail(SHIM_E_INVALID, "%s: out %s shares memory with a", fn, bo);
  dims->outer = 1, dims->r = a->ndim > 0 ? a->shape[dim] : 1, dims->inner = 1;
  for (int32_t i = 0; i < dim; i++) dims->outer *= a->shape[i];
  for (int32_t i = dim + 1; i < a->ndim; i++) dims->inner *= a->shape[i];
  return SHIM_OK;
}

int shim_check_matmul(const shim_tensor *out, const shim_tensor *a, const shim_tensor *b, int32_t transpose,
                      shim_matmul_dims *dims) {
  SHIM_REQUIRE_IN("shim_matmul", out, "out");
  SHIM_REQUIRE_IN("shim_matmul", a, "a");
  SHIM_REQUIRE_IN("shim_matmul", b, "b");
  char ba[DESCRIPTION_CAP], bb[DESCRIPTION_CAP], bo[DESCRIPTION_CAP];
  shim_describe(a, ba, sizeof ba);
  shim_describe(b, bb, sizeof bb);
  shim_describe(out, bo, sizeof bo);
  if (a->dtype != b->dtype || out->dtype != a->dtype)
    return shim_fail(SHIM_E_INVALID, "shim_matmul: dtypes differ: %s @ %s -> %s", ba, bb, bo);
  if (a->ndim < 2 || b->ndim < 2)
    return shim_fail(SHIM_E_INVALID, "shim_matmul: operands need at least 2 dims: %s @ %s", ba, bb);
  if ((transpose & ~(SHIM_MATMUL_TRANSPOSE_A | SHIM_MATMUL_TRANSPOSE_B)) != 0)
    return shim_fail(SHIM_E_INVALID, "shim_matmul: unknown transpose flags 0x%x", (unsigned)transpose);
  int b_batched = b->ndim > 2;
  int32_t nd = a->ndim;
  const int ta = (transpose & SHIM_MATMUL_TRANSPOSE_A) != 0, tb = (transpose & SHIM_MATMUL_TRANSPOSE_B) != 0;
  if (b_batched && b->ndim != nd)
    return shim_fail(SHIM_E_INVALID, "shim_matmul: b must be 2-D or have a's %d dims: %s @ %s", nd, ba, bb);
  int64_t m = a->shape[nd - 2 + ta], k = a->shape[nd - 1 - ta], n = b->shape[b->ndim - 1 - tb], batch = 1;
  if (b->shape[b->ndim - 2 + tb] != k)
    return shim_fail(SHIM_E_INVALID, "shim_matmul: inner dims differ: %s%s @ %s%s", ba, ta ? "^T" : "", bb, tb ? "^T" : "");
  for (int32_t i = 0; i < nd - 2; i++) {
    if (b_batched && b->shape[i] != a->shape[i])
      return shim_fail(SHIM_E_INVALID, "shim_matmul: batch dim %d differs: %s @ %s", i, ba, bb);
    batch *= a->shape[i];
  }
  int out_ok = out->ndim == nd && out->shape[nd - 2] == m && out->shape[nd - 1] == n;
  for (int32_t i = 0; out_ok && i < nd - 2; i++) out_ok = out->shape[i] == a->shape[i];
  if (!out_ok)
    return shim_fail(SHIM_E_INVALID, "shim_matmul: out is %s but %s @ %s needs [..., %lld, %lld]", bo, ba, bb,
                     (long long)m, (long long)n);
  if (shim_tensors_overlap(out, a) || shim_tensors_overlap(out, b))
    return shim_fail(SHIM_E_INVALID, "shim_matmul: out %s shares memory with an operand", bo);
  dims->batch = batch;
  dims->m = m;
  dims->k = k;
  dims->n = n;
  dims->b_batched = b_batched;
  dims->ta = ta;
  dims->tb = tb;
  return SHIM_OK;
}

int shim_check_cast(const shim_tensor *out, const shim_tensor *a) {
  SHIM_REQUIRE_IN("shim_cast", out, "out");
  SHIM_REQUIRE_IN("shim_cast", a, "a");
  if (out->numel != a->numel) {
    char bo[DESCRIPTION_CAP], ba[DESCRIPTION_CAP];
    return shim_fail(SHIM_E_INVALID, "shim_cast: out %s does not hold a's %lld elements (a is %s)",
                     shim_describe(out, bo, sizeof bo), (long long)a->numel, shim_describe(a, ba, sizeof ba));
  }
  return shim_check_no_partial_overlap("shim_cast", out, a, "a");
}

int shim_check_transpose(const shim_tensor *out, const shim_tensor *a, int32_t dim0, int32_t dim1,
                         shim_transpose_dims *dims) {
  SHIM_REQUIRE_IN("shim_transpose", out, "out");
  SHIM_REQUIRE_IN("shim_transpose", a, "a");
  char ba[DESCRIPTION_CAP], bo[DESCRIPTION_CAP];
  shim_describe(a, ba, sizeof ba);
  shim_describe(out, bo, sizeof bo);
  if (dim0 < 0 || dim0 >= a->ndim || dim1 < 0 || dim1 >= a->ndim)
    return shim_fail(SHIM_E_INVALID, "shim_transpose: dims %d and %d are out of range for a %s", dim0, dim1, ba);
  int out_ok = out->dtype == a->dtype && out->ndim == a->ndim;
  for (int32_t i = 0; out_ok && i < a->ndim; i++)
    out_ok = out->shape[i] == a->shape[i == dim0 ? dim1 : i == dim1 ? dim0 : i];
  if (!out_ok)
    return shim_fail(SHIM_E_INVALID, "shim_transpose: out is %s but swapping dims %d and %d of %s gives another dtype or shape",
                     bo, dim0, dim1, ba);
  if (dim0 != dim1 && shim_tensors_overlap(out, a))
    return shim_fail(SHIM_E_INVALID, "shim_transpose: out %s shares memory with a", bo);
  int32_t d0 = dim0 < dim1 ? dim0 : dim1, d1 = dim0 < dim1 ? dim1 : dim0;
  dims->before = 1;
  dims->between = 1;
  dims->after = 1;
  for (int32_t i = 0; i < d0; i++) dims->before *= a->shape[i];
  for (int32_t i = d0 + 1; i < d1; i++) dims->between *= a->shape[i];
  for (int32_t i = d1 + 1; i < a->ndim; i++) dims->after *= a->shape[i];
  dims->s0 = a->shape[d0];
  dims->s1 = a->shape[d1];
  return SHIM_OK;
}

/* The lowest and highest element offsets that offset + sum i_d * strides[d] reaches over shape. */
static void reach(int64_t offset, const int64_t *strides, const int64_t *shape, int32_t ndim, int64_t *lo, int64_t *hi) {
  *lo = *hi = offset;
  for (int32_t d = 0; d < ndim; d++) {
    int64_t span = (shape[d] - 1) * strides[d];
    if (span < 0) *lo += span;
    else *hi += span;
  }
}

int shim_check_copy_strided(const shim_tensor *dst, int64_t dst_offset, const int64_t *dst_strides, const shim_tensor *src,
                            int64_t src_offset, const int64_t *src_strides, int32_t ndim, const int64_t *shape,
                            shim_strided_plan *plan) {
  const char *fn = "shim_copy_strided";
  SHIM_REQUIRE_IN(fn, dst, "dst");
  SHIM_REQUIRE_IN(fn, src, "src");
  if (ndim < 0 || ndim > SHIM_MAX_DIMS) return shim_fail(SHIM_E_INVALID, "%s: ndim %d outside 0..%d", fn, ndim, SHIM_MAX_DIMS);
  if (ndim > 0) {
    SHIM_REQUIRE_IN(fn, shape, "shape");
    SHIM_REQUIRE_IN(fn, dst_strides, "dst_strides");
    SHIM_REQUIRE_IN(fn, src_strides, "src_strides");
  }
  char bd[DESCRIPTION_CAP], bs[DESCRIPTION_CAP];
  if (dst->dtype != src->dtype)
    return shim_fail(SHIM_E_INVALID, "%s: dtypes differ: dst is %s, src is %s", fn, shim_describe(dst, bd, sizeof bd),
                     shim_describe(src, bs, sizeof bs));
  int64_t numel = 1;
  for (int32_t d = 0; d < ndim; d++) {
    if (shape[d] < 0) return shim_fail(SHIM_E_INVALID, "%s: shape[%d] is %lld", fn, d, (long long)shape[d]);
    numel *= shape[d];
  }
  plan->numel = numel;
  plan->ndim = 0;
  plan->dst_offset = dst_offset;
  plan->src_offset = src_offset;
  if (numel == 0) return SHIM_OK;
  if (shim_tensors_overlap(dst, src)) return shim_fail(SHIM_E_INVALID, "%s: dst and src share memory", fn);
  int64_t lo, hi;
  reach(dst_offset, dst_strides, shape, ndim, &lo, &hi);
  if (lo < 0 || hi >= dst->numel)
    return shim_fail(SHIM_E_INVALID, "%s: the copy writes elements %lld..%lld of %s", fn, (long long)lo, (long long)hi,
                     shim_describe(dst, bd, sizeof bd));
  reach(src_offset, src_strides, shape, ndim, &lo, &hi);
  if (lo < 0 || hi >= src->numel)
    return shim_fail(SHIM_E_INVALID, "%s: the copy reads elements %lld..%lld of %s", fn, (long long)lo, (long long)hi,
                     shim_describe(src, bs, sizeof bs));
  /* Drop size-1 dims, then merge d into the dim after it when both sides step through d as
   * one run of the inner dim (stride[d] == stride[d+1] * shape[d+1]). */
  for (int32_t d = 0; d < ndim; d++) {
    if (shape[d] == 1) continue;
    int32_t k = plan->ndim;
    if (k > 0 && plan->dst_strides[k - 1] == dst_strides[d] * shape[d] && plan->src_strides[k - 1] == src_strides[d] * shape[d]) {
      plan->shape[k - 1] *= shape[d];
      plan->dst_strides[k - 1] = dst_strides[d];
      plan->src_strides[k - 1] = src_strides[d];
      continue;
    }
    plan->shape[k] = shape[d];
    plan->dst_strides[k] = dst_strides[d];
    plan->src_strides[k] = src_strides[d];
    plan->ndim = k + 1;
  }
  return SHIM_OK;
}

int shim_check_gather(const shim_tensor *out, const shim_tensor *a, int32_t dim, const shim_tensor *index) {
  const char *fn = "shim_gather";
  SHIM_REQUIRE_IN(fn, out, "out");
  SHIM_REQUIRE_IN(fn, a, "a");
  SHIM_REQUIRE_IN(fn, index, "index");
  char ba[DESCRIPTION_CAP], bi[DESCRIPTION_CAP], bo[DESCRIPTION_CAP];
  shim_describe(a, ba, sizeof ba);
  shim_describe(index, bi, sizeof bi);
  if (index->dtype != SHIM_I64) return shim_fail(SHIM_E_INVALID, "%s: index is %s, not i64", fn, bi);
  if (index->ndim != a->ndim) return shim_fail(SHIM_E_INVALID, "%s: index %s and a %s have different ranks", fn, bi, ba);
  if (dim < 0 || dim >= (a->ndim > 0 ? a->ndim : 1)) return shim_fail(SHIM_E_INVALID, "%s: dim %d is out of range for %s", fn, dim, ba);
  for (int32_t d = 0; d < a->ndim; d++)
    if (d != dim && index->shape[d] > a->shape[d])
      return shim_fail(SHIM_E_INVALID, "%s: index %s is larger than a %s in dim %d", fn, bi, ba, d);
  if (out->dtype != a->dtype || out->ndim != index->ndim || out->numel != index->numel)
    return shim_fail(SHIM_E_INVALID, "%s: out is %s but must be %s with index's shape %s", fn, shim_describe(out, bo, sizeof bo),
                     shim_dtype_name(a->dtype), bi);
  for (int32_t d = 0; d < out->ndim; d++)
    if (out->shape[d] != index->shape[d])
      return shim_fail(SHIM_E_INVALID, "%s: out is %s but must have index's shape %s", fn, shim_describe(out, bo, sizeof bo), bi);
  if (index->numel > 0 && a->ndim > 0 && a->shape[dim] == 0)
    return shim_fail(SHIM_E_INVALID, "%s: a %s is empty along dim %d", fn, ba, dim);
  return SHIM_OK;
}

/* a read as [outer, r, inner] around dim (a 0-d a as [1, 1, 1]). */
static void around(const shim_tensor *a, int32_t dim, shim_reduce_dims *dims) {
  dims->outer = 1;
  dims->r = a->ndim > 0 ? a->shape[dim] : 1;
  dims->inner = 1;
  for (int32_t i = 0; i < dim; i++) dims->outer *= a->shape[i];
  for (int32_t i = dim + 1; i < a->ndim; i++) dims->inner *= a->shape[i];
}

int shim_check_softmax(const shim_tensor *out, const shim_tensor *a, int32_t dim, int32_t log, shim_reduce_dims *dims) {
  const char *fn = log ? "shim_softmax(log)" : "shim_softmax";
  SHIM_REQUIRE_IN(fn, out, "out");
  SHIM_REQUIRE_IN(fn, a, "a");
  char ba[DESCRIPTION_CAP], bo[DESCRIPTION_CAP];
  shim_describe(a, ba, sizeof ba);
  if (log != 0 && log != 1) return shim_fail(SHIM_E_INVALID, "%s: log must be 0 or 1, not %d", fn, log);
  if (!is_float(a->dtype)) return shim_fail(SHIM_E_UNSUPPORTED, "%s: not defined on %s (cast to a floating dtype first)", fn, ba);
  if (out->dtype != a->dtype || out->numel != a->numel)
    return shim_fail(SHIM_E_INVALID, "%s: out is %s but a is %s (same dtype and element count needed)", fn,
                     shim_describe(out, bo, sizeof bo), ba);
  if (dim < 0 || dim >= (a->ndim > 0 ? a->ndim : 1)) return shim_fail(SHIM_E_INVALID, "%s: dim %d is out of range for %s", fn, dim, ba);
  around(a, dim, dims);
  return SHIM_OK;
}

int shim_check_layer_norm(const shim_tensor *out, const shim_tensor *a, const shim_tensor *weight, const shim_tensor *bias,
                          int64_t m, int64_t *rows) {
  const char *fn = "shim_layer_norm";
  SHIM_REQUIRE_IN(fn, out, "out");
  SHIM_REQUIRE_IN(fn, a, "a");
  char ba[DESCRIPTION_CAP], bo[DESCRIPTION_CAP];
  shim_describe(a, ba, sizeof ba);
  if (!is_float(a->dtype)) return shim_fail(SHIM_E_UNSUPPORTED, "%s: not defined on %s (cast to a floating dtype first)", fn, ba);
  if (m <= 0 || a->numel % m != 0)
    return shim_fail(SHIM_E_INVALID, "%s: %lld elements per row do not divide %s", fn, (long long)m, ba);
  if (out->dtype != a->dtype || out->numel != a->numel)
    return shim_fail(SHIM_E_INVALID, "%s: out is %s but a is %s (same dtype and element count needed)", fn,
                     shim_describe(out, bo, sizeof bo), ba);
  const shim_tensor *params[2] = {weight, bias};
  for (int i = 0; i < 2; i++)
    if (params[i] != NULL && (params[i]->dtype != a->dtype || params[i]->numel != m))
      return shim_fail(SHIM_E_INVALID, "%s: %s is %s but must be %lld elements of %s", fn, i == 0 ? "weight" : "bias",
                       shim_describe(params[i], bo, sizeof bo), (long long)m, shim_dtype_name(a->dtype));
  *rows = a->numel / m;
  return SHIM_OK;
}

int shim_check_index_select(const shim_tensor *out, const shim_tensor *a, int32_t dim, const shim_tensor *index,
                            shim_reduce_dims *dims) {
  const char *fn = "shim_index_select";
  SHIM_REQUIRE_IN(fn, out, "out");
  SHIM_REQUIRE_IN(fn, a, "a");
  SHIM_REQUIRE_IN(fn, index, "index");
  char ba[DESCRIPTION_CAP], bi[DESCRIPTION_CAP], bo[DESCRIPTION_CAP];
  shim_describe(a, ba, sizeof ba);
  shim_describe(index, bi, sizeof bi);
  if (index->dtype != SHIM_I64 || index->ndim > 1) return shim_fail(SHIM_E_INVALID, "%s: index is %s, not 0-D or 1-D i64", fn, bi);
  if (dim < 0 || dim >= (a->ndim > 0 ? a->ndim : 1)) return shim_fail(SHIM_E_INVALID, "%s: dim %d is out of range for %s", fn, dim, ba);
  around(a, dim, dims);
  if (out->dtype != a->dtype || out->numel != dims->outer * index->numel * dims->inner)
    return shim_fail(SHIM_E_INVALID, "%s: out is %s but must be %s with %lld entries along dim %d of %s", fn,
                     shim_describe(out, bo, sizeof bo), shim_dtype_name(a->dtype), (long long)index->numel, dim, ba);
  return SHIM_OK;
}
