/* kernels/x86/attention.h: attention kernels on x86 (kernels/attention.h is the portable
 * definition): a q8_0 query's integer dot products with 16 keys at a time (AVX512-VNNI or
 * AVX-VNNI dpbusd, AVX2 maddubs), and with AVX-512 a prompt's queries 16 at a time, one per lane
 * of a register. Both compute kernels/simd.h's arithmetic exactly. */
#ifndef KERNELS_X86_ATTENTION_H
#define KERNELS_X86_ATTENTION_H

#include "../arch.h"

#if defined(KERNELS_X86)
#include <immintrin.h>
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "../heads.h"
#include "../simd.h"

#if !defined(__AVX512VNNI__)
/* acc plus, in each 32-bit lane, the dot product of the key's four quants there with the four
 * in query's lane. AVX-VNNI's dpbusd multiplies unsigned bytes by signed ones: the key goes in
 * as quant + 128 (its top bit flipped), and key_dots takes 128 x the query's sum off again.
 * AVX2's maddubs multiplies unsigned by signed bytes into pairs summed as int16: |key| by the
 * query quant carrying the key's sign, at most 2 x 127 x 127 a pair, which fits. */
static inline __m256i quad_dots8(__m256i acc, __m256i key, __m256i query) {
#if defined(__AVXVNNI__)
    return _mm256_dpbusd_avx_epi32(acc, _mm256_xor_si256(key, _mm256_set1_epi8((char)0x80)), query);
#else
    __m256i pairs = _mm256_maddubs_epi16(_mm256_abs_epi8(key), _mm256_sign_epi8(query, key));
    return _mm256_add_epi32(acc, _mm256_madd_epi16(pairs, _mm256_set1_epi16(1)));
#endif
}
#endif


/* The dot products of one group's query quants q (quads of four, from the group's first
 * dimension) with the same dimensions of the keys of nb blocks (nb <= 4) of KEY_BLOCK
 * positions: keys points at the group's first quad in the first block, the others block_bytes
 * apart; dots[b * 16 + i] = the sum over the group's dimensions of key quant x query quant for
 * position i of block b, an exact integer on every path (at most 32 x 127 x 127 in size). qsum:
 * the sum of the group's query quants (VNNI multiplies unsigned bytes by signed ones: the keys
 * go in as quant + 128, and 128 x qsum comes off again). */
static inline __attribute__((always_inline)) void key_dots(const int8_t *keys, size_t block_bytes, int nb,
                                                           const int8_t *q, int quads, int32_t qsum, int32_t *dots) {
#if defined(__AVX512VNNI__)
    __m512i acc[4] = {_mm512_setzero_si512(), _mm512_setzero_si512(), _mm512_setzero_si512(), _mm512_setzero_si512()};
    const __m512i to_unsigned = _mm512_set1_epi8((char)0x80); /* quant ^ 0x80 = quant + 128 as a byte */
    for (int c = 0; c < quads; c++) {
        int32_t four;
        memcpy(&four, q + 4 * c, sizeof four);
        __m512i query = _mm512_set1_epi32(four);
        for (int b = 0; b < nb; b++) {
            __m512i key = _mm512_loadu_si512(keys + b * block_bytes + (size_t)c * 64);
            acc[b] = _mm512_dpbusd_epi32(acc[b], _mm512_xor_si512(key, to_unsigned), query);
        }
    }
    for (int b = 0; b < nb; b++) _mm512_storeu_si512(dots + 16 * b, _mm512_sub_epi32(acc[b], _mm512_set1_epi32(128 * qsum)));
#else
    __m256i acc[8]; /* per block, positions 0-7 and 8-15 */
    for (int i = 0; i < 8; i++) acc[i] = _mm256_setzero_si256();
    for (int c = 0; c < quads; c++) {
        int32_t four;
        memcpy(&four, q + 4 * c, sizeof four);
        __m256i query = _mm256_set1_epi32(four);
        for (int b = 0; b < nb; b++)
            for (int h = 0; h < 2; h++) {
                __m256i key = _mm256_loadu_si256((const __m256i *)(keys + b * block_bytes + (size_t)c * 64 + 32 * h));
                acc[2 * b + h] = quad_dots8(acc[2 * b + h], key, query);
            }
    }
#if defined(__AVXVNNI__)
    __m256i offset = _mm256_set1_epi32(128 * qsum); /* quad_dots8's keys went in as quant + 128 */
#else
    __m256i offset = _mm256_setzero_si256();
    (void)qsum;
#endif
    for (int i = 0; i < 2 * nb; i++) _mm256_storeu_si256((__m256i *)(dots + 8 * i), _mm256_sub_epi32(acc[i], offset));
#endif
}

#if defined(__AVX512F__)
/* Four cached numbers from number i of a head's keys, as floats. */
static inline void keys4(const HeadAttention *b, size_t i, float *k) {
    if (b->cache == CACHE_F16)
        _mm_storeu_ps(k, _mm512_castps512_ps128(_mm512_cvtph_ps(
                             _mm256_castsi128_si256(_mm_loadl_epi64((const __m128i *)((const uint16_t *)b->keys + i))))));
    else
        memcpy(k, (const float *)b->keys + i, 4 * sizeof(float));
}

