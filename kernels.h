/* kernels.h: the matrix kernels beneath run.c's forward pass, included by run.c only.
 *
 * One entry point, matmul(): out (T, d) = x (T, n) @ W^T + bias for a weight matrix W (d, n)
 * stored as float32 or as q8_0 (model.h). T = 1 is the decode step, bound by memory bandwidth:
 * a matrix-vector product split over output rows. T > 1 is prompt prefill, bound by arithmetic:
 * float32 in tiles of 12 rows x 32 tokens (AVX-512; 3 x 32 with AVX2) whose products share
 * every load; q8_0 on weights rearranged once at load, as AMX int8 tile products where the CPU
 * has them, else with VNNI (AVX-512 or AVX-VNNI) 16 rows at a time, else dot products.
 * Also here: attention_queries16(), a prompt's causal attention 16 positions at a time.
 *
 * Instruction sets are chosen at compile time (-march=native): AVX-512 (with VNNI for int8),
 * AVX2 + FMA (with AVX-VNNI when present), NEON (with sdot when present), else portable C.
 * Every path sums in its own order, so results differ in the last bits between paths; the
 * tests check each path against PyTorch within tolerance and greedy tokens for equality.
 */
#ifndef KERNELS_H
#define KERNELS_H

#include <math.h>
#include <stdint.h>
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

#if defined(__AVX512F__)
#define KERNEL_PATH "avx512"
#elif defined(__AVX2__) && defined(__FMA__)
#define KERNEL_PATH "avx2"
#elif defined(__ARM_NEON)
#define KERNEL_PATH "neon"
#else
#define KERNEL_PATH "scalar"
#endif

#if defined(__AVX512VNNI__) && defined(__AVX512BW__)
#define Q8_PATH "avx512-vnni"
#elif defined(__AVX2__) && defined(__AVXVNNI__)
#define Q8_PATH "avx-vnni"
#elif defined(__AVX2__)
#define Q8_PATH "avx2-maddubs"
#elif defined(__ARM_NEON) && defined(__ARM_FEATURE_DOTPROD)
#define Q8_PATH "neon-sdot"
#else
#define Q8_PATH "scalar"
#endif

/* One weight matrix (rows, cols) of one layer: float32, or q8_0 quants with one float scale
 * per 32 values along each row (value = quant * scale). */
typedef struct {
    const float *f32;   /* (rows, cols), NULL when quantized */
    const int8_t *q;    /* (rows, cols) */
    const float *scale; /* (rows, cols / 32) */
    /* the same q8_0 weights rearranged for prefill when the model was loaded (q8_pack), or NULL */
    const int8_t *tiles;      /* (rows / 16, cols / 32, 512) */
    const float *tile_scale;  /* (rows / 16, cols / 32, 16) */
    const int32_t *tile_corr; /* (rows / 16, cols / 32, 16) 128 x each group's sum (VNNI only) */
} Matrix;

/* Scratch for matmul(), allocated once (no allocation per token). */
typedef struct {
    float *xt;    /* (T / 32, n, 32), T rounded up: float32 activations transposed for prefill tiles */
    int8_t *q;    /* (T, n) activations quantized for q8_0 products (for VNNI prefill shifted to
                     unsigned); for AMX (T / 16, n / 32, 16, 32), T rounded up */
    float *scale; /* (T, n / 32); for AMX (T / 16, n / 32, 16) */
} MatmulScratch;

/* ---- float32 ------------------------------------------------------------------------- */

static inline float dot_f32(const float *a, const float *b, int n) {
#if defined(__AVX512F__)
    __m512 s0 = _mm512_setzero_ps(), s1 = _mm512_setzero_ps(), s2 = _mm512_setzero_ps(),
           s3 = _mm512_setzero_ps();
    int i = 0;
    for (; i + 64 <= n; i += 64) {
        s0 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i), _mm512_loadu_ps(b + i), s0);
        s1 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i + 16), _mm512_loadu_ps(b + i + 16), s1);
        s2 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i + 32), _mm512_loadu_ps(b + i + 32), s2);
        s3 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i + 48), _mm512_loadu_ps(b + i + 48), s3);
    }
    for (; i < n; i += 16) { /* masked tail: any n works, including widths not a multiple of 8 */
        __mmask16 m = n - i >= 16 ? 0xFFFF : (__mmask16)((1u << (n - i)) - 1);
        s0 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, a + i), _mm512_maskz_loadu_ps(m, b + i), s0);
    }
    return _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(s0, s1), _mm512_add_ps(s2, s3)));
#elif defined(__AVX2__) && defined(__FMA__)
    __m256 s0 = _mm256_setzero_ps(), s1 = _mm256_setzero_ps(), s2 = _mm256_setzero_ps(),
           s3 = _mm256_setzero_ps();
    int i = 0;
    for (; i + 32 <= n; i += 32) {
        s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), s0);
        s1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8), _mm256_loadu_ps(b + i + 8), s1);
        s2 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 16), _mm256_loadu_ps(b + i + 16), s2);
        s3 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 24), _mm256_loadu_ps(b + i + 24), s3);
    }
    __m256 s = _mm256_add_ps(_mm256_add_ps(s0, s1), _mm256_add_ps(s2, s3));
    __m128 h = _mm_add_ps(_mm256_castps256_ps128(s), _mm256_extractf128_ps(s, 1));
    h = _mm_add_ps(h, _mm_movehl_ps(h, h));
    h = _mm_add_ss(h, _mm_movehdup_ps(h));
    float sum = _mm_cvtss_f32(h);
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

