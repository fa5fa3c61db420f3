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
 *   prepare_weights()      at load: weights rearranged for the kernels that want it
 *   kernels_description()  the kernels this build runs on this CPU (for --info)
 *
 * Arithmetic every path shares. Each path performs the same float32 operations in the same
 * order, so every path gives bit-identical results: the same logits, and so the same tokens, on
 * any CPU and with any thread count (each output is computed by one thread). fma is a fused
 * multiply-add (one rounding); sums run in the order written.
 *   exp(z): z clamped to [-87, 87]; k = round_half_even(z * 1.44269504); r = fma(-k,
 *     0.693145752, z); r = fma(-k, 1.42860677e-6, r) (ln 2 in two parts, Cody and Waite);
 *     p = 1/720; p = fma(p, r, c) for c = 1/120, 1/24, 1/6, 1/2, 1, 1 (Taylor series of
 *     exp(r), relative error about 1e-7); exp = p * 2^k.
 *   GELU, tanh form: y = 0.7978845608 * fma(0.044715 x, x x, x); x / (1 + exp(-2 y)),
 *     since 0.5 (1 + tanh y) = 1 / (1 + exp(-2y)).
 *   GELU, erf form: 0.5 x (1 + erf(x / sqrt 2)), erf from the Chebyshev fit of erfc in
 *     Numerical Recipes in C (2nd ed., section 6.2, "erfcc": fractional error below 1.2e-7):
 *     z = x * 0.70710678, t = 1 / (1 + 0.5 |z|), erfc|z| = t exp(fma(-|z|, |z|, P(t))) with P
 *     in Horner form by fma, erf = copysign(1 - erfc|z|, z); then (0.5 x) (1 + erf).
 *   softmax: e_j = exp(x_j - max x); sum = e_0 + e_1 + ... in order; x_j = e_j / sum.
 *   attention of a query q at position pos over keys k_j, values v_j, j <= pos: score_j = fma
 *     chain over d of (q_d * (1 / sqrt(head_size))) * k_jd; softmax; out_d = fma chain over j
 *     of weight_j * v_jd.
 *   float32 matrix-vector product (decode, of one token or of each of several samples): 64
 *     partial sums, partial l an fma chain over the k = l, l + 64, l + 128, ... in order; then
 *     p_i += p_{i+32} for i < 32, p_i += p_{i+16} for i < 16, and so on down to p_0 + p_1 (a
 *     fixed tree); then + bias.
 *   float32 prefill (two or more tokens of one sequence): each output an fma chain over k in
 *     order, then + bias.
 *   q8_0 products (kernels_q8.h): exact integer dot products per group of 32, then an fma chain
 *     over the groups in order of dot_g * (weight scale_g * activation scale_g); then + bias.
 *   LayerNorm, embeddings and residual adds: plain float32 operations in order.
 * tests/test_kernels.c checks each path's kernels against these definitions bit for bit, and
 * tests/test_paths.py every path's logits against every other's.
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
    int type;              /* WT_F32, WT_Q8_0 or WT_Q4_0 (model.h) */
    int rows, cols;
    const float *f32;      /* (rows, cols), float32 weights */
    const int8_t *q;       /* (rows, cols), q8_0 quants */
    const uint8_t *q4;     /* (rows, cols / 2), q4_0 quants, two to a byte (model.h) */
    const float *scale;    /* (rows, cols / Q8_GROUP), q8_0 or q4_0 scales: value = quant * scale */
    const int8_t *packed;  /* the same weights rearranged at load (kernels_q8.h), or NULL */
    int packing;           /* how they are rearranged (kernels_q8.h's Q8_PACK_*) */
} Matrix;

/* Buffers for matmul(), allocated once for up to max_tokens tokens (no allocation per call). */
typedef struct {
    float *xt;    /* float32 prefill: the tokens transposed, per tile of TILE_TOKENS (n, TILE_TOKENS) */
    int8_t *q;    /* q8_0: the activations quantized (kernels_q8.h says in which order) */
    float *scale; /* q8_0: their scales, one per group */
    int32_t *sum; /* q4_0: each group's sum of quants */
} MatmulScratch;

/* Elementwise steps over a prompt's block are split between threads in spans of SPAN values;
 * one token's (decode) stay on one thread, where starting the others would cost more. */
#define SPAN 8192

