/* kernels_q4.h: every kernel for weights stored as q4_0 (model.h: 4-bit quants -8..7 with one
 * float32 scale per Q8_GROUP values along a row, two quants to a byte). Included by kernels.h,
 * whose matmul() calls q4_matmul() and whose prepare_weights() calls q4_packed_bytes() and
 * q4_pack().
 *
 * The activations are quantized exactly as for q8_0 (quantize_rows in kernels_q8.h: per
 * token, one scale per group of 32, int8 quants), every group's dot product is an exact
 * integer, and the groups are summed as kernels.h defines (an fma chain over the groups of
 * dot_g * (weight scale_g * activation scale_g)): the same arithmetic as q8_0, so every path
 * gives the same bits.
 *   x86 (AVX2 and up): the weights are rearranged once at load (q4_pack) into blocks of 16 rows,
 *     one row per 32-bit lane, the 4-bit values kept as unsigned nibbles (quant + 8). A
 *     multiply of unsigned by signed bytes (AVX-VNNI / AVX512-VNNI dpbusd, or maddubs, whose
 *     pairs stay below 2 x 15 x 127 and cannot saturate) gives sum (quant + 8) x; the group's
 *     8 x sum(x) is taken off. Decode and prefill (4 tokens per load of weights) share the
 *     kernel (q4_rows16).
 *   NEON (with sdot where the CPU has it) and portable C: row by row from the file's layout.
 */
#ifndef KERNELS_Q4_H
#define KERNELS_Q4_H

/* Quant k (0..31) of a group's 16 bytes. */
static inline int q4_quant(const uint8_t *group, int k) {
    return (k < 16 ? group[k] & 15 : group[k - 16] >> 4) - 8;
}

/* The exact integer dot product of one group: 16 bytes of 4-bit quants, 32 activation quants. */
static inline int32_t group_dot_q4(const uint8_t *w, const int8_t *x) {
#if defined(__ARM_NEON)
    uint8x16_t v = vld1q_u8(w);
    int8x16_t lo = vsubq_s8(vreinterpretq_s8_u8(vandq_u8(v, vdupq_n_u8(15))), vdupq_n_s8(8));
    int8x16_t hi = vsubq_s8(vreinterpretq_s8_u8(vshrq_n_u8(v, 4)), vdupq_n_s8(8));
    int8x16_t x0 = vld1q_s8(x), x1 = vld1q_s8(x + 16);
#if defined(__ARM_FEATURE_DOTPROD)
    return vaddvq_s32(vdotq_s32(vdotq_s32(vdupq_n_s32(0), lo, x0), hi, x1));
#else
    /* products at most 8 x 127: pairs of them fit int16 */
    int16x8_t p0 = vmlal_s8(vmull_s8(vget_low_s8(lo), vget_low_s8(x0)), vget_high_s8(lo), vget_high_s8(x0));
    int16x8_t p1 = vmlal_s8(vmull_s8(vget_low_s8(hi), vget_low_s8(x1)), vget_high_s8(hi), vget_high_s8(x1));
    return vaddvq_s32(vpadalq_s16(vpaddlq_s16(p0), p1));
#endif
#else
    int32_t dot = 0;
    for (int i = 0; i < 16; i++) dot += ((w[i] & 15) - 8) * x[i] + ((w[i] >> 4) - 8) * x[i + 16];
    return dot;
#endif
}

/* One row: an fma chain over the groups of dot_g * (weight scale_g * activation scale_g). */
static inline float dot_q4(const uint8_t *wq, const float *ws, const int8_t *xq, const float *xs, int n) {
    float acc = 0.0f;
    for (int b = 0; b < n / Q8_GROUP; b++)
        acc = fmaf((float)group_dot_q4(wq + b * (Q8_GROUP / 2), xq + b * Q8_GROUP), ws[b] * xs[b], acc);
    return acc;
}

/* ---- x86: weights rearranged at load ------------------------------------------------------ */

#if defined(__AVX2__) && defined(__FMA__)
#define Q4_PACKED 1
#if defined(__AVXVNNI__)
#define Q4_KERNEL "avx-vnni, 16 rows x 4 tokens"
#elif defined(__AVX512VNNI__) && defined(__AVX512VL__)
#define Q4_KERNEL "avx512-vnni (256-bit), 16 rows x 4 tokens"
#else
#define Q4_KERNEL "avx2-maddubs, 16 rows x 4 tokens"
#endif
#elif defined(__ARM_NEON) && defined(__ARM_FEATURE_DOTPROD)
#define Q4_KERNEL "neon-sdot, row by row"
#elif defined(__ARM_NEON)
#define Q4_KERNEL "neon, row by row"
#else
#define Q4_KERNEL "scalar, row by row"
#endif

/* A block of 16 rows, one group of 32 columns: Q4_PACK_BYTES bytes, 4 lines of 64 where bytes
 * 4r..4r+3 of line k hold, for row r, quants 4k..4k+3 + 8 in their low 4 bits and quants
 * 16+4k..16+4k+3 + 8 in their high 4 bits. */