/* Prefill, float32: tiles of TILE_ROWS rows of W x 32 tokens in outer-product form. The tokens
 * come transposed, xt (n, 32) per tile (transpose_tokens), so step k loads x[t0..t0+31][k] as
 * vectors and multiplies them by w[r][k] broadcast, for each row of the tile: the products go
 * into accumulators that stay in registers (named variables, not an array), with no horizontal
 * sums. Each output is summed over k in order, then the bias is added. */
#define TILE_TOKENS 32

#if defined(__AVX512F__)
/* 12 rows x 32 tokens (two registers): 24 FMAs per step into 24 accumulators */
#define TILE_ROWS 12
#define ROWS12(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7) X(8) X(9) X(10) X(11)
static inline void tile_f32(float *out, int ldo, const float *xt, const float *w, int n,
                            const float *bias, int tokens) {
#define DECLARE(r) __m512 lo##r = _mm512_setzero_ps(), hi##r = lo##r;
    ROWS12(DECLARE)
#undef DECLARE
    for (int k = 0; k < n; k++) {
        __m512 xlo = _mm512_load_ps(xt + (size_t)k * TILE_TOKENS), xhi = _mm512_load_ps(xt + (size_t)k * TILE_TOKENS + 16);
#define STEP(r)                                                 \
    {                                                           \
        __m512 wv = _mm512_set1_ps(w[(size_t)(r) * n + k]);     \
        lo##r = _mm512_fmadd_ps(xlo, wv, lo##r);                \
        hi##r = _mm512_fmadd_ps(xhi, wv, hi##r);                \
    }
        ROWS12(STEP)
#undef STEP
    }
    float sums[TILE_ROWS][TILE_TOKENS]; /* (row, token): transposed back on the way out */
#define STORE(r) _mm512_storeu_ps(sums[r], lo##r); _mm512_storeu_ps(sums[r] + 16, hi##r);
    ROWS12(STORE)
#undef STORE
    for (int t = 0; t < tokens; t++)
        for (int r = 0; r < TILE_ROWS; r++) out[(size_t)t * ldo + r] = sums[r][t] + (bias ? bias[r] : 0.0f);
}
#undef ROWS12

#elif defined(__AVX2__) && defined(__FMA__)
/* 3 rows x 32 tokens (four registers): 12 FMAs per step into 12 accumulators, which with the
 * three broadcast weights and one input fill AVX2's 16 registers */
