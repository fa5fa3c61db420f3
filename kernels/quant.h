/* kernels/quant.h: what the quantized weight formats (kernels/q8_0.h, q4_0.h) share.
 *
 *   the group: QUANT_GROUP values along a row share one float32 scale (model.h);
 *   the activation quantizer: every product quantizes its input the same way on every path,
 *     per token, one int8 scale per group (quantize_q8), so that each group's dot product is
 *     an exact integer, and the groups are summed as kernels/simd.h defines;
 *   the packing geometry: on x86 the weights are rearranged once at load into panels of
 *     PANEL_ROWS rows, one row per 32-bit lane, so that one register holds 16 (or 8) rows'
 *     sums and no row needs a horizontal sum;
 *   the loops around the kernels: row by row from the file's layout (NEON, portable C), or
 *     panel by panel from the rearranged copy, with their split between threads.
 */
#ifndef KERNELS_QUANT_H
#define KERNELS_QUANT_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../model.h"
#include "matrix.h"
#include "parallel.h"
#include "simd.h"

/* Most kernels hold one group of quants in one 256-bit register, or two in a 512-bit one. */
_Static_assert(QUANT_GROUP == 32, "the quantized kernels assume groups of 32 values");

/* ---- activations ------------------------------------------------------------------------ */

/* Quantize n values (n a multiple of QUANT_GROUP) to int8 with one scale per group: scale =
 * max|x| / 127, so quants stay in [-127, 127]; an all-zero group gets scale 0 and zero quants.
 * export.py quantizes q8_0 weights the same way, and the tests' reference quantizes
 * activations so (and the q8_0 key/value cache its groups of up to 32, kv_cache.h).
 * A group of n values, in portable C: */
static inline void quantize_values(int8_t *q, float *scale, const float *x, int n) {
    float amax = 0.0f;
    for (int i = 0; i < n; i++) amax = fabsf(x[i]) > amax ? fabsf(x[i]) : amax; /* NaN: passed over */
    float inv = amax > 0.0f ? 127.0f / amax : 0.0f;
    *scale = amax / 127.0f;
    /* rintf rounds half to even, like numpy's rint; it inlines (no errno). A finite x gives
     * |x * inv| at most a rounding above 127, which rounds to 127 anyway; NaN (from a file
     * with NaN or infinite weights) becomes 0: no float-to-int conversion out of range. */
    for (int i = 0; i < n; i++) {
        float v = x[i] * inv;
        v = v > 127.0f ? 127.0f : v < -127.0f ? -127.0f : v == v ? v : 0.0f;
        q[i] = (int8_t)rintf(v);
    }
}
static inline void quantize_group(int8_t *q, float *scale, const float *x) { quantize_values(q, scale, x, QUANT_GROUP); }

/* The same operations eight (x86) or four (ARM) values to a vector, each step exactly the
 * portable one: the maximum of |x| is the same number in any order (a NaN never wins: x86's
 * max returns its second operand, the running maximum, when the first is NaN; ARM's maxnm
 * returns the number), NaN becomes 0, and the conversion to integers rounds to nearest even as
 * rintf does (the default rounding mode, which this program never changes).
 * The decode step quantizes every product's input on one thread, so this is on its critical
 * path (a loop over one group's values was 5% of a cache-resident q4_0 model's decode). */
#if defined(__AVX2__)
static inline void quantize_group_vector(int8_t *q, float *scale, const float *x) {
    __m256 v[4], amax = _mm256_setzero_ps();
    for (int k = 0; k < 4; k++) {
        v[k] = _mm256_loadu_ps(x + 8 * k);
        amax = _mm256_max_ps(_mm256_andnot_ps(_mm256_set1_ps(-0.0f), v[k]), amax);
    }
    __m128 m = _mm_max_ps(_mm256_castps256_ps128(amax), _mm256_extractf128_ps(amax, 1));
    m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    float a = _mm_cvtss_f32(_mm_max_ss(m, _mm_movehdup_ps(m)));
    __m256 inv = _mm256_set1_ps(a > 0.0f ? 127.0f / a : 0.0f);
    *scale = a / 127.0f;
    __m256i i[4];
    for (int k = 0; k < 4; k++) {
        __m256 y = _mm256_mul_ps(v[k], inv);
        y = _mm256_and_ps(y, _mm256_cmp_ps(y, y, _CMP_ORD_Q)); /* NaN -> 0 */
        y = _mm256_min_ps(_mm256_max_ps(y, _mm256_set1_ps(-127.0f)), _mm256_set1_ps(127.0f));
        i[k] = _mm256_cvtps_epi32(y);
    }
    /* 4 x 8 int32 -> 32 int8: the packs work within 128-bit halves, leaving runs of four in
     * the order 0, 2, 4, 6, 1, 3, 5, 7 of the wanted ones */
    __m256i bytes = _mm256_packs_epi16(_mm256_packs_epi32(i[0], i[1]), _mm256_packs_epi32(i[2], i[3]));
    _mm256_storeu_si256((__m256i *)q, _mm256_permutevar8x32_epi32(bytes, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7)));
}
#define HAVE_QUANTIZE_GROUP_VECTOR 1
#elif defined(__ARM_NEON) && defined(__aarch64__)
static inline void quantize_group_vector(int8_t *q, float *scale, const float *x) {
    float32x4_t v[8], amax = vdupq_n_f32(0.0f);
    for (int k = 0; k < 8; k++) {
        v[k] = vld1q_f32(x + 4 * k);
        amax = vmaxnmq_f32(amax, vabsq_f32(v[k]));
    }
    float a = vmaxnmvq_f32(amax);
    float32x4_t inv = vdupq_n_f32(a > 0.0f ? 127.0f / a : 0.0f);
    *scale = a / 127.0f;
    int16x8_t halves[4];
    for (int k = 0; k < 8; k += 2) {
        int32x4_t i2[2];
        for (int u = 0; u < 2; u++) {
            float32x4_t y = vmulq_f32(v[k + u], inv);
            /* a NaN passes the clamp (NEON's min and max return it) and converts to 0 */
            y = vminq_f32(vmaxq_f32(y, vdupq_n_f32(-127.0f)), vdupq_n_f32(127.0f));
            i2[u] = vcvtnq_s32_f32(y);
        }
        halves[k / 2] = vcombine_s16(vqmovn_s32(i2[0]), vqmovn_s32(i2[1]));
    }
    vst1q_s8(q, vcombine_s8(vqmovn_s16(halves[0]), vqmovn_s16(halves[1])));
    vst1q_s8(q + 16, vcombine_s8(vqmovn_s16(halves[2]), vqmovn_s16(halves[3])));
}
#define HAVE_QUANTIZE_GROUP_VECTOR 1
#endif

