/* reduce.cu: shim_reduce, shim_argreduce, shim_cumsum and shim_cumulative on the device (the last three a thread
 * per output line, stepping down the dim, as simple as the cpu's); shim_reduce with the cpu's semantics (c/cpu/reduce.c): a is read
 * as [outer, r, inner] with r the reduced dim (SHIM_ALL_DIMS: [1, numel, 1]); integer and bool
 * inputs accumulate in int64 (sum and prod wrap), floating inputs in double; the result is
 * converted to out's dtype by elements.h's rules, so the sum of a bool tensor into i64 counts
 * its true elements; mean divides in double. Over an empty dim sum is 0, prod 1, mean NaN,
 * any 0, all 1 and the norms 0; max and min fail. max, min and the inf-norm propagate NaN. Floating sums add in another order than the
 * cpu's, so they can differ from it in the last bits.
 *
 * inner == 1 (a reduced last dim, or every element): a warp per row, lanes striding along it.
 * inner > 1: a thread per output, stepping down the reduced dim (neighbouring threads read
 * neighbouring elements). When there are too few rows or outputs to fill the device, the
 * reduced dim is split, each piece writes a partial to scratch, and a second kernel combines
 * the partials, a warp per output. */
#include <type_traits>

#include "elements.h"

using namespace shim;

namespace {

/* Accumulation in Acc (double or int64_t) for op Op: its identity and its step. */
template <typename Acc, int Op>
struct Fold {
  static __device__ __forceinline__ Acc identity() {
    if constexpr (Op == SHIM_PROD || Op == SHIM_ALL) return (Acc)1;
    else if constexpr (Op == SHIM_MAX) {
      if constexpr (std::is_same_v<Acc, double>) return -INFINITY;
      else return INT64_MIN;
    } else if constexpr (Op == SHIM_MIN) {
      if constexpr (std::is_same_v<Acc, double>) return INFINITY;
      else return INT64_MAX;
    } else {
      return (Acc)0;
    }
  }

  /* v (op) x; a NaN, once in, stays. */
  static __device__ __forceinline__ Acc apply(Acc v, Acc x) {
    if constexpr (Op == SHIM_ANY) return (Acc)((v != (Acc)0) | (x != (Acc)0));
    else if constexpr (Op == SHIM_ALL) return (Acc)((v != (Acc)0) & (x != (Acc)0));
    else if constexpr (Op == SHIM_NORM1 || Op == SHIM_NORM2 || Op == SHIM_NORM_INF) return norm_step(v, x); /* floating only (checked) */
    else if constexpr (std::is_same_v<Acc, double>) {
      if constexpr (Op == SHIM_PROD) return v * x;
      else if constexpr (Op == SHIM_MAX) return (x > v || x != x) ? x : v;
      else if constexpr (Op == SHIM_MIN) return (x < v || x != x) ? x : v;
      else if constexpr (Op == SHIM_SUM || Op == SHIM_MEAN) return v + x;
      else static_assert(no_case<Op>, "a reduction without its branch in Fold::apply");
    } else {
      if constexpr (Op == SHIM_PROD) return (int64_t)((uint64_t)v * (uint64_t)x);
      else if constexpr (Op == SHIM_MAX) return x > v ? x : v;
      else if constexpr (Op == SHIM_MIN) return x < v ? x : v;
      else if constexpr (Op == SHIM_SUM || Op == SHIM_MEAN) return (int64_t)((uint64_t)v + (uint64_t)x);
      else static_assert(no_case<Op>, "a reduction without its branch in Fold::apply");
    }
  }

  /* The norms fold |x| (or its square) into v; partials combine as sums or maxima. */
  static __device__ __forceinline__ Acc norm_step(Acc v, Acc x) {
    const Acc ax = x < (Acc)0 ? -x : x;
    if constexpr (Op == SHIM_NORM1) return v + ax;
    else if constexpr (Op == SHIM_NORM2) return v + x * x;
    else if constexpr (Op == SHIM_NORM_INF) return (ax > v || ax != ax) ? ax : v;
    else static_assert(no_case<Op>, "a norm without its branch in Fold::norm_step");
  }

