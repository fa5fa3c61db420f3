/* kernels/arm/q5_0.h: q5_0 on AArch64 (kernels/q5_0.h is the format and its portable
 * definition): a block's 32 quants (5-bit numbers - 16) built in two NEON registers from its
 * nibbles and fifth bits, then their exact integer dot product with the activations
 * (int8_dot32), row by row from the file's layout. */
#ifndef KERNELS_ARM_Q5_0_H
#define KERNELS_ARM_Q5_0_H

#include "../arch.h"

#if defined(KERNELS_ARM)
#include <arm_neon.h>
#include <stdint.h>
#include <string.h>

#include "quant.h"

/* A q5_0 or q5_1 block's 32 numbers (0..31) from its qh (as a uint32) and qs, less `offset`. */
static inline void q5_numbers_neon(uint32_t qh, const uint8_t *qs, uint8_t offset, int8x16_t *first, int8x16_t *second) {
    uint8x16_t v = vld1q_u8(qs);
    uint8x16_t lo = vorrq_u8(vandq_u8(v, vdupq_n_u8(15)), fifth_bits16(qh & 0xFFFF));
    uint8x16_t hi = vorrq_u8(vshrq_n_u8(v, 4), fifth_bits16(qh >> 16));
    *first = vreinterpretq_s8_u8(vsubq_u8(lo, vdupq_n_u8(offset)));
    *second = vreinterpretq_s8_u8(vsubq_u8(hi, vdupq_n_u8(offset)));
}

static inline int32_t q5_0_group_dot(const uint8_t *block, const int8_t *x) {
    uint32_t qh;
    memcpy(&qh, block + 2, 4);
    int8x16_t first, second;
    q5_numbers_neon(qh, block + 6, 16, &first, &second);
    return int8_dot32(first, second, x);
}

static const char *q5_0_describe(void) {
#if defined(__ARM_FEATURE_DOTPROD)
    return "neon-sdot, row by row";
#else
    return "neon, row by row";
#endif
}
#endif

#endif
