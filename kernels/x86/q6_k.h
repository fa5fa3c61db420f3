/* kernels/x86/q6_k.h: q6_k products on x86 (kernels/q6_k.h is the format and its portable
 * definition): the weights rearranged once at load into panels of 16 rows (kernels/x86/
 * panels.h), one row per 32-bit lane, at about the file's size (212 bytes a row's super-block
 * against 210). A sub-block's 16 6-bit numbers (quant + 32) go in 3 lines: byte i of row r's
 * dword in line j holds number 4j + i in its low 6 bits, and two bits of number 12 + i above
 * them (bits 2j, 2j + 1), so that numbers 0..11 are one AND away and 12..15 three shifts. Their
 * dot products with the activations (dpbusd, or AVX2's maddubs: two lines' products below
 * 4 x 63 x 127 < 2^15) start from -32 x the sub-block's sum of activation quants, which takes
 * the + 32 off; then sc_a dot_a + sc_b dot_b per group (vpmulld: exact integers) and
 * kernels/simd.h's fma chain. */
#ifndef KERNELS_X86_Q6_K_H
#define KERNELS_X86_Q6_K_H

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

#if defined(__AVX512VNNI__) && defined(__AVX512BW__)
#define Q6_K_KERNEL "avx512-vnni, 16 rows (prefill 16 rows x 4 tokens)"
#elif defined(__AVXVNNI__)
#define Q6_K_KERNEL "avx-vnni, 16 rows"
#else
#define Q6_K_KERNEL "avx2-maddubs, 16 rows"
#endif

static const char *q6_k_describe(void) { return Q6_K_KERNEL; }

/* One super-block of a panel: the 16 rows' d (binary16), the int8 scales sc[j][row] of the 16
 * sub-blocks, then per group of 32 six lines (three per sub-block, as above); padded to whole
 * cache lines. */
enum {
    Q6K_D = 0, Q6K_SC = 32, Q6K_QS = 32 + 256,
    Q6K_PANEL_BLOCK = (Q6K_QS + 8 * 6 * 64 + 63) / 64 * 64, /* 3392 bytes: 16 rows x 210, + 32 */
};

static size_t q6_k_packed_bytes(const Matrix *m) {
    return panel_rows(m->rows) / PANEL_ROWS * (size_t)(m->cols / SUPER_BLOCK) * Q6K_PANEL_BLOCK;
}

static void q6_k_pack(Matrix *m, void *dst) {
    int blocks = m->cols / SUPER_BLOCK;
    m->packed = dst;
    long panel;
#pragma omp parallel for schedule(static)
    for (panel = 0; panel < (m->rows + PANEL_ROWS - 1) / PANEL_ROWS; panel++)
        for (int b = 0; b < blocks; b++) {
            uint8_t *chunk = (uint8_t *)dst + ((size_t)panel * blocks + b) * Q6K_PANEL_BLOCK;
            memset(chunk, 0, Q6K_PANEL_BLOCK); /* rows past the end: d and scales 0 */
            for (int r = 0; r < PANEL_ROWS && panel * PANEL_ROWS + r < m->rows; r++) {
                const uint8_t *src = block_row(m, (int)panel * PANEL_ROWS + r, SUPER_BLOCK, Q6_K_BYTES) + (size_t)b * Q6_K_BYTES;
                memcpy(chunk + Q6K_D + 2 * r, src + 208, 2);
                for (int j = 0; j < 16; j++) chunk[Q6K_SC + j * 16 + r] = src[192 + j];
                for (int sub = 0; sub < 16; sub++) { /* sub-block sub: group sub / 2, lines 3 (sub % 2) .. */
                    int v[16];
                    for (int i = 0; i < 16; i++) v[i] = q6_k_quant(src, 16 * sub + i) + 32;
                    for (int j = 0; j < 3; j++)
                        for (int i = 0; i < 4; i++)
                            chunk[Q6K_QS + (sub * 3 + j) * 64 + 4 * r + i] = (uint8_t)(v[4 * j + i] | ((v[12 + i] >> (2 * j)) & 3) << 6);
                }
            }
        }
}

/* Each 16th of the activations' quants summed: sums (T, n / 16). */
static void q6_k_half_sums(int32_t *sums, const int8_t *xq, int T, int n) {
    for (size_t i = 0; i < (size_t)T * n / 16; i++) {
        int32_t s = 0;
        for (int k = 0; k < 16; k++) s += xq[16 * i + k];
        sums[i] = s;
    }
}

