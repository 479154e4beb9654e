/* indexing.c: shim_scatter and shim_index_add on the cpu. They move elements as opaque bytes or
 * 1-, 2-, 4- or 8-byte words, except the adds, which add in the dtype's own arithmetic (f16 and
 * bf16 through float, rounded at each step as torch's cpu does). */
#include <string.h>

#include "../common/numeric.h"
#include "cpu.h"

/* *dst (op)= *src for one element of dtype. */
static void scatter_one(int32_t op, int32_t dtype, char *dst, const char *src, int64_t size) {
  if (op == SHIM_SCATTER_ASSIGN) {
    memcpy(dst, src, (size_t)size);
    return;
  }
  switch (dtype) {
    case SHIM_F32: *(float *)dst += *(const float *)src; break;
    case SHIM_F64: *(double *)dst += *(const double *)src; break;
    case SHIM_F16: {
      uint16_t *o = (uint16_t *)dst;
      *o = shim_f32_to_f16(shim_f16_to_f32(*o) + shim_f16_to_f32(*(const uint16_t *)src));
      break;
    }
    case SHIM_BF16: {
      uint16_t *o = (uint16_t *)dst;
      *o = shim_f32_to_bf16(shim_bf16_to_f32(*o) + shim_bf16_to_f32(*(const uint16_t *)src));
      break;
    }
    case SHIM_I32: *(uint32_t *)dst += *(const uint32_t *)src; break; /* wraps */
    case SHIM_I64: *(uint64_t *)dst += *(const uint64_t *)src; break;
    case SHIM_U8: *(uint8_t *)dst += *(const uint8_t *)src; break;
    default: *(uint8_t *)dst = (*(uint8_t *)dst != 0) | (*(const uint8_t *)src != 0); break; /* bool: or */
  }
}

int shim_scatter(int32_t op, shim_tensor *out, int32_t dim, const shim_tensor *index, const shim_tensor *src, shim_stream *s) {
  shim_scatter_dims g;
  SHIM_TRY(shim_check_scatter(op, out, dim, index, src, &g));
  const int64_t *ix = shim_cpu_data(index);
  SHIM_TRY(shim_cpu_check_indices("shim_scatter", ix, index->numel, g.r, dim));
  const int64_t size = shim_dtype_size(out->dtype);
  char *o = shim_cpu_data(out);
  const char *sp = shim_cpu_data(src);
  int64_t idx[SHIM_MAX_DIMS] = {0};
  /* Walking index in row-major order visits each line along dim in index order. */
  for (int64_t e = 0; e < index->numel; e++) {
    int64_t oo = 0, so = 0;
    for (int32_t d = 0; d < g.ndim; d++) {
      oo += (d == dim ? ix[e] : idx[d]) * g.out_stride[d];
      so += idx[d] * g.src_stride[d];
    }
    scatter_one(op, out->dtype, o + oo * size, sp + so * size, size);
    for (int32_t d = g.ndim - 1; d >= 0; d--) {
      if (++idx[d] < g.shape[d]) break;
      idx[d] = 0;
    }
  }
  return SHIM_OK;
}

/* index_add's loop: per outer slice, each index entry j's row of inner elements added at its
 * target row, so every element's adds come in index order. ADD(dst, src) is one dtype's add. */
#define INDEX_ADD(T, ADD)                                                                      \
  do {                                                                                         \
    T *o = (T *)shim_cpu_data(out);                                                            \
    const T *x = (const T *)shim_cpu_data(src);                                                \
    for (int64_t b = 0; b < d.outer; b++)                                                      \
      for (int64_t j = 0; j < n; j++) {                                                        \
        T *dst = o + (b * d.r + ix[j]) * d.inner;                                              \
        const T *row = x + (b * n + j) * d.inner;                                              \
        for (int64_t i = 0; i < d.inner; i++) dst[i] = ADD(dst[i], row[i]);                    \
      }                                                                                        \
  } while (0)

#define ADD_F32(a, b) ((a) + fa * (b))
#define ADD_F64(a, b) ((a) + alpha * (b))
/* f16 and bf16 as torch's kernels add: alpha rounded to the dtype (h16, hbf), its product with
 * the source rounded, then the sum. */
#define ADD_F16(a, b) shim_f32_to_f16(shim_f16_to_f32(a) + shim_f16_to_f32(shim_f32_to_f16(h16 * shim_f16_to_f32(b))))
#define ADD_BF16(a, b) shim_f32_to_bf16(shim_bf16_to_f32(a) + shim_bf16_to_f32(shim_f32_to_bf16(hbf * shim_bf16_to_f32(b))))
/* Integers add in their unsigned type, so they wrap. */
#define ADD_I32(a, b) (uint32_t)((a) + ia * (uint64_t)(b))
#define ADD_I64(a, b) ((a) + ia * (b))
#define ADD_U8(a, b) (uint8_t)((a) + ia * (uint64_t)(b))
#define ADD_BOOL(a, b) (uint8_t)((a) != 0 || (alpha != 0 && (b) != 0))

int shim_index_add(shim_tensor *out, int32_t dim, const shim_tensor *index, const shim_tensor *src, double alpha,
                   shim_stream *s) {
  shim_reduce_dims d;
  SHIM_TRY(shim_check_index_add(out, dim, index, src, &d));
  const int64_t *ix = shim_cpu_data(index), n = index->numel;
  SHIM_TRY(shim_cpu_check_indices("shim_index_add", ix, n, d.r, dim));
  const float fa = (float)alpha, h16 = shim_f16_to_f32(shim_f32_to_f16(fa)), hbf = shim_bf16_to_f32(shim_f32_to_bf16(fa));
  const uint64_t ia = (uint64_t)(int64_t)alpha;
  switch (out->dtype) {
    case SHIM_F32: INDEX_ADD(float, ADD_F32); break;
    case SHIM_F64: INDEX_ADD(double, ADD_F64); break;
    case SHIM_F16: INDEX_ADD(uint16_t, ADD_F16); break;
    case SHIM_BF16: INDEX_ADD(uint16_t, ADD_BF16); break;
    case SHIM_I32: INDEX_ADD(uint32_t, ADD_I32); break;
    case SHIM_I64: INDEX_ADD(uint64_t, ADD_I64); break;
    case SHIM_U8: INDEX_ADD(uint8_t, ADD_U8); break;
    default: INDEX_ADD(uint8_t, ADD_BOOL); break;
  }
  return SHIM_OK;
}
