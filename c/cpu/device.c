/* device.c: the cpu backend's device queries. There is one device, the host, always usable. */
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
