/* reduce.c: shim_reduce, shim_argreduce, shim_cumsum and shim_cumulative on the cpu. a is read as [outer, r, inner] with r the reduced dim
 * (SHIM_ALL_DIMS: [1, numel, 1]). Integer and bool inputs accumulate in int64 (sum and prod
 * wrap), floating inputs in double; the result is then converted to out's dtype by the rules
 * of cpu.h, so the sum of a bool tensor into i64 counts its true elements. mean divides in
 * double. Over an empty dim, sum is 0, prod 1, mean NaN, any 0, all 1 and the norms 0; max
 * and min fail (no identity). max, min and the inf-norm propagate NaN; any and all read
 * nonzero (NaN included) as true. */
#include <math.h>
#include <string.h>

#include "cpu.h"
#include "vecmath.h"

/* fold_all: *acc (op)= every x[i]; fold_each: acc[i] (op)= x[i]. sum and mean both add;
 * the norms fold |x| (ABS) or its square. */
#define FOLD_CASES(STEP)                                                                   \
  case SHIM_SUM: case SHIM_MEAN: STEP(ADD(v, x)); break;                                   \
  case SHIM_PROD: STEP(MUL(v, x)); break;                                                  \
  case SHIM_MAX: STEP(MAX(v, x)); break;                                                   \
  case SHIM_MIN: STEP(MIN(v, x)); break;                                                   \
  case SHIM_ANY: STEP((ACC)((v != 0) | (x != 0))); break;                                  \
  case SHIM_ALL: STEP((ACC)((v != 0) & (x != 0))); break;                                  \
  case SHIM_NORM1: STEP(ADD(v, ABS(x))); break;                                            \
  case SHIM_NORM2: STEP(ADD(v, MUL(x, x))); break;                                         \
  case SHIM_NORM_INF: STEP(MAX(v, ABS(x))); break;                                         \
  default: return SHIM_E_INVALID; /* a table row without its cpu fold */

#define FOLDS(SUFFIX, ACC_T)                                                             \
  static int fold_all_##SUFFIX(int32_t op, ACC_T *acc, const ACC_T *xs, int64_t m) {        \
    typedef ACC_T ACC;                                                                     \
    ACC v = *acc;                                                                          \
    switch (op) { FOLD_CASES(ALL_STEP) }                                                   \
    *acc = v;                                                                              \
    return SHIM_OK;                                                                        \
  }                                                                                        \
  static int fold_each_##SUFFIX(int32_t op, ACC_T *acc, const ACC_T *xs, int64_t m) {       \
    typedef ACC_T ACC;                                                                     \
    switch (op) { FOLD_CASES(EACH_STEP) }                                                  \
    return SHIM_OK;                                                                        \
  }
/* The fold's two loops: v over every x, or each acc[i] with its x. */
#define ALL_STEP(E) for (int64_t i = 0; i < m; i++) { ACC x = xs[i]; v = (E); }
#define EACH_STEP(E) for (int64_t i = 0; i < m; i++) { ACC x = xs[i], v = acc[i]; acc[i] = (E); }

#define ADD_F(v, x) ((v) + (x))
#define MUL_F(v, x) ((v) * (x))
#define MAX_F(v, x) (((x) > (v) || (x) != (x)) ? (x) : (v)) /* a NaN, once in, stays */
#define MIN_F(v, x) (((x) < (v) || (x) != (x)) ? (x) : (v))
#define ADD_I(v, x) ((int64_t)((uint64_t)(v) + (uint64_t)(x)))
#define MUL_I(v, x) ((int64_t)((uint64_t)(v) * (uint64_t)(x)))
#define MAX_I(v, x) ((x) > (v) ? (x) : (v))
#define MIN_I(v, x) ((x) < (v) ? (x) : (v))
#define ABS_I(x) ((x) < 0 ? -(x) : (x)) /* the norms refuse integers; only for the switch */

#define ADD ADD_F
#define MUL MUL_F
#define MAX MAX_F
#define MIN MIN_F
#define ABS fabs
FOLDS(f64, double)
#undef ADD
#undef MUL
#undef MAX
#undef MIN
#undef ABS
#define ADD ADD_I
#define MUL MUL_I
#define MAX MAX_I
#define MIN MIN_I
#define ABS ABS_I
FOLDS(i64, int64_t)

