/* cuda_shim.h: what the cuda backend's files share (not part of the ABI): the stream, event
 * and storage structs, the allocator's entry points and launch sizing. The cuda counterpart of
 * c/cpu/cpu.h. */
#ifndef MONARCH_SHIM_CUDA_SHIM_H
#define MONARCH_SHIM_CUDA_SHIM_H

#include <stddef.h>

#include <cuda_runtime.h>

#include "../common/internal.h"
#include "check.h"

/* A CUDA stream with a count of its holders: the caller's handle, plus each tensor storage
 * that has had work on it (freeing that storage records an event on the stream, so the stream
 * lives until then). Created non-blocking: the legacy default stream does not order it. */
struct shim_stream {
  cudaStream_t stream;
  int32_t refs;
};

struct shim_event {
  cudaEvent_t event;
};

/* NULL is the legacy default stream (handle 0). */
static inline cudaStream_t shim_cuda_stream(const shim_stream *s) { return s ? s->stream : (cudaStream_t)0; }

/* Drops one holder of s, destroying the CUDA stream with the last (work already queued on it
 * still completes). */
int shim_cuda_stream_release(shim_stream *s);

enum { SHIM_CUDA_TRACKED_STREAMS = 4 };

/* One cudaMalloc'ed block, in use by a storage or waiting in the allocator's cache (alloc.cu). */
typedef struct shim_cuda_block shim_cuda_block;

/* Device memory of a tensor and its views. Besides internal.h's shared part it remembers the
 * streams that have used it, so a freed block is handed out again only once the work queued
 * on them before the free has finished (PyTorch's recordStream, done for every op). */
typedef struct shim_cuda_storage {
  shim_storage base;      /* first: a tensor's storage pointer is this struct */
  shim_cuda_block *block; /* NULL for an empty tensor */
  int32_t on_default;     /* the default stream has used it */
  int32_t overflow;       /* more streams used it than `streams` holds: freeing it syncs the device */
  int32_t nstreams;
  shim_stream *streams[SHIM_CUDA_TRACKED_STREAMS]; /* each holds one ref on its stream */
} shim_cuda_storage;

/* New device memory of nbytes, on the current device, from the allocator (alloc.cu). refs is
 * 0: the caller counts its holders. */
int shim_cuda_storage_alloc(int64_t nbytes, shim_cuda_storage **out);

/* Gives the memory back once its last holder is gone, and frees st. */
int shim_cuda_storage_release(shim_cuda_storage *st);

/* Notes that work on s uses the memory. Every op calls it for every tensor it touches before
 * issuing the work; a storage used from one thread at a time needs no lock here. */
void shim_cuda_track_storage(shim_stream *s, shim_cuda_storage *st);

static inline void shim_cuda_track(shim_stream *s, const shim_tensor *t) {
  if (t != NULL) shim_cuda_track_storage(s, (shim_cuda_storage *)t->storage);
}

static inline void *shim_cuda_data(const shim_tensor *t) { return shim_tensor_data(t); }
static inline int64_t shim_cuda_nbytes(const shim_tensor *t) { return t->numel * shim_dtype_size(t->dtype); }

/* Scratch device memory for one op's temporaries, released at scope exit. It is tracked on
 * the op's stream like a tensor, so the block is not reused before the op's work is done. */
struct ShimScratch {
  shim_cuda_storage *st = nullptr;
  ShimScratch() = default;
  ShimScratch(const ShimScratch &) = delete;
  ShimScratch &operator=(const ShimScratch &) = delete;
  ~ShimScratch() {
    if (st != nullptr) shim_cuda_storage_release(st);
  }
  int alloc(int64_t nbytes, shim_stream *s);
  void *data() const { return st ? st->base.data : nullptr; }
};

/* A strided operand met by a flat kernel: `t` is the operand itself when it is contiguous, else a
 * contiguous copy in scratch device memory (stage with gather: its elements, by the strided
 * copy kernel; without: room for an out, which write_back then copies into the strided target).
 * The staging is stream ordered, as the op's own work is. */
struct ShimDense {
  ShimScratch scratch;
  shim_tensor header{};
  const shim_tensor *t = nullptr;
  int stage(const shim_tensor *src, bool gather, shim_stream *s);
  int write_back(shim_tensor *target, shim_stream *s);
};

/* Runs op(out', in') with every strided one of out and the inputs (NULL entries allowed) staged
 * contiguous, then writes out' back into a strided out: how the cuda elementwise, reduction,
 * softmax and matmul kernels take strided tensors. */
template <typename F>
int shim_cuda_densely(shim_tensor *out, int32_t count, const shim_tensor *const *in, shim_stream *s, F &&op) {
  ShimDense dense_out, dense_in[3];
  const shim_tensor *staged[3] = {nullptr, nullptr, nullptr};
  for (int32_t i = 0; i < count; i++) {
    SHIM_TRY(dense_in[i].stage(in[i], true, s));
    staged[i] = dense_in[i].t;
  }
  SHIM_TRY(dense_out.stage(out, false, s));
  SHIM_TRY(op(const_cast<shim_tensor *>(dense_out.t), staged));
  return dense_out.write_back(out, s);
}

/* Whether t and each of the count tensors are contiguous (NULL entries pass). */
static inline bool shim_cuda_all_contiguous(const shim_tensor *t, int32_t count, const shim_tensor *const *in) {
  if (t != nullptr && !t->contiguous) return false;
  for (int32_t i = 0; i < count; i++)
    if (in[i] != nullptr && !in[i]->contiguous) return false;
  return true;
}

/* Launch sizing for grid-stride kernels: enough blocks to fill an H100/H200 several times
 * over, never more than the work needs. */
enum { SHIM_CUDA_THREADS = 256, SHIM_CUDA_MAX_BLOCKS = 8192 };

static inline unsigned shim_cuda_blocks(int64_t items) {
  int64_t blocks = (items + SHIM_CUDA_THREADS - 1) / SHIM_CUDA_THREADS;
  if (blocks < 1) return 1;
  return blocks > SHIM_CUDA_MAX_BLOCKS ? SHIM_CUDA_MAX_BLOCKS : (unsigned)blocks;
}

/* fn fails with SHIM_E_INVALID when one of the n indices at ix (device memory) lies outside
 * 0..r-1 (the message names dim); waits for the stream to read the flag back (strided.cu). */
int shim_cuda_check_indices(const char *fn, const int64_t *ix, int64_t n, int64_t r, int32_t dim, shim_stream *s);

#endif
