/* cpu.h: what the cpu backend's files share (not part of the ABI): element access and dtype
 * conversions in chunks. */
#ifndef MONARCH_SHIM_CPU_H
#define MONARCH_SHIM_CPU_H

#include "../common/internal.h"

/* Ops that convert through a scratch buffer do it this many elements at a time. */
enum { SHIM_CPU_CHUNK = 1024 };

static inline void *shim_cpu_data(const shim_tensor *t) { return shim_tensor_data(t); }

static inline int shim_cpu_is_float(int32_t dtype) { return dtype <= SHIM_BF16; }

/* The dtypes float represents exactly: f32, f16, bf16. */
static inline int shim_cpu_is_single(int32_t dtype) { return dtype == SHIM_F32 || dtype == SHIM_F16 || dtype == SHIM_BF16; }

static inline int64_t shim_cpu_min64(int64_t a, int64_t b) { return a < b ? a : b; }

/* Loads n elements of dtype from src, converting to double (floating dtypes) or to int64
 * (integer dtypes and bool; bool reads any nonzero byte as 1). */
void shim_cpu_load_f64(int32_t dtype, const void *src, int64_t n, double *dst);
void shim_cpu_load_i64(int32_t dtype, const void *src, int64_t n, int64_t *dst);

/* Stores n values into elements of dtype. From double: integers truncate toward zero and
 * saturate at the dtype's range, NaN becomes 0, bool is value != 0 (so NaN is 1); f16 and bf16
 * round once, to nearest even. From int64: integers wrap (two's complement), floats round to
 * nearest, bool is value != 0. */
void shim_cpu_store_f64(int32_t dtype, const double *src, int64_t n, void *dst);
void shim_cpu_store_i64(int32_t dtype, const int64_t *src, int64_t n, void *dst);

/* f32, f16 and bf16 only (float holds each exactly): load widens, store rounds to nearest even. */
void shim_cpu_load_f32(int32_t dtype, const void *src, int64_t n, float *dst);
void shim_cpu_store_f32(int32_t dtype, const float *src, int64_t n, void *dst);

/* Runs fn(ctx, begin, end) over [0, n) in up to shim_set_threads's count of contiguous parts
 * of at least grain each (at once on the calling thread when that is one part); returns when
 * every part is done (parallel.c). */
typedef void (*shim_cpu_range_fn)(void *ctx, int64_t begin, int64_t end);
void shim_cpu_parallel(int64_t n, int64_t grain, shim_cpu_range_fn fn, void *ctx);

/* Elements per part worth a thread's wake-up (tens of microseconds of work). */
enum { SHIM_CPU_GRAIN = 1 << 16 };

/* fn fails with SHIM_E_INVALID, naming the first of the n indices at ix outside 0..r-1 and dim,
 * before anything is written (strided.c; shim_cuda_check_indices is its cuda twin). */
int shim_cpu_check_indices(const char *fn, const int64_t *ix, int64_t n, int64_t r, int32_t dim);

/* Elements [begin, begin + n) of t in its logical row-major order, to or from the dense
 * bytes at buf (strided.c): how a strided tensor's elements meet a flat kernel. */
void shim_cpu_gather(const shim_tensor *t, int64_t begin, int64_t n, void *buf);
void shim_cpu_scatter(shim_tensor *t, int64_t begin, int64_t n, const void *buf);

/* A contiguous header over `bytes` of host memory (a scratch buffer or the caller's), for
 * handing to the flat kernels; it holds no reference and is never freed. */
typedef struct shim_cpu_header {
  shim_storage storage;
  shim_tensor t;
} shim_cpu_header;
void shim_cpu_header_over(shim_cpu_header *h, void *bytes, int32_t dtype, int32_t ndim, const int64_t *shape, int64_t numel);

/* An elementwise op over strided operands, SHIM_CPU_CHUNK * 2 elements at a time (strided.c):
 * for each chunk, every operand with n elements is handed to fn as a contiguous header over
 * that chunk of it (its own memory where it is contiguous, else gathered into scratch), an
 * operand of one element as itself, and one of fewer that repeats every count elements
 * (shim_binary's broadcast) as the chunk of its repetition; fn writes out's chunk (in place
 * where out is contiguous, else in scratch written back). Where out is dense in some order of its
 * dims and every operand of more than one element has its layout (an elementwise result laid out
 * as its operands), fn runs once over them all as flat contiguous blocks. The argument checks have
 * passed, so fn does not fail but for memory it was told to check (its status is returned). */
typedef int (*shim_cpu_chunk_fn)(void *ctx, shim_tensor *out, const shim_tensor *const *in);
int shim_cpu_chunked(shim_tensor *out, int32_t count, const shim_tensor *const *in, shim_cpu_chunk_fn fn, void *ctx);

/* Whether t and each of the count tensors are contiguous (NULL entries pass). */
int shim_cpu_all_contiguous(const shim_tensor *t, int32_t count, const shim_tensor *const *in);

/* A contiguous copy of a strided t in scratch host memory counted against the memory limit
 * (fn names the op), or t itself when it is contiguous: st->t is what the flat kernel reads.
 * With gather 0 only the memory is made (an out, written back by shim_cpu_unstage). */
typedef struct shim_cpu_staged {
  shim_cpu_header h;
  const shim_tensor *t;
  void *mem;
  int64_t bytes;
} shim_cpu_staged;
int shim_cpu_stage(const char *fn, const shim_tensor *t, int gather, shim_cpu_staged *st);

/* Frees the staged copy; with scatter, writes it back into target first. */
void shim_cpu_unstage(shim_cpu_staged *st, shim_tensor *target, int scatter);

/* One value converted by the rules of shim_cpu_store_f64. */
void shim_cpu_from_f64(int32_t dtype, double value, void *dst);

#endif
