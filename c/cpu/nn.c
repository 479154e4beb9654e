/* nn.c: shim_softmax, shim_layer_norm and the fused losses on the cpu. a is read as [outer, r, inner] around dim; each of the
 * outer x inner rows subtracts its maximum before exp (so large inputs do not overflow; a NaN
 * propagates), sums in the compute type (float; double for f64), then divides (softmax) or
 * subtracts the log of the sum from x - max (log-softmax: (x - max) - log sum, as torch does;
 * x - (max + log sum) would round the log of the sum at the magnitude of the max). f16 and
 * bf16 go through float in one pass over a scratch copy. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../common/numeric.h"
#include "cpu.h"
#include "vecmath.h"

/* Softmax over contiguous rows of r floats (dim is the last one, the common case): the max in
 * vector lanes (a NaN anywhere makes the row NaN), exp into out, its sum in lanes, then one
 * multiply by the reciprocal per element; log-softmax as below. out may be x. */
SHIM_CPU_CLONES static void softmax_rows_f32(float *o, const float *x, int64_t rows, int64_t r, int take_log) {
  for (int64_t row = 0; row < rows; row++) {
    const float *xs = x + row * r;
    float *os = o + row * r;
    shim_v16f best = SHIM_V16_SPLAT(-INFINITY), acc = {0};
    shim_v16i nans = {0};
    float m = -INFINITY, sum = 0;
    int nan = 0;
    int64_t j = 0;
    for (; j + 16 <= r; j += 16) {
      shim_v16f v;
      SHIM_V16_LOAD(v, xs + j);
      nans |= v != v;
      best = SHIM_V16_SELECT(v > best, v, best);
    }
    for (int k = 0; k < 16; k++) m = best[k] > m ? best[k] : m, nan |= nans[k];
    for (; j < r; j++) m = xs[j] > m ? xs[j] : m, nan |= xs[j] != xs[j];
    if (nan) m = NAN;
    if (take_log) {
      /* x - max into out first (so out may be x, as the f16 and bf16 scratch is), the sum of
       * its exp in lanes, then the log of the sum subtracted. */
      for (j = 0; j < r; j++) os[j] = xs[j] - m;
      for (j = 0; j + 16 <= r; j += 16) {
        shim_v16f e;
        for (int k = 0; k < 16; k++) e[k] = shim_vexpf(os[j + k]);
        acc += e;
      }
      for (int k = 0; k < 16; k++) sum += acc[k];
      for (; j < r; j++) sum += shim_vexpf(os[j]);
      const float log_sum = logf(sum);
      for (j = 0; j < r; j++) os[j] -= log_sum;
      continue;
    }
    for (j = 0; j < r; j++) os[j] = shim_vexpf(xs[j] - m);
    for (j = 0; j + 16 <= r; j += 16) {
      shim_v16f v;
      SHIM_V16_LOAD(v, os + j);
      acc += v;
    }
    for (int k = 0; k < 16; k++) sum += acc[k];
    for (; j < r; j++) sum += os[j];
    const float inv = 1.0f / sum;
    for (j = 0; j < r; j++) os[j] *= inv;
  }
}

#define SOFTMAX(NAME, T, EXP, LOG)                                                             \
  static void NAME(T *o, const T *x, int64_t outer, int64_t r, int64_t inner, int take_log) {  \
    for (int64_t a = 0; a < outer; a++)                                                        \
      for (int64_t i = 0; i < inner; i++) {                                                    \
        const T *xs = x + a * r * inner + i;                                                   \
        T *os = o + a * r * inner + i;                                                         \
        T m = -INFINITY;                                                                       \
        for (int64_t j = 0; j < r; j++) {                                                      \
          T v = xs[j * inner];                                                                 \
          if (v > m || v != v) m = v;                                                          \
          if (m != m) break;                                                                   \
        }                                                                                      \
        T sum = 0;                                                                             \
        if (take_log) {                                                                        \
          for (int64_t j = 0; j < r; j++) sum += EXP(xs[j * inner] - m);                       \
          const T log_sum = LOG(sum);                                                          \
          for (int64_t j = 0; j < r; j++) os[j * inner] = (xs[j * inner] - m) - log_sum;       \
        } else {                                                                               \
          for (int64_t j = 0; j < r; j++) {                                                    \
            T e = EXP(xs[j * inner] - m);                                                      \
            os[j * inner] = e;                                                                 \
            sum += e;                                                                          \
          }                                                                                    \
          for (int64_t j = 0; j < r; j++) os[j * inner] /= sum;                                \
        }                                                                                      \
      }                                                                                        \
  }

