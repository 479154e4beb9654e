/* shim.h: the whole ABI between TypeScript (ffi/symbols.ts) and the native backends.
 *
 * Two libraries implement every function declared here, in the same order:
 *   build/libshim-cpu.so   host memory, synchronous streams, Gloo (c/cpu/)
 *   build/libshim-cuda.so  device memory, CUDA streams, NCCL and cuBLAS by dlopen (c/cuda/)
 *
 * Rules of the boundary:
 *   - every function returns an int status, SHIM_OK or a SHIM_E_* code; results come back
 *     through out-parameters. The one exception is shim_last_error, which cannot fail.
 *   - after a failure, shim_last_error() describes it, for the calling thread only.
 *   - nothing aborts, exits or throws across it; C++ exceptions stop at the extern "C" edge.
 *   - tensors are dense and contiguous (row-major), a view possibly from an offset into its
 *     base's memory. Ops never allocate their result: the caller passes an output tensor, and
 *     the op checks its dtype and shape.
 *   - a NULL stream means the backend's default stream.
 *   - the only global state is library handles (dlopen), the thread-local error text, the
 *     memory limit and the bytes counted against it, the cache of freed blocks (host memory
 *     on cpu, device memory on cuda), and the shim_set_* settings.
 *
 * Semantics both backends share (tests/shim holds them to it):
 *   - integers wrap on overflow; division truncates and INT_MIN / -1 is INT_MIN; floor_divide
 *     and remainder round toward -inf; a zero divisor (div, floor_divide, remainder) or a
 *     negative integer exponent anywhere fails the op (SHIM_E_INVALID) before anything is
 *     written; 0 pow 0 is 1.
 *   - an op on a dtype its table row (below) does not admit is SHIM_E_UNSUPPORTED: exp, log,
 *     sqrt, tanh, sigmoid and the other floating unary ops on integers or bool; floor, ceil,
 *     round, trunc keep integers and refuse bool; sign, isnan, isinf and logical_not take
 *     every dtype.
 *   - bool: add and maximum are or, mul and minimum are and; sub, div, pow, floor_divide,
 *     remainder, neg unsupported.
 *   - maximum, minimum, relu and max/min reductions propagate NaN.
 *   - binary_scalar computes in float for f32/f16/bf16, double for f64; for integer dtypes
 *     the scalar is first cast to the tensor's dtype.
 *   - cast: float to integer truncates and saturates, NaN becomes 0; integer to integer
 *     wraps; to bool is "nonzero"; f64/i64 round to f16/bf16 once, straight from the source.
 *   - rand: float dtypes only; uniform values are capped below 1 in the target dtype.
 *   - elementwise shapes match by element count (shim_binary: or repeat); out may alias an input there (be the
 *     same elements: sharing only some of them is SHIM_E_INVALID, as in torch), but not in matmul or transpose.
 *   - empty reductions: sum 0, prod 1, mean NaN, max/min SHIM_E_INVALID, any 0, all 1, norms 0.
 *
 * ffi/symbols.ts must match this header name for name and type for type;
 * tests/ffi/symbols.test.ts parses this file and fails on any difference. The enums are
 * tagged, and the op tables are X-macro lists, so scripts/abi.ts can generate their TypeScript
 * twins (ffi/abi.ts) from them; the same test fails when that file is stale. Functions take
 * their codes as int32_t.
 *
 * The shim reads no environment: what a process configures (threads, the memory limit, the
 * block cache, shared-memory collectives, where NCCL and cuBLAS are) it passes by shim_set_*.
 */
#ifndef MONARCH_SHIM_H
#define MONARCH_SHIM_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- status codes ------------------------------------------------------------------ */
enum shim_status {
  SHIM_OK = 0,
  SHIM_E_INVALID = 1,     /* bad argument: null handle, dtype or shape mismatch, bad dim */
  SHIM_E_NOMEM = 2,       /* host or device allocation failed */
  SHIM_E_UNSUPPORTED = 3, /* valid request this backend cannot do (e.g. a dtype) */
  SHIM_E_BACKEND = 4,     /* the CUDA runtime or cuBLAS reported an error */
  SHIM_E_COMM = 5,        /* Gloo or NCCL reported an error, or a peer is gone */
  SHIM_E_TIMEOUT = 6,     /* a communication did not complete within its timeout */
  SHIM_E_UNAVAILABLE = 7  /* no device, no driver, or a library that failed to load */
};

/* ---- element types (codes are part of the wire protocol too) ----------------------- */
enum shim_dtype {
  SHIM_F32 = 0,
  SHIM_F64 = 1,
  SHIM_F16 = 2,
  SHIM_BF16 = 3,
  SHIM_I32 = 4,
  SHIM_I64 = 5,
  SHIM_U8 = 6,
  SHIM_BOOL = 7 /* one byte, 0 or 1 */
};

enum shim_max_dims { SHIM_MAX_DIMS = 8 };

