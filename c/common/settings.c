/* settings.c: the argument checks of the process-wide settings both backends take through the
 * ABI (shim_set_block_cache, shim_set_comm_shm, shim_set_library) rather than from the
 * environment: the worker reads its configuration and makes these calls. */
#include <string.h>

#include "internal.h"

int shim_check_flag(const char *fn, int32_t enabled) {
  if (enabled != 0 && enabled != 1) return shim_fail(SHIM_E_INVALID, "%s: enabled must be 0 or 1, not %d", fn, enabled);
  return SHIM_OK;
}

int shim_check_library(const char *which, const char *path, int32_t *library) {
  static const char *const names[] = {"nccl", "cublas", "cublaslt"};
  SHIM_REQUIRE_IN("shim_set_library", which, "which");
  SHIM_REQUIRE_IN("shim_set_library", path, "path");
  for (int32_t i = 0; i < (int32_t)(sizeof names / sizeof names[0]); i++)
    if (strcmp(which, names[i]) == 0) {
      *library = i;
      return SHIM_OK;
    }
  return shim_fail(SHIM_E_INVALID, "shim_set_library: which must be nccl, cublas or cublaslt, not \"%s\"", which);
}
