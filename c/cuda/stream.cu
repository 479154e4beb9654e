/* stream.cu: CUDA streams and events. Streams are created non-blocking, so the NULL stream
 * (the legacy default stream) neither waits for them nor makes them wait: every ordering
 * between two streams, the default one included, comes from shim_stream_wait_event
 * (cudaStreamWaitEvent, a device-side wait; the host never blocks for it). */
#include <stdlib.h>

#include "cuda_shim.h"

int shim_cuda_stream_release(shim_stream *s) {
  if (__atomic_sub_fetch(&s->refs, 1, __ATOMIC_ACQ_REL) != 0) return SHIM_OK;
  cudaStream_t stream = s->stream;
  free(s);
  CUDA_CHECK(cudaStreamDestroy(stream));
  return SHIM_OK;
}

int shim_stream_create(shim_stream **out) {
  SHIM_REQUIRE(out, "out");
  shim_stream *s = (shim_stream *)calloc(1, sizeof *s);
  if (s == NULL) return shim_fail(SHIM_E_NOMEM, "shim_stream_create: out of host memory");
  cudaError_t e = cudaStreamCreateWithFlags(&s->stream, cudaStreamNonBlocking);
  if (e != cudaSuccess) {
    free(s);
    return shim_cuda_fail(e, "cudaStreamCreateWithFlags", __FILE__, __LINE__);
  }
  s->refs = 1;
  *out = s;
  return SHIM_OK;
}

/* The caller's handle goes now; the CUDA stream once no tensor that used it is left. */
int shim_stream_destroy(shim_stream *s) {
  SHIM_REQUIRE(s, "s (the default stream cannot be destroyed)");
  return shim_cuda_stream_release(s);
}

int shim_stream_synchronize(shim_stream *s) {
  CUDA_CHECK(cudaStreamSynchronize(shim_cuda_stream(s)));
  return SHIM_OK;
}

int shim_event_create(shim_event **out) {
  SHIM_REQUIRE(out, "out");
  shim_event *e = (shim_event *)calloc(1, sizeof *e);
  if (e == NULL) return shim_fail(SHIM_E_NOMEM, "shim_event_create: out of host memory");
  cudaError_t err = cudaEventCreateWithFlags(&e->event, cudaEventDisableTiming);
  if (err != cudaSuccess) {
    free(e);
    return shim_cuda_fail(err, "cudaEventCreateWithFlags", __FILE__, __LINE__);
  }
  *out = e;
  return SHIM_OK;
}

int shim_event_destroy(shim_event *e) {
  SHIM_REQUIRE(e, "e");
  cudaEvent_t event = e->event;
  free(e);
  CUDA_CHECK(cudaEventDestroy(event));
  return SHIM_OK;
}

int shim_event_record(shim_event *e, shim_stream *s) {
  SHIM_REQUIRE(e, "e");
  CUDA_CHECK(cudaEventRecord(e->event, shim_cuda_stream(s)));
  return SHIM_OK;
}

int shim_stream_wait_event(shim_stream *s, shim_event *e) {
  SHIM_REQUIRE(e, "e");
  CUDA_CHECK(cudaStreamWaitEvent(shim_cuda_stream(s), e->event, 0));
  return SHIM_OK;
}

/* An event never recorded counts as done, as in CUDA. */
int shim_event_query(shim_event *e, int32_t *done) {
  SHIM_REQUIRE(e, "e");
  SHIM_REQUIRE(done, "done");
  cudaError_t err = cudaEventQuery(e->event);
  if (err == cudaErrorNotReady) {
    *done = 0;
    return SHIM_OK;
  }
  CUDA_CHECK(err);
  *done = 1;
  return SHIM_OK;
}

int shim_event_synchronize(shim_event *e) {
  SHIM_REQUIRE(e, "e");
  CUDA_CHECK(cudaEventSynchronize(e->event));
  return SHIM_OK;
}

/* One thread reading the global nanosecond timer until the time has passed; it sleeps between
 * reads so the spin costs the SM nearly nothing. */
__global__ void spin_kernel(uint64_t nanoseconds) {
  uint64_t start, now;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
  do {
    __nanosleep(1000);
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
  } while (now - start < nanoseconds);
}

int shim_debug_stream_spin(shim_stream *s, int64_t microseconds) {
  if (microseconds < 0)
    return shim_fail(SHIM_E_INVALID, "shim_debug_stream_spin: negative duration %lld", (long long)microseconds);
  if (microseconds == 0) return SHIM_OK;
  const int64_t max_us = INT64_MAX / 1000;
  uint64_t ns = (uint64_t)(microseconds < max_us ? microseconds : max_us) * 1000u;
  spin_kernel<<<1, 1, 0, shim_cuda_stream(s)>>>(ns);
  CUDA_CHECK_LAUNCH("spin_kernel");
  return SHIM_OK;
}