/* ---- op codes ------------------------------------------------------------------------ */
/* The elementwise and reduction ops are tables, one X-macro list per family: each row is
 * X(ID, code, "name", flags). The family's enum below is built from it, and so are the names
 * in error messages, the dtype checks both backends make (c/common/checks.c), the backends'
 * dispatch (a code not in the table, or one a backend has no kernel for, fails with
 * SHIM_E_INVALID naming it) and ffi/abi.ts's codes and flags (scripts/abi.ts). Adding an op is
 * a row here and its kernel cases. */

enum shim_op_flag { /* a row's flags, or'ed; floating dtypes take every op */
  SHIM_OPF_INT = 1,         /* defined on i32, i64 and u8 */
  SHIM_OPF_BOOL = 2,        /* defined on bool */
  SHIM_OPF_WRITES_BOOL = 4, /* out is SHIM_BOOL whatever the operands' dtype */
  SHIM_OPF_ROUNDING = 8,    /* rounds to an integer: integer operands come back unchanged */
  SHIM_OPF_DIVISION = 16    /* divides by its second operand: an integer zero there fails the op */
};

#define SHIM_OPF_ANY (SHIM_OPF_INT | SHIM_OPF_BOOL) /* every dtype */

/* shim_unary; out has a's dtype (SHIM_BOOL for the predicates). */
#define SHIM_UNARY_OPS(X)                                                                  \
  X(SHIM_NEG, 0, "neg", SHIM_OPF_INT) /* integers wrap */                                  \
  X(SHIM_ABS, 1, "abs", SHIM_OPF_ANY)                                                       \
  X(SHIM_EXP, 2, "exp", 0)                                                                  \
  X(SHIM_LOG, 3, "log", 0)                                                                  \
  X(SHIM_SQRT, 4, "sqrt", 0)                                                                \
  X(SHIM_RELU, 5, "relu", SHIM_OPF_ANY)                                                     \
  X(SHIM_TANH, 6, "tanh", 0)                                                                \
  X(SHIM_SIGMOID, 7, "sigmoid", 0)                                                          \
  X(SHIM_ERF, 8, "erf", 0)                                                                  \
  X(SHIM_LOG1P, 9, "log1p", 0)                                                              \
  X(SHIM_EXPM1, 10, "expm1", 0)                                                             \
  X(SHIM_RSQRT, 11, "rsqrt", 0)                                                             \
  X(SHIM_RECIPROCAL, 12, "reciprocal", 0)                                                   \
  X(SHIM_SIN, 13, "sin", 0)                                                                 \
  X(SHIM_COS, 14, "cos", 0)                                                                 \
  X(SHIM_SILU, 15, "silu", 0)                                                               \
  X(SHIM_SOFTPLUS, 16, "softplus", 0) /* beta 1, threshold 20 (torch's defaults): x above 20 is x */ \
  X(SHIM_GELU, 17, "gelu", 0)              /* the erf form */                               \
  X(SHIM_GELU_TANH, 18, "gelu_tanh", 0)    /* the tanh approximation */                     \
  X(SHIM_FLOOR, 19, "floor", SHIM_OPF_INT | SHIM_OPF_ROUNDING)                              \
  X(SHIM_CEIL, 20, "ceil", SHIM_OPF_INT | SHIM_OPF_ROUNDING)                                \
  X(SHIM_ROUND, 21, "round", SHIM_OPF_INT | SHIM_OPF_ROUNDING) /* half to even */           \
  X(SHIM_TRUNC, 22, "trunc", SHIM_OPF_INT | SHIM_OPF_ROUNDING)                              \
  X(SHIM_SIGN, 23, "sign", SHIM_OPF_ANY) /* sign(NaN) is 0 */                               \
  X(SHIM_ISNAN, 24, "isnan", SHIM_OPF_ANY | SHIM_OPF_WRITES_BOOL)                           \
  X(SHIM_ISINF, 25, "isinf", SHIM_OPF_ANY | SHIM_OPF_WRITES_BOOL)                           \
  X(SHIM_LOGICAL_NOT, 26, "logical_not", SHIM_OPF_ANY | SHIM_OPF_WRITES_BOOL)