SOFTMAX(softmax_strided_f32, float, shim_vexpf, logf)

static void softmax_f32(float *o, const float *x, int64_t outer, int64_t r, int64_t inner, int take_log) {
  if (inner == 1) softmax_rows_f32(o, x, outer, r, take_log);
  else softmax_strided_f32(o, x, outer, r, inner, take_log);
}
SOFTMAX(softmax_f64, double, exp, log)

/* A range of the outer index of softmax, or of the rows of layer_norm (parts of shim_cpu_parallel). */
typedef struct {
  int32_t dtype;
  void *o;
  const void *x, *w, *b;
  int64_t r, inner; /* layer_norm: r is the row length m */
  int log;
  double eps;
} rows_job;

static void softmax_range(void *ctx, int64_t begin, int64_t end) {
  const rows_job *j = ctx;
  const int64_t at = begin * j->r * j->inner;
  if (j->dtype == SHIM_F64) softmax_f64((double *)j->o + at, (const double *)j->x + at, end - begin, j->r, j->inner, j->log);
  else softmax_f32((float *)j->o + at, (const float *)j->x + at, end - begin, j->r, j->inner, j->log);
}

int shim_softmax(shim_tensor *out, const shim_tensor *a, int32_t dim, int32_t log, shim_stream *s) {
  shim_reduce_dims d;
  SHIM_TRY(shim_check_softmax(out, a, dim, log, &d));
  if (a->numel == 0) return SHIM_OK;
  if (!a->contiguous || !out->contiguous) { /* the flat rows over contiguous copies */
    shim_cpu_staged sa, so;
    SHIM_TRY(shim_cpu_stage("shim_softmax", a, 1, &sa));
    int status = shim_cpu_stage("shim_softmax", out, 0, &so);
    if (status == SHIM_OK) status = shim_softmax((shim_tensor *)so.t, sa.t, dim, log, s);
    shim_cpu_unstage(&so, out, status == SHIM_OK);
    shim_cpu_unstage(&sa, NULL, 0);
    return status;
  }
  rows_job job = {a->dtype, shim_cpu_data(out), shim_cpu_data(a), NULL, NULL, d.r, d.inner, log, 0};
  float *buf = NULL;
  if (a->dtype != SHIM_F32 && a->dtype != SHIM_F64) { /* f16, bf16: through float */
    buf = malloc((size_t)a->numel * sizeof(float));
    if (buf == NULL) return shim_fail(SHIM_E_NOMEM, "shim_softmax: no memory for %lld floats", (long long)a->numel);
    shim_cpu_load_f32(a->dtype, shim_cpu_data(a), a->numel, buf);
    job.o = buf, job.x = buf;
  }
  shim_cpu_parallel(d.outer, SHIM_CPU_GRAIN / (d.r * d.inner) + 1, softmax_range, &job);
  if (buf != NULL) {
    shim_cpu_store_f32(a->dtype, buf, a->numel, shim_cpu_data(out));
    free(buf);
  }
  return SHIM_OK;
}

/* Layer norm of contiguous rows of m floats: the mean, then the variance of the deviations,
 * both summed in double lanes, then one pass writing (x - mean) * rstd * w + b in float. */
SHIM_CPU_CLONES static void layer_norm_rows_f32(float *o, const float *x, int64_t rows, int64_t m, const float *w, const float *b,
                                                float eps) {
  for (int64_t row = 0; row < rows; row++) {
    const float *xs = x + row * m;
    float *os = o + row * m;
    shim_v8d acc = {0};
    double sum = 0, sq = 0;
    int64_t j = 0;
    for (; j + 8 <= m; j += 8) {
      shim_v8f v;
      memcpy(&v, xs + j, sizeof v);
      acc += __builtin_convertvector(v, shim_v8d);
    }
    for (int k = 0; k < 8; k++) sum += acc[k];
    for (; j < m; j++) sum += xs[j];
    const double mean = sum / (double)m;
    shim_v8d dev = {0};
    for (j = 0; j + 8 <= m; j += 8) {
      shim_v8f v;
      memcpy(&v, xs + j, sizeof v);
      shim_v8d d = __builtin_convertvector(v, shim_v8d) - mean;
      dev += d * d;
    }
    for (int k = 0; k < 8; k++) sq += dev[k];
    for (; j < m; j++) sq += ((double)xs[j] - mean) * ((double)xs[j] - mean);
    const float rstd = (float)(1.0 / sqrt(sq / (double)m + (double)eps)), fmean = (float)mean;
    if (w != NULL && b != NULL)
      for (j = 0; j < m; j++) os[j] = (xs[j] - fmean) * rstd * w[j] + b[j];
    else if (w != NULL)
      for (j = 0; j < m; j++) os[j] = (xs[j] - fmean) * rstd * w[j];
    else if (b != NULL)
      for (j = 0; j < m; j++) os[j] = (xs[j] - fmean) * rstd + b[j];
    else
      for (j = 0; j < m; j++) os[j] = (xs[j] - fmean) * rstd;
  }
}

