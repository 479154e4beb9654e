/* convert.c: dtype conversions for the cpu backend, in chunks the other ops reuse, and
 * shim_cast. The rules (cpu.h; the CUDA kernels must follow them): float to integer truncates
 * toward zero and saturates at the target's range, NaN becomes 0; integer to integer wraps;
 * bool is nonzero -> 1 (NaN too); f16 and bf16 are rounded once, to nearest even, from any
 * source (i64 beyond 2^53 is first rounded to double). */
#include <string.h>

#include "../common/numeric.h"
#include "cpu.h"

/* double -> float rounding to odd: truncate, then set the last bit when anything was lost.
 * A second rounding of that float to f16 or bf16 (far fewer bits) then equals one direct
 * rounding of the double, which a plain (float) cast would not guarantee. */
static inline float f64_to_f32_odd(double d) {
  float f = (float)d;
  if ((double)f == d || d != d) return f;
  uint32_t u = shim_f32_bits(f);
  if (fabs((double)f) > fabs(d)) u -= 1; /* one step toward zero (sign-magnitude) */
  return shim_bits_f32(u | 1u);
}

static inline int64_t f64_to_i64(double d) {
  if (d != d) return 0;
  if (d >= 9223372036854775807.0) return INT64_MAX; /* the literal rounds to 2^63 */
  if (d <= -9223372036854775808.0) return INT64_MIN;
  return (int64_t)d;
}

static inline int32_t f64_to_i32(double d) {
  if (d != d) return 0;
  if (d >= 2147483647.0) return INT32_MAX;
  if (d <= -2147483648.0) return INT32_MIN;
  return (int32_t)d;
}

static inline uint8_t f64_to_u8(double d) {
  if (d != d || d <= 0.0) return 0;
  if (d >= 255.0) return 255;
  return (uint8_t)d;
}

void shim_cpu_load_f64(int32_t dtype, const void *src, int64_t n, double *dst) {
  switch (dtype) {
    case SHIM_F32: { const float *s = src; for (int64_t i = 0; i < n; i++) dst[i] = s[i]; break; }
    case SHIM_F64: memcpy(dst, src, (size_t)n * sizeof(double)); break;
    case SHIM_F16: { const uint16_t *s = src; for (int64_t i = 0; i < n; i++) dst[i] = shim_f16_to_f32(s[i]); break; }
    case SHIM_BF16: { const uint16_t *s = src; for (int64_t i = 0; i < n; i++) dst[i] = shim_bf16_to_f32(s[i]); break; }
    case SHIM_I32: { const int32_t *s = src; for (int64_t i = 0; i < n; i++) dst[i] = (double)s[i]; break; }
    case SHIM_I64: { const int64_t *s = src; for (int64_t i = 0; i < n; i++) dst[i] = (double)s[i]; break; }
    case SHIM_U8: { const uint8_t *s = src; for (int64_t i = 0; i < n; i++) dst[i] = s[i]; break; }
    case SHIM_BOOL: { const uint8_t *s = src; for (int64_t i = 0; i < n; i++) dst[i] = s[i] != 0; break; }
  }
}

void shim_cpu_load_i64(int32_t dtype, const void *src, int64_t n, int64_t *dst) {
  switch (dtype) {
    case SHIM_I32: { const int32_t *s = src; for (int64_t i = 0; i < n; i++) dst[i] = s[i]; break; }
    case SHIM_I64: memcpy(dst, src, (size_t)n * sizeof(int64_t)); break;
    case SHIM_U8: { const uint8_t *s = src; for (int64_t i = 0; i < n; i++) dst[i] = s[i]; break; }
    case SHIM_BOOL: { const uint8_t *s = src; for (int64_t i = 0; i < n; i++) dst[i] = s[i] != 0; break; }
    default: { /* floating: through double, by the float -> integer rule */
      double tmp[SHIM_CPU_CHUNK];
      const char *bytes = src;
      int64_t size = shim_dtype_size(dtype);
      for (int64_t base = 0; base < n; base += SHIM_CPU_CHUNK) {
        int64_t m = shim_cpu_min64(SHIM_CPU_CHUNK, n - base);
        shim_cpu_load_f64(dtype, bytes + base * size, m, tmp);
        for (int64_t i = 0; i < m; i++) dst[base + i] = f64_to_i64(tmp[i]);
      }
    }
  }
}

void shim_cpu_load_f32(int32_t dtype, const void *src, int64_t n, float *dst) {
  switch (dtype) {
    case SHIM_F32: memcpy(dst, src, (size_t)n * sizeof(float)); break;
    case SHIM_F16: { const uint16_t *s = src; for (int64_t i = 0; i < n; i++) dst[i] = shim_f16_to_f32(s[i]); break; }
    case SHIM_BF16: { const uint16_t *s = src; for (int64_t i = 0; i < n; i++) dst[i] = shim_bf16_to_f32(s[i]); break; }
  }
}

