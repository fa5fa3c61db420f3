/* kernels_q8.h: every int8 kernel, for weights stored as q8_0 (model.h: int8 quants with one
 * float32 scale per Q8_GROUP values along a row). Included by kernels.h, whose matmul() calls
 * q8_matmul() and whose prepare_weights() calls q8_packed_bytes() and q8_pack().
 *
 * The activations are quantized the same way on every path (per token, one scale per group:
 * quantize_q8), every group's dot product is an exact integer, and the groups are summed as
 * kernels.h defines (an fma chain over the groups in order), so every path gives the same bits.
 *   x86 (AVX-512, AVX2): the weights are rearranged once at load (q8_pack) into blocks of 16
 *     rows, one row per 32-bit lane, so a register holds 16 rows' sums and no row needs a
 *     horizontal sum. Decode (T = 1) reads them with AVX512-VNNI or 256-bit AVX-VNNI / AVX2
 *     maddubs kernels; prefill (T > 1) with AMX tile products (Intel Sapphire Rapids and later,
 *     where Linux grants the tiles), AVX512-VNNI (8 tokens per weight load) or the 256-bit
 *     kernels (4 tokens per load).
 *   NEON (with sdot where the CPU has it) and portable C: row by row from the file's layout.
 */
#ifndef KERNELS_Q8_H
#define KERNELS_Q8_H

#include <stdio.h>

/* Most kernels below hold one group of quants in one 256-bit register or two in a 512-bit one. */
_Static_assert(Q8_GROUP == 32, "the q8_0 kernels assume groups of 32 values");


/* Quantize n values (n a multiple of Q8_GROUP) to int8 with one scale per group: scale =
 * max|x| / 127, so quants stay in [-127, 127]; an all-zero group gets scale 0 and zero quants.
 * export.py quantizes weights the same way, and the tests' reference quantizes activations so. */
static inline void quantize_q8(int8_t *q, float *scale, const float *x, int n) {
    for (int b = 0; b < n / Q8_GROUP; b++) {
        const float *xb = x + b * Q8_GROUP;
        float amax = 0.0f;
        for (int i = 0; i < Q8_GROUP; i++) amax = fabsf(xb[i]) > amax ? fabsf(xb[i]) : amax;
        float d = amax / 127.0f, inv = amax > 0.0f ? 127.0f / amax : 0.0f;
        scale[b] = d;
        /* rintf rounds half to even, like numpy's rint; it inlines (no errno). A finite x gives
         * |x * inv| at most a rounding above 127, which rounds to 127 anyway; NaN (from a file
         * with NaN or infinite weights) becomes 0: no float-to-int conversion out of range. */
        for (int i = 0; i < Q8_GROUP; i++) {
            float v = xb[i] * inv;
            v = v > 127.0f ? 127.0f : v < -127.0f ? -127.0f : v == v ? v : 0.0f;
            q[b * Q8_GROUP + i] = (int8_t)rintf(v);
        }
    }
}

/* ---- row by row, from the file's layout (NEON, portable C) -------------------------------- */

/* The exact integer dot product of one group of 32 quants. */
static inline int32_t group_dot_q8(const int8_t *w, const int8_t *x) {
#if defined(__ARM_NEON) && defined(__ARM_FEATURE_DOTPROD)
    int32x4_t dots = vdotq_s32(vdupq_n_s32(0), vld1q_s8(w), vld1q_s8(x));
    return vaddvq_s32(vdotq_s32(dots, vld1q_s8(w + 16), vld1q_s8(x + 16)));
#elif defined(__ARM_NEON)
    /* without sdot (Cortex-A53/A72): int8 x int8 to int16 (two products per lane: at most
     * 2 x 127 x 127, which fits), then pairwise into int32 */
    int8x16_t w0 = vld1q_s8(w), w1 = vld1q_s8(w + 16), x0 = vld1q_s8(x), x1 = vld1q_s8(x + 16);
    int16x8_t p0 = vmlal_s8(vmull_s8(vget_low_s8(w0), vget_low_s8(x0)), vget_high_s8(w0), vget_high_s8(x0));
    int16x8_t p1 = vmlal_s8(vmull_s8(vget_low_s8(w1), vget_low_s8(x1)), vget_high_s8(w1), vget_high_s8(x1));
    return vaddvq_s32(vpadalq_s16(vpaddlq_s16(p0), p1));
#else
    int32_t dot = 0;
    for (int i = 0; i < Q8_GROUP; i++) dot += (int32_t)w[i] * x[i];
    return dot;
#endif
}

