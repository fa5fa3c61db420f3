/* kernels/iq4.h: matrix products with q4_1, iq4_nl and iq4_xs weights (kernels/types.h: GGUF's
 * blocks of 4-bit numbers: q4_1's with a binary16 scale d and min m, value = q * d + m; iq4_nl's
 * and iq4_xs's indices into 16 non-linear levels, value = d * level, iq4_xs with a 6-bit scale
 * per 32 values of a super-block of 256), computed as kernels/simd.h defines: the activations
 * quantized as for q8_0 with each group's sum of quants (kernels/quant.h), an exact integer dot
 * product per group of 32, then per group acc = fma(dot_g, scale_g * xs_g, acc) (scale_g: d, or
 * iq4_xs's d * (ls - 32), exact), and for q4_1 acc = fma(s_g, m_g * xs_g, acc). Only the portable
 * definition so far, row by row from the file's layout, on every instruction set. */
#ifndef KERNELS_IQ4_H
#define KERNELS_IQ4_H

#include <stddef.h>
#include <stdint.h>

#include "matrix.h"
#include "quant.h"
#include "types.h"

/* The exact integer dot products of a group's 32 nibbles with 32 activation quants: as numbers
 * (q4_1), or as the levels they index (iq4_nl, iq4_xs). */
static inline int32_t nibble_dot(const uint8_t *qs, const int8_t *x) {
    int32_t dot = 0;
    for (int j = 0; j < QUANT_GROUP; j++) dot += group_nibble(qs, j) * x[j];
    return dot;
}
static inline int32_t level_dot(const uint8_t *qs, const int8_t *x) {
    int32_t dot = 0;
    for (int j = 0; j < QUANT_GROUP; j++) dot += iq4_levels[group_nibble(qs, j)] * x[j];
    return dot;
}

static float q4_1_row_dot(const Matrix *w, int r, const int8_t *xq, const float *xs, const int32_t *xsum) {
    const uint8_t *block = block_row(w, r, QUANT_GROUP, Q4_1_BYTES);
    float acc = 0.0f;
    for (int b = 0; b < w->cols / QUANT_GROUP; b++, block += Q4_1_BYTES) {
        acc = fmaf((float)nibble_dot(block + 4, xq + b * QUANT_GROUP), f16_at(block) * xs[b], acc);
        acc = fmaf((float)xsum[b], f16_at(block + 2) * xs[b], acc);
    }
    return acc;
}

static float iq4_nl_row_dot(const Matrix *w, int r, const int8_t *xq, const float *xs, const int32_t *xsum) {
    (void)xsum;
    const uint8_t *block = block_row(w, r, QUANT_GROUP, IQ4_NL_BYTES);
    float acc = 0.0f;
    for (int b = 0; b < w->cols / QUANT_GROUP; b++, block += IQ4_NL_BYTES)
        acc = fmaf((float)level_dot(block + 2, xq + b * QUANT_GROUP), f16_at(block) * xs[b], acc);
    return acc;
}

static float iq4_xs_row_dot(const Matrix *w, int r, const int8_t *xq, const float *xs, const int32_t *xsum) {
    (void)xsum;
    const uint8_t *block = block_row(w, r, SUPER_BLOCK, IQ4_XS_BYTES);
    float acc = 0.0f;
    for (int b = 0; b < w->cols / SUPER_BLOCK; b++, block += IQ4_XS_BYTES) {
        float d = f16_at(block);
        for (int g = 0; g < SUB_BLOCKS; g++) {
            int k = b * SUB_BLOCKS + g;
            float scale = d * (float)(iq4_xs_scale(block, g) - 32);
            acc = fmaf((float)level_dot(block + 8 + 16 * g, xq + k * QUANT_GROUP), scale * xs[k], acc);
        }
    }
    return acc;
}

ROW_BY_ROW_FORMAT(q4_1)
ROW_BY_ROW_FORMAT(iq4_nl)
ROW_BY_ROW_FORMAT(iq4_xs)

#endif
