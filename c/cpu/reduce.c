/* reduce.c: shim_reduce on the cpu. a is read as [outer, r, inner] with r the reduced dim
 * (SHIM_ALL_DIMS: [1, numel, 1]). Integer and bool inputs accumulate in int64 (sum and prod
 * wrap), floating inputs in double; the result is then converted to out's dtype by the rules
 * of cpu.h, so the sum of a bool tensor into i64 counts its true elements. mean divides in
 * double. Over an empty dim, sum is 0, prod 1 and mean NaN; max and min fail (no identity).
 * max and min propagate NaN. */
#include <math.h>

#include "cpu.h"

/* fold_all: *acc (op)= every x[i]; fold_each: acc[i] (op)= x[i]. sum and mean both add. */
#define FOLDS(SUFFIX, ACC, ADD, MUL, MAX, MIN)                                             \
  static void fold_all_##SUFFIX(int32_t op, ACC *acc, const ACC *x, int64_t m) {            \
    ACC v = *acc;                                                                          \
    switch (op) {                                                                          \
      case SHIM_SUM: case SHIM_MEAN: for (int64_t i = 0; i < m; i++) v = ADD(v, x[i]); break; \
      case SHIM_PROD: for (int64_t i = 0; i < m; i++) v = MUL(v, x[i]); break;             \
      case SHIM_MAX: for (int64_t i = 0; i < m; i++) v = MAX(v, x[i]); break;              \
      case SHIM_MIN: for (int64_t i = 0; i < m; i++) v = MIN(v, x[i]); break;              \
    }                                                                                      \
    *acc = v;                                                                              \
  }                                                                                        \
  static void fold_each_##SUFFIX(int32_t op, ACC *acc, const ACC *x, int64_t m) {           \
    switch (op) {                                                                          \
      case SHIM_SUM: case SHIM_MEAN: for (int64_t i = 0; i < m; i++) acc[i] = ADD(acc[i], x[i]); break; \
      case SHIM_PROD: for (int64_t i = 0; i < m; i++) acc[i] = MUL(acc[i], x[i]); break;   \
      case SHIM_MAX: for (int64_t i = 0; i < m; i++) acc[i] = MAX(acc[i], x[i]); break;    \
      case SHIM_MIN: for (int64_t i = 0; i < m; i++) acc[i] = MIN(acc[i], x[i]); break;    \
    }                                                                                      \
  }

#define ADD_F(v, x) ((v) + (x))
#define MUL_F(v, x) ((v) * (x))
#define MAX_F(v, x) (((x) > (v) || (x) != (x)) ? (x) : (v)) /* a NaN, once in, stays */
#define MIN_F(v, x) (((x) < (v) || (x) != (x)) ? (x) : (v))
#define ADD_I(v, x) ((int64_t)((uint64_t)(v) + (uint64_t)(x)))
#define MUL_I(v, x) ((int64_t)((uint64_t)(v) * (uint64_t)(x)))
#define MAX_I(v, x) ((x) > (v) ? (x) : (v))
#define MIN_I(v, x) ((x) < (v) ? (x) : (v))

FOLDS(f64, double, ADD_F, MUL_F, MAX_F, MIN_F)
FOLDS(i64, int64_t, ADD_I, MUL_I, MAX_I, MIN_I)

static double identity_f64(int32_t op) {
  switch (op) {
    case SHIM_PROD: return 1.0;
    case SHIM_MAX: return -INFINITY;
    case SHIM_MIN: return INFINITY;
    default: return 0.0;
  }
}

static int64_t identity_i64(int32_t op) {
  switch (op) {
    case SHIM_PROD: return 1;
    case SHIM_MAX: return INT64_MIN;
    case SHIM_MIN: return INT64_MAX;
    default: return 0;
  }
}

/* Stores m accumulators as outputs; r is the reduced count, for mean. */
static void finish_f64(int32_t op, int32_t dtype, double *acc, int64_t m, int64_t r, void *dst) {
  if (op == SHIM_MEAN)
    for (int64_t i = 0; i < m; i++) acc[i] /= (double)r; /* r == 0: 0 / 0 is NaN */
  shim_cpu_store_f64(dtype, acc, m, dst);
}

static void finish_i64(int32_t op, int32_t dtype, int64_t *acc, int64_t m, int64_t r, void *dst) {
  if (op != SHIM_MEAN) {
    shim_cpu_store_i64(dtype, acc, m, dst);
    return;
  }
  double mean[SHIM_CPU_CHUNK];
  for (int64_t i = 0; i < m; i++) mean[i] = (double)acc[i] / (double)r;
  shim_cpu_store_f64(dtype, mean, m, dst);
}

/* The driver, once per accumulator type: contiguous runs when inner == 1, otherwise blocks
 * of up to a chunk of inner positions accumulated row by row (reads stay sequential). */
#define REDUCER(SUFFIX, ACC)                                                                   \
  static void reduce_##SUFFIX(int32_t op, const shim_tensor *a, shim_tensor *out, int64_t outer, int64_t r, \
                              int64_t inner) {                                                 \
    const char *src = shim_cpu_data(a);                                                        \
    char *dst = shim_cpu_data(out);                                                            \
    int64_t size = shim_dtype_size(a->dtype), out_size = shim_dtype_size(out->dtype);          \
    ACC acc[SHIM_CPU_CHUNK], x[SHIM_CPU_CHUNK];                                                \
    for (int64_t o = 0; o < outer; o++) {                                                      \
      if (inner == 1) {                                                                        \
        acc[0] = identity_##SUFFIX(op);                                                        \
        for (int64_t base = 0; base < r; base += SHIM_CPU_CHUNK) {                             \
          int64_t m = shim_cpu_min64(SHIM_CPU_CHUNK, r - base);                                \
          shim_cpu_load_##SUFFIX(a->dtype, src + (o * r + base) * size, m, x);                 \
          fold_all_##SUFFIX(op, acc, x, m);                                                    \
        }                                                                                      \
        finish_##SUFFIX(op, out->dtype, acc, 1, r, dst + o * out_size);                        \
        continue;                                                                              \
      }                                                                                        \
      for (int64_t k0 = 0; k0 < inner; k0 += SHIM_CPU_CHUNK) {                                 \
        int64_t m = shim_cpu_min64(SHIM_CPU_CHUNK, inner - k0);                                \
        for (int64_t i = 0; i < m; i++) acc[i] = identity_##SUFFIX(op);                        \
        for (int64_t j = 0; j < r; j++) {                                                      \
          shim_cpu_load_##SUFFIX(a->dtype, src + ((o * r + j) * inner + k0) * size, m, x);     \
          fold_each_##SUFFIX(op, acc, x, m);                                                   \
        }                                                                                      \
        finish_##SUFFIX(op, out->dtype, acc, m, r, dst + (o * inner + k0) * out_size);         \
      }                                                                                        \
    }                                                                                          \
  }

REDUCER(f64, double)
REDUCER(i64, int64_t)

int shim_reduce(int32_t op, shim_tensor *out, const shim_tensor *a, int32_t dim, shim_stream *s) {
  shim_reduce_dims dims;
  SHIM_TRY(shim_check_reduce(op, out, a, dim, &dims));
  if (shim_cpu_is_float(a->dtype)) reduce_f64(op, a, out, dims.outer, dims.r, dims.inner);
  else reduce_i64(op, a, out, dims.outer, dims.r, dims.inner);
  return SHIM_OK;
}
