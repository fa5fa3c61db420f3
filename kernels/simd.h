/* kernels/simd.h: a vector of VW floats for each instruction set (AVX-512, AVX2 + FMA, NEON,
 * portable C), and the arithmetic every path shares, written once with it.
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
 *   softmax: e_j = exp(x_j - max x); sum of the e_j as the norms' sums below; x_j = e_j / sum.
 *   attention of a query q at position pos over keys k_j, values v_j, j <= pos: score_j = fma
 *     chain over d of (q_d * (1 / sqrt(head_size))) * k_jd; softmax; out_d = fma chain over j
 *     of weight_j * v_jd. With a q8_0 cache (quants k_jd, v_jd, scales ks_jg, vs_jg of groups g
 *     of 32 dimensions): the query q_d * (1 / sqrt(head_size)) quantized as quant.h quantizes
 *     activations (quants qq_d, scales qs_g, per group); score_j = fma chain over g of
 *     dot_jg * (ks_jg * qs_g), dot_jg the exact integer sum over d in g of k_jd qq_d;
 *     softmax; out_d = fma chain over j of (weight_j * vs_jg) * v_jd, g = d's group.
 *   float32 matrix-vector product (decode, of one token or of each of several samples): 64
 *     partial sums, partial l an fma chain over the k = l, l + 64, l + 128, ... in order; then
 *     p_i += p_{i+32} for i < 32, p_i += p_{i+16} for i < 16, and so on down to p_0 + p_1 (a
 *     fixed tree); then + bias.
 *   float32 prefill (two or more tokens of one sequence): each output an fma chain over k in
 *     order, then + bias.
 *   quantized products (q8_0, q4_0): the activations quantized per token, one int8 scale per
 *     group of 32 (kernels/quant.h); exact integer dot products per group, then an fma chain
 *     over the groups in order of dot_g * (weight scale_g * activation scale_g); then + bias.
 *   LayerNorm and RMSNorm: their sums (of the values; of the squares of x - mean, or of x) as
 *     16 partial sums, partial l over i = l, l + 16, ... in order, then p_i += p_{i+8} for
 *     i < 8, and so on down to p_0 + p_1; the rest value by value.
 *   embeddings and residual adds: plain float32 operations.
 * tests/test_kernels.c checks each path's kernels against these definitions bit for bit, and
 * tests/test_paths.py every path's logits against every other's.
 */
#ifndef KERNELS_SIMD_H
#define KERNELS_SIMD_H

#include <math.h>
#include <stdint.h>
#include <string.h>
#if defined(__AVX512F__) || defined(__AVX2__)
#include <immintrin.h>
#endif
#if defined(__ARM_NEON)
#include <arm_neon.h>
#endif

/* the float32 kernels this build runs (--info) */
#if defined(__AVX512F__)
#define F32_KERNELS "avx512"
#elif defined(__AVX2__) && defined(__FMA__)
#define F32_KERNELS "avx2"
#elif defined(__ARM_NEON)
#define F32_KERNELS "neon"
#else
#define F32_KERNELS "scalar"
#endif

static inline int min_int(int a, int b) { return a < b ? a : b; }
static inline int max_int(int a, int b) { return a > b ? a : b; }
static inline int round_up16(int n) { return (n + 15) / 16 * 16; }

