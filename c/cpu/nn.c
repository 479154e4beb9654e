/* nn.c: shim_softmax on the cpu. a is read as [outer, r, inner] around dim; each of the
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

int shim_softmax(shim_tensor *out, const shim_tensor *a, int32_t dim, int32_t log, shim_stream *s) {
  shim_reduce_dims d;
  SHIM_TRY(shim_check_softmax(out, a, dim, log, &d));
  if (a->numel == 0) return SHIM_OK;
  switch (a->dtype) {
    case SHIM_F32: softmax_f32(shim_cpu_data(out), shim_cpu_data(a), d.outer, d.r, d.inner, log); break;
    case SHIM_F64: softmax_f64(shim_cpu_data(out), shim_cpu_data(a), d.outer, d.r, d.inner, log); break;
    default: { /* f16, bf16 */
      float *buf = malloc((size_t)a->numel * sizeof(float));
      if (buf == NULL) return shim_fail(SHIM_E_NOMEM, "shim_softmax: no memory for %lld floats", (long long)a->numel);
      shim_cpu_load_f32(a->dtype, shim_cpu_data(a), a->numel, buf);
      softmax_f32(buf, buf, d.outer, d.r, d.inner, log);
      shim_cpu_store_f32(a->dtype, buf, a->numel, shim_cpu_data(out));
      free(buf);
    }
  }
  return SHIM_OK;
}
