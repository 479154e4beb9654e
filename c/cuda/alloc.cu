/* alloc.cu: device memory for tensors. cudaMalloc and cudaFree are slow and cudaFree waits for
 * the whole device, so freed blocks are kept in a cache keyed by size class (shim_size_class,
 * c/common/internal.h) and device, as PyTorch's caching allocator does. A freed block records one event on each stream that used it (see
 * shim_cuda_track_storage) and is handed out again only once those events have completed,
 * so new work on any stream never overwrites memory that queued work still reads.
 *
 * The cache is process-wide state, like a library handle: one pool per process, behind one
 * mutex. shim_set_block_cache(0) turns it off (every free is a cudaFree), to measure its effect.
 * When cudaMalloc runs out, the device is synchronised, the cache emptied, and the call
 * retried once. Storage counts against the memory limit (c/common/memory.c) by the bytes asked
 * for, from allocation to release, whether its block is new or cached. */
#include <pthread.h>
#include <stdlib.h>

#include <atomic>

#include "cuda_shim.h"

struct shim_cuda_block {
  shim_cuda_block *next; /* in its cache bin */
  void *ptr;
  int64_t bytes; /* the size class */
  int32_t device;
  int32_t created; /* events made so far, reused across frees */
  int32_t pending; /* events recorded at the last free */
  cudaEvent_t events[SHIM_CUDA_TRACKED_STREAMS + 1]; /* + 1: the default stream */
};

namespace {

enum { BINS = SHIM_CACHE_BINS };

struct Cache {
  pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
  std::atomic<bool> enabled{true}; /* shim_set_block_cache's */
  shim_cuda_block *bins[BINS] = {};
};

Cache cache;

/* Whether every event recorded at the block's last free has completed. */
int block_ready(shim_cuda_block *b, bool *ready) {
  for (int32_t i = 0; i < b->pending; i++) {
    cudaError_t e = cudaEventQuery(b->events[i]);
    if (e == cudaErrorNotReady) {
      *ready = false;
      return SHIM_OK;
    }
    CUDA_CHECK(e);
  }
  *ready = true;
  return SHIM_OK;
}

/* cudaFree's the block (which waits for the device) and drops its events. */
int block_destroy(shim_cuda_block *b) {
  int status = SHIM_OK;
  for (int32_t i = 0; i < b->created; i++) {
    cudaError_t e = cudaEventDestroy(b->events[i]);
    if (e != cudaSuccess && status == SHIM_OK) status = shim_cuda_fail(e, "cudaEventDestroy", __FILE__, __LINE__);
  }
  cudaError_t e = cudaFree(b->ptr);
  if (e != cudaSuccess && status == SHIM_OK) status = shim_cuda_fail(e, "cudaFree", __FILE__, __LINE__);
  free(b);
  return status;
}

/* A cached block of exactly `bytes` on `device` whose last users are done, unlinked; or NULL. */
int take_cached(int64_t bytes, int32_t device, shim_cuda_block **out) {
  *out = NULL;
  pthread_mutex_lock(&cache.lock);
  int status = SHIM_OK;
  for (shim_cuda_block **link = &cache.bins[shim_floor_log2(bytes)]; *link != NULL; link = &(*link)->next) {
    shim_cuda_block *b = *link;
    if (b->bytes != bytes || b->device != device) continue;
    bool ready = false;
    status = block_ready(b, &ready);
    if (status != SHIM_OK) break;
    if (!ready) continue;
    *link = b->next;
    b->next = NULL;
    b->pending = 0;
    *out = b;
    break;
  }
  pthread_mutex_unlock(&cache.lock);
  return status;
}

/* Frees every cached block of `device`, after the device has finished all its work. */
int empty_cache(int32_t device) {
  CUDA_CHECK(cudaDeviceSynchronize());
  int status = SHIM_OK;
  pthread_mutex_lock(&cache.lock);
  for (int bin = 0; bin < BINS; bin++) {
    shim_cuda_block **link = &cache.bins[bin];
    while (*link != NULL) {
      shim_cuda_block *b = *link;
      if (b->device != device) {
        link = &b->next;
        continue;
      }
      *link = b->next;
      int s = block_destroy(b);
      if (status == SHIM_OK) status = s;
    }
  }
  pthread_mutex_unlock(&cache.lock);
  return status;
}

int new_block(int64_t bytes, int32_t device, shim_cuda_block **out) {
  shim_cuda_block *b = (shim_cuda_block *)calloc(1, sizeof *b);
  if (b == NULL) return shim_fail(SHIM_E_NOMEM, "out of host memory for a block header");
  cudaError_t e = cudaMalloc(&b->ptr, (size_t)bytes);
  if (e == cudaErrorMemoryAllocation) {
    (void)cudaGetLastError(); /* not sticky: clear it before retrying */
    int status = empty_cache(device);
    if (status != SHIM_OK) {
      free(b);
      return status;
    }
    e = cudaMalloc(&b->ptr, (size_t)bytes);
  }
  if (e != cudaSuccess) {
    free(b);
    int status = shim_cuda_fail(e, "cudaMalloc", __FILE__, __LINE__);
    if (e != cudaErrorMemoryAllocation) return status;
    size_t free_bytes = 0, total = 0;
    (void)cudaMemGetInfo(&free_bytes, &total);
    (void)cudaGetLastError();
    return shim_fail(SHIM_E_NOMEM, "device %d out of memory for %lld bytes (%zu of %zu bytes free, cache emptied)",
                     device, (long long)bytes, free_bytes, total);
  }
  b->bytes = bytes;
  b->device = device;
  *out = b;
  return SHIM_OK;
}

/* Records, on every stream that used the storage, the event that must complete before its
 * block is reused. */
int record_uses(shim_cuda_storage *st) {
  shim_cuda_block *b = st->block;
  cudaStream_t streams[SHIM_CUDA_TRACKED_STREAMS + 1];
  int32_t n = 0;
  for (int32_t i = 0; i < st->nstreams; i++) streams[n++] = st->streams[i]->stream;
  if (st->on_default) streams[n++] = 0;
  for (int32_t i = 0; i < n; i++) {
    if (i == b->created) {
      CUDA_CHECK(cudaEventCreateWithFlags(&b->events[i], cudaEventDisableTiming));
      b->created++;
    }
    CUDA_CHECK(cudaEventRecord(b->events[i], streams[i]));
  }
  b->pending = n;
  return SHIM_OK;
}

/* Back to the cache, or cudaFree'd when the cache is off, the storage's streams were too many
 * to record, or recording failed (a device error: the block cannot be proven idle). */
int give_back(shim_cuda_storage *st) {
  shim_cuda_block *b = st->block;
  if (!cache.enabled || st->overflow) return block_destroy(b);
  int status = record_uses(st);
  if (status != SHIM_OK) {
    (void)block_destroy(b);
    return status;
  }
  pthread_mutex_lock(&cache.lock);
  shim_cuda_block **bin = &cache.bins[shim_floor_log2(b->bytes)];
  b->next = *bin;
  *bin = b;
  pthread_mutex_unlock(&cache.lock);
  return SHIM_OK;
}

}  // namespace

