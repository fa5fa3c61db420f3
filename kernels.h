/* kernels.h: the neural-net operations beneath run.c's forward(), with the float32 kernels.
 * Included by run.c only; every int8 kernel lives in kernels_q8.h, included below.
 *
 * Each operation has one entry point that holds its whole loop (and its OpenMP split); the
 * instruction-set variants live beneath it, chosen at compile time (-march): AVX-512, AVX2 +
 * FMA, NEON, or portable C.
 *
 *   matmul()        nn.Linear on T positions: out (T, rows) = x (T, cols) @ W^T + bias, with W
 *                   float32 (here) or q8_0 (kernels_q8.h). T = 1 (decode) is a matrix-vector
 *                   product bound by memory bandwidth; T > 1 (prefill) works in tiles that
 *                   reuse every weight they load for many tokens.
 *   layernorm()     LayerNorm of each of T positions
 *   softmax()       in place, over n values
 *   gelu()          GPT-2's tanh approximation or the exact erf form, in place
 *   residual_add()  x += delta
 *   attention()     causal attention of consecutive queries of one head over its cache
 *   prepare_for_prefill()  at load: weights rearranged for the prefill kernels that want it
 *   kernels_description()  the kernels this build runs on this CPU (for --info)
 *
 * Every path sums in its own order, so results differ in the last bits between paths.
 * tests/test_kernels.c checks each kernel against sums in double, tests/test_paths.py every
 * product of a forward pass against a reference, and greedy tokens for equality.
 */
#ifndef KERNELS_H
#define KERNELS_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#if defined(__AVX512F__) || defined(__AVX2__)
#include <immintrin.h>
#endif
#if defined(__ARM_NEON)
#include <arm_neon.h>
#endif
#ifdef _OPENMP
#include <omp.h>
#endif

#include "model.h"

#if defined(__AVX512F__)
#define F32_KERNELS "avx512"
#elif defined(__AVX2__) && defined(__FMA__)
#define F32_KERNELS "avx2"
#elif defined(__ARM_NEON)
#define F32_KERNELS "neon"
#else
#define F32_KERNELS "scalar"
#endif

/* ---- types shared by every weight format ---------------------------------------------- */

/* One weight matrix (rows, cols) = nn.Linear's (out_features, in_features), row-major. */
typedef struct {
    int type;              /* WT_F32 or WT_Q8_0 (model.h) */
    int rows, cols;
    const float *f32;      /* (rows, cols), float32 weights */
    const int8_t *q;       /* (rows, cols), q8_0 quants */
    const float *scale;    /* (rows, cols / Q8_GROUP), q8_0 scales: value = quant * scale */
    const int8_t *packed;  /* the same weights rearranged at load for prefill, or NULL */
    int packing;           /* how they are rearranged (kernels_q8.h's Q8_PACK_*) */
} Matrix;

/* Buffers for matmul(), allocated once for up to max_tokens tokens (no allocation per call). */
typedef struct {
    float *xt;    /* float32 prefill: the tokens transposed, per tile of TILE_TOKENS (n, TILE_TOKENS) */
    int8_t *q;    /* q8_0: the activations quantized (kernels_q8.h says in which order) */
    float *scale; /* q8_0: their scales, one per group */
} MatmulScratch;

/* Elementwise steps over a prompt's block are split between threads in spans of SPAN values;
 * one token's (decode) stay on one thread, where starting the others would cost more. */
#define SPAN 8192

static inline int min_int(int a, int b) { return a < b ? a : b; }

/* ---- named SIMD helpers ---------------------------------------------------------------- */

#if defined(__AVX2__) && defined(__FMA__)
/* the sum of the 8 floats of a register */
static inline float hsum_f32x8(__m256 v) {
    __m128 h = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    h = _mm_add_ps(h, _mm_movehl_ps(h, h));
    h = _mm_add_ss(h, _mm_movehdup_ps(h));
    return _mm_cvtss_f32(h);
}
#endif

#if defined(__AVX512F__)
/* the first n of 16 lanes (all for n >= 16): masks for loads and stores of a ragged tail */
static inline __mmask16 first_lanes(int n) { return n >= 16 ? 0xFFFF : (__mmask16)((1u << n) - 1); }

