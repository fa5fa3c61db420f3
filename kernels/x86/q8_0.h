/* kernels/x86/q8_0.h: q8_0 products on x86 (kernels/q8_0.h is the format and its portable
 * definition): the weights rearranged once at load into panels of 16 rows (kernels/x86/
 * panels.h), read by AVX512-VNNI or 256-bit AVX-VNNI / AVX2 maddubs kernels for one token, and
 * for a prompt by AMX tile products (Intel Sapphire Rapids and later, where Linux grants the
 * tiles), AVX512-VNNI (8 tokens per weight load) or the 256-bit kernels (4). Every kernel
 * computes kernels/simd.h's arithmetic: an exact integer dot product per group, an fma chain
 * over the groups. */
#ifndef KERNELS_X86_Q8_0_H
#define KERNELS_X86_Q8_0_H

#ifndef _DEFAULT_SOURCE /* syscall(), for the AMX permission */
#define _DEFAULT_SOURCE
#endif
#include "../arch.h"

#if defined(KERNELS_X86)
#include <immintrin.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "../matrix.h"
#include "../quant.h"
#include "../simd.h"
#include "../types.h"
#include "panels.h"


/* How a matrix's copy is laid out, which also decides the kernel that reads it. */
enum {
    Q8_PACK_SIGNED = 1,   /* quants and scales, for AMX (signed x signed; AVX512-VNNI decode beside
                         it) and the 256-bit kernels (|w| times x with w's sign) */
    Q8_PACK_UNSIGNED, /* quants + 128 as unsigned bytes, and scales: AVX512-VNNI's dpbusd
                         multiplies them by the signed activations, and 128 x the activations'
                         group sum comes off */
};

#if defined(__AMX_INT8__) && defined(__AMX_TILE__) && defined(__AVX512F__) && defined(__linux__)
#include <sys/syscall.h>
#include <unistd.h>
#define AMX_PREFILL 1

/* Linux hands out the 8 KB tile state only on request (arch_prctl ARCH_REQ_XCOMP_PERM for
 * XFEATURE_XTILEDATA, constants from the kernel's uapi headers); asked once per process. */
static int amx_available(void) {
    static int state = 0; /* 0 not asked yet, 1 granted, -1 refused */
    if (state == 0) state = syscall(SYS_arch_prctl, 0x1023, 18) == 0 ? 1 : -1;
    return state == 1;
}
#else
static inline int amx_available(void) { return 0; }
#endif

#if defined(__AVX512VNNI__) && defined(__AVX512BW__)
#define VNNI512_KERNELS 1
#define Q8_DECODE "avx512-vnni, 16 rows"
#define Q8_PREFILL "avx512-vnni, 16 rows x 8 tokens"
#elif defined(__AVX2__) && defined(__FMA__)
#define AVX2_KERNELS 1 /* AVX-VNNI's dpbusd where the CPU has it, else maddubs */
#if defined(__AVXVNNI__)
#define Q8_DECODE "avx-vnni, 16 rows"
#define Q8_PREFILL "avx-vnni, 16 rows x 4 tokens"
#else
#define Q8_DECODE "avx2-maddubs, 16 rows"
#define Q8_PREFILL "avx2-maddubs, 16 rows x 4 tokens"
#endif
#endif

/* One group of a panel: PANEL_ROWS rows x QUANT_GROUP quants. */
#define Q8_PANEL_GROUP (PANEL_ROWS * QUANT_GROUP)

/* The copy's layout for this build on this CPU, unless tests/test_kernels.c forces one this CPU
 * would not choose: the signed copy, whose decode kernel AMX machines run, on any AVX-512 CPU. */
static int forced_q8_packing = -1;
static int q8_packing(void) {
    if (forced_q8_packing >= 0) return forced_q8_packing;
    if (amx_available()) return Q8_PACK_SIGNED;
#if defined(VNNI512_KERNELS)
    return Q8_PACK_UNSIGNED;
#else
    return Q8_PACK_SIGNED;
#endif
}

static const char *q8_0_describe(void) {
    static char text[128];
    snprintf(text, sizeof text, "%s (prefill %s)", Q8_DECODE, amx_available() ? "amx, 16 rows x 16 tokens" : Q8_PREFILL);
    return text;
}