#define TILE_ROWS 3
static inline void tile_f32(float *out, int ldo, const float *xt, const float *w, int n,
                            const float *bias, int tokens) {
    __m256 a00 = _mm256_setzero_ps(), a01 = a00, a02 = a00, a03 = a00, a10 = a00, a11 = a00,
           a12 = a00, a13 = a00, a20 = a00, a21 = a00, a22 = a00, a23 = a00;
    for (int k = 0; k < n; k++) {
        const float *xk = xt + (size_t)k * TILE_TOKENS;
        __m256 w0 = _mm256_set1_ps(w[k]), w1 = _mm256_set1_ps(w[(size_t)n + k]),
               w2 = _mm256_set1_ps(w[2 * (size_t)n + k]), xv;
        xv = _mm256_load_ps(xk);
        a00 = _mm256_fmadd_ps(xv, w0, a00); a10 = _mm256_fmadd_ps(xv, w1, a10); a20 = _mm256_fmadd_ps(xv, w2, a20);
        xv = _mm256_load_ps(xk + 8);
        a01 = _mm256_fmadd_ps(xv, w0, a01); a11 = _mm256_fmadd_ps(xv, w1, a11); a21 = _mm256_fmadd_ps(xv, w2, a21);
        xv = _mm256_load_ps(xk + 16);
        a02 = _mm256_fmadd_ps(xv, w0, a02); a12 = _mm256_fmadd_ps(xv, w1, a12); a22 = _mm256_fmadd_ps(xv, w2, a22);
        xv = _mm256_load_ps(xk + 24);
        a03 = _mm256_fmadd_ps(xv, w0, a03); a13 = _mm256_fmadd_ps(xv, w1, a13); a23 = _mm256_fmadd_ps(xv, w2, a23);
    }
    float sums[TILE_ROWS][TILE_TOKENS]; /* (row, token): transposed back on the way out */
    _mm256_storeu_ps(sums[0], a00); _mm256_storeu_ps(sums[0] + 8, a01);
    _mm256_storeu_ps(sums[0] + 16, a02); _mm256_storeu_ps(sums[0] + 24, a03);
    _mm256_storeu_ps(sums[1], a10); _mm256_storeu_ps(sums[1] + 8, a11);
    _mm256_storeu_ps(sums[1] + 16, a12); _mm256_storeu_ps(sums[1] + 24, a13);
    _mm256_storeu_ps(sums[2], a20); _mm256_storeu_ps(sums[2] + 8, a21);
    _mm256_storeu_ps(sums[2] + 16, a22); _mm256_storeu_ps(sums[2] + 24, a23);
    for (int t = 0; t < tokens; t++)
        for (int r = 0; r < TILE_ROWS; r++) out[(size_t)t * ldo + r] = sums[r][t] + (bias ? bias[r] : 0.0f);
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

#ifdef TILE_ROWS
/* The tokens x (T, n) transposed for tile_f32: per tile of 32 tokens, (n, 32), zero past T, so
 * that a tile's inputs are read as one sequential stream. */
static void transpose_tokens(float *xt, const float *x, int T, int n) {
    int tokens16 = (T + TILE_TOKENS - 1) / TILE_TOKENS * TILE_TOKENS / 16, blocks = 0, job;
#if defined(__AVX512F__)
    blocks = n / 16; /* 16 x 16 blocks in registers */
#pragma omp parallel for schedule(static)
    for (job = 0; job < tokens16 * blocks; job++) {
        int t = job / blocks * 16, k = job % blocks * 16, rows = T - t < 16 ? T - t : 16;
        transpose16x16(xt + ((size_t)(t / TILE_TOKENS) * n + k) * TILE_TOKENS + t % TILE_TOKENS, TILE_TOKENS,
                       rows > 0 ? x + (size_t)t * n + k : x, n, rows);
    }
#endif
#pragma omp parallel for schedule(static)
    for (job = blocks * 16; job < n; job++) /* one value at a time: what is left, or everything */
        for (int t = 0; t < tokens16 * 16; t++)
            xt[((size_t)(t / TILE_TOKENS) * n + job) * TILE_TOKENS + t % TILE_TOKENS] =
                t < T ? x[(size_t)t * n + job] : 0.0f;
}
#endif

#if defined(__AVX512F__)
/* exp(z) for 16 floats, z clamped to [-87, 87]: range reduction z = k ln2 + r, |r| <= ln2/2
 * (ln2 in two parts), a degree-6 Taylor polynomial for exp(r) (relative error about 1e-7),
 * scaled by 2^k with scalef. */
static inline __m512 exp_avx512(__m512 z) {
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

/* GELU's tanh form as x * sigmoid(2y), y = sqrt(2/pi) (x + 0.044715 x^3), since
 * 0.5 (1 + tanh y) = 1 / (1 + exp(-2y)). */
static inline void gelu_tanh_avx512(float *x, int n) {
    const __m512 c = _mm512_set1_ps(0.7978845608f), a = _mm512_set1_ps(0.044715f);
    int i = 0;
    for (; i + 16 <= n; i += 16) {
        __m512 v = _mm512_loadu_ps(x + i);
        __m512 y = _mm512_mul_ps(c, _mm512_fmadd_ps(_mm512_mul_ps(a, v), _mm512_mul_ps(v, v), v));
        __m512 e = exp_avx512(_mm512_mul_ps(y, _mm512_set1_ps(-2.0f))); /* exp(-2y) */
        _mm512_storeu_ps(x + i, _mm512_div_ps(v, _mm512_add_ps(_mm512_set1_ps(1.0f), e)));
    }
    for (; i < n; i++) {
        float v = x[i];
        x[i] = 0.5f * v * (1.0f + tanhf(0.7978845608f * (v + 0.044715f * v * v * v)));
    }
}
#endif

/* x[i] = exp(x[i] - max) for i < n; returns their sum (softmax's numerator and denominator). */
static inline float exp_and_sum(float *x, int n, float max) {
    float sum = 0.0f;
    int i = 0;
#if defined(__AVX512F__)
    __m512 acc = _mm512_setzero_ps(), m = _mm512_set1_ps(max);
    for (; i < n; i += 16) { /* masked tail */
        __mmask16 live = n - i >= 16 ? 0xFFFF : (__mmask16)((1u << (n - i)) - 1);
        __m512 e = exp_avx512(_mm512_sub_ps(_mm512_maskz_loadu_ps(live, x + i), m));
        _mm512_mask_storeu_ps(x + i, live, e);
        acc = _mm512_add_ps(acc, _mm512_maskz_mov_ps(live, e));
    }
    sum = _mm512_reduce_add_ps(acc);
#endif
    for (; i < n; i++) { x[i] = expf(x[i] - max); sum += x[i]; }
    return sum;
}

/* out (hs) = sum over keys t < n of att[t] * values[t] (each of hs floats, rows hs apart):
 * attention's weighted sum of values, accumulated in registers. With AVX-512, 64 values of
 * the head at a time (4 registers) for two keys at a time, so the FMAs do not wait on each
 * other. */
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

#if defined(__AVX512F__)
/* Causal attention of nq <= 16 consecutive queries of one head, at positions p0..p0+nq-1 (a
 * prompt's prefill), the same computation as attention_head() in run.c for each of them but
 * with the 16 queries in the lanes of a register, so that scores need no horizontal sums:
 *   qt (hs, 16): the queries transposed, times 1/sqrt(hs);
 *   att (p0 + nq, 16): for each key j, the 16 queries' scores, then their softmax weights;
 *   key j is masked (weight exactly 0) for the queries before position j.
 * queries: nq rows ld apart; keys, values: (n_ctx, hs) of this head; out: nq rows ld_out apart.
 * hs is a multiple of 16. */
static void attention_queries16(float *out, int ld_out, float *att, float *qt, const float *queries,
                                int ld, const float *keys, const float *values, int p0, int nq, int hs) {
    float scale = 1.0f / sqrtf((float)hs);
    for (int d = 0; d < hs; d++)
        for (int q = 0; q < 16; q++) qt[d * 16 + q] = q < nq ? queries[(size_t)q * ld + d] * scale : 0.0f;
    int n_keys = p0 + nq;
    __mmask16 queries_mask = (__mmask16)((1u << nq) - 1);
#define VISIBLE(j) (__mmask16)((j) <= p0 ? queries_mask : queries_mask & ~((1u << ((j) - p0)) - 1))
    /* scores: 4 keys at a time share each load of qt */
    __m512 max = _mm512_set1_ps(-INFINITY);
    int j = 0;
    for (; j < n_keys; j += 4) {
        int keys_here = n_keys - j < 4 ? n_keys - j : 4;
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
        __m512 e = _mm512_maskz_mov_ps(VISIBLE(j), exp_avx512(_mm512_sub_ps(_mm512_loadu_ps(att + (size_t)j * 16), max)));
        _mm512_storeu_ps(att + (size_t)j * 16, e);
        sum = _mm512_add_ps(sum, e);
    }
    sum = _mm512_mask_mov_ps(_mm512_set1_ps(1.0f), queries_mask, sum);
    for (j = 0; j < n_keys; j++)
        _mm512_storeu_ps(att + (size_t)j * 16, _mm512_div_ps(_mm512_loadu_ps(att + (size_t)j * 16), sum));
#undef VISIBLE
    /* weighted sum of values: 4 queries x 16 values of the head at a time, each query over the
     * keys up to its own position */
    for (int q0 = 0; q0 < nq; q0 += 4)
        for (int d = 0; d < hs; d += 16) {
            __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
            int last = p0 + (q0 + 4 < nq ? q0 + 4 : nq); /* keys 0..last-1 */
            for (j = 0; j < last; j++) {
                __m512 v = _mm512_loadu_ps(values + (size_t)j * hs + d);
                const float *w = att + (size_t)j * 16 + q0;
                a0 = _mm512_fmadd_ps(_mm512_set1_ps(w[0]), v, a0);
                a1 = _mm512_fmadd_ps(_mm512_set1_ps(w[1]), v, a1);
                a2 = _mm512_fmadd_ps(_mm512_set1_ps(w[2]), v, a2);
                a3 = _mm512_fmadd_ps(_mm512_set1_ps(w[3]), v, a3);
            }
            __m512 acc[4] = {a0, a1, a2, a3};
            for (int q = q0; q < q0 + 4 && q < nq; q++) _mm512_storeu_ps(out + (size_t)q * ld_out + d, acc[q - q0]);
        }
}
#endif

/* ---- q8_0 ---------------------------------------------------------------------------- */

/* Quantize n values (n a multiple of 32) to int8 with one scale per 32: scale = max|x| / 127,
 * so quants stay in [-127, 127]; an all-zero block gets scale 0 and zero quants. */
static inline void quantize_q8(int8_t *q, float *scale, const float *x, int n) {
    for (int b = 0; b < n / 32; b++) {
        const float *xb = x + b * 32;
        float amax = 0.0f;
        for (int i = 0; i < 32; i++) amax = fabsf(xb[i]) > amax ? fabsf(xb[i]) : amax;
        float d = amax / 127.0f, inv = amax > 0.0f ? 127.0f / amax : 0.0f;
        scale[b] = d;
        /* rintf rounds half to even, like numpy's rint in export.py; it inlines (no errno) */
        for (int i = 0; i < 32; i++) q[b * 32 + i] = (int8_t)rintf(xb[i] * inv);
    }
}

#ifndef Q8_PREFETCH
#define Q8_PREFETCH 4096 /* bytes ahead: measured best of 1, 2, 4, 8 KB on make bench */
#endif

/* sum over blocks of wscale * xscale * (integer dot product of the block's quants) */
static inline float dot_q8(const int8_t *wq, const float *ws, const int8_t *xq, const float *xs, int n) {
    int nb = n / 32, b = 0;
    float sum = 0.0f;
#if defined(__AVX512VNNI__) && defined(__AVX512BW__)
    __m512 acc = _mm512_setzero_ps();
    for (; b + 2 <= nb; b += 2) { /* two blocks per 64-byte register */
        /* int8 rows are short, so the hardware prefetcher alone leaves memory idle: ask for
         * the weights a few rows ahead */
        _mm_prefetch((const char *)(wq + b * 32) + Q8_PREFETCH, _MM_HINT_T0);
        __m512i w = _mm512_loadu_si512(wq + b * 32), x = _mm512_loadu_si512(xq + b * 32);
        /* dpbusd multiplies unsigned by signed bytes: |w| times x with w's sign */
        __mmask64 negative = _mm512_movepi8_mask(w);
        __m512i aw = _mm512_abs_epi8(w);
        __m512i sx = _mm512_mask_sub_epi8(x, negative, _mm512_setzero_si512(), x);
        __m512i dots = _mm512_dpbusd_epi32(_mm512_setzero_si512(), aw, sx); /* 8 lanes per block */
        __m512 d = _mm512_insertf32x8(_mm512_set1_ps(ws[b] * xs[b]), _mm256_set1_ps(ws[b + 1] * xs[b + 1]), 1);
        acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dots), d, acc);
    }
    sum = _mm512_reduce_add_ps(acc);
#elif defined(__AVX2__)
    __m256 acc = _mm256_setzero_ps();
    for (; b < nb; b++) {
        __m256i w = _mm256_loadu_si256((const __m256i *)(wq + b * 32));
        __m256i x = _mm256_loadu_si256((const __m256i *)(xq + b * 32));
        __m256i aw = _mm256_sign_epi8(w, w), sx = _mm256_sign_epi8(x, w);
#if defined(__AVXVNNI__)
        __m256i dots = _mm256_dpbusd_avx_epi32(_mm256_setzero_si256(), aw, sx);
#else
        __m256i dots = _mm256_madd_epi16(_mm256_maddubs_epi16(aw, sx), _mm256_set1_epi16(1));
#endif
        acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dots), _mm256_set1_ps(ws[b] * xs[b]), acc);
    }
    __m128 h = _mm_add_ps(_mm256_castps256_ps128(acc), _mm256_extractf128_ps(acc, 1));
    h = _mm_add_ps(h, _mm_movehl_ps(h, h));
    h = _mm_add_ss(h, _mm_movehdup_ps(h));
    sum = _mm_cvtss_f32(h);
