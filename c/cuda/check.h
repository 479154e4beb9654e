/* check.h: one check macro per library the cuda backend calls (CUDA runtime, cuBLAS, NCCL).
 * Each turns a failed return code into shim_fail with the file, the line, the call's text and
 * the library's own message, and returns the shim status from the enclosing function, as
 * nccl-tests' CUDACHECK/NCCLCHECK do; nothing here exits or aborts. */
#ifndef MONARCH_SHIM_CUDA_CHECK_H
#define MONARCH_SHIM_CUDA_CHECK_H

#include <cuda_runtime.h>

#include "../common/internal.h"
#include "cublas_api.h"
#include "nccl_api.h"

/* The shim status for a CUDA error: no memory, no usable device/driver, or a backend error. */
static inline int shim_cuda_status(cudaError_t e) {
  switch (e) {
    case cudaErrorMemoryAllocation: return SHIM_E_NOMEM;
    case cudaErrorNoDevice:
    case cudaErrorInsufficientDriver:
    case cudaErrorStubLibrary:
    case cudaErrorSystemDriverMismatch:
    case cudaErrorCompatNotSupportedOnDevice:
    case cudaErrorInitializationError: return SHIM_E_UNAVAILABLE;
    default: return SHIM_E_BACKEND;
  }
}

/* Records a failed CUDA call. Non-sticky errors are also cleared from the runtime's last-error
 * slot, so a later launch check does not report them a second time. */
static inline int shim_cuda_fail(cudaError_t e, const char *call, const char *file, int line) {
  (void)cudaGetLastError();
  return shim_fail(shim_cuda_status(e), "%s:%d: %s: %s (%s, CUDA error %d)", file, line, call,
                   cudaGetErrorString(e), cudaGetErrorName(e), (int)e);
}

/* cuBLAS and NCCL failures; defined in loader.cu, where the libraries' own message functions are. */
int shim_cublas_fail(cublasStatus_t st, const char *call, const char *file, int line);
int shim_nccl_fail(ncclResult_t r, ncclComm_t comm, const char *call, const char *file, int line);

#define CUDA_CHECK(call)                                                              \
  do {                                                                                \
    cudaError_t cuda_check_e_ = (call);                                               \
    if (cuda_check_e_ != cudaSuccess) return shim_cuda_fail(cuda_check_e_, #call, __FILE__, __LINE__); \
  } while (0)

#define CUBLAS_CHECK(call)                                                            \
  do {                                                                                \
    cublasStatus_t cublas_check_s_ = (call);                                          \
    if (cublas_check_s_ != CUBLAS_STATUS_SUCCESS)                                     \
      return shim_cublas_fail(cublas_check_s_, #call, __FILE__, __LINE__);            \
  } while (0)

/* NCCL results have no macro: communicators are non-blocking (abortable), so every call's
 * result goes through issued() in comm_nccl.cu, which also waits out ncclInProgress. */

/* After a kernel launch: a bad configuration is reported here; faults inside the kernel
 * surface at the next synchronising call. cudaErrorNotReady is a query's answer, not a launch
 * failure, so a runtime that kept it as the last error is not taken at its word. */
#define CUDA_CHECK_LAUNCH(what)                                                       \
  do {                                                                                \
    cudaError_t cuda_launch_e_ = cudaGetLastError();                                  \
    if (cuda_launch_e_ != cudaSuccess && cuda_launch_e_ != cudaErrorNotReady)         \
      return shim_cuda_fail(cuda_launch_e_, "launch of " what, __FILE__, __LINE__);  \
  } while (0)

#endif
