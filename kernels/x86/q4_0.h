/* kernels/x86/q4_0.h: q4_0 products on x86 (kernels/q4_0.h is the format and its portable
 * definition): the weights rearranged once at load (q4_0_pack) into panels of 16 rows, one row
 * per 32-bit lane, the 4-bit values kept as unsigned nibbles (quant + 8). A multiply of
 * unsigned by signed bytes (AVX-VNNI / AVX512-VNNI dpbusd, or maddubs, whose pairs stay below
 * 2 x 15 x 127 and cannot saturate) gives sum (quant + 8) x; the group's 8 x sum(x) is taken
 * off. One kernel serves one token and a prompt: with AVX512-VNNI q4_rows16_512 (the 16 rows in
 * one 512-bit register, 8 tokens per load of weights), else q4_rows16 (two 256-bit registers,
 * 4 tokens). The arithmetic is q8_0's (kernels/simd.h), so every path gives the same bits. */
#ifndef KERNELS_X86_Q4_0_H
#define KERNELS_X86_Q4_0_H

#include "../arch.h"

#if defined(KERNELS_X86)
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
#define Q4_VNNI512 1
#define Q4_KERNEL "avx512-vnni, 16 rows (prefill 16 rows x 8 tokens)"
#elif defined(__AVXVNNI__)
#define Q4_KERNEL "avx-vnni, 16 rows x 4 tokens"
#else
#define Q4_KERNEL "avx2-maddubs, 16 rows x 4 tokens"
#endif

static const char *q4_0_describe(void) { return Q4_KERNEL; }

/* One group of a panel: Q4_PANEL_GROUP bytes, 4 lines of 64 where bytes 4r..4r+3 of line k
 * hold, for row r, quants 4k..4k+3 + 8 in their low 4 bits and quants 16+4k..16+4k+3 + 8 in
 * their high 4 bits. */
#define Q4_PANEL_GROUP (PANEL_ROWS * QUANT_GROUP / 2)

/* The copy of W (rows, n): whole panels of 16 rows (zero quants and scales past the end),
 * quants (panels, nb, 256 bytes) then scales (panels, nb, 16). */
static size_t q4_0_packed_bytes(const Matrix *m) {
    return panel_rows(m->rows) * (size_t)m->cols / QUANT_GROUP * (QUANT_GROUP / 2 + sizeof(float));
}

/* A product's weights as the panel kernels read them: the parts of m's copy. */
static void q4_packed_parts(const Matrix *m, QuantProduct *p) {
    p->wq = m->packed;
    p->ws = (const float *)(const void *)((const uint8_t *)m->packed + panel_rows(m->rows) * (size_t)m->cols / 2);
}

static void q4_0_pack(Matrix *m, void *dst) {
    int n = m->cols, nb = n / QUANT_GROUP;
    m->packed = dst;
    QuantProduct p;
    q4_packed_parts(m, &p);
    float *scales = (float *)p.ws;
    long panel;
#pragma omp parallel for schedule(static)
    for (panel = 0; panel < (m->rows + PANEL_ROWS - 1) / PANEL_ROWS; panel++)
        for (int b = 0; b < nb; b++) {
            uint8_t *lines = (uint8_t *)dst + ((size_t)panel * nb + b) * Q4_PANEL_GROUP;
            for (int r = 0; r < PANEL_ROWS; r++) {
                size_t row = (size_t)panel * PANEL_ROWS + r;
                int real = row < (size_t)m->rows;
                const uint8_t *group = m->q4 + (row * n + (size_t)b * QUANT_GROUP) / 2;
                for (int k = 0; k < 4; k++)
                    for (int i = 0; i < 4; i++)
                        lines[k * 64 + r * 4 + i] = real ? (uint8_t)((q4_quant(group, 4 * k + i) + 8) |
                                                                     ((q4_quant(group, 16 + 4 * k + i) + 8) << 4))
                                                         : 0x88; /* quant 0 */
                scales[((size_t)panel * nb + b) * PANEL_ROWS + r] = real ? m->scale[row * nb + b] : 0.0f;
            }
        }
}

