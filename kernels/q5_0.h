/* kernels/q5_0.h: matrix products with q5_0 weights (kernels/types.h: GGUF's blocks of 32
 * values, 5-bit numbers with one binary16 scale d, value = (number - 16) * d), computed as
 * kernels/simd.h defines: the activations quantized as for q8_0 (kernels/quant.h), an exact
 * integer dot product per block, an fma chain over the blocks of dot_g * (d_g * xs_g). This
 * file holds the portable definition (row by row from the file's layout) and the format's
 * record; x86 multiplies from panels rearranged at load (kernels/x86/q5_0.h), ARM takes each
 * block's dot product in NEON (kernels/arm/q5_0.h). */
#ifndef KERNELS_Q5_0_H
#define KERNELS_Q5_0_H

#include <stddef.h>
#include <stdint.h>

#include "arch.h"
#include "arm/q5_0.h"
#include "matrix.h"
#include "quant.h"
#include "types.h"
#include "x86/q5_0.h"

/* ---- the portable definition: row by row, from the file's layout ------------------------- */

/* The exact integer dot product of one block's quants (its 5-bit numbers - 16) with 32
 * activation quants. */
__attribute__((unused)) static inline int32_t q5_0_group_dot_generic(const uint8_t *block, const int8_t *x) {
    uint32_t qh = u32_at(block + 2);
    int32_t dot = 0;
    for (int j = 0; j < QUANT_GROUP; j++) dot += (q5_number(qh, block + 6, j) - 16) * x[j];
    return dot;
}

static float q5_0_row_dot(const Matrix *w, int r, const int8_t *xq, const float *xs, const int32_t *xsum) {
    (void)xsum;
    const uint8_t *block = block_row(w, r, QUANT_GROUP, Q5_0_BYTES);
    float acc = 0.0f;
    for (int b = 0; b < w->cols / QUANT_GROUP; b++, block += Q5_0_BYTES)
        acc = fmaf((float)q5_0_group_dot(block, xq + b * QUANT_GROUP), f16_at(block) * xs[b], acc);
    return acc;
}

/* The activations quantized as for q8_0, then row by row. */
static void q5_0_matmul_generic(float *out, const float *x, const Matrix *w, const float *bias, int T,
                                MatmulScratch *scratch) {
    quantize_rows(scratch->q, scratch->scale, NULL, x, T, w->cols);
    quant_matmul_rows(out, w, bias, T, scratch, q5_0_row_dot);
}

/* No copy at load: the kernels read the file's layout. */
__attribute__((unused)) static size_t q5_0_packed_bytes_generic(const Matrix *m) { (void)m; return 0; }
__attribute__((unused)) static void q5_0_pack_generic(Matrix *m, void *dst) { (void)m, (void)dst; }
__attribute__((unused)) static const char *q5_0_describe_generic(void) { return "scalar, row by row"; }

/* ---- the entry point and the format's record (kernels/matrix.h) -------------------------- */

static void q5_0_matmul(float *out, const float *x, const Matrix *w, const float *bias, int T, int separate,
                        MatmulScratch *scratch) {
    (void)separate;
    if (w->packed) q5_0_packed_matmul(out, x, w, bias, T, scratch);
    else q5_0_matmul_generic(out, x, w, bias, T, scratch);
}

static const MatrixKernels q5_0_kernels = {
    .packed_bytes = q5_0_packed_bytes, .pack = q5_0_pack, .matmul = q5_0_matmul,
    .scratch_init = quant_scratch_init, .describe = q5_0_describe,
};

#endif