#elif defined(__ARM_NEON) && defined(__ARM_FEATURE_DOTPROD)
    float32x4_t acc = vdupq_n_f32(0);
    for (; b < nb; b++) {
        int32x4_t dots = vdotq_s32(vdupq_n_s32(0), vld1q_s8(wq + b * 32), vld1q_s8(xq + b * 32));
        dots = vdotq_s32(dots, vld1q_s8(wq + b * 32 + 16), vld1q_s8(xq + b * 32 + 16));
        acc = vmlaq_n_f32(acc, vcvtq_f32_s32(dots), ws[b] * xs[b]);
    }
    sum = vaddvq_f32(acc);
#endif
    for (; b < nb; b++) { /* portable path, and an odd last block for AVX-512 */
        int32_t dots = 0;
        for (int i = 0; i < 32; i++) dots += (int32_t)wq[b * 32 + i] * xq[b * 32 + i];
        sum += (float)dots * (ws[b] * xs[b]);
    }
    return sum;
}

/* ---- q8_0 prefill on weights rearranged at load ---------------------------------------
 * AMX tile products (Intel Sapphire Rapids and later) where the CPU has them and Linux grants
 * the tile state; else 16 rows in the lanes of registers, with VNNI (AVX-512 or AVX-VNNI) or
 * AVX2's maddubs. All read the weights in the same "VNNI" order, made once by q8_pack(); the
 * packing also decides the kernel: with correction terms (tile_corr) for VNNI, without for
 * AMX or maddubs. */