static inline int min_int(int a, int b) { return a < b ? a : b; }
static inline int max_int(int a, int b) { return a > b ? a : b; }
static inline int round_up16(int n) { return (n + 15) / 16 * 16; }

/* ---- a vector of VW floats: the one place that differs between instruction sets ---------
 * exp, GELU, softmax, attention and the decode dot product are written once with these; each
 * operation is the same IEEE operation on every path, lane by lane. vf_reduce sums a vector's
 * lanes as a fixed tree: lane i + lane i + VW/2 for i < VW/2, then the same on what is left. */

#if defined(__AVX512F__)
#define VW 16
typedef __m512 vf;
static inline vf vf_load(const float *p) { return _mm512_loadu_ps(p); }
static inline void vf_store(float *p, vf v) { _mm512_storeu_ps(p, v); }
static inline vf vf_set1(float x) { return _mm512_set1_ps(x); }
static inline vf vf_add(vf a, vf b) { return _mm512_add_ps(a, b); }
static inline vf vf_mul(vf a, vf b) { return _mm512_mul_ps(a, b); }
static inline vf vf_div(vf a, vf b) { return _mm512_div_ps(a, b); }
static inline vf vf_max(vf a, vf b) { return _mm512_max_ps(a, b); }
static inline vf vf_min(vf a, vf b) { return _mm512_min_ps(a, b); }
static inline vf vf_fma(vf a, vf b, vf c) { return _mm512_fmadd_ps(a, b, c); }
static inline vf vf_round(vf a) { return _mm512_roundscale_ps(a, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }
static inline vf vf_pow2(vf k) { /* 2^k for whole k in [-126, 127]: the exponent field */
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_add_epi32(_mm512_cvtps_epi32(k), _mm512_set1_epi32(127)), 23));
}
static inline vf vf_abs(vf a) { return _mm512_abs_ps(a); }
static inline float vf_reduce(vf v) { /* lane i + lane i+8, then i+4, i+2, i+1 */
    __m256 s8 = _mm256_add_ps(_mm512_castps512_ps256(v), _mm512_extractf32x8_ps(v, 1));
    __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(s8), _mm256_extractf128_ps(s8, 1));
    __m128 s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
    return _mm_cvtss_f32(_mm_add_ss(s2, _mm_movehdup_ps(s2)));
}
static inline vf vf_copysign(vf mag, vf sign) { /* mag's magnitude with sign's sign bit */
    __m512i m = _mm512_set1_epi32(INT32_MIN);
    return _mm512_castsi512_ps(_mm512_or_si512(_mm512_andnot_si512(m, _mm512_castps_si512(mag)),
                                               _mm512_and_si512(m, _mm512_castps_si512(sign))));
}
#elif defined(__AVX2__) && defined(__FMA__)
#define VW 8
typedef __m256 vf;
static inline vf vf_load(const float *p) { return _mm256_loadu_ps(p); }
static inline void vf_store(float *p, vf v) { _mm256_storeu_ps(p, v); }
static inline vf vf_set1(float x) { return _mm256_set1_ps(x); }
static inline vf vf_add(vf a, vf b) { return _mm256_add_ps(a, b); }
static inline vf vf_mul(vf a, vf b) { return _mm256_mul_ps(a, b); }
static inline vf vf_div(vf a, vf b) { return _mm256_div_ps(a, b); }
static inline vf vf_max(vf a, vf b) { return _mm256_max_ps(a, b); }
static inline vf vf_min(vf a, vf b) { return _mm256_min_ps(a, b); }
static inline vf vf_fma(vf a, vf b, vf c) { return _mm256_fmadd_ps(a, b, c); }
static inline vf vf_round(vf a) { return _mm256_round_ps(a, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }
static inline vf vf_pow2(vf k) {
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(k), _mm256_set1_epi32(127)), 23));
}
static inline vf vf_abs(vf a) { return _mm256_andnot_ps(_mm256_set1_ps(-0.0f), a); }
static inline float vf_reduce(vf v) { /* lane i + lane i+4, then i+2, i+1 */
    __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    __m128 s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
    return _mm_cvtss_f32(_mm_add_ss(s2, _mm_movehdup_ps(s2)));
}
static inline vf vf_copysign(vf mag, vf sign) {
    __m256 s = _mm256_set1_ps(-0.0f);
    return _mm256_or_ps(_mm256_andnot_ps(s, mag), _mm256_and_ps(s, sign));
}
#elif defined(__ARM_NEON)
#define VW 4
typedef float32x4_t vf;
static inline vf vf_load(const float *p) { return vld1q_f32(p); }
static inline void vf_store(float *p, vf v) { vst1q_f32(p, v); }
static inline vf vf_set1(float x) { return vdupq_n_f32(x); }
static inline vf vf_add(vf a, vf b) { return vaddq_f32(a, b); }
static inline vf vf_mul(vf a, vf b) { return vmulq_f32(a, b); }
static inline vf vf_div(vf a, vf b) { return vdivq_f32(a, b); }
static inline vf vf_max(vf a, vf b) { return vmaxq_f32(a, b); }
static inline vf vf_min(vf a, vf b) { return vminq_f32(a, b); }
static inline vf vf_fma(vf a, vf b, vf c) { return vfmaq_f32(c, a, b); }
static inline vf vf_round(vf a) { return vrndnq_f32(a); }
static inline vf vf_pow2(vf k) {
    return vreinterpretq_f32_s32(vshlq_n_s32(vaddq_s32(vcvtq_s32_f32(k), vdupq_n_s32(127)), 23));
}
static inline vf vf_abs(vf a) { return vabsq_f32(a); }
static inline float vf_reduce(vf v) { /* lane i + lane i+2, then i+1 */
    return vpadds_f32(vadd_f32(vget_low_f32(v), vget_high_f32(v)));
}
static inline vf vf_copysign(vf mag, vf sign) {
    return vbslq_f32(vdupq_n_u32(0x80000000u), sign, mag);
}
#else /* portable C: a "vector" of one float */
#define VW 1
typedef float vf;
static inline vf vf_load(const float *p) { return *p; }
static inline void vf_store(float *p, vf v) { *p = v; }
static inline vf vf_set1(float x) { return x; }
static inline vf vf_add(vf a, vf b) { return a + b; }
static inline vf vf_mul(vf a, vf b) { return a * b; }
static inline vf vf_div(vf a, vf b) { return a / b; }
static inline vf vf_max(vf a, vf b) { return a > b ? a : b; }
static inline vf vf_min(vf a, vf b) { return a < b ? a : b; }
static inline vf vf_fma(vf a, vf b, vf c) { return fmaf(a, b, c); }
static inline vf vf_round(vf a) { return rintf(a); }
static inline vf vf_pow2(vf k) {
    uint32_t bits = (uint32_t)((int32_t)k + 127) << 23;
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
}
static inline vf vf_abs(vf a) { return fabsf(a); }
static inline float vf_reduce(vf v) { return v; }
static inline vf vf_copysign(vf mag, vf sign) { return copysignf(mag, sign); }
#endif