/* One row: an fma chain over the groups of dot_g * (weight scale_g * activation scale_g). */
static inline float dot_q8(const int8_t *wq, const float *ws, const int8_t *xq, const float *xs, int n) {
    float acc = 0.0f;
    for (int b = 0; b < n / Q8_GROUP; b++)
        acc = fmaf((float)group_dot_q8(wq + b * Q8_GROUP, xq + b * Q8_GROUP), ws[b] * xs[b], acc);
    return acc;
}

/* Activations of T tokens quantized row by row: q (T, n), scales (T, n / Q8_GROUP); with
 * shift_unsigned, the quants stored + 128 as unsigned bytes (for VNNI's dpbusd). */
static void quantize_rows(int8_t *q, float *scale, const float *x, int T, int n, int shift_unsigned) {
    int t;
#pragma omp parallel for schedule(static) if (T > 1)
    for (t = 0; t < T; t++) {
        int8_t *row = q + (size_t)t * n;
        quantize_q8(row, scale + (size_t)t * (n / Q8_GROUP), x + (size_t)t * n, n);
        for (int k = 0; shift_unsigned && k < n; k++) row[k] = (int8_t)(uint8_t)(row[k] + 128);
    }
}

/* ---- x86: weights rearranged at load ------------------------------------------------------ */

