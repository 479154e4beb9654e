/* sort.cu: shim_sort and shim_searchsorted on the device, with the cpu's semantics (c/cpu/sort.c).
 * Simple kernels, correct rather than fast: shim_sort runs a thread per line, a bottom-up merge
 * sort (stable) of the line's indices by its keys in scratch memory; shim_searchsorted a thread
 * per value, torch's binary search over its row where it lies. */
#include <type_traits>

#include "elements.h"

using namespace shim;

namespace {

/* Whether key x goes strictly before key y: NaN last ascending, first descending. */
template <typename K>
__device__ __forceinline__ bool before(bool descending, K x, K y) {
  if constexpr (std::is_same_v<K, double>) {
    if (x != x) return descending && y == y;
    if (y != y) return !descending;
  }
  return descending ? x > y : x < y;
}

/* A thread per line (o, k): its keys and indices into scratch (keys, then perm and tmp, r each
 * per line), merge sorted, then written to values and indices. */
template <typename D>
__global__ void sort_kernel(const typename D::T *in, typename D::T *values, int64_t *indices, WideOf<D> *keys, int64_t *perm,
                            int64_t *tmp, int64_t lines, int64_t inner, int64_t r, bool descending) {
  const int64_t stride = (int64_t)gridDim.x * blockDim.x;
  for (int64_t t = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; t < lines; t += stride) {
    const int64_t o = t / inner, k = t % inner, base = o * r * inner + k;
    WideOf<D> *key = keys + t * r;
    int64_t *from = perm + t * r, *to = tmp + t * r;
    for (int64_t j = 0; j < r; j++) key[j] = widen<D>(in[base + j * inner]), from[j] = j;
    for (int64_t width = 1; width < r; width *= 2) {
      for (int64_t lo = 0; lo < r; lo += 2 * width) {
        const int64_t mid = lo + width < r ? lo + width : r, hi = lo + 2 * width < r ? lo + 2 * width : r;
        int64_t i = lo, j = mid, n = lo;
        while (i < mid && j < hi) to[n++] = before(descending, key[from[j]], key[from[i]]) ? from[j++] : from[i++];
        while (i < mid) to[n++] = from[i++];
        while (j < hi) to[n++] = from[j++];
      }
      int64_t *swap = from;
      from = to, to = swap;
    }
    for (int64_t j = 0; j < r; j++) {
      values[base + j * inner] = in[base + from[j] * inner];
      indices[base + j * inner] = from[j];
    }
  }
}

/* A thread per value: torch's lower (upper, right) bound in its row. */
template <typename D>
__global__ void search_kernel(const typename D::T *sorted, const typename D::T *values, void *out, bool out_i64, int64_t count,
                              int64_t m, int64_t n, bool shared, bool right) {
  const int64_t stride = (int64_t)gridDim.x * blockDim.x;
  for (int64_t t = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; t < count; t += stride) {
    const typename D::T *row = sorted + (shared ? 0 : (t / n) * m);
    const WideOf<D> v = widen<D>(values[t]);
    int64_t lo = 0, hi = m;
    while (lo < hi) {
      const int64_t mid = lo + ((hi - lo) >> 1);
      const WideOf<D> x = widen<D>(row[mid]);
      if (right ? !(x > v) : !(x >= v)) lo = mid + 1;
      else hi = mid;
    }
    if (out_i64) ((int64_t *)out)[t] = lo;
    else ((int32_t *)out)[t] = (int32_t)lo;
  }
}

}  // namespace

int shim_sort(shim_tensor *values, shim_tensor *indices, const shim_tensor *a, int32_t dim, int32_t descending, shim_stream *s) {
  shim_reduce_dims dims;
  SHIM_TRY(shim_check_sort(values, indices, a, dim, &dims));
  if (a->numel == 0) return SHIM_OK;
  shim_cuda_track(s, values);
  shim_cuda_track(s, indices);
  shim_cuda_track(s, a);
  const int64_t lines = dims.outer * dims.inner;
  ShimScratch scratch;
  SHIM_TRY(scratch.alloc(a->numel * 3 * 8, s));
  return dispatch(a->dtype, [&](auto d) -> int {
    using D = decltype(d);
    using T = typename D::T;
    WideOf<D> *keys = (WideOf<D> *)scratch.data();
    int64_t *perm = (int64_t *)scratch.data() + a->numel;
    sort_kernel<D><<<shim_cuda_blocks(lines), SHIM_CUDA_THREADS, 0, shim_cuda_stream(s)>>>(
        (const T *)shim_cuda_data(a), (T *)shim_cuda_data(values), (int64_t *)shim_cuda_data(indices), keys, perm, perm + a->numel,
        lines, dims.inner, dims.r, descending != 0);
    CUDA_CHECK_LAUNCH("sort_kernel");
    return SHIM_OK;
  });
}

int shim_searchsorted(shim_tensor *out, const shim_tensor *sorted, const shim_tensor *values, int32_t right, shim_stream *s) {
  shim_search_dims dims;
  SHIM_TRY(shim_check_searchsorted(out, sorted, values, &dims));
  if (values->numel == 0) return SHIM_OK;
  shim_cuda_track(s, out);
  shim_cuda_track(s, sorted);
  shim_cuda_track(s, values);
  return dispatch(values->dtype, [&](auto d) -> int {
    using D = decltype(d);
    using T = typename D::T;
    search_kernel<D><<<shim_cuda_blocks(values->numel), SHIM_CUDA_THREADS, 0, shim_cuda_stream(s)>>>(
        (const T *)shim_cuda_data(sorted), (const T *)shim_cuda_data(values), shim_cuda_data(out), out->dtype == SHIM_I64, values->numel,
        dims.m, dims.n, dims.shared != 0, right != 0);
    CUDA_CHECK_LAUNCH("search_kernel");
    return SHIM_OK;
  });
}
