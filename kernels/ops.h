/* kernels/ops.h: the neural-net operations beneath forward() other than matrix products and
 * attention, each one entry point holding its whole loop and its OpenMP split, computed as
 * kernels/simd.h defines:
 *
 *   layernorm()     LayerNorm of each of T positions (GPT-2)
 *   rmsnorm()       RMSNorm of each of T positions (Llama)
 *   softmax()       in place, over n values (softmax2(): two rows side by side)
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

#include "../model.h"
#include "parallel.h"
#include "simd.h"

/* Elementwise steps over a prompt's block are split between threads in spans of SPAN values;
 * one token's (decode) stay on one thread, where starting the others would cost more. */
#define SPAN 8192

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
/* In-place softmax over n values: subtract the max for stability, exponentiate, normalise
 * (the sum in order, one value after the other). */
static void softmax(float *x, int n) {
    float max = x[0], sum = 0.0f;
    for (int i = 1; i < n; i++) if (x[i] > max) max = x[i];
    exp_minus(x, n, max);
    for (int i = 0; i < n; i++) sum += x[i];
    divide_by(x, n, sum);
}

/* softmax() of two rows of n values, each row with exactly softmax()'s operations; the two
 * rows' maxima and in-order sums advance side by side, so that their chains of dependent
 * operations overlap (decode attention of two heads at once). GCC would split the loop of the
 * two sums back into one loop per sum (loop distribution, -O3), so it is told not to here. */
#if defined(__GNUC__) && !defined(__clang__)
__attribute__((optimize("no-tree-loop-distribution")))
#endif
static void softmax2(float *x, float *y, int n) {
    float max_x = x[0], max_y = y[0], sum_x = 0.0f, sum_y = 0.0f;
    for (int i = 1; i < n; i++) {
        if (x[i] > max_x) max_x = x[i];
        if (y[i] > max_y) max_y = y[i];
    }
    exp_minus(x, n, max_x);
    exp_minus(y, n, max_y);
    for (int i = 0; i < n; i++) sum_x += x[i], sum_y += y[i];
    divide_by(x, n, sum_x);
    divide_by(y, n, sum_y);
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
 * bias (bias may be NULL). out may be x. */
static void layernorm(float *out, const float *x, const float *weight, const float *bias, int T,
                      int n, float eps) {
    int t;
    SPLIT_FOR(T > 1, schedule(static), (t = 0; t < T; t++), {
        const float *xt = x + (size_t)t * n;
        float *o = out + (size_t)t * n, mean = 0.0f, var = 0.0f;
        for (int i = 0; i < n; i++) mean += xt[i];
        mean /= n;
        for (int i = 0; i < n; i++) var += (xt[i] - mean) * (xt[i] - mean);
        var /= n;
        float inv_std = 1.0f / sqrtf(var + eps);
        for (int i = 0; i < n; i++) o[i] = (xt[i] - mean) * inv_std * weight[i] + (bias ? bias[i] : 0.0f);
    });
}

/* RMSNorm (Zhang and Sennrich 2019) of each of T positions of n values: x / sqrt(mean(x^2) +
 * eps) * weight, as float32 operations in this order (the squares summed one after the
 * other). out may be x. */
static void rmsnorm(float *out, const float *x, const float *weight, int T, int n, float eps) {
    int t;
    SPLIT_FOR(T > 1, schedule(static), (t = 0; t < T; t++), {
        const float *xt = x + (size_t)t * n;
        float *o = out + (size_t)t * n, sum_squares = 0.0f;
        for (int i = 0; i < n; i++) sum_squares += xt[i] * xt[i];
        float inv_rms = 1.0f / sqrtf(sum_squares / n + eps);
        for (int i = 0; i < n; i++) o[i] = xt[i] * inv_rms * weight[i];
    });
}

/* SwiGLU's product over n values: up = silu(gate) * up, silu(g) = g / (1 + exp(-g)) with the
 * shared exp, then one multiply. */
static inline vf vf_silu(vf g) { return vf_div(g, vf_add(vf_set1(1.0f), vf_exp(vf_mul(g, vf_set1(-1.0f))))); }

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
 * whose table rows are cos and sin (head_size / 2 values each): the pair (x_2i, x_2i+1) becomes
 * (x_2i cos_i - x_2i+1 sin_i, x_2i sin_i + x_2i+1 cos_i), four products and two sums. */
static void rotary(float *x, int n_heads, int head_size, const float *cos, const float *sin) {
    for (int h = 0; h < n_heads; h++) {
        float *head = x + (size_t)h * head_size;
        for (int i = 0; i < head_size / 2; i++) {
            float x0 = head[2 * i], x1 = head[2 * i + 1];
            head[2 * i] = x0 * cos[i] - x1 * sin[i];
            head[2 * i + 1] = x0 * sin[i] + x1 * cos[i];
        }
    }
}

#endif
