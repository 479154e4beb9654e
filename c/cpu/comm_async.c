/* comm_async.c: shim_all_reduce_start on cpu. Each communicator gets a communication thread on
 * its first started all-reduce; it runs that comm's started all-reduces through shim_all_reduce,
 * one at a time, in the order they were started: every member starts its collectives in the
 * same order, so they meet in it, and the caller's thread goes on with work that does not touch
 * the tensors meanwhile. Communicators do not wait for each other (a tp all-reduce is not held
 * behind the dp ones started before it), and none can wait for another's thread: every member
 * starts each comm's collectives in one order, and starting never blocks. While a thread waits
 * for the peers it sleeps (Gloo's reads, or comm_shm's futex), leaving the core to the caller.
 * A failure's text is shim_last_error's on the thread, kept in the work and given again, as
 * the caller's own last error, by the wait that sees the work done. */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "comm_async.h"
#include "cpu.h"

struct shim_work {
  shim_comm *comm;
  shim_tensor *out;
  const shim_tensor *in;
  int32_t op;
  shim_stream *stream;
  struct shim_work *next; /* its channel's queue, under `lock` */
  int32_t done;           /* under `lock` */
  int32_t status;         /* once done */
  char message[1024];     /* once done with a failure */
  int64_t began_us, ended_us;
};

/* A communicator's thread and its queue, under `lock`. */
typedef struct channel {
  const shim_comm *comm;
  shim_work *head, *tail;
  int32_t closing; /* the comm is being destroyed: the thread ends once its queue is empty */
  pthread_cond_t queued;
  struct channel *next;
} channel;

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t finished = PTHREAD_COND_INITIALIZER; /* waiters wait for a work to be done */
static channel *channels;

static int64_t wall_us(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

static void *communicate(void *arg) {
  channel *ch = arg;
  pthread_mutex_lock(&lock);
  for (;;) {
    while (ch->head == NULL && !ch->closing) pthread_cond_wait(&ch->queued, &lock);
    if (ch->head == NULL) break;
    shim_work *w = ch->head;
    ch->head = w->next;
    if (ch->head == NULL) ch->tail = NULL;
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
  }
  for (channel **at = &channels; *at != NULL; at = &(*at)->next)
    if (*at == ch) {
      *at = ch->next;
      break;
    }
  pthread_mutex_unlock(&lock);
  pthread_cond_destroy(&ch->queued);
  free(ch);
  return NULL;
}

/* c's channel, made (with its thread) if it has none; NULL, with *status the failure, when it cannot be. Lock held. */
static channel *channel_of(const shim_comm *c, int *status) {
  for (channel *ch = channels; ch != NULL; ch = ch->next)
    if (ch->comm == c && !ch->closing) return ch;
  channel *ch = calloc(1, sizeof *ch);
  if (ch == NULL) {
    *status = shim_fail(SHIM_E_NOMEM, "shim_all_reduce_start: out of host memory");
    return NULL;
  }
  ch->comm = c;
  pthread_cond_init(&ch->queued, NULL);
  pthread_t thread;
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
  const int e = pthread_create(&thread, &attr, communicate, ch);
  pthread_attr_destroy(&attr);
  if (e != 0) {
    pthread_cond_destroy(&ch->queued);
    free(ch);
    *status = shim_fail(SHIM_E_BACKEND, "shim_all_reduce_start: cannot start a communication thread (error %d)", e);
    return NULL;
  }
  ch->next = channels;
  channels = ch;
  return ch;
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
  int status = SHIM_OK;
  channel *ch = channel_of(c, &status);
  if (ch == NULL) {
    pthread_mutex_unlock(&lock);
    free(w);
    return status;
  }
  if (ch->tail == NULL) ch->head = w;
  else ch->tail->next = w;
  ch->tail = w;
  pthread_cond_signal(&ch->queued);
  pthread_mutex_unlock(&lock);
  *work = w;
  return SHIM_OK;
}

void shim_cpu_comm_closing(const shim_comm *c) {
  pthread_mutex_lock(&lock);
  for (channel *ch = channels; ch != NULL; ch = ch->next)
    if (ch->comm == c && !ch->closing) {
      ch->closing = 1;
      pthread_cond_signal(&ch->queued);
    }
  pthread_mutex_unlock(&lock);
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
