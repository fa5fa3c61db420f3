/* kernels/q2_k_q3_k.h: matrix products with q2_k and q3_k weights (kernels/types.h: GGUF's
 * super-blocks of 256 values in 16 sub-blocks of 16, each with its own scale: q2_k's 2-bit
 * numbers with a 4-bit scale and min, value = (d * sc) * q - dmin * m; q3_k's 3-bit numbers
 * (-4..3) with a 6-bit scale, value = (d * (s - 32)) * q), computed as kernels/simd.h defines:
 * the activations quantized as for q8_0 (kernels/quant.h), per group of 32 (two sub-blocks) an
 * exact integer sum of each sub-block's scale times its dot product (and for q2_k of its min
 * times its activations' sum), fma chains over a super-block's 8 groups, then d and dmin. Only
 * the portable definition so far, row by row from the file's layout, on every instruction set. */
#ifndef KERNELS_Q2_K_Q3_K_H
#define KERNELS_Q2_K_Q3_K_H

#include <stddef.h>
#include <stdint.h>

#include "matrix.h"
#include "quant.h"
#include "types.h"

static float q2_k_row_dot(const Matrix *w, int r, const int8_t *xq, const float *xs, const int32_t *xsum) {
    (void)xsum;
    const uint8_t *block = block_row(w, r, SUPER_BLOCK, Q2_K_BYTES);
    float acc = 0.0f;
    for (int b = 0; b < w->cols / SUPER_BLOCK; b++, block += Q2_K_BYTES) {
        float dsum = 0.0f, msum = 0.0f;
        for (int g = 0; g < SUB_BLOCKS; g++) {
            int k = b * SUB_BLOCKS + g;
            const int8_t *x = xq + k * QUANT_GROUP;
            int32_t dot = 0, mins = 0;
            for (int half = 0; half < 2; half++) {
                uint8_t sc = block[2 * g + half];
                int32_t part = 0, sum = 0;
                for (int l = 16 * half; l < 16 * half + 16; l++) {
                    part += k_two_bits(block + 16, 32 * g + l) * x[l];
                    sum += x[l];
                }
                dot += (sc & 15) * part;
                mins += (sc >> 4) * sum;
            }
            dsum = fmaf((float)dot, xs[k], dsum);
            msum = fmaf((float)mins, xs[k], msum);
        }
        acc = fmaf(f16_at(block + 80), dsum, acc);
        acc = fmaf(-f16_at(block + 82), msum, acc);
    }
    return acc;
}

static float q3_k_row_dot(const Matrix *w, int r, const int8_t *xq, const float *xs, const int32_t *xsum) {
    (void)xsum;
    const uint8_t *block = block_row(w, r, SUPER_BLOCK, Q3_K_BYTES);
    float acc = 0.0f;
    for (int b = 0; b < w->cols / SUPER_BLOCK; b++, block += Q3_K_BYTES) {
        float dsum = 0.0f;
        for (int g = 0; g < SUB_BLOCKS; g++) {
            int k = b * SUB_BLOCKS + g;
            const int8_t *x = xq + k * QUANT_GROUP;
            int32_t dot = 0;
            for (int half = 0; half < 2; half++) {
                int32_t part = 0;
                for (int l = 16 * half; l < 16 * half + 16; l++) part += q3_k_number(block, 32 * g + l) * x[l];
                dot += (q3_k_scale(block + 96, 2 * g + half) - 32) * part;
            }
            dsum = fmaf((float)dot, xs[k], dsum);
        }
        acc = fmaf(f16_at(block + 108), dsum, acc);
    }
    return acc;
}

ROW_BY_ROW_FORMAT(q2_k)
ROW_BY_ROW_FORMAT(q3_k)

#endif
