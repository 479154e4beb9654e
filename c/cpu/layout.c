/* layout.c: shim_transpose on the cpu. Swapping dims d0 < d1 of a contiguous tensor is a
 * copy between [A, S0, B, S1, C] and [A, S1, B, S0, C] (A, B, C: the products of the dims
 * before, between and after), moving runs of C elements in tiles so both sides stay in cache. */
#include <string.h>

#include "cpu.h"

enum { TILE = 16 };

/* One pass over the output in tiles of (j, i); ROW is the byte count moved per (a, i, b, j),
 * a constant in the common cases so memcpy becomes one load and store. */
#define TRANSPOSE_TILES(ROW)                                                               \
  for (int64_t x = 0; x < A; x++)                                                          \
    for (int64_t j0 = 0; j0 < S1; j0 += TILE)                                              \
      for (int64_t i0 = 0; i0 < S0; i0 += TILE)                                            \
        for (int64_t y = 0; y < B; y++) {                                                  \
          int64_t j1 = shim_cpu_min64(S1, j0 + TILE), i1 = shim_cpu_min64(S0, i0 + TILE);  \
          for (int64_t j = j0; j < j1; j++) {                                              \
            char *d = dst + ((x * S1 + j) * B + y) * S0 * (ROW);                           \
            const char *s = src + ((x * S0 * B + y) * S1 + j) * (ROW);                     \
            for (int64_t i = i0; i < i1; i++)                                              \
              memcpy(d + i * (ROW), s + i * B * S1 * (ROW), (size_t)(ROW));                \
          }                                                                                \
        }

static void transpose_blocks(char *dst, const char *src, int64_t A, int64_t S0, int64_t B, int64_t S1, int64_t row) {
  switch (row) {
    case 1: TRANSPOSE_TILES(1); break;
    case 2: TRANSPOSE_TILES(2); break;
    case 4: TRANSPOSE_TILES(4); break;
    case 8: TRANSPOSE_TILES(8); break;
    default: TRANSPOSE_TILES(row); break;
  }
}

int shim_transpose(shim_tensor *out, const shim_tensor *a, int32_t dim0, int32_t dim1, shim_stream *s) {
  SHIM_REQUIRE(out, "out");
  SHIM_REQUIRE(a, "a");
  char ba[128], bo[128];
  shim_cpu_describe(a, ba, sizeof ba);
  shim_cpu_describe(out, bo, sizeof bo);
  if (dim0 < 0 || dim0 >= a->ndim || dim1 < 0 || dim1 >= a->ndim)
    return shim_fail(SHIM_E_INVALID, "shim_transpose: dims %d and %d are out of range for a %s", dim0, dim1, ba);
  int out_ok = out->dtype == a->dtype && out->ndim == a->ndim;
  for (int32_t i = 0; out_ok && i < a->ndim; i++)
    out_ok = out->shape[i] == a->shape[i == dim0 ? dim1 : i == dim1 ? dim0 : i];
  if (!out_ok)
    return shim_fail(SHIM_E_INVALID, "shim_transpose: out is %s but swapping dims %d and %d of %s gives another dtype or shape",
                     bo, dim0, dim1, ba);
  int64_t size = shim_dtype_size(a->dtype);
  char *dst = shim_cpu_data(out);
  const char *src = shim_cpu_data(a);
  if (dim0 == dim1 || a->numel == 0) {
    if (dst != src) memcpy(dst, src, (size_t)(a->numel * size));
    return SHIM_OK;
  }
  if (out->storage == a->storage)
    return shim_fail(SHIM_E_INVALID, "shim_transpose: out %s shares memory with a", bo);
  int32_t d0 = dim0 < dim1 ? dim0 : dim1, d1 = dim0 < dim1 ? dim1 : dim0;
  int64_t A = 1, B = 1, C = 1;
  for (int32_t i = 0; i < d0; i++) A *= a->shape[i];
  for (int32_t i = d0 + 1; i < d1; i++) B *= a->shape[i];
  for (int32_t i = d1 + 1; i < a->ndim; i++) C *= a->shape[i];
  transpose_blocks(dst, src, A, a->shape[d0], B, a->shape[d1], C * size);
  return SHIM_OK;
}