/* The same computation for queries q0..q0+15 of a tile (fewer at its end) with the queries in
 * the lanes of a register, so that scores need no horizontal sums (head_size a multiple of 16):
 *   qt (hs, 16): the queries transposed, times 1/sqrt(hs);
 *   att (n_keys, 16): for each key j, the 16 queries' scores, then their softmax weights; key j
 *   is masked (weight exactly 0, which adds exactly nothing) for the queries before position j.
 * Each lane performs the operations of kernels/attention.h's attention_one() in the same order. */
static void attention_tile16(const HeadAttention *b, int q0, float *scratch) {
    int hs = b->head_size, nq = min_int(16, b->nq - q0), p0 = b->pos + q0, n_keys = p0 + nq, j;
    int vs = b->value_stride;
    const float *queries = b->query + (size_t)q0 * b->query_stride;
    float *att = scratch, *qt = scratch + (size_t)16 * round_up16(n_keys);
    float scale = b->scale;
    for (int d = 0; d < hs; d++)
        for (int q = 0; q < 16; q++) qt[d * 16 + q] = q < nq ? queries[(size_t)q * b->query_stride + d] * scale : 0.0f;
    __mmask16 live = (__mmask16)((1u << nq) - 1);
#define VISIBLE(j) (__mmask16)((j) <= p0 ? live : live & ~((1u << ((j) - p0)) - 1))
    /* scores: 4 keys at a time share each load of qt */
    __m512 max = _mm512_set1_ps(-INFINITY);
    for (j = 0; j < n_keys; j += 4) {
        int keys_here = min_int(4, n_keys - j);
        __m512 s0 = _mm512_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;
        for (int d = 0; d < hs; d++) {
            __m512 qv = _mm512_loadu_ps(qt + d * 16);
            float k[4]; /* keys j..j+3: within one block */
            keys4(b, key_index(hs, j, d), k);
            s0 = _mm512_fmadd_ps(qv, _mm512_set1_ps(k[0]), s0);
            s1 = _mm512_fmadd_ps(qv, _mm512_set1_ps(k[1]), s1);
            s2 = _mm512_fmadd_ps(qv, _mm512_set1_ps(k[2]), s2);
            s3 = _mm512_fmadd_ps(qv, _mm512_set1_ps(k[3]), s3);
        }
        __m512 sc[4] = {s0, s1, s2, s3};
        for (int k = 0; k < keys_here; k++) {
            _mm512_storeu_ps(att + (size_t)(j + k) * 16, sc[k]);
            max = _mm512_mask_max_ps(max, VISIBLE(j + k), max, sc[k]);
        }
    }
    /* softmax over the keys, each query in its lane: exponentials, their sum as sum_of() adds
     * (partial j mod 16, then the tree; a masked key adds exactly 0) */
    __m512 partial[16], minus_max = _mm512_mul_ps(max, _mm512_set1_ps(-1.0f));
    for (j = 0; j < 16; j++) partial[j] = _mm512_setzero_ps();
    for (j = 0; j < n_keys; j++) {
        __m512 e = _mm512_maskz_mov_ps(VISIBLE(j), vf_exp(_mm512_add_ps(_mm512_loadu_ps(att + (size_t)j * 16), minus_max)));
        _mm512_storeu_ps(att + (size_t)j * 16, e);
        partial[j % 16] = _mm512_add_ps(partial[j % 16], e);
    }
    for (int half = 8; half >= 1; half /= 2)
        for (j = 0; j < half; j++) partial[j] = _mm512_add_ps(partial[j], partial[j + half]);
    __m512 sum = _mm512_mask_mov_ps(_mm512_set1_ps(1.0f), live, partial[0]);
    for (j = 0; j < n_keys; j++)
        _mm512_storeu_ps(att + (size_t)j * 16, _mm512_div_ps(_mm512_loadu_ps(att + (size_t)j * 16), sum));
#undef VISIBLE
    /* weighted sum of values: 4 queries x 16 dimensions of the head at a time, each query over
     * the keys up to the last query's position (the others' weights for later keys are 0) */
    for (int q4 = 0; q4 < nq; q4 += 4)
        for (int d = 0; d < hs; d += 16) {
            __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
            int last = p0 + min_int(q4 + 4, nq); /* keys 0..last-1 */
            for (j = 0; j < last; j++) {
                __m512 v = load_cached(b->values, (size_t)j * vs + d, b->cache);
                const float *w = att + (size_t)j * 16 + q4;
                a0 = _mm512_fmadd_ps(_mm512_set1_ps(w[0]), v, a0);
                a1 = _mm512_fmadd_ps(_mm512_set1_ps(w[1]), v, a1);
                a2 = _mm512_fmadd_ps(_mm512_set1_ps(w[2]), v, a2);
                a3 = _mm512_fmadd_ps(_mm512_set1_ps(w[3]), v, a3);
            }
            __m512 acc[4] = {a0, a1, a2, a3};
            for (int q = q4; q < q4 + 4 && q < nq; q++)
                _mm512_storeu_ps(b->out + (size_t)(q0 + q) * b->out_stride + d, acc[q - q4]);
        }
}
#endif
#endif

#endif