  /* Two partial accumulators as one: the norms' partials add (or take the larger), the
   * other folds combine by their own step. */
  static __device__ __forceinline__ Acc combine(Acc v, Acc w) {
    if constexpr (Op == SHIM_NORM1 || Op == SHIM_NORM2) return v + w;
    else if constexpr (Op == SHIM_NORM_INF) return (w > v || w != w) ? w : v;
    else return apply(v, w);
  }

  /* The fold of the 32 lanes' values, in lane 0. */
  static __device__ __forceinline__ Acc warp(Acc v) {
    for (int offset = 16; offset > 0; offset >>= 1) {
      Acc other;
      if constexpr (std::is_same_v<Acc, double>) other = __shfl_down_sync(0xffffffffu, v, offset);
      else other = (int64_t)__shfl_down_sync(0xffffffffu, (long long)v, offset);
      v = combine(v, other);
    }
    return v;
  }

  /* out[i] = the accumulator over r elements, as out's dtype. */
  static __device__ __forceinline__ void finish(void *out, int32_t out_dtype, int64_t i, Acc v, int64_t r) {
    if constexpr (std::is_same_v<Acc, double>) {
      if constexpr (Op == SHIM_NORM2) v = sqrt(v);
      store_f64_as(out_dtype, out, i, Op == SHIM_MEAN ? v / (double)r : v); /* r == 0: 0 / 0 is NaN */
    } else if constexpr (Op == SHIM_MEAN) {
      store_f64_as(out_dtype, out, i, (double)v / (double)r);
    } else {
      store_i64_as(out_dtype, out, i, v);
    }
  }
};

/* Where a kernel's results go: partial[output * splits + split] when partial is set, else the
 * finished value into out. */
template <typename Acc>
struct Sink {
  Acc *partial;
  void *out;
  int32_t out_dtype;
  int64_t splits;
  int64_t r;
};

template <typename Acc, int Op>
__device__ __forceinline__ void emit(const Sink<Acc> &sink, int64_t output, int64_t split, Acc v) {
  if (sink.partial != nullptr) sink.partial[output * sink.splits + split] = v;
  else Fold<Acc, Op>::finish(sink.out, sink.out_dtype, output, v, sink.r);
}

/* inner == 1: warp w reduces piece (w % splits) of row (w / splits), chunk elements long. */
template <typename D, int Op>
__global__ void reduce_rows(const typename D::T *in, int64_t rows, int64_t r, int64_t chunk, Sink<WideOf<D>> sink) {
  using Acc = WideOf<D>;
  using F = Fold<Acc, Op>;
  const int lane = threadIdx.x & 31;
  const int64_t warps = (int64_t)gridDim.x * blockDim.x / 32;
  for (int64_t w = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) / 32; w < rows * sink.splits; w += warps) {
    const int64_t row = w / sink.splits, split = w % sink.splits;
    const int64_t begin = split * chunk, end = begin + chunk < r ? begin + chunk : r;
    const typename D::T *x = in + row * r;
    Acc v = F::identity();
    for (int64_t j = begin + lane; j < end; j += 32) v = F::apply(v, widen<D>(x[j]));
    v = F::warp(v);
    if (lane == 0) emit<Acc, Op>(sink, row, split, v);
  }
}

/* inner > 1: thread t reduces piece (t / outputs) of output (t % outputs) = (o, k), stepping
 * down the reduced dim with stride inner. */