/* How a matrix's copy for prefill is laid out, which also decides the kernel that reads it. */
enum {
    Q8_PACK_NONE,   /* no copy: dot_q8 row by row */
    Q8_PACK_SIGNED, /* quants and scales, for AMX (signed x signed), AVX512-VNNI decode and the
                       256-bit kernels (|w| times x with w's sign) */
    Q8_PACK_VNNI,   /* plus 128 x each row's group sum, for AVX512-VNNI prefill, which
                       multiplies unsigned activations (shifted by +128) by signed weights */
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
#elif defined(__ARM_NEON) && defined(__ARM_FEATURE_DOTPROD)
#define Q8_DECODE "neon-sdot, row by row"
#define Q8_PREFILL "row by row per token"
#elif defined(__ARM_NEON)
#define Q8_DECODE "neon, row by row"
#define Q8_PREFILL "row by row per token"
#else
#define Q8_DECODE "scalar, row by row"
#define Q8_PREFILL "row by row per token"
#endif

/* The copy is made of blocks of PACK_ROWS rows (one per 32-bit lane of a 512-bit register, the
 * 16 rows of an AMX tile); one group of a block is PACK_BYTES bytes. */
#define PACK_ROWS 16
#define PACK_BYTES (PACK_ROWS * Q8_GROUP)

/* The copy's layout for this build on this CPU. */
static int q8_packing(void) {
    if (amx_available()) return Q8_PACK_SIGNED;
#if defined(VNNI512_KERNELS)
    return Q8_PACK_VNNI;
#elif defined(AVX2_KERNELS)
    return Q8_PACK_SIGNED;
#else
    return Q8_PACK_NONE;
#endif
}

static const char *q8_description(void) {
    static char text[128];
    snprintf(text, sizeof text, "%s (prefill %s)", Q8_DECODE, amx_available() ? "amx, 16 rows x 16 tokens" : Q8_PREFILL);
    return text;
}

/* The copy of W (rows, n): rows rounded up to whole blocks of 16 (zero rows past the end), per
 * block and group of 32 columns 8 lines of 64 bytes where bytes 4r..4r+3 of line j are
 * w[r][4j..4j+3] (AMX's B operand; for VNNI, line j holds 4 columns of all 16 rows, one row per
 * 32-bit lane): quants (rows16 / 16, nb, 512); then the rows' scales (rows16 / 16, nb, 16); then,
 * for Q8_PACK_VNNI, 128 x each row's group sum (rows16 / 16, nb, 16). */
static size_t q8_packed_bytes(const Matrix *m) {
    int packing = q8_packing();
    if (packing == Q8_PACK_NONE) return 0;
    size_t rows16 = ((size_t)m->rows + PACK_ROWS - 1) / PACK_ROWS * PACK_ROWS, groups = rows16 * (size_t)m->cols / Q8_GROUP;
    return groups * (Q8_GROUP + sizeof(float) + (packing == Q8_PACK_VNNI ? sizeof(int32_t) : 0));
}

typedef struct {
    const int8_t *quants;
    const float *scales;
    const int32_t *sums128; /* Q8_PACK_VNNI only */
} Q8Packed;

static Q8Packed q8_packed_parts(const Matrix *m) {
    size_t rows16 = ((size_t)m->rows + PACK_ROWS - 1) / PACK_ROWS * PACK_ROWS, groups = rows16 * (size_t)m->cols / Q8_GROUP;
    Q8Packed p = {m->packed, (const float *)(const void *)(m->packed + groups * Q8_GROUP), NULL};
    if (m->packing == Q8_PACK_VNNI) p.sums128 = (const int32_t *)(const void *)(p.scales + groups);
    return p;
}

static void q8_pack(Matrix *m, int8_t *dst) {
    int n = m->cols, nb = n / Q8_GROUP, packing = q8_packing();
    m->packed = dst;
    m->packing = packing;
    Q8Packed p = q8_packed_parts(m);
    long block;
#pragma omp parallel for schedule(static)
    for (block = 0; block < (m->rows + PACK_ROWS - 1) / PACK_ROWS; block++)
        for (int b = 0; b < nb; b++) {
            int8_t *lines = (int8_t *)p.quants + ((size_t)block * nb + b) * PACK_BYTES;
            for (int r = 0; r < PACK_ROWS; r++) {
                size_t row = (size_t)block * PACK_ROWS + r, at = ((size_t)block * nb + b) * PACK_ROWS + r;
                int real = row < (size_t)m->rows;
                const int8_t *src = m->q + row * n + b * Q8_GROUP;
                for (int j = 0; j < Q8_GROUP / 4; j++) {
                    if (real) memcpy(lines + j * 64 + r * 4, src + j * 4, 4);
                    else memset(lines + j * 64 + r * 4, 0, 4);
                }
                ((float *)p.scales)[at] = real ? m->scale[row * nb + b] : 0.0f;
                if (p.sums128) {
                    int32_t sum = 0;
                    for (int k = 0; real && k < Q8_GROUP; k++) sum += src[k];
                    ((int32_t *)p.sums128)[at] = 128 * sum;
                }
            }
        }
}

/* One product as the packed kernels see it: out (T, rows) = x @ W^T + bias. */
typedef struct {
    float *out;
    const float *bias;    /* (rows) or NULL */
    int T, rows, nb;      /* tokens, rows of W, groups of Q8_GROUP per row */
    const int8_t *xq;     /* the activations quantized, in the order the kernel reads */
    const float *xs;      /* their scales */
    Q8Packed w;
} Q8Product;

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

/* Rows PACK_ROWS * block .. + 15 for all T tokens. The activations' quants and scales come in AMX
 * order, (T / 16, nb, 16, 32) and (T / 16, nb, 16), zero past T. tdpbssd multiplies signed
 * bytes by signed bytes, four products to each int32. Groups go in pairs, software-pipelined:
 * the products of the next pair (in C tiles 2, 3 or 0, 1) are under way while the sums of this
 * pair are stored and scaled into acc, so the tile unit's latency is hidden. */
static void amx_rows16(const Q8Product *p, int block) {
    int nb = p->nb, pairs = nb / 2, r0 = PACK_ROWS * block;
    const int8_t *wt = p->w.quants + (size_t)block * nb * PACK_BYTES;
    const float *ws = p->w.scales + (size_t)block * nb * PACK_ROWS;
    __mmask16 live = first_lanes(p->rows - r0);
    __m512 bv = p->bias ? _mm512_maskz_loadu_ps(live, p->bias + r0) : _mm512_setzero_ps();
    int32_t sums[2][16][16] __attribute__((aligned(64)));
    for (int t0 = 0; t0 < p->T; t0 += 16) {
        const int8_t *a = p->xq + (size_t)(t0 / 16) * nb * PACK_BYTES;
        const float *as = p->xs + (size_t)(t0 / 16) * nb * 16;
        __m512 acc[16];
        for (int t = 0; t < 16; t++) acc[t] = _mm512_setzero_ps();
/* products of groups b and b + 1 into C tiles c0 and c1 */
#define ISSUE(c0, c1, b)                                               \
    do {                                                               \
        _tile_zero(c0);                                                \
        _tile_zero(c1);                                                \
        _tile_loadd(4, a + (size_t)(b) * PACK_BYTES, Q8_GROUP);                     \
        _tile_loadd(5, wt + (size_t)(b) * PACK_BYTES, 64);                    \
        _tile_dpbssd(c0, 4, 5);                                        \
        _tile_loadd(6, a + (size_t)((b) + 1) * PACK_BYTES, Q8_GROUP);               \
        _tile_loadd(7, wt + (size_t)((b) + 1) * PACK_BYTES, 64);              \
        _tile_dpbssd(c1, 6, 7);                                        \
    } while (0)
/* their sums, scaled, into acc */
#define DRAIN(c0, c1, b)                                               \
    do {                                                               \
        _tile_stored(c0, sums[0], 64);                                 \
        _tile_stored(c1, sums[1], 64);                                 \
        amx_scale_add(acc, sums[0], ws + (b) * PACK_ROWS, as + (b) * 16);     \
        amx_scale_add(acc, sums[1], ws + ((b) + 1) * PACK_ROWS, as + ((b) + 1) * 16); \
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
            _tile_loadd(4, a + (size_t)b * PACK_BYTES, Q8_GROUP);
            _tile_loadd(5, wt + (size_t)b * PACK_BYTES, 64);
            _tile_dpbssd(0, 4, 5);
            _tile_stored(0, sums[0], 64);
            amx_scale_add(acc, sums[0], ws + b * PACK_ROWS, as + b * 16);
        }
        for (int t = 0; t < 16 && t0 + t < p->T; t++)
            _mm512_mask_storeu_ps(p->out + (size_t)(t0 + t) * p->rows + r0, live, _mm512_add_ps(acc[t], bv));
    }
}
#endif

#if defined(__AVX512F__)
/* the first n of 16 lanes (all for n >= 16): masks for the rows of a block at the bottom of W */
static inline __mmask16 first_lanes(int n) { return n >= 16 ? 0xFFFF : (__mmask16)((1u << n) - 1); }
#endif

#ifdef VNNI512_KERNELS
/* Decode, rows 16 * block .. + 15: the 16 rows' int32 sums in the lanes of one register; per
 * line of the group, 4 activation bytes broadcast to every lane, given each weight's sign
 * (dpbusd multiplies unsigned by signed bytes: |w| times x with w's sign). */
static void decode_vnni512(const Q8Product *p, int block) {
    int nb = p->nb, r0 = PACK_ROWS * block;
    const int8_t *wt = p->w.quants + (size_t)block * nb * PACK_BYTES;
    const float *ws = p->w.scales + (size_t)block * nb * PACK_ROWS;
    __mmask16 live = first_lanes(p->rows - r0);
    __m512 acc = _mm512_setzero_ps();
    for (int b = 0; b < nb; b++) {
        __m512i dots = _mm512_setzero_si512();
        for (int j = 0; j < 8; j++) {
            __m512i w = _mm512_loadu_si512(wt + ((size_t)b * 8 + j) * 64);
            int32_t four;
            memcpy(&four, p->xq + b * Q8_GROUP + 4 * j, 4);
            __m512i x = _mm512_set1_epi32(four);
            __m512i signed_x = _mm512_mask_sub_epi8(x, _mm512_movepi8_mask(w), _mm512_setzero_si512(), x);
            dots = _mm512_dpbusd_epi32(dots, _mm512_abs_epi8(w), signed_x);
        }
        acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dots), _mm512_mul_ps(_mm512_loadu_ps(ws + b * PACK_ROWS),
                                                                       _mm512_set1_ps(p->xs[b])), acc);
    }
    __m512 bv = p->bias ? _mm512_maskz_loadu_ps(live, p->bias + r0) : _mm512_setzero_ps();
    _mm512_mask_storeu_ps(p->out + r0, live, _mm512_add_ps(acc, bv));
}