#define Q4_PACK_BYTES (PACK_ROWS * Q8_GROUP / 2)

/* The copy of W (rows, n): rows rounded up to whole blocks of 16 (zero quants and scales past
 * the end), quants (rows16 / 16, nb, 256 bytes) then scales (rows16 / 16, nb, 16). */
static size_t q4_packed_bytes(const Matrix *m) {
#ifdef Q4_PACKED
    size_t rows16 = ((size_t)m->rows + PACK_ROWS - 1) / PACK_ROWS * PACK_ROWS, groups = rows16 * (size_t)m->cols / Q8_GROUP;
    return groups * (Q8_GROUP / 2 + sizeof(float));
#else
    (void)m;
    return 0;
#endif
}

static const float *q4_packed_scales(const Matrix *m) {
    size_t rows16 = ((size_t)m->rows + PACK_ROWS - 1) / PACK_ROWS * PACK_ROWS;
    return (const float *)(const void *)(m->packed + rows16 * (size_t)m->cols / 2);
}

static void q4_pack(Matrix *m, int8_t *dst) {
    int n = m->cols, nb = n / Q8_GROUP;
    m->packed = dst;
    float *scales = (float *)q4_packed_scales(m);
    long block;
#pragma omp parallel for schedule(static)
    for (block = 0; block < (m->rows + PACK_ROWS - 1) / PACK_ROWS; block++)
        for (int b = 0; b < nb; b++) {
            uint8_t *lines = (uint8_t *)dst + ((size_t)block * nb + b) * Q4_PACK_BYTES;
            for (int r = 0; r < PACK_ROWS; r++) {
                size_t row = (size_t)block * PACK_ROWS + r;
                int real = row < (size_t)m->rows;
                const uint8_t *group = m->q4 + (row * n + (size_t)b * Q8_GROUP) / 2;
                for (int k = 0; k < 4; k++)
                    for (int i = 0; i < 4; i++)
                        lines[k * 64 + r * 4 + i] = real ? (uint8_t)((q4_quant(group, 4 * k + i) + 8) |
                                                                     ((q4_quant(group, 16 + 4 * k + i) + 8) << 4))
                                                         : 0x88; /* quant 0 */
                scales[((size_t)block * nb + b) * PACK_ROWS + r] = real ? m->scale[row * nb + b] : 0.0f;
            }
        }
}

#ifdef Q4_PACKED
/* A group's sums of (quant + 8) x activation for 8 rows, one row per 32-bit lane, built from
 * pairs of lines: q4_add(acc, a, xa, b, xb) adds the 4-byte products of unsigned bytes a (0..15)
 * with signed bytes xa, and of b with xb. With VNNI, dpbusd adds them straight into int32. With
 * AVX2 alone, maddubs gives int16 pairs of at most 2 x 15 x 127 = 3810 in magnitude: the 8
 * pairs of a group's 4 line pairs sum to at most 30480, which int16 holds, so they are widened
 * to int32 (madd) once per group, not once per line. */
#if defined(__AVXVNNI__) || (defined(__AVX512VNNI__) && defined(__AVX512VL__))
#if defined(__AVXVNNI__)
#define DPBUSD _mm256_dpbusd_avx_epi32
#else
#define DPBUSD _mm256_dpbusd_epi32
#endif
static inline __m256i q4_add(__m256i acc, __m256i a, __m256i xa, __m256i b, __m256i xb) {
    return DPBUSD(DPBUSD(acc, a, xa), b, xb);
}
static inline __m256i q4_sums(__m256i acc) { return acc; }
#else
static inline __m256i q4_add(__m256i acc, __m256i a, __m256i xa, __m256i b, __m256i xb) {
    return _mm256_add_epi16(acc, _mm256_add_epi16(_mm256_maddubs_epi16(a, xa), _mm256_maddubs_epi16(b, xb)));
}
static inline __m256i q4_sums(__m256i acc) { return _mm256_madd_epi16(acc, _mm256_set1_epi16(1)); }
#endif

/* Rows 16 * block .. + 15 for tokens t0..t0+tokens-1 (tokens <= 4): rows 0..7 and 8..15 in two
 * registers, the tokens sharing each load of weights. xsum (T, nb): each group's sum of the
 * activation quants, for taking off 8 x sum(x). One token (decode) also asks for the lines of
 * the group 3 ahead (768 bytes) before it uses this group's, as kernels_q8.h's rows16_avx2 does
 * for its next 512-byte group: on AMD Zen 2 (GPT-2 medium q4_0, 1 thread) 69.6 tok/s with 1 group
 * ahead, 74.9 with 3, 73.9 with 4, 64.7 with 8 (alternating runs, median of 5). */
