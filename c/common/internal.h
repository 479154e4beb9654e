/* internal.h: what the cpu and cuda backends share behind the ABI (not part of it):
 * the tensor layout, dtype sizes, and the error helpers every function returns through. */
#ifndef MONARCH_SHIM_INTERNAL_H
#define MONARCH_SHIM_INTERNAL_H

#include "../shim.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Memory shared by a tensor and its views (shim_tensor_view); freed with the last of them. */
typedef struct shim_storage {
  void *data; /* host memory (cpu) or device memory (cuda) */
  int64_t nbytes;
  int32_t refs;
} shim_storage;

struct shim_tensor {
  shim_storage *storage;
  int32_t dtype;
  int32_t ndim;
  int64_t shape[SHIM_MAX_DIMS];
  int64_t numel;
};

/* Bytes per element of a dtype, or 0 for an unknown code. */
int64_t shim_dtype_size(int32_t dtype);
const char *shim_dtype_name(int32_t dtype);

/* Records the calling thread's error text and returns code, so failures read
 * `return shim_fail(SHIM_E_INVALID, "...", ...)`. */
int shim_fail(int code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Clears the calling thread's error text; successful calls leave it alone. */
void shim_clear_error(void);

/* Validates dtype, ndim and shape and computes the element count. */
int shim_check_shape(int32_t dtype, int32_t ndim, const int64_t *shape, int64_t *numel);

/* NULL-handle guard for the first lines of every entry point. */
#define SHIM_REQUIRE(ptr, what) \
  do { if ((ptr) == NULL) return shim_fail(SHIM_E_INVALID, "%s: %s is null", __func__, (what)); } while (0)

/* Propagates a failed status from a shim call. */
#define SHIM_TRY(call) \
  do { int shim_try_status_ = (call); if (shim_try_status_ != SHIM_OK) return shim_try_status_; } while (0)

#ifdef __cplusplus
}
#endif

#endif