/* shim_binary, shim_binary_scalar. */
#define SHIM_BINARY_OPS(X)                                                                 \
  X(SHIM_ADD, 0, "add", SHIM_OPF_ANY) /* bool: or */                                        \
  X(SHIM_SUB, 1, "sub", SHIM_OPF_INT)                                                       \
  X(SHIM_MUL, 2, "mul", SHIM_OPF_ANY) /* bool: and */                                       \
  X(SHIM_DIV, 3, "div", SHIM_OPF_INT | SHIM_OPF_DIVISION) /* integer dtypes truncate */     \
  X(SHIM_MAXIMUM, 4, "maximum", SHIM_OPF_ANY)                                               \
  X(SHIM_MINIMUM, 5, "minimum", SHIM_OPF_ANY)                                               \
  X(SHIM_POW, 6, "pow", SHIM_OPF_INT) /* a negative integer exponent fails the op */        \
  /* rounds toward -inf (torch's floor_divide and div_floor) */                             \
  X(SHIM_FLOOR_DIVIDE, 7, "floor_divide", SHIM_OPF_INT | SHIM_OPF_DIVISION)                 \
  /* Python's: the sign of the divisor (torch.remainder) */                                 \
  X(SHIM_REMAINDER, 8, "remainder", SHIM_OPF_INT | SHIM_OPF_DIVISION)                       \
  X(SHIM_EQ, 9, "eq", SHIM_OPF_ANY | SHIM_OPF_WRITES_BOOL)                                  \
  X(SHIM_NE, 10, "ne", SHIM_OPF_ANY | SHIM_OPF_WRITES_BOOL)                                 \
  X(SHIM_LT, 11, "lt", SHIM_OPF_ANY | SHIM_OPF_WRITES_BOOL)                                 \
  X(SHIM_LE, 12, "le", SHIM_OPF_ANY | SHIM_OPF_WRITES_BOOL)                                 \
  X(SHIM_GT, 13, "gt", SHIM_OPF_ANY | SHIM_OPF_WRITES_BOOL)                                 \
  X(SHIM_GE, 14, "ge", SHIM_OPF_ANY | SHIM_OPF_WRITES_BOOL)                                 \
  /* nonzero and nonzero (NaN is nonzero) */                                                \
  X(SHIM_LOGICAL_AND, 15, "logical_and", SHIM_OPF_ANY | SHIM_OPF_WRITES_BOOL)               \
  X(SHIM_LOGICAL_OR, 16, "logical_or", SHIM_OPF_ANY | SHIM_OPF_WRITES_BOOL)                 \
  /* C's fmod: the dividend's sign (torch.fmod); integers truncate */                       \
  X(SHIM_FMOD, 17, "fmod", SHIM_OPF_INT | SHIM_OPF_DIVISION)

/* shim_ternary. */
#define SHIM_TERNARY_OPS(X)                                                                \
  X(SHIM_WHERE, 0, "where", SHIM_OPF_ANY) /* a (any dtype, nonzero) ? b : c */              \
  X(SHIM_LERP, 1, "lerp", 0)              /* a + c * (b - a), torch's two-sided form */     \
  X(SHIM_ADDCMUL, 2, "addcmul", SHIM_OPF_INT) /* a + value * b * c */                       \
  X(SHIM_ADDCDIV, 3, "addcdiv", 0)            /* a + value * b / c */

/* shim_reduce (and shim_argreduce's, shim_cumulative's SHIM_MAX, SHIM_MIN, SHIM_PROD). */
#define SHIM_REDUCE_OPS(X)                                                                 \
  X(SHIM_SUM, 0, "sum", SHIM_OPF_ANY)                                                       \
  X(SHIM_MEAN, 1, "mean", SHIM_OPF_ANY)                                                     \
  X(SHIM_MAX, 2, "max", SHIM_OPF_ANY)                                                       \
  X(SHIM_MIN, 3, "min", SHIM_OPF_ANY)                                                       \
  X(SHIM_PROD, 4, "prod", SHIM_OPF_ANY)                                                     \
  X(SHIM_ANY, 5, "any", SHIM_OPF_ANY) /* nonzero anywhere (NaN is nonzero); empty: 0 */     \
  X(SHIM_ALL, 6, "all", SHIM_OPF_ANY) /* nonzero everywhere; empty: 1 */                    \
  X(SHIM_NORM1, 7, "norm1", 0)        /* sum of |x| */                                      \
  X(SHIM_NORM2, 8, "norm2", 0)        /* sqrt of the sum of squares */                      \
  X(SHIM_NORM_INF, 9, "norm_inf", 0)  /* max of |x| (NaN propagates); empty: 0 */

#define SHIM_OP_ENUM_ROW(id, code, name, flags) id = code,
enum shim_unary_op { SHIM_UNARY_OPS(SHIM_OP_ENUM_ROW) };
enum shim_binary_op { SHIM_BINARY_OPS(SHIM_OP_ENUM_ROW) };
enum shim_ternary_op { SHIM_TERNARY_OPS(SHIM_OP_ENUM_ROW) };
enum shim_reduce_op { SHIM_REDUCE_OPS(SHIM_OP_ENUM_ROW) };
#undef SHIM_OP_ENUM_ROW

enum shim_scatter_op { /* shim_scatter */
  SHIM_SCATTER_ASSIGN = 0, /* out[.., index, ..] = src; of several writes to one element the last (index order) stays */
  SHIM_SCATTER_ADD = 1     /* out[.., index, ..] += src, in index order (bool: or; integers wrap) */
};

enum shim_loss_reduction { /* shim_nll_loss, shim_mse_loss */
  SHIM_LOSS_NONE = 0, /* each element's loss */
  SHIM_LOSS_SUM = 1,
  SHIM_LOSS_MEAN = 2  /* over the count (mse) or the targets' weights (nll); none of either: NaN */
};

enum shim_comm_op { /* collectives */
  SHIM_OP_SUM = 0,
  SHIM_OP_PROD = 1,
  SHIM_OP_MIN = 2,
  SHIM_OP_MAX = 3,
  SHIM_OP_AVG = 4 /* sum, then divide by the group size (truncating for integers; not bool) */
};