/* The copy of W (rows, n): whole panels of 16 rows (zero rows past the end), per panel and
 * group of 32 columns 8 lines of 64 bytes where bytes 4r..4r+3 of line j are w[r][4j..4j+3]
 * (AMX's B operand; for VNNI, line j holds 4 columns of all 16 rows, one row per 32-bit lane):
 * quants (panels, nb, 512), for Q8_PACK_UNSIGNED each plus 128 as an unsigned byte; then the
 * rows' scales (panels, nb, 16). */
static size_t q8_0_packed_bytes(const Matrix *m) {
    return panel_rows(m->rows) * (size_t)m->cols / QUANT_GROUP * (QUANT_GROUP + sizeof(float));
}

/* A product's weights as the panel kernels read them: the parts of m's copy. */
static void q8_packed_parts(const Matrix *m, QuantProduct *p) {
    size_t groups = panel_rows(m->rows) * (size_t)m->cols / QUANT_GROUP;
    p->wq = m->packed;
    p->ws = (const float *)(const void *)((const int8_t *)m->packed + groups * QUANT_GROUP);
}

static void q8_0_pack(Matrix *m, void *dst) {
    int n = m->cols, nb = n / QUANT_GROUP;
    m->packed = dst;
    m->packing = q8_packing();
    uint8_t offset = m->packing == Q8_PACK_UNSIGNED ? 128 : 0;
    QuantProduct p;
    q8_packed_parts(m, &p);
    long panel;
#pragma omp parallel for schedule(static)
    for (panel = 0; panel < (m->rows + PANEL_ROWS - 1) / PANEL_ROWS; panel++)
        for (int b = 0; b < nb; b++) {
            int8_t *lines = (int8_t *)p.wq + ((size_t)panel * nb + b) * Q8_PANEL_GROUP;
            for (int r = 0; r < PANEL_ROWS; r++) {
                size_t row = (size_t)panel * PANEL_ROWS + r, at = ((size_t)panel * nb + b) * PANEL_ROWS + r;
                int real = row < (size_t)m->rows;
                const int8_t *src = m->q8 + row * n + b * QUANT_GROUP;
                for (int j = 0; j < QUANT_GROUP / 4; j++)
                    for (int k = 0; k < 4; k++) /* zero rows past the end: the quant 0 */
                        lines[j * 64 + r * 4 + k] = (int8_t)(uint8_t)((real ? (uint8_t)src[j * 4 + k] : 0) + offset);
                ((float *)p.ws)[at] = real ? m->scale[row * nb + b] : 0.0f;
            }
        }
}

#ifdef AMX_PREFILL
/* Tiles 0 to 3: C, 16 tokens x 16 rows of int32 sums over one group each. Tiles 4 and 6: A,
 * 16 tokens x 32 activation quants. Tiles 5 and 7: B, 16 rows x 32 weight quants (VNNI). */
static void amx_configure(void) {
    struct { uint8_t palette, start_row, reserved[14]; uint16_t colsb[16]; uint8_t rows[16]; } cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.palette = 1;
    for (int i = 0; i < 4; i++) { cfg.rows[i] = 16; cfg.colsb[i] = 64; }
    for (int i = 4; i < 8; i += 2) {
        cfg.rows[i] = 16; cfg.colsb[i] = 32;       /* A */
        cfg.rows[i + 1] = 8; cfg.colsb[i + 1] = 64; /* B */
    }
    _tile_loadconfig(&cfg);
}

/* acc[t] += sums[t] (16 rows' int32 sums of one group) x row scales x token t's scale */
static inline void amx_scale_add(__m512 acc[16], int32_t sums[16][16], const float *ws, const float *xs) {
    __m512 w = _mm512_loadu_ps(ws);
    for (int t = 0; t < 16; t++)
        acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_load_si512(sums[t])),
                                 _mm512_mul_ps(w, _mm512_set1_ps(xs[t])), acc[t]);
}

/* Rows 16 * panel .. + 15 for all T tokens. The activations' quants and scales come in AMX
 * order, (T / 16, nb, 16, 32) and (T / 16, nb, 16), zero past T. tdpbssd multiplies signed
 * bytes by signed bytes, four products to each int32. Groups go in pairs, software-pipelined:
 * the products of the next pair (in C tiles 2, 3 or 0, 1) are under way while the sums of this
 * pair are stored and scaled into acc, so the tile unit's latency is hidden. */