/* ---- elementwise operations, as defined above -------------------------------------------- */

static inline vf vf_exp(vf z) {
    z = vf_min(vf_max(z, vf_set1(-87.0f)), vf_set1(87.0f));
    vf k = vf_round(vf_mul(z, vf_set1(1.44269504f))), minus_k = vf_mul(k, vf_set1(-1.0f));
    vf r = vf_fma(minus_k, vf_set1(0.693145752f), z);
    r = vf_fma(minus_k, vf_set1(1.42860677e-6f), r);
    vf p = vf_set1(1.0f / 720);
    p = vf_fma(p, r, vf_set1(1.0f / 120));
    p = vf_fma(p, r, vf_set1(1.0f / 24));
    p = vf_fma(p, r, vf_set1(1.0f / 6));
    p = vf_fma(p, r, vf_set1(0.5f));
    p = vf_fma(p, r, vf_set1(1.0f));
    p = vf_fma(p, r, vf_set1(1.0f));
    return vf_mul(p, vf_pow2(k));
}

static inline vf vf_gelu_tanh(vf x) {
    vf y = vf_mul(vf_set1(0.7978845608f), vf_fma(vf_mul(vf_set1(0.044715f), x), vf_mul(x, x), x));
    return vf_div(x, vf_add(vf_set1(1.0f), vf_exp(vf_mul(y, vf_set1(-2.0f)))));
}

/* Numerical Recipes' erfcc coefficients, from t^9 down to t^0 */
static const float erfc_poly[10] = {0.17087277f, -0.82215223f, 1.48851587f, -1.13520398f, 0.27886807f,
                                    -0.18628806f, 0.09678418f, 0.37409196f, 1.00002368f, -1.26551223f};