#if !defined(Q4_VNNI512)
/* A group's sums of (quant + 8) x activation for 8 rows, one row per 32-bit lane, built from
 * pairs of lines: q4_add(acc, a, xa, b, xb) adds the 4-byte products of unsigned bytes a (0..15)
 * with signed bytes xa, and of b with xb. With AVX-VNNI, dpbusd adds them straight into int32.
 * With AVX2 alone, maddubs gives int16 pairs of at most 2 x 15 x 127 = 3810 in magnitude: the 8
 * pairs of a group's 4 line pairs sum to at most 30480, which int16 holds, so they are widened
 * to int32 (madd) once per group, not once per line. */
#if defined(__AVXVNNI__)
static inline __m256i q4_add(__m256i acc, __m256i a, __m256i xa, __m256i b, __m256i xb) {
    return _mm256_dpbusd_avx_epi32(_mm256_dpbusd_avx_epi32(acc, a, xa), b, xb);
}
static inline __m256i q4_sums(__m256i acc) { return acc; }
#else
static inline __m256i q4_add(__m256i acc, __m256i a, __m256i xa, __m256i b, __m256i xb) {
    return _mm256_add_epi16(acc, _mm256_add_epi16(_mm256_maddubs_epi16(a, xa), _mm256_maddubs_epi16(b, xb)));
}
static inline __m256i q4_sums(__m256i acc) { return _mm256_madd_epi16(acc, _mm256_set1_epi16(1)); }
#endif

/* Rows 16 * panel .. + 15 for tokens t0..t0+tokens-1 (tokens <= 4): rows 0..7 and 8..15 in two
 * registers, the tokens sharing each load of weights. p->xsum (T, nb): each group's sum of the
 * activation quants, for taking off 8 x sum(x). One token (decode) also asks for the lines of
 * the group 3 ahead (768 bytes) before it uses this group's, as kernels/x86/q8_0.h's rows16_avx2
 * does for its next 512-byte group (3 ahead was the fastest distance measured); several tokens
 * ask, on a panel's first pass, for the group 8 ahead (2 KB), as q4_rows16_512 does
 * (docs/speed.md has both measurements). */
