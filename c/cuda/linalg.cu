/* linalg.cu: shim_matmul on the device. f32, f64, f16 and bf16 go to cuBLAS (cublasGemmEx, or
 * cublasGemmStridedBatchedEx when b is batched) accumulating in f32 (f64 for f64; no TF32).
 * Integers and bool use a tiled kernel that accumulates in int64, wrapping, and converts back
 * by elements.h's rules (so a bool matmul is "any a[i,p] and b[p,j]"), as the cpu does.
 *
 * cuBLAS is column-major. A row-major [r, c] matrix is the same memory as its column-major
 * transpose, so row-major C = A B is computed as column-major C^T = B^T A^T: the operands
 * swap places and nothing is transposed. An operand stored transposed (shim_matmul's flags, or
 * its strides: a transposed view) is cuBLAS's OP_T on it, with its stored row stride as the
 * leading dimension (shim_blas_layout), so a transposed or sliced view costs no copy.
 *
 * One cuBLAS handle per device, made on first use and kept for the process (a library handle,
 * like the dlopen ones); a handle is used by one thread at a time. */
#include <limits.h>
#include <pthread.h>

#include "elements.h"

using namespace shim;

namespace {

enum { MAX_DEVICES = 64, TILE = 16 };

pthread_mutex_t handles_lock = PTHREAD_MUTEX_INITIALIZER;
cublasHandle_t handles[MAX_DEVICES];

int current_handle(const shim_cublas_api *api, cublasHandle_t *out) {
  int device = 0;
  CUDA_CHECK(cudaGetDevice(&device));
  if (device < 0 || device >= MAX_DEVICES)
    return shim_fail(SHIM_E_UNSUPPORTED, "shim_matmul: device %d is beyond the %d this backend keeps handles for", device,
                     MAX_DEVICES);
  pthread_mutex_lock(&handles_lock);
  cublasStatus_t st = CUBLAS_STATUS_SUCCESS;
  if (handles[device] == nullptr) { /* kept only once made, so a failed create is tried again */
    cublasHandle_t made = nullptr;
    st = api->cublasCreate_v2(&made);
    if (st == CUBLAS_STATUS_SUCCESS) handles[device] = made;
  }
  *out = handles[device];
  pthread_mutex_unlock(&handles_lock);
  if (st != CUBLAS_STATUS_SUCCESS) return shim_cublas_fail(st, "cublasCreate", __FILE__, __LINE__);
  return SHIM_OK;
}

/* C [batch, m, n] = A [batch, m, k] @ B ([batch,] k, n), C row-major, A and B as la and lb read
 * them (A stored [k, m] when dims.ta, B [n, k] when dims.tb), through cuBLAS. */
int gemm_cublas(int32_t dtype, const void *a, const void *b, void *c, const shim_matmul_dims &dims, const shim_blas_operand &la,
                const shim_blas_operand &lb, cudaStream_t stream) {
  const int64_t batch = dims.batch, m = dims.m, k = dims.k, n = dims.n;
  const bool b_batched = dims.b_batched;
  const shim_cublas_api *api;
  SHIM_TRY(shim_cublas_load(&api));
  cublasHandle_t handle;
  SHIM_TRY(current_handle(api, &handle));
  CUBLAS_CHECK(api->cublasSetStream_v2(handle, stream));
  cudaDataType type = dtype == SHIM_F32 ? CUDA_R_32F : dtype == SHIM_F64 ? CUDA_R_64F : dtype == SHIM_F16 ? CUDA_R_16F : CUDA_R_16BF;
  cublasComputeType_t compute = dtype == SHIM_F64 ? CUBLAS_COMPUTE_64F : CUBLAS_COMPUTE_32F;
  const float one_f = 1.0f, zero_f = 0.0f;
  const double one_d = 1.0, zero_d = 0.0;
  const void *alpha = dtype == SHIM_F64 ? (const void *)&one_d : (const void *)&one_f;
  const void *beta = dtype == SHIM_F64 ? (const void *)&zero_d : (const void *)&zero_f;
  const bool trans_a = dims.ta != (la.trans != 0), trans_b = dims.tb != (lb.trans != 0);
  const cublasOperation_t op_a = trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, op_b = trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  const int lda = (int)la.ld, ldb = (int)lb.ld;
  if (!b_batched && !trans_a && (batch == 1 || la.batch_stride == m * la.ld) && batch * m <= INT_MAX) {
    /* A 2-D b serves every batch: the batches of a, end to end, are one [batch * m, k] matrix. */
    CUBLAS_CHECK(api->cublasGemmEx(handle, op_b, op_a, (int)n, (int)(batch * m), (int)k, alpha, b, type, ldb, a, type,
                                   lda, beta, c, type, (int)n, compute, CUBLAS_GEMM_DEFAULT));
    return SHIM_OK;
  }
  if (batch > INT_MAX)
    return shim_fail(SHIM_E_UNSUPPORTED, "shim_matmul: %lld batches exceed cuBLAS's 32-bit batch count", (long long)batch);
  CUBLAS_CHECK(api->cublasGemmStridedBatchedEx(handle, op_b, op_a, (int)n, (int)m, (int)k, alpha, b, type, ldb,
                                               b_batched ? lb.batch_stride : 0, a, type, lda, la.batch_stride, beta, c, type, (int)n, m * n,
                                               (int)batch, compute, CUBLAS_GEMM_DEFAULT));
  return SHIM_OK;
}

/* Integer and bool matmul: one TILE x TILE block of C per thread block, k in TILE steps through
 * shared memory. The loops over batches and tiles are the same for every thread of a block,
 * so the barriers inside them are reached by all. */
template <typename D>
__global__ void matmul_int_kernel(const typename D::T *a, const typename D::T *b, typename D::T *c, bool b_batched,
                                  bool ta, bool tb, int64_t batch, int64_t m, int64_t n, int64_t k) {
  __shared__ int64_t as[TILE][TILE], bs[TILE][TILE];
  const int tx = threadIdx.x, ty = threadIdx.y;
  const int64_t tiles_m = (m + TILE - 1) / TILE, tiles_n = (n + TILE - 1) / TILE;
  for (int64_t t = blockIdx.z; t < batch; t += gridDim.z) {
    const typename D::T *at = a + t * m * k, *bt = b + (b_batched ? t * k * n : 0);
    for (int64_t tm = blockIdx.y; tm < tiles_m; tm += gridDim.y) {
      for (int64_t tn = blockIdx.x; tn < tiles_n; tn += gridDim.x) {
        const int64_t row = tm * TILE + ty, col = tn * TILE + tx;
        uint64_t acc = 0;
        for (int64_t p0 = 0; p0 < k; p0 += TILE) {
          const int64_t pa = p0 + tx, pb = p0 + ty;
          as[ty][tx] = row < m && pa < k ? D::to_i64(at[ta ? pa * m + row : row * k + pa]) : 0;
          bs[ty][tx] = pb < k && col < n ? D::to_i64(bt[tb ? col * k + pb : pb * n + col]) : 0;
          __syncthreads();
#pragma unroll
          for (int q = 0; q < TILE; q++) acc += (uint64_t)as[ty][q] * (uint64_t)bs[q][tx];
          __syncthreads();
        }
        if (row < m && col < n) c[t * m * n + row * n + col] = D::from_i64((int64_t)acc);
      }
    }
  }
}

unsigned grid_dim(int64_t count) { return count > 65535 ? 65535u : (unsigned)count; }

}  // namespace

