/* kernels/x86/f32.h: float32 kernels on x86 (kernels/f32.h is the portable definition): the
 * prefill tile in registers (AVX-512: 12 rows x 32 tokens; AVX2: 3 rows x 32 tokens), the tile
 * sizes of several samples' decode steps, and with AVX-512 the tokens transposed 16 x 16 at a
 * time. Each output keeps kernels/simd.h's arithmetic: an fma chain over k in order. */
#ifndef KERNELS_X86_F32_H
#define KERNELS_X86_F32_H

#include "../arch.h"

#if defined(KERNELS_X86)
#include <immintrin.h>
#include <stddef.h>

#include "../parallel.h"

#if defined(__AVX512F__)
#define F32_DECODE_ROWS 6 /* 24 accumulators, 6 weights and an input in 32 registers */
#define F32_DECODE_TOKENS 4
/* 12 rows x 32 tokens (two registers): 24 FMAs per step into 24 accumulators */
#define F32_TILE_ROWS 12
#define F32_TILE_TOKENS 32
#define ROWS12(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7) X(8) X(9) X(10) X(11)
static inline void f32_tile(float *out, int ld_out, const float *xt, const float *const *wrow, int n,
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


/* dst[k][t] = src[t][k] for a block of 16 x 16 floats (rows lines of src exist, the rest read
 * as zero): pairs of lines interleaved by 1, 2, 4 and 8 floats in four rounds of shuffles. */
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

/* The first columns of the tokens x (T, n) transposed for f32_tile (kernels/f32.h's
 * transpose_tokens): 16 x 16 blocks in registers; returns the columns done. */
static int f32_transpose_blocks(float *xt, const float *x, int T, int n) {
    int padded = (T + F32_TILE_TOKENS - 1) / F32_TILE_TOKENS * F32_TILE_TOKENS, blocks = n / 16, job;
    SPLIT_FOR(1, schedule(static), (job = 0; job < padded / 16 * blocks; job++), {
        int t = job / blocks * 16, k = job % blocks * 16, rows = T - t < 16 ? T - t : 16;
        transpose16x16(xt + ((size_t)(t / F32_TILE_TOKENS) * n + k) * F32_TILE_TOKENS + t % F32_TILE_TOKENS, F32_TILE_TOKENS,
                       rows > 0 ? x + (size_t)t * n + k : x, n, rows);
    });
    return blocks * 16;
}

static const char *f32_describe(void) { return "avx512"; }
#else
#define F32_DECODE_ROWS 3 /* 12 accumulators, 3 weights and an input in AVX2's 16 registers */
#define F32_DECODE_TOKENS 4
/* 3 rows x 32 tokens (four registers): 12 FMAs per step into 12 accumulators, which with the
 * three broadcast weights and one input fill AVX2's 16 registers */
#define F32_TILE_ROWS 3
#define F32_TILE_TOKENS 32
static inline void f32_tile(float *out, int ld_out, const float *xt, const float *const *wrow, int n,
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


static const char *f32_describe(void) { return "avx2"; }
#endif
#endif

#endif
