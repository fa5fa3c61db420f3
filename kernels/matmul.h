/* kernels/matmul.h: the matrix product beneath forward()'s every nn.Linear, one entry point for
 * all weight formats, and what the loader's caller asks of a format at load; matrix_kernels()
 * is the one switch that knows every format's record (kernels/matrix.h).
 *
 *   matmul()               out (T, rows) = x (T, cols) @ W^T + bias: T = 1 (decode) is a
 *                          matrix-vector product bound by memory bandwidth; T > 1 (prefill, or
 *                          one token of each of T samples) works in tiles that reuse every weight
 *                          they load for many tokens; a matrix of parts part by part
 *   prepare_weights()      at load: the matrices rearranged for the kernels that want it
 *   kernels_description()  the kernels this build runs on this CPU (for --info)
 */
#ifndef KERNELS_MATMUL_H
#define KERNELS_MATMUL_H

#ifndef _DEFAULT_SOURCE /* kernels/x86/q8_0.h asks Linux for the AMX tiles with syscall() */
#define _DEFAULT_SOURCE
#endif

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "f32.h"
#include "half.h"
#include "iq4.h"
#include "matrix.h"
#include "q2_k_q3_k.h"
#include "q4_0.h"
#include "q4_k.h"
#include "q5_0.h"
#include "q5_1.h"
#include "q5_k.h"
#include "q6_k.h"
#include "q8_0.h"
#include "types.h"

/* The kernels of weight type `type` (kernels/types.h's WT_*: each type's name_kernels, from its
 * WEIGHT_TYPE_LIST), or NULL for an unknown type. */
static const MatrixKernels *matrix_kernels(int type) {
#define KERNELS_OF(ID, name, block, block_bytes) [WT_##ID] = &name##_kernels,
    static const MatrixKernels *const kernels[WT_COUNT] = {WEIGHT_TYPE_LIST(KERNELS_OF)};
#undef KERNELS_OF
    return type >= 0 && type < WT_COUNT ? kernels[type] : NULL;
}

/* out (T, w->rows) = x (T, w->cols) @ W^T + bias (w->rows, or NULL). separate: the T tokens are
 * steps of T separate sequences (samples), so each is computed with the arithmetic of a single
 * token (a sample's numbers are then those of a run on its own); T = 1 always is. */
static void matmul(float *out, const float *x, const Matrix *w, const float *bias, int T, int separate,
                   MatmulScratch *scratch) {
    if (!w->n_parts) {
        matrix_kernels(w->type)->matmul(out, x, w, bias, T, separate, scratch);
        return;
    }
    /* a matrix of parts: each part's product into scratch->part, then its rows into their columns
     * of out (copies of T x rows floats, against T x rows x cols multiply-adds) */
    for (int p = 0, r0 = 0; p < w->n_parts; r0 += w->parts[p++].rows) {
        const Matrix *part = &w->parts[p];
        matrix_kernels(part->type)->matmul(scratch->part, x, part, bias ? bias + r0 : NULL, T, separate, scratch);
        ONE_THREAD({
            for (int t = 0; t < T; t++)
                memcpy(out + (size_t)t * w->rows + r0, scratch->part + (size_t)t * part->rows, (size_t)part->rows * sizeof(float));
        });
    }
}

/* Buffers for matmul() on up to max_tokens tokens of at most max_cols inputs, for matrices of
 * every type in `types` (a bit per WT_*). Returns 0 when memory runs out. */
static int matmul_scratch_init(MatmulScratch *s, int max_tokens, int max_cols, unsigned types) {
    int (*done[WT_COUNT])(MatmulScratch *, size_t, size_t); /* formats may share one (q8_0, q4_0) */
    int n_done = 0;
    for (int type = 0; type < WT_COUNT; type++) {
        if (!(types >> type & 1)) continue;
        int (*init)(MatmulScratch *, size_t, size_t) = matrix_kernels(type)->scratch_init, seen = 0;
        for (int i = 0; i < n_done; i++) seen |= done[i] == init;
        if (seen) continue;
        if (!init(s, (size_t)max_tokens, (size_t)max_cols)) return 0;
        done[n_done++] = init;
    }
    return 1;
}

/* The buffer of one part's product, for matrices of parts of up to max_rows rows each. */
static int matmul_scratch_parts(MatmulScratch *s, int max_tokens, int max_rows) {
    s->part = calloc((size_t)max_tokens * (size_t)max_rows, sizeof(float));
    return s->part != NULL;
}

static void matmul_scratch_free(MatmulScratch *s) {
    free(s->part);
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
        const MatrixKernels *kernels = matrix_kernels(matrices[i]->type);
        size_t bytes = kernels->packed_bytes(matrices[i]);
        if (dst && bytes) kernels->pack(matrices[i], (char *)dst + total);
        total += bytes;
    }
    return total;
}

/* e.g. "x86: f32 avx512, q8_0 avx512-vnni, 16 rows (prefill ...), q4_0 ...": this build on this
 * CPU, from each format's record */
static const char *kernels_description(void) {
    static char text[1024];
    int at = snprintf(text, sizeof text, "%s:", KERNELS_FAMILY);
    for (int type = 0; type < WT_COUNT && at > 0 && (size_t)at < sizeof text; type++)
        at += snprintf(text + at, sizeof text - (size_t)at, "%s %s %s", type ? "," : "", weight_types[type].name,
                       matrix_kernels(type)->describe());
    return text;
}

#endif
