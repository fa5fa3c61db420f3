/* kernels/arm/q5_k.h: q5_k on AArch64 (kernels/q5_k.h is the format and its portable
 * definition): q4_k's nibbles (kernels/arm/q4_k.h) with each sub-block's fifth bits from qh
 * (bit j of qh[l] for sub-block j), a super-block's 8 exact integer dot products in NEON, row
 * by row from the file's layout. */
#ifndef KERNELS_ARM_Q5_K_H
#define KERNELS_ARM_Q5_K_H

#include "../arch.h"

#if defined(KERNELS_ARM)
#include <arm_neon.h>
#include <stdint.h>

#include "q4_k.h"
#include "quant.h"

static inline void q5_k_block_dots(const uint8_t *block, const int8_t *x, int32_t dots[8]) {
    const uint8_t *qh = block + 16, *qs = block + 48;
    uint8x16_t h0 = vld1q_u8(qh), h1 = vld1q_u8(qh + 16), low4 = vdupq_n_u8(15), sixteen = vdupq_n_u8(16);
    for (int c = 0; c < 4; c++) {
        uint8x16_t v0 = vld1q_u8(qs + 32 * c), v1 = vld1q_u8(qs + 32 * c + 16);
        uint8x16_t lo_bit = vdupq_n_u8((uint8_t)(1 << (2 * c))), hi_bit = vdupq_n_u8((uint8_t)(2 << (2 * c)));
        uint8x16_t a0 = vorrq_u8(vandq_u8(v0, low4), vandq_u8(vtstq_u8(h0, lo_bit), sixteen));
        uint8x16_t a1 = vorrq_u8(vandq_u8(v1, low4), vandq_u8(vtstq_u8(h1, lo_bit), sixteen));
        uint8x16_t b0 = vorrq_u8(vshrq_n_u8(v0, 4), vandq_u8(vtstq_u8(h0, hi_bit), sixteen));
        uint8x16_t b1 = vorrq_u8(vshrq_n_u8(v1, 4), vandq_u8(vtstq_u8(h1, hi_bit), sixteen));
        dots[2 * c] = int8_dot32(vreinterpretq_s8_u8(a0), vreinterpretq_s8_u8(a1), x + 64 * c);
        dots[2 * c + 1] = int8_dot32(vreinterpretq_s8_u8(b0), vreinterpretq_s8_u8(b1), x + 64 * c + 32);
    }
}

static const char *q5_k_describe(void) { return q4_k_describe(); }
#endif

#endif
