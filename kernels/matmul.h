/* kernels/matmul.h: the matrix product beneath forward()'s every nn.Linear, one entry point for
 * all weight formats, and what the loader asks of a format; weight_format() is the one switch
 * that knows them all (kernels/matrix.h's WeightFormat).
 *
 *   matmul()               out (T, rows) = x (T, cols) @ W^T + bias: T = 1 (decode) is a
 *                          matrix-vector product bound by memory bandwidth; T > 1 (prefill, or
 *                          one token of each of T samples) works in tiles that reuse every weight
 *                          they load for many tokens
 *   prepare_weights()      at load: the matrices rearranged for the kernels that want it
 *   kernels_description()  the kernels this build runs on this CPU (for --info)
 */
#ifndef KERNELS_MATMUL_H
#define KERNELS_MATMUL_H

#ifndef _DEFAULT_SOURCE /* kernels/q8_0.h asks Linux for the AMX tiles with syscall() */
#define _DEFAULT_SOURCE
#endif
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../model.h"
#include "f32.h"
#include "matrix.h"
#include "q4_0.h"
#include "q8_0.h"

/* The operations of weight type `type` (model.h's WT_*), or NULL for an unknown type. */
static const WeightFormat *weight_format(int type) {
    switch (type) {
    case WT_F32: return &f32_format;
    case WT_Q8_0: return &q8_0_format;
    case WT_Q4_0: return &q4_0_format;
    default: return NULL;
    }
}

/* out (T, w->rows) = x (T, w->cols) @ W^T + bias (w->rows, or NULL). decode: the T tokens are
 * decode steps of T separate samples, so each is computed with the arithmetic of a single token
 * (a sample's numbers are then those of a run on its own); T = 1 always is. */
static void matmul(float *out, const float *x, const Matrix *w, const float *bias, int T, int decode,
                   MatmulScratch *scratch) {
    weight_format(w->type)->matmul(out, x, w, bias, T, decode, scratch);
}

/* Buffers for matmul() on up to max_tokens tokens of at most max_cols inputs, for matrices of
 * weight type `type`. Returns 0 when memory runs out. */
static int matmul_scratch_init(MatmulScratch *s, int max_tokens, int max_cols, int type) {
    return weight_format(type)->scratch_init(s, (size_t)max_tokens, (size_t)max_cols);
}

static void matmul_scratch_free(MatmulScratch *s) {
    free(s->xt);
    free(s->q);
    free(s->scale);
    free(s->sum);
    memset(s, 0, sizeof *s);
}

/* At load, for the matrices forward() multiplies: with dst NULL, the bytes of the rearranged
 * copy they need (0: none, the kernels read them as stored); with dst, rearrange them into those
 * bytes and point each Matrix at its part. */
static size_t prepare_weights(Matrix *const *matrices, int count, void *dst) {
    size_t total = 0;
    for (int i = 0; i < count; i++) {
        const WeightFormat *format = weight_format(matrices[i]->type);
        size_t bytes = format->packed_bytes(matrices[i]);
        if (dst && bytes) format->pack(matrices[i], (char *)dst + total);
        total += bytes;
    }
    return total;
}

/* e.g. "avx512, q8_0 avx512-vnni, 16 rows (prefill ...), q4_0 ...": this build on this CPU */
static const char *kernels_description(void) {
    static char text[256];
    snprintf(text, sizeof text, "%s, q8_0 %s, q4_0 %s", f32_format.describe(), q8_0_format.describe(),
             q4_0_format.describe());
    return text;
}

#endif
