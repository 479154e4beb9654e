/* elementwise.c: shim_unary, shim_binary and shim_binary_scalar on the cpu.
 *
 * Semantics (the CUDA kernels must match):
 *  - f32 and f64 compute in their own type; f16 and bf16 compute in float and round back once.
 *  - i32, i64 and u8 wrap around on overflow (add, sub, mul, neg, abs, pow), as two's
 *    complement does. div truncates toward zero and INT_MIN / -1 wraps to INT_MIN;
 *    floor_divide rounds toward -inf and remainder takes the divisor's sign (Python's // and
 *    %; floats by torch's fmod-based formulas). A zero integer divisor, or a negative exponent
 *    for pow, anywhere in the operand fails the whole op with SHIM_E_INVALID before anything
 *    is written. 0 pow 0 is 1.
 *  - exp, log, sqrt, tanh, sigmoid and erf..gelu_tanh are not defined on integer dtypes or
 *    bool: they return SHIM_E_UNSUPPORTED (cast to a floating dtype first). neg, abs, relu and
 *    sign work natively; floor, ceil, round and trunc return integers unchanged (not bool);
 *    isnan, isinf and logical_not take every dtype and write bool. round is half to even.
 *  - bool: add and maximum are or, mul and minimum are and, abs and relu return the input,
 *    comparisons order false < true; sub, div, pow, floor_divide, remainder and neg are
 *    SHIM_E_UNSUPPORTED.
 *  - maximum, minimum and relu propagate NaN; comparisons follow IEEE (NaN != NaN is true);
 *    logical_and and logical_or read nonzero (NaN included) as true and write bool.
 *  - Operands are matched by element count: a and b have out's count, or one element that
 *    every output element reuses (broadcast on either side).
 *  - shim_binary_scalar converts the scalar to the type the op computes in: float for f32,
 *    f16 and bf16, double for f64, and a's own dtype for integers and bool (by shim_cast's
 *    rules: truncated toward zero and saturated; bool is nonzero), then works as shim_binary
 *    with a one-element operand. So i32 x < 2.5 compares with 2.
 *  - out may be the same tensor as an input: every loop reads element i before writing it.
 *    (So no restrict: GCC still vectorises, checking for overlap at run time.)
 */
#include <math.h>
#include <string.h>

#include "cpu.h"
#include "vecmath.h"

static int is_comparison(int32_t op) { return shim_is_comparison(op); } /* and logical_and, logical_or: they write bool */

/* The kernels return SHIM_OK, or SHIM_E_INVALID from their switch's default: an op code they
 * have no case for (a table row without its cpu kernel). The entry points fail with it. */

/* M(fn) names the C library function for T: expf for float (M_F32), exp for double. */
#define M_F32(fn) fn##f
#define M_F64(fn) fn

/* dst[i] = EXPR over n elements, with x and y bound to a's and b's elements. An operand with
 * fa (fb) == 0 has one element, loaded once, so each of the three loops vectorises; at least
 * one operand is always full. The enclosing function defines `elem`, the element type. */
#define EACH(dst, EXPR)                                                             \
  do {                                                                              \
    if (fa && fb) {                                                                 \
      for (int64_t i = 0; i < n; i++) { elem x = a[i], y = b[i]; dst[i] = (EXPR); } \
    } else if (fa) {                                                                \
      elem y = b[0];                                                                \
      for (int64_t i = 0; i < n; i++) { elem x = a[i]; dst[i] = (EXPR); }           \
    } else {                                                                        \
      elem x = a[0];                                                                \
      for (int64_t i = 0; i < n; i++) { elem y = b[i]; dst[i] = (EXPR); }           \
    }                                                                               \
  } while (0)

#define COMPARISONS                                           \
  case SHIM_EQ: EACH(ob, x == y); break;                      \
  case SHIM_NE: EACH(ob, x != y); break;                      \
  case SHIM_LT: EACH(ob, x < y); break;                       \
  case SHIM_LE: EACH(ob, x <= y); break;                      \
  case SHIM_GT: EACH(ob, x > y); break;                       \
  case SHIM_GE: EACH(ob, x >= y); break;                      \
  case SHIM_LOGICAL_AND: EACH(ob, (x != 0) & (y != 0)); break; \
  case SHIM_LOGICAL_OR: EACH(ob, (x != 0) | (y != 0)); break;

