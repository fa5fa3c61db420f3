/* kernels/x86/q5_0.h: q5_0 products on x86 (kernels/q5_0.h is the format and its portable
 * definition): the weights rearranged once at load into panels of 16 rows (kernels/x86/
 * panels.h), one row per 32-bit lane, at the file's size (22 bytes a row's block). Blocks go in
 * pairs, 11 cache lines for 16 rows: the 32 binary16 d, then per block q4_0's 4 nibble lines
 * (byte 4r + i of line k: number 4k + i in the low nibble, 16 + 4k + i in the high one, their
 * low 4 bits) and one line of fifth bits (byte 4r + i: bit k of number 4k + i, bit 4 + k of
 * number 16 + 4k + i). The numbers (0..31) go through dpbusd (or AVX2's maddubs: 4 lines'
 * pairs below 4 x 2 x 31 x 127 < 2^15) from -16 x the group's activation sum, which takes the
 * + 16 off; then kernels/simd.h's fma(dot, d x xs, acc). */
#ifndef KERNELS_X86_Q5_0_H
#define KERNELS_X86_Q5_0_H

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
#define Q5_0_KERNEL "avx512-vnni, 16 rows (prefill 16 rows x 8 tokens)"
#elif defined(__AVXVNNI__)
#define Q5_0_KERNEL "avx-vnni, 16 rows"
#else
#define Q5_0_KERNEL "avx2-maddubs, 16 rows"
#endif

static const char *q5_0_describe(void) { return Q5_0_KERNEL; }

/* Two blocks of a panel: d[block][row] (binary16), then per block 4 nibble lines and a line
 * of fifth bits. */
enum { Q5_0_D = 0, Q5_0_LINES = 64, Q5_0_BLOCK_LINES = 5 * 64, Q5_0_PANEL_PAIR = 64 + 2 * 5 * 64 /* 704 */ };

static size_t q5_0_packed_bytes(const Matrix *m) {
    return panel_rows(m->rows) / PANEL_ROWS * (size_t)((m->cols / QUANT_GROUP + 1) / 2) * Q5_0_PANEL_PAIR;
}

/* Block b's d and lines in a panel of nb blocks a row. */
static inline const uint8_t *q5_0_pair(const uint8_t *panel_start, int b) { return panel_start + (size_t)(b / 2) * Q5_0_PANEL_PAIR; }

static void q5_0_pack(Matrix *m, void *dst) {
    int nb = m->cols / QUANT_GROUP, pairs = (nb + 1) / 2;
    m->packed = dst;
    long panel;
#pragma omp parallel for schedule(static)
    for (panel = 0; panel < (m->rows + PANEL_ROWS - 1) / PANEL_ROWS; panel++) {
        uint8_t *start = (uint8_t *)dst + (size_t)panel * pairs * Q5_0_PANEL_PAIR;
        memset(start, 0, (size_t)pairs * Q5_0_PANEL_PAIR); /* rows past the end, and a last odd block's pair: 0 */
        for (int r = 0; r < PANEL_ROWS && panel * PANEL_ROWS + r < m->rows; r++) {
            const uint8_t *row = block_row(m, (int)panel * PANEL_ROWS + r, QUANT_GROUP, Q5_0_BYTES);
            for (int b = 0; b < nb; b++) {
                const uint8_t *src = row + (size_t)b * Q5_0_BYTES;
                uint8_t *pair = start + (size_t)(b / 2) * Q5_0_PANEL_PAIR, *lines = pair + Q5_0_LINES + (b % 2) * Q5_0_BLOCK_LINES;
                uint32_t qh = u32_at(src + 2);
                memcpy(pair + Q5_0_D + (b % 2) * 32 + 2 * r, src, 2);
                for (int k = 0; k < 4; k++)
                    for (int i = 0; i < 4; i++) {
                        int lo = q5_number(qh, src + 6, 4 * k + i), hi = q5_number(qh, src + 6, 16 + 4 * k + i);
                        lines[k * 64 + 4 * r + i] = (uint8_t)((lo & 15) | (hi & 15) << 4);
                        lines[4 * 64 + 4 * r + i] |= (uint8_t)((lo >> 4) << k | (hi >> 4) << (4 + k));
                    }
            }
        }
    }
}

#if defined(__AVX512VNNI__) && defined(__AVX512BW__)
/* Rows 16 * panel .. + 15 for TOKENS tokens from t0 (1 for decode, 8 for prefill; past T, the
 * last token again, not stored): a nibble line's low and high nibbles, each with its fifth
 * bit added where the bit line has it (a masked add of 16), through dpbusd. */
