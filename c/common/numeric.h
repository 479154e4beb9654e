/* numeric.h: element conversions and the counter-based random generator, shared by the cpu
 * code and the cuda kernels so both backends give the same bits for the same inputs.
 * Everything is static inline and marked SHIM_HD (host and device under nvcc). */
#ifndef MONARCH_SHIM_NUMERIC_H
#define MONARCH_SHIM_NUMERIC_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#include "../shim.h"

#ifdef __CUDACC__
#define SHIM_HD __host__ __device__ __forceinline__
#else
#define SHIM_HD static inline
#endif

SHIM_HD uint32_t shim_f32_bits(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }
SHIM_HD float shim_bits_f32(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }

/* IEEE half <-> float, round to nearest even, NaN and infinities kept. */
SHIM_HD float shim_f16_to_f32(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000u) << 16, exp = (h >> 10) & 0x1fu, man = h & 0x3ffu;
  if (exp == 0x1f) return shim_bits_f32(sign | 0x7f800000u | (man << 13));
  if (exp == 0) {
    if (man == 0) return shim_bits_f32(sign);
    /* subnormal: value = man * 2^-24 */
    float v = (float)man * 5.9604644775390625e-8f;
    return sign ? -v : v;
  }
  return shim_bits_f32(sign | ((exp + 112u) << 23) | (man << 13));
}

SHIM_HD uint16_t shim_f32_to_f16(float f) {
  uint32_t u = shim_f32_bits(f), sign = (u >> 16) & 0x8000u;
  uint32_t abs = u & 0x7fffffffu;
  if (abs > 0x7f800000u) return (uint16_t)(sign | 0x7e00u);            /* NaN */
  if (abs >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u);            /* overflow to inf */
  if (abs < 0x38800000u) {                                              /* subnormal or zero */
    if (abs < 0x33000000u) return (uint16_t)sign;                       /* below half of the smallest */
    uint32_t man = (abs & 0x7fffffu) | 0x800000u, shift = 126u - (abs >> 23);
    uint32_t half = man >> shift, rest = man & ((1u << shift) - 1u), mid = 1u << (shift - 1u);
    if (rest > mid || (rest == mid && (half & 1u))) half++;
    return (uint16_t)(sign | half);
  }
  uint32_t rounded = abs + 0xfffu + ((abs >> 13) & 1u);                 /* nearest even at bit 13 */
  return (uint16_t)(sign | ((rounded - 0x38000000u) >> 13));
}

SHIM_HD float shim_bf16_to_f32(uint16_t b) { return shim_bits_f32((uint32_t)b << 16); }

SHIM_HD uint16_t shim_f32_to_bf16(float f) {
  uint32_t u = shim_f32_bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40u); /* quiet NaN */
  return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

/* Philox-4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3"). */
SHIM_HD void shim_philox(uint64_t seed, uint64_t counter, uint32_t out[4]) {
  uint32_t c0 = (uint32_t)counter, c1 = (uint32_t)(counter >> 32), c2 = 0, c3 = 0;
  uint32_t k0 = (uint32_t)seed, k1 = (uint32_t)(seed >> 32);
  for (int round = 0; round < 10; round++) {
    uint64_t p0 = (uint64_t)0xD2511F53u * c0, p1 = (uint64_t)0xCD9E8D57u * c2;
    uint32_t n0 = (uint32_t)(p1 >> 32) ^ c1 ^ k0, n2 = (uint32_t)(p0 >> 32) ^ c3 ^ k1;
    c1 = (uint32_t)p1; c3 = (uint32_t)p0; c0 = n0; c2 = n2;
    k0 += 0x9E3779B9u; k1 += 0xBB67AE85u;
  }
  out[0] = c0; out[1] = c1; out[2] = c2; out[3] = c3;
}

/* Element `index` of the stream `seed`: uniform in [0, 1) with 53 random bits. */
SHIM_HD double shim_uniform_at(uint64_t seed, uint64_t index) {
  uint32_t r[4];
  shim_philox(seed, index, r);
  return (double)((((uint64_t)r[0] << 32) | r[1]) >> 11) * 0x1.0p-53;
}

/* The largest value below 1 in a floating dtype: a uniform draw is clamped to it before
 * rounding, so rounding to a narrow dtype cannot produce 1.0 and [0, 1) holds. */
SHIM_HD double shim_uniform_top(int32_t dtype) {
  switch (dtype) {
    case SHIM_F32: return 1.0 - 0x1.0p-24;
    case SHIM_F16: return 1.0 - 0x1.0p-11;
    case SHIM_BF16: return 1.0 - 0x1.0p-8;
    default: return 1.0 - 0x1.0p-53;
  }
}

/* Element `index` of the stream `seed`: standard normal by Box-Muller on one Philox block. */
SHIM_HD double shim_normal_at(uint64_t seed, uint64_t index) {
  uint32_t r[4];
  shim_philox(seed, index, r);
  double u1 = ((double)((((uint64_t)r[0] << 32) | r[1]) >> 11) + 1.0) * 0x1.0p-53; /* (0, 1] */
  double u2 = (double)((((uint64_t)r[2] << 32) | r[3]) >> 11) * 0x1.0p-53;
  return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

#endif
