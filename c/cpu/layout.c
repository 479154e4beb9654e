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
  shim_transpose_dims dims;
  SHIM_TRY(shim_check_transpose(out, a, dim0, dim1, &dims));
  int64_t size = shim_dtype_size(a->dtype);
  char *dst = shim_cpu_data(out);
  const char *src = shim_cpu_data(a);
  if (dim0 == dim1 || a->numel == 0) {
    if (dst != src) memcpy(dst, src, (size_t)(a->numel * size));
    return SHIM_OK;
  }
  transpose_blocks(dst, src, dims.before, dims.s0, dims.between, dims.s1, dims.after * size);
  return SHIM_OK;
}
