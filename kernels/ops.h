/* kernels/ops.h: the neural-net operations beneath forward() other than matrix products and
 * attention, each one entry point holding its whole loop and its OpenMP split, computed as
 * kernels/simd.h defines:
 *
 *   layernorm()     LayerNorm of each of T positions (GPT-2)
 *   rmsnorm()       RMSNorm of each of T positions (Llama)
 *   softmax()       in place, over n values
 *   gelu()          GPT-2's tanh approximation or the exact erf form, in place
 *   swiglu()        silu(gate) * up, in place in up (Llama's feed-forward)
 *   rotary()        rotary positions: pairs of a head's dimensions rotated by the position
 *   residual_add()  x += delta
 */
#ifndef KERNELS_OPS_H
#define KERNELS_OPS_H

#include <math.h>
#include <stddef.h>
#include <string.h>

#include "parallel.h"
#include "simd.h"
#include "types.h" /* GELU_TANH, GELU_ERF */

/* Elementwise steps over a prompt's block are split between threads in spans of SPAN values;
 * one token's (decode) stay on one thread, where starting the others would cost more. */
#define SPAN 8192

/* The sums inside a norm, as kernels/simd.h defines them: sum_of(x, n) = x_0 + ... + x_{n-1},
 * sum_of_squares(x, n, c) = (x_0 - c)^2 + ... (each square a subtraction then a multiplication),
 * both as 16 partial sums, partial l over i = l, l + 16, l + 32, ... in order, then the fixed
 * tree p_i + p_{i+8}, + p_{i+4}, + p_{i+2}, + p_{i+1}. In vectors: 16 / VW of them, added
 * while the halves are whole vectors, then vf_reduce; a part block at the end goes through a
 * copy padded with values that add exactly nothing (0 to a sum, c to the squares).
 * (One chain of additions in order, the definition before these, was a dependent chain on the
 * decode step's single thread.) */
static inline void add_block16(vf *acc, const float *block, vf minus_c, int squares) {
    for (int v = 0; v < 16 / VW; v++) {
        vf value = vf_load(block + v * VW);
        if (squares) value = vf_mul(vf_add(value, minus_c), vf_add(value, minus_c));
        acc[v] = vf_add(acc[v], value);
    }
}
static inline float sum_of_squares_or_sum(const float *x, int n, float c, int squares) {
    vf acc[16 / VW], minus_c = vf_set1(-c);
    for (int v = 0; v < 16 / VW; v++) acc[v] = vf_set1(0.0f);
    int i = 0;
    for (; i + 16 <= n; i += 16) add_block16(acc, x + i, minus_c, squares);
    if (i < n) {
        float part[16];
        for (int k = 0; k < 16; k++) part[k] = i + k < n ? x[i + k] : squares ? c : 0.0f;
        add_block16(acc, part, minus_c, squares);
    }
    for (int half = 16 / VW / 2; half >= 1; half /= 2)
        for (int v = 0; v < half; v++) acc[v] = vf_add(acc[v], acc[v + half]);
    return vf_reduce(acc[0]);
}
static inline float sum_of(const float *x, int n) { return sum_of_squares_or_sum(x, n, 0.0f, 0); }
static inline float sum_of_squares(const float *x, int n, float c) { return sum_of_squares_or_sum(x, n, c, 1); }

/* softmax()'s steps: x = exp(x - max), x = x / sum */
static inline void exp_minus(float *x, int n, float max) {
#define MINUS_MAX_EXP(v) vf_exp(vf_add(v, vf_set1(-max)))
    ELEMENTWISE(x, n, MINUS_MAX_EXP);
#undef MINUS_MAX_EXP
}
static inline void divide_by(float *x, int n, float sum) {
#define DIVIDE(v) vf_div(v, vf_set1(sum))
    ELEMENTWISE(x, n, DIVIDE);
#undef DIVIDE
}
/* The largest of n values (n >= 1), as `max = x_0; max = x_i if x_i > max` does it: the same
 * number in any order, so VW lanes at a time (each lane starting from x_0), then the lanes
 * and what is left one by one. A NaN after x_0 is passed over, as by that loop (vf_max keeps
 * its second operand); x_0 NaN gives NaN. */
static inline float max_of(const float *x, int n) {
    vf lanes = vf_set1(x[0]);
    int i = 0;
    for (; i + VW <= n; i += VW) lanes = vf_max(vf_load(x + i), lanes);
    float lane[VW], max = x[0];
    vf_store(lane, lanes);
    for (int l = 0; l < VW; l++) if (lane[l] > max) max = lane[l];
    for (; i < n; i++) if (x[i] > max) max = x[i];
    return max;
}

/* In-place softmax over n values: subtract the max for stability, exponentiate, normalise
 * by the sum of the exponentials as sum_of() adds (16 partial sums, then the tree). A sum in
 * order was a chain of n dependent additions: a fifth of a decode step's attention at 256
 * positions. */
static void softmax(float *x, int n) {
    exp_minus(x, n, max_of(x, n));
    divide_by(x, n, sum_of(x, n));
}

