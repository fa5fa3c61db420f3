/* kernels/f32.h: matrix products with float32 weights, as kernels/simd.h defines them:
 *   decode (one token, or one token of each of several samples): a pass over W with its rows
 *     split between threads, dot_f32 (or decode_tile_f32 for samples) per row;
 *   prefill (two or more tokens of one sequence): tiles of rows x tokens in outer-product
 *     form whose accumulators stay in registers, each tile of W used for every tile of tokens
 *     while it sits in cache.
 * The matrices are read where the file is mapped: no copy at load. */
#ifndef KERNELS_F32_H
#define KERNELS_F32_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../model.h"
#include "matrix.h"
#include "parallel.h"
#include "simd.h"

/* Decode: w . x (n floats each), as defined above: 64 partial sums over k = l (mod 64), then
 * the fixed tree, in registers (vector adds while the halves are whole vectors, then
 * vf_reduce). A part block at the end goes through zero-padded copies: fma(0, 0, p) = p. One
 * row at a time: a single sequential stream per row reads memory faster than interleaving rows
 * (measured on AMD Zen 4), and 64 / VW independent chains of FMAs keep up with it. */
/* inlined into the row loop: a call per row cost about 6% on the small in-cache model */
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
 * computes. Asking for a tile's rows whole before starting it (as before) made each thread
 * wait for memory, then compute. Tiles of 6 rows x 4 tokens (were 4 x 6) leave no token slot
 * empty for 4, 8 or 16 samples. tests/build/kernels f32 32768 2048 THREADS TOKENS (268 MB),
 * AMD Zen 4, GB/s of weights: 8 tokens 5.6 -> 11.2-11.5 with 1 thread, 10.6-11.0 -> 20.7-20.9
 * with 2; 16 tokens 4.4-4.5 -> 6.1-6.3, 8.4-8.7 -> 11.7-11.8.
 * rows_cached (the later tiles of tokens, whose rows the first one brought into cache): each
 * weight vector is loaded once into a register (ONE_LOAD) instead of GCC folding its load into
 * every fma (4 loads of each). For rows coming from memory the folded form is faster (a
 * tile's first pass, and 4 samples, keep it: with ONE_LOAD there, 124M --samples 8 fell from
 * 334-346 to 274-287 tok/s on AMD Zen 4); for rows in cache the loads are what limits the tile.
 * 124M f32, 128 tokens, -t 0.8 -k 40, alternating runs on Zen 4: --samples 16 416 -> 470 tok/s
 * (2 threads), 223 -> 250 (1 thread); 8 samples 361 -> 369; same bits. */
