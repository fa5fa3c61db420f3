/* kernels/q6_k.h: matrix products with q6_k weights (kernels/types.h: GGUF's super-blocks of
 * 256 values in 16 sub-blocks of 16, 6-bit numbers less 32 with an int8 scale per sub-block and
 * a binary16 d per super-block), computed as kernels/simd.h defines: the activations quantized
 * as for q8_0 (kernels/quant.h: a group of 32 holds two sub-blocks), per group the exact
 * integer sc_a dot_a + sc_b dot_b, per super-block an fma chain over its 8 groups of dot_g *
 * xs_g, then acc = fma(d, that, acc). The portable definition (row by row from the file's
 * layout) and the format's record; x86 multiplies from panels rearranged at load
 * (kernels/x86/q6_k.h), ARM takes each super-block's dot products in NEON (kernels/arm/q6_k.h). */
#ifndef KERNELS_Q6_K_H
#define KERNELS_Q6_K_H

#include <stddef.h>
#include <stdint.h>

#include "arch.h"
#include "arm/q6_k.h"
#include "matrix.h"
#include "quant.h"
#include "types.h"
#include "x86/q6_k.h"

/* ---- the portable definition: row by row, from the file's layout ------------------------- */

/* The exact integers of one super-block's 8 groups with 256 activation quants: dots[g] = the
 * sum over the group's 32 values of scale x quant x activation, each sub-block of 16 with its
 * own int8 scale (at most 2 x 128 x 16 x 32 x 127 < 2^24 in size). */
__attribute__((unused)) static inline void q6_k_block_dots_generic(const uint8_t *block, const int8_t *x,
                                                                  int32_t dots[SUB_BLOCKS]) {
    for (int g = 0; g < SUB_BLOCKS; g++) {
        int32_t half[2] = {0, 0};
        for (int l = 0; l < 32; l++) half[l / 16] += q6_k_quant(block, 32 * g + l) * x[32 * g + l];
        dots[g] = (int8_t)block[192 + 2 * g] * half[0] + (int8_t)block[193 + 2 * g] * half[1];
    }
}

/* acc after one super-block: dsum over its groups, then fma(d, dsum, acc). */
static inline float q6_k_super_block(float acc, float d, const int32_t *dots, const float *xs) {
    float dsum = 0.0f;
    for (int g = 0; g < SUB_BLOCKS; g++) dsum = fmaf((float)dots[g], xs[g], dsum);
    return fmaf(d, dsum, acc);
}

static float q6_k_row_dot(const Matrix *w, int r, const int8_t *xq, const float *xs, const int32_t *xsum) {
    (void)xsum;
    const uint8_t *block = block_row(w, r, SUPER_BLOCK, Q6_K_BYTES);
    float acc = 0.0f;
    for (int b = 0; b < w->cols / SUPER_BLOCK; b++, block += Q6_K_BYTES) {
        int32_t dots[SUB_BLOCKS];
        q6_k_block_dots(block, xq + b * SUPER_BLOCK, dots);
        acc = q6_k_super_block(acc, f16_at(block + 208), dots, xs + b * SUB_BLOCKS);
    }
    return acc;
}

/* The activations quantized as for q8_0, then row by row. */
static void q6_k_matmul_generic(float *out, const float *x, const Matrix *w, const float *bias, int T,
                                MatmulScratch *scratch) {
    quantize_rows(scratch->q, scratch->scale, NULL, x, T, w->cols);
    quant_matmul_rows(out, w, bias, T, scratch, q6_k_row_dot);
}

/* No copy at load: the kernels read the file's layout. */
__attribute__((unused)) static size_t q6_k_packed_bytes_generic(const Matrix *m) { (void)m; return 0; }
__attribute__((unused)) static void q6_k_pack_generic(Matrix *m, void *dst) { (void)m, (void)dst; }
__attribute__((unused)) static const char *q6_k_describe_generic(void) { return "scalar, row by row"; }

/* ---- the entry point and the format's record (kernels/matrix.h) -------------------------- */

static void q6_k_matmul(float *out, const float *x, const Matrix *w, const float *bias, int T, int separate,
                        MatmulScratch *scratch) {
    (void)separate;
    if (w->packed) q6_k_packed_matmul(out, x, w, bias, T, scratch);
    else q6_k_matmul_generic(out, x, w, bias, T, scratch);
}

static const MatrixKernels q6_k_kernels = {
    .packed_bytes = q6_k_packed_bytes, .pack = q6_k_pack, .matmul = q6_k_matmul,
    .scratch_init = quant_scratch_init, .describe = q6_k_describe,
};

#endif