enum shim_all_dims { SHIM_ALL_DIMS = -1 }; /* shim_reduce over every element */

enum shim_p2p_kind { SHIM_SEND = 0, SHIM_RECV = 1 }; /* shim_p2p kinds */

typedef struct shim_tensor shim_tensor;
typedef struct shim_stream shim_stream;
typedef struct shim_event shim_event;
typedef struct shim_comm shim_comm;

/* ---- errors and devices --------------------------------------------------------------- */

/* Text of the calling thread's last failure ("" if none). Valid until its next failure. */
const char *shim_last_error(void);

/* Whether this backend can run here: always on cpu; on cuda, a visible device and NCCL and
 * cuBLAS that load. On failure the last error says why (the error code included). */
int shim_probe(void);

int shim_device_count(int32_t *count);

/* Binds the calling process to one device (cuda: cudaSetDevice). cpu accepts only 0. */
int shim_set_device(int32_t device);

/* The memory a worker's tensors can use: host memory (cpu), or the current device's (cuda). */
int shim_memory_total(int64_t *bytes);

/* Limits the tensor memory of this process to bytes (0: no limit). An allocation that would
 * pass it fails with SHIM_E_NOMEM, naming the limit, before any memory is taken. */
int shim_set_memory_limit(int64_t bytes);

/* Bytes of tensor memory in use (allocated and not yet freed), and the limit (0: none). */
int shim_memory_usage(int64_t *in_use, int64_t *limit);

/* Counts nbytes of memory as in use, or fails fn with SHIM_E_NOMEM, naming the limit, when that
 * would pass it (shim_set_memory_limit): the backends for each storage, the worker for host
 * copies of tensors (a fetch's reply, a save's snapshot) while it holds them. */
int shim_memory_reserve(const char *fn, int64_t nbytes);

/* Gives back nbytes that shim_memory_reserve counted. */
int shim_memory_release(int64_t nbytes);

/* The threads this process's kernels may use, n >= 1 (cpu: the large elementwise, reduction
 * and row kernels split their work across n, and BLAS runs n; 1 until set). cuda ignores it. */
int shim_set_threads(int32_t n);

/* Whether freed tensor memory is kept for reuse (enabled = 1, the default) or freed at once (0):
 * host blocks of 64 KiB and more on cpu, device blocks on cuda. Turning it off frees what it
 * holds (cuda: the current device's). */
int shim_set_block_cache(int32_t enabled);

/* cpu: whether communicators created after this call move all_reduce and reduce_scatter through
 * shared memory when every member is on this host (enabled = 1, the default), or keep every
 * collective on TCP (0), as between hosts. cuda ignores it (NCCL picks its own transport). */
int shim_set_comm_shm(int32_t enabled);

/* cuda: the file dlopen loads for a runtime library, which = "nccl", "cublas" or "cublaslt"
 * (cublaslt first, globally, as libcublas needs it); path "" goes back to the usual names. Only
 * before the library is first loaded (shim_probe loads both): after, another path than the one
 * it loaded is SHIM_E_INVALID. cpu loads none of them and ignores it (an unknown `which` is
 * SHIM_E_INVALID on both). */
int shim_set_library(const char *which, const char *path);

/* ---- tensors -------------------------------------------------------------------------- */

/* A new uninitialised tensor. ndim may be 0 (a scalar, one element); a dim may be 0. */
int shim_tensor_alloc(int32_t dtype, int32_t ndim, const int64_t *shape, shim_tensor **out);

/* A tensor over elements offset .. offset + numel(shape) - 1 of src (in its flat order), sharing
 * src's memory: at offset 0 with src's element count a reshape, else one contiguous block of it
 * (narrow, select, split, ... when their result is one). A write through either is seen by the
 * other. The memory lives until every tensor sharing it has been freed. */
int shim_tensor_view(shim_tensor *src, int64_t offset, int32_t ndim, const int64_t *shape, shim_tensor **out);

int shim_tensor_free(shim_tensor *t);

/* Host to tensor, nbytes == the tensor's byte size. Returns once src may be reused. */
int shim_tensor_copy_in(shim_tensor *t, const void *src, int64_t nbytes, shim_stream *s);

/* Tensor to host, nbytes == the tensor's byte size. Waits for the stream's earlier work. */
int shim_tensor_copy_out(const shim_tensor *t, void *dst, int64_t nbytes, shim_stream *s);

/* The address of the tensor's elements when host code may read and write them in place (cpu),
 * else NULL (cuda: device memory). Valid while the tensor lives; no stream ordering. */
int shim_tensor_host_data(const shim_tensor *t, void **out);

/* ---- creation ops ------------------------------------------------------------------- */

/* Every element = value (converted to the tensor's dtype; zeros and ones are fills). */
int shim_fill(shim_tensor *out, double value, shim_stream *s);

/* out[i] = start + i * step. */
int shim_arange(shim_tensor *out, double start, double step, shim_stream *s);

