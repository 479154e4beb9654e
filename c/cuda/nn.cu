/* nn.cu: shim_softmax, shim_layer_norm and the fused losses on the device, by the cpu's rules (c/cpu/nn.c).
 * softmax: a read as [outer, r, inner]; one thread per row of r elements subtracts the row's
 * maximum, sums exp in the compute type (float; double for f64) and divides (or subtracts the
 * log of the sum from x - max, as the cpu does). layer_norm: one warp per row of m elements,
 * the sums in double. The losses: a thread per element; a sum or mean adds each block's partial
 * in double (up to LOSS_BLOCKS blocks), then one block adds the partials, so results are the
 * cpu's up to summation order. */
#include "elements.h"

using namespace shim;

namespace {

template <typename D>
__global__ void softmax_rows(typename D::T *out, const typename D::T *x, int64_t outer, int64_t r, int64_t inner, int log) {
  using V = typename D::V;
  const int64_t rows = outer * inner, stride = (int64_t)gridDim.x * blockDim.x;
  for (int64_t row = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; row < rows; row += stride) {
    const int64_t base = (row / inner) * r * inner + row % inner;
    V m = -INFINITY;
    for (int64_t j = 0; j < r; j++) {
      V v = D::load(x[base + j * inner]);
      if (v > m || v != v) m = v;
      if (m != m) break;
    }
    V sum = 0;
    for (int64_t j = 0; j < r; j++) sum += exp(D::load(x[base + j * inner]) - m);
    if (log) {
      const V log_sum = ::log(sum);
      for (int64_t j = 0; j < r; j++) out[base + j * inner] = D::store((D::load(x[base + j * inner]) - m) - log_sum);
    } else {
      for (int64_t j = 0; j < r; j++) out[base + j * inner] = D::store(exp(D::load(x[base + j * inner]) - m) / sum);
    }
  }
}

/* One warp per row: each lane sums a stride of the row, then the warp adds its lanes. */
__device__ __forceinline__ double warp_sum(double v) {
  for (int offset = 16; offset > 0; offset /= 2) v += __shfl_down_sync(0xffffffffu, v, offset);
  return __shfl_sync(0xffffffffu, v, 0);
}

template <typename D>
__global__ void layer_norm_rows(typename D::T *out, const typename D::T *x, const typename D::T *w, const typename D::T *b,
                                int64_t rows, int64_t m, double eps) {
  using V = typename D::V;
  const int lane = threadIdx.x % 32;
  const int64_t warps = (int64_t)gridDim.x * blockDim.x / 32;
  for (int64_t row = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) / 32; row < rows; row += warps) {
    const typename D::T *xs = x + row * m;
    double sum = 0, sq = 0;
    for (int64_t j = lane; j < m; j += 32) sum += (double)D::load(xs[j]);
    const double mean = warp_sum(sum) / (double)m;
    for (int64_t j = lane; j < m; j += 32) {
      const double d = (double)D::load(xs[j]) - mean;
      sq += d * d;
    }
    const V rstd = (V)(1.0 / sqrt(warp_sum(sq) / (double)m + eps)), vmean = (V)mean;
    for (int64_t j = lane; j < m; j += 32) {
      V y = (D::load(xs[j]) - vmean) * rstd;
      if (w != nullptr) y *= D::load(w[j]);
      if (b != nullptr) y += D::load(b[j]);
      out[row * m + j] = D::store(y);
    }
  }
}

/* ---- the fused losses ---------------------------------------------------------------- */

enum { LOSS_BLOCKS = 256 };

/* The block's sum of v in thread 0 (blockDim.x == SHIM_CUDA_THREADS; every thread calls it). */
__device__ double block_sum(double v) {
  __shared__ double warps[SHIM_CUDA_THREADS / 32];
  __syncthreads(); /* a previous call's reads of warps are done */
  v = warp_sum(v);
  if (threadIdx.x % 32 == 0) warps[threadIdx.x / 32] = v;
  __syncthreads();
  v = threadIdx.x < SHIM_CUDA_THREADS / 32 ? warps[threadIdx.x] : 0.0;
  return threadIdx.x < 32 ? warp_sum(v) : 0.0;
}

/* Sets *flag when a target is neither a class (0..c-1) nor ignore. */
__global__ void find_bad_target(const int64_t *t, int64_t n, int64_t c, int64_t ignore, int32_t *flag) {
  const int64_t stride = (int64_t)gridDim.x * blockDim.x;
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
    if (t[i] != ignore && (t[i] < 0 || t[i] >= c)) *flag = 1;
}

/* Each element's loss into out (SHIM_LOSS_NONE), or the block's sums of losses and of weights
 * into partial[2 * block], partial[2 * block + 1]. */
