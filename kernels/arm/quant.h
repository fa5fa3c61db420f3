/* kernels/arm/quant.h: kernels/quant.h's activation quantizer for one group of 32 values, four
 * values to a vector, each step exactly the portable one: the maximum of |x| is the same number
 * in any order (maxnm returns the number when the other is NaN), NaN becomes 0, and the
 * conversion to integers rounds to nearest even as rintf does.
 * The decode step quantizes every product's input on one thread, so this is on its critical
 * path (docs/speed.md). */
#ifndef KERNELS_ARM_QUANT_H
#define KERNELS_ARM_QUANT_H

#include "../arch.h"

#if defined(KERNELS_ARM)
#include <arm_neon.h>
#include <stdint.h>

static inline void quantize_group(int8_t *q, float *scale, const float *x) {
    float32x4_t v[8], amax = vdupq_n_f32(0.0f);
    for (int k = 0; k < 8; k++) {
        v[k] = vld1q_f32(x + 4 * k);
        amax = vmaxnmq_f32(amax, vabsq_f32(v[k]));
    }
    float a = vmaxnmvq_f32(amax);
    float32x4_t inv = vdupq_n_f32(a > 0.0f ? 127.0f / a : 0.0f);
    *scale = a / 127.0f;
    int16x8_t halves[4];
    for (int k = 0; k < 8; k += 2) {
        int32x4_t i2[2];
        for (int u = 0; u < 2; u++) {
            float32x4_t y = vmulq_f32(v[k + u], inv);
            /* a NaN passes the clamp (NEON's min and max return it) and converts to 0 */
            y = vminq_f32(vmaxq_f32(y, vdupq_n_f32(-127.0f)), vdupq_n_f32(127.0f));
            i2[u] = vcvtnq_s32_f32(y);
        }
        halves[k / 2] = vcombine_s16(vqmovn_s32(i2[0]), vqmovn_s32(i2[1]));
    }
    vst1q_s8(q, vcombine_s8(vqmovn_s16(halves[0]), vqmovn_s16(halves[1])));
    vst1q_s8(q + 16, vcombine_s8(vqmovn_s16(halves[2]), vqmovn_s16(halves[3])));
}

/* The block formats' exact integer dot products of 16 (32) int8 weights w with 16 (32)
 * activation quants x: sdot where targeted; else int8 x int8 into int16 lanes, two products
 * a lane (the formats' weights are at most 32 in size: 2 x 32 x 127 fits), then pairwise into
 * int32. */
static inline int32_t int8_dot16(int8x16_t w, int8x16_t x) {
#if defined(__ARM_FEATURE_DOTPROD)
    return vaddvq_s32(vdotq_s32(vdupq_n_s32(0), w, x));
#else
    return vaddlvq_s16(vmlal_s8(vmull_s8(vget_low_s8(w), vget_low_s8(x)), vget_high_s8(w), vget_high_s8(x)));
#endif
}
static inline int32_t int8_dot32(int8x16_t w0, int8x16_t w1, const int8_t *x) {
#if defined(__ARM_FEATURE_DOTPROD)
    return vaddvq_s32(vdotq_s32(vdotq_s32(vdupq_n_s32(0), w0, vld1q_s8(x)), w1, vld1q_s8(x + 16)));
#else
    int8x16_t x0 = vld1q_s8(x), x1 = vld1q_s8(x + 16);
    int16x8_t p0 = vmlal_s8(vmull_s8(vget_low_s8(w0), vget_low_s8(x0)), vget_high_s8(w0), vget_high_s8(x0));
    int16x8_t p1 = vmlal_s8(vmull_s8(vget_low_s8(w1), vget_low_s8(x1)), vget_high_s8(w1), vget_high_s8(x1));
    return vaddvq_s32(vpadalq_s16(vpaddlq_s16(p0), p1));
#endif
}

/* 16 bytes, byte i 16 where bit i of the 16 bits `bits` is set, else 0 (a fifth bit's value). */
static inline uint8x16_t fifth_bits16(uint32_t bits) {
    static const uint8_t lane_bit[16] = {1, 2, 4, 8, 16, 32, 64, 128, 1, 2, 4, 8, 16, 32, 64, 128};
    uint8x16_t spread = vcombine_u8(vdup_n_u8((uint8_t)bits), vdup_n_u8((uint8_t)(bits >> 8)));
    return vandq_u8(vtstq_u8(spread, vld1q_u8(lane_bit)), vdupq_n_u8(16));
}
#endif

#endif
