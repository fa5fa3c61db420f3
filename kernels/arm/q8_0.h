/* kernels/arm/q8_0.h: q8_0 on AArch64 (kernels/q8_0.h is the format and its portable
 * definition): the exact integer dot product of a group of 32 weight quants with 32 activation
 * quants, in NEON, row by row from the file's layout. */
#ifndef KERNELS_ARM_Q8_0_H
#define KERNELS_ARM_Q8_0_H

#include "../arch.h"

#if defined(KERNELS_ARM)
#include <arm_neon.h>
#include <stdint.h>

static inline int32_t q8_0_group_dot(const int8_t *w, const int8_t *x) {
#if defined(__ARM_FEATURE_DOTPROD)
    int32x4_t dots = vdotq_s32(vdupq_n_s32(0), vld1q_s8(w), vld1q_s8(x));
    return vaddvq_s32(vdotq_s32(dots, vld1q_s8(w + 16), vld1q_s8(x + 16)));
#else
    /* without sdot (Cortex-A53/A72): int8 x int8 to int16 (two products per lane: at most
     * 2 x 127 x 127, which fits), then pairwise into int32 */
    int8x16_t w0 = vld1q_s8(w), w1 = vld1q_s8(w + 16), x0 = vld1q_s8(x), x1 = vld1q_s8(x + 16);
    int16x8_t p0 = vmlal_s8(vmull_s8(vget_low_s8(w0), vget_low_s8(x0)), vget_high_s8(w0), vget_high_s8(x0));
    int16x8_t p1 = vmlal_s8(vmull_s8(vget_low_s8(w1), vget_low_s8(x1)), vget_high_s8(w1), vget_high_s8(x1));
    return vaddvq_s32(vpadalq_s16(vpaddlq_s16(p0), p1));
#endif
}

static const char *q8_0_describe(void) {
#if defined(__ARM_FEATURE_DOTPROD)
    return "neon-sdot, row by row (prefill row by row per token)";
#else
    return "neon, row by row (prefill row by row per token)";
#endif
}
#endif

#endif
