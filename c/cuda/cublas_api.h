/* cublas_api.h: the part of cuBLAS the cuda backend uses (handles, streams, GemmEx), declared
 * here so the shim builds without cuBLAS's headers, plus the table of entry points loader.cu
 * fills from the library it dlopens. Values follow cublas_api.h of cuBLAS 11 and later. */
#ifndef MONARCH_SHIM_CUBLAS_API_H
#define MONARCH_SHIM_CUBLAS_API_H

#include <cuda_runtime.h>
#include <library_types.h>

typedef struct cublasContext *cublasHandle_t;

typedef enum {
  CUBLAS_STATUS_SUCCESS = 0,
  CUBLAS_STATUS_NOT_INITIALIZED = 1,
  CUBLAS_STATUS_ALLOC_FAILED = 3,
  CUBLAS_STATUS_INVALID_VALUE = 7,
  CUBLAS_STATUS_ARCH_MISMATCH = 8,
  CUBLAS_STATUS_MAPPING_ERROR = 11,
  CUBLAS_STATUS_EXECUTION_FAILED = 13,
  CUBLAS_STATUS_INTERNAL_ERROR = 14,
  CUBLAS_STATUS_NOT_SUPPORTED = 15,
  CUBLAS_STATUS_LICENSE_ERROR = 16
} cublasStatus_t;

typedef enum { CUBLAS_OP_N = 0, CUBLAS_OP_T = 1 } cublasOperation_t;

typedef enum {
  CUBLAS_COMPUTE_32F = 68, /* f32 accumulation: f32, f16 and bf16 inputs */
  CUBLAS_COMPUTE_64F = 70
} cublasComputeType_t;

typedef enum { CUBLAS_GEMM_DEFAULT = -1 } cublasGemmAlgo_t;

/* Entry points by their exported names (the _v2 ones are what cublas_v2.h's macros name). */
typedef struct shim_cublas_api {
  int major, minor, patch;
  cublasStatus_t (*cublasGetProperty)(libraryPropertyType type, int *value);
  const char *(*cublasGetStatusString)(cublasStatus_t status);
  cublasStatus_t (*cublasCreate_v2)(cublasHandle_t *handle);
  cublasStatus_t (*cublasSetStream_v2)(cublasHandle_t handle, cudaStream_t stream);
  cublasStatus_t (*cublasGemmEx)(cublasHandle_t handle, cublasOperation_t transa,
                                 cublasOperation_t transb, int m, int n, int k, const void *alpha,
                                 const void *A, cudaDataType Atype, int lda, const void *B,
                                 cudaDataType Btype, int ldb, const void *beta, void *C,
                                 cudaDataType Ctype, int ldc, cublasComputeType_t computeType,
                                 cublasGemmAlgo_t algo);
  cublasStatus_t (*cublasGemmStridedBatchedEx)(
      cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb, int m, int n, int k,
      const void *alpha, const void *A, cudaDataType Atype, int lda, long long strideA,
      const void *B, cudaDataType Btype, int ldb, long long strideB, const void *beta, void *C,
      cudaDataType Ctype, int ldc, long long strideC, int batchCount,
      cublasComputeType_t computeType, cublasGemmAlgo_t algo);
} shim_cublas_api;

enum { SHIM_CUBLAS_MIN_MAJOR = 11 }; /* cublasComputeType_t in GemmEx */

/* cuBLAS's table, loading the library on first use (MONARCH_CUBLAS_LIB, else libcublas.so.13,
 * .so.12, .so; MONARCH_CUBLASLT_LIB, when set, is loaded first so libcublas finds it). A failed
 * load is remembered: every later call fails the same way, with SHIM_E_UNAVAILABLE. */
int shim_cublas_load(const shim_cublas_api **out);

#endif
