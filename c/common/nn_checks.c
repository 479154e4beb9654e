/* nn_checks.c: the argument and shape checks of the nn family's fused ops (attention, rms_norm,
 * dropout, the losses), made once for both backends like checks.c's: each runs before the op
 * touches tensor memory and hands back what it derived from the shapes. */
#include "internal.h"

enum { CAP = 128 }; /* room for one shim_describe */

static int is_float(int32_t dtype) { return dtype <= SHIM_BF16; }

int shim_check_attention(const shim_tensor *out, const shim_tensor *q, const shim_tensor *k, const shim_tensor *v,
                         const shim_tensor *mask, int32_t causal, shim_attention_dims *dims) {
  const char *fn = "shim_attention";
  SHIM_REQUIRE_IN(fn, out, "out");
  SHIM_REQUIRE_IN(fn, q, "q");
  SHIM_REQUIRE_IN(fn, k, "k");
  SHIM_REQUIRE_IN(fn, v, "v");
  char bq[CAP], bk[CAP], bv[CAP], bo[CAP], bm[CAP];
  shim_describe(q, bq, sizeof bq);
  shim_describe(k, bk, sizeof bk);
  shim_describe(v, bv, sizeof bv);
  shim_describe(out, bo, sizeof bo);
  if (causal != 0 && causal != 1) return shim_fail(SHIM_E_INVALID, "%s: causal must be 0 or 1, not %d", fn, causal);
  if (!is_float(q->dtype)) return shim_fail(SHIM_E_UNSUPPORTED, "%s: q %s is not floating", fn, bq);
  if (q->ndim != 3 || k->ndim != 3 || v->ndim != 3 || out->ndim != 3)
    return shim_fail(SHIM_E_INVALID, "%s: q %s, k %s, v %s and out %s must be 3-D [batch, length, dim]", fn, bq, bk, bv, bo);
  if (k->dtype != q->dtype || v->dtype != q->dtype || out->dtype != q->dtype)
    return shim_fail(SHIM_E_INVALID, "%s: q %s, k %s, v %s and out %s need one dtype", fn, bq, bk, bv, bo);
  const int64_t b = q->shape[0], l = q->shape[1], e = q->shape[2], s = k->shape[1], ev = v->shape[2];
  if (k->shape[0] != b || v->shape[0] != b || k->shape[2] != e || v->shape[1] != s)
    return shim_fail(SHIM_E_INVALID, "%s: q %s, k %s and v %s do not fit [B, L, E], [B, S, E], [B, S, Ev]", fn, bq, bk, bv);
  if (out->shape[0] != b || out->shape[1] != l || out->shape[2] != ev)
    return shim_fail(SHIM_E_INVALID, "%s: out is %s but must be [%lld, %lld, %lld]", fn, bo, (long long)b, (long long)l,
                     (long long)ev);
  dims->batch = b, dims->l = l, dims->s = s, dims->e = e, dims->ev = ev, dims->mask_batch = 0, dims->mask_bool = 0;
  if (mask != NULL) {
    shim_describe(mask, bm, sizeof bm);
    if (mask->dtype != SHIM_BOOL && mask->dtype != q->dtype)
      return shim_fail(SHIM_E_INVALID, "%s: mask %s must be bool or q's %s", fn, bm, shim_dtype_name(q->dtype));
    if (mask->ndim != 3 || (mask->shape[0] != 1 && mask->shape[0] != b) || mask->shape[1] != l || mask->shape[2] != s)
      return shim_fail(SHIM_E_INVALID, "%s: mask %s must be [1 or %lld, %lld, %lld]", fn, bm, (long long)b, (long long)l,
                       (long long)s);
    dims->mask_batch = mask->shape[0];
    dims->mask_bool = mask->dtype == SHIM_BOOL;
  }
  return SHIM_OK;
}

int shim_check_rms_norm(const shim_tensor *out, const shim_tensor *a, const shim_tensor *weight, int64_t inner,
                        int64_t *rows) {
  const char *fn = "shim_rms_norm";
  SHIM_REQUIRE_IN(fn, out, "out");
  SHIM_REQUIRE_IN(fn, a, "a");
  char ba[CAP], bo[CAP], bw[CAP];
  shim_describe(a, ba, sizeof ba);
  if (!is_float(a->dtype)) return shim_fail(SHIM_E_UNSUPPORTED, "%s: not defined on %s (cast to a floating dtype first)", fn, ba);
  if (out->dtype != a->dtype || out->numel != a->numel)
    return shim_fail(SHIM_E_INVALID, "%s: out is %s but a is %s (same dtype and element count needed)", fn,
                     shim_describe(out, bo, sizeof bo), ba);
  if (inner <= 0 || a->numel % inner != 0)
    return shim_fail(SHIM_E_INVALID, "%s: inner %lld does not divide %s", fn, (long long)inner, ba);
  if (weight != NULL && (weight->dtype != a->dtype || weight->numel != inner))
    return shim_fail(SHIM_E_INVALID, "%s: weight is %s but must be %lld elements of %s", fn,
                     shim_describe(weight, bw, sizeof bw), (long long)inner, shim_dtype_name(a->dtype));
  *rows = a->numel / inner;
  return SHIM_OK;
}