#if defined(__AMX_INT8__) && defined(__AMX_TILE__) && defined(__AVX512F__) && defined(__linux__)
#include <sys/syscall.h>
#include <unistd.h>
#define AMX_PREFILL 1

/* Linux hands out the 8 KB tile state only on request (arch_prctl ARCH_REQ_XCOMP_PERM for
 * XFEATURE_XTILEDATA, constants from the kernel's uapi headers); asked once per process. */
static int amx_available(void) {
    static int state = 0; /* 0 not asked yet, 1 granted, -1 refused */
    if (state == 0) state = syscall(SYS_arch_prctl, 0x1023, 18) == 0 ? 1 : -1;
    return state == 1;
}
#else
static inline int amx_available(void) { return 0; }
#endif

#if defined(__AVX512VNNI__) && defined(__AVX512BW__)
#define VNNI_PREFILL 1
#define VNNI512_PREFILL 1
#define Q8_PREFILL_KERNEL "avx512-vnni, 16 rows x 8 tokens"
#elif defined(__AVX2__) && defined(__AVXVNNI__)
#define VNNI_PREFILL 1
#define Q8_PREFILL_KERNEL "avx-vnni, 16 rows x 4 tokens"
#elif defined(__AVX2__)
#define MADDUBS_PREFILL 1
#define Q8_PREFILL_KERNEL "avx2-maddubs, 16 rows x 4 tokens"
#endif

#if defined(AMX_PREFILL) || defined(VNNI_PREFILL) || defined(MADDUBS_PREFILL)
#define Q8_PACKED_PREFILL 1

/* Rearrange q8_0 weights (rows, n), rows a multiple of 16, once at load: per block of 16 rows
 * and group of 32 columns, 8 lines of 64 bytes where bytes 4r..4r+3 of line j are
 * w[r][4j..4j+3] (AMX's B operand; for VNNI, line j holds 4 columns of all 16 rows, one row per
 * 32-bit lane); the 16 rows' scales; and, if corr is not NULL, 128 x each row's group sum. */
static void q8_pack(int8_t *tiles, float *tile_scale, int32_t *corr, const int8_t *q,
                    const float *scale, size_t rows, int n) {
    int nb = n / 32;
    long block;
#pragma omp parallel for schedule(static)
    for (block = 0; block < (long)(rows / 16); block++)
        for (int b = 0; b < nb; b++) {
            int8_t *dst = tiles + ((size_t)block * nb + b) * 512;
            for (int r = 0; r < 16; r++) {
                size_t row = (size_t)block * 16 + r, at = ((size_t)block * nb + b) * 16 + r;
                const int8_t *src = q + row * n + b * 32;
                for (int j = 0; j < 8; j++) memcpy(dst + j * 64 + r * 4, src + j * 4, 4);
                tile_scale[at] = scale[row * nb + b];
                if (corr) {
                    int32_t sum = 0;
                    for (int k = 0; k < 32; k++) sum += src[k];
                    corr[at] = 128 * sum;
                }
            }
        }
}
#endif

#ifdef AMX_PREFILL
/* Tiles 0 to 3: C, 16 tokens x 16 rows of int32 sums over one group each. Tiles 4 and 6: A,
 * 16 tokens x 32 activation quants. Tiles 5 and 7: B, 16 rows x 32 weight quants (VNNI). */
static void amx_configure(void) {
    struct { uint8_t palette, start_row, reserved[14]; uint16_t colsb[16]; uint8_t rows[16]; } cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.palette = 1;
    for (int i = 0; i < 4; i++) { cfg.rows[i] = 16; cfg.colsb[i] = 64; }
    for (int i = 4; i < 8; i += 2) {
        cfg.rows[i] = 16; cfg.colsb[i] = 32;   /* A */
        cfg.rows[i + 1] = 8; cfg.colsb[i + 1] = 64; /* B */
    }
    _tile_loadconfig(&cfg);
}

/* acc[t] += sums[t] (16 rows' int32 sums of one group) x row scales x token t's scale */
static inline void amx_scale_add(__m512 acc[16], int32_t sums[16][16], const float *ws, const float *xs) {
    __m512 w = _mm512_loadu_ps(ws);
    for (int t = 0; t < 16; t++)
        acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_load_si512(sums[t])),
                                 _mm512_mul_ps(w, _mm512_set1_ps(xs[t])), acc[t]);
}

