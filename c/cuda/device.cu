/* device.cu: the cuda backend's device queries. Usable means a visible device, and NCCL and
 * cuBLAS that load; each failure says which, with CUDA's own code and text (35 is "CUDA driver
 * version is insufficient", which is also what a machine without a driver reports). */
#include <stdlib.h>

#include "cuda_shim.h"

int shim_probe(void) {
  int count = 0;
  cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    return shim_fail(SHIM_E_UNAVAILABLE, "cudaGetDeviceCount failed with CUDA error %d (%s: %s)", (int)e,
                     cudaGetErrorName(e), cudaGetErrorString(e));
  }
  if (count == 0) return shim_fail(SHIM_E_UNAVAILABLE, "no CUDA device is visible (CUDA_VISIBLE_DEVICES may hide them)");
  const shim_nccl_api *nccl;
  const shim_cublas_api *cublas;
  SHIM_TRY(shim_nccl_load(&nccl));
  SHIM_TRY(shim_cublas_load(&cublas));
  return SHIM_OK;
}

int shim_device_count(int32_t *count) {
  SHIM_REQUIRE(count, "count");
  int n = 0;
  CUDA_CHECK(cudaGetDeviceCount(&n));
  *count = n;
  return SHIM_OK;
}

int shim_set_device(int32_t device) {
  int n = 0;
  CUDA_CHECK(cudaGetDeviceCount(&n));
  if (device < 0 || device >= n)
    return shim_fail(SHIM_E_INVALID, "shim_set_device: device %d does not exist (%d visible)", device, n);
  CUDA_CHECK(cudaSetDevice(device));
  return SHIM_OK;
}

int shim_memory_total(int64_t *bytes) {
  SHIM_REQUIRE(bytes, "bytes");
  size_t free_bytes = 0, total = 0;
  CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total));
  *bytes = (int64_t)total;
  return SHIM_OK;
}

/* NCCL picks its own transport: the setting is checked and has no effect. */
int shim_set_comm_shm(int32_t enabled) { return shim_check_flag("shim_set_comm_shm", enabled); }

int shim_set_threads(int32_t n) {
  if (n < 1 || n > 64) return shim_fail(SHIM_E_INVALID, "shim_set_threads: %d threads, not 1 to 64", n);
  return SHIM_OK; /* the device's parallelism is its own */
}
