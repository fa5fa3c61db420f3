/* kernels/f32.h: matrix products with float32 weights, as kernels/simd.h defines them:
 *   one token, or one token of each of several samples: a pass over W with its rows split
 *     between threads, dot_f32 (or decode_tile_f32 for samples) per row;
 *   a prompt (two or more tokens of one sequence): tiles of rows x tokens in outer-product
 *     form whose accumulators stay in registers, each tile of W used for every tile of tokens
 *     while it sits in cache.
 * The matrices are read where the file is mapped: no copy at load. This file holds the
 * portable definitions and the format's record; x86 and ARM tile a prompt's product in their
 * own registers (kernels/x86/f32.h, kernels/arm/f32.h). */
#ifndef KERNELS_F32_H
#define KERNELS_F32_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "arch.h"
#include "arm/f32.h"
#include "matrix.h"
#include "parallel.h"
#include "simd.h"
#include "types.h"
#include "x86/f32.h"

/* Decode: w . x (n floats each), as defined above: 64 partial sums over k = l (mod 64), then
 * the fixed tree, in registers (vector adds while the halves are whole vectors, then
 * vf_reduce). A part block at the end goes through zero-padded copies: fma(0, 0, p) = p. One
 * row at a time: a single sequential stream per row reads memory faster than interleaving rows,
 * and 64 / VW independent chains of FMAs keep up with it. Inlined into the row loop, where a
 * call per row showed on small models. */
static inline __attribute__((always_inline)) float dot_f32(const float *w, const float *x, int n) {
    vf acc[64 / VW];
    for (int v = 0; v < 64 / VW; v++) acc[v] = vf_set1(0.0f);
    int k = 0;
    for (; k + 64 <= n; k += 64)
        for (int v = 0; v < 64 / VW; v++) acc[v] = vf_fma(vf_load(w + k + v * VW), vf_load(x + k + v * VW), acc[v]);
    if (k < n) {
        float wp[64] = {0}, xp[64] = {0};
        memcpy(wp, w + k, (size_t)(n - k) * sizeof(float));
        memcpy(xp, x + k, (size_t)(n - k) * sizeof(float));
        for (int v = 0; v < 64 / VW; v++) acc[v] = vf_fma(vf_load(wp + v * VW), vf_load(xp + v * VW), acc[v]);
    }
    for (int half = 64 / VW / 2; half >= 1; half /= 2) /* p_i + p_{i+32}, + p_{i+16}, ... */
        for (int v = 0; v < half; v++) acc[v] = vf_add(acc[v], acc[v + half]);
    return vf_reduce(acc[0]);
}

/* Several samples' decode steps: every (row, token) product with dot_f32's arithmetic, for a
 * tile of F32_DECODE_ROWS rows x F32_DECODE_TOKENS tokens. dot_f32's partial-sum vector v (the k with
 * k mod 64 in [v VW, v VW + VW)) is an FMA chain of its own, so the tile computes v = 0, 1, ...
 * in turn, each for all its (row, token) pairs at once: every weight vector loaded serves
 * F32_DECODE_TOKENS chains and every input vector F32_DECODE_ROWS, where dot_f32 loads both for each
 * FMA. Then each pair's vectors go through dot_f32's tree. A part tile repeats its last row or
 * token; those sums are not stored.
 * The rows come from DRAM: while a tile works through its first tile of tokens it asks for the
 * same lines of the next tile's rows (`next`, or NULL), so that memory works while this tile
 * computes, rather than each thread waiting for memory, then computing. Tiles of 6 rows x 4
 * tokens leave no token slot empty for 4, 8 or 16 samples.
 * rows_cached (the later tiles of tokens, whose rows the first one brought into cache): each
 * weight vector is loaded once into a register (ONE_LOAD) instead of GCC folding its load into
 * every fma (4 loads of each): for rows in cache the loads are what limits the tile, while for
 * rows coming from memory (a tile's first pass) the folded form is faster (docs/speed.md). */
