/* kernels/arm/q6_k.h: q6_k on AArch64 (kernels/q6_k.h is the format and its portable
 * definition): a super-block's quants (6-bit numbers - 32) built in NEON, 32 values of one half
 * of the block at a time (4 groups share its qh bytes), each sub-block's exact integer dot
 * product, and per group sc_a dot_a + sc_b dot_b; row by row from the file's layout. */
#ifndef KERNELS_ARM_Q6_K_H
#define KERNELS_ARM_Q6_K_H

#include "../arch.h"

#if defined(KERNELS_ARM)
#include <arm_neon.h>
#include <stdint.h>

#include "quant.h"

static inline void q6_k_block_dots(const uint8_t *block, const int8_t *x, int32_t dots[8]) {
    const int8_t *scales = (const int8_t *)block + 192;
    for (int h = 0; h < 2; h++) { /* values 128h .. 128h + 127: groups 4h .. 4h + 3 */
        const uint8_t *ql = block + 64 * h, *qh = block + 128 + 32 * h;
        uint8x16_t high[2] = {vld1q_u8(qh), vld1q_u8(qh + 16)};
        for (int k = 0; k < 4; k++) {
            int g = 4 * h + k, sub[2];
            for (int part = 0; part < 2; part++) { /* l = 16 part .. 16 part + 15 */
                uint8x16_t low = vld1q_u8(ql + 32 * (k & 1) + 16 * part);
                low = k < 2 ? vandq_u8(low, vdupq_n_u8(15)) : vshrq_n_u8(low, 4);
                uint8x16_t top = vandq_u8(vshlq_u8(high[part], vdupq_n_s8((int8_t)(-2 * k))), vdupq_n_u8(3));
                int8x16_t q = vsubq_s8(vreinterpretq_s8_u8(vorrq_u8(low, vshlq_n_u8(top, 4))), vdupq_n_s8(32));
                sub[part] = int8_dot16(q, vld1q_s8(x + 32 * g + 16 * part));
            }
            dots[g] = scales[2 * g] * sub[0] + scales[2 * g + 1] * sub[1];
        }
    }
}

static const char *q6_k_describe(void) {
#if defined(__ARM_FEATURE_DOTPROD)
    return "neon-sdot, row by row";
#else
    return "neon, row by row";
#endif
}
#endif

#endif
