/* error.c: the thread-local last-error text, and the dtype names and tensor descriptions the
 * messages of both backends are made of. */
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

const char *shim_describe(const shim_tensor *t, char *buf, size_t cap) {
  size_t used = (size_t)snprintf(buf, cap, "%s[", shim_dtype_name(t->dtype));
  for (int32_t i = 0; i < t->ndim && used < cap; i++)
    used += (size_t)snprintf(buf + used, cap - used, i ? ", %lld" : "%lld", (long long)t->shape[i]);
  if (used < cap) snprintf(buf + used, cap - used, "]");
  return buf;
}