/* One group of n <= QUANT_GROUP values (the q8_0 key/value cache's groups: the last of a head
 * may be shorter), by the vector code when the group is whole: the same bits either way. */
static inline void quantize_short_group(int8_t *q, float *scale, const float *x, int n) {
#ifdef HAVE_QUANTIZE_GROUP_VECTOR
    if (n == QUANT_GROUP) {
        quantize_group_vector(q, scale, x);
        return;
    }
#endif
    quantize_values(q, scale, x, n);
}

static inline void quantize_q8(int8_t *q, float *scale, const float *x, int n) {
    for (int b = 0; b < n / QUANT_GROUP; b++)
#ifdef HAVE_QUANTIZE_GROUP_VECTOR
        quantize_group_vector(q + b * QUANT_GROUP, scale + b, x + b * QUANT_GROUP);
#else
        quantize_group(q + b * QUANT_GROUP, scale + b, x + b * QUANT_GROUP);
#endif
}

/* Activations of T tokens quantized row by row: q (T, n), scales (T, n / QUANT_GROUP); with
 * sums, each group's sum of its quants too, (T, n / QUANT_GROUP), for kernels that multiply
 * weights offset by a constant (q4_0's quant + 8, q8_0's + 128 for AVX512-VNNI) and take the
 * constant's share off again. */
static void quantize_rows(int8_t *q, float *scale, int32_t *sums, const float *x, int T, int n) {
    int t, nb = n / QUANT_GROUP;
    SPLIT_FOR(T > 1, schedule(static), (t = 0; t < T; t++), {
        int8_t *row = q + (size_t)t * n;
        quantize_q8(row, scale + (size_t)t * nb, x + (size_t)t * n, n);
        for (int b = 0; sums && b < nb; b++) {
            int32_t sum = 0;
            for (int k = 0; k < QUANT_GROUP; k++) sum += row[b * QUANT_GROUP + k];
            sums[(size_t)t * nb + b] = sum;
        }
    });
}

/* Buffers for up to T tokens of n inputs: quants with room for AMX's whole tiles of 16 tokens,
 * one scale and one sum per group. */
static int quant_scratch_init(MatmulScratch *s, size_t T, size_t n) {
    size_t T16 = (T + 15) / 16 * 16, groups = T16 * n / QUANT_GROUP + 1;
    s->q = malloc(T16 * n);
    s->scale = malloc(groups * sizeof(float));
    s->sum = malloc(groups * sizeof(int32_t));
    if (!s->q || !s->scale || !s->sum) return 0;
    memset(s->q, 0, T16 * n); /* map the pages now, not inside the first timed forward pass */
    memset(s->scale, 0, groups * sizeof(float));
    memset(s->sum, 0, groups * sizeof(int32_t));
    return 1;
}

/* ---- row by row, from the file's layout (NEON, portable C) ------------------------------- */

/* One row: an fma chain over the groups of dot_g * (weight scale_g * activation scale_g), where
 * group_dot(w, b, x) is the exact integer dot product of group b of the row's quants w with 32
 * activation quants x. Inlined, so that group_dot is a direct call. */
static inline __attribute__((always_inline)) float quant_row_dot(const void *w, const float *ws, const int8_t *xq,
                                                                 const float *xs, int n,
                                                                 int32_t (*group_dot)(const void *w, int b, const int8_t *x)) {
    float acc = 0.0f;
    for (int b = 0; b < n / QUANT_GROUP; b++)
        acc = fmaf((float)group_dot(w, b, xq + b * QUANT_GROUP), ws[b] * xs[b], acc);
    return acc;
}

/* The product row by row (the activations already quantized into scratch): rows split between
 * threads in blocks of 4, each used for every token while it sits in cache. row_dot(w, r, xq,
 * xs) is row r's dot product with one token's quantized activations. Inlined into each format's
 * caller, so that row_dot is a direct call. */
static inline __attribute__((always_inline)) void quant_matmul_rows(
    float *out, const Matrix *w, const float *bias, int T, const MatmulScratch *scratch,
    float (*row_dot)(const Matrix *w, int r, const int8_t *xq, const float *xs)) {
    int n = w->cols, nb = n / QUANT_GROUP, d = w->rows, i;
    SPLIT_FOR(1, schedule(dynamic, 4), (i = 0; i < (d + 3) / 4; i++), {
        for (int t = 0; t < T; t++)
            for (int r = 4 * i; r < min_int(4 * i + 4, d); r++)
                out[(size_t)t * d + r] = row_dot(w, r, scratch->q + (size_t)t * n, scratch->scale + (size_t)t * nb) +
                                         (bias ? bias[r] : 0.0f);
    });
}

/* ---- panel by panel, from the copy rearranged at load (x86) ------------------------------ */

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

#if defined(__AVX2__)
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