/* Prefill, rows 16 * block .. + 15 for all T tokens: as decode, 8 tokens at a time sharing each
 * load of weights; the activations come shifted by +128, (T, n), and 128 x the group's weight
 * sum is taken off again (sums128). */
static void prefill_vnni512(const Q8Product *p, int block) {
    int nb = p->nb, n = nb * Q8_GROUP, r0 = PACK_ROWS * block, T = p->T;
    const int8_t *wt = p->w.quants + (size_t)block * nb * PACK_BYTES;
    const float *ws = p->w.scales + (size_t)block * nb * PACK_ROWS;
    const int32_t *wc = p->w.sums128 + (size_t)block * nb * PACK_ROWS;
    __mmask16 live = first_lanes(p->rows - r0);
    __m512 bv = p->bias ? _mm512_maskz_loadu_ps(live, p->bias + r0) : _mm512_setzero_ps();
    for (int t0 = 0; t0 < T; t0 += 8) {
        const uint8_t *xrow[8]; /* past T, repeat the last token (its sums are not stored) */
        const float *xs[8];
        for (int t = 0; t < 8; t++) {
            int token = min_int(t0 + t, T - 1);
            xrow[t] = (const uint8_t *)p->xq + (size_t)token * n;
            xs[t] = p->xs + (size_t)token * nb;
        }
        __m512 acc[8];
        for (int t = 0; t < 8; t++) acc[t] = _mm512_setzero_ps();
        for (int b = 0; b < nb; b++) {
            __m512i start = _mm512_sub_epi32(_mm512_setzero_si512(), _mm512_loadu_si512(wc + b * PACK_ROWS));
            __m512i dots[8];
            for (int t = 0; t < 8; t++) dots[t] = start;
            for (int j = 0; j < 8; j++) {
                __m512i wv = _mm512_loadu_si512(wt + ((size_t)b * 8 + j) * 64);
                for (int t = 0; t < 8; t++) {
                    int32_t four;
                    memcpy(&four, xrow[t] + b * Q8_GROUP + 4 * j, 4);
                    dots[t] = _mm512_dpbusd_epi32(dots[t], _mm512_set1_epi32(four), wv);
                }
            }
            __m512 sw = _mm512_loadu_ps(ws + b * PACK_ROWS);
            for (int t = 0; t < 8; t++)
                acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dots[t]), _mm512_mul_ps(sw, _mm512_set1_ps(xs[t][b])), acc[t]);
        }
        for (int t = 0; t < 8 && t0 + t < T; t++)
            _mm512_mask_storeu_ps(p->out + (size_t)(t0 + t) * p->rows + r0, live, _mm512_add_ps(acc[t], bv));
    }
}
#endif