static void layer_norm_rows_f64(double *o, const double *x, int64_t rows, int64_t m, const double *w, const double *b,
                                double eps) {
  for (int64_t row = 0; row < rows; row++) {
    const double *xs = x + row * m;
    double *os = o + row * m, sum = 0, sq = 0;
    for (int64_t j = 0; j < m; j++) sum += xs[j];
    const double mean = sum / (double)m;
    for (int64_t j = 0; j < m; j++) sq += (xs[j] - mean) * (xs[j] - mean);
    const double rstd = 1.0 / sqrt(sq / (double)m + eps);
    for (int64_t j = 0; j < m; j++) os[j] = (xs[j] - mean) * rstd * (w ? w[j] : 1.0) + (b ? b[j] : 0.0);
  }
}

static void layer_norm_range(void *ctx, int64_t begin, int64_t end) {
  const rows_job *j = ctx;
  const int64_t at = begin * j->r;
  if (j->dtype == SHIM_F64)
    layer_norm_rows_f64((double *)j->o + at, (const double *)j->x + at, end - begin, j->r, j->w, j->b, j->eps);
  else
    layer_norm_rows_f32((float *)j->o + at, (const float *)j->x + at, end - begin, j->r, j->w, j->b, (float)j->eps);
}

/* f16 and bf16: a, weight and bias widened into one float buffer, the result rounded once. */
static int layer_norm_half(shim_tensor *out, const shim_tensor *a, const shim_tensor *weight, const shim_tensor *bias, int64_t rows,
                           int64_t m, double eps) {
  const int32_t dt = a->dtype;
  float *buf = malloc((size_t)(a->numel + 2 * m) * sizeof(float));
  if (buf == NULL) return shim_fail(SHIM_E_NOMEM, "shim_layer_norm: no memory for %lld floats", (long long)(a->numel + 2 * m));
  float *w = buf + a->numel, *b = w + m;
  shim_cpu_load_f32(dt, shim_cpu_data(a), a->numel, buf);
  if (weight) shim_cpu_load_f32(dt, shim_cpu_data(weight), m, w);
  if (bias) shim_cpu_load_f32(dt, shim_cpu_data(bias), m, b);
  rows_job job = {SHIM_F32, buf, buf, weight ? w : NULL, bias ? b : NULL, m, 1, 0, eps};
  shim_cpu_parallel(rows, SHIM_CPU_GRAIN / m + 1, layer_norm_range, &job);
  shim_cpu_store_f32(dt, buf, a->numel, shim_cpu_data(out));
  free(buf);
  return SHIM_OK;
}

int shim_layer_norm(shim_tensor *out, const shim_tensor *a, const shim_tensor *weight, const shim_tensor *bias, int64_t m, double eps,
                    shim_stream *s) {
  int64_t rows;
  SHIM_TRY(shim_check_layer_norm(out, a, weight, bias, m, &rows));
  if (a->numel == 0) return SHIM_OK;
  if (a->dtype != SHIM_F32 && a->dtype != SHIM_F64) return layer_norm_half(out, a, weight, bias, rows, m, eps);
  rows_job job = {a->dtype, shim_cpu_data(out), shim_cpu_data(a), weight ? shim_cpu_data(weight) : NULL, bias ? shim_cpu_data(bias) : NULL,
                  m, 1, 0, eps};
  shim_cpu_parallel(rows, SHIM_CPU_GRAIN / m + 1, layer_norm_range, &job);
  return SHIM_OK;
}

/* ---- the fused losses: one pass, sums in double, the result rounded once ---------------- */

/* Element i of a floating tensor's data as double. */
static inline double float_at(int32_t dtype, const void *base, int64_t i) {
  switch (dtype) {
    case SHIM_F32: return ((const float *)base)[i];
    case SHIM_F64: return ((const double *)base)[i];
    case SHIM_F16: return shim_f16_to_f32(((const uint16_t *)base)[i]);
    default: return shim_bf16_to_f32(((const uint16_t *)base)[i]);
  }
}