/* exp(z) for 16 floats, z clamped to [-87, 87]: range reduction z = k ln2 + r, |r| <= ln2/2
 * (ln2 in two parts), a degree-6 Taylor polynomial for exp(r) (relative error about 1e-7),
 * scaled by 2^k with scalef. */
static inline __m512 exp_f32x16(__m512 z) {
    z = _mm512_min_ps(_mm512_max_ps(z, _mm512_set1_ps(-87.0f)), _mm512_set1_ps(87.0f));
    __m512 k = _mm512_roundscale_ps(_mm512_mul_ps(z, _mm512_set1_ps(1.44269504f)),
                                    _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fnmadd_ps(k, _mm512_set1_ps(0.693145752f), z);
    r = _mm512_fnmadd_ps(k, _mm512_set1_ps(1.42860677e-6f), r);
    __m512 p = _mm512_set1_ps(1.0f / 720);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 120));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 24));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 6));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
    return _mm512_scalef_ps(p, k);
}
#endif

/* ---- float32 matrix products ----------------------------------------------------------- */

/* sum of a[i] * b[i] for i < n, any n */
static inline float dot_f32(const float *a, const float *b, int n) {
#if defined(__AVX512F__)
    __m512 s0 = _mm512_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;
    int i = 0;
    for (; i + 64 <= n; i += 64) {
        s0 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i), _mm512_loadu_ps(b + i), s0);
        s1 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i + 16), _mm512_loadu_ps(b + i + 16), s1);
        s2 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i + 32), _mm512_loadu_ps(b + i + 32), s2);
        s3 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i + 48), _mm512_loadu_ps(b + i + 48), s3);
    }
    for (; i < n; i += 16) { /* masked tail: any n works, including widths not a multiple of 8 */
        __mmask16 m = first_lanes(n - i);
        s0 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, a + i), _mm512_maskz_loadu_ps(m, b + i), s0);
    }
    return _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(s0, s1), _mm512_add_ps(s2, s3)));
#elif defined(__AVX2__) && defined(__FMA__)
    __m256 s0 = _mm256_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;
    int i = 0;
    for (; i + 32 <= n; i += 32) {
        s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), s0);
        s1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8), _mm256_loadu_ps(b + i + 8), s1);
        s2 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 16), _mm256_loadu_ps(b + i + 16), s2);
        s3 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 24), _mm256_loadu_ps(b + i + 24), s3);
    }
    float sum = hsum_f32x8(_mm256_add_ps(_mm256_add_ps(s0, s1), _mm256_add_ps(s2, s3)));
    for (; i < n; i++) sum += a[i] * b[i];
    return sum;
#elif defined(__ARM_NEON)
    float32x4_t s0 = vdupq_n_f32(0), s1 = vdupq_n_f32(0);
    int i = 0;
    for (; i + 8 <= n; i += 8) {
        s0 = vfmaq_f32(s0, vld1q_f32(a + i), vld1q_f32(b + i));
        s1 = vfmaq_f32(s1, vld1q_f32(a + i + 4), vld1q_f32(b + i + 4));
    }
    float sum = vaddvq_f32(vaddq_f32(s0, s1));
    for (; i < n; i++) sum += a[i] * b[i];
    return sum;
#else
    float s0 = 0, s1 = 0, s2 = 0, s3 = 0;
    int i = 0;
    for (; i + 4 <= n; i += 4) {
        s0 += a[i] * b[i]; s1 += a[i + 1] * b[i + 1]; s2 += a[i + 2] * b[i + 2]; s3 += a[i + 3] * b[i + 3];
    }
    for (; i < n; i++) s0 += a[i] * b[i];
    return (s0 + s1) + (s2 + s3);
#endif
}

/* Prefill tiles: TILE_ROWS rows of W x TILE_TOKENS tokens in outer-product form. The tokens
 * come transposed, xt (n, TILE_TOKENS) per tile (transpose_tokens), so step k loads the tile's
 * tokens' k-th values as vectors and multiplies them by w[r][k] broadcast, for each row r: the
 * products go into accumulators that stay in registers (named variables, not an array), with
 * no horizontal sums. Each output is summed over k in order, then the bias is added. A tile at
 * the bottom of W with fewer rows repeats its last row (wrow[]); those sums are not stored. */