void shim_cpu_store_f64(int32_t dtype, const double *src, int64_t n, void *dst) {
  switch (dtype) {
    case SHIM_F32: { float *d = dst; for (int64_t i = 0; i < n; i++) d[i] = (float)src[i]; break; }
    case SHIM_F64: memcpy(dst, src, (size_t)n * sizeof(double)); break;
    case SHIM_F16: { uint16_t *d = dst; for (int64_t i = 0; i < n; i++) d[i] = shim_f32_to_f16(f64_to_f32_odd(src[i])); break; }
    case SHIM_BF16: { uint16_t *d = dst; for (int64_t i = 0; i < n; i++) d[i] = shim_f32_to_bf16(f64_to_f32_odd(src[i])); break; }
    case SHIM_I32: { int32_t *d = dst; for (int64_t i = 0; i < n; i++) d[i] = f64_to_i32(src[i]); break; }
    case SHIM_I64: { int64_t *d = dst; for (int64_t i = 0; i < n; i++) d[i] = f64_to_i64(src[i]); break; }
    case SHIM_U8: { uint8_t *d = dst; for (int64_t i = 0; i < n; i++) d[i] = f64_to_u8(src[i]); break; }
    case SHIM_BOOL: { uint8_t *d = dst; for (int64_t i = 0; i < n; i++) d[i] = src[i] != 0.0; break; }
  }
}

void shim_cpu_store_i64(int32_t dtype, const int64_t *src, int64_t n, void *dst) {
  switch (dtype) {
    case SHIM_F32: { float *d = dst; for (int64_t i = 0; i < n; i++) d[i] = (float)src[i]; break; }
    case SHIM_F64: { double *d = dst; for (int64_t i = 0; i < n; i++) d[i] = (double)src[i]; break; }
    case SHIM_F16: { uint16_t *d = dst; for (int64_t i = 0; i < n; i++) d[i] = shim_f32_to_f16(f64_to_f32_odd((double)src[i])); break; }
    case SHIM_BF16: { uint16_t *d = dst; for (int64_t i = 0; i < n; i++) d[i] = shim_f32_to_bf16(f64_to_f32_odd((double)src[i])); break; }
    case SHIM_I32: { int32_t *d = dst; for (int64_t i = 0; i < n; i++) d[i] = (int32_t)(uint32_t)(uint64_t)src[i]; break; }
    case SHIM_I64: memcpy(dst, src, (size_t)n * sizeof(int64_t)); break;
    case SHIM_U8: { uint8_t *d = dst; for (int64_t i = 0; i < n; i++) d[i] = (uint8_t)(uint64_t)src[i]; break; }
    case SHIM_BOOL: { uint8_t *d = dst; for (int64_t i = 0; i < n; i++) d[i] = src[i] != 0; break; }
  }
}

void shim_cpu_store_f32(int32_t dtype, const float *src, int64_t n, void *dst) {
  switch (dtype) {
    case SHIM_F32: memcpy(dst, src, (size_t)n * sizeof(float)); break;
    case SHIM_F16: { uint16_t *d = dst; for (int64_t i = 0; i < n; i++) d[i] = shim_f32_to_f16(src[i]); break; }
    case SHIM_BF16: { uint16_t *d = dst; for (int64_t i = 0; i < n; i++) d[i] = shim_f32_to_bf16(src[i]); break; }
  }
}

void shim_cpu_from_f64(int32_t dtype, double value, void *dst) { shim_cpu_store_f64(dtype, &value, 1, dst); }

/* The strided path: the flat cast over each chunk (shim_cpu_chunked). */
static int cast_chunk(void *ctx, shim_tensor *out, const shim_tensor *const *in) { return shim_cast(out, in[0], NULL); }

int shim_cast(shim_tensor *out, const shim_tensor *a, shim_stream *s) {
  SHIM_TRY(shim_check_cast(out, a));
  if (!shim_cpu_all_contiguous(out, 1, &a)) return shim_cpu_chunked(out, 1, &a, cast_chunk, NULL);
  const char *src = shim_cpu_data(a);
  char *dst = shim_cpu_data(out);
  if (out->dtype == a->dtype) {
    if (dst != src) memcpy(dst, src, (size_t)(a->numel * shim_dtype_size(a->dtype)));
    return SHIM_OK;
  }
  int64_t in_size = shim_dtype_size(a->dtype), out_size = shim_dtype_size(out->dtype);
  for (int64_t base = 0; base < a->numel; base += SHIM_CPU_CHUNK) {
    int64_t m = shim_cpu_min64(SHIM_CPU_CHUNK, a->numel - base);
    if (shim_cpu_is_single(a->dtype) && shim_cpu_is_single(out->dtype)) { /* exact through float */
      float tmp[SHIM_CPU_CHUNK];
      shim_cpu_load_f32(a->dtype, src + base * in_size, m, tmp);
      shim_cpu_store_f32(out->dtype, tmp, m, dst + base * out_size);
    } else if (shim_cpu_is_float(a->dtype)) {
      double tmp[SHIM_CPU_CHUNK];
      shim_cpu_load_f64(a->dtype, src + base * in_size, m, tmp);
      shim_cpu_store_f64(out->dtype, tmp, m, dst + base * out_size);
    } else {
      int64_t tmp[SHIM_CPU_CHUNK];
      shim_cpu_load_i64(a->dtype, src + base * in_size, m, tmp);
      shim_cpu_store_i64(out->dtype, tmp, m, dst + base * out_size);
    }
  }
  return SHIM_OK;
}