static void amx_rows16(const QuantProduct *p, int panel) {
    int nb = p->nb, pairs = nb / 2, r0 = PANEL_ROWS * panel;
    const int8_t *wt = (const int8_t *)p->wq + (size_t)panel * nb * Q8_PANEL_GROUP;
    const float *ws = p->ws + (size_t)panel * nb * PANEL_ROWS;
    __mmask16 live = first_lanes(p->rows - r0);
    __m512 bv = p->bias ? _mm512_maskz_loadu_ps(live, p->bias + r0) : _mm512_setzero_ps();
    int32_t sums[2][16][16] __attribute__((aligned(64)));
    for (int t0 = 0; t0 < p->T; t0 += 16) {
        const int8_t *a = p->xq + (size_t)(t0 / 16) * nb * Q8_PANEL_GROUP;
        const float *as = p->xs + (size_t)(t0 / 16) * nb * 16;
        __m512 acc[16];
        for (int t = 0; t < 16; t++) acc[t] = _mm512_setzero_ps();
/* products of groups b and b + 1 into C tiles c0 and c1 */
#define ISSUE(c0, c1, b)                                               \
    do {                                                               \
        _tile_zero(c0);                                                \
        _tile_zero(c1);                                                \
        _tile_loadd(4, a + (size_t)(b) * Q8_PANEL_GROUP, QUANT_GROUP);                     \
        _tile_loadd(5, wt + (size_t)(b) * Q8_PANEL_GROUP, 64);                    \
        _tile_dpbssd(c0, 4, 5);                                        \
        _tile_loadd(6, a + (size_t)((b) + 1) * Q8_PANEL_GROUP, QUANT_GROUP);               \
        _tile_loadd(7, wt + (size_t)((b) + 1) * Q8_PANEL_GROUP, 64);              \
        _tile_dpbssd(c1, 6, 7);                                        \
    } while (0)
/* their sums, scaled, into acc */
#define DRAIN(c0, c1, b)                                               \
    do {                                                               \
        _tile_stored(c0, sums[0], 64);                                 \
        _tile_stored(c1, sums[1], 64);                                 \
        amx_scale_add(acc, sums[0], ws + (b) * PANEL_ROWS, as + (b) * 16);     \
        amx_scale_add(acc, sums[1], ws + ((b) + 1) * PANEL_ROWS, as + ((b) + 1) * 16); \
    } while (0)
        if (pairs > 0) ISSUE(0, 1, 0);
        for (int q = 0; q < pairs; q += 2) {
            if (q + 1 < pairs) ISSUE(2, 3, 2 * (q + 1));
            DRAIN(0, 1, 2 * q);
            if (q + 1 >= pairs) break;
            if (q + 2 < pairs) ISSUE(0, 1, 2 * (q + 2));
            DRAIN(2, 3, 2 * (q + 1));
        }
#undef ISSUE
#undef DRAIN
        if (nb % 2) { /* an odd number of groups: the last one alone */
            int b = nb - 1;
            _tile_zero(0);
            _tile_loadd(4, a + (size_t)b * Q8_PANEL_GROUP, QUANT_GROUP);
            _tile_loadd(5, wt + (size_t)b * Q8_PANEL_GROUP, 64);
            _tile_dpbssd(0, 4, 5);
            _tile_stored(0, sums[0], 64);
            amx_scale_add(acc, sums[0], ws + b * PANEL_ROWS, as + b * 16);
        }
        for (int t = 0; t < 16 && t0 + t < p->T; t++)
            _mm512_mask_storeu_ps(p->out + (size_t)(t0 + t) * p->rows + r0, live, _mm512_add_ps(acc[t], bv));
    }
}
#endif

#ifdef VNNI512_KERNELS
/* Rows 16 * panel .. + 15 for TOKENS tokens from t0 (1 for decode, 8 for prefill; past T, the
 * last token again, whose sums are not stored), from a Q8_PACK_UNSIGNED copy: the 16 rows' int32
 * sums in the lanes of one register per token. Per line of the group (64 bytes: 4 quants + 128
 * of each row), one dpbusd per token multiplies them by the token's 4 activation quants
 * broadcast to every lane (dpbusd_four); each token's sums start at -128 x the group's sum of
 * its quants, which takes the +128 off again: exact integers, the same as the signed product.
 * Signed weights cost four more operations a line (a broadcast, |w|, x given w's sign: see
 * vnni512_signed_decode, which this replaced where there are no AMX tiles).
 * With 8 tokens the first pass over the panel asks for the group 4 ahead (2 KB), as
 * q4_rows16_512 does (docs/speed.md has what both gained). */
