/* comm_nccl.cu: the communicator section of shim.h on NCCL, loaded at run time (loader.cu).
 *
 * Creation is two-phase, like the cpu's: member 0's shim_comm_create asks NCCL for a unique id,
 * whose 128 bytes are its address; the other members publish nothing. shim_comm_connect takes
 * member 0's bytes and joins with ncclCommInitRankConfig, non-blocking so that a member that
 * never comes can be given up on.
 *
 * Collectives are host-synchronous on cuda: each call issues its work on the stream, records an
 * event after it, and polls that event and ncclCommGetAsyncError until the work is done, NCCL
 * reports an error (a peer gone), or the comm's timeout passes. On an error or a timeout the
 * comm is aborted (ncclCommAbort, which also ends its kernels) and every later call fails with
 * that first error, so a lost peer is an error, never a hang. The timeout counts from the call
 * and covers work queued on the stream before it, which the collective waits for anyway.
 *
 * AVG is a sum and then a divide kernel for every dtype, as on the cpu (NCCL's ncclAvg scales
 * before it sums, which rounds differently); integers truncate. bool travels as uint8: sum and
 * max are max (or), prod and min are min (and), avg is refused. Data that is only moved
 * (gather, broadcast, all-to-all, send/recv) travels as bytes.
 *
 * Before any data moves, the members agree on what each passed (internal.h, shim_comm_header):
 * a collective first all-gathers every member's header, a transfer's two sides swap theirs, and
 * each member checks them on the host. Members that disagree (which NCCL would answer with a
 * hang or with bytes past a buffer's end) all fail the call, and the comm stays usable; a
 * member that refuses its own arguments still takes part, saying so. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "elements.h"

using namespace shim;

/* rank, size, connected and the first failure are in shim_comm_state (internal.h); calloc
 * zeroes them. */
struct shim_comm : shim_comm_state {
  int64_t timeout_ms;
  const shim_nccl_api *nccl;
  ncclUniqueId id;             /* member 0: the id it made; the others: member 0's, at connect */
  ncclComm_t comm;             /* NULL before connect and after an abort */
  cudaEvent_t done;            /* recorded after each call's work and polled */
  shim_cuda_storage *barrier;  /* one byte the barrier all-reduces */
  shim_stream *side;           /* the comm stream of shim_all_reduce_start, made on its first use */
};

/* A started all-reduce: its event on the comm stream, polled like a collective's (wait_done). */
struct shim_work {
  shim_comm *comm;
  cudaEvent_t done;     /* recorded on the comm stream after the work; valid when has_event */
  int32_t has_event;
  int64_t deadline;     /* the comm's timeout, counted from the start */
  int32_t finished;
  int32_t status;       /* once finished */
  char message[1024];   /* once finished with a failure */
  int64_t began_us, ended_us;
};