/* Counter-based (Philox-4x32-10) random numbers: element i depends only on (seed, offset + i),
 * so cpu and cuda give the same values. normal = 0: uniform in [0, 1); 1: standard normal. */
int shim_rand(shim_tensor *out, uint64_t seed, uint64_t offset, int32_t normal, shim_stream *s);

/* ---- elementwise, reductions, linear algebra, layout -------------------------------- */

int shim_unary(int32_t op, shim_tensor *out, const shim_tensor *a, shim_stream *s);

/* a and b have one dtype; the same element count, or either has exactly one element, or a count
 * that divides the other's: it repeats every count elements (a broadcast over leading dims,
 * such as a bias [n] added to [m, n]). */
int shim_binary(int32_t op, shim_tensor *out, const shim_tensor *a, const shim_tensor *b,
                shim_stream *s);

/* a (op) b, or b (op) a when scalar_first is 1. */
int shim_binary_scalar(int32_t op, shim_tensor *out, const shim_tensor *a, double b,
                       int32_t scalar_first, shim_stream *s);

/* out = op(a, b, c): b, c and out have one dtype, and a too except for SHIM_WHERE (a is the
 * condition, of any dtype). Each operand has out's element count or exactly one element
 * (broadcast). value is addcmul's and addcdiv's scalar (converted as binary_scalar's is). */
int shim_ternary(int32_t op, shim_tensor *out, const shim_tensor *a, const shim_tensor *b, const shim_tensor *c,
                 double value, shim_stream *s);

/* Reduces dim (0 <= dim < ndim) or every element (SHIM_ALL_DIMS). out holds the product of
 * the other dims' sizes, in their order; its dtype may differ from a's (sum of bool to i64). */
int shim_reduce(int32_t op, shim_tensor *out, const shim_tensor *a, int32_t dim,
                shim_stream *s);

/* The index (i64) of the maximum (op SHIM_MAX) or minimum (SHIM_MIN) along dim, or of every
 * element (SHIM_ALL_DIMS, flat): the first one, and a NaN counts as beyond every number (the
 * first NaN wins), as torch's argmax and argmin. An empty reduced dim is SHIM_E_INVALID. */
int shim_argreduce(int32_t op, shim_tensor *indices, const shim_tensor *a, int32_t dim, shim_stream *s);

/* Running sum along dim (0 <= dim < ndim, or 0 for a 0-d a) into out of a's shape: floating
 * inputs accumulate in double, integers and bool in int64 (wrapping), each prefix stored in
 * out's dtype. */
int shim_cumsum(shim_tensor *out, const shim_tensor *a, int32_t dim, shim_stream *s);

/* Running product (op SHIM_PROD, accumulated as shim_cumsum's sum, indices NULL), maximum
 * (SHIM_MAX) or minimum (SHIM_MIN) along dim (as shim_cumsum's) into out of a's shape. For max
 * and min out has a's dtype and indices (i64, a's shape) the index each prefix's extreme came
 * from: a tie moves it to the later element, and a NaN, once seen, stays the extreme (a later
 * NaN moves the index to it), as torch's cummax and cummin. */
int shim_cumulative(int32_t op, shim_tensor *out, shim_tensor *indices, const shim_tensor *a, int32_t dim, shim_stream *s);

/* a sorted along dim (0 <= dim < ndim, or 0 for a 0-d a) into values (a's dtype and shape) and
 * indices (i64, a's shape: where each value was along dim). Stable: equal values keep their
 * order (-0 equals 0). Ascending puts NaN after every number, descending before, as torch's
 * sort. */
int shim_sort(shim_tensor *values, shim_tensor *indices, const shim_tensor *a, int32_t dim, int32_t descending, shim_stream *s);

/* torch.searchsorted: for each element of values, the index into its row of sorted (the last
 * dim; sorted's leading dims are values' leading dims, or sorted is 1-D for every row) where it
 * would go: the first position whose element is not below it (right: not at or below it), by
 * torch's comparisons, so a NaN value goes after every element. out is i64 or i32 with values'
 * element count; sorted and values share a dtype. */
int shim_searchsorted(shim_tensor *out, const shim_tensor *sorted, const shim_tensor *values, int32_t right, shim_stream *s);

enum shim_matmul_flag { /* shim_matmul's transpose, or'ed */
  SHIM_MATMUL_TRANSPOSE_A = 1, /* a is stored [..., k, m] and read as its transpose (BLAS's trans) */
  SHIM_MATMUL_TRANSPOSE_B = 2  /* b is stored [..., n, k] (or [n, k]) */
};

/* a [..., m, k] @ b [..., k, n] -> out [..., m, n]; b may also be 2-D for every batch. With
 * transpose flags an operand is read transposed in its last two dims where it lies, so a
 * transposed weight or gradient costs no copy. */
int shim_matmul(shim_tensor *out, const shim_tensor *a, const shim_tensor *b, int32_t transpose, shim_stream *s);

/* Element-by-element conversion into out's dtype (a copy when the dtypes match). */
int shim_cast(shim_tensor *out, const shim_tensor *a, shim_stream *s);