/* GELU over n values, in place: kind GELU_TANH (GPT-2) or GELU_ERF (nanoGPT's nn.GELU()). */
static void gelu(float *x, int n, int kind) {
    int at;
    SPLIT_FOR(n > SPAN, schedule(static), (at = 0; at < n; at += SPAN), {
        float *span = x + at;
        int len = min_int(SPAN, n - at);
        if (kind == GELU_TANH) ELEMENTWISE(span, len, vf_gelu_tanh);
        else ELEMENTWISE(span, len, vf_gelu_erf);
    });
}

static void residual_add(float *x, const float *delta, int n) {
    int i;
    SPLIT_FOR(n > SPAN, schedule(static), (i = 0; i < n; i++), { x[i] += delta[i]; });
}

/* LayerNorm of each of T positions of n values: (x - mean) / sqrt(variance + eps) * weight +
 * bias (bias may be NULL), the mean and the variance by the sums above. out may be x. */
static void layernorm(float *out, const float *x, const float *weight, const float *bias, int T,
                      int n, float eps) {
    int t;
    SPLIT_FOR(T > 1, schedule(static), (t = 0; t < T; t++), {
        const float *xt = x + (size_t)t * n;
        float *o = out + (size_t)t * n;
        float mean = sum_of(xt, n) / n, var = sum_of_squares(xt, n, mean) / n;
        float inv_std = 1.0f / sqrtf(var + eps);
        for (int i = 0; i < n; i++) o[i] = (xt[i] - mean) * inv_std * weight[i] + (bias ? bias[i] : 0.0f);
    });
}

/* RMSNorm (Zhang and Sennrich 2019) of each of T positions of n values: x / sqrt(mean(x^2) +
 * eps) * weight, as float32 operations in this order (the sum of the squares as above). out
 * may be x. */
static void rms_row(float *o, const float *xt, const float *weight, int n, float eps) {
    float inv_rms = 1.0f / sqrtf(sum_of_squares(xt, n, 0.0f) / n + eps);
    for (int i = 0; i < n; i++) o[i] = xt[i] * inv_rms * weight[i];
}

static void rmsnorm(float *out, const float *x, const float *weight, int T, int n, float eps) {
    int t;
    SPLIT_FOR(T > 1, schedule(static), (t = 0; t < T; t++),
              { rms_row(out + (size_t)t * n, x + (size_t)t * n, weight, n, eps); });
}

/* SwiGLU's product over n values: up = silu(gate) * up, silu(g) = g / (1 + exp(-g)) with the
 * shared exp, then one multiply. */
static inline vf vf_silu(vf g) { return vf_div(g, vf_add(vf_set1(1.0f), vf_exp(vf_mul(g, vf_set1(-1.0f))))); }

/* GEGLU ("GLU Variants Improve Transformer", Gemma's feed-forward): up = gelu(gate) * up over
 * n values, the GELU of kind GELU_TANH or GELU_ERF; gate holds its GELU afterwards. */
static void geglu(float *up, float *gate, int n, int kind) {
    gelu(gate, n, kind);
    int i;
    SPLIT_FOR(n > SPAN, schedule(static), (i = 0; i < n; i++), { up[i] = gate[i] * up[i]; });
}

static void swiglu(float *up, const float *gate, int n) {
    int at;
    SPLIT_FOR(n > SPAN, schedule(static), (at = 0; at < n; at += SPAN), {
        int len = min_int(SPAN, n - at), i = 0;
        float *u = up + at;
        const float *g = gate + at;
        for (; i + VW <= len; i += VW) vf_store(u + i, vf_mul(vf_silu(vf_load(g + i)), vf_load(u + i)));
        if (i < len) { /* the last part-vector through zero-padded copies, as ELEMENTWISE does */
            float gp[VW] = {0}, up_part[VW] = {0};
            memcpy(gp, g + i, (size_t)(len - i) * sizeof(float));
            memcpy(up_part, u + i, (size_t)(len - i) * sizeof(float));
            vf_store(up_part, vf_mul(vf_silu(vf_load(gp)), vf_load(up_part)));
            memcpy(u + i, up_part, (size_t)(len - i) * sizeof(float));
        }
    });
}

/* Rotary positions for n_heads heads of head_size values at x (one token), at the position
 * whose table rows are cos and sin (dims / 2 values each): the pair (x_2i, x_2i+1) of each
 * head's first dims becomes (x_2i cos_i - x_2i+1 sin_i, x_2i sin_i + x_2i+1 cos_i), four
 * products and two sums; the rest of the head stays as it is (partial rotary). */
static void rotary(float *x, int n_heads, int head_size, int dims, const float *cos, const float *sin) {
    for (int h = 0; h < n_heads; h++) {
        float *head = x + (size_t)h * head_size;
        for (int i = 0; i < dims / 2; i++) {
            float x0 = head[2 * i], x1 = head[2 * i + 1];
            head[2 * i] = x0 * cos[i] - x1 * sin[i];
            head[2 * i + 1] = x0 * sin[i] + x1 * cos[i];
        }
    }
}

#endif
