/* comm_async.c: shim_all_reduce_start on cpu. One communication thread per process runs the
 * started all-reduces through shim_all_reduce, one at a time, in the order they were started:
 * every member starts its collectives in the same order, so they meet in it, and the caller's
 * thread goes on with work that does not touch the tensors meanwhile. While the thread waits
 * for the peers it sleeps (Gloo's reads, or comm_shm's futex), leaving the core to the caller.
 * A failure's text is shim_last_error's on the thread, kept in the work and given again, as
 * the caller's own last error, by the wait that sees the work done. */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "cpu.h"

struct shim_work {
  shim_comm *comm;
  shim_tensor *out;
  const shim_tensor *in;
  int32_t op;
  shim_stream *stream;
  struct shim_work *next; /* the queue, under `lock` */
  int32_t done;           /* under `lock` */
  int32_t status;         /* once done */
  char message[1024];     /* once done with a failure */
  int64_t began_us, ended_us;
};

static int64_t wall_us(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t queued = PTHREAD_COND_INITIALIZER;   /* the thread waits for work */
static pthread_cond_t finished = PTHREAD_COND_INITIALIZER; /* waiters wait for a work to be done */
static shim_work *head, *tail;
static int started;

static void *communicate(void *unused) {
  for (;;) {
    pthread_mutex_lock(&lock);
    while (head == NULL) pthread_cond_wait(&queued, &lock);
    shim_work *w = head;
    head = w->next;
    if (head == NULL) tail = NULL;
    pthread_mutex_unlock(&lock);
    shim_clear_error();
    const int64_t began = wall_us();
    const int status = shim_all_reduce(w->comm, w->out, w->in, w->op, w->stream);
    pthread_mutex_lock(&lock);
    w->status = status;
    w->began_us = began;
    w->ended_us = wall_us();
    if (status != SHIM_OK) snprintf(w->message, sizeof w->message, "%s", shim_last_error());
    w->done = 1;
    pthread_cond_broadcast(&finished);
    pthread_mutex_unlock(&lock);
  }
  return NULL;
}

int shim_all_reduce_start(shim_comm *c, shim_tensor *out, const shim_tensor *in, int32_t op, shim_stream *s,
                          shim_work **work) {
  SHIM_REQUIRE(c, "comm");
  SHIM_REQUIRE(out, "out");
  SHIM_REQUIRE(in, "in");
  SHIM_REQUIRE(work, "work");
  shim_work *w = calloc(1, sizeof *w);
  if (w == NULL) return shim_fail(SHIM_E_NOMEM, "shim_all_reduce_start: out of host memory");
  *w = (shim_work){.comm = c, .out = out, .in = in, .op = op, .stream = s};
  pthread_mutex_lock(&lock);
  if (!started) {
    pthread_t thread;
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    const int e = pthread_create(&thread, &attr, communicate, NULL);
    pthread_attr_destroy(&attr);
    if (e != 0) {
      pthread_mutex_unlock(&lock);
      free(w);
      return shim_fail(SHIM_E_BACKEND, "shim_all_reduce_start: cannot start the communication thread (error %d)", e);
    }
    started = 1;
  }
  if (tail == NULL) head = w;
  else tail->next = w;
  tail = w;
  pthread_cond_signal(&queued);
  pthread_mutex_unlock(&lock);
  *work = w;
  return SHIM_OK;
}

/* Waits (lock held) until w is done or the deadline passes; a negative timeout has none. */
static void wait_done(shim_work *w, int64_t timeout_us) {
  if (w->done || timeout_us == 0) return;
  if (timeout_us < 0) {
    while (!w->done) pthread_cond_wait(&finished, &lock);
    return;
  }
  struct timespec until;
  clock_gettime(CLOCK_REALTIME, &until);
  until.tv_sec += timeout_us / 1000000;
  until.tv_nsec += (timeout_us % 1000000) * 1000;
  if (until.tv_nsec >= 1000000000) {
    until.tv_sec++;
    until.tv_nsec -= 1000000000;
  }
  while (!w->done)
    if (pthread_cond_timedwait(&finished, &lock, &until) == ETIMEDOUT) return;
}

int shim_work_wait(shim_work *w, int64_t timeout_us, int32_t *done) {
  SHIM_REQUIRE(w, "work");
  SHIM_REQUIRE(done, "done");
  pthread_mutex_lock(&lock);
  wait_done(w, timeout_us);
  *done = w->done;
  const int status = w->done ? w->status : SHIM_OK;
  pthread_mutex_unlock(&lock);
  return status == SHIM_OK ? SHIM_OK : shim_fail(status, "%s", w->message);
}

int shim_work_times(const shim_work *w, int64_t *began_us, int64_t *ended_us) {
  SHIM_REQUIRE(w, "work");
  SHIM_REQUIRE(began_us, "began_us");
  SHIM_REQUIRE(ended_us, "ended_us");
  pthread_mutex_lock(&lock);
  *began_us = w->began_us;
  *ended_us = w->ended_us;
  pthread_mutex_unlock(&lock);
  return SHIM_OK;
}

int shim_work_destroy(shim_work *w) {
  SHIM_REQUIRE(w, "work");
  pthread_mutex_lock(&lock);
  wait_done(w, -1);
  pthread_mutex_unlock(&lock);
  free(w);
  return SHIM_OK;
}