/* The fold's start; 0 for sum, mean, any and the norms (an op without a fold fails there). */
static double identity_f64(int32_t op) {
  switch (op) {
    case SHIM_PROD: case SHIM_ALL: return 1.0;
    case SHIM_MAX: return -INFINITY;
    case SHIM_MIN: return INFINITY;
    default: return 0.0;
  }
}

static int64_t identity_i64(int32_t op) {
  switch (op) {
    case SHIM_PROD: case SHIM_ALL: return 1;
    case SHIM_MAX: return INT64_MIN;
    case SHIM_MIN: return INT64_MAX;
    default: return 0;
  }
}

/* Stores m accumulators as outputs; r is the reduced count, for mean. */
static void finish_f64(int32_t op, int32_t dtype, double *acc, int64_t m, int64_t r, void *dst) {
  if (op == SHIM_MEAN)
    for (int64_t i = 0; i < m; i++) acc[i] /= (double)r; /* r == 0: 0 / 0 is NaN */
  if (op == SHIM_NORM2)
    for (int64_t i = 0; i < m; i++) acc[i] = sqrt(acc[i]);
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

/* Whether row_f32 folds op: sum and mean (in double), max and min (exact in float). */
static int row_f32_folds(int32_t op) { return op == SHIM_SUM || op == SHIM_MEAN || op == SHIM_MAX || op == SHIM_MIN; }

/* One contiguous f32 row folded in vector lanes (the lanes change the order of the double
 * additions, not their precision); NaN propagates through max and min. Inlined into the
 * cloned row loop below, so a row costs no call through the clones' dispatch. */
static inline __attribute__((always_inline)) double row_f32(int32_t op, const float *x, int64_t r) {
  int64_t j = 0;
  if (op == SHIM_SUM || op == SHIM_MEAN) {
    shim_v8d acc = {0};
    double sum = 0;
    for (; j + 8 <= r; j += 8) {
      shim_v8f v;
      memcpy(&v, x + j, sizeof v);
      acc += __builtin_convertvector(v, shim_v8d);
    }
    for (; j < r; j++) sum += (double)x[j];
    for (int k = 0; k < 8; k++) sum += acc[k];
    return sum;
  }
  const int max = op == SHIM_MAX;
  float m = max ? -INFINITY : INFINITY;
  int nan = 0;
  shim_v16f best = SHIM_V16_SPLAT(m);
  shim_v16i nans = {0};
  for (; j + 16 <= r; j += 16) {
    shim_v16f v;
    SHIM_V16_LOAD(v, x + j);
    nans |= v != v;
    best = max ? SHIM_V16_SELECT(v > best, v, best) : SHIM_V16_SELECT(v < best, v, best);
  }
  for (int k = 0; k < 16; k++) m = max ? (best[k] > m ? best[k] : m) : (best[k] < m ? best[k] : m), nan |= nans[k];
  for (; j < r; j++) m = max ? (x[j] > m ? x[j] : m) : (x[j] < m ? x[j] : m), nan |= x[j] != x[j];
  return nan ? NAN : m;
}

/* The driver, once per accumulator type: contiguous runs when inner == 1, otherwise blocks
 * of up to a chunk of inner positions accumulated row by row (reads stay sequential). */
#define REDUCER(SUFFIX, ACC)                                                                   \
  static int reduce_##SUFFIX(int32_t op, const shim_tensor *a, shim_tensor *out, int64_t o0, int64_t o1, int64_t r, \
                             int64_t inner) {                                                  \
    const char *src = shim_cpu_data(a);                                                        \
    char *dst = shim_cpu_data(out);                                                            \
    int64_t size = shim_dtype_size(a->dtype), out_size = shim_dtype_size(out->dtype);          \
    ACC acc[SHIM_CPU_CHUNK], x[SHIM_CPU_CHUNK];                                                \
    for (int64_t o = o0; o < o1; o++) {                                                        \
      if (inner == 1) {                                                                        \
        acc[0] = identity_##SUFFIX(op);                                                        \
        for (int64_t base = 0; base < r; base += SHIM_CPU_CHUNK) {                             \
          int64_t m = shim_cpu_min64(SHIM_CPU_CHUNK, r - base);                                \
          shim_cpu_load_##SUFFIX(a->dtype, src + (o * r + base) * size, m, x);                 \
          SHIM_TRY(fold_all_##SUFFIX(op, acc, x, m));                                          \
        }                                                                                      \
        finish_##SUFFIX(op, out->dtype, acc, 1, r, dst + o * out_size);                        \
        continue;                                                                              \
      }                                                                                        \
      for (int64_t k0 = 0; k0 < inner; k0 += SHIM_CPU_CHUNK) {                                 \
        int64_t m = shim_cpu_min64(SHIM_CPU_CHUNK, inner - k0);                                \
        for (int64_t i = 0; i < m; i++) acc[i] = identity_##SUFFIX(op);                        \
        for (int64_t j = 0; j < r; j++) {                                                      \
          shim_cpu_load_##SUFFIX(a->dtype, src + ((o * r + j) * inner + k0) * size, m, x);     \
          SHIM_TRY(fold_each_##SUFFIX(op, acc, x, m));                                         \
        }                                                                                      \
        finish_##SUFFIX(op, out->dtype, acc, m, r, dst + (o * inner + k0) * out_size);         \
      }                                                                                        \
    }                                                                                          \
    return SHIM_OK;                                                                            \
  }

REDUCER(f64, double)
REDUCER(i64, int64_t)

/* A range of the outer index (a part of shim_cpu_parallel). */
typedef struct {
  int32_t op;
  const shim_tensor *a;
  shim_tensor *out;
  shim_reduce_dims dims;
  int status; /* a part's fold status other than SHIM_OK */
} reduce_job;

/* Contiguous f32 rows (the last dim reduced), a chunk of results stored at a time. */
SHIM_CPU_CLONES static void reduce_rows_f32(int32_t op, const shim_tensor *a, shim_tensor *out, int64_t o0, int64_t o1, int64_t r) {
  const float *src = shim_cpu_data(a);
  char *dst = shim_cpu_data(out);
  const int64_t out_size = shim_dtype_size(out->dtype);
  double acc[SHIM_CPU_CHUNK];
  for (int64_t o = o0; o < o1; o += SHIM_CPU_CHUNK) {
    const int64_t m = shim_cpu_min64(SHIM_CPU_CHUNK, o1 - o);
    for (int64_t i = 0; i < m; i++) acc[i] = row_f32(op, src + (o + i) * r, r);
    finish_f64(op, out->dtype, acc, m, r, dst + o * out_size);
  }
}

static void reduce_range(void *ctx, int64_t begin, int64_t end) {
  reduce_job *j = ctx;
  int status = SHIM_OK;
  if (j->dims.inner == 1 && j->a->dtype == SHIM_F32 && row_f32_folds(j->op)) reduce_rows_f32(j->op, j->a, j->out, begin, end, j->dims.r);
  else if (shim_cpu_is_float(j->a->dtype)) status = reduce_f64(j->op, j->a, j->out, begin, end, j->dims.r, j->dims.inner);
  else status = reduce_i64(j->op, j->a, j->out, begin, end, j->dims.r, j->dims.inner);
  if (status != SHIM_OK) __atomic_store_n(&j->status, status, __ATOMIC_RELAXED);
}

int shim_reduce(int32_t op, shim_tensor *out, const shim_tensor *a, int32_t dim, shim_stream *s) {
  reduce_job job = {.op = op, .a = a, .out = out};
  SHIM_TRY(shim_check_reduce(op, out, a, dim, &job.dims));
  const int64_t per_outer = job.dims.r * job.dims.inner;
  shim_cpu_parallel(job.dims.outer, SHIM_CPU_GRAIN / (per_outer > 0 ? per_outer : 1) + 1, reduce_range, &job);
  return job.status == SHIM_OK ? SHIM_OK : shim_fail_no_kernel("shim_reduce", shim_reduce_row(op)->name, op, a->dtype);
}

/* Whether x replaces best in an argmax (max) or argmin: strictly beyond it, or the first NaN. */
static inline int beats_f64(int max, double x, double best) {
  if (best != best) return 0;
  return x != x || (max ? x > best : x < best);
}

static inline int beats_i64(int max, int64_t x, int64_t best) { return max ? x > best : x < best; }

/* The first index of the extreme along r, for each of a chunk of inner positions at a time. */
#define ARG_REDUCER(SUFFIX, ACC)                                                                 \
  static void argreduce_##SUFFIX(int max, const shim_tensor *a, int64_t *dst, int64_t outer, int64_t r, int64_t inner) { \
    const char *src = shim_cpu_data(a);                                                          \
    int64_t size = shim_dtype_size(a->dtype);                                                    \
    ACC best[SHIM_CPU_CHUNK], x[SHIM_CPU_CHUNK];                                                 \
    for (int64_t o = 0; o < outer; o++) {                                                        \
      if (inner == 1) {                                                                          \
        ACC b = 0;                                                                               \
        int64_t at = 0;                                                                          \
        for (int64_t base = 0; base < r; base += SHIM_CPU_CHUNK) {                               \
          int64_t m = shim_cpu_min64(SHIM_CPU_CHUNK, r - base);                                  \
          shim_cpu_load_##SUFFIX(a->dtype, src + (o * r + base) * size, m, x);                   \
          for (int64_t j = 0; j < m; j++)                                                        \
            if ((base == 0 && j == 0) || beats_##SUFFIX(max, x[j], b)) b = x[j], at = base + j;  \
        }                                                                                        \
        dst[o] = at;                                                                             \
        continue;                                                                                \
      }                                                                                          \
      for (int64_t k0 = 0; k0 < inner; k0 += SHIM_CPU_CHUNK) {                                   \
        int64_t m = shim_cpu_min64(SHIM_CPU_CHUNK, inner - k0);                                  \
        int64_t *idx = dst + o * inner + k0;                                                     \
        shim_cpu_load_##SUFFIX(a->dtype, src + (o * r * inner + k0) * size, m, best);            \
        for (int64_t i = 0; i < m; i++) idx[i] = 0;                                              \
        for (int64_t j = 1; j < r; j++) {                                                        \
          shim_cpu_load_##SUFFIX(a->dtype, src + ((o * r + j) * inner + k0) * size, m, x);       \
          for (int64_t i = 0; i < m; i++)                                                        \
            if (beats_##SUFFIX(max, x[i], best[i])) best[i] = x[i], idx[i] = j;                  \
        }                                                                                        \
      }                                                                                          \
    }                                                                                            \
  }

ARG_REDUCER(f64, double)
ARG_REDUCER(i64, int64_t)

int shim_argreduce(int32_t op, shim_tensor *indices, const shim_tensor *a, int32_t dim, shim_stream *s) {
  shim_reduce_dims dims;
  SHIM_TRY(shim_check_argreduce(op, indices, a, dim, &dims));
  if (indices->numel == 0) return SHIM_OK;
  int64_t *dst = shim_cpu_data(indices);
  if (shim_cpu_is_float(a->dtype)) argreduce_f64(op == SHIM_MAX, a, dst, dims.outer, dims.r, dims.inner);
  else argreduce_i64(op == SHIM_MAX, a, dst, dims.outer, dims.r, dims.inner);
  return SHIM_OK;
}

/* Running sums down r, a chunk of inner positions at a time (one position when inner == 1). */
#define CUMSUM(SUFFIX, ACC, ADD)                                                                 \
  static void cumsum_##SUFFIX(const shim_tensor *a, shim_tensor *out, int64_t outer, int64_t r, int64_t inner) { \
    const char *src = shim_cpu_data(a);                                                          \
    char *dst = shim_cpu_data(out);                                                              \
    int64_t size = shim_dtype_size(a->dtype), out_size = shim_dtype_size(out->dtype);            \
    ACC acc[SHIM_CPU_CHUNK], x[SHIM_CPU_CHUNK];                                                  \
    for (int64_t o = 0; o < outer; o++)                                                          \
      for (int64_t k0 = 0; k0 < inner; k0 += SHIM_CPU_CHUNK) {                                   \
        int64_t m = shim_cpu_min64(SHIM_CPU_CHUNK, inner - k0);                                  \
        for (int64_t i = 0; i < m; i++) acc[i] = 0;                                              \
        for (int64_t j = 0; j < r; j++) {                                                        \
          int64_t at = (o * r + j) * inner + k0;                                                 \
          shim_cpu_load_##SUFFIX(a->dtype, src + at * size, m, x);                               \
          for (int64_t i = 0; i < m; i++) acc[i] = ADD(acc[i], x[i]);                            \
          shim_cpu_store_##SUFFIX(out->dtype, acc, m, dst + at * out_size);                      \
        }                                                                                        \
      }                                                                                          \
  }

CUMSUM(f64, double, ADD_F)
CUMSUM(i64, int64_t, ADD_I)

int shim_cumsum(shim_tensor *out, const shim_tensor *a, int32_t dim, shim_stream *s) {
  shim_reduce_dims dims;
  SHIM_TRY(shim_check_cumsum(out, a, dim, &dims));
  if (a->numel == 0) return SHIM_OK;
  if (shim_cpu_is_float(a->dtype)) cumsum_f64(a, out, dims.outer, dims.r, dims.inner);
  else cumsum_i64(a, out, dims.outer, dims.r, dims.inner);
  return SHIM_OK;
}

/* torch's cummax and cummin step: x takes over on a tie, and a NaN once taken stays (x != x
 * moves the index to a later NaN). */
static inline int takes_f64(int max, double x, double best) { return x != x || (max ? x >= best : x <= best); }
static inline int takes_i64(int max, int64_t x, int64_t best) { return max ? x >= best : x <= best; }

/* Running products (indices NULL) or extremes with their indices down r, a chunk of inner
 * positions at a time, as cumsum's. */
#define CUMULATIVE(SUFFIX, ACC, MUL)                                                             \
  static void cumulative_##SUFFIX(int32_t op, const shim_tensor *a, shim_tensor *out, int64_t *idx, int64_t outer, int64_t r, \
                                  int64_t inner) {                                               \
    const char *src = shim_cpu_data(a);                                                          \
    char *dst = shim_cpu_data(out);                                                              \
    int64_t size = shim_dtype_size(a->dtype), out_size = shim_dtype_size(out->dtype);            \
    ACC acc[SHIM_CPU_CHUNK], x[SHIM_CPU_CHUNK];                                                  \
    int64_t at_best[SHIM_CPU_CHUNK];                                                             \
    for (int64_t o = 0; o < outer; o++)                                                          \
      for (int64_t k0 = 0; k0 < inner; k0 += SHIM_CPU_CHUNK) {                                   \
        int64_t m = shim_cpu_min64(SHIM_CPU_CHUNK, inner - k0);                                  \
        for (int64_t j = 0; j < r; j++) {                                                        \
          int64_t at = (o * r + j) * inner + k0;                                                 \
          shim_cpu_load_##SUFFIX(a->dtype, src + at * size, m, x);                               \
          if (op == SHIM_PROD) {                                                                 \
            for (int64_t i = 0; i < m; i++) acc[i] = j == 0 ? x[i] : MUL(acc[i], x[i]);          \
          } else {                                                                               \
            for (int64_t i = 0; i < m; i++)                                                      \
              if (j == 0 || takes_##SUFFIX(op == SHIM_MAX, x[i], acc[i])) acc[i] = x[i], at_best[i] = j; \
            memcpy(idx + at, at_best, (size_t)m * sizeof(int64_t));                              \
          }                                                                                      \
          shim_cpu_store_##SUFFIX(out->dtype, acc, m, dst + at * out_size);                      \
        }                                                                                        \
      }                                                                                          \
  }

CUMULATIVE(f64, double, MUL_F)
CUMULATIVE(i64, int64_t, MUL_I)

int shim_cumulative(int32_t op, shim_tensor *out, shim_tensor *indices, const shim_tensor *a, int32_t dim, shim_stream *s) {
  shim_reduce_dims dims;
  SHIM_TRY(shim_check_cumulative(op, out, indices, a, dim, &dims));
  if (a->numel == 0) return SHIM_OK;
  int64_t *idx = indices ? shim_cpu_data(indices) : NULL;
  if (shim_cpu_is_float(a->dtype)) cumulative_f64(op, a, out, idx, dims.outer, dims.r, dims.inner);
  else cumulative_i64(op, a, out, idx, dims.outer, dims.r, dims.inner);
  return SHIM_OK;
}
