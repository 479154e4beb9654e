/* memory.c: the process's limit on tensor memory (shim_set_memory_limit), the same on both
 * backends: each reserves a storage's bytes here before allocating them and gives them back
 * when it frees them, so an allocation over the limit fails as SHIM_E_NOMEM before any memory
 * is touched, instead of thrashing the host or meeting the OOM killer. */
#include "internal.h"

static int64_t limit_bytes; /* 0: no limit */
static int64_t in_use_bytes;

int shim_set_memory_limit(int64_t bytes) {
  if (bytes < 0) return shim_fail(SHIM_E_INVALID, "shim_set_memory_limit: %lld bytes is negative", (long long)bytes);
  __atomic_store_n(&limit_bytes, bytes, __ATOMIC_RELAXED);
  return SHIM_OK;
}

int shim_memory_usage(int64_t *in_use, int64_t *limit) {
  SHIM_REQUIRE(in_use, "in_use");
  SHIM_REQUIRE(limit, "limit");
  *in_use = __atomic_load_n(&in_use_bytes, __ATOMIC_RELAXED);
  *limit = __atomic_load_n(&limit_bytes, __ATOMIC_RELAXED);
  return SHIM_OK;
}

int shim_memory_reserve(const char *fn, int64_t nbytes) {
  int64_t limit = __atomic_load_n(&limit_bytes, __ATOMIC_RELAXED);
  int64_t used = __atomic_load_n(&in_use_bytes, __ATOMIC_RELAXED);
  for (;;) {
    if (limit > 0 && nbytes > limit - used)
      return shim_fail(SHIM_E_NOMEM, "%s: %lld bytes would pass the memory limit of %lld bytes (%lld in use; MONARCH_MEMORY_LIMIT)",
                       fn, (long long)nbytes, (long long)limit, (long long)used);
    if (__atomic_compare_exchange_n(&in_use_bytes, &used, used + nbytes, 1, __ATOMIC_RELAXED, __ATOMIC_RELAXED)) return SHIM_OK;
  }
}

int shim_memory_release(int64_t nbytes) {
  __atomic_sub_fetch(&in_use_bytes, nbytes, __ATOMIC_RELAXED);
  return SHIM_OK;
}