namespace {

int64_t now_ns() {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* Saturates, so a timeout too long to count in nanoseconds means no deadline. */
int64_t deadline_of(const shim_comm *c) {
  const int64_t now = now_ns();
  return c->timeout_ms > (INT64_MAX - now) / 1000000 ? INT64_MAX : now + c->timeout_ms * 1000000;
}

/* Spins for the first few hundred polls (a small collective is done in microseconds), then
 * sleeps between them. */
void pause_after(int polls) {
  if (polls < 256) return;
  struct timespec ts = {0, polls < 4096 ? 10000 : 200000};
  nanosleep(&ts, NULL);
}

const char *last_error(const shim_comm *c) {
  const char *text = c->nccl->ncclGetLastError(c->comm);
  return text != NULL ? text : "";
}

/* Records the comm's first failure, aborts it, and fails with code. */
__attribute__((format(printf, 3, 4))) int broken(shim_comm *c, int code, const char *fmt, ...) {
  char text[sizeof c->failure];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(text, sizeof text, fmt, ap);
  va_end(ap);
  if (c->failure[0] == '\0') memcpy(c->failure, text, sizeof text);
  if (c->comm != NULL) {
    (void)c->nccl->ncclCommAbort(c->comm);
    c->comm = NULL;
  }
  return shim_fail(code, "%s", text);
}

/* Polls a non-blocking comm until the call in progress on it has finished. */
int settle(shim_comm *c, const char *what, int64_t deadline) {
  for (int polls = 0;; polls++) {
    ncclResult_t state = ncclSuccess;
    ncclResult_t r = c->nccl->ncclCommGetAsyncError(c->comm, &state);
    if (r != ncclSuccess)
      return broken(c, SHIM_E_COMM, "%s: ncclCommGetAsyncError: %s (NCCL result %d)", what, c->nccl->ncclGetErrorString(r), (int)r);
    if (state == ncclSuccess) return SHIM_OK;
    if (state != ncclInProgress)
      return broken(c, SHIM_E_COMM, "%s: NCCL failed: %s (NCCL result %d) %s", what, c->nccl->ncclGetErrorString(state),
                    (int)state, last_error(c));
    if (now_ns() > deadline)
      return broken(c, SHIM_E_TIMEOUT, "%s: NCCL did not finish within %lld ms (a member missing or stuck?)", what,
                    (long long)c->timeout_ms);
    pause_after(polls);
  }
}

/* The result of issuing NCCL work: done, still in progress (settle), or a failure. */
int issued(shim_comm *c, const char *what, ncclResult_t r, int64_t deadline) {
  if (r == ncclSuccess) return SHIM_OK;
  if (r == ncclInProgress) return settle(c, what, deadline);
  return broken(c, SHIM_E_COMM, "%s: %s (NCCL result %d) %s", what, c->nccl->ncclGetErrorString(r), (int)r, last_error(c));
}

/* Waits until the work issued to stream so far has completed, watching the comm for errors. */
int wait_done(shim_comm *c, const char *what, cudaStream_t stream, int64_t deadline) {
  CUDA_CHECK(cudaEventRecord(c->done, stream));
  for (int polls = 0;; polls++) {
    cudaError_t e = cudaEventQuery(c->done);
    if (e == cudaSuccess) return SHIM_OK;
    if (e != cudaErrorNotReady) {
      (void)cudaGetLastError();
      return broken(c, SHIM_E_BACKEND, "%s: waiting for NCCL's work: %s (CUDA error %d)", what, cudaGetErrorString(e), (int)e);
    }
    ncclResult_t state = ncclSuccess;
    ncclResult_t r = c->nccl->ncclCommGetAsyncError(c->comm, &state);
    if (r != ncclSuccess || (state != ncclSuccess && state != ncclInProgress))
      return broken(c, SHIM_E_COMM, "%s: NCCL failed: %s (NCCL result %d) %s", what,
                    c->nccl->ncclGetErrorString(r != ncclSuccess ? r : state), (int)(r != ncclSuccess ? r : state),
                    last_error(c));
    if (now_ns() > deadline)
      return broken(c, SHIM_E_TIMEOUT, "%s: did not complete within %lld ms (a member missing or stuck?)", what,
                    (long long)c->timeout_ms);
    pause_after(polls);
  }
}

ncclDataType_t nccl_type(int32_t dtype) {
  switch (dtype) {
    case SHIM_F32: return ncclFloat32;
    case SHIM_F64: return ncclFloat64;
    case SHIM_F16: return ncclFloat16;
    case SHIM_BF16: return ncclBfloat16;
    case SHIM_I32: return ncclInt32;
    case SHIM_I64: return ncclInt64;
    default: return ncclUint8; /* u8 and bool */
  }
}

/* NCCL's reduction for op over dtype (AVG sums; divide() finishes it), for a pair
 * shim_check_all_reduce or shim_check_reduce_scatter accepted (bool has no AVG). */
ncclRedOp_t nccl_op(int32_t dtype, int32_t op) {
  if (dtype == SHIM_BOOL) return op == SHIM_OP_SUM || op == SHIM_OP_MAX ? ncclMax : ncclMin;
  switch (op) {
    case SHIM_OP_PROD: return ncclProd;
    case SHIM_OP_MIN: return ncclMin;
    case SHIM_OP_MAX: return ncclMax;
    default: return ncclSum; /* sum, avg */
  }
}

/* data[i] /= divisor: floating dtypes in their compute type, integers truncating in int64. */
template <typename D>
__global__ void divide_kernel(typename D::T *data, int64_t n, int32_t divisor) {
  using V = typename D::V;
  const int64_t stride = (int64_t)gridDim.x * blockDim.x;
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
    if constexpr (D::kind == Kind::Float) data[i] = D::store(D::load(data[i]) / (V)divisor);
    else data[i] = (typename D::T)((int64_t)D::load(data[i]) / (int64_t)divisor);
  }
}

/* The second half of AVG, queued on the stream after the sum. */
int divide(const shim_tensor *t, int32_t divisor, cudaStream_t stream) {
  return dispatch(t->dtype, [&](auto d) -> int {
    using D = decltype(d);
    if constexpr (D::kind != Kind::Bool) { /* bool has no AVG (the collectives' checks refuse it) */
      divide_kernel<D><<<shim_cuda_blocks(t->numel), SHIM_CUDA_THREADS, 0, stream>>>(
          (typename D::T *)shim_cuda_data(t), t->numel, divisor);
      CUDA_CHECK_LAUNCH("divide_kernel");
    }
    return SHIM_OK;
  });
}

/* Issues one NCCL call on stream (call() returns its result) and, for AVG, the divide of
 * avg_out after it; then waits for all of it within the comm's timeout. */
template <typename Call>
int collective(shim_comm *c, const char *what, cudaStream_t stream, const shim_tensor *avg_out, Call call) {
  const int64_t deadline = deadline_of(c);
  SHIM_TRY(issued(c, what, call(), deadline));
  if (avg_out != NULL) SHIM_TRY(divide(avg_out, c->size, stream));
  return wait_done(c, what, stream, deadline);
}

/* Agreement before a collective: every member's header all-gathered through device memory and
 * checked here, so every member fails alike when one differs (internal.h). */
int agree_on(shim_comm *c, const char *what, shim_stream *s, const shim_comm_header &mine) {
  if (c->size == 1) return SHIM_OK;
  const size_t H = sizeof(shim_comm_header);
  cudaStream_t stream = shim_cuda_stream(s);
  ShimScratch headers;
  SHIM_TRY(headers.alloc((int64_t)(H * (size_t)c->size), s));
  char *all = (char *)headers.data();
  CUDA_CHECK(cudaMemcpyAsync(all + (size_t)c->rank * H, &mine, H, cudaMemcpyHostToDevice, stream));
  SHIM_TRY(collective(c, what, stream, NULL, [&] {
    return c->nccl->ncclAllGather(all + (size_t)c->rank * H, all, H, ncclUint8, c->comm, stream);
  }));
  shim_comm_header *seen = (shim_comm_header *)malloc(H * (size_t)c->size);
  if (seen == NULL) return shim_fail(SHIM_E_NOMEM, "%s: out of host memory", what);
  int status = SHIM_OK;
  cudaError_t e = cudaMemcpyAsync(seen, all, H * (size_t)c->size, cudaMemcpyDeviceToHost, stream);
  if (e == cudaSuccess) e = cudaStreamSynchronize(stream);
  if (e != cudaSuccess) status = shim_cuda_fail(e, "cudaMemcpyAsync", __FILE__, __LINE__);
  for (int32_t peer = 0; status == SHIM_OK && peer < c->size; peer++)
    if (peer != c->rank) status = shim_check_agreement(what, &mine, c->rank, &seen[peer], peer);
  free(seen);
  return status;
}

/* A call this member refuses on its own arguments, once its comm is usable: it still takes
 * part in the agreement, saying it refuses, so that the others fail the call too instead of
 * waiting for it. What it reports is its own refusal. */
int refused(shim_comm *c, const char *what, int32_t call, shim_stream *s, int status) {
  if (status == SHIM_OK || c == NULL || c->size == 1 || !c->connected || c->failure[0] != '\0' || c->comm == NULL)
    return status;
  char why[1024];
  snprintf(why, sizeof why, "%s", shim_last_error());
  (void)agree_on(c, what, s, shim_comm_refusal(call));
  return shim_fail(status, "%s", why);
}

/* Issues grouped sends and receives (body returns the first failed result, else ncclSuccess),
 * closing the group even after a failure; then waits for them within the comm's timeout. */
template <typename Body>
int grouped(shim_comm *c, const char *what, cudaStream_t stream, Body body) {
  const int64_t deadline = deadline_of(c);
  ncclResult_t r = c->nccl->ncclGroupStart();
  if (r != ncclSuccess) return issued(c, what, r, deadline);
  ncclResult_t first = body();
  ncclResult_t end = c->nccl->ncclGroupEnd();
  if (first != ncclSuccess && first != ncclInProgress) return issued(c, what, first, deadline);
  SHIM_TRY(issued(c, what, end, deadline));
  return wait_done(c, what, stream, deadline);
}

}  // namespace

