/* kernels/attention.h: causal attention of one head, for consecutive queries of one sequence
 * over that head's keys and values in the key/value cache, computed as kernels/simd.h defines
 * (scores, softmax, weighted sum of values). kv_cache.h lays the cache out and splits the work
 * of a layer's heads between threads. The cache holds binary16 numbers (kernels/f16.h) or
 * float32 (--cache f32); either way they are read as float32 (a half converts exactly), so the
 * arithmetic below is the same for both. With --cache q8_0 it holds int8 quants with a float32
 * scale per group of dimensions; the query is quantized the same way, so that its products with
 * the keys are integer dot products (q8_0_scores()), and the values are read as float32. */
#ifndef KERNELS_ATTENTION_H
#define KERNELS_ATTENTION_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "f16.h"
#include "ops.h"
#include "quant.h"
#include "simd.h"

/* The number format of the key/value cache: float32, IEEE binary16 (the default), or int8
 * quants with a scale per group (--cache). */
typedef enum { CACHE_F32 = 0, CACHE_F16 = 1, CACHE_Q8_0 = 2 } CacheType;

/* q8_0: a position's key (or value) of one head is quantized in groups of CACHE_GROUP
 * dimensions (the last one shorter when head_size is not a multiple of it) by quant.h's rule,
 * scale = max |x| / 127, quant = x * (127 / max |x|) rounded to nearest even; the number a
 * quant stands for is quant * scale. (llama.cpp's -ctk q8_0 groups by 32 too.) */
#define CACHE_GROUP 32
_Static_assert(CACHE_GROUP == QUANT_GROUP, "the cache's groups are quantized as activations are (quant.h)");
static inline int cache_groups(int head_size) { return (head_size + CACHE_GROUP - 1) / CACHE_GROUP; }

/* Causal attention of nq consecutive queries of one head, at positions pos..pos+nq-1: query i
 * weighs keys 0..pos+i by softmax(query . key / sqrt(head_size)) (later keys are masked: weight
 * exactly 0) and writes the weighted sum of their values. The cache layout lets a vector hold
 * VW keys at once: keys in blocks of KEY_BLOCK positions, each block transposed (key_index()),
 * values by position (position j's at values[j * value_stride], zero past head_size). */
typedef struct {
    const float *query;  /* nq queries of head_size floats, query_stride floats apart */
    int query_stride;
    const void *keys;    /* (n_ctx / KEY_BLOCK rounded up, head_size, KEY_BLOCK): this head's keys */
    const void *values;  /* (n_ctx, value_stride): this head's values */
    int prefix;          /* positions 0..prefix-1 are read from prefix_keys and prefix_values
                            instead (laid out alike): a prompt's cache shared by the samples that
                            continue it. A multiple of PREFIX_STEP; only for one query (nq = 1). */
    const void *prefix_keys, *prefix_values;
    int value_stride;    /* round_up16(head_size) */
    CacheType cache;     /* the numbers of keys and values: float, uint16_t (binary16) or int8_t
                            (q8_0, keys in key_quad_index()'s layout) */
    size_t scales_at;    /* q8_0: the scales of keys (values, and the prefix's) are floats this many
                            bytes after keys (values...), laid out as keys with head_size
                            cache_groups(head_size): group g of position j at [key_index(groups,
                            j, g)] */
    float *out;          /* nq outputs of head_size floats, out_stride floats apart */
    int out_stride;
    int pos, nq, head_size;
    float *weights;      /* when not NULL, query i's attention weights go to weights + i *
                            weights_stride (pos + i + 1 values): the --attention picture */
    int weights_stride;
} HeadAttention;

/* Keys are kept in blocks of KEY_BLOCK consecutive positions, and within a block transposed:
 * dimension d of the block's 16 positions is one run of 16 numbers, so a vector holds VW
 * positions' dimension d (VW divides 16), and a head's keys up to a position are one
 * contiguous stretch of memory, read front to back as attention goes through the positions. */
#define KEY_BLOCK 16
static inline size_t key_index(int head_size, int j, int d) {
    return ((size_t)(j / KEY_BLOCK) * head_size + d) * KEY_BLOCK + j % KEY_BLOCK;
}

/* q8_0 keys: within each block of KEY_BLOCK positions, dimensions go in fours ("quads"), each
 * position's four together: dimension d of position j at byte [((j / 16) * quads + d / 4) * 64
 * + j % 16 * 4 + d % 4], quads = head_size / 4 rounded up (the padding zero). One 64-byte load
 * then holds four dimensions of 16 positions, what an integer dot-product instruction (VNNI's
 * dpbusd, ARM's sdot) multiplies by a query's four quants in every 32-bit lane. */
