/* kernels/quant.h: what the quantized weight formats (kernels/q8_0.h, q4_0.h) share.
 *
 *   the group: QUANT_GROUP values along a row share one float32 scale (kernels/types.h);
 *   the activation quantizer: every product quantizes its input the same way on every path,
 *     per token, one int8 scale per group (quantize_q8), so that each group's dot product is
 *     an exact integer, and the groups are summed as kernels/simd.h defines; a family
 *     quantizes a group in vectors (kernels/x86/quant.h, kernels/arm/quant.h);
 *   the loops around a format's kernels when they read the file's layout row by row, with
 *     their split between threads (x86 multiplies from panels instead: kernels/x86/panels.h).
 */
#ifndef KERNELS_QUANT_H
#define KERNELS_QUANT_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "arch.h"
#include "matrix.h"
#include "parallel.h"
#include "simd.h"
#include "types.h"

/* Most kernels hold one group of quants in one 256-bit register, or two in a 512-bit one. */
_Static_assert(QUANT_GROUP == 32, "the quantized kernels assume groups of 32 values");

/* ---- activations ------------------------------------------------------------------------ */

/* Quantize n values (n a multiple of QUANT_GROUP) to int8 with one scale per group: scale =
 * max|x| / 127, so quants stay in [-127, 127]; an all-zero group gets scale 0 and zero quants.
 * export.py quantizes q8_0 weights the same way, and the tests' reference quantizes
 * activations so (and the q8_0 key/value cache its groups of up to 32, kv_cache.h).
 * A group of n values, in portable C: */
static inline void quantize_values(int8_t *q, float *scale, const float *x, int n) {
    float amax = 0.0f;
    for (int i = 0; i < n; i++) amax = fabsf(x[i]) > amax ? fabsf(x[i]) : amax; /* NaN: passed over */
    float inv = amax > 0.0f ? 127.0f / amax : 0.0f;
    *scale = amax / 127.0f;
    /* rintf rounds half to even, like numpy's rint; it inlines (no errno). A finite x gives
     * |x * inv| at most a rounding above 127, which rounds to 127 anyway; NaN (from a file
     * with NaN or infinite weights) becomes 0: no float-to-int conversion out of range. */
    for (int i = 0; i < n; i++) {
        float v = x[i] * inv;
        v = v > 127.0f ? 127.0f : v < -127.0f ? -127.0f : v == v ? v : 0.0f;
        q[i] = (int8_t)rintf(v);
    }
}
__attribute__((unused)) static inline void quantize_group_generic(int8_t *q, float *scale, const float *x) {
    quantize_values(q, scale, x, QUANT_GROUP);
}

/* A family's own quantize_group: the same operations in vectors. */
#include "arm/quant.h"
#include "x86/quant.h"

/* One group of n <= QUANT_GROUP values (the q8_0 key/value cache's groups: the last of a head
 * may be shorter), by quantize_group when the group is whole: the same bits either way. */
static inline void quantize_short_group(int8_t *q, float *scale, const float *x, int n) {
    if (n == QUANT_GROUP) quantize_group(q, scale, x);
    else quantize_values(q, scale, x, n);
}

static inline void quantize_q8(int8_t *q, float *scale, const float *x, int n) {
    for (int b = 0; b < n / QUANT_GROUP; b++) quantize_group(q + b * QUANT_GROUP, scale + b, x + b * QUANT_GROUP);
}

/* Activations of T tokens quantized row by row: q (T, n), scales (T, n / QUANT_GROUP); with
 * sums, each group's sum of its quants too, (T, n / QUANT_GROUP), for kernels that multiply
 * weights offset by a constant (q4_0's quant + 8, q8_0's + 128 for AVX512-VNNI) and take the
 * constant's share off again, and for the formats with a min (q4_k, q5_k, q5_1). */
static void quantize_rows(int8_t *q, float *scale, int32_t *sums, const float *x, int T, int n) {
    int t, nb = n / QUANT_GROUP;
    SPLIT_FOR(T > 1, schedule(static), (t = 0; t < T; t++), {
        int8_t *row = q + (size_t)t * n;
        quantize_q8(row, scale + (size_t)t * nb, x + (size_t)t * n, n);
        for (int b = 0; sums && b < nb; b++) {
            int32_t sum = 0;
            for (int k = 0; k < QUANT_GROUP; k++) sum += row[b * QUANT_GROUP + k];
            sums[(size_t)t * nb + b] = sum;
        }
    });
}

/* Buffers for up to T tokens of n inputs: quants with room for AMX's whole tiles of 16 tokens,
 * one scale per group, and sums of quants: one per 16 (q6_k's sub-blocks on x86), or one per
 * group. */
