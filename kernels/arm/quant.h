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
#endif

#endif