#if defined(__AVX2__)
/* the lanes of the first n of 8 rows, for masked loads and stores at the bottom of W */
static inline __m256i first_rows8(int n) {
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

/* The sums of rows r0..r0+15 for tokens t0..t0+tokens-1, rows 0-7 in lo[t] and 8-15 in hi[t],
 * plus the bias, into the output; rows past the bottom of W are not stored (also kernels_q4.h's). */
static inline void store_rows16(const Q8Product *p, int r0, int t0, int tokens, const __m256 *lo, const __m256 *hi) {
    __m256i live_lo = first_rows8(p->rows - r0), live_hi = first_rows8(p->rows - r0 - 8);
    __m256 blo = p->bias ? _mm256_maskload_ps(p->bias + r0, live_lo) : _mm256_setzero_ps(),
           bhi = p->bias ? _mm256_maskload_ps(p->bias + r0 + 8, live_hi) : _mm256_setzero_ps();
    for (int t = 0; t < tokens; t++) {
        float *o = p->out + (size_t)(t0 + t) * p->rows + r0;
        _mm256_maskstore_ps(o, live_lo, _mm256_add_ps(lo[t], blo));
        _mm256_maskstore_ps(o + 8, live_hi, _mm256_add_ps(hi[t], bhi));
    }
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


/* Rows 16 * block .. + 15 for tokens t0..t0+tokens-1 (tokens <= 4) with 256-bit registers:
 * rows 0..7 and 8..15 of the block in two registers, the tokens sharing each load of weights.
 * Decode is the case of one token; it asks for the next group's lines before using this
 * group's: on AMD Zen 2 (GPT-2 medium q8_0, 1 thread) that took the kernel from about 82% to
 * 91% of a plain read's speed, while 2 or more groups ahead was slower than none. The
 * activations (T, n) are signed. */
static void rows16_avx2(const Q8Product *p, int block, int t0, int tokens) {
    int nb = p->nb, n = nb * Q8_GROUP, r0 = PACK_ROWS * block;
    const int8_t *wt = p->w.quants + (size_t)block * nb * PACK_BYTES;
    const float *ws = p->w.scales + (size_t)block * nb * PACK_ROWS;
    __m256 lo[4], hi[4];
    for (int t = 0; t < 4; t++) lo[t] = hi[t] = _mm256_setzero_ps();
    for (int b = 0; b < nb; b++) {
        __m256i dlo[4], dhi[4];
        for (int t = 0; t < 4; t++) dlo[t] = dhi[t] = _mm256_setzero_si256();
        if (tokens == 1) /* decode: the next group's 8 lines asked for before this group's are used */
            for (int j = 0; j < 8; j++) _mm_prefetch((const char *)(wt + ((size_t)b + 1) * PACK_BYTES + 64 * j), _MM_HINT_T0);
        for (int j = 0; j < 8; j++) {
            const int8_t *line = wt + ((size_t)b * 8 + j) * 64;
            __m256i wlo = _mm256_loadu_si256((const __m256i *)line),
                    whi = _mm256_loadu_si256((const __m256i *)(line + 32));
            __m256i alo = _mm256_abs_epi8(wlo), ahi = _mm256_abs_epi8(whi);
            for (int t = 0; t < tokens; t++) {
                int32_t four;
                memcpy(&four, p->xq + (size_t)(t0 + t) * n + b * Q8_GROUP + 4 * j, 4);
                __m256i x = _mm256_set1_epi32(four);
                dlo[t] = add_dot4(dlo[t], alo, _mm256_sign_epi8(x, wlo));
                dhi[t] = add_dot4(dhi[t], ahi, _mm256_sign_epi8(x, whi));
            }
        }
        __m256 slo = _mm256_loadu_ps(ws + b * PACK_ROWS), shi = _mm256_loadu_ps(ws + b * PACK_ROWS + 8);
        for (int t = 0; t < tokens; t++) {
            __m256 sx = _mm256_set1_ps(p->xs[(size_t)(t0 + t) * nb + b]);
            lo[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dlo[t]), _mm256_mul_ps(slo, sx), lo[t]);
            hi[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dhi[t]), _mm256_mul_ps(shi, sx), hi[t]);
        }
    }
    store_rows16(p, r0, t0, tokens, lo, hi);
}
#endif

