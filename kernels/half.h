/* kernels/half.h: matrix products with f16 and bf16 weights (kernels/types.h: 16-bit numbers,
 * each exactly a float32), computed as kernels/simd.h defines float32's: one token (and each
 * sample's step) dot_f32's 64 partial sums and its tree, a prompt one fma chain per output.
 * The weights are read as the file stores them, converted as they are loaded: decode through
 * the family's vector conversion (vf_load_f16, vf_load_bf16), a prompt's tiles one weight at a
 * time (each serves a whole tile of tokens). Both formats are one set of kernels over a
 * conversion. */
#ifndef KERNELS_HALF_H
#define KERNELS_HALF_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "arch.h"
#include "f16.h"
#include "f32.h"
#include "matrix.h"
#include "parallel.h"
#include "simd.h"
#include "types.h"

/* VW 16-bit numbers of either format as floats, exactly. */
static inline __attribute__((always_inline)) vf vf_load_half(const uint16_t *p, int bf16) {
    return bf16 ? vf_load_bf16(p) : vf_load_f16(p);
}
static inline float half_to_f32(uint16_t h, int bf16) { return bf16 ? f32_from_bf16(h) : f32_from_f16(h); }

/* Decode: dot_f32's arithmetic on the converted weights (its part block at the end through
 * zero-padded copies, whose zeros convert to zero). */
static inline __attribute__((always_inline)) float dot_half(const uint16_t *w, const float *x, int n, int bf16) {
    vf acc[64 / VW];
    for (int v = 0; v < 64 / VW; v++) acc[v] = vf_set1(0.0f);
    int k = 0;
    for (; k + 64 <= n; k += 64)
        for (int v = 0; v < 64 / VW; v++) acc[v] = vf_fma(vf_load_half(w + k + v * VW, bf16), vf_load(x + k + v * VW), acc[v]);
    if (k < n) {
        uint16_t wp[64] = {0};
        float xp[64] = {0};
        memcpy(wp, w + k, (size_t)(n - k) * sizeof(uint16_t));
        memcpy(xp, x + k, (size_t)(n - k) * sizeof(float));
        for (int v = 0; v < 64 / VW; v++) acc[v] = vf_fma(vf_load_half(wp + v * VW, bf16), vf_load(xp + v * VW), acc[v]);
    }
    for (int half = 64 / VW / 2; half >= 1; half /= 2)
        for (int v = 0; v < half; v++) acc[v] = vf_add(acc[v], acc[v + half]);
    return vf_reduce(acc[0]);
}

/* Prefill: HALF_TILE_ROWS rows x F32_TILE_TOKENS tokens (transposed by transpose_tokens, as for
 * float32), each weight converted once and broadcast to the tile's tokens: every output an fma
 * chain over k in order, then + bias. A part tile repeats its last row; those sums are not
 * stored. */
#define HALF_TILE_VECTORS (F32_TILE_TOKENS / VW)
#define HALF_TILE_ROWS (HALF_TILE_VECTORS >= 4 ? 3 : 6)
static inline __attribute__((always_inline)) void half_tile(float *out, int ld_out, const float *xt,
                                                            const uint16_t *const *wrow, int n, const float *bias,
                                                            int rows, int tokens, int bf16) {
    vf acc[HALF_TILE_ROWS][HALF_TILE_VECTORS];
    for (int r = 0; r < HALF_TILE_ROWS; r++)
        for (int j = 0; j < HALF_TILE_VECTORS; j++) acc[r][j] = vf_set1(0.0f);
    for (int k = 0; k < n; k++) {
        vf xv[HALF_TILE_VECTORS];
        for (int j = 0; j < HALF_TILE_VECTORS; j++) xv[j] = vf_load(xt + (size_t)k * F32_TILE_TOKENS + j * VW);
        for (int r = 0; r < HALF_TILE_ROWS; r++) {
            vf wv = vf_set1(half_to_f32(wrow[r][k], bf16));
            for (int j = 0; j < HALF_TILE_VECTORS; j++) acc[r][j] = vf_fma(xv[j], wv, acc[r][j]);
        }
    }
    float sums[HALF_TILE_ROWS][F32_TILE_TOKENS];
    for (int r = 0; r < HALF_TILE_ROWS; r++)
        for (int j = 0; j < HALF_TILE_VECTORS; j++) vf_store(sums[r] + j * VW, acc[r][j]);
    for (int t = 0; t < tokens; t++)
        for (int r = 0; r < rows; r++) out[(size_t)t * ld_out + r] = sums[r][t] + (bias ? bias[r] : 0.0f);
}

/* One token (or each of T samples' steps, a pass over W each): rows split between threads;
 * a prompt: tiles of rows, each used for every tile of tokens while it sits in cache. */
static inline __attribute__((always_inline)) void half_matmul(float *out, const float *x, const Matrix *w,
                                                              const float *bias, int T, int separate,
                                                              MatmulScratch *scratch, int bf16) {
    int n = w->cols, d = w->rows, i;
    if (T == 1 || separate) {
        for (int t = 0; t < T; t++)
            SPLIT_FOR(1, schedule(static), (i = 0; i < d; i++), {
                out[(size_t)t * d + i] = dot_half(w->halves + (size_t)i * n, x + (size_t)t * n, n, bf16) + (bias ? bias[i] : 0.0f);
            });
        return;
    }
    transpose_tokens(scratch->xt, x, T, n);
    SPLIT_FOR(1, schedule(dynamic, 1), (i = 0; i < (d + HALF_TILE_ROWS - 1) / HALF_TILE_ROWS; i++), {
        int r0 = i * HALF_TILE_ROWS, rows = min_int(HALF_TILE_ROWS, d - r0);
        const uint16_t *wrow[HALF_TILE_ROWS];
        for (int r = 0; r < HALF_TILE_ROWS; r++) wrow[r] = w->halves + (size_t)(r0 + min_int(r, rows - 1)) * n;
        for (int t0 = 0; t0 < T; t0 += F32_TILE_TOKENS)
            half_tile(out + (size_t)t0 * d + r0, d, scratch->xt + (size_t)t0 * n, wrow, n, bias ? bias + r0 : NULL, rows,
                      min_int(F32_TILE_TOKENS, T - t0), bf16);
    });
}

static void f16_matmul(float *out, const float *x, const Matrix *w, const float *bias, int T, int separate,
                       MatmulScratch *scratch) {
    half_matmul(out, x, w, bias, T, separate, scratch, 0);
}
static void bf16_matmul(float *out, const float *x, const Matrix *w, const float *bias, int T, int separate,
                        MatmulScratch *scratch) {
    half_matmul(out, x, w, bias, T, separate, scratch, 1);
}

/* ---- the formats' records (kernels/matrix.h) -------------------------------------------- */

static const char *half_describe(void) { return VW > 1 ? "vectors, converted as loaded" : "scalar"; }

static const MatrixKernels f16_kernels = {
    .packed_bytes = f32_packed_bytes, .pack = f32_pack, .matmul = f16_matmul, .scratch_init = f32_scratch_init,
    .describe = half_describe,
};
static const MatrixKernels bf16_kernels = {
    .packed_bytes = f32_packed_bytes, .pack = f32_pack, .matmul = bf16_matmul, .scratch_init = f32_scratch_init,
    .describe = half_describe,
};

#endif