#if !defined(F32_DECODE_ROWS) /* a family sets them for its registers */
#define F32_DECODE_ROWS 3
#define F32_DECODE_TOKENS 4
#endif
static inline __attribute__((always_inline)) void decode_tile_f32(float *out, int ld_out, const float *const *wrow,
                                                                  const float *const *xrow, int n, const float *bias,
                                                                  int rows, int tokens, const float *next,
                                                                  int rows_cached) {
    vf part[F32_DECODE_ROWS][F32_DECODE_TOKENS][64 / VW];
    int whole = n / 64 * 64;
    float wp[F32_DECODE_ROWS][64], xp[F32_DECODE_TOKENS][64]; /* the part block at the end, zero-padded */
    if (whole < n) {
        for (int r = 0; r < F32_DECODE_ROWS; r++) {
            memset(wp[r], 0, sizeof wp[r]);
            memcpy(wp[r], wrow[r] + whole, (size_t)(n - whole) * sizeof(float));
        }
        for (int t = 0; t < F32_DECODE_TOKENS; t++) {
            memset(xp[t], 0, sizeof xp[t]);
            memcpy(xp[t], xrow[t] + whole, (size_t)(n - whole) * sizeof(float));
        }
    }
    for (int v = 0; v < 64 / VW; v++) {
        vf acc[F32_DECODE_ROWS][F32_DECODE_TOKENS];
        for (int r = 0; r < F32_DECODE_ROWS; r++)
            for (int t = 0; t < F32_DECODE_TOKENS; t++) acc[r][t] = vf_set1(0.0f);
        for (int k = v * VW; k < whole; k += 64) {
            vf wv[F32_DECODE_ROWS];
            if (next)
                for (int r = 0; r < F32_DECODE_ROWS; r++) __builtin_prefetch(next + (size_t)r * n + k, 0, 2);
            for (int r = 0; r < F32_DECODE_ROWS; r++) {
                wv[r] = vf_load(wrow[r] + k);
                if (rows_cached) ONE_LOAD(wv[r]);
            }
            for (int t = 0; t < F32_DECODE_TOKENS; t++) {
                vf xv = vf_load(xrow[t] + k);
                for (int r = 0; r < F32_DECODE_ROWS; r++) acc[r][t] = vf_fma(wv[r], xv, acc[r][t]);
            }
        }
        if (whole < n)
            for (int r = 0; r < F32_DECODE_ROWS; r++)
                for (int t = 0; t < F32_DECODE_TOKENS; t++)
                    acc[r][t] = vf_fma(vf_load(wp[r] + v * VW), vf_load(xp[t] + v * VW), acc[r][t]);
        for (int r = 0; r < F32_DECODE_ROWS; r++)
            for (int t = 0; t < F32_DECODE_TOKENS; t++) part[r][t][v] = acc[r][t];
    }
    for (int t = 0; t < tokens; t++)
        for (int r = 0; r < rows; r++) {
            vf *p = part[r][t];
            for (int half = 64 / VW / 2; half >= 1; half /= 2) /* dot_f32's tree */
                for (int v = 0; v < half; v++) p[v] = vf_add(p[v], p[v + half]);
            out[(size_t)t * ld_out + r] = vf_reduce(p[0]) + (bias ? bias[r] : 0.0f);
        }
}

/* Prefill tiles: F32_TILE_ROWS rows of W x F32_TILE_TOKENS tokens in outer-product form. The tokens
 * come transposed, xt (n, F32_TILE_TOKENS) per tile (transpose_tokens), so step k loads the tile's
 * tokens' k-th values as vectors and multiplies them by w[r][k] broadcast, for each row r: the
 * products go into accumulators that stay in registers (named variables, not an array), with
 * no horizontal sums. Each output is an FMA chain over k in order, then the bias is added (the
 * shared arithmetic above). A tile at the bottom of W with fewer rows repeats its last row
 * (wrow[]); those sums are not stored. */
#if !defined(F32_TILE_ROWS) /* a family sets them for its registers */
#define F32_TILE_ROWS 4
#define F32_TILE_TOKENS 16
#endif

/* In portable C, F32_TILE_ROWS rows x F32_TILE_TOKENS tokens (the compiler vectorizes the
 * token loop where it can). */
__attribute__((unused)) static inline void f32_tile_generic(float *out, int ld_out, const float *xt, const float *const *wrow, int n,
                            const float *bias, int rows, int tokens) {
    float sums[F32_TILE_ROWS][F32_TILE_TOKENS] = {{0}};
    for (int k = 0; k < n; k++)
        for (int r = 0; r < F32_TILE_ROWS; r++) {
            float w = wrow[r][k];
            for (int t = 0; t < F32_TILE_TOKENS; t++) sums[r][t] = fmaf(xt[(size_t)k * F32_TILE_TOKENS + t], w, sums[r][t]);
        }
    for (int t = 0; t < tokens; t++)
        for (int r = 0; r < rows; r++) out[(size_t)t * ld_out + r] = sums[r][t] + (bias ? bias[r] : 0.0f);
}

/* The first columns a family transposes in vectors: none here. */
__attribute__((unused)) static int f32_transpose_blocks_generic(float *xt, const float *x, int T, int n) {
    (void)xt, (void)x, (void)T, (void)n;
    return 0;
}

/* The tokens x (T, n) transposed for f32_tile: per tile of F32_TILE_TOKENS tokens, (n, F32_TILE_TOKENS),
 * zero past T, so that a tile's inputs are read as one sequential stream; a family's blocks
 * first, then what is left one value at a time. */