int shim_set_block_cache(int32_t enabled) {
  SHIM_TRY(shim_check_flag("shim_set_block_cache", enabled));
  cache.enabled = enabled == 1;
  if (enabled) return SHIM_OK;
  int device = 0;
  CUDA_CHECK(cudaGetDevice(&device));
  return empty_cache(device);
}

int shim_cuda_storage_alloc(int64_t nbytes, shim_cuda_storage **out) {
  SHIM_TRY(shim_memory_reserve("shim_tensor_alloc", nbytes));
  shim_cuda_storage *st = (shim_cuda_storage *)calloc(1, sizeof *st);
  if (st == NULL) {
    shim_memory_release(nbytes);
    return shim_fail(SHIM_E_NOMEM, "out of host memory for a tensor's storage");
  }
  st->base.nbytes = nbytes;
  if (nbytes > 0) {
    int device = 0;
    cudaError_t e = cudaGetDevice(&device);
    int64_t bytes = shim_size_class(nbytes);
    shim_cuda_block *b = NULL;
    int status = e != cudaSuccess ? shim_cuda_fail(e, "cudaGetDevice", __FILE__, __LINE__)
                 : cache.enabled  ? take_cached(bytes, device, &b)
                                  : SHIM_OK;
    if (status == SHIM_OK && b == NULL) status = new_block(bytes, device, &b);
    if (status != SHIM_OK) {
      free(st);
      shim_memory_release(nbytes);
      return status;
    }
    st->block = b;
    st->base.data = b->ptr;
  }
  *out = st;
  return SHIM_OK;
}

int shim_cuda_storage_release(shim_cuda_storage *st) {
  shim_memory_release(st->base.nbytes);
  int status = st->block != NULL ? give_back(st) : SHIM_OK;
  for (int32_t i = 0; i < st->nstreams; i++) {
    int s = shim_cuda_stream_release(st->streams[i]);
    if (status == SHIM_OK) status = s;
  }
  free(st);
  return status;
}

void shim_cuda_track_storage(shim_stream *s, shim_cuda_storage *st) {
  if (st->block == NULL) return; /* no memory to protect */
  if (s == NULL) {
    st->on_default = 1;
    return;
  }
  for (int32_t i = 0; i < st->nstreams; i++)
    if (st->streams[i] == s) return;
  if (st->nstreams == SHIM_CUDA_TRACKED_STREAMS) {
    st->overflow = 1;
    return;
  }
  __atomic_add_fetch(&s->refs, 1, __ATOMIC_RELAXED);
  st->streams[st->nstreams++] = s;
}

int ShimScratch::alloc(int64_t nbytes, shim_stream *s) {
  SHIM_TRY(shim_cuda_storage_alloc(nbytes, &st));
  shim_cuda_track_storage(s, st);
  return SHIM_OK;
}
