/* kernels/q4_0.h: matrix products with q4_0 weights (kernels/types.h: 4-bit quants -8..7 with
 * one float32 scale per QUANT_GROUP values along a row, two quants to a byte), computed as
 * kernels/simd.h defines: the activations quantized as for q8_0 (kernels/quant.h: per token, one
 * scale per group of 32, int8 quants), an exact integer dot product per group, an fma chain
 * over the groups of dot_g * (weight scale_g * activation scale_g): the same arithmetic as
 * q8_0, so every path gives the same bits. This file holds the portable definition (row by row
 * from the file's layout) and the format's record; x86 multiplies from panels rearranged at
 * load (kernels/x86/q4_0.h), ARM takes each group's dot product in NEON (kernels/arm/q4_0.h). */
#ifndef KERNELS_Q4_0_H
#define KERNELS_Q4_0_H

#include <stddef.h>
#include <stdint.h>

#include "arch.h"
#include "arm/q4_0.h"
#include "matrix.h"
#include "quant.h"
#include "types.h"
#include "x86/q4_0.h"

/* ---- the portable definition: row by row, from the file's layout ------------------------- */

/* The exact integer dot product of one group: 16 bytes of 4-bit quants, 32 activation quants. */
__attribute__((unused)) static inline int32_t q4_0_group_dot_generic(const uint8_t *w, const int8_t *x) {
    int32_t dot = 0;
    for (int i = 0; i < 16; i++) dot += ((w[i] & 15) - 8) * x[i] + ((w[i] >> 4) - 8) * x[i + 16];
    return dot;
}

static int32_t q4_group_dot(const void *w, int b, const int8_t *x) { return q4_0_group_dot((const uint8_t *)w + b * (QUANT_GROUP / 2), x); }

/* One row of quant bytes wq and scales ws with one token's activation quants and scales. */
static inline float dot_q4(const uint8_t *wq, const float *ws, const int8_t *xq, const float *xs, int n) {
    return quant_row_dot(wq, ws, xq, xs, n, q4_group_dot);
}

static float q4_row_dot(const Matrix *w, int r, const int8_t *xq, const float *xs, const int32_t *xsum) {
    (void)xsum;
    int n = w->cols;
    return dot_q4(w->q4 + (size_t)r * n / 2, w->scale + (size_t)r * (n / QUANT_GROUP), xq, xs, n);
}

/* The activations quantized as for q8_0, then row by row. */
static void q4_0_matmul_generic(float *out, const float *x, const Matrix *w, const float *bias, int T,
                                MatmulScratch *scratch) {
    quantize_rows(scratch->q, scratch->scale, NULL, x, T, w->cols);
    quant_matmul_rows(out, w, bias, T, scratch, q4_row_dot);
}

/* No copy at load: the kernels read the file's layout. */
__attribute__((unused)) static size_t q4_0_packed_bytes_generic(const Matrix *m) { (void)m; return 0; }
__attribute__((unused)) static void q4_0_pack_generic(Matrix *m, void *dst) { (void)m, (void)dst; }
__attribute__((unused)) static const char *q4_0_describe_generic(void) { return "scalar, row by row"; }

/* ---- the entry point and the format's record (kernels/matrix.h) -------------------------- */

/* From the copy rearranged at load where this build made one, else row by row. */
static void q4_0_matmul(float *out, const float *x, const Matrix *w, const float *bias, int T, int separate,
                        MatmulScratch *scratch) {
    (void)separate;
    if (w->packed) q4_0_packed_matmul(out, x, w, bias, T, scratch);
    else q4_0_matmul_generic(out, x, w, bias, T, scratch);
}

static const MatrixKernels q4_0_kernels = {
    .packed_bytes = q4_0_packed_bytes, .pack = q4_0_pack, .matmul = q4_0_matmul,
    .scratch_init = quant_scratch_init, .describe = q4_0_describe,
};

#endif