template <typename D, int Op>
__global__ void reduce_cols(const typename D::T *in, int64_t outputs, int64_t inner, int64_t r, int64_t chunk,
                            Sink<WideOf<D>> sink) {
  using Acc = WideOf<D>;
  using F = Fold<Acc, Op>;
  const int64_t stride = (int64_t)gridDim.x * blockDim.x;
  for (int64_t t = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; t < outputs * sink.splits; t += stride) {
    const int64_t split = t / outputs, output = t % outputs;
    const int64_t o = output / inner, k = output % inner;
    const int64_t begin = split * chunk, end = begin + chunk < r ? begin + chunk : r;
    Acc v = F::identity();
    for (int64_t j = begin; j < end; j++) v = F::apply(v, widen<D>(in[(o * r + j) * inner + k]));
    emit<Acc, Op>(sink, output, split, v);
  }
}

/* Combines each output's splits partials (a warp per output) and finishes it. */
template <typename Acc, int Op>
__global__ void reduce_partials(const Acc *partial, int64_t outputs, int64_t splits, void *out, int32_t out_dtype,
                                int64_t r) {
  using F = Fold<Acc, Op>;
  const int lane = threadIdx.x & 31;
  const int64_t warps = (int64_t)gridDim.x * blockDim.x / 32;
  for (int64_t w = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) / 32; w < outputs; w += warps) {
    Acc v = F::identity();
    for (int64_t j = lane; j < splits; j += 32) v = F::combine(v, partial[w * splits + j]);
    v = F::warp(v);
    if (lane == 0) F::finish(out, out_dtype, w, v, r);
  }
}

/* Enough warps (rows) or threads (columns) to fill an H100/H200 several times; a piece of a
 * split dim is at least this long, so splitting pays for its second pass. */
enum : int64_t { TARGET_WARPS = 8192, TARGET_THREADS = 262144, MIN_ROW_PIECE = 1024, MIN_COL_PIECE = 64 };

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

template <typename D, int Op>
int launch_reduce(const typename D::T *in, void *out, int32_t out_dtype, const shim_reduce_dims &dims, shim_stream *s) {
  using Acc = WideOf<D>;
  const int64_t outer = dims.outer, r = dims.r, inner = dims.inner;
  cudaStream_t stream = shim_cuda_stream(s);
  const int64_t outputs = outer * inner;
  int64_t splits = 1;
  if (inner == 1 && outputs < TARGET_WARPS) splits = ceil_div(TARGET_WARPS, outputs);
  if (inner > 1 && outputs < TARGET_THREADS) splits = ceil_div(TARGET_THREADS, outputs);
  const int64_t most = ceil_div(r, inner == 1 ? MIN_ROW_PIECE : MIN_COL_PIECE);
  if (splits > most) splits = most;
  if (splits < 1) splits = 1;
  const int64_t chunk = ceil_div(r, splits);
  if (r > 0) splits = ceil_div(r, chunk); /* no empty pieces */

  ShimScratch scratch;
  Sink<Acc> sink{nullptr, out, out_dtype, splits, r};
  if (splits > 1) {
    SHIM_TRY(scratch.alloc(outputs * splits * (int64_t)sizeof(Acc), s));
    sink.partial = (Acc *)scratch.data();
  }
  if (inner == 1) {
    reduce_rows<D, Op><<<shim_cuda_blocks(outputs * splits * 32), SHIM_CUDA_THREADS, 0, stream>>>(in, outputs, r, chunk,
                                                                                                 sink);
    CUDA_CHECK_LAUNCH("reduce_rows");
  } else {
    reduce_cols<D, Op><<<shim_cuda_blocks(outputs * splits), SHIM_CUDA_THREADS, 0, stream>>>(in, outputs, inner, r,
                                                                                            chunk, sink);
    CUDA_CHECK_LAUNCH("reduce_cols");
  }
  if (splits > 1) {
    reduce_partials<Acc, Op><<<shim_cuda_blocks(outputs * 32), SHIM_CUDA_THREADS, 0, stream>>>(
        sink.partial, outputs, splits, out, out_dtype, r);
    CUDA_CHECK_LAUNCH("reduce_partials");
  }
  return SHIM_OK;
}

}  // namespace

