/* kernels/simd.h: a vector of VW floats (the family's, from kernels/x86/vector.h or
 * kernels/arm/vector.h, else one float in portable C), and the arithmetic every path shares,
 * written once with it.
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
 *   quantized products: the activations quantized per token, int8 quants xq with one float32
 *     scale xs_g per group g of 32 (kernels/quant.h), s_g the sum of the group's quants; exact
 *     integer dot products of each group's weight numbers with xq; an fma chain along the row
 *     in order, as below; then + bias. Every integer named here is exact in float32 (below 2^24
 *     in size), so converting one rounds nothing.
 *     q8_0, q4_0, q5_0: acc = fma(dot_g, ws_g * xs_g, acc) over the groups, dot_g the sum of
 *       quant x xq (q5_0's quant: its 5-bit number - 16), ws_g the group's scale (q5_0's
 *       binary16 d as float32).
 *     q5_1: dot_g the sum of its 5-bit numbers (0..31) x xq; acc = fma(dot_g, d_g * xs_g, acc),
 *       then acc = fma(s_g, m_g * xs_g, acc), group after group; q4_1 the same with its 4-bit
 *       numbers.
 *     iq4_nl, iq4_xs: dot_g the sum of the levels its nibbles index x xq; acc = fma(dot_g,
 *       ws_g * xs_g, acc) group after group, ws_g the binary16 d (iq4_xs: d * (ls_g - 32),
 *       exact).
 *     q2_k: per super-block of 8 groups (each two sub-blocks of 16 with 4-bit scales sc_a, sc_b
 *       and mins m_a, m_b): dot_g = sc_a (sum over its first 16 of q x xq) + sc_b (the same over
 *       its last 16), mins_g = m_a (sum of its first 16 xq) + m_b (of its last 16), exact
 *       integers; dsum = fma chain over the 8 groups of dot_g * xs_g, msum of mins_g * xs_g; acc
 *       = fma(d, dsum, acc), acc = fma(-dmin, msum, acc).
 *     q3_k: as q6_k, with its 6-bit scales less 32 and its numbers -4..3.
 *     q4_k, q5_k: per super-block of 8 groups (sub-blocks with 6-bit scales sc_g and mins m_g,
 *       binary16 d and dmin as float32): dot_g the sum of its 4- or 5-bit numbers x xq; dsum =
 *       fma chain over the 8 groups of (sc_g dot_g) * xs_g, msum = fma chain over them of
 *       (m_g s_g) * xs_g (sc_g dot_g and m_g s_g exact integers; each chain from 0); then acc
 *       = fma(d, dsum, acc), acc = fma(-dmin, msum, acc), super-block after super-block.
 *     q6_k: per super-block of 8 groups (16 sub-blocks of 16 with int8 scales, binary16 d):
 *       dot_g = sc_a (sum over the group's first 16 of (q - 32) xq) + sc_b (the same over its
 *       last 16), an exact integer; dsum = fma chain over the 8 groups of dot_g * xs_g; acc =
 *       fma(d, dsum, acc).
 *   f16, bf16 products: their values (float32 exactly) through float32's arithmetic above.
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

#include "arch.h"
#include "arm/vector.h"
#include "x86/vector.h"

static inline int min_int(int a, int b) { return a < b ? a : b; }
static inline int max_int(int a, int b) { return a > b ? a : b; }
static inline int round_up16(int n) { return (n + 15) / 16 * 16; }

/* ---- a vector of VW floats: the one place that differs between instruction sets ---------
 * exp, GELU, softmax, attention and the decode dot product are written once with these; each
 * operation is the same IEEE operation on every path, lane by lane. vf_reduce sums a vector's
 * lanes as a fixed tree: lane i + lane i + VW/2 for i < VW/2, then the same on what is left.
 * vf_max(a, b) is a > b ? a : b (b when either is NaN); vf_lanes_above(a, t) and
 * vf_lanes_at_least(a, t) have bit l set when lane l of a is > t (>= t), never for a NaN;
 * vf_load_i8 and vf_from_i32 convert VW int8 (int32) to floats, rounded to nearest even;
 * vf_load_bf16 VW bfloat16 numbers to floats (exact: their bits are a float's upper half).
 * A family's file defines them all with VW; without one, a "vector" is one float: */
#if !defined(VW)
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
static inline vf vf_load_bf16(const uint16_t *p) {
    uint32_t bits = (uint32_t)*p << 16;
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
}
#endif

/* ONE_LOAD(v): v, just loaded, is used from a register; the compiler may not fold its load into
 * each instruction that uses v (each would then read memory again). An empty asm statement
 * that takes and gives v in a vector register, in a family's file; nothing in other builds. */
#if !defined(ONE_LOAD)
#define ONE_LOAD(v) (void)(v)
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
