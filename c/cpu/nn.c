/* nn.c: shim_softmax and shim_layer_norm on the cpu. a is read as [outer, r, inner] around dim; each of the
 * outer x inner rows subtracts its maximum before exp (so large inputs do not overflow; a NaN
 * propagates), sums in the compute type (float; double for f64), then divides (softmax) or
 * subtracts the log of the sum (log-softmax). f16 and bf16 go through float in one pass over
 * a scratch copy. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cpu.h"
#include "vecmath.h"

/* Softmax over contiguous rows of r floats (dim is the last one, the common case): the max in
 * vector lanes (a NaN anywhere makes the row NaN), exp into out, its sum in lanes, then one
 * multiply by the reciprocal (softmax) or one subtraction (log-softmax) per element. */
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
    for (j = 0; j < r; j++) os[j] = shim_vexpf(xs[j] - m);
    for (j = 0; j + 16 <= r; j += 16) {
      shim_v16f v;
      SHIM_V16_LOAD(v, os + j);
      acc += v;
    }
    for (int k = 0; k < 16; k++) sum += acc[k];
    for (; j < r; j++) sum += os[j];
    if (take_log) {
      float shift = m + logf(sum);
      for (j = 0; j < r; j++) os[j] = xs[j] - shift;
    } else {
      float inv = 1.0f / sum;
      for (j = 0; j < r; j++) os[j] *= inv;
    }
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
          T shift = m + LOG(sum);                                                              \
          for (int64_t j = 0; j < r; j++) os[j * inner] = xs[j * inner] - shift;               \
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