static void q4_rows16(const QuantProduct *p, int panel, int t0, int tokens) {
    int nb = p->nb, n = nb * QUANT_GROUP, r0 = PANEL_ROWS * panel;
    const uint8_t *wt = (const uint8_t *)p->wq + (size_t)panel * nb * Q4_PANEL_GROUP;
    const float *ws = p->ws + (size_t)panel * nb * PANEL_ROWS;
    const __m256i low4 = _mm256_set1_epi8(15);
    __m256 lo[4], hi[4];
    for (int t = 0; t < 4; t++) lo[t] = hi[t] = _mm256_setzero_ps();
    for (int b = 0; b < nb; b++) {
        const uint8_t *group = wt + (size_t)b * Q4_PANEL_GROUP;
        if (tokens == 1)
            for (int k = 0; k < 4; k++) _mm_prefetch((const char *)(group + 3 * Q4_PANEL_GROUP + 64 * k), _MM_HINT_T0);
        else if (t0 == 0) /* a panel's first pass with several tokens: the group 8 ahead (2 KB) */
            for (int k = 0; k < 4; k++) _mm_prefetch((const char *)(group + 8 * Q4_PANEL_GROUP + 64 * k), _MM_HINT_T0);
        else if (next_panel_wanted(p, t0, tokens)) /* the last pass: the next panel's group b */
            for (int k = 0; k < 4; k++) _mm_prefetch((const char *)(group + (size_t)nb * Q4_PANEL_GROUP + 64 * k), _MM_HINT_T1);
        __m256i dlo[4], dhi[4];
        for (int t = 0; t < 4; t++) dlo[t] = dhi[t] = _mm256_setzero_si256();
        for (int k = 0; k < 4; k++) {
            __m256i vlo = _mm256_loadu_si256((const __m256i *)(group + 64 * k)),
                    vhi = _mm256_loadu_si256((const __m256i *)(group + 64 * k + 32));
            /* quants 4k.. (low nibbles) and 16+4k.. (high nibbles) of rows 0-7 and 8-15 */
            __m256i a_lo = _mm256_and_si256(vlo, low4), b_lo = _mm256_and_si256(_mm256_srli_epi16(vlo, 4), low4);
            __m256i a_hi = _mm256_and_si256(vhi, low4), b_hi = _mm256_and_si256(_mm256_srli_epi16(vhi, 4), low4);
            for (int t = 0; t < tokens; t++) {
                const int8_t *x = p->xq + (size_t)(t0 + t) * n + b * QUANT_GROUP;
                int32_t first, second;
                memcpy(&first, x + 4 * k, 4);
                memcpy(&second, x + 16 + 4 * k, 4);
                __m256i xa = _mm256_set1_epi32(first), xb = _mm256_set1_epi32(second);
                dlo[t] = q4_add(dlo[t], a_lo, xa, b_lo, xb);
                dhi[t] = q4_add(dhi[t], a_hi, xa, b_hi, xb);
            }
        }
        __m256 slo = _mm256_loadu_ps(ws + b * PANEL_ROWS), shi = _mm256_loadu_ps(ws + b * PANEL_ROWS + 8);
        for (int t = 0; t < tokens; t++) {
            __m256i offset = _mm256_set1_epi32(8 * p->xsum[(size_t)(t0 + t) * nb + b]);
            __m256 sx = _mm256_set1_ps(p->xs[(size_t)(t0 + t) * nb + b]);
            lo[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_sub_epi32(q4_sums(dlo[t]), offset)), _mm256_mul_ps(slo, sx), lo[t]);
            hi[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_sub_epi32(q4_sums(dhi[t]), offset)), _mm256_mul_ps(shi, sx), hi[t]);
        }
    }
    store_rows16(p, r0, t0, tokens, lo, hi);
}
#endif

#if defined(Q4_VNNI512)
/* Rows 16 * panel .. + 15 for TOKENS tokens from t0 (1 for decode, 8 for prefill; past T, the
 * last token again, whose sums are not stored): all 16 rows in one 512-bit register, one row
 * per 32-bit lane. A line of the group (64 bytes: 4 quants of each row, with 4 more in the high
 * nibbles) gives two dpbusd per token, its low and its high nibbles against 4 activation bytes
 * broadcast to every lane. Each token's sums start at -8 x sum(x) (taking the +8 off the
 * quants) and run as two chains, low and high nibbles, added at the end of the group: exact
 * integers, so the order is free. TOKENS is a constant in each caller, so the loops over tokens
 * unroll. ONE_LOAD keeps each line in a register: left alone, GCC folds the load into both
 * instructions that use it in decode, two loads a line where one does.
 * With 8 tokens the kernel computes long enough between loads that the hardware prefetcher
 * falls behind: the first pass over a panel (t0 = 0; later passes find it in cache) asks for
 * the group 8 ahead (2 KB). That is --samples 8's product (it has only 8 tokens; a prompt's has
 * up to 128 and is bound by arithmetic). docs/speed.md has what both gained. */
