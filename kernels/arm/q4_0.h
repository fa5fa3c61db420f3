/* kernels/arm/q4_0.h: q4_0 on AArch64 (kernels/q4_0.h is the format and its portable
 * definition): the exact integer dot product of a group (16 bytes of 4-bit quants) with 32
 * activation quants, in NEON, row by row from the file's layout. */
#ifndef KERNELS_ARM_Q4_0_H
#define KERNELS_ARM_Q4_0_H

#include "../arch.h"

#if defined(KERNELS_ARM)
#include <arm_neon.h>
#include <stdint.h>

static inline int32_t q4_0_group_dot(const uint8_t *w, const int8_t *x) {
    uint8x16_t v = vld1q_u8(w);
    int8x16_t lo = vsubq_s8(vreinterpretq_s8_u8(vandq_u8(v, vdupq_n_u8(15))), vdupq_n_s8(8));
    int8x16_t hi = vsubq_s8(vreinterpretq_s8_u8(vshrq_n_u8(v, 4)), vdupq_n_s8(8));
    int8x16_t x0 = vld1q_s8(x), x1 = vld1q_s8(x + 16);
#if defined(__ARM_FEATURE_DOTPROD)
    return vaddvq_s32(vdotq_s32(vdotq_s32(vdupq_n_s32(0), lo, x0), hi, x1));
#else
    /* products at most 8 x 127: pairs of them fit int16 */
    int16x8_t p0 = vmlal_s8(vmull_s8(vget_low_s8(lo), vget_low_s8(x0)), vget_high_s8(lo), vget_high_s8(x0));
    int16x8_t p1 = vmlal_s8(vmull_s8(vget_low_s8(hi), vget_low_s8(x1)), vget_high_s8(hi), vget_high_s8(x1));
    return vaddvq_s32(vpadalq_s16(vpaddlq_s16(p0), p1));
#endif
}

static const char *q4_0_describe(void) {
#if defined(__ARM_FEATURE_DOTPROD)
    return "neon-sdot, row by row";
#else
    return "neon, row by row";
#endif
}
#endif

#endif