int shim_comm_create(int32_t rank, int32_t size, int64_t timeout_ms, const char *hostname, shim_comm **out) {
  const char *what = "shim_comm_create";
  SHIM_REQUIRE(out, "out");
  SHIM_TRY(shim_check_comm_create(rank, size, timeout_ms));
  const shim_nccl_api *nccl;
  SHIM_TRY(shim_nccl_load(&nccl));
  shim_comm *c = (shim_comm *)calloc(1, sizeof *c);
  if (c == NULL) return shim_fail(SHIM_E_NOMEM, "%s: out of host memory", what);
  c->rank = rank;
  c->size = size;
  c->timeout_ms = timeout_ms;
  c->nccl = nccl;
  cudaError_t e = cudaEventCreateWithFlags(&c->done, cudaEventDisableTiming);
  if (e != cudaSuccess) {
    free(c);
    return shim_cuda_fail(e, "cudaEventCreateWithFlags", __FILE__, __LINE__);
  }
  if (rank == 0) {
    ncclResult_t r = nccl->ncclGetUniqueId(&c->id);
    if (r != ncclSuccess) {
      (void)cudaEventDestroy(c->done);
      free(c);
      return shim_nccl_fail(r, NULL, "ncclGetUniqueId", __FILE__, __LINE__);
    }
  }
  *out = c;
  return SHIM_OK;
}

