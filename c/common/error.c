/* error.c: the thread-local last-error text and dtype/shape helpers shared by both backends. */
#include <stdarg.h>
#include <stdio.h>

#include "internal.h"

static __thread char last_error[1024];

const char *shim_last_error(void) { return last_error; }

void shim_clear_error(void) { last_error[0] = '\0'; }

int shim_fail(int code, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(last_error, sizeof last_error, fmt, ap);
  va_end(ap);
  return code;
}

static const int64_t dtype_sizes[] = {4, 8, 2, 2, 4, 8, 1, 1};
static const char *const dtype_names[] = {"f32", "f64", "f16", "bf16", "i32", "i64", "u8", "bool"};

int64_t shim_dtype_size(int32_t dtype) {
  return dtype >= 0 && dtype <= SHIM_BOOL ? dtype_sizes[dtype] : 0;
}

const char *shim_dtype_name(int32_t dtype) {
  return dtype >= 0 && dtype <= SHIM_BOOL ? dtype_names[dtype] : "unknown";
}

int shim_check_shape(int32_t dtype, int32_t ndim, const int64_t *shape, int64_t *numel) {
  if (shim_dtype_size(dtype) == 0) return shim_fail(SHIM_E_INVALID, "unknown dtype code %d", dtype);
  if (ndim < 0 || ndim > SHIM_MAX_DIMS)
    return shim_fail(SHIM_E_INVALID, "ndim %d outside 0..%d", ndim, SHIM_MAX_DIMS);
  if (ndim > 0 && shape == NULL) return shim_fail(SHIM_E_INVALID, "shape is null");
  int64_t n = 1;
  for (int32_t i = 0; i < ndim; i++) {
    if (shape[i] < 0) return shim_fail(SHIM_E_INVALID, "dim %d has negative size %lld", i, (long long)shape[i]);
    if (shape[i] != 0 && n > INT64_MAX / shape[i]) return shim_fail(SHIM_E_INVALID, "shape overflows int64");
    n *= shape[i];
  }
  if (n > INT64_MAX / 8) return shim_fail(SHIM_E_INVALID, "tensor too large");
  *numel = n;
  return SHIM_OK;
}