/* out rows r0..r0+15 for all T tokens. xa, xs: the activations' quants and scales in AMX order
 * (T / 16, nb, 16, 32) and (T / 16, nb, 16), zero past T. tdpbssd multiplies signed bytes
 * by signed bytes, four products to each int32. Groups go in pairs, software-pipelined: the
 * products of the next pair (in C tiles 2, 3 or 0, 1) are under way while the sums of this
 * pair are stored and scaled into acc, so the tile unit's latency is hidden. */
static void amx_rows16(float *out, int d, const float *bias, const int8_t *xa, const float *xs,
                       Matrix w, int r0, int T, int n) {
    int nb = n / 32, pairs = nb / 2;
    const int8_t *wt = w.tiles + (size_t)(r0 / 16) * nb * 512;
    const float *ws = w.tile_scale + (size_t)(r0 / 16) * nb * 16;
    int32_t sums[2][16][16] __attribute__((aligned(64)));
    for (int t0 = 0; t0 < T; t0 += 16) {
        const int8_t *a = xa + (size_t)(t0 / 16) * nb * 512;
        const float *as = xs + (size_t)(t0 / 16) * nb * 16;
        __m512 acc[16];
        for (int t = 0; t < 16; t++) acc[t] = _mm512_setzero_ps();
/* products of groups b and b + 1 into C tiles c0 and c1 */
#define ISSUE(c0, c1, b)                                               \
    do {                                                               \
        _tile_zero(c0);                                                \
        _tile_zero(c1);                                                \
        _tile_loadd(4, a + (size_t)(b) * 512, 32);                     \
        _tile_loadd(5, wt + (size_t)(b) * 512, 64);                    \
        _tile_dpbssd(c0, 4, 5);                                        \
        _tile_loadd(6, a + (size_t)((b) + 1) * 512, 32);               \
        _tile_loadd(7, wt + (size_t)((b) + 1) * 512, 64);              \
        _tile_dpbssd(c1, 6, 7);                                        \
    } while (0)
/* their sums, scaled, into acc */
#define DRAIN(c0, c1, b)                                               \
    do {                                                               \
        _tile_stored(c0, sums[0], 64);                                 \
        _tile_stored(c1, sums[1], 64);                                 \
        amx_scale_add(acc, sums[0], ws + (b) * 16, as + (b) * 16);     \
        amx_scale_add(acc, sums[1], ws + ((b) + 1) * 16, as + ((b) + 1) * 16); \
    } while (0)
        if (pairs > 0) ISSUE(0, 1, 0);
        for (int p = 0; p < pairs; p += 2) {
            if (p + 1 < pairs) ISSUE(2, 3, 2 * (p + 1));
            DRAIN(0, 1, 2 * p);
            if (p + 1 >= pairs) break;
            if (p + 2 < pairs) ISSUE(0, 1, 2 * (p + 2));
            DRAIN(2, 3, 2 * (p + 1));
        }
#undef ISSUE
#undef DRAIN
        if (nb % 2) { /* an odd number of groups: the last one alone */
            int b = nb - 1;
            _tile_zero(0);
            _tile_loadd(4, a + (size_t)b * 512, 32);
            _tile_loadd(5, wt + (size_t)b * 512, 64);
            _tile_dpbssd(0, 4, 5);
            _tile_stored(0, sums[0], 64);
            amx_scale_add(acc, sums[0], ws + b * 16, as + b * 16);
        }
        __m512 bv = bias ? _mm512_loadu_ps(bias + r0) : _mm512_setzero_ps();
        for (int t = 0; t < 16 && t0 + t < T; t++)
            _mm512_storeu_ps(out + (size_t)(t0 + t) * d + r0, _mm512_add_ps(acc[t], bv));
    }
}
#endif

#ifdef VNNI512_PREFILL
/* out rows r0..r0+15 for all T tokens with AVX512-VNNI (CPUs without AMX): the 16 rows' int32
 * sums in the lanes of one register, 4 activation bytes of a token broadcast to every lane,
 * 8 tokens at a time sharing each load of weights. dpbusd multiplies unsigned by signed bytes,
 * so the activations come shifted by +128 (xu, (T, n)) and 128 x the group's weight sum is
 * taken off again (tile_corr). xs: the activations' scales (T, n / 32). */
static void vnni_rows16(float *out, int d, const float *bias, const uint8_t *xu, const float *xs,
                        Matrix w, int r0, int T, int n) {
    int nb = n / 32;
    const int8_t *wt = w.tiles + (size_t)(r0 / 16) * nb * 512;
    const float *ws = w.tile_scale + (size_t)(r0 / 16) * nb * 16;
    const int32_t *wc = w.tile_corr + (size_t)(r0 / 16) * nb * 16;
    __m512 bv = bias ? _mm512_loadu_ps(bias + r0) : _mm512_setzero_ps();
    for (int t0 = 0; t0 < T; t0 += 8) {
        const uint8_t *xrow[8]; /* past T, repeat the last token (its sums are not stored) */
        for (int t = 0; t < 8; t++) xrow[t] = xu + (size_t)(t0 + t < T ? t0 + t : T - 1) * n;
        __m512 acc[8];
        for (int t = 0; t < 8; t++) acc[t] = _mm512_setzero_ps();
        for (int b = 0; b < nb; b++) {
            __m512i start = _mm512_sub_epi32(_mm512_setzero_si512(), _mm512_loadu_si512(wc + b * 16));
            __m512i dots[8];
            for (int t = 0; t < 8; t++) dots[t] = start;
            for (int j = 0; j < 8; j++) {
                __m512i wv = _mm512_loadu_si512(wt + ((size_t)b * 8 + j) * 64);
                for (int t = 0; t < 8; t++) {
                    int32_t four;
                    memcpy(&four, xrow[t] + b * 32 + 4 * j, 4);
                    dots[t] = _mm512_dpbusd_epi32(dots[t], _mm512_set1_epi32(four), wv);
                }
            }
            __m512 sw = _mm512_loadu_ps(ws + b * 16);
            for (int t = 0; t < 8; t++) {
                float sx = xs[(size_t)(t0 + t < T ? t0 + t : T - 1) * nb + b];
                acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dots[t]), _mm512_mul_ps(sw, _mm512_set1_ps(sx)), acc[t]);
            }
        }
        for (int t = 0; t < 8 && t0 + t < T; t++)
            _mm512_storeu_ps(out + (size_t)(t0 + t) * d + r0, _mm512_add_ps(acc[t], bv));
    }
}
#endif

