/* tensor.c: host tensors. A tensor is a shape over refcounted storage (internal.h), so a view
 * keeps its memory alive after the tensor it came from is freed; headers and views are shared
 * with the cuda backend (c/common/tensor.c), the host memory behind them is made here.
 *
 * Freed blocks of 64 KiB and more are kept by size class (shim_size_class), up to 1 GiB in all,
 * and handed out again: a fresh block of megabytes costs a page fault per 4 KiB on first touch
 * (glibc returns big blocks to the system), more than an elementwise op over it. The cache is
 * process-wide, behind one mutex; shim_set_block_cache(0) turns it off. A cached block counts
 * against the memory limit only while a storage holds it, as on cuda; when an allocation
 * fails, the cache is emptied and the allocation tried again. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "cpu.h"

/* Cache-line alignment lets the elementwise loops use aligned vector loads. */
enum { ALIGNMENT = 64 };
enum { CACHE_MIN = 64 << 10 };
static const int64_t CACHE_CAP = (int64_t)1 << 30;

/* A cached block, its link kept in its own first bytes. */
typedef struct cached_block {
  struct cached_block *next;
  int64_t bytes;
} cached_block;

static struct {
  pthread_mutex_t lock;
  int enabled; /* read and written under lock */
  int64_t held;
  cached_block *bins[SHIM_CACHE_BINS];
} cache = {.lock = PTHREAD_MUTEX_INITIALIZER, .enabled = 1};

/* The bytes a storage of nbytes takes: a multiple of the alignment, a size class when cached. */
static int64_t block_bytes(int64_t nbytes) {
  int64_t padded = (nbytes + ALIGNMENT - 1) / ALIGNMENT * ALIGNMENT;
  if (padded == 0) return ALIGNMENT; /* 0 elements still get a real pointer */
  return padded >= CACHE_MIN ? shim_size_class(padded) : padded;
}

static void *take_cached(int64_t bytes) {
  if (bytes < CACHE_MIN) return NULL;
  void *found = NULL;
  pthread_mutex_lock(&cache.lock);
  for (cached_block **link = &cache.bins[shim_floor_log2(bytes)]; *link != NULL; link = &(*link)->next)
    if ((*link)->bytes == bytes) {
      found = *link;
      *link = (*link)->next;
      cache.held -= bytes;
      break;
    }
  pthread_mutex_unlock(&cache.lock);
  return found;
}

static void empty_cache(void) {
  pthread_mutex_lock(&cache.lock);
  for (int bin = 0; bin < SHIM_CACHE_BINS; bin++)
    while (cache.bins[bin] != NULL) {
      cached_block *b = cache.bins[bin];
      cache.bins[bin] = b->next;
      free(b);
    }
  cache.held = 0;
  pthread_mutex_unlock(&cache.lock);
}

int shim_set_block_cache(int32_t enabled) {
  SHIM_TRY(shim_check_flag("shim_set_block_cache", enabled));
  pthread_mutex_lock(&cache.lock);
  cache.enabled = enabled;
  pthread_mutex_unlock(&cache.lock);
  if (!enabled) empty_cache();
  return SHIM_OK;
}

static void *new_block(int64_t bytes) {
  void *p = take_cached(bytes);
  if (p != NULL) return p;
  p = aligned_alloc(ALIGNMENT, (size_t)bytes);
  if (p == NULL) {
    empty_cache();
    p = aligned_alloc(ALIGNMENT, (size_t)bytes);
  }
  return p;
}

static void release_block(void *p, int64_t bytes) {
  if (bytes >= CACHE_MIN) {
    pthread_mutex_lock(&cache.lock);
    int keep = cache.enabled && cache.held + bytes <= CACHE_CAP;
    if (keep) {
      cached_block *b = p;
      b->bytes = bytes;
      b->next = cache.bins[shim_floor_log2(bytes)];
      cache.bins[shim_floor_log2(bytes)] = b;
      cache.held += bytes;
    }
    pthread_mutex_unlock(&cache.lock);
    if (keep) return;
  }
  free(p);
}

static void free_storage(shim_storage *storage) {
  shim_memory_release(storage->nbytes);
  release_block(storage->data, block_bytes(storage->nbytes));
  free(storage);
}

int shim_tensor_alloc(int32_t dtype, int32_t ndim, const int64_t *shape, shim_tensor **out) {
  SHIM_REQUIRE(out, "out");
  int64_t numel;
  SHIM_TRY(shim_check_shape(dtype, ndim, shape, &numel));
  int64_t nbytes = numel * shim_dtype_size(dtype);
  SHIM_TRY(shim_memory_reserve(__func__, nbytes));
  shim_storage *storage = calloc(1, sizeof *storage);
  if (storage == NULL) {
    shim_memory_release(nbytes);
    return shim_fail(SHIM_E_NOMEM, "out of host memory for a tensor header");
  }
  storage->data = new_block(block_bytes(nbytes));
  if (storage->data == NULL) {
    free(storage);
    shim_memory_release(nbytes);
    return shim_fail(SHIM_E_NOMEM, "shim_tensor_alloc: out of host memory for %lld bytes", (long long)nbytes);
  }
  storage->nbytes = nbytes;
  int status = shim_tensor_new(storage, dtype, ndim, shape, numel, out);
  if (status != SHIM_OK) free_storage(storage);
  return status;
}

int shim_tensor_free(shim_tensor *t) {
  SHIM_REQUIRE(t, "t");
  shim_storage *last = shim_tensor_drop(t);
  if (last != NULL) free_storage(last);
  return SHIM_OK;
}

int shim_tensor_copy_in(shim_tensor *t, const void *src, int64_t nbytes, shim_stream *s) {
  SHIM_TRY(shim_check_copy(__func__, t, src, "src", nbytes));
  if (nbytes == 0) return SHIM_OK;
  memcpy(shim_cpu_data(t), src, (size_t)nbytes);
  return SHIM_OK;
}

int shim_tensor_copy_out(const shim_tensor *t, void *dst, int64_t nbytes, shim_stream *s) {
  SHIM_TRY(shim_check_copy(__func__, t, dst, "dst", nbytes));
  if (nbytes == 0) return SHIM_OK;
  memcpy(dst, shim_cpu_data(t), (size_t)nbytes);
  return SHIM_OK;
}

int shim_tensor_host_data(const shim_tensor *t, void **out) {
  SHIM_REQUIRE(t, "t");
  SHIM_REQUIRE(out, "out");
  *out = shim_cpu_data(t);
  return SHIM_OK;
}
