/* linalg.c: shim_matmul on the cpu. f32 and f64 go to OpenBLAS (cblas_sgemm / dgemm, a
 * transposed operand, by flag or by its strides, as BLAS's trans, a row stride as its leading
 * dimension, so a transposed or sliced view costs no copy); the other dtypes convert each operand to an accumulator
 * type (float for f16 and bf16, int64 for integers and bool, wrapping), transposed there when
 * asked, and run a cache-blocked loop, then convert the result back by the rules of cpu.h (so a
 * bool matmul is "any a[i,p] and b[p,j]"). */
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include <cblas.h>

#include "cpu.h"

/* Block sizes for the loop: a BK x BN tile of b (32 KiB of floats) stays in L1/L2 while BM
 * rows of a stream past it. */
enum { BM = 64, BK = 64, BN = 128 };

/* c[m x n] += a[m x k] @ b[k x n], all row-major, over the types below (restrict: private
 * scratch buffers). */
#define BLOCKED_GEMM(NAME, T)                                                                  \
  static void NAME(int64_t m, int64_t n, int64_t k, const T *restrict a, const T *restrict b,  \
                   T *restrict c) {                                                            \
    for (int64_t i0 = 0; i0 < m; i0 += BM)                                                     \
      for (int64_t p0 = 0; p0 < k; p0 += BK)                                                   \
        for (int64_t j0 = 0; j0 < n; j0 += BN) {                                               \
          int64_t i1 = shim_cpu_min64(m, i0 + BM), p1 = shim_cpu_min64(k, p0 + BK),            \
                  j1 = shim_cpu_min64(n, j0 + BN);                                             \
          for (int64_t i = i0; i < i1; i++)                                                    \
            for (int64_t p = p0; p < p1; p++) {                                                \
              T x = a[i * k + p];                                                              \
              for (int64_t j = j0; j < j1; j++) c[i * n + j] += x * b[p * n + j];              \
            }                                                                                  \
        }                                                                                      \
  }

BLOCKED_GEMM(gemm_f32, float)
BLOCKED_GEMM(gemm_u64, uint64_t) /* int64 accumulation that wraps instead of overflowing */

/* Converts n elements of dtype into the accumulator buffer (float or int64 bits). */
static void to_acc(int32_t dtype, const void *src, int64_t n, void *acc) {
  if (dtype == SHIM_F16 || dtype == SHIM_BF16) shim_cpu_load_f32(dtype, src, n, acc);
  else shim_cpu_load_i64(dtype, src, n, acc);
}

static void from_acc(int32_t dtype, const void *acc, int64_t n, void *dst) {
  if (dtype == SHIM_F16 || dtype == SHIM_BF16) shim_cpu_store_f32(dtype, acc, n, dst);
  else shim_cpu_store_i64(dtype, acc, n, dst);
}

/* Converts a [rows, cols] matrix of dtype into accumulators, transposed ([cols, rows]) when
 * asked, through scratch (room for rows * cols accumulators). */
static void to_acc_matrix(int32_t dtype, const void *src, int64_t rows, int64_t cols, int transposed, int64_t acc_size,
                          char *scratch, char *acc) {
  if (!transposed) return to_acc(dtype, src, rows * cols, acc);
  to_acc(dtype, src, rows * cols, scratch);
  for (int64_t i = 0; i < rows; i++)
    for (int64_t j = 0; j < cols; j++) memcpy(acc + (j * rows + i) * acc_size, scratch + (i * cols + j) * acc_size, (size_t)acc_size);
}

/* The loop path: per batch, a (and b when batched) converted to 4- or 8-byte accumulators. */
static int matmul_loop(int32_t dtype, char *out, const char *a, const char *b, const shim_matmul_dims *dims) {
  const int64_t batch = dims->batch, m = dims->m, k = dims->k, n = dims->n;
  const int b_batched = dims->b_batched;
  int64_t size = shim_dtype_size(dtype), acc_size = dtype == SHIM_F16 || dtype == SHIM_BF16 ? 4 : 8;
  int64_t most = m * k > k * n ? m * k : k * n;
  char *abuf = malloc((size_t)(m * k * acc_size) + 1), *bbuf = malloc((size_t)(k * n * acc_size) + 1),
       *cbuf = malloc((size_t)(m * n * acc_size) + 1),
       *tbuf = dims->ta || dims->tb ? malloc((size_t)(most * acc_size) + 1) : NULL;
  if (abuf == NULL || bbuf == NULL || cbuf == NULL || ((dims->ta || dims->tb) && tbuf == NULL)) {
    free(abuf), free(bbuf), free(cbuf), free(tbuf);
    return shim_fail(SHIM_E_NOMEM, "shim_matmul: out of host memory for %s scratch buffers", shim_dtype_name(dtype));
  }
  for (int64_t t = 0; t < batch; t++) {
    /* a transposed is stored [k, m], b transposed [n, k]. */
    to_acc_matrix(dtype, a + t * m * k * size, dims->ta ? k : m, dims->ta ? m : k, dims->ta, acc_size, tbuf, abuf);
    if (t == 0 || b_batched)
      to_acc_matrix(dtype, b + (b_batched ? t * k * n * size : 0), dims->tb ? n : k, dims->tb ? k : n, dims->tb, acc_size, tbuf, bbuf);
    memset(cbuf, 0, (size_t)(m * n * acc_size));
    if (acc_size == 4) gemm_f32(m, n, k, (const float *)abuf, (const float *)bbuf, (float *)cbuf);
    else gemm_u64(m, n, k, (const uint64_t *)abuf, (const uint64_t *)bbuf, (uint64_t *)cbuf);
    from_acc(dtype, cbuf, m * n, out + t * m * n * size);
  }
  free(abuf), free(bbuf), free(cbuf), free(tbuf);
  return SHIM_OK;
}

