/* parallel.c: the cpu backend's threads (shim_set_threads). A large kernel splits its range
 * into one contiguous part per thread: the calling thread runs the first, pool threads the
 * others, and the call returns when all are done, so kernels stay synchronous as the cpu
 * stream promises. Pool threads are started on first need and then sleep on a condition
 * variable between jobs; one job runs at a time (a second caller waits its turn). A thread
 * that cannot be started leaves its share to the others. */
#include <cblas.h>
#include <pthread.h>
#include <stdint.h>

#include "cpu.h"

enum { MAX_THREADS = 64 };

static struct {
  pthread_mutex_t job; /* held by the caller for the whole of a job */
  pthread_mutex_t lock;
  pthread_cond_t wake, done;
  int threads;  /* shim_set_threads's count */
  int started;  /* pool threads running */
  uint64_t generation;
  int parts, pending;
  int64_t n;
  shim_cpu_range_fn fn;
  void *ctx;
} pool = {.job = PTHREAD_MUTEX_INITIALIZER, .lock = PTHREAD_MUTEX_INITIALIZER, .wake = PTHREAD_COND_INITIALIZER,
          .done = PTHREAD_COND_INITIALIZER, .threads = 1};

static void run_part(shim_cpu_range_fn fn, void *ctx, int64_t n, int part, int parts) {
  int64_t begin = n * part / parts, end = n * (part + 1) / parts;
  if (begin < end) fn(ctx, begin, end);
}

static void *pool_main(void *arg) {
  const int part = (int)(intptr_t)arg; /* pool thread k runs part k; the caller part 0 */
  uint64_t seen = 0;
  pthread_mutex_lock(&pool.lock);
  for (;;) {
    while (pool.generation == seen) pthread_cond_wait(&pool.wake, &pool.lock);
    seen = pool.generation;
    if (part >= pool.parts) continue;
    shim_cpu_range_fn fn = pool.fn;
    void *ctx = pool.ctx;
    int64_t n = pool.n;
    int parts = pool.parts;
    pthread_mutex_unlock(&pool.lock);
    run_part(fn, ctx, n, part, parts);
    pthread_mutex_lock(&pool.lock);
    if (--pool.pending == 0) pthread_cond_signal(&pool.done);
  }
  return NULL;
}

int shim_set_threads(int32_t n) {
  if (n < 1 || n > MAX_THREADS) return shim_fail(SHIM_E_INVALID, "shim_set_threads: %d threads, not 1 to %d", n, MAX_THREADS);
  __atomic_store_n(&pool.threads, n, __ATOMIC_RELAXED);
  openblas_set_num_threads(n);
  return SHIM_OK;
}

void shim_cpu_parallel(int64_t n, int64_t grain, shim_cpu_range_fn fn, void *ctx) {
  int parts = __atomic_load_n(&pool.threads, __ATOMIC_RELAXED);
  if (grain < 1) grain = 1;
  if (n / grain < parts) parts = (int)(n / grain);
  if (parts <= 1) {
    if (n > 0) fn(ctx, 0, n);
    return;
  }
  pthread_mutex_lock(&pool.job);
  pthread_mutex_lock(&pool.lock);
  while (pool.started < parts - 1) {
    pthread_t t;
    pthread_attr_t attr;
    int ok = pthread_attr_init(&attr) == 0;
    ok = ok && pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED) == 0 &&
         pthread_create(&t, &attr, pool_main, (void *)(intptr_t)(pool.started + 1)) == 0;
    pthread_attr_destroy(&attr);
    if (!ok) break;
    pool.started++;
  }
  if (parts > pool.started + 1) parts = pool.started + 1;
  pool.fn = fn, pool.ctx = ctx, pool.n = n, pool.parts = parts, pool.pending = parts - 1;
  pool.generation++;
  pthread_cond_broadcast(&pool.wake);
  pthread_mutex_unlock(&pool.lock);
  run_part(fn, ctx, n, 0, parts);
  pthread_mutex_lock(&pool.lock);
  while (pool.pending > 0) pthread_cond_wait(&pool.done, &pool.lock);
  pthread_mutex_unlock(&pool.lock);
  pthread_mutex_unlock(&pool.job);
}