#if defined(__AVX512F__) || defined(__ARM_NEON)
#define F32_DECODE_ROWS 6 /* 24 accumulators, 6 weights and an input in 32 registers */
#define F32_DECODE_TOKENS 4
#else
#define F32_DECODE_ROWS 3 /* 12 accumulators, 3 weights and an input in AVX2's 16 registers */
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
#if defined(__AVX512F__)
/* 12 rows x 32 tokens (two registers): 24 FMAs per step into 24 accumulators */
#define F32_TILE_ROWS 12
#define F32_TILE_TOKENS 32
#define ROWS12(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7) X(8) X(9) X(10) X(11)
static inline void tile_f32(float *out, int ld_out, const float *xt, const float *const *wrow, int n,
                            const float *bias, int rows, int tokens) {
#define DECLARE(r) __m512 lo##r = _mm512_setzero_ps(), hi##r = lo##r; const float *w##r = wrow[r];
    ROWS12(DECLARE)
#undef DECLARE
    for (int k = 0; k < n; k++) {
        __m512 xlo = _mm512_load_ps(xt + (size_t)k * F32_TILE_TOKENS), xhi = _mm512_load_ps(xt + (size_t)k * F32_TILE_TOKENS + 16);
#define STEP(r)                                     \
    {                                               \
        __m512 wv = _mm512_set1_ps(w##r[k]);        \
        lo##r = _mm512_fmadd_ps(xlo, wv, lo##r);    \
        hi##r = _mm512_fmadd_ps(xhi, wv, hi##r);    \
    }
        ROWS12(STEP)
#undef STEP
    }
    float sums[F32_TILE_ROWS][F32_TILE_TOKENS]; /* (row, token): transposed back on the way out */
#define STORE(r) _mm512_storeu_ps(sums[r], lo##r); _mm512_storeu_ps(sums[r] + 16, hi##r);
    ROWS12(STORE)
#undef STORE
    for (int t = 0; t < tokens; t++)
        for (int r = 0; r < rows; r++) out[(size_t)t * ld_out + r] = sums[r][t] + (bias ? bias[r] : 0.0f);
}
#undef ROWS12

#elif defined(__AVX2__) && defined(__FMA__)
/* 3 rows x 32 tokens (four registers): 12 FMAs per step into 12 accumulators, which with the
 * three broadcast weights and one input fill AVX2's 16 registers */
#define F32_TILE_ROWS 3
#define F32_TILE_TOKENS 32
static inline void tile_f32(float *out, int ld_out, const float *xt, const float *const *wrow, int n,
                            const float *bias, int rows, int tokens) {
    __m256 a00 = _mm256_setzero_ps(), a01 = a00, a02 = a00, a03 = a00, a10 = a00, a11 = a00,
           a12 = a00, a13 = a00, a20 = a00, a21 = a00, a22 = a00, a23 = a00;
    const float *w0 = wrow[0], *w1 = wrow[1], *w2 = wrow[2];
    for (int k = 0; k < n; k++) {
        const float *xk = xt + (size_t)k * F32_TILE_TOKENS;
        __m256 v0 = _mm256_set1_ps(w0[k]), v1 = _mm256_set1_ps(w1[k]), v2 = _mm256_set1_ps(w2[k]), xv;
        xv = _mm256_load_ps(xk);
        a00 = _mm256_fmadd_ps(xv, v0, a00); a10 = _mm256_fmadd_ps(xv, v1, a10); a20 = _mm256_fmadd_ps(xv, v2, a20);
        xv = _mm256_load_ps(xk + 8);
        a01 = _mm256_fmadd_ps(xv, v0, a01); a11 = _mm256_fmadd_ps(xv, v1, a11); a21 = _mm256_fmadd_ps(xv, v2, a21);
        xv = _mm256_load_ps(xk + 16);
        a02 = _mm256_fmadd_ps(xv, v0, a02); a12 = _mm256_fmadd_ps(xv, v1, a12); a22 = _mm256_fmadd_ps(xv, v2, a22);
        xv = _mm256_load_ps(xk + 24);
        a03 = _mm256_fmadd_ps(xv, v0, a03); a13 = _mm256_fmadd_ps(xv, v1, a13); a23 = _mm256_fmadd_ps(xv, v2, a23);
    }
    float sums[F32_TILE_ROWS][F32_TILE_TOKENS]; /* (row, token): transposed back on the way out */
    _mm256_storeu_ps(sums[0], a00); _mm256_storeu_ps(sums[0] + 8, a01);
    _mm256_storeu_ps(sums[0] + 16, a02); _mm256_storeu_ps(sums[0] + 24, a03);
    _mm256_storeu_ps(sums[1], a10); _mm256_storeu_ps(sums[1] + 8, a11);
    _mm256_storeu_ps(sums[1] + 16, a12); _mm256_storeu_ps(sums[1] + 24, a13);
    _mm256_storeu_ps(sums[2], a20); _mm256_storeu_ps(sums[2] + 8, a21);
    _mm256_storeu_ps(sums[2] + 16, a22); _mm256_storeu_ps(sums[2] + 24, a23);
    for (int t = 0; t < tokens; t++)
        for (int r = 0; r < rows; r++) out[(size_t)t * ld_out + r] = sums[r][t] + (bias ? bias[r] : 0.0f);
}

#elif defined(__ARM_NEON)
/* 4 rows x 16 tokens: 16 accumulators of 4 floats, the tokens in 4 registers */
#define F32_TILE_ROWS 4
#define F32_TILE_TOKENS 16
static inline void tile_f32(float *out, int ld_out, const float *xt, const float *const *wrow, int n,
                            const float *bias, int rows, int tokens) {
    float32x4_t acc[F32_TILE_ROWS][4];
    for (int r = 0; r < F32_TILE_ROWS; r++)
        for (int j = 0; j < 4; j++) acc[r][j] = vdupq_n_f32(0.0f);
    for (int k = 0; k < n; k++) {
        const float *xk = xt + (size_t)k * F32_TILE_TOKENS;
        float32x4_t x0 = vld1q_f32(xk), x1 = vld1q_f32(xk + 4), x2 = vld1q_f32(xk + 8), x3 = vld1q_f32(xk + 12);
        for (int r = 0; r < F32_TILE_ROWS; r++) {
            float32x4_t wv = vdupq_n_f32(wrow[r][k]);
            acc[r][0] = vfmaq_f32(acc[r][0], x0, wv);
            acc[r][1] = vfmaq_f32(acc[r][1], x1, wv);
            acc[r][2] = vfmaq_f32(acc[r][2], x2, wv);
            acc[r][3] = vfmaq_f32(acc[r][3], x3, wv);
        }
    }
    float sums[F32_TILE_ROWS][F32_TILE_TOKENS];
    for (int r = 0; r < F32_TILE_ROWS; r++)
        for (int j = 0; j < 4; j++) vst1q_f32(sums[r] + 4 * j, acc[r][j]);
    for (int t = 0; t < tokens; t++)
        for (int r = 0; r < rows; r++) out[(size_t)t * ld_out + r] = sums[r][t] + (bias ? bias[r] : 0.0f);
}

#else
/* portable C: 4 rows x 16 tokens (the compiler vectorizes the token loop where it can) */
#define F32_TILE_ROWS 4
#define F32_TILE_TOKENS 16
static inline void tile_f32(float *out, int ld_out, const float *xt, const float *const *wrow, int n,
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
#endif

#if defined(__AVX512F__)
/* dst[k][t] = src[t][k] for a block of 16 x 16 floats (rows lines of src exist, the rest read
 * as zero): pairs of lines interleaved by 1, 2, 4 and 8 floats in four rounds of shuffles. */
static inline void transpose16x16(float *dst, size_t ld_dst, const float *src, size_t ld_src, int rows) {
    __m512 r[16], t[16];
    for (int i = 0; i < 16; i++) r[i] = i < rows ? _mm512_loadu_ps(src + i * ld_src) : _mm512_setzero_ps();
    for (int i = 0; i < 16; i += 2) {
        t[i] = _mm512_unpacklo_ps(r[i], r[i + 1]);
        t[i + 1] = _mm512_unpackhi_ps(r[i], r[i + 1]);
    }
    for (int i = 0; i < 16; i += 4) {
        r[i] = _mm512_shuffle_ps(t[i], t[i + 2], 0x44);
        r[i + 1] = _mm512_shuffle_ps(t[i], t[i + 2], 0xEE);
        r[i + 2] = _mm512_shuffle_ps(t[i + 1], t[i + 3], 0x44);
        r[i + 3] = _mm512_shuffle_ps(t[i + 1], t[i + 3], 0xEE);
    }
    for (int i = 0; i < 4; i++) {
        t[i] = _mm512_shuffle_f32x4(r[i], r[i + 4], 0x88);
        t[i + 4] = _mm512_shuffle_f32x4(r[i], r[i + 4], 0xDD);
        t[i + 8] = _mm512_shuffle_f32x4(r[i + 8], r[i + 12], 0x88);
        t[i + 12] = _mm512_shuffle_f32x4(r[i + 8], r[i + 12], 0xDD);
    }
    for (int i = 0; i < 8; i++) {
        r[i] = _mm512_shuffle_f32x4(t[i], t[i + 8], 0x88);
        r[i + 8] = _mm512_shuffle_f32x4(t[i], t[i + 8], 0xDD);
    }
    for (int i = 0; i < 16; i++) _mm512_storeu_ps(dst + i * ld_dst, r[i]);
}
#endif

/* The tokens x (T, n) transposed for tile_f32: per tile of F32_TILE_TOKENS tokens, (n, F32_TILE_TOKENS),
 * zero past T, so that a tile's inputs are read as one sequential stream. */
static void transpose_tokens(float *xt, const float *x, int T, int n) {
    int padded = (T + F32_TILE_TOKENS - 1) / F32_TILE_TOKENS * F32_TILE_TOKENS, done = 0, job;
#if defined(__AVX512F__) /* 16 x 16 blocks in registers; what is left one value at a time */
    int blocks = n / 16;
    done = blocks * 16;
    SPLIT_FOR(1, schedule(static), (job = 0; job < padded / 16 * blocks; job++), {
        int t = job / blocks * 16, k = job % blocks * 16, rows = T - t < 16 ? T - t : 16;
        transpose16x16(xt + ((size_t)(t / F32_TILE_TOKENS) * n + k) * F32_TILE_TOKENS + t % F32_TILE_TOKENS, F32_TILE_TOKENS,
                       rows > 0 ? x + (size_t)t * n + k : x, n, rows);
    });
#endif
    SPLIT_FOR(done < n, schedule(static), (job = done; job < n; job++), {
        for (int t = 0; t < padded; t++)
            xt[((size_t)(t / F32_TILE_TOKENS) * n + job) * F32_TILE_TOKENS + t % F32_TILE_TOKENS] =
                t < T ? x[(size_t)t * n + job] : 0.0f;
    });
}

/* float32 W: decode, one pass over W with its rows split between threads (for one token, or
 * for the T tokens of T samples decoding together); prefill, tiles of F32_TILE_ROWS rows, each used
 * for every tile of tokens while it sits in cache. */
static void f32_matmul(float *out, const float *x, const Matrix *w, const float *bias, int T, int decode,
                       MatmulScratch *scratch) {
    int n = w->cols, d = w->rows, i;
    if (T == 1) {
        SPLIT_FOR(1, schedule(static), (i = 0; i < d; i++), { out[i] = dot_f32(w->f32 + (size_t)i * n, x, n) + (bias ? bias[i] : 0.0f); });
        return;
    }
    if (decode) { /* T samples' decode steps: tiles of F32_DECODE_ROWS rows, each row read from
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
            tile_f32(out + (size_t)t0 * d + r0, d, scratch->xt + (size_t)t0 * n, wrow, n,
                     bias ? bias + r0 : NULL, rows, min_int(F32_TILE_TOKENS, T - t0));
    });
}


/* ---- the format's record (kernels/matrix.h) --------------------------------------------- */

static uint64_t f32_file_bytes(uint64_t n) { return 4 * n; } /* callers check n < 2^62 */

static void f32_place(Matrix *m, const uint8_t *data, uint64_t count, uint64_t first) {
    (void)count;
    m->f32 = (const float *)(const void *)data + first;
}

static void f32_row(const Matrix *m, int r, float *out) {
    memcpy(out, m->f32 + (size_t)r * m->cols, (size_t)m->cols * sizeof(float));
}

static size_t f32_packed_bytes(const Matrix *m) { (void)m; return 0; } /* read as mapped */
static void f32_pack(Matrix *m, void *dst) { (void)m; (void)dst; }

static const char *f32_describe(void) { return F32_KERNELS; }

/* The transposed tokens of a prefill: up to T tokens of n inputs, in whole tiles. */
static int f32_scratch_init(MatmulScratch *s, size_t T, size_t n) {
    size_t padded = (T + F32_TILE_TOKENS - 1) / F32_TILE_TOKENS * F32_TILE_TOKENS, bytes = padded * n * sizeof(float);
    s->xt = aligned_alloc(64, bytes);
    if (s->xt) memset(s->xt, 0, bytes); /* map the pages now, not inside the first timed pass */
    return s->xt != NULL;
}

static const WeightFormat f32_format = {
    .name = "f32", .group_size = 0, .file_bytes = f32_file_bytes, .place = f32_place, .row = f32_row,
    .packed_bytes = f32_packed_bytes, .pack = f32_pack, .matmul = f32_matmul, .describe = f32_describe,
    .scratch_init = f32_scratch_init,
};

#endif