/* Member 0's address is NCCL's unique id; the other members publish nothing. */
int shim_comm_address(shim_comm *c, uint8_t *buf, int64_t cap, int64_t *len) {
  SHIM_REQUIRE(c, "comm");
  return shim_comm_copy_address(&c->id, c->rank == 0 ? NCCL_UNIQUE_ID_BYTES : 0, buf, cap, len);
}

int shim_comm_connect(shim_comm *c, const uint8_t *addrs, const int64_t *lens) {
  const char *what = "shim_comm_connect";
  SHIM_REQUIRE(c, "comm");
  SHIM_TRY(shim_check_connect(c, addrs, lens, &c->id, c->rank == 0 ? NCCL_UNIQUE_ID_BYTES : 0, NCCL_UNIQUE_ID_BYTES, 0));
  memcpy(&c->id, addrs, NCCL_UNIQUE_ID_BYTES);
  if (c->barrier == NULL) SHIM_TRY(shim_cuda_storage_alloc(1, &c->barrier));

  shim_nccl_config config;
  memset(&config, 0, sizeof config);
  config.size = sizeof config;
  config.magic = SHIM_NCCL_CONFIG_MAGIC;
  config.version = SHIM_NCCL_CONFIG_VERSION;
  config.blocking = 0;
  config.cgaClusterSize = SHIM_NCCL_CONFIG_UNDEF_INT;
  config.minCTAs = SHIM_NCCL_CONFIG_UNDEF_INT;
  config.maxCTAs = SHIM_NCCL_CONFIG_UNDEF_INT;
  config.netName = NULL;
  int64_t deadline = deadline_of(c);
  ncclResult_t r = c->nccl->ncclCommInitRankConfig(&c->comm, c->size, c->id, c->rank, &config);
  SHIM_TRY(issued(c, what, r, deadline));
  if (c->comm == NULL) return broken(c, SHIM_E_COMM, "%s: ncclCommInitRankConfig made no communicator", what);
  c->connected = true;
  return SHIM_OK;
}

const char *shim_comm_transport(const shim_comm *c) {
  return c == NULL || !c->connected ? "" : "nccl";
}

/* A healthy comm is finalized (waiting at most the timeout) and destroyed; a broken one was
 * aborted already. The handle is freed either way. */