int shim_reduce(int32_t op, shim_tensor *out, const shim_tensor *a, int32_t dim, shim_stream *s) {
  shim_reduce_dims dims;
  SHIM_TRY(shim_check_reduce(op, out, a, dim, &dims));
  if (out->numel == 0) return SHIM_OK;
  shim_cuda_track(s, out);
  shim_cuda_track(s, a);
  return dispatch(a->dtype, [&](auto d) -> int {
    using D = decltype(d);
    const typename D::T *in = (const typename D::T *)shim_cuda_data(a);
    void *o = shim_cuda_data(out);
    return with_reduce_op("shim_reduce", op, a->dtype, [&](auto code) -> int {
      return launch_reduce<D, decltype(code)::value>(in, o, out->dtype, dims, s);
    });
  });
}

namespace {

/* Whether x replaces best in an argmax (Max) or argmin: strictly beyond it, or the first NaN. */
template <bool Max, typename Acc>
__device__ __forceinline__ bool beats(Acc x, Acc best) {
  if constexpr (std::is_same_v<Acc, double>) {
    if (best != best) return false;
    if (x != x) return true;
  }
  return Max ? x > best : x < best;
}

/* A thread per output (o, k), stepping down r: the first index of the extreme. */
template <typename D, bool Max>
__global__ void argreduce_kernel(const typename D::T *in, int64_t *idx, int64_t outputs, int64_t inner, int64_t r) {
  using Acc = WideOf<D>;
  const int64_t stride = (int64_t)gridDim.x * blockDim.x;
  for (int64_t t = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; t < outputs; t += stride) {
    const int64_t o = t / inner, k = t % inner;
    Acc best = widen<D>(in[o * r * inner + k]);
    int64_t at = 0;
    for (int64_t j = 1; j < r; j++) {
      Acc x = widen<D>(in[(o * r + j) * inner + k]);
      if (beats<Max>(x, best)) best = x, at = j;
    }
    idx[t] = at;
  }
}

/* A thread per (o, k), a running sum down r stored at each step. */
template <typename D>
__global__ void cumsum_kernel(const typename D::T *in, void *out, int32_t out_dtype, int64_t lines, int64_t inner, int64_t r) {
  using Acc = WideOf<D>;
  const int64_t stride = (int64_t)gridDim.x * blockDim.x;
  for (int64_t t = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; t < lines; t += stride) {
    const int64_t o = t / inner, k = t % inner;
    Acc acc = 0;
    for (int64_t j = 0; j < r; j++) {
      const int64_t at = (o * r + j) * inner + k;
      if constexpr (std::is_same_v<Acc, double>) {
        acc += D::to_f64(in[at]);
        store_f64_as(out_dtype, out, at, acc);
      } else {
        acc = (int64_t)((uint64_t)acc + (uint64_t)D::to_i64(in[at]));
        store_i64_as(out_dtype, out, at, acc);
      }
    }
  }
}

}  // namespace

int shim_argreduce(int32_t op, shim_tensor *indices, const shim_tensor *a, int32_t dim, shim_stream *s) {
  shim_reduce_dims dims;
  SHIM_TRY(shim_check_argreduce(op, indices, a, dim, &dims));
  const int64_t outputs = indices->numel;
  if (outputs == 0) return SHIM_OK;
  shim_cuda_track(s, indices);
  shim_cuda_track(s, a);
  cudaStream_t stream = shim_cuda_stream(s);
  return dispatch(a->dtype, [&](auto d) -> int {
    using D = decltype(d);
    const typename D::T *in = (const typename D::T *)shim_cuda_data(a);
    int64_t *idx = (int64_t *)shim_cuda_data(indices);
    if (op == SHIM_MAX) argreduce_kernel<D, true><<<shim_cuda_blocks(outputs), SHIM_CUDA_THREADS, 0, stream>>>(in, idx, outputs, dims.inner, dims.r);
    else argreduce_kernel<D, false><<<shim_cuda_blocks(outputs), SHIM_CUDA_THREADS, 0, stream>>>(in, idx, outputs, dims.inner, dims.r);
    CUDA_CHECK_LAUNCH("argreduce_kernel");
    return SHIM_OK;
  });
}

