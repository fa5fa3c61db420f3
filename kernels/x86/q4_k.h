/* kernels/x86/q4_k.h: q4_k products on x86 (kernels/q4_k.h is the format and its portable
 * definition): the weights rearranged once at load into panels of 16 rows (kernels/x86/
 * panels.h), one row per 32-bit lane, at about the file's size (148 bytes a row's super-block
 * against 144: the 6-bit scales and mins unpacked to bytes). Each 64-byte line of a panel holds
 * 4 bytes of each row: the low nibbles of one sub-block's 4 values and the high nibbles of the
 * next sub-block's, as GGUF pairs them, so a line feeds two int8 dot products per token (dpbusd,
 * or AVX2's maddubs: nibbles times activations, pairs below 2 x 15 x 127, 16 products below
 * 2^15, no saturation). Per super-block the kernel then takes kernels/simd.h's two fma chains
 * (each group's sc x dot and m x s exact integers, by vpmulld) and fma(d, dsum, acc), fma(-dmin,
 * msum, acc) for 16 rows at once. */
#ifndef KERNELS_X86_Q4_K_H
#define KERNELS_X86_Q4_K_H

#include "../arch.h"

#if defined(KERNELS_X86) && (defined(__F16C__) || defined(__AVX512F__))
#include <immintrin.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "../matrix.h"
#include "../quant.h"
#include "../simd.h"
#include "../types.h"
#include "panels.h"

#define Q4_K_X86 1
#if defined(__AVX512VNNI__) && defined(__AVX512BW__)
#define Q4_K_KERNEL "avx512-vnni, 16 rows (prefill 16 rows x 4 tokens)"
#elif defined(__AVXVNNI__)
#define Q4_K_KERNEL "avx-vnni, 16 rows"
#else
#define Q4_K_KERNEL "avx2-maddubs, 16 rows"
#endif

static const char *q4_k_describe(void) { return Q4_K_KERNEL; }

/* One super-block of a panel: the 16 rows' d (binary16), dmin, the scales sc[g][row] and mins
 * m[g][row] as bytes, then 4 pairs of sub-blocks of 8 lines each, line k of pair c holding
 * bytes 4k..4k+3 of each row's qs[32c..32c+31] (low nibbles: sub-block 2c's values 4k..4k+3,
 * high nibbles: sub-block 2c+1's). */
enum {
    Q4K_D = 0, Q4K_DMIN = 32, Q4K_SC = 64, Q4K_M = 64 + 128, Q4K_QS = 64 + 256,
    Q4K_PANEL_BLOCK = Q4K_QS + 32 * 64, /* 2368 bytes: 16 rows x 148 */
};

static size_t q4_k_packed_bytes(const Matrix *m) {
    return panel_rows(m->rows) / PANEL_ROWS * (size_t)(m->cols / SUPER_BLOCK) * Q4K_PANEL_BLOCK;
}

static void q4_k_pack(Matrix *m, void *dst) {
    int blocks = m->cols / SUPER_BLOCK;
    m->packed = dst;
    long panel;
#pragma omp parallel for schedule(static)
    for (panel = 0; panel < (m->rows + PANEL_ROWS - 1) / PANEL_ROWS; panel++)
        for (int b = 0; b < blocks; b++) {
            uint8_t *chunk = (uint8_t *)dst + ((size_t)panel * blocks + b) * Q4K_PANEL_BLOCK;
            memset(chunk, 0, Q4K_PANEL_BLOCK); /* rows past the end: d, scales and quants 0 */
            for (int r = 0; r < PANEL_ROWS && panel * PANEL_ROWS + r < m->rows; r++) {
                const uint8_t *src = block_row(m, (int)panel * PANEL_ROWS + r, SUPER_BLOCK, Q4_K_BYTES) + (size_t)b * Q4_K_BYTES;
                uint8_t sc[SUB_BLOCKS], mn[SUB_BLOCKS];
                memcpy(chunk + Q4K_D + 2 * r, src, 2);
                memcpy(chunk + Q4K_DMIN + 2 * r, src + 2, 2);
                k_scales(src + 4, sc, mn);
                for (int g = 0; g < SUB_BLOCKS; g++) chunk[Q4K_SC + g * 16 + r] = sc[g], chunk[Q4K_M + g * 16 + r] = mn[g];
                for (int line = 0; line < 32; line++) /* pair line / 8, bytes 4 (line % 8) .. of qs[32 pair ..] */
                    memcpy(chunk + Q4K_QS + line * 64 + 4 * r, src + 16 + 32 * (line / 8) + 4 * (line % 8), 4);
            }
        }
}