#if defined(__AVX512F__)
/* 12 rows x 32 tokens (two registers): 24 FMAs per step into 24 accumulators */
#define TILE_ROWS 12
#define TILE_TOKENS 32
#define ROWS12(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7) X(8) X(9) X(10) X(11)
static inline void tile_f32(float *out, int ld_out, const float *xt, const float *const *wrow, int n,
                            const float *bias, int rows, int tokens) {
#define DECLARE(r) __m512 lo##r = _mm512_setzero_ps(), hi##r = lo##r; const float *w##r = wrow[r];
    ROWS12(DECLARE)
#undef DECLARE
    for (int k = 0; k < n; k++) {
        __m512 xlo = _mm512_load_ps(xt + (size_t)k * TILE_TOKENS), xhi = _mm512_load_ps(xt + (size_t)k * TILE_TOKENS + 16);
#define STEP(r)                                     \
    {                                               \
        __m512 wv = _mm512_set1_ps(w##r[k]);        \
        lo##r = _mm512_fmadd_ps(xlo, wv, lo##r);    \
        hi##r = _mm512_fmadd_ps(xhi, wv, hi##r);    \
    }
        ROWS12(STEP)
#undef STEP
    }
    float sums[TILE_ROWS][TILE_TOKENS]; /* (row, token): transposed back on the way out */
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
#define TILE_ROWS 3
#define TILE_TOKENS 32
static inline void tile_f32(float *out, int ld_out, const float *xt, const float *const *wrow, int n,
                            const float *bias, int rows, int tokens) {
    __m256 a00 = _mm256_setzero_ps(), a01 = a00, a02 = a00, a03 = a00, a10 = a00, a11 = a00,
           a12 = a00, a13 = a00, a20 = a00, a21 = a00, a22 = a00, a23 = a00;
    const float *w0 = wrow[0], *w1 = wrow[1], *w2 = wrow[2];
    for (int k = 0; k < n; k++) {
        const float *xk = xt + (size_t)k * TILE_TOKENS;
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
    float sums[TILE_ROWS][TILE_TOKENS]; /* (row, token): transposed back on the way out */
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
#define TILE_ROWS 4
#define TILE_TOKENS 16
static inline void tile_f32(float *out, int ld_out, const float *xt, const float *const *wrow, int n,
                            const float *bias, int rows, int tokens) {
    float32x4_t acc[TILE_ROWS][4];
    for (int r = 0; r < TILE_ROWS; r++)
        for (int j = 0; j < 4; j++) acc[r][j] = vdupq_n_f32(0.0f);
    for (int k = 0; k < n; k++) {
        const float *xk = xt + (size_t)k * TILE_TOKENS;
        float32x4_t x0 = vld1q_f32(xk), x1 = vld1q_f32(xk + 4), x2 = vld1q_f32(xk + 8), x3 = vld1q_f32(xk + 12);
        for (int r = 0; r < TILE_ROWS; r++) {
            float32x4_t wv = vdupq_n_f32(wrow[r][k]);
            acc[r][0] = vfmaq_f32(acc[r][0], x0, wv);
            acc[r][1] = vfmaq_f32(acc[r][1], x1, wv);
            acc[r][2] = vfmaq_f32(acc[r][2], x2, wv);
            acc[r][3] = vfmaq_f32(acc[r][3], x3, wv);
        }
    }
    float sums[TILE_ROWS][TILE_TOKENS];
    for (int r = 0; r < TILE_ROWS; r++)
        for (int j = 0; j < 4; j++) vst1q_f32(sums[r] + 4 * j, acc[r][j]);
    for (int t = 0; t < tokens; t++)
        for (int r = 0; r < rows; r++) out[(size_t)t * ld_out + r] = sums[r][t] + (bias ? bias[r] : 0.0f);
}

#else
/* portable C: 4 rows x 16 tokens (the compiler vectorizes the token loop) */
#define TILE_ROWS 4
#define TILE_TOKENS 16
static inline void tile_f32(float *out, int ld_out, const float *xt, const float *const *wrow, int n,
                            const float *bias, int rows, int tokens) {
    float sums[TILE_ROWS][TILE_TOKENS] = {{0}};
    for (int k = 0; k < n; k++)
        for (int r = 0; r < TILE_ROWS; r++) {
            float w = wrow[r][k];
            for (int t = 0; t < TILE_TOKENS; t++) sums[r][t] += xt[(size_t)k * TILE_TOKENS + t] * w;
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

/* The tokens x (T, n) transposed for tile_f32: per tile of TILE_TOKENS tokens, (n, TILE_TOKENS),
 * zero past T, so that a tile's inputs are read as one sequential stream. */
static void transpose_tokens(float *xt, const float *x, int T, int n) {
    int padded = (T + TILE_TOKENS - 1) / TILE_TOKENS * TILE_TOKENS, done = 0, job;
#if defined(__AVX512F__) /* 16 x 16 blocks in registers; what is left one value at a time */
    int blocks = n / 16;
    done = blocks * 16;
#pragma omp parallel for schedule(static)
    for (job = 0; job < padded / 16 * blocks; job++) {
        int t = job / blocks * 16, k = job % blocks * 16, rows = T - t < 16 ? T - t : 16;
        transpose16x16(xt + ((size_t)(t / TILE_TOKENS) * n + k) * TILE_TOKENS + t % TILE_TOKENS, TILE_TOKENS,
                       rows > 0 ? x + (size_t)t * n + k : x, n, rows);
    }
#endif
#pragma omp parallel for schedule(static)
    for (job = done; job < n; job++)
        for (int t = 0; t < padded; t++)
            xt[((size_t)(t / TILE_TOKENS) * n + job) * TILE_TOKENS + t % TILE_TOKENS] =
                t < T ? x[(size_t)t * n + job] : 0.0f;
}

/* float32 W: decode, one pass over W with its rows split between threads; prefill, tiles of
 * TILE_ROWS rows, each used for every tile of tokens while it sits in cache. */
static void f32_matmul(float *out, const float *x, const Matrix *w, const float *bias, int T,
                       MatmulScratch *scratch) {
    int n = w->cols, d = w->rows, i;
    if (T == 1) {
#pragma omp parallel for schedule(static)
        for (i = 0; i < d; i++) out[i] = dot_f32(w->f32 + (size_t)i * n, x, n) + (bias ? bias[i] : 0.0f);
        return;
    }
    transpose_tokens(scratch->xt, x, T, n);
#pragma omp parallel for schedule(dynamic, 1)
    for (i = 0; i < (d + TILE_ROWS - 1) / TILE_ROWS; i++) {
        int r0 = i * TILE_ROWS, rows = min_int(TILE_ROWS, d - r0);
        const float *wrow[TILE_ROWS];
        for (int r = 0; r < TILE_ROWS; r++) wrow[r] = w->f32 + (size_t)(r0 + min_int(r, rows - 1)) * n;
        for (int t0 = 0; t0 < T; t0 += TILE_TOKENS)
            tile_f32(out + (size_t)t0 * d + r0, d, scratch->xt + (size_t)t0 * n, wrow, n,
                     bias ? bias + r0 : NULL, rows, min_int(TILE_TOKENS, T - t0));
    }
}

/* ---- elementwise operations ------------------------------------------------------------ */

/* LayerNorm of each of T positions of n values: (x - mean) / sqrt(variance + eps) * weight +
 * bias (bias may be NULL). out may be x. */
static void layernorm(float *out, const float *x, const float *weight, const float *bias, int T,
                      int n, float eps) {
    int t;
#pragma omp parallel for schedule(static) if (T > 1)
    for (t = 0; t < T; t++) {
        const float *xt = x + (size_t)t * n;
        float *o = out + (size_t)t * n, mean = 0.0f, var = 0.0f;
        for (int i = 0; i < n; i++) mean += xt[i];
        mean /= n;
        for (int i = 0; i < n; i++) var += (xt[i] - mean) * (xt[i] - mean);
        var /= n;
        float inv_std = 1.0f / sqrtf(var + eps);
        for (int i = 0; i < n; i++) o[i] = (xt[i] - mean) * inv_std * weight[i] + (bias ? bias[i] : 0.0f);
    }
}

/* In-place softmax over n values: subtract the max for stability, exponentiate, normalise. */
static void softmax(float *x, int n) {
    float max = x[0], sum = 0.0f;
    for (int i = 1; i < n; i++) if (x[i] > max) max = x[i];
    int i = 0;
#if defined(__AVX512F__) /* exponentials 16 at a time, masked tail */
    __m512 acc = _mm512_setzero_ps(), m = _mm512_set1_ps(max);
    for (; i < n; i += 16) {
        __mmask16 live = first_lanes(n - i);
        __m512 e = exp_f32x16(_mm512_sub_ps(_mm512_maskz_loadu_ps(live, x + i), m));
        _mm512_mask_storeu_ps(x + i, live, e);
        acc = _mm512_add_ps(acc, _mm512_maskz_mov_ps(live, e));
    }
    sum = _mm512_reduce_add_ps(acc);
#endif
    for (; i < n; i++) { x[i] = expf(x[i] - max); sum += x[i]; }
    for (i = 0; i < n; i++) x[i] /= sum;
}

/* GELU over n values, in place: kind GELU_TANH, GPT-2's 0.5 x (1 + tanh(sqrt(2/pi) (x +
 * 0.044715 x^3))), or GELU_ERF, the exact x Phi(x) = 0.5 x (1 + erf(x / sqrt 2)) (nanoGPT). */
static void gelu_span(float *x, int n, int kind) {
    int i = 0;
#if defined(__AVX512F__) /* the tanh form as x * sigmoid(2y), since 0.5 (1 + tanh y) = 1 / (1 + exp(-2y)) */
    if (kind == GELU_TANH) {
        const __m512 c = _mm512_set1_ps(0.7978845608f), a = _mm512_set1_ps(0.044715f);
        for (; i + 16 <= n; i += 16) {
            __m512 v = _mm512_loadu_ps(x + i);
            __m512 y = _mm512_mul_ps(c, _mm512_fmadd_ps(_mm512_mul_ps(a, v), _mm512_mul_ps(v, v), v));
            __m512 e = exp_f32x16(_mm512_mul_ps(y, _mm512_set1_ps(-2.0f))); /* exp(-2y) */
            _mm512_storeu_ps(x + i, _mm512_div_ps(v, _mm512_add_ps(_mm512_set1_ps(1.0f), e)));
        }
    }
#endif
    for (; i < n; i++) {
        float v = x[i];
        if (kind == GELU_TANH)
            x[i] = 0.5f * v * (1.0f + tanhf(0.7978845608f * (v + 0.044715f * v * v * v)));
        else
            x[i] = 0.5f * v * (1.0f + erff(v * 0.70710678118654752f));
    }
}

static void gelu(float *x, int n, int kind) {
    int at;
#pragma omp parallel for schedule(static) if (n > SPAN)
    for (at = 0; at < n; at += SPAN) gelu_span(x + at, min_int(SPAN, n - at), kind);
}

static void residual_add(float *x, const float *delta, int n) {
    int i;
#pragma omp parallel for schedule(static) if (n > SPAN)
    for (i = 0; i < n; i++) x[i] += delta[i];
}

/* ---- attention --------------------------------------------------------------------------- */

/* Causal attention of nq consecutive queries of one head, at positions pos..pos+nq-1: query i
 * weighs keys 0..pos+i by softmax(query . key / sqrt(head_size)) (later keys are masked: weight
 * exactly 0) and writes the weighted sum of their values. */
typedef struct {
    const float *query;  /* nq queries of head_size floats, query_stride floats apart */
    int query_stride;
    const float *keys;   /* (n_ctx, head_size) this head's key cache, filled up to pos+nq-1 */
    const float *values; /* (n_ctx, head_size) this head's value cache */
    float *out;          /* nq outputs of head_size floats, out_stride floats apart */
    int out_stride;
    int pos, nq, head_size;
    float *weights;      /* when not NULL, query i's attention weights go to weights + i *
                            weights_stride (pos + i + 1 values): the --attention picture */
    int weights_stride;
} AttentionBlock;

/* Prefill hands attention() blocks of up to ATTENTION_BLOCK queries; it needs scratch of
 * attention_scratch_floats() floats for each block in flight. */
#define ATTENTION_BLOCK 16
static size_t attention_scratch_floats(int n_ctx, int head_size) {
    return (size_t)ATTENTION_BLOCK * ((size_t)n_ctx + (size_t)head_size);
}

/* out (hs) = sum over keys t < n of att[t] * values[t] (rows hs apart): attention's weighted sum
 * of values, accumulated in registers. With AVX-512, 64 values of the head at a time (4
 * registers) for two keys at a time, so the FMAs do not wait on each other. */
static inline void weighted_sum(float *out, const float *att, const float *values, int n, int hs) {
    int i = 0;
#if defined(__AVX512F__)
    for (; i + 64 <= hs; i += 64) {
        __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0, b0 = a0, b1 = a0, b2 = a0, b3 = a0;
        int t = 0;
        for (; t + 2 <= n; t += 2) {
            const float *v = values + (size_t)t * hs + i, *u = v + hs;
            __m512 p = _mm512_set1_ps(att[t]), q = _mm512_set1_ps(att[t + 1]);
            a0 = _mm512_fmadd_ps(p, _mm512_loadu_ps(v), a0);
            a1 = _mm512_fmadd_ps(p, _mm512_loadu_ps(v + 16), a1);
            a2 = _mm512_fmadd_ps(p, _mm512_loadu_ps(v + 32), a2);
            a3 = _mm512_fmadd_ps(p, _mm512_loadu_ps(v + 48), a3);
            b0 = _mm512_fmadd_ps(q, _mm512_loadu_ps(u), b0);
            b1 = _mm512_fmadd_ps(q, _mm512_loadu_ps(u + 16), b1);
            b2 = _mm512_fmadd_ps(q, _mm512_loadu_ps(u + 32), b2);
            b3 = _mm512_fmadd_ps(q, _mm512_loadu_ps(u + 48), b3);
        }
        if (t < n) {
            const float *v = values + (size_t)t * hs + i;
            __m512 p = _mm512_set1_ps(att[t]);
            a0 = _mm512_fmadd_ps(p, _mm512_loadu_ps(v), a0);
            a1 = _mm512_fmadd_ps(p, _mm512_loadu_ps(v + 16), a1);
            a2 = _mm512_fmadd_ps(p, _mm512_loadu_ps(v + 32), a2);
            a3 = _mm512_fmadd_ps(p, _mm512_loadu_ps(v + 48), a3);
        }
        _mm512_storeu_ps(out + i, _mm512_add_ps(a0, b0));
        _mm512_storeu_ps(out + i + 16, _mm512_add_ps(a1, b1));
        _mm512_storeu_ps(out + i + 32, _mm512_add_ps(a2, b2));
        _mm512_storeu_ps(out + i + 48, _mm512_add_ps(a3, b3));
    }
    for (; i + 16 <= hs; i += 16) {
        __m512 acc = _mm512_setzero_ps();
        for (int t = 0; t < n; t++)
            acc = _mm512_fmadd_ps(_mm512_set1_ps(att[t]), _mm512_loadu_ps(values + (size_t)t * hs + i), acc);
        _mm512_storeu_ps(out + i, acc);
    }
#endif
    if (i < hs) {
        memset(out + i, 0, (size_t)(hs - i) * sizeof(float));
        for (int t = 0; t < n; t++) {
            const float *v = values + (size_t)t * hs;
            for (int k = i; k < hs; k++) out[k] += att[t] * v[k];
        }
    }
}

/* One query at position pos: scores over keys 0..pos, softmax, weighted sum of values. att:
 * (pos + 1) floats, which hold the attention weights afterwards. */
static void attention_one(float *out, float *att, const float *query, const float *keys,
                          const float *values, int pos, int hs) {
    float scale = 1.0f / sqrtf((float)hs);
    for (int t = 0; t <= pos; t++) att[t] = dot_f32(query, keys + (size_t)t * hs, hs) * scale;
    softmax(att, pos + 1);
    weighted_sum(out, att, values, pos + 1, hs);
}

#if defined(__AVX512F__)
/* The same computation for queries q0..q0+15 of a block (fewer at its end) with the queries in
 * the lanes of a register, so that scores need no horizontal sums (head_size a multiple of 16):
 *   qt (hs, 16): the queries transposed, times 1/sqrt(hs);
 *   att (n_keys, 16): for each key j, the 16 queries' scores, then their softmax weights; key j
 *   is masked (weight exactly 0) for the queries before position j. */
static void attention_lanes16(const AttentionBlock *b, int q0, float *scratch) {
    int hs = b->head_size, nq = min_int(16, b->nq - q0), p0 = b->pos + q0, n_keys = p0 + nq, j;
    const float *queries = b->query + (size_t)q0 * b->query_stride, *keys = b->keys, *values = b->values;
    float *att = scratch, *qt = scratch + (size_t)16 * n_keys;
    float scale = 1.0f / sqrtf((float)hs);
    for (int d = 0; d < hs; d++)
        for (int q = 0; q < 16; q++) qt[d * 16 + q] = q < nq ? queries[(size_t)q * b->query_stride + d] * scale : 0.0f;
    __mmask16 live = first_lanes(nq);
#define VISIBLE(j) (__mmask16)((j) <= p0 ? live : live & ~((1u << ((j) - p0)) - 1))
    /* scores: 4 keys at a time share each load of qt */
    __m512 max = _mm512_set1_ps(-INFINITY);
    for (j = 0; j < n_keys; j += 4) {
        int keys_here = min_int(4, n_keys - j);
        const float *k0 = keys + (size_t)j * hs, *k1 = keys + (size_t)(j + (keys_here > 1)) * hs,
                    *k2 = keys + (size_t)(j + (keys_here > 2 ? 2 : 0)) * hs,
                    *k3 = keys + (size_t)(j + (keys_here > 3 ? 3 : 0)) * hs;
        __m512 s0 = _mm512_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;
        for (int d = 0; d < hs; d++) {
            __m512 qv = _mm512_loadu_ps(qt + d * 16);
            s0 = _mm512_fmadd_ps(qv, _mm512_set1_ps(k0[d]), s0);
            s1 = _mm512_fmadd_ps(qv, _mm512_set1_ps(k1[d]), s1);
            s2 = _mm512_fmadd_ps(qv, _mm512_set1_ps(k2[d]), s2);
            s3 = _mm512_fmadd_ps(qv, _mm512_set1_ps(k3[d]), s3);
        }
        __m512 sc[4] = {s0, s1, s2, s3};
        for (int k = 0; k < keys_here; k++) {
            _mm512_storeu_ps(att + (size_t)(j + k) * 16, sc[k]);
            max = _mm512_mask_max_ps(max, VISIBLE(j + k), max, sc[k]);
        }
    }
    /* softmax over the keys, each query in its lane */
    __m512 sum = _mm512_setzero_ps();
    for (j = 0; j < n_keys; j++) {
        __m512 e = _mm512_maskz_mov_ps(VISIBLE(j), exp_f32x16(_mm512_sub_ps(_mm512_loadu_ps(att + (size_t)j * 16), max)));
        _mm512_storeu_ps(att + (size_t)j * 16, e);
        sum = _mm512_add_ps(sum, e);
    }
    sum = _mm512_mask_mov_ps(_mm512_set1_ps(1.0f), live, sum);
    for (j = 0; j < n_keys; j++)
        _mm512_storeu_ps(att + (size_t)j * 16, _mm512_div_ps(_mm512_loadu_ps(att + (size_t)j * 16), sum));
#undef VISIBLE
    /* weighted sum of values: 4 queries x 16 values of the head at a time, each query over the
     * keys up to its own position */
    for (int q4 = 0; q4 < nq; q4 += 4)
        for (int d = 0; d < hs; d += 16) {
            __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
            int last = p0 + min_int(q4 + 4, nq); /* keys 0..last-1 */
            for (j = 0; j < last; j++) {
                __m512 v = _mm512_loadu_ps(values + (size_t)j * hs + d);
                const float *w = att + (size_t)j * 16 + q4;
                a0 = _mm512_fmadd_ps(_mm512_set1_ps(w[0]), v, a0);
                a1 = _mm512_fmadd_ps(_mm512_set1_ps(w[1]), v, a1);
                a2 = _mm512_fmadd_ps(_mm512_set1_ps(w[2]), v, a2);
                a3 = _mm512_fmadd_ps(_mm512_set1_ps(w[3]), v, a3);
            }
            __m512 acc[4] = {a0, a1, a2, a3};
            for (int q = q4; q < q4 + 4 && q < nq; q++)
                _mm512_storeu_ps(b->out + (size_t)(q0 + q) * b->out_stride + d, acc[q - q4]);
        }
    if (b->weights) /* the weights of each query, out of their lanes */
        for (int q = 0; q < nq; q++)
            for (j = 0; j <= p0 + q; j++) b->weights[(size_t)(q0 + q) * b->weights_stride + j] = att[(size_t)j * 16 + q];
}
#endif

/* The entry point: a prompt's block 16 queries at a time in the lanes of a register where
 * AVX-512 allows, else (and for the single query of a decode step) one query at a time. */
static void attention(const AttentionBlock *b, float *scratch) {
#if defined(__AVX512F__)
    if (b->nq > 1 && b->head_size % 16 == 0) {
        for (int q0 = 0; q0 < b->nq; q0 += 16) attention_lanes16(b, q0, scratch);
        return;
    }
#endif
    for (int q = 0; q < b->nq; q++) {
        attention_one(b->out + (size_t)q * b->out_stride, scratch, b->query + (size_t)q * b->query_stride,
                      b->keys, b->values, b->pos + q, b->head_size);
        if (b->weights)
            memcpy(b->weights + (size_t)q * b->weights_stride, scratch, (size_t)(b->pos + q + 1) * sizeof(float));
    }
}

/* ---- int8 weights, then the entry points every format shares --------------------------- */

#include "kernels_q8.h"

/* out (T, w->rows) = x (T, w->cols) @ W^T + bias (w->rows, or NULL), by weight format. */
static void matmul(float *out, const float *x, const Matrix *w, const float *bias, int T,
                   MatmulScratch *scratch) {
    if (w->type == WT_Q8_0) q8_matmul(out, x, w, bias, T, scratch);
    else f32_matmul(out, x, w, bias, T, scratch);
}

/* Buffers for matmul() on up to max_tokens tokens of at most max_cols inputs. Returns 0 when
 * memory runs out. */
static int matmul_scratch_init(MatmulScratch *s, int max_tokens, int max_cols, int weight_type) {
    size_t T = (size_t)max_tokens, n = (size_t)max_cols;
    if (weight_type == WT_Q8_0) return q8_scratch_init(s, T, n);
    size_t padded = (T + TILE_TOKENS - 1) / TILE_TOKENS * TILE_TOKENS, bytes = padded * n * sizeof(float);
    s->xt = aligned_alloc(64, bytes);
    if (s->xt) memset(s->xt, 0, bytes); /* map the pages now, not inside the first timed pass */
    return s->xt != NULL;
}

static void matmul_scratch_free(MatmulScratch *s) {
    free(s->xt);
    free(s->q);
    free(s->scale);
    memset(s, 0, sizeof *s);
}

/* At load, for the matrices a prompt's prefill multiplies: with dst NULL, the bytes of the
 * rearranged copy they need (0: none, the kernels read them as stored); with dst, rearrange them
 * into those bytes and point each Matrix at its part. */
static size_t prepare_for_prefill(Matrix *const *matrices, int count, void *dst) {
    size_t total = 0;
    for (int i = 0; i < count; i++) {
        size_t bytes = matrices[i]->type == WT_Q8_0 ? q8_packed_bytes(matrices[i]) : 0;
        if (dst && bytes) q8_pack(matrices[i], (int8_t *)dst + total);
        total += bytes;
    }
    return total;
}

/* e.g. "avx512, q8_0 avx512-vnni (prefill amx)": the kernels of this build on this CPU */
static const char *kernels_description(void) {
    static char text[160];
    snprintf(text, sizeof text, "%s, q8_0 %s", F32_KERNELS, q8_description());
    return text;
}

#endif