#if defined(__AVX512VNNI__) && defined(__AVX512BW__)
/* A sub-block's 3 lines -> its numbers 12..15 (bits 6-7 of each line's bytes, lowest first) */
static inline __m512i q6_high_numbers_512(__m512i l0, __m512i l1, __m512i l2) {
    return _mm512_or_si512(_mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(l0, 6), _mm512_set1_epi8(0x03)),
                                           _mm512_and_si512(_mm512_srli_epi16(l1, 4), _mm512_set1_epi8(0x0C))),
                           _mm512_and_si512(_mm512_srli_epi16(l2, 2), _mm512_set1_epi8(0x30)));
}

/* Rows 16 * panel .. + 15 for TOKENS tokens from t0 (1 for decode, 4 for prefill; past T, the
 * last token again, not stored). half_sums (T, n / 16): each sub-block's activation sum. */
static inline __attribute__((always_inline)) void q6_k_rows16_512(const QuantProduct *p, int panel, int t0,
                                                                  const int TOKENS) {
    int blocks = p->nb / SUB_BLOCKS, r0 = PANEL_ROWS * panel;
    const uint8_t *chunk = (const uint8_t *)p->wq + (size_t)panel * blocks * Q6K_PANEL_BLOCK;
    const __m512i low6 = _mm512_set1_epi8(0x3F);
    PanelTokens x = panel_tokens(p, t0, TOKENS);
    const int32_t *halves[4];
    for (int t = 0; t < TOKENS; t++) halves[t] = p->xsum + (size_t)min_int(t0 + t, p->T - 1) * p->nb * 2;
    __m512 acc[4];
    for (int t = 0; t < TOKENS; t++) acc[t] = _mm512_setzero_ps();
    for (int b = 0; b < blocks; b++, chunk += Q6K_PANEL_BLOCK) {
        __m512 dsum[4];
        for (int t = 0; t < TOKENS; t++) dsum[t] = _mm512_setzero_ps();
        for (int g = 0; g < SUB_BLOCKS; g++) {
            __m512i dots[4];
            for (int h = 0; h < 2; h++) {
                int sub = 2 * g + h;
                const uint8_t *lines = chunk + Q6K_QS + sub * 3 * 64;
                __m512i l0 = _mm512_loadu_si512(lines), l1 = _mm512_loadu_si512(lines + 64), l2 = _mm512_loadu_si512(lines + 128);
                __m512i u3 = q6_high_numbers_512(l0, l1, l2);
                l0 = _mm512_and_si512(l0, low6), l1 = _mm512_and_si512(l1, low6), l2 = _mm512_and_si512(l2, low6);
                __m512i sc = _mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(chunk + Q6K_SC + sub * 16)));
                for (int t = 0; t < TOKENS; t++) {
                    const int8_t *xq = x.q[t] + b * SUPER_BLOCK + 16 * sub;
                    __m512i dot = _mm512_set1_epi32(-32 * halves[t][b * 16 + sub]);
                    dot = dpbusd_four(dot, l0, xq);
                    dot = dpbusd_four(dot, l1, xq + 4);
                    dot = dpbusd_four(dot, l2, xq + 8);
                    dot = dpbusd_four(dot, u3, xq + 12);
                    dot = _mm512_mullo_epi32(sc, dot);
                    dots[t] = h ? _mm512_add_epi32(dots[t], dot) : dot;
                }
            }
            for (int t = 0; t < TOKENS; t++)
                dsum[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dots[t]), _mm512_set1_ps(x.scale[t][b * SUB_BLOCKS + g]), dsum[t]);
        }
        __m512 d = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(chunk + Q6K_D)));
        for (int t = 0; t < TOKENS; t++) acc[t] = _mm512_fmadd_ps(d, dsum[t], acc[t]);
    }
    store_rows16_512(p, r0, t0, TOKENS, acc);
}

static void q6_k_decode_panel(const QuantProduct *p, int panel) { q6_k_rows16_512(p, panel, 0, 1); }
static void q6_k_prefill_panel(const QuantProduct *p, int panel) {
    for (int t0 = 0; t0 < p->T; t0 += 4) q6_k_rows16_512(p, panel, t0, 4);
}
#else
/* Rows 16 * panel .. + 15 for token t, 8 rows at a time (half 0: the first 32 bytes of each
 * line, half 1: the rest). */