static inline __attribute__((always_inline)) void q5_0_rows16_512(const QuantProduct *p, int panel, int t0,
                                                                  const int TOKENS) {
    int nb = p->nb, r0 = PANEL_ROWS * panel;
    const uint8_t *start = (const uint8_t *)p->wq + (size_t)panel * ((nb + 1) / 2) * Q5_0_PANEL_PAIR;
    const __m512i low4 = _mm512_set1_epi8(15), sixteen = _mm512_set1_epi8(16);
    PanelTokens x = panel_tokens(p, t0, TOKENS);
    __m512 acc[8];
    for (int t = 0; t < TOKENS; t++) acc[t] = _mm512_setzero_ps();
    for (int b = 0; b < nb; b++) {
        const uint8_t *pair = q5_0_pair(start, b), *lines = pair + Q5_0_LINES + (b % 2) * Q5_0_BLOCK_LINES;
        __m512i bits = _mm512_loadu_si512(lines + 4 * 64), dots[8];
        for (int t = 0; t < TOKENS; t++) dots[t] = _mm512_set1_epi32(-16 * x.sum[t][b]);
        for (int k = 0; k < 4; k++) {
            __m512i v = _mm512_loadu_si512(lines + k * 64);
            __m512i lo = _mm512_and_si512(v, low4), hi = _mm512_and_si512(_mm512_srli_epi16(v, 4), low4);
            lo = _mm512_mask_add_epi8(lo, _mm512_test_epi8_mask(bits, _mm512_set1_epi8((char)(1 << k))), lo, sixteen);
            hi = _mm512_mask_add_epi8(hi, _mm512_test_epi8_mask(bits, _mm512_set1_epi8((char)(16 << k))), hi, sixteen);
            for (int t = 0; t < TOKENS; t++) {
                const int8_t *xq = x.q[t] + b * QUANT_GROUP + 4 * k;
                dots[t] = dpbusd_four(dpbusd_four(dots[t], lo, xq), hi, xq + 16);
            }
        }
        __m512 d = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(pair + Q5_0_D + (b % 2) * 32)));
        for (int t = 0; t < TOKENS; t++)
            acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dots[t]), _mm512_mul_ps(d, _mm512_set1_ps(x.scale[t][b])), acc[t]);
    }
    store_rows16_512(p, r0, t0, TOKENS, acc);
}

static void q5_0_decode_panel(const QuantProduct *p, int panel) { q5_0_rows16_512(p, panel, 0, 1); }
static void q5_0_prefill_panel(const QuantProduct *p, int panel) {
    for (int t0 = 0; t0 < p->T; t0 += 8) q5_0_rows16_512(p, panel, t0, 8);
}
#else
/* Rows 16 * panel .. + 15 for token t: rows 0-7 and 8-15 in two registers; a line's low and
 * high nibbles take their fifth bits from the bit line by shifts (bit k to bit 4, and bit 4 + k). */
static void q5_0_rows16_256(const QuantProduct *p, int panel, int t) {
    int nb = p->nb, n = nb * QUANT_GROUP, r0 = PANEL_ROWS * panel;
    const uint8_t *start = (const uint8_t *)p->wq + (size_t)panel * ((nb + 1) / 2) * Q5_0_PANEL_PAIR;
    const int8_t *xq = p->xq + (size_t)t * n;
    const __m256i low4 = _mm256_set1_epi8(15), bit4 = _mm256_set1_epi8(16);
    __m256 acc[2] = {_mm256_setzero_ps(), _mm256_setzero_ps()};
    for (int b = 0; b < nb; b++) {
        const uint8_t *pair = q5_0_pair(start, b), *lines = pair + Q5_0_LINES + (b % 2) * Q5_0_BLOCK_LINES;
        __m256 s = _mm256_set1_ps(p->xs[(size_t)t * nb + b]);
        __m256i offset = _mm256_set1_epi32(-16 * p->xsum[(size_t)t * nb + b]);
        for (int half = 0; half < 2; half++) {
            __m256i bits = _mm256_loadu_si256((const __m256i *)(lines + 4 * 64 + 32 * half));
            __m256i dlo = _mm256_setzero_si256(), dhi = _mm256_setzero_si256();
            for (int k = 0; k < 4; k++) {
                __m256i v = _mm256_loadu_si256((const __m256i *)(lines + k * 64 + 32 * half));
                __m256i lo = _mm256_or_si256(_mm256_and_si256(v, low4), _mm256_and_si256(_mm256_slli_epi16(bits, 4 - k), bit4));
                __m256i hi = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(v, 4), low4),
                                             _mm256_and_si256(_mm256_srli_epi16(bits, k), bit4));
                int32_t first, second;
                memcpy(&first, xq + b * QUANT_GROUP + 4 * k, 4);
                memcpy(&second, xq + b * QUANT_GROUP + 16 + 4 * k, 4);
                dlo = dot4_256(dlo, lo, _mm256_set1_epi32(first));
                dhi = dot4_256(dhi, hi, _mm256_set1_epi32(second));
            }
            __m256i dot = _mm256_add_epi32(_mm256_add_epi32(dot4_sums_256(dlo), dot4_sums_256(dhi)), offset);
            __m256 d = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(pair + Q5_0_D + (b % 2) * 32 + 16 * half)));
            acc[half] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot), _mm256_mul_ps(d, s), acc[half]);
        }
    }
    store_rows16(p, r0, t, 1, &acc[0], &acc[1]);
}

static void q5_0_decode_panel(const QuantProduct *p, int panel) { q5_0_rows16_256(p, panel, 0); }
static void q5_0_prefill_panel(const QuantProduct *p, int panel) {
    for (int t = 0; t < p->T; t++) q5_0_rows16_256(p, panel, t);
}
#endif

/* q5_0 W from its rearranged copy: activations quantized as for q8_0 with each group's sum (for
 * the numbers' + 16), then panel by panel. */
static void q5_0_packed_matmul(float *out, const float *x, const Matrix *w, const float *bias, int T,
                               MatmulScratch *scratch) {
    int n = w->cols;
    quantize_rows(scratch->q, scratch->scale, scratch->sum, x, T, n);
    QuantProduct p = {.out = out, .bias = bias, .T = T, .rows = w->rows, .nb = n / QUANT_GROUP,
                      .xq = scratch->q, .xs = scratch->scale, .xsum = scratch->sum, .wq = w->packed};
    for_each_panel(&p, q5_0_decode_panel, q5_0_prefill_panel);
}

#endif

#endif
