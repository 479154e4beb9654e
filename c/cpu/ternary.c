/* ternary.c: shim_ternary on the cpu: where, lerp, addcmul, addcdiv.
 *
 * Semantics (the CUDA kernels must match): f16 and bf16 compute in float and round once; f64
 * in double; integers (addcmul only) in int64, wrapping, with value truncated to the dtype as
 * shim_binary_scalar's scalar is. lerp is torch's two-sided form (a + w * (b - a) when
 * |w| < 0.5, else b - (b - a) * (1 - w)); addcmul is a + value * b * c and addcdiv
 * a + value * b / c, evaluated left to right as torch's kernels do. where copies elements, so
 * it takes every dtype; its condition may have any dtype (nonzero is true). An operand of one
 * element is read for every output element; out may be an input.
 */
#include "cpu.h"

/* Element i of an operand: its own, or its one element. */
#define AT(p, full, i) ((p)[(full) ? (i) : 0])

static inline double lerp_f64(double a, double b, double w) { return (w < 0 ? -w : w) < 0.5 ? a + w * (b - a) : b - (b - a) * (1 - w); }
static inline float lerp_f32(float a, float b, float w) { return (w < 0 ? -w : w) < 0.5f ? a + w * (b - a) : b - (b - a) * (1 - w); }

#define ARITHMETIC(LERP)                                                            \
  switch (op) {                                                                        \
    case SHIM_LERP: for (int64_t i = 0; i < n; i++) o[i] = LERP(AT(a, fa, i), AT(b, fb, i), AT(c, fc, i)); break; \
    case SHIM_ADDCMUL: for (int64_t i = 0; i < n; i++) o[i] = AT(a, fa, i) + v * AT(b, fb, i) * AT(c, fc, i); break; \
    case SHIM_ADDCDIV: for (int64_t i = 0; i < n; i++) o[i] = AT(a, fa, i) + v * AT(b, fb, i) / AT(c, fc, i); break; \
    default: return SHIM_E_INVALID; /* a table row without its cpu case */             \
  }                                                                                    \
  return SHIM_OK;

static int ternary_f32(int32_t op, float *o, const float *a, int fa, const float *b, int fb, const float *c, int fc, float v,
                       int64_t n) {
  ARITHMETIC(lerp_f32)
}

static int ternary_f64(int32_t op, double *o, const double *a, int fa, const double *b, int fb, const double *c, int fc,
                       double v, int64_t n) {
  ARITHMETIC(lerp_f64)
}

/* f16 and bf16 through float, a chunk at a time; a one-element operand is loaded once. */
static int ternary_half(int32_t op, int32_t dtype, uint16_t *out, const uint16_t *a, int fa, const uint16_t *b, int fb,
                        const uint16_t *c, int fc, float v, int64_t n) {
  float xa[SHIM_CPU_CHUNK], xb[SHIM_CPU_CHUNK], xc[SHIM_CPU_CHUNK], xo[SHIM_CPU_CHUNK];
  if (!fa) shim_cpu_load_f32(dtype, a, 1, xa);
  if (!fb) shim_cpu_load_f32(dtype, b, 1, xb);
  if (!fc) shim_cpu_load_f32(dtype, c, 1, xc);
  for (int64_t base = 0; base < n; base += SHIM_CPU_CHUNK) {
    int64_t m = shim_cpu_min64(SHIM_CPU_CHUNK, n - base);
    if (fa) shim_cpu_load_f32(dtype, a + base, m, xa);
    if (fb) shim_cpu_load_f32(dtype, b + base, m, xb);
    if (fc) shim_cpu_load_f32(dtype, c + base, m, xc);
    SHIM_TRY(ternary_f32(op, xo, xa, fa, xb, fb, xc, fc, v, m));
    shim_cpu_store_f32(dtype, xo, m, out + base);
  }
  return SHIM_OK;
}

/* addcmul of integers: in int64 (wrapping through uint64), stored back wrapping. */
static void addcmul_int(int32_t dtype, void *out, const void *a, int fa, const void *b, int fb, const void *c, int fc,
                        int64_t v, int64_t n) {
  int64_t xa[SHIM_CPU_CHUNK], xb[SHIM_CPU_CHUNK], xc[SHIM_CPU_CHUNK], xo[SHIM_CPU_CHUNK];
  int64_t size = shim_dtype_size(dtype);
  if (!fa) shim_cpu_load_i64(dtype, a, 1, xa);
  if (!fb) shim_cpu_load_i64(dtype, b, 1, xb);
  if (!fc) shim_cpu_load_i64(dtype, c, 1, xc);
  for (int64_t base = 0; base < n; base += SHIM_CPU_CHUNK) {
    int64_t m = shim_cpu_min64(SHIM_CPU_CHUNK, n - base);
    if (fa) shim_cpu_load_i64(dtype, (const char *)a + base * size, m, xa);
    if (fb) shim_cpu_load_i64(dtype, (const char *)b + base * size, m, xb);
    if (fc) shim_cpu_load_i64(dtype, (const char *)c + base * size, m, xc);
    for (int64_t i = 0; i < m; i++)
      xo[i] = (int64_t)((uint64_t)AT(xa, fa, i) + (uint64_t)v * (uint64_t)AT(xb, fb, i) * (uint64_t)AT(xc, fc, i));
    shim_cpu_store_i64(dtype, xo, m, (char *)out + base * size);
  }
}