/* out = a with dims dim0 and dim1 swapped, materialised contiguously. */
int shim_transpose(shim_tensor *out, const shim_tensor *a, int32_t dim0, int32_t dim1,
                   shim_stream *s);

/* dst[dst_offset + sum_d i_d * dst_strides[d]] = src[src_offset + sum_d i_d * src_strides[d]]
 * for every index i of `shape` (ndim dims, ndim <= SHIM_MAX_DIMS; strides in elements: 0
 * repeats an element, a negative one walks back). One dtype; every element reached lies inside
 * its tensor; dst and src do not share memory. The layout ops (expand, permute, slicing, cat,
 * flip, ...) are this one copy. */
int shim_copy_strided(shim_tensor *dst, int64_t dst_offset, const int64_t *dst_strides,
                      const shim_tensor *src, int64_t src_offset, const int64_t *src_strides,
                      int32_t ndim, const int64_t *shape, shim_stream *s);

/* out[..., j, ...] = a[..., index[..., j, ...], ...] along dim (torch.gather): index is i64
 * with a's ndim, out has index's shape and a's dtype, and index's other dims are no larger
 * than a's. An index outside 0..a.shape[dim]-1 fails the op (SHIM_E_INVALID) before anything
 * is written. */
int shim_gather(shim_tensor *out, const shim_tensor *a, int32_t dim, const shim_tensor *index,
                shim_stream *s);

/* Softmax of a along dim (log = 1: log-softmax) into out, of a's dtype and shape; floating
 * dtypes only. Computes in float (double for f64), subtracting the maximum first, so large
 * inputs do not overflow; log-softmax is (x - max) - log(sum exp(x - max)), as torch's, so
 * logits far from 0 keep the result's precision. */
int shim_softmax(shim_tensor *out, const shim_tensor *a, int32_t dim, int32_t log, shim_stream *s);

/* Layer normalisation over the last m elements (a read as [rows, m]; m > 0 divides a's count):
 * out = (x - mean) / sqrt(var + eps) * weight + bias, with the biased variance. weight and bias
 * (m elements of a's dtype each) may be NULL. Floating dtypes; computes in float (double for
 * f64), the mean and variance accumulated in double. out has a's dtype and count. */
int shim_layer_norm(shim_tensor *out, const shim_tensor *a, const shim_tensor *weight, const shim_tensor *bias,
                    int64_t m, double eps, shim_stream *s);

/* torch.index_select: out = a with dim's entries picked by index (i64, 0-D or 1-D), so out has
 * a's dtype and shape but index's count along dim (0 <= dim < ndim; a 0-d a is read as [1]).
 * An index outside 0..a.shape[dim]-1 fails the op (SHIM_E_INVALID) before anything is written. */
int shim_index_select(shim_tensor *out, const shim_tensor *a, int32_t dim, const shim_tensor *index,
                      shim_stream *s);

/* ---- triangles, fused attention and normalisation, dropout, scatter ------------------- */

/* The lower (upper = 0, tril) or upper (upper = 1, triu) triangle of a's last two dims (a at
 * least 2-D) into out of a's dtype and shape: element (i, j) is kept when j - i <= diagonal
 * (tril) or j - i >= diagonal (triu), else 0. Every dtype. */
int shim_triangle(shim_tensor *out, const shim_tensor *a, int64_t diagonal, int32_t upper, shim_stream *s);

/* Scaled dot-product attention in one pass: q [B, L, E], k [B, S, E], v [B, S, Ev] of one
 * floating dtype -> out [B, L, Ev]. scores = scale * q @ k^T; causal = 1 keeps (i, j) with
 * j <= i only; mask (NULL: none) is [1 or B, L, S], bool keeping where true, or of q's dtype and
 * added to the scores; then softmax over S (a row with nothing kept gives NaN, as torch's) and
 * @ v. Computes in float (double for f64). */
int shim_attention(shim_tensor *out, const shim_tensor *q, const shim_tensor *k, const shim_tensor *v,
                   const shim_tensor *mask, double scale, int32_t causal, shim_stream *s);

/* out = a / sqrt(mean(a^2) + eps) * weight over each run of `inner` elements of a (its last
 * dims); weight NULL is 1, else `inner` elements of a's dtype. Floating dtypes; computes in float
 * (double for f64). */
int shim_rms_norm(shim_tensor *out, const shim_tensor *a, const shim_tensor *weight, int64_t inner, double eps,
                  shim_stream *s);

/* Dropout with shim_rand's uniform draws: element i is kept when draw (seed, offset + i) >= p,
 * and then scaled by 1 / (1 - p), else 0 (p = 1 drops everything); mask (bool, a's element
 * count) records which were kept. 0 <= p <= 1; floating dtypes; out has a's dtype. */
int shim_dropout(shim_tensor *out, shim_tensor *mask, const shim_tensor *a, double p, uint64_t seed, uint64_t offset,
                 shim_stream *s);

