/* vecmath.h: float exp, tanh, sigmoid, erf and gelu written without branches or library calls,
 * so loops over them vectorise (libm's expf is one call per element), and the instruction sets
 * the hot loops are compiled for.
 *
 * Accuracy against double (every 7th float bit pattern, 613 million inputs, as built: the
 * polynomials fused into FMAs where the host has them; a million samples in
 * tests/shim/vecmath.test.ts): exp 1.02 ulps, tanh 1.32, sigmoid 2.71, silu 3.43, erf 2.82,
 * gelu 2.44 above x = -1 and within 3.6e-8 below; NaN gives NaN, infinities give exp's 0 and inf, tanh's and
 * erf's -1 and 1. f64 keeps libm. */
#ifndef MONARCH_SHIM_CPU_VECMATH_H
#define MONARCH_SHIM_CPU_VECMATH_H

#include <stdint.h>
#include <string.h>

/* The library is built once and may run on other x86 hosts, so the hot loops are compiled for
 * three instruction sets and the loader picks the best the host has (GCC's function
 * multiversioning, an ifunc resolved by cpuid), instead of -march=native at build time. */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define SHIM_CPU_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define SHIM_CPU_CLONES
#endif

/* Sixteen floats (eight doubles) as GCC vector extensions, for the folds the loop vectoriser
 * will not reorder (a running max or sum): each clone lowers them to its widest registers.
 * Macros, not functions, because vector arguments by value change the ABI between clones. */
typedef float shim_v16f __attribute__((vector_size(64)));
typedef int32_t shim_v16i __attribute__((vector_size(64)));
typedef float shim_v8f __attribute__((vector_size(32)));
typedef double shim_v8d __attribute__((vector_size(64)));
#define SHIM_V16_LOAD(v, p) memcpy(&(v), (p), sizeof(shim_v16f))
#define SHIM_V16_SPLAT(x) ((shim_v16f){0} + (x))
/* mask ? a : b, lane by lane (mask lanes are all ones or zero, as comparisons give). */
#define SHIM_V16_SELECT(mask, a, b) ((shim_v16f)(((mask) & (shim_v16i)(a)) | (~(mask) & (shim_v16i)(b))))

static inline uint32_t shim_vm_bits(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  return u;
}

static inline float shim_vm_float(uint32_t u) {
  float f;
  memcpy(&f, &u, 4);
  return f;
}

/* exp(x) = 2^n exp(r), n = round(x / ln 2), r = x - n ln 2 in two parts (Cody and Waite), exp(r)
 * by Cephes' degree-6 polynomial. 2^n is applied as two factors 2^(n/2) 2^(n - n/2), each a
 * normal float, so results that overflow become inf and tiny ones round once into the
 * subnormals. x is clamped first (a NaN passes the comparisons and stays NaN). */
static inline float shim_vexpf(float x) {
  x = x > 89.0f ? 89.0f : x;
  x = x < -150.0f ? -150.0f : x;
  const float magic = 12582912.0f; /* 1.5 * 2^23: adding it rounds to an integer in the low bits */
  float t = x * 1.44269504088896341f + magic;
  int32_t n = (int32_t)(shim_vm_bits(t) - shim_vm_bits(magic));
  float fn = t - magic;
  float r = x - fn * 0.693359375f;
  r = r - fn * -2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  float y = p * r * r + r + 1.0f;
  int32_t n1 = n >> 1, n2 = n - n1;
  return y * shim_vm_float((uint32_t)(n1 + 127) << 23) * shim_vm_float((uint32_t)(n2 + 127) << 23);
}

/* tanh: Cephes' odd polynomial below |x| 0.625, else 1 - 2 / (exp(2|x|) + 1) with x's sign;
 * both are computed and one picked, so the loop has no branch. */