/* Every row of W from its rearranged copy: decode (T = 1) or prefill, with the kernel this build
 * and CPU use. The activations are quantized here as everywhere (per token, one scale per
 * group), in the order that kernel reads. */
static void q8_packed_matmul(float *out, const float *x, const Matrix *w, const float *bias, int T,
                             MatmulScratch *scratch) {
    int n = w->cols, nb = n / Q8_GROUP, blocks = (w->rows + PACK_ROWS - 1) / PACK_ROWS, block;
    Q8Product p = {out, bias, T, w->rows, nb, scratch->q, scratch->scale, q8_packed_parts(w)};
#ifdef AMX_PREFILL
    if (T > 1 && amx_available()) { /* activations in AMX order: (T / 16, nb, 16, 32) */
        int t;
#pragma omp parallel for schedule(static)
        for (t = 0; t < (T + 15) / 16 * 16; t++)
            for (int b = 0; b < nb; b++) {
                size_t at = ((size_t)(t / 16) * nb + b) * 16 + t % 16;
                if (t < T) quantize_q8(scratch->q + at * Q8_GROUP, scratch->scale + at, x + (size_t)t * n + b * Q8_GROUP, Q8_GROUP);
                else { memset(scratch->q + at * Q8_GROUP, 0, Q8_GROUP); scratch->scale[at] = 0.0f; }
            }
#pragma omp parallel
        {
            amx_configure();
#pragma omp for schedule(dynamic, 1)
            for (block = 0; block < blocks; block++) amx_rows16(&p, block);
            _tile_release();
        }
        return;
    }
#endif
    /* decode: rows split between threads in blocks of 16; prefill: a block at a time for every
     * token while it sits in cache */
    quantize_rows(scratch->q, scratch->scale, x, T, n, T > 1 && w->packing == Q8_PACK_VNNI);
#pragma omp parallel for schedule(static) if (T == 1)
    for (block = 0; block < (T == 1 ? blocks : 0); block++) {
#if defined(VNNI512_KERNELS)
        decode_vnni512(&p, block);
#elif defined(AVX2_KERNELS)
        rows16_avx2(&p, block, 0, 1);
#else
        (void)p; /* no packed kernel in this build: q8_packing() never packs */
#endif
    }
#pragma omp parallel for schedule(dynamic, 1) if (T > 1)
    for (block = 0; block < (T > 1 ? blocks : 0); block++) {
#if defined(VNNI512_KERNELS)
        prefill_vnni512(&p, block);
#elif defined(AVX2_KERNELS)
        for (int t0 = 0; t0 < T; t0 += 4) rows16_avx2(&p, block, t0, min_int(4, T - t0));
#endif
    }
}