int shim_cumsum(shim_tensor *out, const shim_tensor *a, int32_t dim, shim_stream *s) {
  shim_reduce_dims dims;
  SHIM_TRY(shim_check_cumsum(out, a, dim, &dims));
  if (a->numel == 0) return SHIM_OK;
  shim_cuda_track(s, out);
  shim_cuda_track(s, a);
  const int64_t lines = dims.outer * dims.inner;
  return dispatch(a->dtype, [&](auto d) -> int {
    using D = decltype(d);
    cumsum_kernel<D><<<shim_cuda_blocks(lines), SHIM_CUDA_THREADS, 0, shim_cuda_stream(s)>>>(
        (const typename D::T *)shim_cuda_data(a), shim_cuda_data(out), out->dtype, lines, dims.inner, dims.r);
    CUDA_CHECK_LAUNCH("cumsum_kernel");
    return SHIM_OK;
  });
}

namespace {

/* torch's cummax and cummin step (c/cpu/reduce.c's takes_*): a tie takes the later element; a NaN, once taken, stays. */
template <typename Acc>
__device__ __forceinline__ bool takes(bool max, Acc x, Acc best) {
  if constexpr (std::is_same_v<Acc, double>) {
    if (x != x) return true;
  }
  return max ? x >= best : x <= best;
}

/* A thread per (o, k), a running product or extreme down r stored at each step (as cumsum_kernel). */
template <typename D>
__global__ void cumulative_kernel(int32_t op, const typename D::T *in, void *out, int32_t out_dtype, int64_t *idx, int64_t lines,
                                  int64_t inner, int64_t r) {
  using Acc = WideOf<D>;
  const int64_t stride = (int64_t)gridDim.x * blockDim.x;
  for (int64_t t = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; t < lines; t += stride) {
    const int64_t o = t / inner, k = t % inner;
    Acc acc = 0;
    int64_t best = 0;
    for (int64_t j = 0; j < r; j++) {
      const int64_t at = (o * r + j) * inner + k;
      const Acc x = widen<D>(in[at]);
      if (op == SHIM_PROD) {
        if constexpr (std::is_same_v<Acc, double>) acc = j == 0 ? x : acc * x;
        else acc = j == 0 ? x : (int64_t)((uint64_t)acc * (uint64_t)x);
      } else {
        if (j == 0 || takes<Acc>(op == SHIM_MAX, x, acc)) acc = x, best = j;
        idx[at] = best;
      }
      if constexpr (std::is_same_v<Acc, double>) store_f64_as(out_dtype, out, at, acc);
      else store_i64_as(out_dtype, out, at, acc);
    }
  }
}

}  // namespace

int shim_cumulative(int32_t op, shim_tensor *out, shim_tensor *indices, const shim_tensor *a, int32_t dim, shim_stream *s) {
  shim_reduce_dims dims;
  SHIM_TRY(shim_check_cumulative(op, out, indices, a, dim, &dims));
  if (a->numel == 0) return SHIM_OK;
  shim_cuda_track(s, out);
  shim_cuda_track(s, indices);
  shim_cuda_track(s, a);
  const int64_t lines = dims.outer * dims.inner;
  return dispatch(a->dtype, [&](auto d) -> int {
    using D = decltype(d);
    cumulative_kernel<D><<<shim_cuda_blocks(lines), SHIM_CUDA_THREADS, 0, shim_cuda_stream(s)>>>(
        op, (const typename D::T *)shim_cuda_data(a), shim_cuda_data(out), out->dtype,
        indices ? (int64_t *)shim_cuda_data(indices) : nullptr, lines, dims.inner, dims.r);
    CUDA_CHECK_LAUNCH("cumulative_kernel");
    return SHIM_OK;
  });
}