static inline __attribute__((always_inline)) void vnni512_rows16(const QuantProduct *p, int panel, int t0,
                                                                 const int TOKENS) {
    int nb = p->nb, r0 = PANEL_ROWS * panel;
    const uint8_t *wt = (const uint8_t *)p->wq + (size_t)panel * nb * Q8_PANEL_GROUP;
    const float *ws = p->ws + (size_t)panel * nb * PANEL_ROWS;
    PanelTokens x = panel_tokens(p, t0, TOKENS);
    __m512 acc[8];
    for (int t = 0; t < TOKENS; t++) acc[t] = _mm512_setzero_ps();
    for (int b = 0; b < nb; b++) {
        if (TOKENS > 1 && t0 == 0) { /* the panel's first pass: the group 4 ahead into L1
                                        (q4_rows16_512 says why), and 16 ahead (8 KB) into L2 */
            for (int j = 0; j < 8; j++) _mm_prefetch((const char *)(wt + ((size_t)b + 16) * Q8_PANEL_GROUP + 64 * j), _MM_HINT_T2);
            for (int j = 0; j < 8; j++) _mm_prefetch((const char *)(wt + ((size_t)b + 4) * Q8_PANEL_GROUP + 64 * j), _MM_HINT_T0);
            _mm_prefetch((const char *)(ws + (b + 4) * PANEL_ROWS), _MM_HINT_T0);
        } else if (TOKENS > 1 && next_panel_wanted(p, t0, TOKENS)) { /* the last pass: the next panel's group b */
            for (int j = 0; j < 8; j++) _mm_prefetch((const char *)(wt + ((size_t)nb + b) * Q8_PANEL_GROUP + 64 * j), _MM_HINT_T1);
            _mm_prefetch((const char *)(ws + (nb + b) * PANEL_ROWS), _MM_HINT_T1);
        }
        __m512i dots[8];
        for (int t = 0; t < TOKENS; t++) dots[t] = _mm512_set1_epi32(-128 * x.sum[t][b]);
        for (int j = 0; j < 8; j++) {
            __m512i w = _mm512_loadu_si512(wt + ((size_t)b * 8 + j) * 64);
            for (int t = 0; t < TOKENS; t++) dots[t] = dpbusd_four(dots[t], w, x.q[t] + b * QUANT_GROUP + 4 * j);
        }
        __m512 sw = _mm512_loadu_ps(ws + b * PANEL_ROWS);
        for (int t = 0; t < TOKENS; t++)
            acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dots[t]), _mm512_mul_ps(sw, _mm512_set1_ps(x.scale[t][b])), acc[t]);
    }
    store_rows16_512(p, r0, t0, TOKENS, acc);
}

static void decode_vnni512(const QuantProduct *p, int panel) { vnni512_rows16(p, panel, 0, 1); }
static void prefill_vnni512(const QuantProduct *p, int panel) {
    for (int t0 = 0; t0 < p->T; t0 += 8) vnni512_rows16(p, panel, t0, 8);
}

/* Decode from a Q8_PACK_SIGNED copy (beside AMX, whose tiles multiply signed by signed): per
 * line, 4 activation bytes broadcast to every lane and given each weight's sign (dpbusd
 * multiplies unsigned by signed bytes: |w| times x with w's sign). */