template <typename D>
__global__ void nll_elements(typename D::T *out, const typename D::T *x, const int64_t *t, const typename D::T *w, shim_nll_dims d,
                             int64_t ignore, int32_t reduction, double *partial) {
  const int64_t count = d.n * d.inner, stride = (int64_t)gridDim.x * blockDim.x;
  double losses = 0, weights = 0;
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < count; i += stride) {
    const int64_t c = t[i], row = i / d.inner, k = i % d.inner;
    double loss = 0, wt = 0;
    if (c != ignore) {
      wt = w != nullptr ? D::to_f64(w[c]) : 1.0;
      loss = -wt * D::to_f64(x[(row * d.c + c) * d.inner + k]);
    }
    if (reduction == SHIM_LOSS_NONE) out[i] = D::from_f64(loss);
    losses += loss, weights += wt;
  }
  if (reduction == SHIM_LOSS_NONE) return;
  losses = block_sum(losses);
  weights = block_sum(weights);
  if (threadIdx.x == 0) partial[2 * blockIdx.x] = losses, partial[2 * blockIdx.x + 1] = weights;
}

/* (a - b)^2 in the compute type into out (SHIM_LOSS_NONE), or the block's sum of them and its
 * element count into partial[2 * block], partial[2 * block + 1]. */
template <typename D>
__global__ void mse_elements(typename D::T *out, const typename D::T *a, const typename D::T *b, int64_t n, int32_t reduction,
                             double *partial) {
  using V = typename D::V;
  const int64_t stride = (int64_t)gridDim.x * blockDim.x;
  double sum = 0, count = 0;
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
    const V d = D::load(a[i]) - D::load(b[i]), sq = d * d;
    if (reduction == SHIM_LOSS_NONE) out[i] = D::store(sq);
    sum += (double)sq, count += 1;
  }
  if (reduction == SHIM_LOSS_NONE) return;
  sum = block_sum(sum);
  count = block_sum(count);
  if (threadIdx.x == 0) partial[2 * blockIdx.x] = sum, partial[2 * blockIdx.x + 1] = count;
}

/* One block: out = the partials' sum, or it over the partials' weights (SHIM_LOSS_MEAN). */
template <typename D>
__global__ void loss_finish(typename D::T *out, const double *partial, int64_t blocks, int32_t reduction) {
  double sum = 0, weights = 0;
  for (int64_t i = threadIdx.x; i < blocks; i += blockDim.x) sum += partial[2 * i], weights += partial[2 * i + 1];
  sum = block_sum(sum);
  weights = block_sum(weights);
  if (threadIdx.x == 0) *out = D::from_f64(reduction == SHIM_LOSS_MEAN ? sum / weights : sum);
}

/* The status of the kernel just launched (CUDA_CHECK_LAUNCH for a name known at run time). */
int launched(const char *kernel) {
  const cudaError_t e = cudaGetLastError();
  return e != cudaSuccess && e != cudaErrorNotReady ? shim_cuda_fail(e, kernel, __FILE__, __LINE__) : SHIM_OK;
}

/* Runs elements(grid, partial) over count items, then loss_finish for a reduction. */
template <typename D, typename F>
int run_loss(const char *kernel, shim_tensor *out, int64_t count, int32_t reduction, shim_stream *s, F &&elements) {
  cudaStream_t stream = shim_cuda_stream(s);
  if (reduction == SHIM_LOSS_NONE) {
    if (count == 0) return SHIM_OK;
    elements(shim_cuda_blocks(count), (double *)nullptr);
    return launched(kernel);
  }
  const unsigned blocks = shim_cuda_blocks(count) < LOSS_BLOCKS ? shim_cuda_blocks(count) : LOSS_BLOCKS;
  ShimScratch partial;
  SHIM_TRY(partial.alloc(2 * (int64_t)blocks * (int64_t)sizeof(double), s));
  elements(blocks, (double *)partial.data());
  SHIM_TRY(launched(kernel));
  loss_finish<D><<<1, SHIM_CUDA_THREADS, 0, stream>>>((typename D::T *)shim_cuda_data(out), (const double *)partial.data(), blocks,
                                                     reduction);
  CUDA_CHECK_LAUNCH("loss_finish");
  return SHIM_OK;
}

}  // namespace

int shim_softmax(shim_tensor *out, const shim_tensor *a, int32_t dim, int32_t log, shim_stream *s) {
  shim_reduce_dims d;
  SHIM_TRY(shim_check_softmax(out, a, dim, log, &d));
  if (!shim_cuda_all_contiguous(out, 1, &a)) return shim_cuda_densely(out, 1, &a, s, [&](shim_tensor *o, const shim_tensor *const *in) { return shim_softmax(o, in[0], dim, log, s); });
  if (a->numel == 0) return SHIM_OK;
  shim_cuda_track(s, out);
  shim_cuda_track(s, a);
  cudaStream_t stream = shim_cuda_stream(s);
  return dispatch(a->dtype, [&](auto dt) -> int {
    using D = decltype(dt);
    if constexpr (D::kind != Kind::Float) {
      return shim_fail(SHIM_E_UNSUPPORTED, "shim_softmax: not a floating dtype");
    } else {
      softmax_rows<D><<<shim_cuda_blocks(d.outer * d.inner), SHIM_CUDA_THREADS, 0, stream>>>(
          (typename D::T *)shim_cuda_data(out), (const typename D::T *)shim_cuda_data(a), d.outer, d.r, d.inner, log);
      CUDA_CHECK_LAUNCH("softmax_rows");
      return SHIM_OK;
    }
  });
}

