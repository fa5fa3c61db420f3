/* kernels/x86/panels.h: the packing geometry of x86's quantized kernels (kernels/x86/q8_0.h,
 * q4_0.h) and the loops around them: the weights are rearranged once at load into panels of
 * PANEL_ROWS rows, one row per 32-bit lane, so that one register holds 16 (or 8) rows' sums and
 * no row needs a horizontal sum; a product goes panel by panel, split between threads. */
#ifndef KERNELS_X86_PANELS_H
#define KERNELS_X86_PANELS_H

#include "../arch.h"

#if defined(KERNELS_X86)
#include <immintrin.h>
#include <stddef.h>
#include <stdint.h>

#include "../parallel.h"
#include "../simd.h"
#include "../types.h"

/* A panel: PANEL_ROWS consecutive rows of W, one per 32-bit lane of a 512-bit register (the 16
 * rows of an AMX tile). The copy holds whole panels: rows rounded up to a multiple of 16, the
 * rows past the end zero. */
#define PANEL_ROWS 16

static inline size_t panel_rows(int rows) { return ((size_t)rows + PANEL_ROWS - 1) / PANEL_ROWS * PANEL_ROWS; }

/* One product as the panel kernels see it: out (T, rows) = x @ W^T + bias. */
typedef struct {
    float *out;
    const float *bias;    /* (rows) or NULL */
    int T, rows, nb;      /* tokens, rows of W, groups of QUANT_GROUP per row */
    const int8_t *xq;     /* the activations quantized, in the order the kernel reads */
    const float *xs;      /* their scales */
    const int32_t *xsum;  /* their groups' sums of quants (T, nb) for offset weights, or NULL */
    const void *wq;       /* the weights' rearranged copy: quants, */
    const float *ws;      /*   and scales (panels, nb, PANEL_ROWS) */
} QuantProduct;

/* Every panel of a product: decode (T = 1), the panels split evenly between threads (a pass
 * over W at the speed of memory); prefill, one panel at a time for every token while it sits
 * in cache (dynamic: the last panel may be short). decode_panel(p, panel) computes one token,
 * prefill_panel(p, panel) all T. Inlined into each format's caller, so the kernels are direct
 * calls.
 * Up to FEW_TOKENS tokens (samples' decode steps, a short prompt) the panels are split evenly
 * too: each thread's panels are then one stretch of the copy, read front to back, and a kernel
 * can ask for its next panel's lines during the last pass over this one (memory's time hidden
 * behind that pass's arithmetic, not added to it). */
#define FEW_TOKENS 16
static inline __attribute__((always_inline)) void for_each_panel(const QuantProduct *p,
                                                                 void (*decode_panel)(const QuantProduct *, int),
                                                                 void (*prefill_panel)(const QuantProduct *, int)) {
    int panels = (p->rows + PANEL_ROWS - 1) / PANEL_ROWS, panel;
    if (p->T == 1) SPLIT_FOR(1, schedule(static), (panel = 0; panel < panels; panel++), { decode_panel(p, panel); });
    else if (p->T <= FEW_TOKENS) SPLIT_FOR(1, schedule(static), (panel = 0; panel < panels; panel++), { prefill_panel(p, panel); });
    else SPLIT_FOR(1, schedule(dynamic, 1), (panel = 0; panel < panels; panel++), { prefill_panel(p, panel); });
}

/* Whether a prefill kernel's pass over tokens t0..t0+tokens-1 is its last over a panel of a
 * product split evenly (2 to FEW_TOKENS tokens), so that it asks for the next panel's lines:
 * the next panel is then this thread's own. */
static inline int next_panel_wanted(const QuantProduct *p, int t0, int tokens) {
    return p->T > 1 && p->T <= FEW_TOKENS && t0 + tokens >= p->T;
}

#if defined(__AVX512F__)
/* Tokens t0..t0+tokens-1 (at most 8) of a product as the 512-bit panel kernels read them: each
 * one's activation quants, scales and group sums; past T, the last token again (the kernels
 * compute it and store_rows16_512 leaves it out). */
typedef struct {
    const int8_t *q[8];
    const float *scale[8];
    const int32_t *sum[8];
} PanelTokens;

static inline __attribute__((always_inline)) PanelTokens panel_tokens(const QuantProduct *p, int t0, int tokens) {
    PanelTokens x;
    for (int t = 0; t < tokens; t++) {
        size_t token = (size_t)min_int(t0 + t, p->T - 1);
        x.q[t] = p->xq + token * p->nb * QUANT_GROUP;
        x.scale[t] = p->xs + token * p->nb;
        x.sum[t] = p->xsum ? p->xsum + token * p->nb : NULL;
    }
    return x;
}

/* The sums of rows r0..r0+15 (one per lane of acc[t]) for tokens t0..t0+tokens-1, plus the
 * bias, into the output; rows past the bottom of W and tokens past T are not stored. */
static inline void store_rows16_512(const QuantProduct *p, int r0, int t0, int tokens, const __m512 *acc) {
    __mmask16 live = first_lanes(p->rows - r0);
    __m512 bv = p->bias ? _mm512_maskz_loadu_ps(live, p->bias + r0) : _mm512_setzero_ps();
    for (int t = 0; t < tokens && t0 + t < p->T; t++)
        _mm512_mask_storeu_ps(p->out + (size_t)(t0 + t) * p->rows + r0, live, _mm512_add_ps(acc[t], bv));
}
#endif

/* 4-byte products of unsigned bytes u with signed bytes x, added to 8 rows' sums (the block
 * formats' 256-bit kernels): AVX-VNNI's dpbusd into int32; with AVX2 alone maddubs into int16
 * pairs (a caller keeps each pair's sum below 2^15), widened to int32 by dot4_sums_256 once. */
static inline __m256i dot4_256(__m256i acc, __m256i u, __m256i x) {
#if defined(__AVXVNNI__)
    return _mm256_dpbusd_avx_epi32(acc, u, x);
#else
    return _mm256_add_epi16(acc, _mm256_maddubs_epi16(u, x));
#endif
}
static inline __m256i dot4_sums_256(__m256i acc) {
#if defined(__AVXVNNI__)
    return acc;
#else
    return _mm256_madd_epi16(acc, _mm256_set1_epi16(1));
#endif
}

/* The sums of rows r0..r0+15 for tokens t0..t0+tokens-1, rows 0-7 in lo[t] and 8-15 in hi[t],
 * plus the bias, into the output; rows past the bottom of W are not stored. */
static inline void store_rows16(const QuantProduct *p, int r0, int t0, int tokens, const __m256 *lo, const __m256 *hi) {
    __m256i live_lo = first_lanes8(p->rows - r0), live_hi = first_lanes8(p->rows - r0 - 8);
    __m256 blo = p->bias ? _mm256_maskload_ps(p->bias + r0, live_lo) : _mm256_setzero_ps(),
           bhi = p->bias ? _mm256_maskload_ps(p->bias + r0 + 8, live_hi) : _mm256_setzero_ps();
    for (int t = 0; t < tokens; t++) {
        float *o = p->out + (size_t)(t0 + t) * p->rows + r0;
        _mm256_maskstore_ps(o, live_lo, _mm256_add_ps(lo[t], blo));
        _mm256_maskstore_ps(o + 8, live_hi, _mm256_add_ps(hi[t], bhi));
    }
}

#endif

#endif