/* ---- a vector of VW floats: the one place that differs between instruction sets ---------
 * exp, GELU, softmax, attention and the decode dot product are written once with these; each
 * operation is the same IEEE operation on every path, lane by lane. vf_reduce sums a vector's
 * lanes as a fixed tree: lane i + lane i + VW/2 for i < VW/2, then the same on what is left.
 * vf_max(a, b) is a > b ? a : b (b when either is NaN); vf_lanes_above(a, t) and
 * vf_lanes_at_least(a, t) have bit l set when lane l of a is > t (>= t), never for a NaN;
 * vf_load_i8 and vf_from_i32 convert VW int8 (int32) to floats, rounded to nearest even. */

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
static inline unsigned vf_lanes_above(vf a, float t) { return _mm512_cmp_ps_mask(a, _mm512_set1_ps(t), _CMP_GT_OQ); }
static inline unsigned vf_lanes_at_least(vf a, float t) { return _mm512_cmp_ps_mask(a, _mm512_set1_ps(t), _CMP_GE_OQ); }
static inline vf vf_load_i8(const int8_t *p) { /* VW int8 -> floats (exact) */
    return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)p)));
}
static inline vf vf_from_i32(const int32_t *p) { return _mm512_cvtepi32_ps(_mm512_loadu_si512(p)); }
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
static inline unsigned vf_lanes_above(vf a, float t) {
    return (unsigned)_mm256_movemask_ps(_mm256_cmp_ps(a, _mm256_set1_ps(t), _CMP_GT_OQ));
}
static inline unsigned vf_lanes_at_least(vf a, float t) {
    return (unsigned)_mm256_movemask_ps(_mm256_cmp_ps(a, _mm256_set1_ps(t), _CMP_GE_OQ));
}
static inline vf vf_load_i8(const int8_t *p) {
    return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)p)));
}
static inline vf vf_from_i32(const int32_t *p) { return _mm256_cvtepi32_ps(_mm256_loadu_si256((const __m256i *)p)); }
#elif defined(__ARM_NEON)
#define VW 4
typedef float32x4_t vf;
static inline vf vf_load(const float *p) { return vld1q_f32(p); }
static inline void vf_store(float *p, vf v) { vst1q_f32(p, v); }
static inline vf vf_set1(float x) { return vdupq_n_f32(x); }
static inline vf vf_add(vf a, vf b) { return vaddq_f32(a, b); }
static inline vf vf_mul(vf a, vf b) { return vmulq_f32(a, b); }
static inline vf vf_div(vf a, vf b) { return vdivq_f32(a, b); }
/* a > b ? a : b, as x86's max (b when either is NaN); NEON's own max would return the NaN */
static inline vf vf_max(vf a, vf b) { return vbslq_f32(vcgtq_f32(a, b), a, b); }
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
static inline unsigned vf_lanes_of(uint32x4_t set) { /* lane l's all-ones or zero as bit l */
    const uint32x4_t bit = {1, 2, 4, 8};
    return vaddvq_u32(vandq_u32(set, bit));
}
static inline unsigned vf_lanes_above(vf a, float t) { return vf_lanes_of(vcgtq_f32(a, vdupq_n_f32(t))); }
static inline unsigned vf_lanes_at_least(vf a, float t) { return vf_lanes_of(vcgeq_f32(a, vdupq_n_f32(t))); }
static inline vf vf_load_i8(const int8_t *p) {
    int32_t four;
    memcpy(&four, p, sizeof four);
    int16x8_t wide = vmovl_s8(vreinterpret_s8_s32(vdup_n_s32(four)));
    return vcvtq_f32_s32(vmovl_s16(vget_low_s16(wide)));
}
static inline vf vf_from_i32(const int32_t *p) { return vcvtq_f32_s32(vld1q_s32(p)); }
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
static inline unsigned vf_lanes_above(vf a, float t) { return a > t; }
static inline unsigned vf_lanes_at_least(vf a, float t) { return a >= t; }
static inline vf vf_load_i8(const int8_t *p) { return (float)*p; }
static inline vf vf_from_i32(const int32_t *p) { return (float)*p; }
#endif

/* ONE_LOAD(v): v, just loaded, is used from a register; the compiler may not fold its load into
 * each instruction that uses v (each would then read memory again). An empty asm statement
 * that takes and gives v in a vector register (GCC and clang: "v" on x86, "w" on AArch64);
 * nothing in other builds. */
#if !defined(ONE_LOAD) && (defined(__GNUC__) || defined(__clang__)) && defined(__AVX2__)
#define ONE_LOAD(v) __asm__("" : "+v"(v))
#elif !defined(ONE_LOAD) && (defined(__GNUC__) || defined(__clang__)) && defined(__aarch64__)
#define ONE_LOAD(v) __asm__("" : "+w"(v))
#elif !defined(ONE_LOAD)
#define ONE_LOAD(v) (void)(v)
#endif

#if defined(__AVX512VNNI__)
/* acc plus, in each 32-bit lane, the dot product of u's four unsigned bytes there with the four
 * signed bytes at x: _mm512_dpbusd_epi32(acc, u, _mm512_set1_epi32(x's four bytes)). GCC 12
 * broadcasts the four bytes with an instruction of its own, one more vector operation for each
 * dpbusd; AVX-512 can broadcast a memory operand within the dpbusd ({1to16}), written here as
 * that one instruction (the test build of tests/simde_shim.h sets DPBUSD_PORTABLE: no asm).
 * On AMD Zen 4 (medians of 5 alternating runs) the q4_0 decode kernel went from 67.3 to 71.8
 * GB/s of weights in L2 (`tests/build/kernels q4_0 512 512 1`) and from 68.2 to 74.3 in L3
 * (13104 x 2048). */
typedef int32_t __attribute__((may_alias)) four_bytes; /* read where int8 quants were written */
static inline __m512i dpbusd_four(__m512i acc, __m512i u, const int8_t *x) {
#if (defined(__GNUC__) || defined(__clang__)) && !defined(DPBUSD_PORTABLE)
    __asm__("vpdpbusd %2%{1to16%}, %1, %0" : "+v"(acc) : "v"(u), "m"(*(const four_bytes *)(const void *)x));
    return acc;
#else
    int32_t four;
    memcpy(&four, x, 4);
    return _mm512_dpbusd_epi32(acc, u, _mm512_set1_epi32(four));
#endif
}
#endif

/* ---- lane masks for the rows at the bottom of a matrix ------------------------------------ */

#if defined(__AVX512F__)
/* the first n of 16 lanes (all for n >= 16) */
static inline __mmask16 first_lanes(int n) { return n >= 16 ? 0xFFFF : (__mmask16)((1u << n) - 1); }
#endif
#if defined(__AVX2__)
/* the first n of 8 lanes, as a mask for maskload / maskstore */
static inline __m256i first_lanes8(int n) {
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}
#endif

/* ---- exp and GELU, as defined above ------------------------------------------------------ */

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

#endif