/* The inverse of shim_gather, in place: out[.., index[.., j, ..], ..] (op)= src[.., j, ..] along
 * dim, out's other elements unchanged. index is i64 with out's ndim; src has out's dtype and
 * ndim; index's dims are no larger than src's, nor than out's except along dim. An index
 * outside 0..out.shape[dim]-1 fails the op (SHIM_E_INVALID) before anything is written. Each
 * line along dim is walked in index order, so both backends give the same values. */
int shim_scatter(int32_t op, shim_tensor *out, int32_t dim, const shim_tensor *index, const shim_tensor *src,
                 shim_stream *s);
/* ---- fused losses ------------------------------------------------------------------ */

/* torch.nn.functional.nll_loss in one pass: input (floating) read as [N, C, inner], target i64
 * [N, inner] (N x inner elements), weight NULL (1) or C elements of input's dtype. Element i
 * loses -weight[t] * input[n, t, k] (t = target[i]), or 0 where t == ignore_index; out (input's
 * dtype) holds each loss (SHIM_LOSS_NONE: target's count), their sum, or the sum over the
 * weights of the targets not ignored (SHIM_LOSS_MEAN), accumulated in double and rounded once.
 * A target outside 0..C-1 that is not ignore_index fails the op (SHIM_E_INVALID) before
 * anything is written. */
int shim_nll_loss(shim_tensor *out, const shim_tensor *input, const shim_tensor *target, const shim_tensor *weight,
                  int64_t ignore_index, int32_t reduction, shim_stream *s);

/* torch.nn.functional.mse_loss in one pass: (a - b)^2 with a, b of one floating dtype and one
 * element count, computed in float (double for f64); out (their dtype) holds each square
 * (SHIM_LOSS_NONE: their count), or their sum or mean accumulated in double and rounded once. */
int shim_mse_loss(shim_tensor *out, const shim_tensor *a, const shim_tensor *b, int32_t reduction, shim_stream *s);

/* ---- concatenation ------------------------------------------------------------------- */

/* torch.cat: the count parts (each of out's dtype and ndim, ndim >= 1, equal to out's shape
 * except along dim) one after another along dim into out, whose size along dim is theirs
 * summed. Each row of out is written once, part after part (not part by part over all of out). */
int shim_cat(shim_tensor *out, int32_t count, const shim_tensor *const *parts, int32_t dim, shim_stream *s);

/* torch.index_add_ along dim, in place: out[.., index[j], ..] += alpha * src[.., j, ..] for each
 * entry j of index (i64, 0-D or 1-D, n entries); src has out's dtype and shape except n entries
 * along dim (a 0-d out or src is read as [1]). f32 and f64 compute in their own type with alpha
 * converted to it, rounding once per add; f16 and bf16 as torch's kernels do: alpha rounded to
 * the dtype, its product with src rounded to it, then the sum; integers add (int64)alpha * src,
 * wrapping; bool ORs src in where alpha is nonzero. Each element's adds run in index order, so both
 * backends give the same values. An index outside 0..out.shape[dim]-1 fails the op
 * (SHIM_E_INVALID) before anything is written. */
int shim_index_add(shim_tensor *out, int32_t dim, const shim_tensor *index, const shim_tensor *src, double alpha,
                   shim_stream *s);

/* ---- optimizers ---------------------------------------------------------------------- */
/* One parameter updated in place per call, each element read and written once, in the order
 * of torch.optim's single-tensor loop (torch 1.13): f32 computes in float with every scalar
 * rounded to float as torch's scalar ops round them, f64 in double; other dtypes are
 * SHIM_E_UNSUPPORTED (keep f32 master weights). Every tensor has param's dtype and element
 * count and none aliases another. */

enum shim_optim_flag { /* shim_sgd's and shim_adamw's flags, or'ed */
  SHIM_OPTIM_NESTEROV = 1, /* sgd: step along d + momentum * buf instead of buf */
  SHIM_OPTIM_MAXIMIZE = 2, /* both: ascend (the gradient negated) */
  SHIM_OPTIM_FIRST = 4,    /* sgd: the momentum buffer starts as d (torch's first step) */
  SHIM_OPTIM_AMSGRAD = 8   /* adamw: normalise by the running maximum of exp_avg_sq */
};

/* torch.optim.SGD: d = grad + weight_decay * param; with momentum != 0, buf = d on the FIRST
 * step, else buf = momentum * buf + (1 - dampening) * d, and d = buf (NESTEROV: d + momentum *
 * buf); param = param - lr * d. momentum_buf may be NULL when momentum is 0. */
int shim_sgd(shim_tensor *param, const shim_tensor *grad, shim_tensor *momentum_buf, double lr, double momentum,
             double dampening, double weight_decay, int32_t flags, shim_stream *s);

/* torch.optim.AdamW's step number `step` (1 on the first): param *= 1 - lr * weight_decay;
 * exp_avg = beta1 * exp_avg + (1 - beta1) * grad; exp_avg_sq = beta2 * exp_avg_sq +
 * (1 - beta2) * grad^2; v = exp_avg_sq (AMSGRAD: max_exp_avg_sq = max(max_exp_avg_sq,
 * exp_avg_sq), v = that); param -= lr / (1 - beta1^step) * exp_avg / (sqrt(v) /
 * sqrt(1 - beta2^step) + eps). max_exp_avg_sq may be NULL without AMSGRAD. */