static inline int key_quads(int head_size) { return (head_size + 3) / 4; }
static inline size_t key_quad_index(int head_size, int j, int d) {
    return (((size_t)(j / KEY_BLOCK) * key_quads(head_size) + d / 4) * KEY_BLOCK + j % KEY_BLOCK) * 4 + d % 4;
}

/* A shared prefix ends at a multiple of four blocks: the scores' four vectors of positions
 * never straddle its end, whatever the vector width. */
#define PREFIX_STEP (4 * KEY_BLOCK)

/* VW cached numbers from number i of a head's keys or values, as floats (q8_0: its values'
 * quants, not yet scaled). */
static inline vf load_cached(const void *head, size_t i, CacheType cache) {
    return cache == CACHE_F16    ? vf_load_f16((const uint16_t *)head + i)
           : cache == CACHE_Q8_0 ? vf_load_i8((const int8_t *)head + i)
                                 : vf_load((const float *)head + i);
}

/* q8_0: the scales of a head's keys or values (HeadAttention.scales_at). */
static inline const float *cached_scales(const void *head, size_t scales_at) {
    return (const float *)(const void *)((const char *)head + scales_at);
}

/* What position j's value is multiplied by in dimensions dim.. (VW of them, in one group): its
 * attention weight w, times with q8_0 the value's scale for the group. */
static inline float value_weight(float w, const void *values, size_t scales_at, int groups, int j, int dim,
                                 CacheType cache) {
    return cache == CACHE_Q8_0 ? w * cached_scales(values, scales_at)[key_index(groups, j, dim / CACHE_GROUP)] : w;
}

/* ---- q8_0: a query's scores as integer dot products ------------------------------------- */

#if defined(__AVX2__) && !defined(__AVX512VNNI__)
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
#elif defined(__AVX2__)
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
#elif defined(__ARM_NEON) && defined(__ARM_FEATURE_DOTPROD)
    (void)qsum;
    int32x4_t acc[16];
    for (int i = 0; i < 16; i++) acc[i] = vdupq_n_s32(0);
    for (int c = 0; c < quads; c++) {
        int32_t four;
        memcpy(&four, q + 4 * c, sizeof four);
        int8x16_t query = vreinterpretq_s8_s32(vdupq_n_s32(four));
        for (int b = 0; b < nb; b++)
            for (int h = 0; h < 4; h++) /* positions 4h..4h+3 */
                acc[4 * b + h] = vdotq_s32(acc[4 * b + h], vld1q_s8(keys + b * block_bytes + (size_t)c * 64 + 16 * h), query);
    }
    for (int i = 0; i < 4 * nb; i++) vst1q_s32(dots + 4 * i, acc[i]);
#else
    (void)qsum;
    for (int b = 0; b < nb; b++)
        for (int i = 0; i < KEY_BLOCK; i++) {
            int32_t sum = 0;
            for (int c = 0; c < quads; c++)
                for (int e = 0; e < 4; e++) sum += keys[b * block_bytes + (size_t)c * 64 + i * 4 + e] * q[4 * c + e];
            dots[b * KEY_BLOCK + i] = sum;
        }
#endif
}

/* q8_0: the scores of G heads' queries qs (times 1/sqrt(head_size) already) for positions
 * 0..n16-1 into att. Each query is quantized as the keys were (quant.h's rule, groups of
 * CACHE_GROUP); then score_j = the fma chain over groups g of dot_jg * (key scale_jg * query
 * scale_g), dot_jg the integer dot product of their quants (key_dots). Four blocks of keys at a
 * time (four independent chains of dot products; a shared prefix ends at a multiple of four). */
