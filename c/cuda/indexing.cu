/* indexing.cu: shim_scatter and shim_index_add on the device, by the cpu's rules (c/cpu/indexing.c).
 * Scatter: a thread per line of index along dim, walking it in
 * index order, so no two threads write one element (the lines reach disjoint parts of out) and
 * the results, sums included, are the cpu's, with no atomics. Index_add: a thread per element of
 * an index row (outer slice b, inner position i), adding each index entry's in index order. */
#include "elements.h"

using namespace shim;

namespace {

template <typename D>
__device__ __forceinline__ void scatter_one(int32_t op, typename D::T *dst, typename D::T src) {
  if (op == SHIM_SCATTER_ASSIGN) {
    *dst = src;
  } else if constexpr (D::kind == Kind::Bool) {
    *dst = (*dst != 0) | (src != 0);
  } else if constexpr (D::kind == Kind::Int) {
    using T = typename D::T;
    *dst = (T)((uint64_t)*dst + (uint64_t)src); /* wraps */
  } else {
    *dst = D::store(D::load(*dst) + D::load(src));
  }
}

template <typename D>
__global__ void scatter_lines(int32_t op, typename D::T *out, const int64_t *index, const typename D::T *src, int64_t lines,
                              shim_scatter_dims g) {
  const int64_t stride = (int64_t)gridDim.x * blockDim.x, j_size = g.shape[g.dim];
  for (int64_t line = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; line < lines; line += stride) {
    int64_t rest = line, oo = 0, so = 0, io = 0, istride = 1, idim = 1; /* index's contiguous stride along dim */
    for (int32_t d = g.ndim - 1; d >= 0; d--) {
      if (d == g.dim) {
        idim = istride;
        istride *= j_size;
        continue;
      }
      const int64_t i = rest % g.shape[d];
      rest /= g.shape[d];
      oo += i * g.out_stride[d];
      so += i * g.src_stride[d];
      io += i * istride;
      istride *= g.shape[d];
    }
    for (int64_t j = 0; j < j_size; j++) {
      const int64_t target = g.ndim > 0 ? index[io + j * idim] : index[0];
      scatter_one<D>(op, out + oo + target * (g.ndim > 0 ? g.out_stride[g.dim] : 0), src[so + j * (g.ndim > 0 ? g.src_stride[g.dim] : 0)]);
    }
  }
}

/* dst + alpha * src in the dtype's arithmetic (int64 wrapping for integers, or for bool; f16 and
 * bf16 as the cpu's: alpha rounded to the dtype, its product with src rounded, then the sum). */
template <typename D>
__device__ __forceinline__ typename D::T index_add_one(typename D::T dst, typename D::T src, double alpha) {
  using T = typename D::T;
  if constexpr (D::kind == Kind::Bool) {
    return (T)(dst != 0 || (alpha != 0 && src != 0));
  } else if constexpr (D::kind == Kind::Int) {
    return (T)((uint64_t)dst + (uint64_t)(int64_t)alpha * (uint64_t)src);
  } else {
    using V = typename D::V;
    const V a = D::load(D::store((V)alpha));
    return D::store(D::load(dst) + D::load(D::store(a * D::load(src))));
  }
}

template <typename D>
__global__ void index_add_rows(typename D::T *out, const int64_t *index, const typename D::T *src, int64_t n, double alpha,
                               shim_reduce_dims d) {
  const int64_t stride = (int64_t)gridDim.x * blockDim.x, lines = d.outer * d.inner;
  for (int64_t line = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; line < lines; line += stride) {
    const int64_t b = line / d.inner, i = line % d.inner;
    for (int64_t j = 0; j < n; j++) {
      typename D::T *dst = out + (b * d.r + index[j]) * d.inner + i;
      *dst = index_add_one<D>(*dst, src[(b * n + j) * d.inner + i], alpha);
    }
  }
}

}  // namespace

int shim_scatter(int32_t op, shim_tensor *out, int32_t dim, const shim_tensor *index, const shim_tensor *src, shim_stream *s) {
  shim_scatter_dims g;
  SHIM_TRY(shim_check_scatter(op, out, dim, index, src, &g));
  const int64_t n = index->numel;
  if (n == 0) return SHIM_OK;
  shim_cuda_track(s, out);
  shim_cuda_track(s, index);
  shim_cuda_track(s, src);
  cudaStream_t stream = shim_cuda_stream(s);
  const int64_t *ix = (const int64_t *)shim_cuda_data(index);
  SHIM_TRY(shim_cuda_check_indices("shim_scatter", ix, n, g.r, dim, s));
  const int64_t lines = g.ndim > 0 ? n / g.shape[dim] : 1;
  return dispatch(out->dtype, [&](auto dt) -> int {
    using D = decltype(dt);
    scatter_lines<D><<<shim_cuda_blocks(lines), SHIM_CUDA_THREADS, 0, stream>>>(
        op, (typename D::T *)shim_cuda_data(out), ix, (const typename D::T *)shim_cuda_data(src), lines, g);
    CUDA_CHECK_LAUNCH("scatter_lines");
    return SHIM_OK;
  });
}

int shim_index_add(shim_tensor *out, int32_t dim, const shim_tensor *index, const shim_tensor *src, double alpha,
                   shim_stream *s) {
  shim_reduce_dims d;
  SHIM_TRY(shim_check_index_add(out, dim, index, src, &d));
  const int64_t n = index->numel, lines = d.outer * d.inner;
  if (n == 0 || lines == 0) return SHIM_OK;
  shim_cuda_track(s, out);
  shim_cuda_track(s, index);
  shim_cuda_track(s, src);
  cudaStream_t stream = shim_cuda_stream(s);
  const int64_t *ix = (const int64_t *)shim_cuda_data(index);
  SHIM_TRY(shim_cuda_check_indices("shim_index_add", ix, n, d.r, dim, s));
  return dispatch(out->dtype, [&](auto dt) -> int {
    using D = decltype(dt);
    index_add_rows<D><<<shim_cuda_blocks(lines), SHIM_CUDA_THREADS, 0, stream>>>(
        (typename D::T *)shim_cuda_data(out), ix, (const typename D::T *)shim_cuda_data(src), n, alpha, d);
    CUDA_CHECK_LAUNCH("index_add_rows");
    return SHIM_OK;
  });
}
