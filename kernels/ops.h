/* kernels/ops.h: the neural-net operations beneath forward() other than matrix products and
 * attention, each one entry point holding its whole loop and its OpenMP split, computed as
 * kernels/simd.h defines:
 *
 *   layernorm()     LayerNorm of each of T positions
 *   softmax()       in place, over n values
 *   gelu()          GPT-2's tanh approximation or the exact erf form, in place
 *   residual_add()  x += delta
 */
#ifndef KERNELS_OPS_H
#define KERNELS_OPS_H

#include <math.h>
#include <stddef.h>
#include <string.h>

#include "../model.h"
#include "simd.h"

/* Elementwise steps over a prompt's block are split between threads in spans of SPAN values;
 * one token's (decode) stay on one thread, where starting the others would cost more. */
#define SPAN 8192

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

#endif