static int quant_scratch_init(MatmulScratch *s, size_t T, size_t n) {
    size_t T16 = (T + 15) / 16 * 16, groups = T16 * n / QUANT_GROUP + 1, sums = T16 * n / 16 + 1;
    s->q = malloc(T16 * n);
    s->scale = malloc(groups * sizeof(float));
    s->sum = malloc(sums * sizeof(int32_t));
    if (!s->q || !s->scale || !s->sum) return 0;
    memset(s->q, 0, T16 * n); /* map the pages now, not inside the first timed forward pass */
    memset(s->scale, 0, groups * sizeof(float));
    memset(s->sum, 0, sums * sizeof(int32_t));
    return 1;
}

/* ---- the k formats' super-block (kernels/simd.h: q4_k, q5_k) ------------------------------ */

/* acc after one super-block of a q4_k or q5_k row: its binary16 d and dmin as float32, its
 * groups' 6-bit scales sc and mins m, their exact integer dot products dots with one token's
 * activation quants, whose scales are xs and sums xsum. */
static inline float k_super_block(float acc, float d, float dmin, const uint8_t *sc, const uint8_t *m,
                                  const int32_t *dots, const float *xs, const int32_t *xsum) {
    float dsum = 0.0f, msum = 0.0f;
    for (int g = 0; g < SUB_BLOCKS; g++) {
        dsum = fmaf((float)(sc[g] * dots[g]), xs[g], dsum);
        msum = fmaf((float)(m[g] * xsum[g]), xs[g], msum);
    }
    return fmaf(-dmin, msum, fmaf(d, dsum, acc));
}

/* ---- row by row, from the file's layout (ARM, portable C) -------------------------------- */

/* One row: an fma chain over the groups of dot_g * (weight scale_g * activation scale_g), where
 * group_dot(w, b, x) is the exact integer dot product of group b of the row's quants w with 32
 * activation quants x. Inlined, so that group_dot is a direct call. */
static inline __attribute__((always_inline)) float quant_row_dot(const void *w, const float *ws, const int8_t *xq,
                                                                 const float *xs, int n,
                                                                 int32_t (*group_dot)(const void *w, int b, const int8_t *x)) {
    float acc = 0.0f;
    for (int b = 0; b < n / QUANT_GROUP; b++)
        acc = fmaf((float)group_dot(w, b, xq + b * QUANT_GROUP), ws[b] * xs[b], acc);
    return acc;
}

/* The product row by row (the activations already quantized into scratch, with their groups'
 * sums where the format asked quantize_rows for them): rows split between threads in blocks of
 * 4, each used for every token while it sits in cache. row_dot(w, r, xq, xs, xsum) is row r's
 * dot product with one token's quantized activations. Inlined into each format's caller, so
 * that row_dot is a direct call. */
typedef float (*QuantRowDot)(const Matrix *w, int r, const int8_t *xq, const float *xs, const int32_t *xsum);
static inline __attribute__((always_inline)) void quant_matmul_rows(float *out, const Matrix *w, const float *bias,
                                                                    int T, const MatmulScratch *scratch,
                                                                    QuantRowDot row_dot) {
    int n = w->cols, nb = n / QUANT_GROUP, d = w->rows, i;
    SPLIT_FOR(1, schedule(dynamic, 4), (i = 0; i < (d + 3) / 4; i++), {
        for (int t = 0; t < T; t++)
            for (int r = 4 * i; r < min_int(4 * i + 4, d); r++)
                out[(size_t)t * d + r] = row_dot(w, r, scratch->q + (size_t)t * n, scratch->scale + (size_t)t * nb,
                                                 scratch->sum + (size_t)t * nb) +
                                         (bias ? bias[r] : 0.0f);
    });
}

/* The record of a format whose products are only its portable definition, row by row from the
 * file's layout on every instruction set (q4_1, iq4_nl, iq4_xs, q2_k, q3_k): name_row_dot
 * defined, this gives name_matmul (the activations quantized as for q8_0, with each group's
 * sum, then row by row), no copy at load, and name_kernels. */
#define ROW_BY_ROW_FORMAT(name)                                                                              \
    static void name##_matmul(float *out, const float *x, const Matrix *w, const float *bias, int T,          \
                              int separate, MatmulScratch *scratch) {                                          \
        (void)separate;                                                                                      \
        quantize_rows(scratch->q, scratch->scale, scratch->sum, x, T, w->cols);                              \
        quant_matmul_rows(out, w, bias, T, scratch, name##_row_dot);                                         \
    }                                                                                                        \
    static size_t name##_packed_bytes(const Matrix *m) { (void)m; return 0; }                                \
    static void name##_pack(Matrix *m, void *dst) { (void)m, (void)dst; }                                    \
    static const char *name##_describe(void) { return "scalar, row by row"; }                                \
    static const MatrixKernels name##_kernels = {                                                            \
        .packed_bytes = name##_packed_bytes, .pack = name##_pack, .matmul = name##_matmul,                   \
        .scratch_init = quant_scratch_init, .describe = name##_describe,                                     \
    };

#endif