static inline void q8_0_scores(const HeadAttention *b, int G, float *const *qs, float *const *att, int n16) {
    int hs = b[0].head_size, groups = cache_groups(hs), quads = key_quads(hs);
    size_t block_bytes = (size_t)quads * 4 * KEY_BLOCK;
    int8_t q[4 * quads];
    float q_scale[groups];
    int32_t q_sum[groups];
    for (int g = 0; g < G; g++) {
        memset(q, 0, sizeof q); /* the last quad's padding */
        for (int k = 0; k < groups; k++) {
            int d0 = k * CACHE_GROUP, m = min_int(CACHE_GROUP, hs - d0);
            quantize_short_group(q + d0, &q_scale[k], qs[g] + d0, m);
            q_sum[k] = 0;
            for (int d = d0; d < d0 + m; d++) q_sum[k] += q[d];
        }
        for (int j = 0; j < n16; j += 4 * KEY_BLOCK) {
            int nb = min_int(4, (n16 - j) / KEY_BLOCK);
            const int8_t *keys = (const int8_t *)(j < b[g].prefix ? b[g].prefix_keys : b[g].keys);
            const float *key_scales = cached_scales(keys, b[g].scales_at);
            vf s[4][KEY_BLOCK / VW];
            for (int bl = 0; bl < 4; bl++)
                for (int u = 0; u < KEY_BLOCK / VW; u++) s[bl][u] = vf_set1(0.0f);
            for (int k = 0; k < groups; k++) {
                int32_t dots[4 * KEY_BLOCK];
                int c0 = k * CACHE_GROUP / 4, nc = min_int(CACHE_GROUP / 4, quads - c0);
                const int8_t *at = keys + key_quad_index(hs, j, 4 * c0);
                if (nb == 4) key_dots(at, block_bytes, 4, q + 4 * c0, nc, q_sum[k], dots); /* unrolled */
                else key_dots(at, block_bytes, nb, q + 4 * c0, nc, q_sum[k], dots);
                vf scale = vf_set1(q_scale[k]);
                for (int bl = 0; bl < nb; bl++)
                    for (int u = 0; u < KEY_BLOCK / VW; u++) {
                        int pos = j + bl * KEY_BLOCK + u * VW;
                        vf both = vf_mul(vf_load(key_scales + key_index(groups, pos, k)), scale);
                        s[bl][u] = vf_fma(vf_from_i32(dots + bl * KEY_BLOCK + u * VW), both, s[bl][u]);
                    }
            }
            for (int bl = 0; bl < nb; bl++)
                for (int u = 0; u < KEY_BLOCK / VW; u++) vf_store(att[g] + j + bl * KEY_BLOCK + u * VW, s[bl][u]);
        }
    }
}

/* Prefill hands attention() tiles of up to QUERY_TILE consecutive queries of one head; each
 * call needs scratch of attention_scratch_floats() floats. */
#define QUERY_TILE 16
static size_t attention_scratch_floats(int n_ctx, int head_size) {
    return (size_t)QUERY_TILE * ((size_t)round_up16(n_ctx) + (size_t)round_up16(head_size));
}

#define MAX_HEADS_AT_ONCE 2 /* attend()'s heads at once */

/* The scores of attend()'s G queries qs over keys of float32 or binary16 (cache) for positions
 * 0..n16-1 into att: four vectors of positions at a time, as attend() describes. */
static inline __attribute__((always_inline)) void float_scores(const HeadAttention *b, int G, CacheType cache,
                                                               float *const *qs, float *const *att, int n16) {
    int hs = b[0].head_size, j, d, g;
    /* vector u of the four is key_index(hs, u VW, 0) numbers after the first: in the same block
     * or the next ones, the same for every j (a multiple of 4 VW, within a block when VW is 1) */
    size_t at1 = key_index(hs, VW, 0), at2 = key_index(hs, 2 * VW, 0), at3 = key_index(hs, 3 * VW, 0);
    const void *keys[MAX_HEADS_AT_ONCE]; /* of the positions at hand */
    for (j = 0; j + 4 * VW <= n16; j += 4 * VW) {
        size_t k = key_index(hs, j, 0);
        vf s[MAX_HEADS_AT_ONCE][4];
        for (g = 0; g < G; g++) {
            s[g][0] = s[g][1] = s[g][2] = s[g][3] = vf_set1(0.0f);
            keys[g] = j < b[g].prefix ? b[g].prefix_keys : b[g].keys;
        }
        for (d = 0; d < hs; d++, k += KEY_BLOCK)
            for (g = 0; g < G; g++) {
                vf q = vf_set1(qs[g][d]);
                s[g][0] = vf_fma(q, load_cached(keys[g], k, cache), s[g][0]);
                s[g][1] = vf_fma(q, load_cached(keys[g], k + at1, cache), s[g][1]);
                s[g][2] = vf_fma(q, load_cached(keys[g], k + at2, cache), s[g][2]);
                s[g][3] = vf_fma(q, load_cached(keys[g], k + at3, cache), s[g][3]);
            }
        for (g = 0; g < G; g++) {
            vf_store(att[g] + j, s[g][0]);
            vf_store(att[g] + j + VW, s[g][1]);
            vf_store(att[g] + j + 2 * VW, s[g][2]);
            vf_store(att[g] + j + 3 * VW, s[g][3]);
        }
    }
    for (; j < n16; j += VW) { /* fewer than four vectors left */
        size_t k = key_index(hs, j, 0);
        vf s[MAX_HEADS_AT_ONCE];
        for (g = 0; g < G; g++) {
            s[g] = vf_set1(0.0f);
            keys[g] = j < b[g].prefix ? b[g].prefix_keys : b[g].keys;
        }
        for (d = 0; d < hs; d++)
            for (g = 0; g < G; g++)
                s[g] = vf_fma(vf_set1(qs[g][d]), load_cached(keys[g], k + (size_t)d * KEY_BLOCK, cache), s[g]);
        for (g = 0; g < G; g++) vf_store(att[g] + j, s[g]);
    }
}