static void vnni512_signed_decode(const QuantProduct *p, int panel) {
    int nb = p->nb, r0 = PANEL_ROWS * panel;
    const int8_t *wt = (const int8_t *)p->wq + (size_t)panel * nb * Q8_PANEL_GROUP;
    const float *ws = p->ws + (size_t)panel * nb * PANEL_ROWS;
    __m512 acc = _mm512_setzero_ps();
    for (int b = 0; b < nb; b++) {
        __m512i dots = _mm512_setzero_si512();
        for (int j = 0; j < 8; j++) {
            __m512i w = _mm512_loadu_si512(wt + ((size_t)b * 8 + j) * 64);
            int32_t four;
            memcpy(&four, p->xq + b * QUANT_GROUP + 4 * j, 4);
            __m512i x = _mm512_set1_epi32(four);
            __m512i signed_x = _mm512_mask_sub_epi8(x, _mm512_movepi8_mask(w), _mm512_setzero_si512(), x);
            dots = _mm512_dpbusd_epi32(dots, _mm512_abs_epi8(w), signed_x);
        }
        acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dots), _mm512_mul_ps(_mm512_loadu_ps(ws + b * PANEL_ROWS),
                                                                       _mm512_set1_ps(p->xs[b])), acc);
    }
    store_rows16_512(p, r0, 0, 1, &acc);
}
#endif

#ifdef AVX2_KERNELS
/* 4-byte products of the activation bytes x (given w's signs) with one line of 8 rows' |w|,
 * added to the 8 rows' int32 sums: AVX-VNNI's dpbusd, or with AVX2 alone maddubs (unsigned x
 * signed bytes to int16 pairs: no pair exceeds 2 x 127 x 127, so int16 cannot saturate) then
 * madd (pairs to int32). */
static inline __m256i add_dot4(__m256i sums, __m256i abs_w, __m256i signed_x) {
#if defined(__AVXVNNI__)
    return _mm256_dpbusd_avx_epi32(sums, abs_w, signed_x);
#else
    __m256i pairs = _mm256_maddubs_epi16(abs_w, signed_x);
    return _mm256_add_epi32(sums, _mm256_madd_epi16(pairs, _mm256_set1_epi16(1)));
#endif
}


/* Rows 16 * panel .. + 15 for tokens t0..t0+tokens-1 (tokens <= 4) with 256-bit registers:
 * rows 0..7 and 8..15 of the panel in two registers, the tokens sharing each load of weights.
 * Decode is the case of one token; it asks for the next group's lines before using this
 * group's (the one distance that helped: 2 or more groups ahead was slower than none). With
 * several tokens the first pass over a panel asks for the group 4 ahead, as prefill_vnni512
 * does (docs/speed.md). The activations (T, n) are signed. */
static void rows16_avx2(const QuantProduct *p, int panel, int t0, int tokens) {
    int nb = p->nb, n = nb * QUANT_GROUP, r0 = PANEL_ROWS * panel;
    const int8_t *wt = (const int8_t *)p->wq + (size_t)panel * nb * Q8_PANEL_GROUP;
    const float *ws = p->ws + (size_t)panel * nb * PANEL_ROWS;
    __m256 lo[4], hi[4];
    for (int t = 0; t < 4; t++) lo[t] = hi[t] = _mm256_setzero_ps();
    for (int b = 0; b < nb; b++) {
        __m256i dlo[4], dhi[4];
        for (int t = 0; t < 4; t++) dlo[t] = dhi[t] = _mm256_setzero_si256();
        if (tokens == 1) /* decode: the next group's 8 lines asked for before this group's are used */
            for (int j = 0; j < 8; j++) _mm_prefetch((const char *)(wt + ((size_t)b + 1) * Q8_PANEL_GROUP + 64 * j), _MM_HINT_T0);
        else if (t0 == 0) /* a panel's first pass with several tokens: the group 4 ahead (2 KB) */
            for (int j = 0; j < 8; j++) _mm_prefetch((const char *)(wt + ((size_t)b + 4) * Q8_PANEL_GROUP + 64 * j), _MM_HINT_T0);
        else if (next_panel_wanted(p, t0, tokens)) /* the last pass: the next panel's group b */
            for (int j = 0; j < 8; j++) _mm_prefetch((const char *)(wt + ((size_t)nb + b) * Q8_PANEL_GROUP + 64 * j), _MM_HINT_T1);
        for (int j = 0; j < 8; j++) {
            const int8_t *line = wt + ((size_t)b * 8 + j) * 64;
            __m256i wlo = _mm256_loadu_si256((const __m256i *)line),
                    whi = _mm256_loadu_si256((const __m256i *)(line + 32));
            __m256i alo = _mm256_abs_epi8(wlo), ahi = _mm256_abs_epi8(whi);
            for (int t = 0; t < tokens; t++) {
                int32_t four;
                memcpy(&four, p->xq + (size_t)(t0 + t) * n + b * QUANT_GROUP + 4 * j, 4);
                __m256i x = _mm256_set1_epi32(four);
                dlo[t] = add_dot4(dlo[t], alo, _mm256_sign_epi8(x, wlo));
                dhi[t] = add_dot4(dhi[t], ahi, _mm256_sign_epi8(x, whi));
            }
        }
        __m256 slo = _mm256_loadu_ps(ws + b * PANEL_ROWS), shi = _mm256_loadu_ps(ws + b * PANEL_ROWS + 8);
        for (int t = 0; t < tokens; t++) {
            __m256 sx = _mm256_set1_ps(p->xs[(size_t)(t0 + t) * nb + b]);
            lo[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dlo[t]), _mm256_mul_ps(slo, sx), lo[t]);
            hi[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dhi[t]), _mm256_mul_ps(shi, sx), hi[t]);
        }
    }
    store_rows16(p, r0, t0, tokens, lo, hi);
}
#endif

