/* kernels/arm/q4_k.h: q4_k on AArch64 (kernels/q4_k.h is the format and its portable
 * definition): a super-block's 8 exact integer dot products in NEON, each 32-byte run of its
 * nibbles giving one sub-block (low nibbles) and the next (high), row by row from the file's
 * layout. */
#ifndef KERNELS_ARM_Q4_K_H
#define KERNELS_ARM_Q4_K_H

#include "../arch.h"

#if defined(KERNELS_ARM)
#include <arm_neon.h>
#include <stdint.h>

#include "quant.h"

static inline void q4_k_block_dots(const uint8_t *block, const int8_t *x, int32_t dots[8]) {
    const uint8_t *qs = block + 16;
    for (int c = 0; c < 4; c++) {
        uint8x16_t v0 = vld1q_u8(qs + 32 * c), v1 = vld1q_u8(qs + 32 * c + 16), low4 = vdupq_n_u8(15);
        dots[2 * c] = int8_dot32(vreinterpretq_s8_u8(vandq_u8(v0, low4)), vreinterpretq_s8_u8(vandq_u8(v1, low4)), x + 64 * c);
        dots[2 * c + 1] = int8_dot32(vreinterpretq_s8_u8(vshrq_n_u8(v0, 4)), vreinterpretq_s8_u8(vshrq_n_u8(v1, 4)), x + 64 * c + 32);
    }
}

static const char *q4_k_describe(void) {
#if defined(__ARM_FEATURE_DOTPROD)
    return "neon-sdot, row by row";
#else
    return "neon, row by row";
#endif
}
#endif

#endif
