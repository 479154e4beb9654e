/* layout.c: shim_transpose and shim_triangle on the cpu. Swapping dims d0 < d1 of a contiguous
 * tensor is a copy between [A, S0, B, S1, C] and [A, S1, B, S0, C] (A, B, C: the products of
 * the dims before, between and after), moving runs of C elements in tiles so both sides stay in
 * cache. A triangle moves each row's kept run as bytes and zeroes the rest. */
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

/* Rows [begin, end) of the batch x rows matrices' rows: the kept run of each row copied, the
 * rest zeroed (zero bits are 0 in every dtype), so each row is two straight runs. */
typedef struct {
  char *o;
  const char *a;
  int64_t rows, cols, diagonal, size;
  int32_t upper;
} triangle_job;

static void triangle_range(void *ctx, int64_t begin, int64_t end) {
  const triangle_job *j = ctx;
  const int64_t bytes = j->cols * j->size;
  for (int64_t r = begin, i = begin % j->rows; r < end; r++, i = i + 1 == j->rows ? 0 : i + 1) {
    /* tril keeps j <= i + diagonal: the first i + diagonal + 1; triu keeps j >= i + diagonal */
    int64_t edge = j->upper ? i + j->diagonal : i + j->diagonal + 1;
    edge = edge < 0 ? 0 : edge > j->cols ? j->cols : edge;
    char *o = j->o + r * bytes;
    const char *a = j->a + r * bytes;
    const int64_t cut = edge * j->size;
    if (j->upper) {
      memset(o, 0, (size_t)cut);
      if (o != a) memcpy(o + cut, a + cut, (size_t)(bytes - cut));
    } else {
      if (o != a) memcpy(o, a, (size_t)cut);
      memset(o + cut, 0, (size_t)(bytes - cut));
    }
  }
}

int shim_triangle(shim_tensor *out, const shim_tensor *a, int64_t diagonal, int32_t upper, shim_stream *s) {
  shim_matrix_dims d;
  SHIM_TRY(shim_check_triangle(out, a, upper, &d));
  if (a->numel == 0) return SHIM_OK;
  /* past either corner the triangle is all or nothing: clamped, the edge below cannot overflow */
  diagonal = diagonal > d.cols ? d.cols : diagonal < -d.rows - 1 ? -d.rows - 1 : diagonal;
  triangle_job job = {shim_cpu_data(out), shim_cpu_data(a), d.rows, d.cols, diagonal, shim_dtype_size(a->dtype), upper};
  shim_cpu_parallel(d.batch * d.rows, SHIM_CPU_GRAIN / d.cols + 1, triangle_range, &job);
  return SHIM_OK;
}