/* m condition elements of any dtype as 0/1 bytes (nonzero is true, NaN included). */
static void load_truth(int32_t dtype, const void *src, int64_t m, uint8_t *dst) {
  if (shim_cpu_is_float(dtype)) {
    double d[SHIM_CPU_CHUNK];
    shim_cpu_load_f64(dtype, src, m, d);
    for (int64_t i = 0; i < m; i++) dst[i] = d[i] != 0;
  } else {
    int64_t v[SHIM_CPU_CHUNK];
    shim_cpu_load_i64(dtype, src, m, v);
    for (int64_t i = 0; i < m; i++) dst[i] = v[i] != 0;
  }
}

/* m elements from base: o = truth ? x : y, elements moved as U (their size). */
#define SELECT(U)                                                                           \
  do {                                                                                      \
    U *o = (U *)out + base;                                                                 \
    const U *x = (const U *)b + (fb ? base : 0), *y = (const U *)c + (fc ? base : 0);      \
    for (int64_t i = 0; i < m; i++) o[i] = truth[fa ? i : 0] ? AT(x, fb, i) : AT(y, fc, i); \
  } while (0)

static void where(int32_t cond_dtype, int64_t size, void *out, const void *cond, int fa, const void *b, int fb,
                  const void *c, int fc, int64_t n) {
  uint8_t truth[SHIM_CPU_CHUNK];
  if (!fa) load_truth(cond_dtype, cond, 1, truth);
  int64_t csize = shim_dtype_size(cond_dtype);
  for (int64_t base = 0; base < n; base += SHIM_CPU_CHUNK) {
    int64_t m = shim_cpu_min64(SHIM_CPU_CHUNK, n - base);
    if (fa) load_truth(cond_dtype, (const char *)cond + base * csize, m, truth);
    switch (size) {
      case 1: SELECT(uint8_t); break;
      case 2: SELECT(uint16_t); break;
      case 4: SELECT(uint32_t); break;
      default: SELECT(uint64_t); break;
    }
  }
}

int shim_ternary(int32_t op, shim_tensor *out, const shim_tensor *a, const shim_tensor *b, const shim_tensor *c,
                 double value, shim_stream *s) {
  SHIM_TRY(shim_check_ternary(op, out, a, b, c));
  int64_t n = out->numel;
  int32_t dtype = out->dtype;
  int fa = a->numel == n, fb = b->numel == n, fc = c->numel == n;
  void *o = shim_cpu_data(out);
  const void *x = shim_cpu_data(a), *y = shim_cpu_data(b), *z = shim_cpu_data(c);
  if (n == 0) return SHIM_OK;
  if (op == SHIM_WHERE) {
    where(a->dtype, shim_dtype_size(dtype), o, x, fa, y, fb, z, fc, n);
    return SHIM_OK;
  }
  int status = SHIM_OK;
  switch (dtype) {
    case SHIM_F32: status = ternary_f32(op, o, x, fa, y, fb, z, fc, (float)value, n); break;
    case SHIM_F64: status = ternary_f64(op, o, x, fa, y, fb, z, fc, value, n); break;
    case SHIM_F16: case SHIM_BF16: status = ternary_half(op, dtype, o, x, fa, y, fb, z, fc, (float)value, n); break;
    default: { /* the integer ops (addcmul): value as one element of the dtype */
      if (op != SHIM_ADDCMUL) {
        status = SHIM_E_INVALID;
        break;
      }
      int64_t v;
      uint64_t one = 0;
      shim_cpu_from_f64(dtype, value, &one);
      shim_cpu_load_i64(dtype, &one, 1, &v);
      addcmul_int(dtype, o, x, fa, y, fb, z, fc, v, n);
    }
  }
  return status == SHIM_OK ? SHIM_OK : shim_fail_no_kernel("shim_ternary", shim_ternary_row(op)->name, op, dtype);
}
