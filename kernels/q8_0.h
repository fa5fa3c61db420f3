/* kernels/q8_0.h: matrix products with q8_0 weights (kernels/types.h: int8 quants with one
 * float32 scale per QUANT_GROUP values along a row), computed as kernels/simd.h defines: the
 * activations quantized the same way on every path (kernels/quant.h), an exact integer dot
 * product per group, an fma chain over the groups. This file holds the portable definition
 * (row by row from the file's layout) and the format's record; x86 multiplies from panels
 * rearranged at load (kernels/x86/q8_0.h), ARM takes each group's dot product in NEON
 * (kernels/arm/q8_0.h); kernels/arch.h maps each kernel to the definition this build uses. */
#ifndef KERNELS_Q8_0_H
#define KERNELS_Q8_0_H

#ifndef _DEFAULT_SOURCE /* kernels/x86/q8_0.h asks Linux for the AMX tiles with syscall() */
#define _DEFAULT_SOURCE
#endif

#include <stddef.h>
#include <stdint.h>

#include "arch.h"
#include "arm/q8_0.h"
#include "matrix.h"
#include "quant.h"
#include "types.h"
#include "x86/q8_0.h"

/* ---- the portable definition: row by row, from the file's layout ------------------------- */

/* The exact integer dot product of one group of 32 int8 quants with 32 activation quants. */
__attribute__((unused)) static inline int32_t q8_0_group_dot_generic(const int8_t *w, const int8_t *x) {
    int32_t dot = 0;
    for (int i = 0; i < QUANT_GROUP; i++) dot += (int32_t)w[i] * x[i];
    return dot;
}

static int32_t q8_group_dot(const void *w, int b, const int8_t *x) { return q8_0_group_dot((const int8_t *)w + b * QUANT_GROUP, x); }

/* One row of quants wq and scales ws with one token's activation quants and scales. */
static inline float dot_q8(const int8_t *wq, const float *ws, const int8_t *xq, const float *xs, int n) {
    return quant_row_dot(wq, ws, xq, xs, n, q8_group_dot);
}

static float q8_row_dot(const Matrix *w, int r, const int8_t *xq, const float *xs, const int32_t *xsum) {
    (void)xsum;
    int n = w->cols;
    return dot_q8(w->q8 + (size_t)r * n, w->scale + (size_t)r * (n / QUANT_GROUP), xq, xs, n);
}

/* The activations quantized (per token, one scale per group), then row by row. One arithmetic
 * serves every number of tokens, so samples need nothing of their own. */
static void q8_0_matmul_generic(float *out, const float *x, const Matrix *w, const float *bias, int T,
                                MatmulScratch *scratch) {
    quantize_rows(scratch->q, scratch->scale, NULL, x, T, w->cols);
    quant_matmul_rows(out, w, bias, T, scratch, q8_row_dot);
}

/* No copy at load: the kernels read the file's layout. */
__attribute__((unused)) static size_t q8_0_packed_bytes_generic(const Matrix *m) { (void)m; return 0; }
__attribute__((unused)) static void q8_0_pack_generic(Matrix *m, void *dst) { (void)m, (void)dst; }
__attribute__((unused)) static const char *q8_0_describe_generic(void) { return "scalar, row by row (prefill row by row per token)"; }

/* ---- the entry point and the format's record (kernels/matrix.h) -------------------------- */

/* From the copy rearranged at load where this build made one, else row by row. */
static void q8_0_matmul(float *out, const float *x, const Matrix *w, const float *bias, int T, int separate,
                        MatmulScratch *scratch) {
    (void)separate;
    if (w->packed) q8_0_packed_matmul(out, x, w, bias, T, scratch);
    else q8_0_matmul_generic(out, x, w, bias, T, scratch);
}

static const MatrixKernels q8_0_kernels = {
    .packed_bytes = q8_0_packed_bytes, .pack = q8_0_pack, .matmul = q8_0_matmul,
    .scratch_init = quant_scratch_init, .describe = q8_0_describe,
};

#endif