int shim_layer_norm(shim_tensor *out, const shim_tensor *a, const shim_tensor *weight, const shim_tensor *bias, int64_t m, double eps,
                    shim_stream *s) {
  int64_t rows;
  SHIM_TRY(shim_check_layer_norm(out, a, weight, bias, m, &rows));
  if (a->numel == 0) return SHIM_OK;
  shim_cuda_track(s, out);
  shim_cuda_track(s, a);
  if (weight) shim_cuda_track(s, weight);
  if (bias) shim_cuda_track(s, bias);
  cudaStream_t stream = shim_cuda_stream(s);
  return dispatch(a->dtype, [&](auto dt) -> int {
    using D = decltype(dt);
    using T = typename D::T;
    if constexpr (D::kind != Kind::Float) {
      return shim_fail(SHIM_E_UNSUPPORTED, "shim_layer_norm: not a floating dtype");
    } else {
      layer_norm_rows<D><<<shim_cuda_blocks(rows * 32), SHIM_CUDA_THREADS, 0, stream>>>(
          (T *)shim_cuda_data(out), (const T *)shim_cuda_data(a), weight ? (const T *)shim_cuda_data(weight) : nullptr,
          bias ? (const T *)shim_cuda_data(bias) : nullptr, rows, m, eps);
      CUDA_CHECK_LAUNCH("layer_norm_rows");
      return SHIM_OK;
    }
  });
}

int shim_nll_loss(shim_tensor *out, const shim_tensor *input, const shim_tensor *target, const shim_tensor *weight,
                  int64_t ignore_index, int32_t reduction, shim_stream *s) {
  shim_nll_dims d;
  SHIM_TRY(shim_check_nll_loss(out, input, target, weight, reduction, &d));
  const int64_t count = target->numel;
  shim_cuda_track(s, out);
  shim_cuda_track(s, input);
  shim_cuda_track(s, target);
  if (weight) shim_cuda_track(s, weight);
  cudaStream_t stream = shim_cuda_stream(s);
  const int64_t *t = (const int64_t *)shim_cuda_data(target);
  if (count > 0) { /* the targets are checked before anything is written */
    ShimScratch flag;
    SHIM_TRY(flag.alloc(sizeof(int32_t), s));
    CUDA_CHECK(cudaMemsetAsync(flag.data(), 0, sizeof(int32_t), stream));
    find_bad_target<<<shim_cuda_blocks(count), SHIM_CUDA_THREADS, 0, stream>>>(t, count, d.c, ignore_index, (int32_t *)flag.data());
    CUDA_CHECK_LAUNCH("find_bad_target");
    int32_t bad = 0;
    CUDA_CHECK(cudaMemcpyAsync(&bad, flag.data(), sizeof bad, cudaMemcpyDeviceToHost, stream));
    CUDA_CHECK(cudaStreamSynchronize(stream));
    if (bad)
      return shim_fail(SHIM_E_INVALID, "shim_nll_loss: a target is not a class of 0..%lld nor ignore_index %lld", (long long)(d.c - 1),
                       (long long)ignore_index);
  }
  return dispatch(input->dtype, [&](auto dt) -> int {
    using D = decltype(dt);
    using T = typename D::T;
    if constexpr (D::kind != Kind::Float) {
      return shim_fail(SHIM_E_UNSUPPORTED, "shim_nll_loss: not a floating dtype");
    } else {
      const T *x = (const T *)shim_cuda_data(input), *w = weight ? (const T *)shim_cuda_data(weight) : nullptr;
      return run_loss<D>("nll_elements", out, count, reduction, s, [&](unsigned blocks, double *partial) {
        nll_elements<D><<<blocks, SHIM_CUDA_THREADS, 0, stream>>>((T *)shim_cuda_data(out), x, t, w, d, ignore_index, reduction, partial);
      });
    }
  });
}

int shim_mse_loss(shim_tensor *out, const shim_tensor *a, const shim_tensor *b, int32_t reduction, shim_stream *s) {
  SHIM_TRY(shim_check_mse_loss(out, a, b, reduction));
  shim_cuda_track(s, out);
  shim_cuda_track(s, a);
  shim_cuda_track(s, b);
  cudaStream_t stream = shim_cuda_stream(s);
  return dispatch(a->dtype, [&](auto dt) -> int {
    using D = decltype(dt);
    using T = typename D::T;
    if constexpr (D::kind != Kind::Float) {
      return shim_fail(SHIM_E_UNSUPPORTED, "shim_mse_loss: not a floating dtype");
    } else {
      return run_loss<D>("mse_elements", out, a->numel, reduction, s, [&](unsigned blocks, double *partial) {
        mse_elements<D><<<blocks, SHIM_CUDA_THREADS, 0, stream>>>((T *)shim_cuda_data(out), (const T *)shim_cuda_data(a),
                                                                 (const T *)shim_cuda_data(b), a->numel, reduction, partial);
      });
    }
  });
}
