/* kernels/arm/f32.h: float32 kernels on AArch64 (kernels/f32.h is the portable definition):
 * the prefill tile in NEON registers (4 rows x 16 tokens) and the tile sizes of several
 * samples' decode steps. Each output keeps kernels/simd.h's arithmetic. */
#ifndef KERNELS_ARM_F32_H
#define KERNELS_ARM_F32_H

#include "../arch.h"

#if defined(KERNELS_ARM)
#include <arm_neon.h>
#include <stddef.h>

#define F32_DECODE_ROWS 6 /* 24 accumulators, 6 weights and an input in 32 registers */
#define F32_DECODE_TOKENS 4
/* 4 rows x 16 tokens: 16 accumulators of 4 floats, the tokens in 4 registers */
#define F32_TILE_ROWS 4
#define F32_TILE_TOKENS 16
static inline void f32_tile(float *out, int ld_out, const float *xt, const float *const *wrow, int n,
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


static const char *f32_describe(void) { return "neon"; }
#endif

#endif
