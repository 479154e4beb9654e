/* internal.h: what the cpu and cuda backends share behind the ABI (not part of it): the tensor
 * and communicator layout both use, dtype sizes, the error helpers every function returns
 * through, the rows of the op tables (op_table.c), and the argument checks every op and
 * collective makes before touching memory (checks.c, comm_checks.c, ...), so both backends
 * fail alike, with the same status and text. */
#ifndef MONARCH_SHIM_INTERNAL_H
#define MONARCH_SHIM_INTERNAL_H

#include "../shim.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Memory shared by a tensor and its views (shim_tensor_view); freed with the last of them. */
typedef struct shim_storage {
  void *data; /* host memory (cpu) or device memory (cuda) */
  int64_t nbytes;
  int32_t refs; /* changed atomically, so tensors sharing it may be freed on different threads */
} shim_storage;

struct shim_tensor {
  shim_storage *storage;
  int64_t offset; /* bytes from storage->data to element 0: nonzero for a view of a block further in */
  int32_t dtype;
  int32_t ndim;
  int64_t shape[SHIM_MAX_DIMS];
  int64_t numel;
};

/* Bytes per element of a dtype, or 0 for an unknown code. */
int64_t shim_dtype_size(int32_t dtype);
const char *shim_dtype_name(int32_t dtype);

/* Writes "f32[2, 3]" into buf and returns it, for error messages. */
const char *shim_describe(const shim_tensor *t, char *buf, size_t cap);

/* Records the calling thread's error text and returns code, so failures read
 * `return shim_fail(SHIM_E_INVALID, "...", ...)`. */