static void q6_k_rows16_256(const QuantProduct *p, int panel, int t) {
    int nb = p->nb, blocks = nb / SUB_BLOCKS, n = nb * QUANT_GROUP, r0 = PANEL_ROWS * panel;
    const uint8_t *chunk = (const uint8_t *)p->wq + (size_t)panel * blocks * Q6K_PANEL_BLOCK;
    const int8_t *xq = p->xq + (size_t)t * n;
    const float *xs = p->xs + (size_t)t * nb;
    const int32_t *halves = p->xsum + (size_t)t * nb * 2;
    const __m256i low6 = _mm256_set1_epi8(0x3F);
    __m256 acc[2] = {_mm256_setzero_ps(), _mm256_setzero_ps()};
    for (int b = 0; b < blocks; b++, chunk += Q6K_PANEL_BLOCK)
        for (int half = 0; half < 2; half++) {
            __m256 dsum = _mm256_setzero_ps();
            for (int g = 0; g < SUB_BLOCKS; g++) {
                __m256i dot = _mm256_setzero_si256();
                for (int h = 0; h < 2; h++) {
                    int sub = 2 * g + h;
                    const uint8_t *lines = chunk + Q6K_QS + sub * 3 * 64 + 32 * half;
                    __m256i l0 = _mm256_loadu_si256((const __m256i *)lines), l1 = _mm256_loadu_si256((const __m256i *)(lines + 64));
                    __m256i l2 = _mm256_loadu_si256((const __m256i *)(lines + 128));
                    __m256i u3 = _mm256_or_si256(_mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l0, 6), _mm256_set1_epi8(0x03)),
                                                                 _mm256_and_si256(_mm256_srli_epi16(l1, 4), _mm256_set1_epi8(0x0C))),
                                                 _mm256_and_si256(_mm256_srli_epi16(l2, 2), _mm256_set1_epi8(0x30)));
                    const int8_t *x4 = xq + b * SUPER_BLOCK + 16 * sub;
                    int32_t four[4];
                    memcpy(four, x4, 16);
                    /* two lines' pairs at a time in int16 (maddubs), then int32 */
                    __m256i lo = dot4_256(dot4_256(_mm256_setzero_si256(), _mm256_and_si256(l0, low6), _mm256_set1_epi32(four[0])),
                                          _mm256_and_si256(l1, low6), _mm256_set1_epi32(four[1]));
                    __m256i hi = dot4_256(dot4_256(_mm256_setzero_si256(), _mm256_and_si256(l2, low6), _mm256_set1_epi32(four[2])),
                                          u3, _mm256_set1_epi32(four[3]));
                    __m256i sub_dot = _mm256_add_epi32(_mm256_add_epi32(dot4_sums_256(lo), dot4_sums_256(hi)),
                                                       _mm256_set1_epi32(-32 * halves[b * 16 + sub]));
                    __m256i sc = _mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)(chunk + Q6K_SC + sub * 16 + 8 * half)));
                    dot = _mm256_add_epi32(dot, _mm256_mullo_epi32(sc, sub_dot));
                }
                dsum = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot), _mm256_set1_ps(xs[b * SUB_BLOCKS + g]), dsum);
            }
            __m256 d = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(chunk + Q6K_D + 16 * half)));
            acc[half] = _mm256_fmadd_ps(d, dsum, acc[half]);
        }
    store_rows16(p, r0, t, 1, &acc[0], &acc[1]);
}

static void q6_k_decode_panel(const QuantProduct *p, int panel) { q6_k_rows16_256(p, panel, 0); }
static void q6_k_prefill_panel(const QuantProduct *p, int panel) {
    for (int t = 0; t < p->T; t++) q6_k_rows16_256(p, panel, t);
}
#endif

/* q6_k W from its rearranged copy: activations quantized as for q8_0, each sub-block's sum of
 * quants (the + 32 comes off with it), then panel by panel. */
static void q6_k_packed_matmul(float *out, const float *x, const Matrix *w, const float *bias, int T,
                               MatmulScratch *scratch) {
    int n = w->cols;
    quantize_rows(scratch->q, scratch->scale, NULL, x, T, n);
    q6_k_half_sums(scratch->sum, scratch->q, T, n);
    QuantProduct p = {.out = out, .bias = bias, .T = T, .rows = w->rows, .nb = n / QUANT_GROUP,
                      .xq = scratch->q, .xs = scratch->scale, .xsum = scratch->sum, .wq = w->packed};
    for_each_panel(&p, q6_k_decode_panel, q6_k_prefill_panel);
}

#endif

#endif