static inline vf vf_gelu_erf(vf x) {
    vf z = vf_mul(x, vf_set1(0.70710678118654752f)), az = vf_abs(z);
    vf t = vf_div(vf_set1(1.0f), vf_add(vf_set1(1.0f), vf_mul(vf_set1(0.5f), az)));
    vf p = vf_set1(erfc_poly[0]);
    for (int i = 1; i < 10; i++) p = vf_fma(p, t, vf_set1(erfc_poly[i]));
    vf erfc = vf_mul(t, vf_exp(vf_fma(vf_mul(az, vf_set1(-1.0f)), az, p)));
    vf erf = vf_copysign(vf_add(vf_set1(1.0f), vf_mul(erfc, vf_set1(-1.0f))), z);
    return vf_mul(vf_mul(vf_set1(0.5f), x), vf_add(vf_set1(1.0f), erf));
}

/* f over n values in place, VW at a time; the last part-vector through a zero-padded copy, so
 * every value gets exactly the same operations. */
#define ELEMENTWISE(x, n, f)                                          \
    do {                                                              \
        int i_ = 0;                                                   \
        for (; i_ + VW <= (n); i_ += VW) vf_store((x) + i_, f(vf_load((x) + i_))); \
        if (i_ < (n)) {                                               \
            float part_[VW] = {0};                                    \
            memcpy(part_, (x) + i_, (size_t)((n) - i_) * sizeof(float)); \
            vf_store(part_, f(vf_load(part_)));                       \
            memcpy((x) + i_, part_, (size_t)((n) - i_) * sizeof(float)); \
        }                                                             \
    } while (0)

/* In-place softmax over n values: subtract the max for stability, exponentiate, normalise
 * (the sum in order, one value after the other). */
static void softmax(float *x, int n) {
    float max = x[0], sum = 0.0f;
    for (int i = 1; i < n; i++) if (x[i] > max) max = x[i];
#define MINUS_MAX_EXP(v) vf_exp(vf_add(v, vf_set1(-max)))
    ELEMENTWISE(x, n, MINUS_MAX_EXP);
#undef MINUS_MAX_EXP
    for (int i = 0; i < n; i++) sum += x[i];
#define DIVIDE(v) vf_div(v, vf_set1(sum))
    ELEMENTWISE(x, n, DIVIDE);
#undef DIVIDE
}

/* GELU over n values, in place: kind GELU_TANH (GPT-2) or GELU_ERF (nanoGPT's nn.GELU()). */
static void gelu(float *x, int n, int kind) {
    int at;
#pragma omp parallel for schedule(static) if (n > SPAN)
    for (at = 0; at < n; at += SPAN) {
        float *span = x + at;
        int len = min_int(SPAN, n - at);
        if (kind == GELU_TANH) ELEMENTWISE(span, len, vf_gelu_tanh);
        else ELEMENTWISE(span, len, vf_gelu_erf);
    }
}

static void residual_add(float *x, const float *delta, int n) {
    int i;
#pragma omp parallel for schedule(static) if (n > SPAN)
    for (i = 0; i < n; i++) x[i] += delta[i];
}

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

/* ---- float32 matrix products ----------------------------------------------------------- */

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
 * tile of DECODE_ROWS rows x DECODE_TOKENS tokens. dot_f32's partial-sum vector v (the k with
 * k mod 64 in [v VW, v VW + VW)) is an FMA chain of its own, so the tile computes v = 0, 1, ...
 * in turn, each for all its (row, token) pairs at once: every weight vector loaded serves
 * DECODE_TOKENS chains and every input vector DECODE_ROWS, where dot_f32 loads both for each
 * FMA. Then each pair's vectors go through dot_f32's tree. A part tile repeats its last row or
 * token; those sums are not stored. */