int shim_check_dropout(const shim_tensor *out, const shim_tensor *mask, const shim_tensor *a, double p) {
  const char *fn = "shim_dropout";
  SHIM_REQUIRE_IN(fn, out, "out");
  SHIM_REQUIRE_IN(fn, mask, "mask");
  SHIM_REQUIRE_IN(fn, a, "a");
  char ba[CAP], bo[CAP], bm[CAP];
  shim_describe(a, ba, sizeof ba);
  if (!is_float(a->dtype)) return shim_fail(SHIM_E_UNSUPPORTED, "%s: not defined on %s (cast to a floating dtype first)", fn, ba);
  if (!(p >= 0.0 && p <= 1.0)) return shim_fail(SHIM_E_INVALID, "%s: p must be in [0, 1], not %g", fn, p);
  if (out->dtype != a->dtype || out->numel != a->numel || mask->dtype != SHIM_BOOL || mask->numel != a->numel)
    return shim_fail(SHIM_E_INVALID, "%s: out %s and mask %s must be %s and bool with a's element count (a is %s)", fn,
                     shim_describe(out, bo, sizeof bo), shim_describe(mask, bm, sizeof bm), shim_dtype_name(a->dtype), ba);
  return SHIM_OK;
}

static int check_reduction(const char *fn, int32_t reduction) {
  if (reduction < SHIM_LOSS_NONE || reduction > SHIM_LOSS_MEAN)
    return shim_fail(SHIM_E_INVALID, "%s: reduction %d is not SHIM_LOSS_NONE, SUM or MEAN", fn, reduction);
  return SHIM_OK;
}

/* out's count for a loss over count elements: each (none) or one. */
static int check_loss_out(const char *fn, const shim_tensor *out, int32_t dtype, int32_t reduction, int64_t count) {
  char bo[CAP];
  const int64_t want = reduction == SHIM_LOSS_NONE ? count : 1;
  if (out->dtype != dtype || out->numel != want)
    return shim_fail(SHIM_E_INVALID, "%s: out is %s but must be %lld elements of %s", fn, shim_describe(out, bo, sizeof bo),
                     (long long)want, shim_dtype_name(dtype));
  return SHIM_OK;
}

int shim_check_nll_loss(const shim_tensor *out, const shim_tensor *input, const shim_tensor *target, const shim_tensor *weight,
                        int32_t reduction, shim_nll_dims *dims) {
  const char *fn = "shim_nll_loss";
  SHIM_REQUIRE_IN(fn, out, "out");
  SHIM_REQUIRE_IN(fn, input, "input");
  SHIM_REQUIRE_IN(fn, target, "target");
  SHIM_TRY(check_reduction(fn, reduction));
  char bi[CAP], bt[CAP], bw[CAP];
  shim_describe(input, bi, sizeof bi);
  shim_describe(target, bt, sizeof bt);
  if (!is_float(input->dtype)) return shim_fail(SHIM_E_UNSUPPORTED, "%s: input %s is not floating", fn, bi);
  if (target->dtype != SHIM_I64) return shim_fail(SHIM_E_INVALID, "%s: target %s must hold class indices (i64)", fn, bt);
  /* [C] with a 0-d target is one row; [N, C, d...] with target [N, d...]. */
  if (input->ndim == 0) return shim_fail(SHIM_E_INVALID, "%s: input %s must be [C] or [N, C, d...]", fn, bi);
  const int64_t n = input->ndim == 1 ? 1 : input->shape[0], c = input->shape[input->ndim == 1 ? 0 : 1];
  int64_t inner = 1;
  for (int32_t d = 2; d < input->ndim; d++) inner *= input->shape[d];
  if (target->numel != n * inner)
    return shim_fail(SHIM_E_INVALID, "%s: target %s does not fit input %s ([N, C, d...] with [N, d...], or [C] with one)", fn, bt, bi);
  if (weight != NULL && (weight->dtype != input->dtype || weight->numel != c))
    return shim_fail(SHIM_E_INVALID, "%s: weight is %s but must be %lld elements of %s", fn, shim_describe(weight, bw, sizeof bw),
                     (long long)c, shim_dtype_name(input->dtype));
  SHIM_TRY(check_loss_out(fn, out, input->dtype, reduction, target->numel));
  dims->n = n, dims->c = c, dims->inner = inner;
  return SHIM_OK;
}

int shim_check_mse_loss(const shim_tensor *out, const shim_tensor *a, const shim_tensor *b, int32_t reduction) {
  const char *fn = "shim_mse_loss";
  SHIM_REQUIRE_IN(fn, out, "out");
  SHIM_REQUIRE_IN(fn, a, "a");
  SHIM_REQUIRE_IN(fn, b, "b");
  SHIM_TRY(check_reduction(fn, reduction));
  char ba[CAP], bb[CAP];
  shim_describe(a, ba, sizeof ba);
  if (!is_float(a->dtype)) return shim_fail(SHIM_E_UNSUPPORTED, "%s: a %s is not floating", fn, ba);
  if (b->dtype != a->dtype || b->numel != a->numel)
    return shim_fail(SHIM_E_INVALID, "%s: a %s and b %s need one dtype and element count", fn, ba, shim_describe(b, bb, sizeof bb));
  return check_loss_out(fn, out, a->dtype, reduction, a->numel);
}