int shim_fail(int code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Clears the calling thread's error text; successful calls leave it alone. */
void shim_clear_error(void);

/* NULL-handle guard for the first lines of an entry point; fn names it in the message. */
#define SHIM_REQUIRE_IN(fn, ptr, what) \
  do { if ((ptr) == NULL) return shim_fail(SHIM_E_INVALID, "%s: %s is null", (fn), (what)); } while (0)

#define SHIM_REQUIRE(ptr, what) SHIM_REQUIRE_IN(__func__, ptr, what)

/* Propagates a failed status from a shim call. */
#define SHIM_TRY(call) \
  do { int shim_try_status_ = (call); if (shim_try_status_ != SHIM_OK) return shim_try_status_; } while (0)

/* ---- tensor headers (tensor.c, which also defines shim.h's shim_tensor_view for both) -- */

/* Element 0 of t: host memory (cpu) or device memory (cuda). */
static inline void *shim_tensor_data(const shim_tensor *t) { return (char *)t->storage->data + t->offset; }

/* Whether a and b (neither empty) have a byte of memory in common. */
int shim_tensors_overlap(const shim_tensor *a, const shim_tensor *b);

/* fn's out is a itself (the same memory, element for element) or shares none of a's (named
 * what): a write through out may not change an element of a that is yet to be read (torch
 * refuses the same, "some elements ... refer to a single memory location"). */
int shim_check_no_partial_overlap(const char *fn, const shim_tensor *out, const shim_tensor *a, const char *what);

/* Validates dtype, ndim and shape and computes the element count. */
int shim_check_shape(int32_t dtype, int32_t ndim, const int64_t *shape, int64_t *numel);

/* A new header over storage, holding one reference to it. */
int shim_tensor_new(shim_storage *storage, int32_t dtype, int32_t ndim, const int64_t *shape, int64_t numel,
                    shim_tensor **out);

/* Frees t's header and drops its reference; returns the storage when that was the last one,
 * for the backend to free, else NULL. */
shim_storage *shim_tensor_drop(shim_tensor *t);

/* ---- the memory limit (memory.c) ------------------------------------------------------ */

/* shim_memory_reserve and shim_memory_release (c/shim.h): each backend reserves a storage's
 * bytes before allocating it and releases them when it frees it (or its allocation failed). */

/* The caches of freed blocks (cuda's device memory, cpu's host memory) keep blocks by size
 * class, as PyTorch's caching allocator does: a size rounded up to a multiple of a quarter of
 * its power of two, that step at least 512 bytes and at most 2 MiB (so a tensor of tens of GiB
 * wastes almost nothing), binned by floor(log2(class)). */
enum { SHIM_CACHE_BINS = 64 };

static inline int shim_floor_log2(int64_t n) { return 63 - __builtin_clzll((unsigned long long)n); }

static inline int64_t shim_size_class(int64_t n) {
  const int64_t min_step = 512, max_step = (int64_t)2 << 20;
  if (n <= min_step) return min_step;
  int64_t step = ((int64_t)1 << shim_floor_log2(n)) / 4;
  if (step < min_step) step = min_step;
  if (step > max_step) step = max_step;
  return (n + step - 1) / step * step;
}

/* ---- the op tables (c/shim.h's rows by code: op_table.c) ------------------------------ */

typedef struct shim_op_row {
  const char *name;
  int32_t flags; /* SHIM_OPF_* */
} shim_op_row;

/* The row of a family's op code, or NULL for a code its table lacks. */
const shim_op_row *shim_unary_row(int32_t op);
const shim_op_row *shim_binary_row(int32_t op);
const shim_op_row *shim_ternary_row(int32_t op);
const shim_op_row *shim_reduce_row(int32_t op);

/* Whether a row's op takes operands of dtype: floating always, else by SHIM_OPF_INT or _BOOL. */
int shim_op_defined_on(const shim_op_row *row, int32_t dtype);

/* fn's failure (SHIM_E_INVALID) when its backend's dispatch meets a code it has no case for:
 * the default of every switch over op codes, so a table row without its kernel cases fails
 * instead of computing another op or leaving out unwritten. name: the row's, or NULL. */
int shim_fail_no_kernel(const char *fn, const char *name, int32_t op, int32_t dtype);

/* ---- the settings (settings.c) --------------------------------------------------------- */

/* fn's enabled is 0 or 1. */
int shim_check_flag(const char *fn, int32_t enabled);

/* shim_set_library's which is known, as *library: SHIM_LIBRARY_*; path is not NULL. */
enum { SHIM_LIBRARY_NCCL = 0, SHIM_LIBRARY_CUBLAS = 1, SHIM_LIBRARY_CUBLASLT = 2 };
int shim_check_library(const char *which, const char *path, int32_t *library);

/* ---- argument checks of the ops (checks.c) ------------------------------------------- */
/* Each takes an entry point's arguments, null handles included, and fails as that entry point
 * (its name in the message) before anything is read from or written to tensor memory. */

/* shim_tensor_copy_in / copy_out (fn): t exists, nbytes is its byte size, and host (named
 * host_name) is there when nbytes > 0. */
int shim_check_copy(const char *fn, const shim_tensor *t, const void *host, const char *host_name, int64_t nbytes);

int shim_check_rand(const shim_tensor *out, int32_t normal);
int shim_check_unary(int32_t op, const shim_tensor *out, const shim_tensor *a);

/* *n: the element count of the result (a's or b's, whichever is not the broadcast one). */
int shim_check_binary(int32_t op, const shim_tensor *out, const shim_tensor *a, const shim_tensor *b, int64_t *n);
int shim_check_binary_scalar(int32_t op, const shim_tensor *out, const shim_tensor *a);

/* A binary op whose row has SHIM_OPF_DIVISION: a zero integer divisor fails it. */
static inline int shim_is_division(int32_t op) {
  const shim_op_row *row = shim_binary_row(op);
  return row != NULL && (row->flags & SHIM_OPF_DIVISION) != 0;
}

/* A binary op whose row has SHIM_OPF_WRITES_BOOL (the comparisons and logical ops). */
static inline int shim_is_comparison(int32_t op) {
  const shim_op_row *row = shim_binary_row(op);
  return row != NULL && (row->flags & SHIM_OPF_WRITES_BOOL) != 0;
}

/* Every operand has out's element count or one; dtypes and op code valid for the op. */
int shim_check_ternary(int32_t op, const shim_tensor *out, const shim_tensor *a, const shim_tensor *b,
                       const shim_tensor *c);

/* Fails fn for an integer division whose operand `what` holds a zero, or an integer pow whose
 * exponent `what` holds a negative value; each backend scans its own memory for one. */
int shim_fail_bad_operand(const char *fn, int32_t op, int32_t dtype, const char *what);

/* a read as [outer, r, inner] with r the reduced dim (SHIM_ALL_DIMS: [1, numel, 1]). */
typedef struct shim_reduce_dims {
  int64_t outer, r, inner;
} shim_reduce_dims;

int shim_check_reduce(int32_t op, const shim_tensor *out, const shim_tensor *a, int32_t dim, shim_reduce_dims *dims);

/* indices is i64 holding what reducing dim of a leaves; op is SHIM_MAX or SHIM_MIN; the dim is
 * not empty. */
int shim_check_argreduce(int32_t op, const shim_tensor *indices, const shim_tensor *a, int32_t dim, shim_reduce_dims *dims);

/* out has a's element count; dims: a around dim. */
int shim_check_cumsum(const shim_tensor *out, const shim_tensor *a, int32_t dim, shim_reduce_dims *dims);

/* shim_cumulative, shim_sort: a read as [outer, r, inner] around dim (sort_checks.c). */
int shim_check_cumulative(int32_t op, const shim_tensor *out, const shim_tensor *indices, const shim_tensor *a, int32_t dim,
                          shim_reduce_dims *dims);
int shim_check_sort(const shim_tensor *values, const shim_tensor *indices, const shim_tensor *a, int32_t dim,
                    shim_reduce_dims *dims);

/* shim_searchsorted: rows of m sorted elements, n values per row; shared: every row reads one sorted row. */
typedef struct shim_search_dims {
  int64_t rows, m, n;
  int32_t shared;
} shim_search_dims;
int shim_check_searchsorted(const shim_tensor *out, const shim_tensor *sorted, const shim_tensor *values, shim_search_dims *dims);

/* a [batch..., m, k] @ b ([batch...,] k, n); b_batched: b has a's batch dims, else it is 2-D;
 * ta, tb: a is stored [batch..., k, m], b ([batch...,] n, k) (shim_matmul's transpose flags). */
typedef struct shim_matmul_dims {
  int64_t batch, m, k, n;
  int32_t b_batched, ta, tb;
} shim_matmul_dims;

int shim_check_matmul(const shim_tensor *out, const shim_tensor *a, const shim_tensor *b, int32_t transpose,
                      shim_matmul_dims *dims);

int shim_check_cast(const shim_tensor *out, const shim_tensor *a);

/* Swapping dims d0 < d1 of a contiguous a is a copy between [before, s0, between, s1, after]
 * and [before, s1, between, s0, after]; each is a product of the dims in that place. */
typedef struct shim_transpose_dims {
  int64_t before, s0, between, s1, after;
} shim_transpose_dims;

/* out may share a's memory only when nothing moves (dim0 == dim1, or no elements). */
int shim_check_transpose(const shim_tensor *out, const shim_tensor *a, int32_t dim0, int32_t dim1,
                         shim_transpose_dims *dims);

/* A strided copy collapsed to at most SHIM_MAX_DIMS dims (adjacent dims merged where both
 * sides allow), innermost last; numel is the element count. */
typedef struct shim_strided_plan {
  int32_t ndim;
  int64_t numel;
  int64_t shape[SHIM_MAX_DIMS];
  int64_t dst_strides[SHIM_MAX_DIMS];
  int64_t src_strides[SHIM_MAX_DIMS];
  int64_t dst_offset, src_offset;
} shim_strided_plan;

int shim_check_copy_strided(const shim_tensor *dst, int64_t dst_offset, const int64_t *dst_strides, const shim_tensor *src,
                            int64_t src_offset, const int64_t *src_strides, int32_t ndim, const int64_t *shape,
                            shim_strided_plan *plan);

/* index read as [outer, j, inner] and a as [outer, r, a_inner] around dim; index's other dims
 * must fit in a's, so each output element (o, j, i) reads a at (o', index, i') with o' and i'
 * the same coordinates in a's layout: the backends walk index's shape with a's strides. */
int shim_check_gather(const shim_tensor *out, const shim_tensor *a, int32_t dim, const shim_tensor *index);

/* a read as [outer, r, inner] around dim (as shim_check_reduce does). */
int shim_check_softmax(const shim_tensor *out, const shim_tensor *a, int32_t dim, int32_t log, shim_reduce_dims *dims);

/* ---- argument checks of the layout family's fused ops (layout_checks.c) --------------- */

/* The last two dims of a as [batch, rows, cols] (a at least 2-D). */
typedef struct shim_matrix_dims {
  int64_t batch, rows, cols;
} shim_matrix_dims;

int shim_check_triangle(const shim_tensor *out, const shim_tensor *a, int32_t upper, shim_matrix_dims *dims);

/* ---- argument checks of the nn family's fused ops (nn_checks.c) ----------------------- */

/* batch B, query length L, key length S, head dims E and Ev; mask_batch: the mask's B (1 or B, 0
 * without one); mask_bool: it is a bool mask. */
typedef struct shim_attention_dims {
  int64_t batch, l, s, e, ev, mask_batch;
  int32_t mask_bool;
} shim_attention_dims;

int shim_check_attention(const shim_tensor *out, const shim_tensor *q, const shim_tensor *k, const shim_tensor *v,
                         const shim_tensor *mask, int32_t causal, shim_attention_dims *dims);

/* *rows: a's element count over inner. */
int shim_check_rms_norm(const shim_tensor *out, const shim_tensor *a, const shim_tensor *weight, int64_t inner,
                        int64_t *rows);

int shim_check_dropout(const shim_tensor *out, const shim_tensor *mask, const shim_tensor *a, double p);

/* index read as [outer, j, inner] around dim, with strides into out and src (which may be
 * larger than index outside dim): what both backends walk. */
typedef struct shim_scatter_dims {
  int32_t ndim, dim;
  int64_t r; /* out's size along dim */
  int64_t shape[SHIM_MAX_DIMS];       /* index's */
  int64_t out_stride[SHIM_MAX_DIMS];  /* out's contiguous strides */
  int64_t src_stride[SHIM_MAX_DIMS];  /* src's contiguous strides */
} shim_scatter_dims;

int shim_check_scatter(int32_t op, const shim_tensor *out, int32_t dim, const shim_tensor *index, const shim_tensor *src,
                       shim_scatter_dims *dims);
/* shim_nll_loss: input read as [n, c, inner]. */
typedef struct shim_nll_dims {
  int64_t n, c, inner;
} shim_nll_dims;

int shim_check_nll_loss(const shim_tensor *out, const shim_tensor *input, const shim_tensor *target, const shim_tensor *weight,
                        int32_t reduction, shim_nll_dims *dims);
int shim_check_mse_loss(const shim_tensor *out, const shim_tensor *a, const shim_tensor *b, int32_t reduction);
/* shim_cat: out read as [outer, out's size along dim x inner]. */
int shim_check_cat(const shim_tensor *out, int32_t count, const shim_tensor *const *parts, int32_t dim, int64_t *outer,
                   int64_t *inner);

/* shim_index_add: out read as [outer, r, inner] around dim (src as [outer, index's count, inner]). */
int shim_check_index_add(const shim_tensor *out, int32_t dim, const shim_tensor *index, const shim_tensor *src,
                         shim_reduce_dims *dims);

/* shim_layer_norm: rows is a's count over m. */
int shim_check_layer_norm(const shim_tensor *out, const shim_tensor *a, const shim_tensor *weight, const shim_tensor *bias,
                          int64_t m, int64_t *rows);

/* shim_index_select: a read as [outer, r, inner] around dim (the index's range is 0..r-1). */
int shim_check_index_select(const shim_tensor *out, const shim_tensor *a, int32_t dim, const shim_tensor *index,
                            shim_reduce_dims *dims);

/* ---- the fused optimizer steps (optim_checks.c) ---------------------------------------- */

/* param is f32 or f64; grad and the buffers have its dtype and element count and share no
 * memory with it; flags known to the step; adamw's step >= 1. */
int shim_check_sgd(const shim_tensor *param, const shim_tensor *grad, const shim_tensor *momentum_buf, double momentum,
                   int32_t flags);
int shim_check_adamw(const shim_tensor *param, const shim_tensor *grad, const shim_tensor *exp_avg,
                     const shim_tensor *exp_avg_sq, const shim_tensor *max_exp_avg_sq, int64_t step, int32_t flags);

/* ---- communicators (comm_checks.c) ---------------------------------------------------- */

/* What both backends' communicators hold and the checks read: each backend's struct
 * shim_comm derives from it (C++), so a shim_comm * converts to a shim_comm_state *. */
typedef struct shim_comm_state {
  int32_t rank;
  int32_t size;
  int32_t connected;
  char failure[640]; /* the first failure, which makes the comm unusable; empty while it is usable */
} shim_comm_state;

int shim_check_comm_create(int32_t rank, int32_t size, int64_t timeout_ms);

/* shim_comm_address's contract over this member's n address bytes: *len = n, and the bytes
 * go to buf when it is not NULL and cap holds them. */
int shim_comm_copy_address(const void *bytes, int64_t n, uint8_t *buf, int64_t cap, int64_t *len);

/* shim_comm_connect's arguments: the comm can still connect; member 0 published first_len
 * bytes and every other member other_len; where there are bytes, this member's are `own`
 * (own_len of them). c has been checked for NULL. */
int shim_check_connect(const shim_comm_state *c, const uint8_t *addrs, const int64_t *lens, const void *own,
                       int64_t own_len, int64_t first_len, int64_t other_len);

/* fn's comm exists, has not failed and is connected. */
int shim_check_comm_usable(const char *fn, const shim_comm_state *c);

/* Each collective's whole argument check, its comm's included. */
int shim_check_all_reduce(const shim_comm_state *c, const shim_tensor *out, const shim_tensor *in, int32_t op);
int shim_check_all_gather(const shim_comm_state *c, const shim_tensor *out, const shim_tensor *in);
int shim_check_reduce_scatter(const shim_comm_state *c, const shim_tensor *out, const shim_tensor *in, int32_t op);
int shim_check_all_to_all(const shim_comm_state *c, const shim_tensor *out, const shim_tensor *in);
int shim_check_broadcast(const shim_comm_state *c, const shim_tensor *t, int32_t root);
int shim_check_p2p(const shim_comm_state *c, int32_t n, const int32_t *kinds, const int32_t *peers,
                   shim_tensor *const *tensors);

/* ---- agreement between members (comm_checks.c) ---------------------------------------
 * Before any data moves, every member tells the others what it passes to the call: which
 * call, dtype, element count and op or root (for a transfer, each side of it tells the other).
 * Members whose inputs disagree would otherwise overrun or under-fill each other's buffers
 * inside the transport (Gloo enforces sizes on its own threads, aborting the process), so they
 * all fail the call instead, knowing the same headers; nothing has moved, and the comm stays
 * usable. */
enum {
  SHIM_CALL_ALL_REDUCE = 1,
  SHIM_CALL_ALL_GATHER = 2,
  SHIM_CALL_REDUCE_SCATTER = 3,
  SHIM_CALL_ALL_TO_ALL = 4,
  SHIM_CALL_BROADCAST = 5,
  SHIM_CALL_SEND = 6, /* a transfer as its sender describes it */
  SHIM_CALL_RECV = 7  /* and as its receiver does */
};

typedef struct shim_comm_header {
  uint32_t magic; /* SHIM_COMM_HEADER_MAGIC: a header, not stray bytes */
  int32_t call;   /* SHIM_CALL_* */
  int32_t dtype;
  int32_t arg; /* the reduce op, the broadcast root, or 0 */
  int64_t numel;
  int32_t refused;  /* 1: this member refuses the call on its own arguments (it tells the others so) */
  int32_t reserved; /* zero */
} shim_comm_header;

#define SHIM_COMM_HEADER_MAGIC 0x5244484du /* "MHDR" */

/* This member's header for a call over tensor t. */
shim_comm_header shim_comm_header_of(int32_t call, const shim_tensor *t, int32_t arg);

/* The header of a member that refuses `call` on its own arguments (sizes that do not split,
 * an op its dtype lacks): it still takes part in the agreement, so that the others fail the
 * call with it instead of waiting for it. No header agrees with one of these. */
shim_comm_header shim_comm_refusal(int32_t call);

/* Whether two members' headers agree: for a transfer, the sender's and the receiver's
 * describe the same bytes; for a collective, they are the same; neither is a refusal. */
int shim_comm_headers_agree(const shim_comm_header *mine, const shim_comm_header *theirs);

/* shim_comm_headers_agree, as fn's failure: SHIM_E_INVALID naming both members and what
 * each passed, when they do not. */
int shim_check_agreement(const char *fn, const shim_comm_header *mine, int32_t mine_rank,
                         const shim_comm_header *theirs, int32_t theirs_rank);

#ifdef __cplusplus
}
#endif

#endif