/* The BLAS path. With a 2-D b and a read row-major with its matrices end to end, the batches of
 * a are one [batch * m, k] matrix: one call. */
static void matmul_blas(int32_t dtype, char *out, const char *a, const char *b, const shim_matmul_dims *dims, const shim_blas_operand *la,
                        const shim_blas_operand *lb) {
  const int64_t batch = dims->batch, m = dims->m, k = dims->k, n = dims->n;
  const int b_batched = dims->b_batched;
  int64_t size = shim_dtype_size(dtype);
  const int trans_a = dims->ta != la->trans, trans_b = dims->tb != lb->trans;
  int stacked = !trans_a && (batch == 1 || la->batch_stride == m * la->ld);
  int64_t calls = b_batched || !stacked || batch * m > INT_MAX ? batch : 1, rows = calls == 1 ? batch * m : m;
  const enum CBLAS_TRANSPOSE ta = trans_a ? CblasTrans : CblasNoTrans, tb = trans_b ? CblasTrans : CblasNoTrans;
  const int lda = (int)la->ld, ldb = (int)lb->ld;
  for (int64_t t = 0; t < calls; t++) {
    const char *at = a + t * la->batch_stride * size, *bt = b + (b_batched ? t * lb->batch_stride * size : 0);
    char *ct = out + t * m * n * size;
    if (dtype == SHIM_F32)
      cblas_sgemm(CblasRowMajor, ta, tb, (int)rows, (int)n, (int)k, 1.0f, (const float *)at, lda, (const float *)bt, ldb,
                  0.0f, (float *)ct, (int)n);
    else
      cblas_dgemm(CblasRowMajor, ta, tb, (int)rows, (int)n, (int)k, 1.0, (const double *)at, lda, (const double *)bt, ldb,
                  0.0, (double *)ct, (int)n);
  }
}

int shim_matmul(shim_tensor *out, const shim_tensor *a, const shim_tensor *b, int32_t transpose, shim_stream *s) {
  shim_matmul_dims dims;
  SHIM_TRY(shim_check_matmul(out, a, b, transpose, &dims));
  if (out->numel == 0) return SHIM_OK;
  char *o = shim_cpu_data(out);
  if (dims.k == 0) { /* an empty sum; BLAS rejects a leading dimension of 0 */
    memset(o, 0, (size_t)(out->numel * shim_dtype_size(out->dtype)));
    return SHIM_OK;
  }
  shim_blas_operand la, lb;
  if ((a->dtype == SHIM_F32 || a->dtype == SHIM_F64) && shim_blas_layout(a, &la) && shim_blas_layout(b, &lb)) {
    if (dims.m > INT_MAX || dims.n > INT_MAX || dims.k > INT_MAX) {
      char ba[128], bb[128];
      return shim_fail(SHIM_E_UNSUPPORTED, "shim_matmul: a dim of %s @ %s exceeds BLAS's 32-bit sizes",
                       shim_describe(a, ba, sizeof ba), shim_describe(b, bb, sizeof bb));
    }
    matmul_blas(a->dtype, o, shim_cpu_data(a), shim_cpu_data(b), &dims, &la, &lb);
    return SHIM_OK;
  }
  if (!a->contiguous || !b->contiguous) { /* strides BLAS cannot read, or the loop's dtypes: contiguous copies */
    shim_cpu_staged sa, sb;
    SHIM_TRY(shim_cpu_stage("shim_matmul", a, 1, &sa));
    int status = shim_cpu_stage("shim_matmul", b, 1, &sb);
    if (status == SHIM_OK) status = shim_matmul(out, sa.t, sb.t, transpose, s);
    shim_cpu_unstage(&sb, NULL, 0);
    shim_cpu_unstage(&sa, NULL, 0);
    return status;
  }
  return matmul_loop(a->dtype, o, shim_cpu_data(a), shim_cpu_data(b), &dims);
}