/* One query at position pos: scores of keys 0..pos, VW keys to a vector, softmax, weighted sum
 * of values, VW dimensions to a vector. att: round_up16(pos + 1) floats, which hold the
 * attention weights afterwards; qs: round_up16(head_size) floats.
 * Scores are computed for four vectors of positions at a time (four blocks of keys when VW is
 * 16), each the fma chain over d in order, the four chains independent so that they overlap;
 * the blocks are read front to back. The last block is whole (positions up to round_up16(n)),
 * so the last vector reads cache, not past it; scores past pos are computed and never used.
 * Blocks replaced a layout with each dimension one row of n_ctx positions (a head's keys then
 * were 64 short runs 2 KB apart): on AMD Zen 4, 128 greedy tokens after a 128-token prompt,
 * medians of 3 alternating runs, decode went from 1243 to 1316 tok/s (bench.py's cached q4_0
 * shape, 8 layers of width 512, 1 thread) and from 261 to 278 (GPT-2 124M q4_0).
 *
 * attend() does this for query i of G heads at once (G = 1 or 2; heads of one token, so at the
 * same position, with the same head size and cache type `cache`): b, att and qs hold G of each. Every
 * head gets exactly the operations above in the same order; the G heads' chains (of fmas over d
 * for the scores, of adds for the softmax's sum, of fmas over positions for the values) are
 * independent, so interleaving them lets the CPU overlap what one head alone leaves waiting on
 * the latency of each operation. */
static inline __attribute__((always_inline)) void attend(const HeadAttention *b, int G, CacheType cache, int i,
                                                         float *const *att, float *const *qs) {
    int n = b[0].pos + i + 1, n16 = round_up16(n), hs = b[0].head_size, vs = b[0].value_stride, j, d = 0, g;
    int groups = cache_groups(hs); /* q8_0 */
    size_t scales_at = b[0].scales_at;
    float scale = 1.0f / sqrtf((float)hs);
    for (g = 0; g < G; g++) {
        const float *query = b[g].query + (size_t)i * b[g].query_stride;
        for (d = 0; d < hs; d++) qs[g][d] = query[d] * scale;
    }
    const void *values[MAX_HEADS_AT_ONCE]; /* of the positions at hand */
    if (cache == CACHE_Q8_0) q8_0_scores(b, G, qs, att, n16);
    else float_scores(b, G, cache, qs, att, n16);
    for (g = 0; g < G; g++) softmax(att[g], n);
    for (d = 0; d < hs; d += 4 * VW) { /* four vectors of the head's dimensions in flight */
        int vectors = min_int(4, (round_up16(hs) - d + VW - 1) / VW);
        vf acc[MAX_HEADS_AT_ONCE][4];
        for (g = 0; g < G; g++) acc[g][0] = acc[g][1] = acc[g][2] = acc[g][3] = vf_set1(0.0f);
        /* positions in order: those of the shared prefix, then the head's own (the same sums) */
        int own = min_int(b[0].prefix, n); /* the first of the head's own positions */
        for (int part = 0; part < 2; part++) {
            int from = part ? own : 0, to = part ? n : own;
            for (g = 0; g < G; g++) values[g] = part ? b[g].values : b[g].prefix_values;
            if (vectors == 4) { /* the usual case: every sum in registers */
                for (j = from; j < to; j++) {
                    size_t v = (size_t)j * vs + d;
                    for (g = 0; g < G; g++) {
                        /* q8_0: d is a multiple of 4 VW, so vectors 0 and 1 are in d's group, 2
                         * and 3 in that of d + 2 VW: the next group when VW is 16, else the same */
                        float w = att[g][j], w0 = value_weight(w, values[g], scales_at, groups, j, d, cache),
                              w2 = 4 * VW > CACHE_GROUP ? value_weight(w, values[g], scales_at, groups, j, d + 2 * VW, cache) : w0;
                        vf first = vf_set1(w0), second = vf_set1(w2);
                        acc[g][0] = vf_fma(first, load_cached(values[g], v, cache), acc[g][0]);
                        acc[g][1] = vf_fma(first, load_cached(values[g], v + VW, cache), acc[g][1]);
                        acc[g][2] = vf_fma(second, load_cached(values[g], v + 2 * VW, cache), acc[g][2]);
                        acc[g][3] = vf_fma(second, load_cached(values[g], v + 3 * VW, cache), acc[g][3]);
                    }
                }
            } else {
                for (j = from; j < to; j++) {
                    size_t v = (size_t)j * vs + d;
                    for (g = 0; g < G; g++)
                        for (int u = 0; u < vectors; u++)
                            acc[g][u] = vf_fma(vf_set1(value_weight(att[g][j], values[g], scales_at, groups, j, d + u * VW, cache)),
                                               load_cached(values[g], v + u * VW, cache), acc[g][u]);
                }
            }
        }
        for (g = 0; g < G; g++) {
            float *out = b[g].out + (size_t)i * b[g].out_stride;
            for (int u = 0; u < vectors; u++) {
                float part[VW];
                vf_store(part, acc[g][u]);
                for (int l = 0; l < VW && d + u * VW + l < hs; l++) out[d + u * VW + l] = part[l];
            }
        }
    }
    for (g = 0; g < G; g++)
        if (b[g].weights) memcpy(b[g].weights + (size_t)i * b[g].weights_stride, att[g], (size_t)n * sizeof(float));
}

