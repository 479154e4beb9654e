/* device.c: the cpu backend's device queries. There is one device, the host, always usable. */
#include <unistd.h>

#include "cpu.h"

int shim_probe(void) { return SHIM_OK; }

int shim_device_count(int32_t *count) {
  SHIM_REQUIRE(count, "count");
  *count = 1;
  return SHIM_OK;
}

int shim_set_device(int32_t device) {
  if (device != 0) return shim_fail(SHIM_E_INVALID, "shim_set_device: the cpu backend has only device 0, not %d", device);
  return SHIM_OK;
}

/* The cpu backend loads no runtime library: a known name is accepted and has no effect. */
int shim_set_library(const char *which, const char *path) {
  int32_t library;
  return shim_check_library(which, path, &library);
}

int shim_memory_total(int64_t *bytes) {
  SHIM_REQUIRE(bytes, "bytes");
  long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  if (pages <= 0 || page <= 0) return shim_fail(SHIM_E_BACKEND, "shim_memory_total: sysconf cannot tell the host's memory");
  *bytes = (int64_t)pages * page;
  return SHIM_OK;
}
