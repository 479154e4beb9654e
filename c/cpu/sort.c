/* sort.c: shim_sort and shim_searchsorted on the cpu.
 *
 * shim_sort: each line along dim (a read as [outer, r, inner]) loaded into a buffer (double for
 * floating dtypes, which holds each exactly, int64 otherwise) and merge sorted by index, a
 * stable sort: of two equal keys the earlier stays first. Ascending puts NaN after every
 * number, descending before it (torch's order); NaNs keep their order among themselves.
 * shim_searchsorted: torch's binary search per value, with its comparisons (a NaN value is
 * never below an element, so it goes last). */
#include <stdlib.h>
#include <string.h>

#include "cpu.h"

/* Whether key x goes strictly before key y. */
static inline int before_f64(int descending, double x, double y) {
  if (x != x) return descending && y == y;
  if (y != y) return !descending;
  return descending ? x > y : x < y;
}

static inline int before_i64(int descending, int64_t x, int64_t y) { return descending ? x > y : x < y; }

/* Bottom-up merge sort of perm[0..r) by keys, through tmp; the result ends in perm. */
#define MERGE_SORT(SUFFIX, KEY)                                                                \
  static void merge_sort_##SUFFIX(int descending, const KEY *keys, int64_t *perm, int64_t *tmp, int64_t r) { \
    int64_t *from = perm, *to = tmp;                                                           \
    for (int64_t width = 1; width < r; width *= 2) {                                           \
      for (int64_t lo = 0; lo < r; lo += 2 * width) {                                          \
        int64_t mid = shim_cpu_min64(lo + width, r), hi = shim_cpu_min64(lo + 2 * width, r);   \
        int64_t i = lo, j = mid, k = lo;                                                       \
        while (i < mid && j < hi) to[k++] = before_##SUFFIX(descending, keys[from[j]], keys[from[i]]) ? from[j++] : from[i++]; \
        while (i < mid) to[k++] = from[i++];                                                   \
        while (j < hi) to[k++] = from[j++];                                                    \
      }                                                                                        \
      int64_t *t = from;                                                                       \
      from = to, to = t;                                                                       \
    }                                                                                          \
    if (from != perm) memcpy(perm, from, (size_t)r * sizeof(int64_t));                         \
  }

MERGE_SORT(f64, double)
MERGE_SORT(i64, int64_t)

/* Sorts every line; keys, sorted (the keys in order), perm and tmp hold r each. */
#define SORT_LINES(SUFFIX, KEY)                                                                 \
  static void sort_lines_##SUFFIX(const shim_tensor *a, shim_tensor *values, int64_t *indices, int descending, \
                                  shim_reduce_dims d, KEY *keys, KEY *sorted, int64_t *perm, int64_t *tmp) { \
    const char *src = shim_cpu_data(a);                                                         \
    char *dst = shim_cpu_data(values);                                                          \
    const int64_t size = shim_dtype_size(a->dtype);                                             \
    for (int64_t o = 0; o < d.outer; o++)                                                       \
      for (int64_t k = 0; k < d.inner; k++) {                                                   \
        const int64_t base = o * d.r * d.inner + k;                                             \
        if (d.inner == 1) shim_cpu_load_##SUFFIX(a->dtype, src + base * size, d.r, keys);       \
        else for (int64_t j = 0; j < d.r; j++) shim_cpu_load_##SUFFIX(a->dtype, src + (base + j * d.inner) * size, 1, keys + j); \
        for (int64_t j = 0; j < d.r; j++) perm[j] = j;                                          \
        merge_sort_##SUFFIX(descending, keys, perm, tmp, d.r);                                  \
        for (int64_t j = 0; j < d.r; j++) sorted[j] = keys[perm[j]];                            \
        if (d.inner == 1) {                                                                     \
          shim_cpu_store_##SUFFIX(values->dtype, sorted, d.r, dst + base * size);               \
          memcpy(indices + base, perm, (size_t)d.r * sizeof(int64_t));                          \
        } else                                                                                  \
          for (int64_t j = 0; j < d.r; j++) {                                                   \
            shim_cpu_store_##SUFFIX(values->dtype, sorted + j, 1, dst + (base + j * d.inner) * size); \
            indices[base + j * d.inner] = perm[j];                                              \
          }                                                                                     \
      }                                                                                         \
  }

SORT_LINES(f64, double)
SORT_LINES(i64, int64_t)

