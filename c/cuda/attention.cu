/* attention.cu: shim_attention on the device, by the cpu's rules (c/cpu/attention.c): a block
 * per query row computes its scores into scratch (a thread per key), masks them, reduces the
 * row's maximum and sum in shared memory, then a thread per output column sums the weighted
 * values. Computes in float (double for f64). */
#include "elements.h"

using namespace shim;

namespace {

enum { ROW_THREADS = 128 };

/* The block's reduction of v (max or sum) in shared memory; every thread gets the result. */
template <typename V, bool Max>
__device__ V block_reduce(V v, V *shared) {
  shared[threadIdx.x] = v;
  __syncthreads();
  for (int half = ROW_THREADS / 2; half > 0; half /= 2) {
    if ((int)threadIdx.x < half) {
      const V a = shared[threadIdx.x], b = shared[threadIdx.x + half];
      shared[threadIdx.x] = Max ? ((b > a || b != b) && a == a ? b : a) : a + b;
    }
    __syncthreads();
  }
  const V r = shared[0];
  __syncthreads();
  return r;
}

template <typename D>
__global__ void attention_rows(typename D::T *out, const typename D::T *q, const typename D::T *k, const typename D::T *v,
                               const uint8_t *mbool, const typename D::T *madd, typename D::V *scratch, shim_attention_dims d,
                               typename D::V scale, int causal) {
  using V = typename D::V;
  __shared__ V shared[ROW_THREADS];
  const int64_t rows = d.batch * d.l;
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const int64_t b = row / d.l, i = row % d.l;
    const int64_t mrow = ((d.mask_batch == 1 ? 0 : b) * d.l + i) * d.s;
    const typename D::T *qr = q + row * d.e, *kb = k + b * d.s * d.e, *vb = v + b * d.s * d.ev;
    V *scores = scratch + row * d.s;
    V m = -INFINITY;
    for (int64_t j = threadIdx.x; j < d.s; j += ROW_THREADS) {
      V x = 0;
      for (int64_t e = 0; e < d.e; e++) x += D::load(qr[e]) * D::load(kb[j * d.e + e]);
      x *= scale;
      if ((causal && j > i) || (mbool && !mbool[mrow + j])) x = -INFINITY;
      else if (madd) x += D::load(madd[mrow + j]);
      scores[j] = x;
      if ((x > m || x != x) && m == m) m = x;
    }
    m = block_reduce<V, true>(m, shared);
    V sum = 0;
    for (int64_t j = threadIdx.x; j < d.s; j += ROW_THREADS) sum += (scores[j] = exp(scores[j] - m));
    sum = block_reduce<V, false>(sum, shared);
    __syncthreads(); /* every score written before any is read across threads */
    for (int64_t c = threadIdx.x; c < d.ev; c += ROW_THREADS) {
      V acc = 0;
      for (int64_t j = 0; j < d.s; j++) acc += scores[j] * D::load(vb[j * d.ev + c]);
      out[row * d.ev + c] = D::store(d.s == 0 ? (V)0 : acc / sum);
    }
    __syncthreads();
  }
}

}  // namespace

int shim_attention(shim_tensor *out, const shim_tensor *q, const shim_tensor *k, const shim_tensor *v, const shim_tensor *mask,
                   double scale, int32_t causal, shim_stream *s) {
  shim_attention_dims d;
  SHIM_TRY(shim_check_attention(out, q, k, v, mask, causal, &d));
  if (out->numel == 0) return SHIM_OK;
  shim_cuda_track(s, out);
  shim_cuda_track(s, q);
  shim_cuda_track(s, k);
  shim_cuda_track(s, v);
  shim_cuda_track(s, mask);
  cudaStream_t stream = shim_cuda_stream(s);
  return dispatch(q->dtype, [&](auto dt) -> int {
    using D = decltype(dt);
    if constexpr (D::kind != Kind::Float) {
      return shim_fail(SHIM_E_UNSUPPORTED, "shim_attention: not a floating dtype");
    } else {
      using T = typename D::T;
      using V = typename D::V;
      ShimScratch scores;
      SHIM_TRY(scores.alloc(d.batch * d.l * d.s * (int64_t)sizeof(V) + 1, s));
      const int64_t rows = d.batch * d.l;
      const unsigned blocks = rows < SHIM_CUDA_MAX_BLOCKS ? (unsigned)rows : SHIM_CUDA_MAX_BLOCKS;
      attention_rows<D><<<blocks, ROW_THREADS, 0, stream>>>(
          (T *)shim_cuda_data(out), (const T *)shim_cuda_data(q), (const T *)shim_cuda_data(k), (const T *)shim_cuda_data(v),
          mask && d.mask_bool ? (const uint8_t *)shim_cuda_data(mask) : nullptr,
          mask && !d.mask_bool ? (const T *)shim_cuda_data(mask) : nullptr, (V *)scores.data(), d, (V)scale, causal);
      CUDA_CHECK_LAUNCH("attention_rows");
      return SHIM_OK;
    }
  });
}