#if defined(__AVX512F__) || defined(__ARM_NEON)
#define DECODE_ROWS 4 /* 24 accumulators, 4 weights and an input in 32 registers */
#define DECODE_TOKENS 6
#else
#define DECODE_ROWS 3 /* 12 accumulators, 3 weights and an input in AVX2's 16 registers */
#define DECODE_TOKENS 4
#endif
static inline void decode_tile_f32(float *out, int ld_out, const float *const *wrow, const float *const *xrow,
                                   int n, const float *bias, int rows, int tokens) {
    vf part[DECODE_ROWS][DECODE_TOKENS][64 / VW];
    int whole = n / 64 * 64;
    float wp[DECODE_ROWS][64], xp[DECODE_TOKENS][64]; /* the part block at the end, zero-padded */
    if (whole < n) {
        for (int r = 0; r < DECODE_ROWS; r++) {
            memset(wp[r], 0, sizeof wp[r]);
            memcpy(wp[r], wrow[r] + whole, (size_t)(n - whole) * sizeof(float));
        }
        for (int t = 0; t < DECODE_TOKENS; t++) {
            memset(xp[t], 0, sizeof xp[t]);
            memcpy(xp[t], xrow[t] + whole, (size_t)(n - whole) * sizeof(float));
        }
    }
    for (int v = 0; v < 64 / VW; v++) {
        vf acc[DECODE_ROWS][DECODE_TOKENS];
        for (int r = 0; r < DECODE_ROWS; r++)
            for (int t = 0; t < DECODE_TOKENS; t++) acc[r][t] = vf_set1(0.0f);
        for (int k = v * VW; k < whole; k += 64) {
            vf wv[DECODE_ROWS];
            for (int r = 0; r < DECODE_ROWS; r++) wv[r] = vf_load(wrow[r] + k);
            for (int t = 0; t < DECODE_TOKENS; t++) {
                vf xv = vf_load(xrow[t] + k);
                for (int r = 0; r < DECODE_ROWS; r++) acc[r][t] = vf_fma(wv[r], xv, acc[r][t]);
            }
        }
        if (whole < n)
            for (int r = 0; r < DECODE_ROWS; r++)
                for (int t = 0; t < DECODE_TOKENS; t++)
                    acc[r][t] = vf_fma(vf_load(wp[r] + v * VW), vf_load(xp[t] + v * VW), acc[r][t]);
        for (int r = 0; r < DECODE_ROWS; r++)
            for (int t = 0; t < DECODE_TOKENS; t++) part[r][t][v] = acc[r][t];
    }
    for (int t = 0; t < tokens; t++)
        for (int r = 0; r < rows; r++) {
            vf *p = part[r][t];
            for (int half = 64 / VW / 2; half >= 1; half /= 2) /* dot_f32's tree */
                for (int v = 0; v < half; v++) p[v] = vf_add(p[v], p[v + half]);
            out[(size_t)t * ld_out + r] = vf_reduce(p[0]) + (bias ? bias[r] : 0.0f);
        }
}