#if defined(__AVX512VNNI__) && defined(__AVX512BW__)
/* Rows 16 * panel .. + 15 for TOKENS tokens from t0 (1 for decode, 4 for prefill; past T, the
 * last token again, not stored). A line's low nibbles (a) and 16 x its high nibbles (the
 * nibbles in place, andnot) go through dpbusd against 4 activation bytes broadcast; the high
 * sums come back by an exact shift right by 4. */
static inline __attribute__((always_inline)) void q4_k_rows16_512(const QuantProduct *p, int panel, int t0,
                                                                  const int TOKENS) {
    int blocks = p->nb / SUB_BLOCKS, r0 = PANEL_ROWS * panel;
    const uint8_t *chunk = (const uint8_t *)p->wq + (size_t)panel * blocks * Q4K_PANEL_BLOCK;
    const __m512i low4 = _mm512_set1_epi8(15), sign = _mm512_set1_epi32(INT32_MIN);
    PanelTokens x = panel_tokens(p, t0, TOKENS);
    __m512 acc[4];
    for (int t = 0; t < TOKENS; t++) acc[t] = _mm512_setzero_ps();
    for (int b = 0; b < blocks; b++, chunk += Q4K_PANEL_BLOCK) {
        __m512 dsum[4], msum[4];
        for (int t = 0; t < TOKENS; t++) dsum[t] = msum[t] = _mm512_setzero_ps();
        for (int c = 0; c < 4; c++) {
            __m512i dlo[4], dhi[4];
            for (int t = 0; t < TOKENS; t++) dlo[t] = dhi[t] = _mm512_setzero_si512();
            for (int k = 0; k < 8; k++) {
                __m512i v = _mm512_loadu_si512(chunk + Q4K_QS + (c * 8 + k) * 64);
                ONE_LOAD(v);
                __m512i a = _mm512_and_si512(v, low4), h = _mm512_andnot_si512(low4, v);
                for (int t = 0; t < TOKENS; t++) {
                    const int8_t *xq = x.q[t] + b * SUPER_BLOCK + 64 * c + 4 * k;
                    dlo[t] = dpbusd_four(dlo[t], a, xq);
                    dhi[t] = dpbusd_four(dhi[t], h, xq + 32);
                }
            }
            for (int half = 0; half < 2; half++) {
                int g = 2 * c + half, at = b * SUB_BLOCKS + g;
                __m512i sc = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(chunk + Q4K_SC + g * 16)));
                __m512i mn = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(chunk + Q4K_M + g * 16)));
                for (int t = 0; t < TOKENS; t++) {
                    __m512i dot = half ? _mm512_srai_epi32(dhi[t], 4) : dlo[t];
                    __m512 xs = _mm512_set1_ps(x.scale[t][at]);
                    dsum[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_mullo_epi32(sc, dot)), xs, dsum[t]);
                    msum[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_mullo_epi32(mn, _mm512_set1_epi32(x.sum[t][at]))), xs,
                                              msum[t]);
                }
            }
        }
        __m512 d = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(chunk + Q4K_D)));
        __m512 minus_dmin = _mm512_castsi512_ps(_mm512_xor_si512(
            _mm512_castps_si512(_mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(chunk + Q4K_DMIN)))), sign));
        for (int t = 0; t < TOKENS; t++) acc[t] = _mm512_fmadd_ps(minus_dmin, msum[t], _mm512_fmadd_ps(d, dsum[t], acc[t]));
    }
    store_rows16_512(p, r0, t0, TOKENS, acc);
}

static void q4_k_decode_panel(const QuantProduct *p, int panel) { q4_k_rows16_512(p, panel, 0, 1); }
static void q4_k_prefill_panel(const QuantProduct *p, int panel) {
    for (int t0 = 0; t0 < p->T; t0 += 4) q4_k_rows16_512(p, panel, t0, 4);
}
#else
/* Rows 16 * panel .. + 15 for one token t, 8 rows at a time (half 0: rows 0-7, the first 32
 * bytes of each line; half 1: rows 8-15): with AVX-VNNI dpbusd takes the low nibbles and 16 x
 * the high ones (shifted back once); with AVX2 alone maddubs takes both as nibbles 0..15 and the
 * int16 sums of a sub-block's 8 lines are widened once (dot4_256, kernels/x86/panels.h). */
