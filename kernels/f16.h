/* kernels/f16.h: IEEE 754 binary16 ("half precision"), the key/value cache's default number
 * format (kv_cache.h). A half has 1 sign bit, 5 exponent bits (bias 15) and 10 fraction bits:
 * 11 significant bits against float32's 24, largest finite value 65504, smallest normal 2^-14,
 * subnormals down to 2^-24.
 *
 * float32 -> half rounds to nearest, ties to even (IEEE 754's default); past 65504 (from 65520
 * on, the tie that rounds to even away from 65504) gives infinity, NaN stays NaN. half ->
 * float32 is exact. Every path converts with the same rounding, so the cache holds the same
 * bits on every CPU: F16C's and AVX-512's conversion instructions on x86 (kernels/x86/f16.h),
 * NEON's on ARM (kernels/arm/f16.h; their rounding mode is the default, round to nearest even),
 * and the portable C below everywhere else. tests/test_kernels.c checks them against each other and against hand-worked values. */
#ifndef KERNELS_F16_H
#define KERNELS_F16_H

#include <stdint.h>
#include <string.h>

#include "arch.h"
#include "simd.h"
#include "types.h"

/* float32 -> binary16, round to nearest even, in portable C. */
static inline uint16_t f16_from_f32(float f) {
    uint32_t x;
    memcpy(&x, &f, sizeof x);
    uint16_t sign = (uint16_t)((x >> 16) & 0x8000u);
    uint32_t mag = x & 0x7FFFFFFFu;
    if (mag > 0x7F800000u) return sign | 0x7E00u;  /* NaN: a quiet NaN */
    if (mag >= 0x477FF000u) return sign | 0x7C00u; /* >= 65520 (and infinity): infinity */
    if (mag >= 0x38800000u) {                      /* >= 2^-14: a normal half */
        uint32_t h = mag - 0x38000000u;            /* the exponent's bias 127 -> 15 */
        h += 0xFFFu + ((h >> 13) & 1u);            /* + half an ulp, less one when the ulp is even */
        return sign | (uint16_t)(h >> 13);         /* a carry out of the fraction bumps the exponent */
    }
    /* a subnormal half (or zero): the multiple of 2^-24 nearest |f|, ties to even, by float
     * arithmetic: |f| * 2^24 is exact, and adding 2^23 rounds it to a whole number (the float
     * rounding mode is round to nearest even), which then sits in the low fraction bits. */
    float scaled = fabsf(f) * 16777216.0f + 8388608.0f;
    uint32_t bits;
    memcpy(&bits, &scaled, sizeof bits);
    return sign | (uint16_t)(bits - 0x4B000000u);
}

/* binary16 -> float32: kernels/types.h's f32_from_f16, exact. */

/* VW halves -> a vector of VW floats, one at a time. */
__attribute__((unused)) static inline vf vf_load_f16_generic(const uint16_t *p) {
    float f[VW];
    for (int i = 0; i < VW; i++) f[i] = f32_from_f16(p[i]);
    return vf_load(f);
}

/* The first floats of src[0..n) -> halves, as many as a family converts in vectors: none here. */
__attribute__((unused)) static inline int f16_store_vectors_generic(uint16_t *dst, const float *src, int n) {
    (void)dst, (void)src, (void)n;
    return 0;
}

#include "arm/f16.h"
#include "x86/f16.h"

/* n floats -> halves: in vectors where the family converts, the rest one by one. */
static inline void f16_store(uint16_t *dst, const float *src, int n) {
    for (int i = f16_store_vectors(dst, src, n); i < n; i++) dst[i] = f16_from_f32(src[i]);
}

#endif