static void q4_rows16(const Q8Product *p, const int32_t *xsum, const float *ws_all, int block, int t0, int tokens) {
    int nb = p->nb, n = nb * Q8_GROUP, r0 = PACK_ROWS * block;
    const uint8_t *wt = (const uint8_t *)p->w.quants + (size_t)block * nb * Q4_PACK_BYTES;
    const float *ws = ws_all + (size_t)block * nb * PACK_ROWS;
    const __m256i low4 = _mm256_set1_epi8(15);
    __m256 lo[4], hi[4];
    for (int t = 0; t < 4; t++) lo[t] = hi[t] = _mm256_setzero_ps();
    for (int b = 0; b < nb; b++) {
        const uint8_t *group = wt + (size_t)b * Q4_PACK_BYTES;
        if (tokens == 1)
            for (int k = 0; k < 4; k++) _mm_prefetch((const char *)(group + 3 * Q4_PACK_BYTES + 64 * k), _MM_HINT_T0);
        __m256i dlo[4], dhi[4];
        for (int t = 0; t < 4; t++) dlo[t] = dhi[t] = _mm256_setzero_si256();
        for (int k = 0; k < 4; k++) {
            __m256i vlo = _mm256_loadu_si256((const __m256i *)(group + 64 * k)),
                    vhi = _mm256_loadu_si256((const __m256i *)(group + 64 * k + 32));
            /* quants 4k.. (low nibbles) and 16+4k.. (high nibbles) of rows 0-7 and 8-15 */
            __m256i a_lo = _mm256_and_si256(vlo, low4), b_lo = _mm256_and_si256(_mm256_srli_epi16(vlo, 4), low4);
            __m256i a_hi = _mm256_and_si256(vhi, low4), b_hi = _mm256_and_si256(_mm256_srli_epi16(vhi, 4), low4);
            for (int t = 0; t < tokens; t++) {
                const int8_t *x = p->xq + (size_t)(t0 + t) * n + b * Q8_GROUP;
                int32_t first, second;
                memcpy(&first, x + 4 * k, 4);
                memcpy(&second, x + 16 + 4 * k, 4);
                __m256i xa = _mm256_set1_epi32(first), xb = _mm256_set1_epi32(second);
                dlo[t] = q4_add(dlo[t], a_lo, xa, b_lo, xb);
                dhi[t] = q4_add(dhi[t], a_hi, xa, b_hi, xb);
            }
        }
        __m256 slo = _mm256_loadu_ps(ws + b * PACK_ROWS), shi = _mm256_loadu_ps(ws + b * PACK_ROWS + 8);
        for (int t = 0; t < tokens; t++) {
            __m256i offset = _mm256_set1_epi32(8 * xsum[(size_t)(t0 + t) * nb + b]);
            __m256 sx = _mm256_set1_ps(p->xs[(size_t)(t0 + t) * nb + b]);
            lo[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_sub_epi32(q4_sums(dlo[t]), offset)), _mm256_mul_ps(slo, sx), lo[t]);
            hi[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_sub_epi32(q4_sums(dhi[t]), offset)), _mm256_mul_ps(shi, sx), hi[t]);
        }
    }
    store_rows16(p, r0, t0, tokens, lo, hi);
}
#endif

/* ---- the entry point ---------------------------------------------------------------------- */

/* q4_0 W: activations quantized as for q8_0; then from the rearranged copy (x86: decode with
 * the rows split between threads in blocks of 16, prefill a block at a time for every token
 * while it sits in cache), else row by row (blocks of 4 rows, each for every token). */
static void q4_matmul(float *out, const float *x, const Matrix *w, const float *bias, int T,
                      MatmulScratch *scratch) {
    int n = w->cols, nb = n / Q8_GROUP, d = w->rows;
    quantize_rows(scratch->q, scratch->scale, x, T, n, 0);
    const int8_t *xq = scratch->q;
    const float *xs = scratch->scale;
#ifdef Q4_PACKED
    int32_t *xsum = scratch->sum;
    for (long g = 0; g < (long)T * nb; g++) {
        int32_t sum = 0;
        for (int k = 0; k < Q8_GROUP; k++) sum += xq[g * Q8_GROUP + k];
        xsum[g] = sum;
    }
    Q8Product p = {out, bias, T, d, nb, xq, xs, {w->packed, NULL, NULL}};
    const float *ws = q4_packed_scales(w);
    int blocks = (d + PACK_ROWS - 1) / PACK_ROWS, block;
#pragma omp parallel for schedule(static) if (T == 1)
    for (block = 0; block < (T == 1 ? blocks : 0); block++) q4_rows16(&p, xsum, ws, block, 0, 1);
#pragma omp parallel for schedule(dynamic, 1) if (T > 1)
    for (block = 0; block < (T > 1 ? blocks : 0); block++)
        for (int t0 = 0; t0 < T; t0 += 4) q4_rows16(&p, xsum, ws, block, t0, min_int(4, T - t0));
#else
    int i;
#pragma omp parallel for schedule(dynamic, 4)
    for (i = 0; i < (d + 3) / 4; i++)
        for (int t = 0; t < T; t++)
            for (int r = 4 * i; r < min_int(4 * i + 4, d); r++)
                out[(size_t)t * d + r] = dot_q4(w->q4 + (size_t)r * n / 2, w->scale + (size_t)r * nb,
                                                xq + (size_t)t * n, xs + (size_t)t * nb, n) +
                                         (bias ? bias[r] : 0.0f);
#endif
}

#endif