#if defined(Q8_PREFILL_KERNEL) && !defined(VNNI512_PREFILL)
/* 4-byte products of a token's broadcast activation bytes xb with one line of 8 rows' weights
 * w, added to the 8 rows' int32 sums: AVX-VNNI's dpbusd (xb shifted to unsigned), or with AVX2
 * alone maddubs (unsigned x signed bytes to int16 pairs) then madd (pairs to int32), on |w|
 * and x with w's sign, so that no pair exceeds 2 x 127 x 127 and int16 cannot saturate. */
static inline __m256i add_dot4(__m256i sums, __m256i xb, __m256i w, __m256i abs_w) {
#if defined(__AVXVNNI__)
    (void)abs_w;
    return _mm256_dpbusd_avx_epi32(sums, xb, w);
#else
    __m256i pairs = _mm256_maddubs_epi16(abs_w, _mm256_sign_epi8(xb, w));
    return _mm256_add_epi32(sums, _mm256_madd_epi16(pairs, _mm256_set1_epi16(1)));
#endif
}

/* out rows r0..r0+15 for all T tokens with 256-bit registers: as vnni_rows16, rows 0..7 and
 * 8..15 of the block in two registers, 4 tokens at a time. xq: (T, n) activation quants,
 * shifted to unsigned for AVX-VNNI (whose correction terms come in tile_corr), signed for
 * maddubs (no correction); xs: their scales (T, n / 32). */
static void rows16_avx2(float *out, int d, const float *bias, const int8_t *xq, const float *xs,
                        Matrix w, int r0, int T, int n) {
    int nb = n / 32;
    const int8_t *wt = w.tiles + (size_t)(r0 / 16) * nb * 512;
    const float *ws = w.tile_scale + (size_t)(r0 / 16) * nb * 16;
    for (int t0 = 0; t0 < T; t0 += 4) {
        const int8_t *xrow[4]; /* past T, repeat the last token (its sums are not stored) */
        for (int t = 0; t < 4; t++) xrow[t] = xq + (size_t)(t0 + t < T ? t0 + t : T - 1) * n;
        __m256 lo[4], hi[4];
        for (int t = 0; t < 4; t++) lo[t] = hi[t] = _mm256_setzero_ps();
        for (int b = 0; b < nb; b++) {
            __m256i start_lo = _mm256_setzero_si256(), start_hi = start_lo;
            if (w.tile_corr) {
                const int32_t *corr = w.tile_corr + ((size_t)(r0 / 16) * nb + b) * 16;
                start_lo = _mm256_sub_epi32(start_lo, _mm256_loadu_si256((const __m256i *)corr));
                start_hi = _mm256_sub_epi32(start_hi, _mm256_loadu_si256((const __m256i *)(corr + 8)));
            }
            __m256i dlo[4], dhi[4];
            for (int t = 0; t < 4; t++) dlo[t] = start_lo, dhi[t] = start_hi;
            for (int j = 0; j < 8; j++) {
                const int8_t *line = wt + ((size_t)b * 8 + j) * 64;
                __m256i wlo = _mm256_loadu_si256((const __m256i *)line),
                        whi = _mm256_loadu_si256((const __m256i *)(line + 32));
                __m256i alo = _mm256_abs_epi8(wlo), ahi = _mm256_abs_epi8(whi);
                for (int t = 0; t < 4; t++) {
                    int32_t four;
                    memcpy(&four, xrow[t] + b * 32 + 4 * j, 4);
                    __m256i xb = _mm256_set1_epi32(four);
                    dlo[t] = add_dot4(dlo[t], xb, wlo, alo);
                    dhi[t] = add_dot4(dhi[t], xb, whi, ahi);
                }
            }
            __m256 slo = _mm256_loadu_ps(ws + b * 16), shi = _mm256_loadu_ps(ws + b * 16 + 8);
            for (int t = 0; t < 4; t++) {
                __m256 sx = _mm256_set1_ps(xs[(size_t)(t0 + t < T ? t0 + t : T - 1) * nb + b]);
                lo[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dlo[t]), _mm256_mul_ps(slo, sx), lo[t]);
                hi[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dhi[t]), _mm256_mul_ps(shi, sx), hi[t]);
            }
        }
        __m256 blo = bias ? _mm256_loadu_ps(bias + r0) : _mm256_setzero_ps(),
               bhi = bias ? _mm256_loadu_ps(bias + r0 + 8) : _mm256_setzero_ps();
        for (int t = 0; t < 4 && t0 + t < T; t++) {
            _mm256_storeu_ps(out + (size_t)(t0 + t) * d + r0, _mm256_add_ps(lo[t], blo));
            _mm256_storeu_ps(out + (size_t)(t0 + t) * d + r0 + 8, _mm256_add_ps(hi[t], bhi));
        }
    }
}
#endif

#ifdef Q8_PACKED_PREFILL
/* q8_0 prefill of rows 0 .. d/16*16 - 1 from the rearranged weights, with the kernel they were
 * packed for. The activations are quantized here as everywhere (per token, one scale per 32),
 * in the layout that kernel reads. */
