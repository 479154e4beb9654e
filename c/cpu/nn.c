/* nn.c: shim_softmax on the cpu. a is read as [outer, r, inner] around dim; each of the
 * outer x inner rows subtracts its maximum before exp (so large inputs do not overflow; a NaN
 * propagates), sums in the compute type (float; double for f64), then divides (softmax) or
 * subtracts the log of the sum (log-softmax). f16 and bf16 go through float in one pass over
 * a scratch copy. */
#include <math.h>
#include <stdlib.h>

#include "cpu.h"

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

SOFTMAX(softmax_f32, float, expf, logf)
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
