/* kernels/arm/attention.h: a q8_0 query's integer dot products with 16 keys at a time on
 * AArch64 with the dot-product instructions (sdot); kernels/attention.h is the portable
 * definition. */
#ifndef KERNELS_ARM_ATTENTION_H
#define KERNELS_ARM_ATTENTION_H

#include "../arch.h"

#if defined(KERNELS_ARM) && defined(__ARM_FEATURE_DOTPROD)
#include <arm_neon.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "../heads.h"


/* The dot products of one group's query quants q (quads of four, from the group's first
 * dimension) with the same dimensions of the keys of nb blocks (nb <= 4) of KEY_BLOCK
 * positions: keys points at the group's first quad in the first block, the others block_bytes
 * apart; dots[b * 16 + i] = the sum over the group's dimensions of key quant x query quant for
 * position i of block b, an exact integer on every path (at most 32 x 127 x 127 in size). qsum:
 * the sum of the group's query quants (VNNI multiplies unsigned bytes by signed ones: the keys
 * go in as quant + 128, and 128 x qsum comes off again). */
static inline __attribute__((always_inline)) void key_dots(const int8_t *keys, size_t block_bytes, int nb,
                                                           const int8_t *q, int quads, int32_t qsum, int32_t *dots) {
    (void)qsum;
    int32x4_t acc[16];
    for (int i = 0; i < 16; i++) acc[i] = vdupq_n_s32(0);
    for (int c = 0; c < quads; c++) {
        int32_t four;
        memcpy(&four, q + 4 * c, sizeof four);
        int8x16_t query = vreinterpretq_s8_s32(vdupq_n_s32(four));
        for (int b = 0; b < nb; b++)
            for (int h = 0; h < 4; h++) /* positions 4h..4h+3 */
                acc[4 * b + h] = vdotq_s32(acc[4 * b + h], vld1q_s8(keys + b * block_bytes + (size_t)c * 64 + 16 * h), query);
    }
    for (int i = 0; i < 4 * nb; i++) vst1q_s32(dots + 4 * i, acc[i]);
}
#endif

#endif