#ifdef AVX2_KERNELS
static void decode_avx2(const QuantProduct *p, int panel) { rows16_avx2(p, panel, 0, 1); }
static void prefill_avx2(const QuantProduct *p, int panel) {
    for (int t0 = 0; t0 < p->T; t0 += 4) rows16_avx2(p, panel, t0, min_int(4, p->T - t0));
}
#endif

#ifdef AMX_PREFILL
/* Prefill on AMX tiles: the activations quantized in AMX order, (T / 16, nb, 16, 32) quants and
 * (T / 16, nb, 16) scales, zero past T; a team of threads each with its tiles configured. */
static void amx_panels(const QuantProduct *p, int panels) {
    int panel;
    amx_configure();
#pragma omp for schedule(dynamic, 1)
    for (panel = 0; panel < panels; panel++) amx_rows16(p, panel);
    _tile_release();
}

static void amx_matmul(QuantProduct *p, const float *x, MatmulScratch *scratch) {
    int nb = p->nb, n = nb * QUANT_GROUP, panels = (p->rows + PANEL_ROWS - 1) / PANEL_ROWS, t;
    SPLIT_FOR(1, schedule(static), (t = 0; t < (p->T + 15) / 16 * 16; t++), {
        for (int b = 0; b < nb; b++) {
            size_t at = ((size_t)(t / 16) * nb + b) * 16 + t % 16;
            if (t < p->T) quantize_q8(scratch->q + at * QUANT_GROUP, scratch->scale + at, x + (size_t)t * n + b * QUANT_GROUP, QUANT_GROUP);
            else { memset(scratch->q + at * QUANT_GROUP, 0, QUANT_GROUP); scratch->scale[at] = 0.0f; }
        }
    });
    /* every thread its tiles configured, then the panels shared (the `omp for` ends when all
     * are done) */
    TEAM_REGION(amx_panels(p, panels););
}
#endif

/* ---- the product -------------------------------------------------------------------------- */

/* q8_0 W from its rearranged copy, panel by panel with the kernel this build and CPU use. The
 * activations are quantized here as everywhere (per token, one scale per group), in the order
 * that kernel reads. One arithmetic serves every number of tokens. */
static void q8_0_packed_matmul(float *out, const float *x, const Matrix *w, const float *bias, int T,
                               MatmulScratch *scratch) {
    int n = w->cols;
    QuantProduct p = {.out = out, .bias = bias, .T = T, .rows = w->rows, .nb = n / QUANT_GROUP,
                      .xq = scratch->q, .xs = scratch->scale};
    q8_packed_parts(w, &p);
#ifdef AMX_PREFILL
    if (T > 1 && amx_available()) {
        amx_matmul(&p, x, scratch);
        return;
    }
#endif
    int32_t *sums = w->packing == Q8_PACK_UNSIGNED ? scratch->sum : NULL; /* weights + 128 */
    quantize_rows(scratch->q, scratch->scale, sums, x, T, n);
    p.xsum = sums;
#if defined(VNNI512_KERNELS)
    if (sums) for_each_panel(&p, decode_vnni512, prefill_vnni512);
    else for_each_panel(&p, vnni512_signed_decode, vnni512_signed_decode); /* beside AMX: T = 1 only */
#else
    for_each_panel(&p, decode_avx2, prefill_avx2);
#endif
}

#endif

#endif