int shim_sort(shim_tensor *values, shim_tensor *indices, const shim_tensor *a, int32_t dim, int32_t descending, shim_stream *s) {
  shim_reduce_dims d;
  SHIM_TRY(shim_check_sort(values, indices, a, dim, &d));
  if (a->numel == 0) return SHIM_OK;
  /* keys and sorted (8 bytes each either way), perm and tmp. */
  char *scratch = malloc((size_t)d.r * 4 * 8);
  if (scratch == NULL) return shim_fail(SHIM_E_NOMEM, "shim_sort: no memory for a line of %lld elements", (long long)d.r);
  int64_t *perm = (int64_t *)(scratch + 2 * 8 * d.r), *tmp = perm + d.r;
  if (shim_cpu_is_float(a->dtype)) sort_lines_f64(a, values, shim_cpu_data(indices), descending != 0, d, (double *)scratch, (double *)scratch + d.r, perm, tmp);
  else sort_lines_i64(a, values, shim_cpu_data(indices), descending != 0, d, (int64_t *)scratch, (int64_t *)scratch + d.r, perm, tmp);
  free(scratch);
  return SHIM_OK;
}

/* torch's lower and upper bounds (Bucketization): the first index whose element is not below
 * the value (right: not at or below it). */
#define SEARCH(SUFFIX, KEY)                                                                     \
  static int64_t search_##SUFFIX(const KEY *row, int64_t m, KEY v, int right) {                 \
    int64_t lo = 0, hi = m;                                                                     \
    while (lo < hi) {                                                                           \
      const int64_t mid = lo + ((hi - lo) >> 1);                                                \
      if (right ? !(row[mid] > v) : !(row[mid] >= v)) lo = mid + 1;                             \
      else hi = mid;                                                                            \
    }                                                                                           \
    return lo;                                                                                  \
  }                                                                                             \
  static void search_rows_##SUFFIX(const shim_tensor *sorted, const shim_tensor *values, shim_tensor *out, int right, \
                                   shim_search_dims d, KEY *row, KEY *v, int64_t *at) {         \
    const char *ps = shim_cpu_data(sorted), *pv = shim_cpu_data(values);                        \
    char *po = shim_cpu_data(out);                                                              \
    const int64_t size = shim_dtype_size(sorted->dtype), out_size = shim_dtype_size(out->dtype); \
    for (int64_t i = 0; i < d.rows; i++) {                                                      \
      if (i == 0 || !d.shared) shim_cpu_load_##SUFFIX(sorted->dtype, ps + i * d.m * size, d.m, row); \
      for (int64_t base = 0; base < d.n; base += SHIM_CPU_CHUNK) {                              \
        const int64_t n = shim_cpu_min64(SHIM_CPU_CHUNK, d.n - base);                           \
        shim_cpu_load_##SUFFIX(values->dtype, pv + (i * d.n + base) * size, n, v);              \
        for (int64_t j = 0; j < n; j++) at[j] = search_##SUFFIX(row, d.m, v[j], right);         \
        shim_cpu_store_i64(out->dtype, at, n, po + (i * d.n + base) * out_size);                \
      }                                                                                         \
    }                                                                                           \
  }

SEARCH(f64, double)
SEARCH(i64, int64_t)

int shim_searchsorted(shim_tensor *out, const shim_tensor *sorted, const shim_tensor *values, int32_t right, shim_stream *s) {
  shim_search_dims d;
  SHIM_TRY(shim_check_searchsorted(out, sorted, values, &d));
  if (values->numel == 0) return SHIM_OK;
  /* One sorted row, a chunk of values and their answers (8 bytes each). */
  char *scratch = malloc((size_t)(d.m + 2 * SHIM_CPU_CHUNK) * 8);
  if (scratch == NULL) return shim_fail(SHIM_E_NOMEM, "shim_searchsorted: no memory for a row of %lld elements", (long long)d.m);
  int64_t *at = (int64_t *)(scratch + (d.m + SHIM_CPU_CHUNK) * 8);
  if (shim_cpu_is_float(sorted->dtype)) search_rows_f64(sorted, values, out, right != 0, d, (double *)scratch, (double *)scratch + d.m, at);
  else search_rows_i64(sorted, values, out, right != 0, d, (int64_t *)scratch, (int64_t *)scratch + d.m, at);
  free(scratch);
  return SHIM_OK;
}