int shim_matmul(shim_tensor *out, const shim_tensor *a, const shim_tensor *b, int32_t transpose, shim_stream *s) {
  shim_matmul_dims dims;
  SHIM_TRY(shim_check_matmul(out, a, b, transpose, &dims));
  const shim_tensor *operands[] = {a, b};
  shim_blas_operand la{}, lb{};
  const bool blas = a->dtype <= SHIM_BF16 && shim_blas_layout(a, &la) && shim_blas_layout(b, &lb);
  if (!blas && !shim_cuda_all_contiguous(out, 2, operands)) /* the strides cuBLAS cannot read, and the integer kernel's */
    return shim_cuda_densely(out, 2, operands, s, [&](shim_tensor *o, const shim_tensor *const *in) { return shim_matmul(o, in[0], in[1], transpose, s); });
  if (out->numel == 0) return SHIM_OK;
  shim_cuda_track(s, out);
  shim_cuda_track(s, a);
  shim_cuda_track(s, b);
  cudaStream_t stream = shim_cuda_stream(s);
  void *o = shim_cuda_data(out);
  if (dims.k == 0) { /* an empty sum */
    CUDA_CHECK(cudaMemsetAsync(o, 0, (size_t)shim_cuda_nbytes(out), stream));
    return SHIM_OK;
  }
  const void *x = shim_cuda_data(a), *y = shim_cuda_data(b);
  if (a->dtype <= SHIM_BF16) { /* contiguous or read in place: only a dim past 32 bits leaves cuBLAS out */
    if (!blas || dims.m > INT_MAX || dims.n > INT_MAX || dims.k > INT_MAX) {
      char ba[128], bb[128];
      return shim_fail(SHIM_E_UNSUPPORTED, "shim_matmul: a dim of %s @ %s exceeds cuBLAS's 32-bit sizes",
                       shim_describe(a, ba, sizeof ba), shim_describe(b, bb, sizeof bb));
    }
    return gemm_cublas(a->dtype, x, y, o, dims, la, lb, stream);
  }
  const int64_t batch = dims.batch, m = dims.m, k = dims.k, n = dims.n;
  const bool b_batched = dims.b_batched;
  return dispatch(a->dtype, [&](auto d) -> int {
    using D = decltype(d);
    using T = typename D::T;
    if constexpr (D::kind != Kind::Float) { /* the floating dtypes went to cuBLAS above */
      dim3 grid(grid_dim((n + TILE - 1) / TILE), grid_dim((m + TILE - 1) / TILE), grid_dim(batch));
      matmul_int_kernel<D><<<grid, dim3(TILE, TILE), 0, stream>>>((const T *)x, (const T *)y, (T *)o, b_batched,
                                                                  dims.ta, dims.tb, batch, m, n, k);
      CUDA_CHECK_LAUNCH("matmul_int_kernel");
    }
    return SHIM_OK;
  });
}