/* ---- the entry point ---------------------------------------------------------------------- */

/* q8_0 W: from the rearranged copy where this build has one (x86), else row by row (dot_q8,
 * rows split between threads in blocks of 4, each block used for every token while it sits in
 * cache). */
static void q8_matmul(float *out, const float *x, const Matrix *w, const float *bias, int T,
                      MatmulScratch *scratch) {
    int n = w->cols, nb = n / Q8_GROUP, d = w->rows, i;
    if (w->packed) {
        q8_packed_matmul(out, x, w, bias, T, scratch);
        return;
    }
    const int8_t *xq = scratch->q;
    const float *xs = scratch->scale;
    quantize_rows(scratch->q, scratch->scale, x, T, n, 0);
#pragma omp parallel for schedule(dynamic, 4)
    for (i = 0; i < (d + 3) / 4; i++)
        for (int t = 0; t < T; t++)
            for (int r = 4 * i; r < min_int(4 * i + 4, d); r++)
                out[(size_t)t * d + r] = dot_q8(w->q + (size_t)r * n, w->scale + (size_t)r * nb,
                                                xq + (size_t)t * n, xs + (size_t)t * nb, n) +
                                         (bias ? bias[r] : 0.0f);
}

/* Scratch for up to T tokens of n inputs: room for tokens in AMX's whole tiles of 16; the
 * groups' sums of quants are for q4_0. */
static int q8_scratch_init(MatmulScratch *s, size_t T, size_t n) {
    size_t T16 = (T + 15) / 16 * 16, groups = T16 * n / Q8_GROUP + 1;
    s->q = malloc(T16 * n);
    s->scale = malloc(groups * sizeof(float));
    s->sum = malloc(groups * sizeof(int32_t));
    if (!s->q || !s->scale || !s->sum) return 0;
    memset(s->q, 0, T16 * n); /* map the pages now, not inside the first timed forward pass */
    memset(s->scale, 0, groups * sizeof(float));
    memset(s->sum, 0, groups * sizeof(int32_t));
    return 1;
}

#endif