static void q8_packed_prefill(float *out, const float *x, Matrix w, const float *bias, int T, int n,
                              int d, MatmulScratch *scratch) {
    int nb = n / 32, t, block;
#ifdef AMX_PREFILL
    if (!w.tile_corr) { /* activations in AMX order: (T / 16, nb, 16, 32) */
#pragma omp parallel for schedule(static)
        for (t = 0; t < (T + 15) / 16 * 16; t++)
            for (int b = 0; b < nb; b++) {
                size_t at = ((size_t)(t / 16) * nb + b) * 16 + t % 16;
                if (t < T) quantize_q8(scratch->q + at * 32, scratch->scale + at, x + (size_t)t * n + b * 32, 32);
                else { memset(scratch->q + at * 32, 0, 32); scratch->scale[at] = 0.0f; }
            }
#pragma omp parallel
        {
            amx_configure();
#pragma omp for schedule(dynamic, 1)
            for (block = 0; block < d / 16; block++)
                amx_rows16(out, d, bias, scratch->q, scratch->scale, w, 16 * block, T, n);
            _tile_release();
        }
        return;
    }
#endif
#pragma omp parallel for schedule(static)
    for (t = 0; t < T; t++) { /* activations row by row; for VNNI shifted to unsigned */
        quantize_q8(scratch->q + (size_t)t * n, scratch->scale + (size_t)t * nb, x + (size_t)t * n, n);
#ifdef VNNI_PREFILL
        for (int k = 0; k < n; k++) scratch->q[(size_t)t * n + k] = (int8_t)(uint8_t)(scratch->q[(size_t)t * n + k] + 128);
#endif
    }
#pragma omp parallel for schedule(dynamic, 1)
    for (block = 0; block < d / 16; block++) {
#ifdef VNNI512_PREFILL
        vnni_rows16(out, d, bias, (const uint8_t *)scratch->q, scratch->scale, w, 16 * block, T, n);
#else
        rows16_avx2(out, d, bias, scratch->q, scratch->scale, w, 16 * block, T, n);
#endif
    }
}
#endif

/* ---- the entry point ----------------------------------------------------------------- */

static inline float matrix_row_dot(Matrix w, int row, const float *x, const int8_t *xq,
                                   const float *xs, int n) {
    if (w.f32) return dot_f32(w.f32 + (size_t)row * n, x, n);
    return dot_q8(w.q + (size_t)row * n, w.scale + (size_t)row * (n / 32), xq, xs, n);
}

/* out (T, d) = x (T, n) @ W (d, n)^T + bias (d, or NULL). With q8_0 weights the activations
 * are quantized the same way (per token, one scale per 32) and the products are integer, on
 * every path, so all paths compute the same thing up to float summation order. */
static void matmul(float *out, const float *x, Matrix w, const float *bias, int T, int n, int d,
                   MatmulScratch *scratch) {
    const int8_t *xq = NULL;
    const float *xs = NULL;
    int i, done_rows = 0;
#ifdef Q8_PACKED_PREFILL
    if (T > 1 && w.tiles) {
        q8_packed_prefill(out, x, w, bias, T, n, d, scratch);
        done_rows = d / 16 * 16;
        if (done_rows == d) return;
        w.tiles = NULL; /* the rows left over go the common way, below */
    }
#endif
    if (!w.f32) { /* quantize the activations once for all rows */
        int t;
#pragma omp parallel for schedule(static) if (T > 1)
        for (t = 0; t < T; t++)
            quantize_q8(scratch->q + (size_t)t * n, scratch->scale + (size_t)t * (n / 32),
                        x + (size_t)t * n, n);
        xq = scratch->q;
        xs = scratch->scale;
    }
    if (T == 1) { /* decode: one pass over W, rows split between threads */
#pragma omp parallel for schedule(static)
        for (i = 0; i < d; i++) out[i] = matrix_row_dot(w, i, x, xq, xs, n) + (bias ? bias[i] : 0.0f);
        return;
    }
#ifdef TILE_ROWS
    if (w.f32 && d >= TILE_ROWS && scratch->xt) {
        float *xt = scratch->xt;
        transpose_tokens(xt, x, T, n);
        done_rows = d / TILE_ROWS * TILE_ROWS;
        /* each block of rows is used for every token tile while it sits in cache */
#pragma omp parallel for schedule(dynamic, 1)
        for (i = 0; i < d / TILE_ROWS; i++)
            for (int t0 = 0; t0 < T; t0 += TILE_TOKENS)
                tile_f32(out + (size_t)t0 * d + TILE_ROWS * i, d, xt + (size_t)t0 * n,
                         w.f32 + (size_t)TILE_ROWS * i * n, n, bias ? bias + TILE_ROWS * i : NULL,
                         T - t0 < TILE_TOKENS ? T - t0 : TILE_TOKENS);
    }
#endif
    /* prefill without tiles (other instruction sets, and the rows left over): blocks of 4 rows,
     * each used for every token while it sits in cache */
#pragma omp parallel for schedule(dynamic, 4)
    for (i = done_rows / 4; i < (d + 3) / 4; i++) {
        int r0 = 4 * i, rows = d - r0 < 4 ? d - r0 : 4, t = 0;
        for (; t < T; t++)
            for (int r = r0; r < r0 + rows; r++)
                out[(size_t)t * d + r] = matrix_row_dot(w, r, x + (size_t)t * n,
                                                        xq ? xq + (size_t)t * n : NULL,
                                                        xs ? xs + (size_t)t * (n / 32) : NULL, n) +
                                         (bias ? bias[r] : 0.0f);
    }
}

#endif