/* Element i of a floating tensor's data = v, rounded once. */
static inline void store_at(int32_t dtype, void *base, int64_t i, double v) {
  if (dtype == SHIM_F32) ((float *)base)[i] = (float)v;
  else if (dtype == SHIM_F64) ((double *)base)[i] = v;
  else shim_cpu_from_f64(dtype, v, (uint16_t *)base + i);
}

/* out = the sum or mean (total / count) of a loss, rounded once to its dtype. */
static void store_reduced(shim_tensor *out, int32_t reduction, double total, double count) {
  shim_cpu_from_f64(out->dtype, reduction == SHIM_LOSS_MEAN ? total / count : total, shim_cpu_data(out));
}

/* The nll loop for one dtype (a constant where it is inlined, so float_at's switch folds):
 * each loss into o (when not NULL), their sum and the weights' sum into sums[0], sums[1]; a
 * target that is no class and not ignore_index makes it return its element's index + 1. */
static inline __attribute__((always_inline)) int64_t nll_rows(int32_t dtype, void *o, const void *x, const int64_t *t, const void *w,
                                                               shim_nll_dims d, int64_t ignore, double *sums) {
  double total = 0, weights = 0;
  for (int64_t row = 0, i = 0; row < d.n; row++)
    for (int64_t k = 0; k < d.inner; k++, i++) {
      const int64_t c = t[i];
      if (c == ignore) {
        if (o != NULL) store_at(dtype, o, i, 0.0);
        continue;
      }
      if (c < 0 || c >= d.c) return i + 1;
      const double wt = w != NULL ? float_at(dtype, w, c) : 1.0, loss = -wt * float_at(dtype, x, (row * d.c + c) * d.inner + k);
      total += loss, weights += wt;
      if (o != NULL) store_at(dtype, o, i, loss);
    }
  sums[0] = total, sums[1] = weights;
  return 0;
}

int shim_nll_loss(shim_tensor *out, const shim_tensor *input, const shim_tensor *target, const shim_tensor *weight,
                  int64_t ignore_index, int32_t reduction, shim_stream *s) {
  shim_nll_dims d;
  SHIM_TRY(shim_check_nll_loss(out, input, target, weight, reduction, &d));
  const int64_t *t = shim_cpu_data(target);
  /* Each loss goes straight to out only once every target is known to be good; a sum or mean
   * checks them in its one pass (out is written after it). */
  void *o = NULL;
  int64_t bad = 0;
  if (reduction == SHIM_LOSS_NONE) {
    for (int64_t i = 0; i < target->numel && bad == 0; i++)
      if (t[i] != ignore_index && (t[i] < 0 || t[i] >= d.c)) bad = i + 1;
    o = shim_cpu_data(out);
  }
  const void *x = shim_cpu_data(input), *w = weight ? shim_cpu_data(weight) : NULL;
  double sums[2];
  if (bad == 0) switch (input->dtype) {
      case SHIM_F32: bad = nll_rows(SHIM_F32, o, x, t, w, d, ignore_index, sums); break;
      case SHIM_F64: bad = nll_rows(SHIM_F64, o, x, t, w, d, ignore_index, sums); break;
      case SHIM_F16: bad = nll_rows(SHIM_F16, o, x, t, w, d, ignore_index, sums); break;
      default: bad = nll_rows(SHIM_BF16, o, x, t, w, d, ignore_index, sums); break;
    }
  if (bad != 0)
    return shim_fail(SHIM_E_INVALID, "shim_nll_loss: target %lld (element %lld) is not a class of 0..%lld nor ignore_index %lld",
                     (long long)t[bad - 1], (long long)(bad - 1), (long long)(d.c - 1), (long long)ignore_index);
  if (reduction != SHIM_LOSS_NONE) store_reduced(out, reduction, sums[0], sums[1]);
  return SHIM_OK;
}

/* mse_loss in blocks of a fixed size, each summed on its own and the blocks' sums added in
 * order, so the result does not depend on the thread count. */
enum { MSE_BLOCK = 1 << 14 };