static void q4_k_rows16_256(const QuantProduct *p, int panel, int t) {
    int nb = p->nb, blocks = nb / SUB_BLOCKS, n = nb * QUANT_GROUP, r0 = PANEL_ROWS * panel;
    const uint8_t *chunk = (const uint8_t *)p->wq + (size_t)panel * blocks * Q4K_PANEL_BLOCK;
    const int8_t *xq = p->xq + (size_t)t * n;
    const float *xs = p->xs + (size_t)t * nb;
    const int32_t *xsum = p->xsum + (size_t)t * nb;
    const __m256i low4 = _mm256_set1_epi8(15), sign = _mm256_set1_epi32(INT32_MIN);
    __m256 acc[2] = {_mm256_setzero_ps(), _mm256_setzero_ps()};
    for (int b = 0; b < blocks; b++, chunk += Q4K_PANEL_BLOCK)
        for (int half = 0; half < 2; half++) {
            __m256 dsum = _mm256_setzero_ps(), msum = _mm256_setzero_ps();
            for (int c = 0; c < 4; c++) {
                __m256i dlo = _mm256_setzero_si256(), dhi = _mm256_setzero_si256();
                for (int k = 0; k < 8; k++) {
                    __m256i v = _mm256_loadu_si256((const __m256i *)(chunk + Q4K_QS + (c * 8 + k) * 64 + 32 * half));
                    const int8_t *x4 = xq + b * SUPER_BLOCK + 64 * c + 4 * k;
                    int32_t first, second;
                    memcpy(&first, x4, 4);
                    memcpy(&second, x4 + 32, 4);
#if defined(__AVXVNNI__)
                    __m256i h = _mm256_andnot_si256(low4, v);
#else
                    __m256i h = _mm256_and_si256(_mm256_srli_epi16(v, 4), low4);
#endif
                    dlo = dot4_256(dlo, _mm256_and_si256(v, low4), _mm256_set1_epi32(first));
                    dhi = dot4_256(dhi, h, _mm256_set1_epi32(second));
                }
#if defined(__AVXVNNI__)
                dhi = _mm256_srai_epi32(dhi, 4);
#endif
                for (int g = 2 * c; g < 2 * c + 2; g++) {
                    __m256i dot = dot4_sums_256(g == 2 * c ? dlo : dhi);
                    __m256i sc = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(chunk + Q4K_SC + g * 16 + 8 * half)));
                    __m256i mn = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(chunk + Q4K_M + g * 16 + 8 * half)));
                    __m256 s = _mm256_set1_ps(xs[b * SUB_BLOCKS + g]);
                    dsum = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_mullo_epi32(sc, dot)), s, dsum);
                    msum = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_mullo_epi32(mn, _mm256_set1_epi32(xsum[b * SUB_BLOCKS + g]))),
                                           s, msum);
                }
            }
            __m256 d = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(chunk + Q4K_D + 16 * half)));
            __m256 minus_dmin = _mm256_castsi256_ps(_mm256_xor_si256(
                _mm256_castps_si256(_mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(chunk + Q4K_DMIN + 16 * half)))), sign));
            acc[half] = _mm256_fmadd_ps(minus_dmin, msum, _mm256_fmadd_ps(d, dsum, acc[half]));
        }
    store_rows16(p, r0, t, 1, &acc[0], &acc[1]);
}

static void q4_k_decode_panel(const QuantProduct *p, int panel) { q4_k_rows16_256(p, panel, 0); }
static void q4_k_prefill_panel(const QuantProduct *p, int panel) {
    for (int t = 0; t < p->T; t++) q4_k_rows16_256(p, panel, t);
}
#endif

/* q4_k W from its rearranged copy: activations quantized as for q8_0 with each group's sum,
 * then panel by panel. */
static void q4_k_packed_matmul(float *out, const float *x, const Matrix *w, const float *bias, int T,
                               MatmulScratch *scratch) {
    int n = w->cols;
    quantize_rows(scratch->q, scratch->scale, scratch->sum, x, T, n);
    QuantProduct p = {.out = out, .bias = bias, .T = T, .rows = w->rows, .nb = n / QUANT_GROUP,
                      .xq = scratch->q, .xs = scratch->scale, .xsum = scratch->sum, .wq = w->packed};
    for_each_panel(&p, q4_k_decode_panel, q4_k_prefill_panel);
}

#endif

#endif
