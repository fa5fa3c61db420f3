/* kernels/q5_k.h: matrix products with q5_k weights (kernels/types.h: GGUF's super-blocks of
 * 256 values in 8 sub-blocks of 32, 5-bit numbers with 6-bit scales and mins and a binary16 d
 * and dmin per super-block: q4_k's layout with a fifth bit per value), computed as kernels/simd.h defines: the activations quantized as
 * for q8_0 with each group's sum (kernels/quant.h: a group of 32 is a sub-block), an exact
 * integer dot product per sub-block, and per super-block the two fma chains of
 * k_super_block(). The portable definition (row by row from the file's layout) and the
 * format's record; x86 multiplies from panels rearranged at load (kernels/x86/q5_k.h), ARM
 * takes each super-block's dot products in NEON (kernels/arm/q5_k.h). */
#ifndef KERNELS_Q5_K_H
#define KERNELS_Q5_K_H

#include <stddef.h>
#include <stdint.h>

#include "arch.h"
#include "arm/q5_k.h"
#include "matrix.h"
#include "quant.h"
#include "types.h"
#include "x86/q5_k.h"

/* ---- the portable definition: row by row, from the file's layout ------------------------- */

/* The exact integer dot products of one super-block's 8 sub-blocks (5-bit numbers 0..31) with
 * 256 activation quants: dots[g] for sub-block g. */
__attribute__((unused)) static inline void q5_k_block_dots_generic(const uint8_t *block, const int8_t *x,
                                                                  int32_t dots[SUB_BLOCKS]) {
    for (int g = 0; g < SUB_BLOCKS; g++) {
        int32_t dot = 0;
        for (int l = 0; l < 32; l++) dot += q5_k_number(block, 32 * g + l) * x[32 * g + l];
        dots[g] = dot;
    }
}

static float q5_k_row_dot(const Matrix *w, int r, const int8_t *xq, const float *xs, const int32_t *xsum) {
    const uint8_t *block = block_row(w, r, SUPER_BLOCK, Q5_K_BYTES);
    float acc = 0.0f;
    for (int b = 0; b < w->cols / SUPER_BLOCK; b++, block += Q5_K_BYTES) {
        int32_t dots[SUB_BLOCKS];
        uint8_t sc[SUB_BLOCKS], m[SUB_BLOCKS];
        q5_k_block_dots(block, xq + b * SUPER_BLOCK, dots);
        k_scales(block + 4, sc, m);
        acc = k_super_block(acc, f16_at(block), f16_at(block + 2), sc, m, dots, xs + b * SUB_BLOCKS,
                            xsum + b * SUB_BLOCKS);
    }
    return acc;
}

/* The activations quantized as for q8_0, with each group's sum, then row by row. */
static void q5_k_matmul_generic(float *out, const float *x, const Matrix *w, const float *bias, int T,
                                MatmulScratch *scratch) {
    quantize_rows(scratch->q, scratch->scale, scratch->sum, x, T, w->cols);
    quant_matmul_rows(out, w, bias, T, scratch, q5_k_row_dot);
}

/* No copy at load: the kernels read the file's layout. */
__attribute__((unused)) static size_t q5_k_packed_bytes_generic(const Matrix *m) { (void)m; return 0; }
__attribute__((unused)) static void q5_k_pack_generic(Matrix *m, void *dst) { (void)m, (void)dst; }
__attribute__((unused)) static const char *q5_k_describe_generic(void) { return "scalar, row by row"; }

/* ---- the entry point and the format's record (kernels/matrix.h) -------------------------- */

static void q5_k_matmul(float *out, const float *x, const Matrix *w, const float *bias, int T, int separate,
                        MatmulScratch *scratch) {
    (void)separate;
    if (w->packed) q5_k_packed_matmul(out, x, w, bias, T, scratch);
    else q5_k_matmul_generic(out, x, w, bias, T, scratch);
}

static const MatrixKernels q5_k_kernels = {
    .packed_bytes = q5_k_packed_bytes, .pack = q5_k_pack, .matmul = q5_k_matmul,
    .scratch_init = quant_scratch_init, .describe = q5_k_describe,
};

#endif
