/* creation.c: fill, arange and rand on the cpu. Values are computed in double and stored by
 * the conversion rules of cpu.h; rand draws element i from c/common/numeric.h at index
 * offset + i, the same values the CUDA kernels produce. */
#include <string.h>

#include "../common/numeric.h"
#include "cpu.h"

/* The strided path: the flat fill over each chunk (shim_cpu_chunked). */
static int fill_chunk(void *ctx, shim_tensor *out, const shim_tensor *const *in) { return shim_fill(out, *(const double *)ctx, NULL); }

int shim_fill(shim_tensor *out, double value, shim_stream *s) {
  SHIM_REQUIRE(out, "out");
  SHIM_TRY(shim_check_writable("shim_fill", out, "out"));
  if (!out->contiguous) return shim_cpu_chunked(out, 0, NULL, fill_chunk, &value);
  uint64_t element = 0;
  shim_cpu_from_f64(out->dtype, value, &element);
  void *data = shim_cpu_data(out);
  int64_t n = out->numel;
  switch (shim_dtype_size(out->dtype)) {
    case 1: memset(data, (int)(uint8_t)element, (size_t)n); break;
    case 2: { uint16_t v, *d = data; memcpy(&v, &element, 2); for (int64_t i = 0; i < n; i++) d[i] = v; break; }
    case 4: { uint32_t v, *d = data; memcpy(&v, &element, 4); for (int64_t i = 0; i < n; i++) d[i] = v; break; }
    case 8: { uint64_t *d = data; for (int64_t i = 0; i < n; i++) d[i] = element; break; }
  }
  return SHIM_OK;
}

/* Element i is start + (double)i * step, then converted to out's dtype. */
int shim_arange(shim_tensor *out, double start, double step, shim_stream *s) {
  SHIM_REQUIRE(out, "out");
  SHIM_TRY(shim_require_contiguous("shim_arange", out, "out"));
  char *data = shim_cpu_data(out);
  int64_t size = shim_dtype_size(out->dtype);
  double tmp[SHIM_CPU_CHUNK];
  for (int64_t base = 0; base < out->numel; base += SHIM_CPU_CHUNK) {
    int64_t m = shim_cpu_min64(SHIM_CPU_CHUNK, out->numel - base);
    for (int64_t i = 0; i < m; i++) tmp[i] = start + (double)(base + i) * step;
    shim_cpu_store_f64(out->dtype, tmp, m, data + base * size);
  }
  return SHIM_OK;
}

int shim_rand(shim_tensor *out, uint64_t seed, uint64_t offset, int32_t normal, shim_stream *s) {
  SHIM_TRY(shim_check_rand(out, normal));
  char *data = shim_cpu_data(out);
  int64_t size = shim_dtype_size(out->dtype);
  double top = shim_uniform_top(out->dtype), tmp[SHIM_CPU_CHUNK];
  for (int64_t base = 0; base < out->numel; base += SHIM_CPU_CHUNK) {
    int64_t m = shim_cpu_min64(SHIM_CPU_CHUNK, out->numel - base);
    uint64_t first = offset + (uint64_t)base;
    if (normal) {
      for (int64_t i = 0; i < m; i++) tmp[i] = shim_normal_at(seed, first + (uint64_t)i);
    } else {
      for (int64_t i = 0; i < m; i++) {
        double u = shim_uniform_at(seed, first + (uint64_t)i);
        tmp[i] = u < top ? u : top;
      }
    }
    shim_cpu_store_f64(out->dtype, tmp, m, data + base * size);
  }
  return SHIM_OK;
}