static inline float shim_vtanhf(float x) {
  float z = x * x;
  float p = -5.70498872745e-3f;
  p = p * z + 2.06390887954e-2f;
  p = p * z - 5.37397155531e-2f;
  p = p * z + 1.33314422036e-1f;
  p = p * z - 3.33332819422e-1f;
  float small = x * (1.0f + p * z); /* not p z x + x: that turns -0 into +0 */
  float ax = x < 0 ? -x : x;
  float big = 1.0f - 2.0f / (shim_vexpf(2.0f * ax) + 1.0f);
  big = x < 0 ? -big : big;
  return ax < 0.625f ? small : big;
}

/* 1 / (1 + exp(-x)), as e / (1 + e) with e = exp(x) for negative x, so tiny results keep
 * their precision instead of exp(-x) overflowing. */
static inline float shim_vsigmoidf(float x) {
  float e = shim_vexpf(x < 0 ? x : -x), s = 1.0f / (1.0f + e);
  return x < 0 ? e * s : s;
}

/* erfc(s / sqrt 2) for s >= 0 (2 Phi(-s), the normal tail), without a division: exp(-P(s)) with
 * P a degree-10 polynomial fitted to -log erfc(s / sqrt 2) over [0, 5.7] (weighted by erfc, so
 * the error in P, below 1.2e-8 for s < 1, is smallest where erfc is largest). s is clamped to
 * 5.7, where erfc is 1.2e-8 (callers treat beyond it). */
static inline float shim_verfc_sqrt2(float s) {
  s = s < 5.7f ? s : 5.7f; /* a NaN becomes 5.7: the callers' x carries it */
  float p = 2.276131310e-08f;
  p = p * s - 6.570030863e-07f;
  p = p * s + 8.155468099e-06f;
  p = p * s - 5.555248661e-05f;
  p = p * s + 2.002584855e-04f;
  p = p * s - 8.335042140e-06f;
  p = p * s - 4.810773583e-03f;
  p = p * s + 3.634999470e-02f;
  p = p * s + 3.183064886e-01f;
  p = p * s + 7.978848547e-01f;
  return shim_vexpf(-(p * s));
}

/* sqrt(pi) / 2 erf(x) / x - 1 over z = x^2, by its Taylor series through x^13 (relative error
 * below 1e-9 for |x| < 0.5): sum over n >= 1 of (-1)^n z^n / (n! (2n + 1)). */
static inline float shim_verf_series(float z) {
  float p = -1.0f / 75600.0f;
  p = p * z + 1.0f / 9360.0f;
  p = p * z - 1.0f / 1320.0f;
  p = p * z + 1.0f / 216.0f;
  p = p * z - 1.0f / 42.0f;
  p = p * z + 1.0f / 10.0f;
  p = p * z - 1.0f / 3.0f;
  return p * z;
}

/* erf: the series below |x| 0.5, else 1 - erfc(|x|) with x's sign; both computed and one picked. */
static inline float shim_verff(float x) {
  const float two_over_sqrt_pi = 1.1283791670955126f;
  float small = two_over_sqrt_pi * x * (1.0f + shim_verf_series(x * x));
  float ax = x < 0 ? -x : x, big = 1.0f - shim_verfc_sqrt2(ax * 1.41421356237309505f);
  big = x < 0 ? -big : big;
  big = x != x ? x : big;
  return ax < 0.5f ? small : big;
}

/* gelu, the erf form: x Phi(x) with Phi(x) = 1 - erfc(x / sqrt 2) / 2 for x >= 0 and
 * erfc(|x| / sqrt 2) / 2 below, so the negative tail does not cancel; 0 below x = -5.7, where
 * |gelu| < 4e-8. One exp and one polynomial, no division. */
static inline float shim_vgeluf(float x) {
  float e = 0.5f * shim_verfc_sqrt2(x < 0 ? -x : x);
  float phi = x < 0 ? e : 1.0f - e;
  phi = x < -5.7f ? 0.0f : phi;
  return x * phi;
}

#endif