static inline __attribute__((always_inline)) void q4_rows16_512(const QuantProduct *p, int panel, int t0,
                                                                const int TOKENS) {
    int nb = p->nb, r0 = PANEL_ROWS * panel;
    const uint8_t *wt = (const uint8_t *)p->wq + (size_t)panel * nb * Q4_PANEL_GROUP;
    const float *ws = p->ws + (size_t)panel * nb * PANEL_ROWS;
    const __m512i low4 = _mm512_set1_epi8(15);
    PanelTokens x = panel_tokens(p, t0, TOKENS);
    __m512 acc[8];
    for (int t = 0; t < TOKENS; t++) acc[t] = _mm512_setzero_ps();
    for (int b = 0; b < nb; b++) {
        const uint8_t *group = wt + (size_t)b * Q4_PANEL_GROUP;
        if (TOKENS > 1 && t0 == 0) { /* the panel's first pass: the lines of 8 groups ahead */
            for (int k = 0; k < 4; k++) _mm_prefetch((const char *)(group + 8 * Q4_PANEL_GROUP + 64 * k), _MM_HINT_T0);
            _mm_prefetch((const char *)(ws + (b + 8) * PANEL_ROWS), _MM_HINT_T0);
        } else if (next_panel_wanted(p, t0, TOKENS)) { /* the last pass: the next panel's group b */
            for (int k = 0; k < 4; k++) _mm_prefetch((const char *)(group + (size_t)nb * Q4_PANEL_GROUP + 64 * k), _MM_HINT_T1);
            _mm_prefetch((const char *)(ws + (nb + b) * PANEL_ROWS), _MM_HINT_T1);
        }
        __m512i dlo[8], dhi[8];
        for (int t = 0; t < TOKENS; t++) {
            dlo[t] = _mm512_set1_epi32(-8 * x.sum[t][b]);
            dhi[t] = _mm512_setzero_si512();
        }
        for (int k = 0; k < 4; k++) {
            __m512i v = _mm512_loadu_si512(group + 64 * k);
            ONE_LOAD(v);
            __m512i a = _mm512_and_si512(v, low4), c = _mm512_andnot_si512(low4, v); /* c: 16 x the high nibbles */
            for (int t = 0; t < TOKENS; t++) {
                const int8_t *first = x.q[t] + b * QUANT_GROUP + 4 * k; /* activation quants 4k..4k+3 */
                dlo[t] = dpbusd_four(dlo[t], a, first);
                dhi[t] = dpbusd_four(dhi[t], c, first + 16); /* and 16+4k..16+4k+3 */
            }
        }
        __m512 sw = _mm512_loadu_ps(ws + b * PANEL_ROWS);
        for (int t = 0; t < TOKENS; t++)
            acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_add_epi32(dlo[t], _mm512_srai_epi32(dhi[t], 4))),
                                     _mm512_mul_ps(sw, _mm512_set1_ps(x.scale[t][b])), acc[t]);
    }
    store_rows16_512(p, r0, t0, TOKENS, acc);
}
#endif

#if defined(Q4_VNNI512)
static void q4_decode_panel(const QuantProduct *p, int panel) { q4_rows16_512(p, panel, 0, 1); }
static void q4_prefill_panel(const QuantProduct *p, int panel) {
    for (int t0 = 0; t0 < p->T; t0 += 8) q4_rows16_512(p, panel, t0, 8);
}
#else
static void q4_decode_panel(const QuantProduct *p, int panel) { q4_rows16(p, panel, 0, 1); }
static void q4_prefill_panel(const QuantProduct *p, int panel) {
    for (int t0 = 0; t0 < p->T; t0 += 4) q4_rows16(p, panel, t0, min_int(4, p->T - t0));
}
#endif

/* ---- the product -------------------------------------------------------------------------- */

/* q4_0 W from its rearranged copy: activations quantized as for q8_0 (with each group's sum of
 * quants, for the weights' + 8), then panel by panel. One arithmetic serves every number of
 * tokens. */
static void q4_0_packed_matmul(float *out, const float *x, const Matrix *w, const float *bias, int T,
                               MatmulScratch *scratch) {
    int n = w->cols;
    quantize_rows(scratch->q, scratch->scale, scratch->sum, x, T, n);
    QuantProduct p = {.out = out, .bias = bias, .T = T, .rows = w->rows, .nb = n / QUANT_GROUP,
                      .xq = scratch->q, .xs = scratch->scale, .xsum = scratch->sum};
    q4_packed_parts(w, &p);
    for_each_panel(&p, q4_decode_panel, q4_prefill_panel);
}

#endif

#endif
