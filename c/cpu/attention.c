/* attention.c: shim_attention, scaled dot-product attention in one call on the cpu. Per batch:
 * the scores q @ k^T * scale by one gemm into a scratch [L, S], then each row masked (causal,
 * bool or additive), softmaxed in place (its maximum subtracted first), and out = scores @ v by
 * a second gemm. f32 and f64 use OpenBLAS directly; f16 and bf16 convert q, k, v and the mask
 * to float scratch per batch and round the result once. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <cblas.h>

#include "cpu.h"

static int64_t at_least_1(int64_t x) { return x > 0 ? x : 1; }

/* The rows of one batch's scores [L, S], masked and softmaxed in place. madd: the additive
 * mask of this batch (or NULL), mbool: the bool one (or NULL). */
#define SOFTMAX_ROWS(NAME, T, EXP)                                                                   \
  static void NAME(T *scores, int64_t l, int64_t s, int causal, const uint8_t *mbool, const T *madd) { \
    for (int64_t i = 0; i < l; i++) {                                                                \
      T *row = scores + i * s, m = -INFINITY;                                                        \
      for (int64_t j = 0; j < s; j++) {                                                              \
        T x = row[j];                                                                                \
        if ((causal && j > i) || (mbool && !mbool[i * s + j])) x = -INFINITY;                        \
        else if (madd) x += madd[i * s + j];                                                         \
        row[j] = x;                                                                                  \
        if (x > m || x != x) m = x;                                                                  \
      }                                                                                              \
      T sum = 0;                                                                                     \
      for (int64_t j = 0; j < s; j++) sum += (row[j] = EXP(row[j] - m));                             \
      for (int64_t j = 0; j < s; j++) row[j] /= sum;                                                 \
    }                                                                                                \
  }

SOFTMAX_ROWS(softmax_rows_f32, float, expf)
SOFTMAX_ROWS(softmax_rows_f64, double, exp)

/* One batch: o [L, Ev] = softmax(mask(q [L, E] @ k [S, E]^T * scale)) @ v [S, Ev]. */
#define ATTEND(NAME, T, GEMM, SOFTMAX)                                                                     \
  static void NAME(T *o, const T *q, const T *k, const T *v, const uint8_t *mbool, const T *madd, T *scores, \
                   const shim_attention_dims *d, T scale, int causal) {                                    \
    const int64_t l = d->l, s = d->s, e = d->e, ev = d->ev;                                                \
    if (e == 0) memset(scores, 0, (size_t)(l * s) * sizeof(T));                                            \
    else GEMM(CblasRowMajor, CblasNoTrans, CblasTrans, (int)l, (int)s, (int)e, scale, q, (int)e, k, (int)e,  \
              0, scores, (int)at_least_1(s));                                                              \
    SOFTMAX(scores, l, s, causal, mbool, madd);                                                            \
    if (s == 0) memset(o, 0, (size_t)(l * ev) * sizeof(T));                                                \
    else GEMM(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)l, (int)ev, (int)s, 1, scores, (int)s, v,      \
              (int)at_least_1(ev), 0, o, (int)at_least_1(ev));                                             \
  }

ATTEND(attend_f32, float, cblas_sgemm, softmax_rows_f32)
ATTEND(attend_f64, double, cblas_dgemm, softmax_rows_f64)

int shim_attention(shim_tensor *out, const shim_tensor *q, const shim_tensor *k, const shim_tensor *v, const shim_tensor *mask,
                   double scale, int32_t causal, shim_stream *s) {
  shim_attention_dims d;
  SHIM_TRY(shim_check_attention(out, q, k, v, mask, causal, &d));
  if (out->numel == 0) return SHIM_OK;
  const int64_t qn = d.l * d.e, kn = d.s * d.e, vn = d.s * d.ev, on = d.l * d.ev, mn = d.l * d.s;
  const uint8_t *mbool = mask && d.mask_bool ? shim_cpu_data(mask) : NULL;
  const void *madd = mask && !d.mask_bool ? shim_cpu_data(mask) : NULL;
  /* Batch b's mask: the only one, or b's (in elements). */
  const int64_t mstep = d.mask_batch == 1 ? 0 : mn;
  if (q->dtype == SHIM_F64) {
    double *scores = malloc((size_t)at_least_1(mn) * sizeof(double));
    if (scores == NULL) return shim_fail(SHIM_E_NOMEM, "shim_attention: no memory for %lld scores", (long long)mn);
    const double *qd = shim_cpu_data(q), *kd = shim_cpu_data(k), *vd = shim_cpu_data(v), *ma = madd;
    double *od = shim_cpu_data(out);
    for (int64_t b = 0; b < d.batch; b++)
      attend_f64(od + b * on, qd + b * qn, kd + b * kn, vd + b * vn, mbool ? mbool + b * mstep : NULL, ma ? ma + b * mstep : NULL,
                 scores, &d, scale, causal);
    free(scores);
    return SHIM_OK;
  }
  const int narrow = q->dtype != SHIM_F32; /* f16, bf16: through float scratch */
  const int64_t scratch = mn + (narrow ? qn + kn + vn + on + (madd ? mn : 0) : 0);
  float *buf = malloc((size_t)at_least_1(scratch) * sizeof(float));
  if (buf == NULL) return shim_fail(SHIM_E_NOMEM, "shim_attention: no memory for %lld floats of scratch", (long long)scratch);
  float *scores = buf, *qf = buf + mn, *kf = qf + qn, *vf = kf + kn, *of = vf + vn, *mf = of + on;
  const int64_t size = shim_dtype_size(q->dtype);
  const char *qc = shim_cpu_data(q), *kc = shim_cpu_data(k), *vc = shim_cpu_data(v), *mc = madd;
  char *oc = shim_cpu_data(out);
  for (int64_t b = 0; b < d.batch; b++) {
    const char *mb = mc ? mc + b * mstep * size : NULL;
    const uint8_t *bb = mbool ? mbool + b * mstep : NULL;
    if (!narrow) {
      attend_f32((float *)(oc + b * on * size), (const float *)(qc + b * qn * size), (const float *)(kc + b * kn * size),
                 (const float *)(vc + b * vn * size), bb, (const float *)mb, scores, &d, (float)scale, causal);
      continue;
    }
    shim_cpu_load_f32(q->dtype, qc + b * qn * size, qn, qf);
    shim_cpu_load_f32(q->dtype, kc + b * kn * size, kn, kf);
    shim_cpu_load_f32(q->dtype, vc + b * vn * size, vn, vf);
    if (mb) shim_cpu_load_f32(q->dtype, mb, mn, mf);
    attend_f32(of, qf, kf, vf, bb, mb ? mf : NULL, scores, &d, (float)scale, causal);
    shim_cpu_store_f32(q->dtype, of, on, oc + b * on * size);
  }
  free(buf);
  return SHIM_OK;
}