/* torch's div_floor_floating and remainder (c10/util/generic_math.h, BinaryOpsKernel.cpp):
 * through fmod, so the quotient is exact where a / b would round up to the next integer. */
#define FLOAT_FLOORING(T, M)                                                  \
  static inline T floor_divide_##T(T a, T b) {                                \
    if (b == 0) return a / b;                                                  \
    T mod = M(fmod)(a, b), div = (a - mod) / b;                                \
    if (mod != 0 && (b < 0) != (mod < 0)) div -= 1;                            \
    if (div == 0) return M(copysign)(0, a / b);                                \
    T floordiv = M(floor)(div);                                                \
    return div - floordiv > (T)0.5 ? floordiv + 1 : floordiv;                  \
  }                                                                           \
  static inline T remainder_##T(T a, T b) {                                   \
    T mod = M(fmod)(a, b);                                                     \
    return mod != 0 && (b < 0) != (mod < 0) ? mod + b : mod;                   \
  }

FLOAT_FLOORING(float, M_F32)
FLOAT_FLOORING(double, M_F64)

static inline float fmod_float(float a, float b) { return fmodf(a, b); }
static inline double fmod_double(double a, double b) { return fmod(a, b); }

#define FLOAT_BINARY(NAME, T, POW, ATTR)                                                    \
  ATTR int NAME(int32_t op, void *out, const T *a, int fa, const T *b, int fb, int64_t n) {  \
    typedef T elem;                                                                         \
    T *o = out;                                                                             \
    uint8_t *ob = out;                                                                      \
    switch (op) {                                                                           \
      case SHIM_ADD: EACH(o, x + y); break;                                                 \
      case SHIM_SUB: EACH(o, x - y); break;                                                 \
      case SHIM_MUL: EACH(o, x * y); break;                                                 \
      case SHIM_DIV: EACH(o, x / y); break;                                                 \
      case SHIM_MAXIMUM: EACH(o, (x > y || x != x) ? x : y); break;                         \
      case SHIM_MINIMUM: EACH(o, (x < y || x != x) ? x : y); break;                         \
      case SHIM_POW: EACH(o, POW(x, y)); break;                                             \
      case SHIM_FLOOR_DIVIDE: EACH(o, floor_divide_##T(x, y)); break;                       \
      case SHIM_REMAINDER: EACH(o, remainder_##T(x, y)); break;                             \
      case SHIM_FMOD: EACH(o, fmod_##T(x, y)); break;                                       \
      COMPARISONS                                                                           \
      default: return SHIM_E_INVALID;                                                       \
    }                                                                                       \
    return SHIM_OK;                                                                         \
  }

FLOAT_BINARY(binary_f32_body, float, powf, static inline __attribute__((always_inline)))
FLOAT_BINARY(binary_f64, double, pow, static)

SHIM_CPU_CLONES static int binary_f32(int32_t op, void *out, const float *a, int fa, const float *b, int fb, int64_t n) {
  return binary_f32_body(op, out, a, fa, b, fb, n);
}

/* f32 over `rows` repetitions of m elements, one operand full and the other (a when
 * a_repeats, else b) the same m elements each time, as a bias is: the loop over repetitions
 * inside the clone, so each costs no call through the clones' dispatch. */
SHIM_CPU_CLONES static int binary_f32_repeat(int32_t op, char *out, int64_t out_size, const float *a, const float *b, int a_repeats,
                                             int64_t rows, int64_t m) {
  for (int64_t r = 0; r < rows; r++)
    SHIM_TRY(binary_f32_body(op, out + r * m * out_size, a_repeats ? a : a + r * m, 1, a_repeats ? b + r * m : b, 1, m));
  return SHIM_OK;
}

/* Integer division and power in int64, wrapping; callers have ruled out y == 0 and y < 0. */
static inline int64_t div_i64(int64_t x, int64_t y) { return y == -1 ? (int64_t)(0 - (uint64_t)x) : x / y; }

/* Python's // and %: toward -inf, the remainder taking the divisor's sign. */
static inline int64_t floor_divide_i64(int64_t x, int64_t y) {
  if (y == -1) return (int64_t)(0 - (uint64_t)x);
  int64_t q = x / y, r = x % y;
  return r != 0 && (r < 0) != (y < 0) ? q - 1 : q;
}

static inline int64_t remainder_i64(int64_t x, int64_t y) {
  if (y == -1) return 0;
  int64_t r = x % y;
  return r != 0 && (r < 0) != (y < 0) ? r + y : r;
}

/* C's %: the dividend's sign (torch's fmod). */
static inline int64_t fmod_i64(int64_t x, int64_t y) { return y == -1 ? 0 : x % y; }

static inline int64_t pow_i64(int64_t base, int64_t exponent) {
  uint64_t result = 1, b = (uint64_t)base;
  for (uint64_t e = (uint64_t)exponent; e; e >>= 1, b *= b)
    if (e & 1) result *= b;
  return (int64_t)result;
}

/* U: the unsigned type whose arithmetic wraps as T's should. */
#define INT_BINARY(NAME, T, U)                                                              \
  static int NAME(int32_t op, void *out, const T *a, int fa, const T *b, int fb, int64_t n) { \
    typedef T elem;                                                                         \
    T *o = out;                                                                             \
    uint8_t *ob = out;                                                                      \
    switch (op) {                                                                           \
      case SHIM_ADD: EACH(o, (T)((U)x + (U)y)); break;                                      \
      case SHIM_SUB: EACH(o, (T)((U)x - (U)y)); break;                                      \
      case SHIM_MUL: EACH(o, (T)((U)x * (U)y)); break;                                      \
      case SHIM_DIV: EACH(o, (T)div_i64(x, y)); break;                                      \
      case SHIM_MAXIMUM: EACH(o, x > y ? x : y); break;                                     \
      case SHIM_MINIMUM: EACH(o, x < y ? x : y); break;                                     \
      case SHIM_POW: EACH(o, (T)pow_i64(x, y)); break;                                      \
      case SHIM_FLOOR_DIVIDE: EACH(o, (T)floor_divide_i64(x, y)); break;                    \
      case SHIM_REMAINDER: EACH(o, (T)remainder_i64(x, y)); break;                          \
      case SHIM_FMOD: EACH(o, (T)fmod_i64(x, y)); break;                                    \
      COMPARISONS                                                                           \
      default: return SHIM_E_INVALID;                                                       \
    }                                                                                       \
    return SHIM_OK;                                                                         \
  }

INT_BINARY(binary_i32, int32_t, uint32_t)
INT_BINARY(binary_i64, int64_t, uint64_t)
INT_BINARY(binary_u8, uint8_t, uint8_t)

/* Reads any nonzero byte as true. Ops bool's row refuses were rejected before. */
static int binary_bool(int32_t op, void *out, const uint8_t *a, int fa, const uint8_t *b, int fb, int64_t n) {
  typedef uint8_t elem;
  uint8_t *ob = out;
  switch (op) {
    case SHIM_ADD: case SHIM_MAXIMUM: EACH(ob, (x != 0) | (y != 0)); break;
    case SHIM_MUL: case SHIM_MINIMUM: EACH(ob, (x != 0) & (y != 0)); break;
    case SHIM_EQ: EACH(ob, (x != 0) == (y != 0)); break;
    case SHIM_NE: EACH(ob, (x != 0) != (y != 0)); break;
    case SHIM_LT: EACH(ob, (x != 0) < (y != 0)); break;
    case SHIM_LE: EACH(ob, (x != 0) <= (y != 0)); break;
    case SHIM_GT: EACH(ob, (x != 0) > (y != 0)); break;
    case SHIM_GE: EACH(ob, (x != 0) >= (y != 0)); break;
    case SHIM_LOGICAL_AND: EACH(ob, (x != 0) & (y != 0)); break;
    case SHIM_LOGICAL_OR: EACH(ob, (x != 0) | (y != 0)); break;
    default: return SHIM_E_INVALID;
  }
  return SHIM_OK;
}

/* f16 and bf16: through float in chunks. A NULL operand is the one value a0 (b0). */
static int binary_half(int32_t op, int32_t dtype, void *out, const uint16_t *a, float a0, const uint16_t *b, float b0,
                       int64_t n) {
  float fa[SHIM_CPU_CHUNK], fb[SHIM_CPU_CHUNK], fo[SHIM_CPU_CHUNK];
  for (int64_t base = 0; base < n; base += SHIM_CPU_CHUNK) {
    int64_t m = shim_cpu_min64(SHIM_CPU_CHUNK, n - base);
    if (a) shim_cpu_load_f32(dtype, a + base, m, fa);
    if (b) shim_cpu_load_f32(dtype, b + base, m, fb);
    if (is_comparison(op)) {
      SHIM_TRY(binary_f32(op, (uint8_t *)out + base, a ? fa : &a0, a != NULL, b ? fb : &b0, b != NULL, m));
    } else {
      SHIM_TRY(binary_f32(op, fo, a ? fa : &a0, a != NULL, b ? fb : &b0, b != NULL, m));
      shim_cpu_store_f32(dtype, fo, m, (uint16_t *)out + base);
    }
  }
  return SHIM_OK;
}

static float half_value(int32_t dtype, const void *p) {
  float f;
  shim_cpu_load_f32(dtype, p, 1, &f);
  return f;
}

/* out = x (op) y over n elements of dtype; fx (fy) == 0: x (y) is one element. */
static int binary_kernel(int32_t op, int32_t dtype, void *out, const void *x, int fx, const void *y, int fy, int64_t n) {
  switch (dtype) {
    case SHIM_F32: return binary_f32(op, out, x, fx, y, fy, n);
    case SHIM_F64: return binary_f64(op, out, x, fx, y, fy, n);
    case SHIM_F16:
    case SHIM_BF16:
      return binary_half(op, dtype, out, fx ? x : NULL, fx ? 0.0f : half_value(dtype, x), fy ? y : NULL,
                         fy ? 0.0f : half_value(dtype, y), n);
    case SHIM_I32: return binary_i32(op, out, x, fx, y, fy, n);
    case SHIM_I64: return binary_i64(op, out, x, fx, y, fy, n);
    case SHIM_U8: return binary_u8(op, out, x, fx, y, fy, n);
    case SHIM_BOOL: return binary_bool(op, out, x, fx, y, fy, n);
    default: return SHIM_E_INVALID;
  }
}

/* A part's kernel status into its job's (shim_cpu_parallel's parts run on several threads). */
static void note_status(int *job_status, int status) {
  if (status != SHIM_OK) __atomic_store_n(job_status, status, __ATOMIC_RELAXED);
}

/* Integer division and pow: rejects a zero divisor or a negative exponent among y's count values. */
static int check_integer_operand(const char *fn, int32_t op, int32_t dtype, const void *y, int64_t count, const char *what) {
  if ((!shim_is_division(op) && op != SHIM_POW) || shim_cpu_is_float(dtype)) return SHIM_OK;
  int64_t tmp[SHIM_CPU_CHUNK];
  int64_t size = shim_dtype_size(dtype);
  for (int64_t base = 0; base < count; base += SHIM_CPU_CHUNK) {
    int64_t m = shim_cpu_min64(SHIM_CPU_CHUNK, count - base);
    shim_cpu_load_i64(dtype, (const char *)y + base * size, m, tmp);
    int bad = 0;
    for (int64_t i = 0; i < m; i++) bad |= op == SHIM_POW ? tmp[i] < 0 : tmp[i] == 0;
    if (bad) return shim_fail_bad_operand(fn, op, dtype, what);
  }
  return SHIM_OK;
}

/* One binary op over a range: elements of out (period 0), or whole repetitions of the operand
 * that repeats every `period` elements. x (y) is full when fx (fy), else one element. */
typedef struct {
  int32_t op, dtype;
  char *o;
  const char *x, *y;
  int fx, fy, x_repeats;
  int64_t period, size, out_size;
  int status; /* a part's kernel status other than SHIM_OK */
} binary_job;

static void binary_range(void *ctx, int64_t begin, int64_t end) {
  binary_job *j = ctx;
  if (j->period == 0) {
    note_status(&j->status, binary_kernel(j->op, j->dtype, j->o + begin * j->out_size, j->fx ? j->x + begin * j->size : j->x, j->fx,
                                          j->fy ? j->y + begin * j->size : j->y, j->fy, end - begin));
    return;
  }
  const int64_t m = j->period;
  if (j->dtype == SHIM_F32) {
    const float *x = (const float *)j->x, *y = (const float *)j->y;
    note_status(&j->status, binary_f32_repeat(j->op, j->o + begin * m * j->out_size, j->out_size, j->x_repeats ? x : x + begin * m,
                                              j->x_repeats ? y + begin * m : y, j->x_repeats, end - begin, m));
    return;
  }
  for (int64_t r = begin; r < end; r++)
    note_status(&j->status, binary_kernel(j->op, j->dtype, j->o + r * m * j->out_size, j->x_repeats ? j->x : j->x + r * m * j->size, 1,
                                          j->x_repeats ? j->y + r * m * j->size : j->y, 1, m));
}

/* fn's result once its parts ran: the failure of a kernel that had no case for op. */
static int finish(const char *fn, int status, int32_t op, const shim_op_row *row, int32_t dtype) {
  return status == SHIM_OK ? SHIM_OK : shim_fail_no_kernel(fn, row != NULL ? row->name : NULL, op, dtype);
}

int shim_binary(int32_t op, shim_tensor *out, const shim_tensor *a, const shim_tensor *b, shim_stream *s) {
  int64_t n;
  SHIM_TRY(shim_check_binary(op, out, a, b, &n));
  SHIM_TRY(check_integer_operand("shim_binary", op, a->dtype, shim_cpu_data(b), b->numel, "b"));
  const int64_t m = a->numel < b->numel ? a->numel : b->numel;
  binary_job job = {op, a->dtype, shim_cpu_data(out), shim_cpu_data(a), shim_cpu_data(b), a->numel == n, b->numel == n, a->numel == m,
                    0, shim_dtype_size(a->dtype), shim_dtype_size(out->dtype), SHIM_OK};
  if (m <= 1 || m == n) {
    shim_cpu_parallel(n, SHIM_CPU_GRAIN, binary_range, &job);
  } else { /* One operand repeats every m elements: the kernel over each repetition, both sides full. */
    job.period = m;
    shim_cpu_parallel(n / m, SHIM_CPU_GRAIN / m + 1, binary_range, &job);
  }
  return finish("shim_binary", job.status, op, shim_binary_row(op), a->dtype);
}

int shim_binary_scalar(int32_t op, shim_tensor *out, const shim_tensor *a, double b, int32_t scalar_first, shim_stream *s) {
  SHIM_TRY(shim_check_binary_scalar(op, out, a));
  void *o = shim_cpu_data(out);
  const void *t = shim_cpu_data(a);
  int64_t n = a->numel;
  if (a->dtype == SHIM_F16 || a->dtype == SHIM_BF16) { /* the scalar stays a float */
    int status = scalar_first ? binary_half(op, a->dtype, o, NULL, (float)b, t, 0.0f, n) : binary_half(op, a->dtype, o, t, 0.0f, NULL, (float)b, n);
    return finish("shim_binary_scalar", status, op, shim_binary_row(op), a->dtype);
  }
  uint64_t scalar = 0; /* one element of a's dtype (f32: a float) */
  shim_cpu_from_f64(a->dtype, b, &scalar);
  const void *x = scalar_first ? (const void *)&scalar : t, *y = scalar_first ? t : (const void *)&scalar;
  SHIM_TRY(check_integer_operand("shim_binary_scalar", op, a->dtype, y, scalar_first ? n : 1, scalar_first ? "a" : "the scalar"));
  binary_job job = {op, a->dtype, o, x, y, !scalar_first, scalar_first, 0, 0, shim_dtype_size(a->dtype), shim_dtype_size(out->dtype), SHIM_OK};
  shim_cpu_parallel(n, SHIM_CPU_GRAIN, binary_range, &job);
  return finish("shim_binary_scalar", job.status, op, shim_binary_row(op), a->dtype);
}

#define FLOAT_UNARY(NAME, T, M, EXP, TANH, SIGMOID, ERF, GELU, ATTR)                       \
  ATTR static int NAME(int32_t op, T *o, const T *a, int64_t n) {                           \
    const T one = 1, half = (T)0.5,                                                          \
            k_tanh = (T)0.79788456080286535588 /* sqrt(2 / pi) */;                          \
    switch (op) {                                                                           \
      case SHIM_NEG: for (int64_t i = 0; i < n; i++) o[i] = -a[i]; break;                   \
      case SHIM_ABS: for (int64_t i = 0; i < n; i++) o[i] = M(fabs)(a[i]); break;           \
      case SHIM_EXP: for (int64_t i = 0; i < n; i++) o[i] = EXP(a[i]); break;               \
      case SHIM_LOG: for (int64_t i = 0; i < n; i++) o[i] = M(log)(a[i]); break;            \
      case SHIM_SQRT: for (int64_t i = 0; i < n; i++) o[i] = M(sqrt)(a[i]); break;          \
      case SHIM_RELU: for (int64_t i = 0; i < n; i++) o[i] = a[i] < 0 ? (T)0 : a[i]; break; \
      case SHIM_TANH: for (int64_t i = 0; i < n; i++) o[i] = TANH(a[i]); break;             \
      case SHIM_SIGMOID: for (int64_t i = 0; i < n; i++) o[i] = SIGMOID(a[i]); break;          \
      case SHIM_ERF: for (int64_t i = 0; i < n; i++) o[i] = ERF(a[i]); break;               \
      case SHIM_LOG1P: for (int64_t i = 0; i < n; i++) o[i] = M(log1p)(a[i]); break;        \
      case SHIM_EXPM1: for (int64_t i = 0; i < n; i++) o[i] = M(expm1)(a[i]); break;        \
      case SHIM_RSQRT: for (int64_t i = 0; i < n; i++) o[i] = one / M(sqrt)(a[i]); break;   \
      case SHIM_RECIPROCAL: for (int64_t i = 0; i < n; i++) o[i] = one / a[i]; break;       \
      case SHIM_SIN: for (int64_t i = 0; i < n; i++) o[i] = M(sin)(a[i]); break;            \
      case SHIM_COS: for (int64_t i = 0; i < n; i++) o[i] = M(cos)(a[i]); break;            \
      case SHIM_SILU: for (int64_t i = 0; i < n; i++) o[i] = a[i] * SIGMOID(a[i]); break;   \
      case SHIM_SOFTPLUS:                                                                   \
        for (int64_t i = 0; i < n; i++) o[i] = a[i] > (T)20 ? a[i] : M(log1p)(M(exp)(a[i])); \
        break;                                                                              \
      case SHIM_GELU: for (int64_t i = 0; i < n; i++) o[i] = GELU(a[i]); break;             \
      case SHIM_GELU_TANH:                                                                  \
        for (int64_t i = 0; i < n; i++) {                                                   \
          T x = a[i];                                                                       \
          o[i] = half * x * (one + TANH(k_tanh * (x + (T)0.044715 * x * x * x)));           \
        }                                                                                   \
        break;                                                                              \
      case SHIM_FLOOR: for (int64_t i = 0; i < n; i++) o[i] = M(floor)(a[i]); break;        \
      case SHIM_CEIL: for (int64_t i = 0; i < n; i++) o[i] = M(ceil)(a[i]); break;          \
      case SHIM_ROUND: for (int64_t i = 0; i < n; i++) o[i] = M(nearbyint)(a[i]); break;    \
      case SHIM_TRUNC: for (int64_t i = 0; i < n; i++) o[i] = M(trunc)(a[i]); break;        \
      case SHIM_SIGN: for (int64_t i = 0; i < n; i++) o[i] = (T)((a[i] > 0) - (a[i] < 0)); break; \
      default: return SHIM_E_INVALID;                                                       \
    }                                                                                       \
    return SHIM_OK;                                                                         \
  }

static inline double sigmoid_f64(double x) { return 1.0 / (1.0 + exp(-x)); }
static inline double gelu_f64(double x) { return 0.5 * x * (1.0 + erf(x * 0.70710678118654752440)); }

/* f32 through vecmath.h, so exp, tanh, sigmoid, erf and the activations built on them vectorise. */
FLOAT_UNARY(unary_f32, float, M_F32, shim_vexpf, shim_vtanhf, shim_vsigmoidf, shim_verff, shim_vgeluf, SHIM_CPU_CLONES)
FLOAT_UNARY(unary_f64, double, M_F64, exp, tanh, sigmoid_f64, erf, gelu_f64, )

/* The integer cases; the rounding ops copy (the caller handles them). */
#define SIGNED_UNARY(NAME, T, U)                                                                \
  static int NAME(int32_t op, T *o, const T *a, int64_t n) {                                    \
    switch (op) {                                                                               \
      case SHIM_NEG: for (int64_t i = 0; i < n; i++) o[i] = (T)(0 - (U)a[i]); break;            \
      case SHIM_ABS: for (int64_t i = 0; i < n; i++) o[i] = a[i] < 0 ? (T)(0 - (U)a[i]) : a[i]; break; \
      case SHIM_RELU: for (int64_t i = 0; i < n; i++) o[i] = a[i] < 0 ? 0 : a[i]; break;        \
      case SHIM_SIGN: for (int64_t i = 0; i < n; i++) o[i] = (T)((a[i] > 0) - (a[i] < 0)); break; \
      default: return SHIM_E_INVALID;                                                           \
    }                                                                                           \
    return SHIM_OK;                                                                             \
  }

SIGNED_UNARY(unary_i32, int32_t, uint32_t)
SIGNED_UNARY(unary_i64, int64_t, uint64_t)

/* u8 is unsigned: neg wraps, sign is nonzero, the others return the input. bool: abs, relu
 * and sign return it too. */
static int unary_bytes(int32_t op, int32_t dtype, uint8_t *o, const uint8_t *a, int64_t n) {
  switch (op) {
    case SHIM_NEG: for (int64_t i = 0; i < n; i++) o[i] = (uint8_t)(0u - a[i]); break;
    case SHIM_SIGN: for (int64_t i = 0; i < n; i++) o[i] = a[i] != 0; break;
    case SHIM_ABS:
    case SHIM_RELU:
      if (dtype == SHIM_BOOL) for (int64_t i = 0; i < n; i++) o[i] = a[i] != 0;
      else if (o != a) memcpy(o, a, (size_t)n);
      break;
    default: return SHIM_E_INVALID;
  }
  return SHIM_OK;
}

/* isnan, isinf, logical_not into bool bytes; integers are never NaN or infinite. */
#define PREDICATE(T)                                                                         \
  switch (op) {                                                                              \
    case SHIM_ISNAN: for (int64_t i = 0; i < m; i++) o[i] = x[i] != x[i]; break;               \
    case SHIM_ISINF: for (int64_t i = 0; i < m; i++) o[i] = x[i] == (T)INFINITY || x[i] == -(T)INFINITY; break; \
    case SHIM_LOGICAL_NOT: for (int64_t i = 0; i < m; i++) o[i] = x[i] == 0; break;           \
    default: return SHIM_E_INVALID;                                                          \
  }

static int unary_predicate(int32_t op, int32_t dtype, uint8_t *out, const void *a, int64_t n) {
  if (dtype == SHIM_F64) {
    const double *x = a;
    uint8_t *o = out;
    int64_t m = n;
    PREDICATE(double)
    return SHIM_OK;
  }
  float buf[SHIM_CPU_CHUNK];
  int64_t ibuf[SHIM_CPU_CHUNK];
  int64_t size = shim_dtype_size(dtype);
  for (int64_t base = 0; base < n; base += SHIM_CPU_CHUNK) {
    int64_t m = shim_cpu_min64(SHIM_CPU_CHUNK, n - base);
    uint8_t *o = out + base;
    const char *src = (const char *)a + base * size;
    if (shim_cpu_is_float(dtype)) {
      const float *x = buf;
      shim_cpu_load_f32(dtype, src, m, buf);
      PREDICATE(float)
    } else {
      switch (op) {
        case SHIM_LOGICAL_NOT:
          shim_cpu_load_i64(dtype, src, m, ibuf);
          for (int64_t i = 0; i < m; i++) o[i] = ibuf[i] == 0;
          break;
        case SHIM_ISNAN: case SHIM_ISINF: memset(o, 0, (size_t)m); break;
        default: return SHIM_E_INVALID;
      }
    }
  }
  return SHIM_OK;
}

static int unary_half(int32_t op, int32_t dtype, uint16_t *o, const uint16_t *a, int64_t n) {
  float buf[SHIM_CPU_CHUNK];
  for (int64_t base = 0; base < n; base += SHIM_CPU_CHUNK) {
    int64_t m = shim_cpu_min64(SHIM_CPU_CHUNK, n - base);
    shim_cpu_load_f32(dtype, a + base, m, buf);
    SHIM_TRY(unary_f32(op, buf, buf, m));
    shim_cpu_store_f32(dtype, buf, m, o + base);
  }
  return SHIM_OK;
}

/* One unary op over a range of elements (a part of shim_cpu_parallel). */
typedef struct {
  int32_t op, dtype, flags; /* flags: op's table row's */
  char *o;
  const char *x;
  int64_t size, out_size;
  int status; /* a part's kernel status other than SHIM_OK */
} unary_job;

static int unary_kernel(const unary_job *j, void *o, const void *x, int64_t n) {
  const int32_t op = j->op, dtype = j->dtype;
  if (j->flags & SHIM_OPF_WRITES_BOOL) return unary_predicate(op, dtype, o, x, n);
  if (!shim_cpu_is_float(dtype) && (j->flags & SHIM_OPF_ROUNDING)) { /* integers are whole already */
    if (o != x) memcpy(o, x, (size_t)(n * j->size));
    return SHIM_OK;
  }
  switch (dtype) {
    case SHIM_F32: return unary_f32(op, o, x, n);
    case SHIM_F64: return unary_f64(op, o, x, n);
    case SHIM_F16: case SHIM_BF16: return unary_half(op, dtype, o, x, n);
    case SHIM_I32: return unary_i32(op, o, x, n);
    case SHIM_I64: return unary_i64(op, o, x, n);
    case SHIM_U8: case SHIM_BOOL: return unary_bytes(op, dtype, o, x, n);
    default: return SHIM_E_INVALID;
  }
}

static void unary_range(void *ctx, int64_t begin, int64_t end) {
  unary_job *j = ctx;
  note_status(&j->status, unary_kernel(j, j->o + begin * j->out_size, j->x + begin * j->size, end - begin));
}

int shim_unary(int32_t op, shim_tensor *out, const shim_tensor *a, shim_stream *s) {
  SHIM_TRY(shim_check_unary(op, out, a));
  const shim_op_row *row = shim_unary_row(op);
  unary_job job = {op, a->dtype, row->flags, shim_cpu_data(out), shim_cpu_data(a), shim_dtype_size(a->dtype), shim_dtype_size(out->dtype), SHIM_OK};
  shim_cpu_parallel(a->numel, SHIM_CPU_GRAIN, unary_range, &job);
  return finish("shim_unary", job.status, op, row, a->dtype);
}