int shim_comm_destroy(shim_comm *c) {
  SHIM_REQUIRE(c, "comm");
  const char *what = "shim_comm_destroy";
  int status = SHIM_OK;
  if (c->comm != NULL && c->connected) status = issued(c, what, c->nccl->ncclCommFinalize(c->comm), deadline_of(c));
  if (c->comm != NULL) {
    ncclResult_t r = c->nccl->ncclCommDestroy(c->comm);
    if (r != ncclSuccess && r != ncclInProgress && status == SHIM_OK)
      status = shim_nccl_fail(r, NULL, "ncclCommDestroy", __FILE__, __LINE__);
  }
  cudaError_t e = cudaEventDestroy(c->done);
  if (e != cudaSuccess && status == SHIM_OK) status = shim_cuda_fail(e, "cudaEventDestroy", __FILE__, __LINE__);
  if (c->side != NULL) {
    int s = shim_stream_destroy(c->side);
    if (status == SHIM_OK) status = s;
  }
  if (c->barrier != NULL) {
    int s = shim_cuda_storage_release(c->barrier);
    if (status == SHIM_OK) status = s;
  }
  free(c);
  return status;
}

int shim_all_reduce(shim_comm *c, shim_tensor *out, const shim_tensor *in, int32_t op, shim_stream *s) {
  const char *what = "shim_all_reduce";
  SHIM_TRY(refused(c, what, SHIM_CALL_ALL_REDUCE, s, shim_check_all_reduce(c, out, in, op)));
  SHIM_TRY(agree_on(c, what, s, shim_comm_header_of(SHIM_CALL_ALL_REDUCE, in, op)));
  if (in->numel == 0) return SHIM_OK;
  shim_cuda_track(s, out);
  shim_cuda_track(s, in);
  cudaStream_t stream = shim_cuda_stream(s);
  return collective(c, what, stream, op == SHIM_OP_AVG ? out : NULL, [&] {
    return c->nccl->ncclAllReduce(shim_cuda_data(in), shim_cuda_data(out), (size_t)in->numel, nccl_type(in->dtype),
                                  nccl_op(in->dtype, op), c->comm, stream);
  });
}