int shim_adamw(shim_tensor *param, const shim_tensor *grad, shim_tensor *exp_avg, shim_tensor *exp_avg_sq,
               shim_tensor *max_exp_avg_sq, double lr, double beta1, double beta2, double eps, double weight_decay,
               int64_t step, int32_t flags, shim_stream *s);

/* ---- streams and events ------------------------------------------------------------- */
/* cpu: work runs in order when issued, and events are complete once recorded. */

int shim_stream_create(shim_stream **out);
int shim_stream_destroy(shim_stream *s);
int shim_stream_synchronize(shim_stream *s);
int shim_event_create(shim_event **out);
int shim_event_destroy(shim_event *e);

/* The event completes when the work issued to s so far has completed. */
int shim_event_record(shim_event *e, shim_stream *s);

/* Work issued to s after this call starts after e completes (cudaStreamWaitEvent). */
int shim_stream_wait_event(shim_stream *s, shim_event *e);

int shim_event_query(shim_event *e, int32_t *done);
int shim_event_synchronize(shim_event *e);

/* Tests only: holds s busy for at least microseconds before its later work (cuda: a spin
 * kernel), so a missing wait shows up as a wrong result. cpu: returns at once. */
int shim_debug_stream_spin(shim_stream *s, int64_t microseconds);

/* ---- communicators -------------------------------------------------------------------- */
/* Two-phase creation, with no sockets opened for rendezvous: create, then publish the bytes
 * of shim_comm_address through the store; every member then calls shim_comm_connect with
 * every member's bytes. A sub-communicator is another create/connect over its own members.
 * Every call below waits at most the timeout given at creation, then fails with
 * SHIM_E_TIMEOUT; a peer that is gone gives SHIM_E_COMM. Before any data moves, the members
 * of a collective (the two sides of a transfer) agree on what each passed: members that
 * disagree on dtype, element count, op or root all fail the call with SHIM_E_INVALID
 * ("members disagree"), and the comm stays usable; a member that refuses its own arguments
 * fails with its own error and still tells the others, who fail so. */

/* hostname: the address this member's transport binds and advertises (cpu; "" = loopback).
 * cuda ignores it. */
int shim_comm_create(int32_t rank, int32_t size, int64_t timeout_ms, const char *hostname,
                     shim_comm **out);

/* Writes the byte count to *len, and the bytes to buf when cap >= *len. buf may be NULL
 * with cap 0 to ask for the count; a non-zero cap below it is SHIM_E_INVALID. The bytes may
 * be empty (cuda: every member but 0). */
int shim_comm_address(shim_comm *c, uint8_t *buf, int64_t cap, int64_t *len);

/* addrs: every member's address bytes end to end in rank order; lens: size counts. */
int shim_comm_connect(shim_comm *c, const uint8_t *addrs, const int64_t *lens);

int shim_comm_destroy(shim_comm *c);

/* What carries a connected comm's data, as a short name: cpu "tcp" (Gloo's TCP pairs, as
 * between hosts) or "shm+tcp" (every member mapped every other's shared segment, so all are on
 * one host: all_reduce and reduce_scatter go through shared memory, the rest over TCP); "self"
 * for one member; cuda "nccl" (NCCL picks P2P, shared memory or its network on its own;
 * NCCL_DEBUG=INFO says which). "" for NULL or a comm not yet connected. */
const char *shim_comm_transport(const shim_comm *c);

/* out may be in (in place). */
int shim_all_reduce(shim_comm *c, shim_tensor *out, const shim_tensor *in, int32_t op,
                    shim_stream *s);

/* out holds size x in, member i's input at index i (out [size, ...in.shape]). */
int shim_all_gather(shim_comm *c, shim_tensor *out, const shim_tensor *in, shim_stream *s);

/* in holds size x out; member r receives the reduction of every member's chunk r. */
int shim_reduce_scatter(shim_comm *c, shim_tensor *out, const shim_tensor *in, int32_t op,
                        shim_stream *s);

/* in and out split into size equal chunks along the flat order: chunk j of in goes to
 * member j, and chunk i of out came from member i. */
int shim_all_to_all(shim_comm *c, shim_tensor *out, const shim_tensor *in, shim_stream *s);

int shim_broadcast(shim_comm *c, shim_tensor *t, int32_t root, shim_stream *s);

int shim_barrier(shim_comm *c, shim_stream *s);

/* n sends and receives posted together and completed together, so members that send to
 * each other in one call cannot deadlock. kinds[i] is SHIM_SEND or SHIM_RECV, peers[i] a
 * member other than this one, tensors[i] the buffer. */
int shim_p2p(shim_comm *c, int32_t n, const int32_t *kinds, const int32_t *peers,
             shim_tensor *const *tensors, shim_stream *s);

#ifdef __cplusplus
}
#endif

#endif /* MONARCH_SHIM_H */