/* (a - b)^2 over n floats: into o (SHIM_LOSS_NONE), else their sum in double lanes. */
SHIM_CPU_CLONES static double mse_f32(float *o, const float *a, const float *b, int64_t n) {
  int64_t i = 0;
  if (o != NULL) {
    for (; i < n; i++) {
      const float d = a[i] - b[i];
      o[i] = d * d;
    }
    return 0;
  }
  shim_v8d acc0 = {0}, acc1 = {0};
  for (; i + 16 <= n; i += 16) {
    shim_v8f x0, x1, y0, y1;
    memcpy(&x0, a + i, sizeof x0), memcpy(&x1, a + i + 8, sizeof x1);
    memcpy(&y0, b + i, sizeof y0), memcpy(&y1, b + i + 8, sizeof y1);
    const shim_v8f d0 = x0 - y0, d1 = x1 - y1;
    acc0 += __builtin_convertvector(d0 * d0, shim_v8d);
    acc1 += __builtin_convertvector(d1 * d1, shim_v8d);
  }
  double sum = 0;
  for (; i < n; i++) {
    const float d = a[i] - b[i];
    sum += (double)(d * d);
  }
  acc0 += acc1;
  for (int k = 0; k < 8; k++) sum += acc0[k];
  return sum;
}

static double mse_f64(double *o, const double *a, const double *b, int64_t n) {
  double sum = 0;
  for (int64_t i = 0; i < n; i++) {
    const double d = a[i] - b[i];
    if (o != NULL) o[i] = d * d;
    else sum += d * d;
  }
  return sum;
}

/* f16 and bf16: through float, a chunk at a time. */
static double mse_half(int32_t dtype, uint16_t *o, const uint16_t *a, const uint16_t *b, int64_t n) {
  float fa[SHIM_CPU_CHUNK], fb[SHIM_CPU_CHUNK];
  double sum = 0;
  for (int64_t base = 0; base < n; base += SHIM_CPU_CHUNK) {
    const int64_t m = shim_cpu_min64(SHIM_CPU_CHUNK, n - base);
    shim_cpu_load_f32(dtype, a + base, m, fa);
    shim_cpu_load_f32(dtype, b + base, m, fb);
    sum += mse_f32(o != NULL ? fa : NULL, fa, fb, m);
    if (o != NULL) shim_cpu_store_f32(dtype, fa, m, o + base);
  }
  return sum;
}

typedef struct {
  int32_t dtype;
  const char *a, *b;
  char *o;        /* SHIM_LOSS_NONE's squares, else NULL */
  double *sums;   /* one per block, else NULL */
  int64_t n, size;
} mse_job;

static void mse_range(void *ctx, int64_t begin, int64_t end) {
  const mse_job *j = ctx;
  for (int64_t blk = begin; blk < end; blk++) {
    const int64_t at = blk * MSE_BLOCK, m = shim_cpu_min64(MSE_BLOCK, j->n - at), off = at * j->size;
    void *o = j->o ? j->o + off : NULL;
    double sum;
    if (j->dtype == SHIM_F32) sum = mse_f32(o, (const float *)(j->a + off), (const float *)(j->b + off), m);
    else if (j->dtype == SHIM_F64) sum = mse_f64(o, (const double *)(j->a + off), (const double *)(j->b + off), m);
    else sum = mse_half(j->dtype, o, (const uint16_t *)(j->a + off), (const uint16_t *)(j->b + off), m);
    if (j->sums) j->sums[blk] = sum;
  }
}

int shim_mse_loss(shim_tensor *out, const shim_tensor *a, const shim_tensor *b, int32_t reduction, shim_stream *s) {
  SHIM_TRY(shim_check_mse_loss(out, a, b, reduction));
  const int64_t n = a->numel, blocks = (n + MSE_BLOCK - 1) / MSE_BLOCK;
  double local[64], *sums = NULL;
  if (reduction != SHIM_LOSS_NONE) {
    sums = blocks <= 64 ? local : malloc((size_t)blocks * sizeof *sums);
    if (sums == NULL) return shim_fail(SHIM_E_NOMEM, "shim_mse_loss: no memory for %lld block sums", (long long)blocks);
  }
  mse_job job = {a->dtype, shim_cpu_data(a), shim_cpu_data(b), reduction == SHIM_LOSS_NONE ? shim_cpu_data(out) : NULL, sums, n,
                 shim_dtype_size(a->dtype)};
  shim_cpu_parallel(blocks, SHIM_CPU_GRAIN / MSE_BLOCK + 1, mse_range, &job);
  if (sums == NULL) return SHIM_OK;
  double total = 0;
  for (int64_t blk = 0; blk < blocks; blk++) total += sums[blk];
  if (sums != local) free(sums);
  store_reduced(out, reduction, total, (double)n);
  return SHIM_OK;
}