static void transpose_tokens(float *xt, const float *x, int T, int n) {
    int padded = (T + F32_TILE_TOKENS - 1) / F32_TILE_TOKENS * F32_TILE_TOKENS, done = f32_transpose_blocks(xt, x, T, n), job;
    SPLIT_FOR(done < n, schedule(static), (job = done; job < n; job++), {
        for (int t = 0; t < padded; t++)
            xt[((size_t)(t / F32_TILE_TOKENS) * n + job) * F32_TILE_TOKENS + t % F32_TILE_TOKENS] =
                t < T ? x[(size_t)t * n + job] : 0.0f;
    });
}

/* float32 W: decode, one pass over W with its rows split between threads (for one token, or
 * for the T tokens of T samples decoding together); prefill, tiles of F32_TILE_ROWS rows, each used
 * for every tile of tokens while it sits in cache. */
static void f32_matmul(float *out, const float *x, const Matrix *w, const float *bias, int T, int separate,
                       MatmulScratch *scratch) {
    int n = w->cols, d = w->rows, i;
    if (T == 1) {
        SPLIT_FOR(1, schedule(static), (i = 0; i < d; i++), { out[i] = dot_f32(w->f32 + (size_t)i * n, x, n) + (bias ? bias[i] : 0.0f); });
        return;
    }
    if (separate) { /* T samples' decode steps: tiles of F32_DECODE_ROWS rows, each row read from
                     memory once and then from cache for every tile of tokens */
        int tiles = (d + F32_DECODE_ROWS - 1) / F32_DECODE_ROWS;
        SPLIT_FOR(1, schedule(static), (i = 0; i < tiles; i++), {
            int r0 = i * F32_DECODE_ROWS, rows = min_int(F32_DECODE_ROWS, d - r0);
            const float *wrow[F32_DECODE_ROWS], *xrow[F32_DECODE_TOKENS];
            for (int r = 0; r < F32_DECODE_ROWS; r++) wrow[r] = w->f32 + (size_t)(r0 + min_int(r, rows - 1)) * n;
            /* the next tile's rows, whole tiles only */
            const float *next = d - r0 >= 2 * F32_DECODE_ROWS ? w->f32 + (size_t)(r0 + F32_DECODE_ROWS) * n : NULL;
            for (int t0 = 0; t0 < T; t0 += F32_DECODE_TOKENS) {
                int tokens = min_int(F32_DECODE_TOKENS, T - t0);
                for (int t = 0; t < F32_DECODE_TOKENS; t++) xrow[t] = x + (size_t)(t0 + min_int(t, tokens - 1)) * n;
                float *o = out + (size_t)t0 * d + r0;
                const float *b = bias ? bias + r0 : NULL;
                /* the first tile of tokens reads the rows from memory; the others find them in
                 * cache (rows_cached a constant in each call, so each loop is compiled for it) */
                if (t0 == 0) decode_tile_f32(o, d, wrow, xrow, n, b, rows, tokens, next, 0);
                else decode_tile_f32(o, d, wrow, xrow, n, b, rows, tokens, NULL, 1);
            }
        });
        return;
    }
    transpose_tokens(scratch->xt, x, T, n);
    SPLIT_FOR(1, schedule(dynamic, 1), (i = 0; i < (d + F32_TILE_ROWS - 1) / F32_TILE_ROWS; i++), {
        int r0 = i * F32_TILE_ROWS, rows = min_int(F32_TILE_ROWS, d - r0);
        const float *wrow[F32_TILE_ROWS];
        for (int r = 0; r < F32_TILE_ROWS; r++) wrow[r] = w->f32 + (size_t)(r0 + min_int(r, rows - 1)) * n;
        for (int t0 = 0; t0 < T; t0 += F32_TILE_TOKENS)
            f32_tile(out + (size_t)t0 * d + r0, d, scratch->xt + (size_t)t0 * n, wrow, n,
                     bias ? bias + r0 : NULL, rows, min_int(F32_TILE_TOKENS, T - t0));
    });
}


/* ---- the format's record (kernels/matrix.h) --------------------------------------------- */

static size_t f32_packed_bytes(const Matrix *m) { (void)m; return 0; } /* read as mapped */
static void f32_pack(Matrix *m, void *dst) { (void)m; (void)dst; }
__attribute__((unused)) static const char *f32_describe_generic(void) { return "scalar"; }

/* The transposed tokens of a prefill: up to T tokens of n inputs, in whole tiles. */
static int f32_scratch_init(MatmulScratch *s, size_t T, size_t n) {
    size_t padded = (T + F32_TILE_TOKENS - 1) / F32_TILE_TOKENS * F32_TILE_TOKENS, bytes = padded * n * sizeof(float);
    s->xt = aligned_alloc(64, bytes);
    if (s->xt) memset(s->xt, 0, bytes); /* map the pages now, not inside the first timed pass */
    return s->xt != NULL;
}

static const MatrixKernels f32_kernels = {
    .packed_bytes = f32_packed_bytes, .pack = f32_pack, .matmul = f32_matmul, .scratch_init = f32_scratch_init,
    .describe = f32_describe,
};

#endif