namespace {

/* The start's host part: the checks and the agreement as shim_all_reduce's (on s), then the
 * all-reduce on the comm stream after an event recorded on s, and the work's event after it. */
int start_all_reduce(shim_comm *c, shim_tensor *out, const shim_tensor *in, int32_t op, shim_stream *s, shim_work *w) {
  const char *what = "shim_all_reduce";
  SHIM_TRY(refused(c, what, SHIM_CALL_ALL_REDUCE, s, shim_check_all_reduce(c, out, in, op)));
  SHIM_TRY(agree_on(c, what, s, shim_comm_header_of(SHIM_CALL_ALL_REDUCE, in, op)));
  w->deadline = deadline_of(c);
  if (in->numel == 0) return SHIM_OK;
  if (c->side == NULL) SHIM_TRY(shim_stream_create(&c->side));
  CUDA_CHECK(cudaEventCreateWithFlags(&w->done, cudaEventDisableTiming));
  w->has_event = 1;
  cudaStream_t side = shim_cuda_stream(c->side);
  CUDA_CHECK(cudaEventRecord(w->done, shim_cuda_stream(s)));
  CUDA_CHECK(cudaStreamWaitEvent(side, w->done, 0));
  shim_cuda_track(c->side, out);
  shim_cuda_track(c->side, in);
  SHIM_TRY(issued(c, what, c->nccl->ncclAllReduce(shim_cuda_data(in), shim_cuda_data(out), (size_t)in->numel, nccl_type(in->dtype),
                                                  nccl_op(in->dtype, op), c->comm, side), w->deadline));
  if (op == SHIM_OP_AVG) SHIM_TRY(divide(out, c->size, side));
  CUDA_CHECK(cudaEventRecord(w->done, side));
  return SHIM_OK;
}

/* Marks w finished with status (and the last error's text when it failed). */
int64_t wall_us() {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

void finish(shim_work *w, int status) {
  w->finished = 1;
  w->ended_us = wall_us();
  w->status = status;
  if (status != SHIM_OK) snprintf(w->message, sizeof w->message, "%s", shim_last_error());
}

/* Polls w's event and its comm's errors for up to budget_us (negative: until done), as
 * wait_done does for a collective. */
void poll_work(shim_work *w, int64_t budget_us) {
  shim_comm *c = w->comm;
  const int64_t until = budget_us < 0 ? INT64_MAX : now_ns() + budget_us * 1000;
  for (int polls = 0; !w->finished; polls++) {
    cudaError_t e = cudaEventQuery(w->done);
    if (e == cudaSuccess) return finish(w, SHIM_OK);
    if (e != cudaErrorNotReady) {
      (void)cudaGetLastError();
      return finish(w, broken(c, SHIM_E_BACKEND, "shim_all_reduce: waiting for NCCL's work: %s (CUDA error %d)", cudaGetErrorString(e), (int)e));
    }
    ncclResult_t state = ncclSuccess;
    ncclResult_t r = c->comm == NULL ? ncclSuccess : c->nccl->ncclCommGetAsyncError(c->comm, &state);
    if (c->comm == NULL || r != ncclSuccess || (state != ncclSuccess && state != ncclInProgress))
      return finish(w, broken(c, SHIM_E_COMM, "shim_all_reduce: NCCL failed: %s",
                              c->comm == NULL ? c->failure : c->nccl->ncclGetErrorString(r != ncclSuccess ? r : state)));
    if (now_ns() > w->deadline)
      return finish(w, broken(c, SHIM_E_TIMEOUT, "shim_all_reduce: did not complete within %lld ms (a member missing or stuck?)",
                              (long long)c->timeout_ms));
    if (now_ns() > until) return;
    pause_after(polls);
  }
}

}  // namespace

int shim_all_reduce_start(shim_comm *c, shim_tensor *out, const shim_tensor *in, int32_t op, shim_stream *s,
                          shim_work **work) {
  SHIM_REQUIRE(work, "work");
  shim_work *w = (shim_work *)calloc(1, sizeof *w);
  if (w == NULL) return shim_fail(SHIM_E_NOMEM, "shim_all_reduce_start: out of host memory");
  w->comm = c;
  w->began_us = wall_us();
  const int status = start_all_reduce(c, out, in, op, s, w);
  if (status != SHIM_OK || !w->has_event) finish(w, status);
  *work = w;
  return SHIM_OK;
}

int shim_work_wait(shim_work *w, int64_t timeout_us, int32_t *done) {
  SHIM_REQUIRE(w, "work");
  SHIM_REQUIRE(done, "done");
  if (!w->finished) poll_work(w, timeout_us);
  *done = w->finished;
  if (!w->finished || w->status == SHIM_OK) return SHIM_OK;
  return shim_fail(w->status, "%s", w->message);
}

int shim_work_times(const shim_work *w, int64_t *began_us, int64_t *ended_us) {
  SHIM_REQUIRE(w, "work");
  SHIM_REQUIRE(began_us, "began_us");
  SHIM_REQUIRE(ended_us, "ended_us");
  *began_us = w->began_us;
  *ended_us = w->finished ? w->ended_us : 0;
  return SHIM_OK;
}

int shim_work_destroy(shim_work *w) {
  SHIM_REQUIRE(w, "work");
  if (!w->finished) poll_work(w, -1);
  if (w->has_event) (void)cudaEventDestroy(w->done);
  free(w);
  return SHIM_OK;
}

int shim_all_gather(shim_comm *c, shim_tensor *out, const shim_tensor *in, shim_stream *s) {
  const char *what = "shim_all_gather";
  SHIM_TRY(refused(c, what, SHIM_CALL_ALL_GATHER, s, shim_check_all_gather(c, out, in)));
  SHIM_TRY(agree_on(c, what, s, shim_comm_header_of(SHIM_CALL_ALL_GATHER, in, 0)));
  if (in->numel == 0) return SHIM_OK;
  shim_cuda_track(s, out);
  shim_cuda_track(s, in);
  cudaStream_t stream = shim_cuda_stream(s);
  return collective(c, what, stream, NULL, [&] {
    return c->nccl->ncclAllGather(shim_cuda_data(in), shim_cuda_data(out), (size_t)shim_cuda_nbytes(in), ncclUint8,
                                  c->comm, stream);
  });
}

int shim_reduce_scatter(shim_comm *c, shim_tensor *out, const shim_tensor *in, int32_t op, shim_stream *s) {
  const char *what = "shim_reduce_scatter";
  SHIM_TRY(refused(c, what, SHIM_CALL_REDUCE_SCATTER, s, shim_check_reduce_scatter(c, out, in, op)));
  SHIM_TRY(agree_on(c, what, s, shim_comm_header_of(SHIM_CALL_REDUCE_SCATTER, in, op)));
  if (in->numel == 0) return SHIM_OK;
  shim_cuda_track(s, out);
  shim_cuda_track(s, in);
  cudaStream_t stream = shim_cuda_stream(s);
  return collective(c, what, stream, op == SHIM_OP_AVG ? out : NULL, [&] {
    return c->nccl->ncclReduceScatter(shim_cuda_data(in), shim_cuda_data(out), (size_t)out->numel, nccl_type(in->dtype),
                                      nccl_op(in->dtype, op), c->comm, stream);
  });
}

/* A grouped send and receive per peer; this member's own chunk is a device copy. */
int shim_all_to_all(shim_comm *c, shim_tensor *out, const shim_tensor *in, shim_stream *s) {
  const char *what = "shim_all_to_all";
  SHIM_TRY(refused(c, what, SHIM_CALL_ALL_TO_ALL, s, shim_check_all_to_all(c, out, in)));
  SHIM_TRY(agree_on(c, what, s, shim_comm_header_of(SHIM_CALL_ALL_TO_ALL, in, 0)));
  if (in->numel == 0) return SHIM_OK;
  shim_cuda_track(s, out);
  shim_cuda_track(s, in);
  cudaStream_t stream = shim_cuda_stream(s);
  const size_t chunk = (size_t)(shim_cuda_nbytes(in) / c->size);
  const char *src = (const char *)shim_cuda_data(in);
  char *dst = (char *)shim_cuda_data(out);
  CUDA_CHECK(cudaMemcpyAsync(dst + (size_t)c->rank * chunk, src + (size_t)c->rank * chunk, chunk,
                             cudaMemcpyDeviceToDevice, stream));
  return grouped(c, what, stream, [&] {
    for (int32_t peer = 0; peer < c->size; peer++) {
      if (peer == c->rank) continue;
      ncclResult_t r = c->nccl->ncclSend(src + (size_t)peer * chunk, chunk, ncclUint8, peer, c->comm, stream);
      if (r != ncclSuccess && r != ncclInProgress) return r;
      r = c->nccl->ncclRecv(dst + (size_t)peer * chunk, chunk, ncclUint8, peer, c->comm, stream);
      if (r != ncclSuccess && r != ncclInProgress) return r;
    }
    return ncclSuccess;
  });
}

int shim_broadcast(shim_comm *c, shim_tensor *t, int32_t root, shim_stream *s) {
  const char *what = "shim_broadcast";
  SHIM_TRY(refused(c, what, SHIM_CALL_BROADCAST, s, shim_check_broadcast(c, t, root)));
  SHIM_TRY(agree_on(c, what, s, shim_comm_header_of(SHIM_CALL_BROADCAST, t, root)));
  if (t->numel == 0) return SHIM_OK;
  shim_cuda_track(s, t);
  cudaStream_t stream = shim_cuda_stream(s);
  return collective(c, what, stream, NULL, [&] {
    return c->nccl->ncclBroadcast(shim_cuda_data(t), shim_cuda_data(t), (size_t)shim_cuda_nbytes(t), ncclUint8, root,
                                  c->comm, stream);
  });
}

/* A one-byte all-reduce, waited for. */
int shim_barrier(shim_comm *c, shim_stream *s) {
  SHIM_TRY(shim_check_comm_usable("shim_barrier", c));
  shim_cuda_track_storage(s, c->barrier);
  cudaStream_t stream = shim_cuda_stream(s);
  void *byte = c->barrier->base.data;
  return collective(c, "shim_barrier", stream, NULL,
                    [&] { return c->nccl->ncclAllReduce(byte, byte, 1, ncclUint8, ncclMax, c->comm, stream); });
}

/* Two rounds: each side of every transfer sends its header to the other and receives theirs;
 * then the transfers whose sides agree move their data, and the others move nothing on either
 * side (both know both headers), failing the call. */
int shim_p2p(shim_comm *c, int32_t n, const int32_t *kinds, const int32_t *peers, shim_tensor *const *tensors,
             shim_stream *s) {
  const char *what = "shim_p2p";
  SHIM_TRY(shim_check_p2p(c, n, kinds, peers, tensors));
  if (n == 0) return SHIM_OK;
  for (int32_t i = 0; i < n; i++) shim_cuda_track(s, tensors[i]);
  cudaStream_t stream = shim_cuda_stream(s);
  const size_t H = sizeof(shim_comm_header);
  /* [0, n): this member's header for each transfer; [n, 2n): the other side's. */
  shim_comm_header *headers = (shim_comm_header *)malloc(2 * H * (size_t)n);
  if (headers == NULL) return shim_fail(SHIM_E_NOMEM, "%s: out of host memory", what);
  for (int32_t i = 0; i < n; i++) headers[i] = shim_comm_header_of(kinds[i] == SHIM_SEND ? SHIM_CALL_SEND : SHIM_CALL_RECV, tensors[i], 0);
  ShimScratch swapped;
  int status = swapped.alloc((int64_t)(2 * H * (size_t)n), s);
  char *dev = (char *)swapped.data();
  if (status == SHIM_OK) {
    cudaError_t e = cudaMemcpyAsync(dev, headers, H * (size_t)n, cudaMemcpyHostToDevice, stream);
    if (e != cudaSuccess) status = shim_cuda_fail(e, "cudaMemcpyAsync", __FILE__, __LINE__);
  }
  if (status == SHIM_OK)
    status = grouped(c, what, stream, [&] {
      for (int32_t i = 0; i < n; i++) {
        ncclResult_t r = c->nccl->ncclSend(dev + (size_t)i * H, H, ncclUint8, peers[i], c->comm, stream);
        if (r != ncclSuccess && r != ncclInProgress) return r;
        r = c->nccl->ncclRecv(dev + (size_t)(n + i) * H, H, ncclUint8, peers[i], c->comm, stream);
        if (r != ncclSuccess && r != ncclInProgress) return r;
      }
      return ncclSuccess;
    });
  if (status == SHIM_OK) {
    cudaError_t e = cudaMemcpyAsync(headers + n, dev + (size_t)n * H, H * (size_t)n, cudaMemcpyDeviceToHost, stream);
    if (e == cudaSuccess) e = cudaStreamSynchronize(stream);
    if (e != cudaSuccess) status = shim_cuda_fail(e, "cudaMemcpyAsync", __FILE__, __LINE__);
  }
  int32_t first_disagreement = -1;
  for (int32_t i = 0; status == SHIM_OK && i < n; i++)
    if (first_disagreement < 0 && !shim_comm_headers_agree(&headers[i], &headers[n + i])) first_disagreement = i;
  if (status == SHIM_OK)
    status = grouped(c, what, stream, [&] {
      for (int32_t i = 0; i < n; i++) {
        const shim_tensor *t = tensors[i];
        if (t->numel == 0 || !shim_comm_headers_agree(&headers[i], &headers[n + i])) continue; /* both sides skip it */
        ncclResult_t r = kinds[i] == SHIM_SEND
                             ? c->nccl->ncclSend(shim_cuda_data(t), (size_t)shim_cuda_nbytes(t), ncclUint8, peers[i], c->comm, stream)
                             : c->nccl->ncclRecv(shim_cuda_data(t), (size_t)shim_cuda_nbytes(t), ncclUint8, peers[i], c->comm, stream);
        if (r != ncclSuccess && r != ncclInProgress) return r;
      }
      return ncclSuccess;
    });
  if (status == SHIM_OK && first_disagreement >= 0) {
    const int32_t i = first_disagreement;
    status = shim_check_agreement(what, &headers[i], c->rank, &headers[n + i], peers[i]);
  }
  free(headers);
  return status;
}