/* attend() of the heads' own cache type: compiled for each type, so that its loops hold no
 * test of the type */
static inline __attribute__((always_inline)) void attend_cached(const HeadAttention *b, int G, int i, float *const *att,
                                                                float *const *qs) {
    if (b[0].cache == CACHE_F16) attend(b, G, CACHE_F16, i, att, qs);
    else if (b[0].cache == CACHE_Q8_0) attend(b, G, CACHE_Q8_0, i, att, qs);
    else attend(b, G, CACHE_F32, i, att, qs);
}

static void attention_one(const HeadAttention *b, int i, float *att, float *qs) { attend_cached(b, 1, i, &att, &qs); }

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
 * Each lane performs the operations of attention_one() in the same order. */
static void attention_lanes16(const HeadAttention *b, int q0, float *scratch) {
    int hs = b->head_size, nq = min_int(16, b->nq - q0), p0 = b->pos + q0, n_keys = p0 + nq, j;
    int vs = b->value_stride;
    const float *queries = b->query + (size_t)q0 * b->query_stride;
    float *att = scratch, *qt = scratch + (size_t)16 * round_up16(n_keys);
    float scale = 1.0f / sqrtf((float)hs);
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
    if (b->weights) /* the weights of each query, out of their lanes */
        for (int q = 0; q < nq; q++)
            for (j = 0; j <= p0 + q; j++) b->weights[(size_t)(q0 + q) * b->weights_stride + j] = att[(size_t)j * 16 + q];
}
#endif

/* The entry point: a prompt's queries 16 at a time in the lanes of a register where
 * AVX-512 allows, else (and for the single query of a decode step) one query at a time. Both
 * give the same bits. */
static void attention(const HeadAttention *b, float *scratch) {
#if defined(__AVX512F__)
    if (b->nq > 1 && b->head_size % 16 == 0 && b->prefix == 0 && b->cache != CACHE_Q8_0) {
        for (int q0 = 0; q0 < b->nq; q0 += 16) attention_lanes16(b, q0, scratch);
        return;
    }
#endif
    float *qs = scratch + (size_t)16 * round_up16(b->pos + b->nq);
    for (int i = 0; i < b->nq; i++) attention_one(b, i, scratch, qs);
}

/* A decode step's single query of G heads b[0..G) of one token (G <= MAX_HEADS_AT_ONCE), the
 * heads interleaved by attend(); the same bits as attention() of each. scratch: as attention()'s. */
static void attention_heads(const HeadAttention *b, int G, float *scratch) {
    if (G == 2 && b[0].nq == 1 && b[1].nq == 1) {
        size_t n16 = (size_t)round_up16(b[0].pos + 1), hs16 = (size_t)round_up16(b[0].head_size);
        float *att[2] = {scratch, scratch + n16}, *qs[2] = {scratch + 2 * n16, scratch + 2 * n16 + hs16};
        attend_cached(b, 2, 0, att, qs);
        return;
    }
    for (int g = 0; g < G; g++) attention(&b[g], scratch);
}

#endif
