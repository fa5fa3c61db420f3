/* kernels/matrix.h: what the CPU does with a weight type (kernels/types.h says what the type
 * is): the buffers of a matrix product, and the record of each format's kernels that
 * kernels/matmul.h picks by the matrix's type. A format's record sits at the end of its
 * portable file (kernels/f32.h, q8_0.h, q4_0.h); kernels/arch.h says which definition of each
 * of its kernels this build uses. */
#ifndef KERNELS_MATRIX_H
#define KERNELS_MATRIX_H

#include <stddef.h>
#include <stdint.h>

#include "types.h"

/* Buffers for matmul(), allocated once for up to max_tokens tokens (no allocation per call). */
typedef struct {
    float *xt;    /* float32 prefill: the tokens transposed, per tile of F32_TILE_TOKENS (n, F32_TILE_TOKENS) */
    int8_t *q;    /* quantized formats: the activations quantized (kernels/quant.h) */
    float *scale; /*   their scales, one per group */
    int32_t *sum; /*   each group's sum of quants (offset weights) */
    float *part;  /* a matrix of parts: one part's product (tokens, its rows), then placed */
} MatmulScratch;

/* What a weight format's kernels provide. */
typedef struct {
    /* at load: the bytes of m's rearranged copy for this build's kernels (0: none, the kernels
     * read the matrix as the file stores it), and making it at dst (m->packed then points there) */
    size_t (*packed_bytes)(const Matrix *m);
    void (*pack)(Matrix *m, void *dst);
    /* out (T, rows) = x (T, cols) @ W^T + bias; separate: the T tokens are steps of T separate
     * sequences (samples), each computed with the arithmetic of a single token */
    void (*matmul)(float *out, const float *x, const Matrix *w, const float *bias, int T, int separate,
                   MatmulScratch *scratch);
    /* the format's buffers in scratch for products of up to T tokens of at most n inputs
     * (freed by matmul_scratch_free); 0 when memory runs out */
    int (*scratch_init)(MatmulScratch *scratch, size_t T, size_t n);
    /* the kernels this build runs on this CPU, for --info */
    const char *(*describe)(void);
} MatrixKernels;

#endif
