/* dropout.c: shim_dropout on the cpu. Element i's draw is c/common/numeric.h's uniform at
 * (seed, offset + i), the one shim_rand and the cuda kernel use, so both backends drop the same
 * elements; kept ones are scaled by 1 / (1 - p) in float (double for f64). */
#include "../common/numeric.h"
#include "cpu.h"

int shim_dropout(shim_tensor *out, shim_tensor *mask, const shim_tensor *a, double p, uint64_t seed, uint64_t offset,
                 shim_stream *s) {
  SHIM_TRY(shim_check_dropout(out, mask, a, p));
  uint8_t *m = shim_cpu_data(mask);
  const double scale = p < 1.0 ? 1.0 / (1.0 - p) : 0.0;
  for (int64_t i = 0; i < a->numel; i++) m[i] = shim_uniform_at(seed, offset + (uint64_t)i) >= p;
  if (a->dtype == SHIM_F64) {
    double *o = shim_cpu_data(out);
    const double *x = shim_cpu_data(a);
    for (int64_t i = 0; i < a->numel; i++) o[i] = m[i] ? x[i] * scale : 0.0;
    return SHIM_OK;
  }
  const float fs = (float)scale;
  const int64_t size = shim_dtype_size(a->dtype);
  float tmp[SHIM_CPU_CHUNK];
  for (int64_t base = 0; base < a->numel; base += SHIM_CPU_CHUNK) {
    const int64_t n = shim_cpu_min64(SHIM_CPU_CHUNK, a->numel - base);
    shim_cpu_load_f32(a->dtype, (const char *)shim_cpu_data(a) + base * size, n, tmp);
    for (int64_t i = 0; i < n; i++) tmp[i] = m[base + i] ? tmp[i] * fs : 0.0f;
    shim_cpu_store_f32(a->dtype, tmp, n, (char *)shim_cpu_data(out) + base * size);
  }
  return SHIM_OK;
}
