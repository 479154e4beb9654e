/* norm.c: shim_rms_norm on the cpu: per run of `inner` elements, the mean of squares summed
 * in double, then each element times 1 / sqrt(mean + eps) and the weight, in float (double for
 * f64); f16 and bf16 go through float scratch one row at a time. */
#include <math.h>
#include <stdlib.h>

#include "cpu.h"

#define RMS_ROW(NAME, T)                                                              \
  static void NAME(T *o, const T *x, const T *w, int64_t n, double eps) {             \
    double ss = 0;                                                                    \
    for (int64_t i = 0; i < n; i++) ss += (double)x[i] * (double)x[i];                \
    const T r = (T)(1.0 / sqrt(ss / (double)n + eps));                                \
    for (int64_t i = 0; i < n; i++) o[i] = w ? x[i] * r * w[i] : x[i] * r;            \
  }

RMS_ROW(rms_row_f32, float)
RMS_ROW(rms_row_f64, double)

int shim_rms_norm(shim_tensor *out, const shim_tensor *a, const shim_tensor *weight, int64_t inner, double eps, shim_stream *s) {
  int64_t rows;
  SHIM_TRY(shim_check_rms_norm(out, a, weight, inner, &rows));
  if (a->numel == 0) return SHIM_OK;
  if (a->dtype == SHIM_F64 || a->dtype == SHIM_F32) {
    const int wide = a->dtype == SHIM_F64;
    const int64_t size = wide ? 8 : 4;
    char *o = shim_cpu_data(out);
    const char *x = shim_cpu_data(a), *w = weight ? shim_cpu_data(weight) : NULL;
    for (int64_t r = 0; r < rows; r++) {
      if (wide) rms_row_f64((double *)(o + r * inner * size), (const double *)(x + r * inner * size), (const double *)w, inner, eps);
      else rms_row_f32((float *)(o + r * inner * size), (const float *)(x + r * inner * size), (const float *)w, inner, eps);
    }
    return SHIM_OK;
  }
  float *buf = malloc((size_t)(inner * (weight ? 2 : 1)) * sizeof(float));
  if (buf == NULL) return shim_fail(SHIM_E_NOMEM, "shim_rms_norm: no memory for %lld floats", (long long)inner);
  float *wf = weight ? buf + inner : NULL;
  if (weight) shim_cpu_load_f32(a->dtype, shim_cpu_data(weight), inner, wf);
  const int64_t size = shim_dtype_size(a->dtype);
  for (int64_t r = 0; r < rows; r++) {
    shim_cpu_load_f32(a->dtype, (const char *)shim_cpu_data(a) + r * inner * size, inner, buf);
    rms_row_f32(buf, buf, wf, inner, eps);
    shim_cpu_store_f32(a->dtype, buf, inner, (char *)shim_cpu_data(out) + r * inner * size);
  }
  free(buf);
  return SHIM_OK;
}