/* Prefill tiles: TILE_ROWS rows of W x TILE_TOKENS tokens in outer-product form. The tokens
 * come transposed, xt (n, TILE_TOKENS) per tile (transpose_tokens), so step k loads the tile's
 * tokens' k-th values as vectors and multiplies them by w[r][k] broadcast, for each row r: the
 * products go into accumulators that stay in registers (named variables, not an array), with
 * no horizontal sums. Each output is an FMA chain over k in order, then the bias is added (the
 * shared arithmetic above). A tile at the bottom of W with fewer rows repeats its last row
 * (wrow[]); those sums are not stored. */
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
/* portable C: 4 rows x 16 tokens (the compiler vectorizes the token loop where it can) */
#define TILE_ROWS 4
#define TILE_TOKENS 16
static inline void tile_f32(float *out, int ld_out, const float *xt, const float *const *wrow, int n,
                            const float *bias, int rows, int tokens) {
    float sums[TILE_ROWS][TILE_TOKENS] = {{0}};
    for (int k = 0; k < n; k++)
        for (int r = 0; r < TILE_ROWS; r++) {
            float w = wrow[r][k];
            for (int t = 0; t < TILE_TOKENS; t++) sums[r][t] = fmaf(xt[(size_t)k * TILE_TOKENS + t], w, sums[r][t]);
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

/* float32 W: decode, one pass over W with its rows split between threads (for one token, or
 * for the T tokens of T samples decoding together); prefill, tiles of TILE_ROWS rows, each used
 * for every tile of tokens while it sits in cache. */
static void f32_matmul(float *out, const float *x, const Matrix *w, const float *bias, int T, int decode,
                       MatmulScratch *scratch) {
    int n = w->cols, d = w->rows, i;
    if (T == 1) {
#pragma omp parallel for schedule(static)
        for (i = 0; i < d; i++) out[i] = dot_f32(w->f32 + (size_t)i * n, x, n) + (bias ? bias[i] : 0.0f);
        return;
    }
    if (decode) { /* T samples' decode steps: tiles of DECODE_ROWS rows, each row read from
                     memory once and then from cache for every tile of tokens */
#pragma omp parallel for schedule(static)
        for (i = 0; i < (d + DECODE_ROWS - 1) / DECODE_ROWS; i++) {
            int r0 = i * DECODE_ROWS, rows = min_int(DECODE_ROWS, d - r0);
            const float *wrow[DECODE_ROWS], *xrow[DECODE_TOKENS];
            for (int r = 0; r < DECODE_ROWS; r++) wrow[r] = w->f32 + (size_t)(r0 + min_int(r, rows - 1)) * n;
            /* the tile reads its rows in strides of 64 floats: ask for them whole first */
            for (size_t k = 0; k < (size_t)rows * n; k += 16) __builtin_prefetch(wrow[0] + k, 0, 3);
            for (int t0 = 0; t0 < T; t0 += DECODE_TOKENS) {
                int tokens = min_int(DECODE_TOKENS, T - t0);
                for (int t = 0; t < DECODE_TOKENS; t++) xrow[t] = x + (size_t)(t0 + min_int(t, tokens - 1)) * n;
                decode_tile_f32(out + (size_t)t0 * d + r0, d, wrow, xrow, n, bias ? bias + r0 : NULL, rows, tokens);
            }
        }
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

/* ---- attention --------------------------------------------------------------------------- */

/* Causal attention of nq consecutive queries of one head, at positions pos..pos+nq-1: query i
 * weighs keys 0..pos+i by softmax(query . key / sqrt(head_size)) (later keys are masked: weight
 * exactly 0) and writes the weighted sum of their values. The cache layout lets a vector hold
 * VW keys at once: keys transposed (dimension d of position j at keys[d * key_stride + j]),
 * values by position (position j's at values[j * value_stride], zero past head_size). */
typedef struct {
    const float *query;  /* nq queries of head_size floats, query_stride floats apart */
    int query_stride;
    const float *keys;   /* (head_size, key_stride): this head's keys, transposed */
    int key_stride;      /* round_up16(n_ctx) */
    const float *values; /* (n_ctx, value_stride): this head's values */
    int value_stride;    /* round_up16(head_size) */
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
    return (size_t)ATTENTION_BLOCK * ((size_t)round_up16(n_ctx) + (size_t)round_up16(head_size));
}

/* One query at position pos: scores of keys 0..pos, VW keys to a vector (four vectors in
 * flight), softmax, weighted sum of values, VW dimensions to a vector. att: round_up16(pos + 1)
 * floats, which hold the attention weights afterwards; qs: round_up16(head_size) floats. */
static void attention_one(const AttentionBlock *b, int i, float *att, float *qs) {
    int n = b->pos + i + 1, hs = b->head_size, ks = b->key_stride, vs = b->value_stride, j = 0;
    const float *query = b->query + (size_t)i * b->query_stride;
    float scale = 1.0f / sqrtf((float)hs);
    for (int d = 0; d < hs; d++) qs[d] = query[d] * scale;
    for (; j + 4 * VW <= n; j += 4 * VW) {
        vf s0 = vf_set1(0.0f), s1 = s0, s2 = s0, s3 = s0;
        for (int d = 0; d < hs; d++) {
            const float *k = b->keys + (size_t)d * ks + j;
            vf q = vf_set1(qs[d]);
            s0 = vf_fma(q, vf_load(k), s0);
            s1 = vf_fma(q, vf_load(k + VW), s1);
            s2 = vf_fma(q, vf_load(k + 2 * VW), s2);
            s3 = vf_fma(q, vf_load(k + 3 * VW), s3);
        }
        vf_store(att + j, s0); vf_store(att + j + VW, s1); vf_store(att + j + 2 * VW, s2); vf_store(att + j + 3 * VW, s3);
    }
    for (; j < n; j += VW) { /* rows are round_up16(n_ctx) long: a part vector reads cache, not past it */
        vf s = vf_set1(0.0f);
        for (int d = 0; d < hs; d++) s = vf_fma(vf_set1(qs[d]), vf_load(b->keys + (size_t)d * ks + j), s);
        vf_store(att + j, s);
    }
    softmax(att, n);
    float *out = b->out + (size_t)i * b->out_stride;
    for (int d0 = 0; d0 < hs; d0 += 4 * VW) { /* four vectors of the head's dimensions in flight */
        int vectors = min_int(4, (round_up16(hs) - d0 + VW - 1) / VW);
        vf acc[4] = {vf_set1(0.0f), vf_set1(0.0f), vf_set1(0.0f), vf_set1(0.0f)};
        for (j = 0; j < n; j++) {
            vf weight = vf_set1(att[j]);
            const float *v = b->values + (size_t)j * vs + d0;
            for (int u = 0; u < vectors; u++) acc[u] = vf_fma(weight, vf_load(v + u * VW), acc[u]);
        }
        for (int u = 0; u < vectors; u++) {
            float part[VW];
            vf_store(part, acc[u]);
            for (int l = 0; l < VW && d0 + u * VW + l < hs; l++) out[d0 + u * VW + l] = part[l];
        }
    }
    if (b->weights) memcpy(b->weights + (size_t)i * b->weights_stride, att, (size_t)n * sizeof(float));
}

#if defined(__AVX512F__)
/* The same computation for queries q0..q0+15 of a block (fewer at its end) with the queries in
 * the lanes of a register, so that scores need no horizontal sums (head_size a multiple of 16):
 *   qt (hs, 16): the queries transposed, times 1/sqrt(hs);
 *   att (n_keys, 16): for each key j, the 16 queries' scores, then their softmax weights; key j
 *   is masked (weight exactly 0, which adds exactly nothing) for the queries before position j.
 * Each lane performs the operations of attention_one() in the same order. */
static void attention_lanes16(const AttentionBlock *b, int q0, float *scratch) {
    int hs = b->head_size, nq = min_int(16, b->nq - q0), p0 = b->pos + q0, n_keys = p0 + nq, j;
    int ks = b->key_stride, vs = b->value_stride;
    const float *queries = b->query + (size_t)q0 * b->query_stride;
    float *att = scratch, *qt = scratch + (size_t)16 * round_up16(n_keys);
    float scale = 1.0f / sqrtf((float)hs);
    for (int d = 0; d < hs; d++)
        for (int q = 0; q < 16; q++) qt[d * 16 + q] = q < nq ? queries[(size_t)q * b->query_stride + d] * scale : 0.0f;
    __mmask16 live = (__mmask16)((1u << nq) - 1);
#define VISIBLE(j) (__mmask16)((j) <= p0 ? live : live & ~((1u << ((j) - p0)) - 1))
    /* scores: 4 keys at a time share each load of qt */
    __m512 max = _mm512_set1_ps(-INFINITY);
    for (j = 0; j < n_keys; j += 4) {
        int keys_here = min_int(4, n_keys - j);
        __m512 s0 = _mm512_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;
        for (int d = 0; d < hs; d++) {
            __m512 qv = _mm512_loadu_ps(qt + d * 16);
            const float *k = b->keys + (size_t)d * ks + j; /* keys j..j+3: within the row */
            s0 = _mm512_fmadd_ps(qv, _mm512_set1_ps(k[0]), s0);
            s1 = _mm512_fmadd_ps(qv, _mm512_set1_ps(k[1]), s1);
            s2 = _mm512_fmadd_ps(qv, _mm512_set1_ps(k[2]), s2);
            s3 = _mm512_fmadd_ps(qv, _mm512_set1_ps(k[3]), s3);
        }
        __m512 sc[4] = {s0, s1, s2, s3};
        for (int k = 0; k < keys_here; k++) {
            _mm512_storeu_ps(att + (size_t)(j + k) * 16, sc[k]);
            max = _mm512_mask_max_ps(max, VISIBLE(j + k), max, sc[k]);
        }
    }
    /* softmax over the keys, each query in its lane: exponentials, their sum in key order */
    __m512 sum = _mm512_setzero_ps(), minus_max = _mm512_mul_ps(max, _mm512_set1_ps(-1.0f));
    for (j = 0; j < n_keys; j++) {
        __m512 e = _mm512_maskz_mov_ps(VISIBLE(j), vf_exp(_mm512_add_ps(_mm512_loadu_ps(att + (size_t)j * 16), minus_max)));
        _mm512_storeu_ps(att + (size_t)j * 16, e);
        sum = _mm512_add_ps(sum, e);
    }
    sum = _mm512_mask_mov_ps(_mm512_set1_ps(1.0f), live, sum);
    for (j = 0; j < n_keys; j++)
        _mm512_storeu_ps(att + (size_t)j * 16, _mm512_div_ps(_mm512_loadu_ps(att + (size_t)j * 16), sum));
#undef VISIBLE
    /* weighted sum of values: 4 queries x 16 dimensions of the head at a time, each query over
     * the keys up to the last query's position (the others' weights for later keys are 0) */
    for (int q4 = 0; q4 < nq; q4 += 4)
        for (int d = 0; d < hs; d += 16) {
            __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
            int last = p0 + min_int(q4 + 4, nq); /* keys 0..last-1 */
            for (j = 0; j < last; j++) {
                __m512 v = _mm512_loadu_ps(b->values + (size_t)j * vs + d);
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
 * AVX-512 allows, else (and for the single query of a decode step) one query at a time. Both
 * give the same bits. */
static void attention(const AttentionBlock *b, float *scratch) {
#if defined(__AVX512F__)
    if (b->nq > 1 && b->head_size % 16 == 0) {
        for (int q0 = 0; q0 < b->nq; q0 += 16) attention_lanes16(b, q0, scratch);
        return;
    }
#endif
    float *qs = scratch + (size_t)16 * round_up16(b->pos + b->nq);
    for (int i = 0; i < b->nq; i++) attention_one(b, i, scratch, qs);
}

/* ---- int8 and 4-bit weights, then the entry points every format shares ----------------- */

#include "kernels_q8.h"
#include "kernels_q4.h"

/* The quant at index i (row * cols + column) of a q8_0 or q4_0 matrix. */
static inline int quant_at(const Matrix *m, size_t i) {
    if (m->type == WT_Q8_0) return m->q[i];
    return q4_quant(m->q4 + i / Q8_GROUP * (Q8_GROUP / 2), (int)(i % Q8_GROUP));
}

/* out (T, w->rows) = x (T, w->cols) @ W^T + bias (w->rows, or NULL), by weight format. decode:
 * the T tokens are decode steps of T separate samples, so float32 gives each the decode
 * arithmetic (a sample's numbers are then those of a run on its own); T = 1 always is. The
 * quantized formats have one arithmetic for both. */
static void matmul(float *out, const float *x, const Matrix *w, const float *bias, int T, int decode,
                   MatmulScratch *scratch) {
    if (w->type == WT_Q8_0) q8_matmul(out, x, w, bias, T, scratch);
    else if (w->type == WT_Q4_0) q4_matmul(out, x, w, bias, T, scratch);
    else f32_matmul(out, x, w, bias, T, decode, scratch);
}

/* Buffers for matmul() on up to max_tokens tokens of at most max_cols inputs. Returns 0 when
 * memory runs out. */
static int matmul_scratch_init(MatmulScratch *s, int max_tokens, int max_cols, int weight_type) {
    size_t T = (size_t)max_tokens, n = (size_t)max_cols;
    if (weight_type != WT_F32) return q8_scratch_init(s, T, n);
    size_t padded = (T + TILE_TOKENS - 1) / TILE_TOKENS * TILE_TOKENS, bytes = padded * n * sizeof(float);
    s->xt = aligned_alloc(64, bytes);
    if (s->xt) memset(s->xt, 0, bytes); /* map the pages now, not inside the first timed pass */
    return s->xt != NULL;
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
        int type = matrices[i]->type;
        size_t bytes = type == WT_Q8_0 ? q8_packed_bytes(matrices[i]) : type == WT_Q4_0 ? q4_packed_bytes(matrices[i]) : 0;
        if (dst && bytes && type == WT_Q8_0) q8_pack(matrices[i], (int8_t *)dst + total);
        if (dst && bytes && type == WT_Q4_0) q4_pack(matrices[i], (int8_t *)dst + total);
        total += bytes;
    }
    return total;
}

/* e.g. "avx512, q8_0 avx512-vnni (prefill amx), q4_0 ...": the kernels of this build on this CPU */
static const char *kernels_description(void) {
    static char text[256];
    snprintf(text, sizeof text, "%s, q8_0 %s, q4_0 %s", F32_KERNELS, q8_description(), Q4_KERNEL);
    return text;
}

#endif
