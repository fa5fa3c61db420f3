/* kernels/attention.h: causal attention of one head, for consecutive queries of one sequence
 * over that head's keys and values in the key/value cache (kernels/heads.h), computed as
 * kernels/simd.h defines (scores, softmax, weighted sum of values). kv_cache.h lays the cache
 * out and splits the work of a layer's heads between threads. The cache holds binary16 numbers
 * (kernels/f16.h) or float32 (--cache f32); either way they are read as float32 (a half
 * converts exactly), so the arithmetic below is the same for both. With --cache q8_0 it holds
 * int8 quants with a float32 scale per group of dimensions; the query is quantized the same
 * way, so that its products with the keys are integer dot products (q8_0_scores()), and the
 * values are read as float32. This file holds the portable definitions; x86 and ARM take the
 * integer dot products in vectors, and x86 with AVX-512 computes a prompt's queries 16 to a
 * register (kernels/x86/attention.h, kernels/arm/attention.h).
 *
 * After attention() of a single query (nq = 1), the scratch's first pos + 1 floats hold that
 * query's attention weights: kv_cache.h reads the --attention picture from there. */
#ifndef KERNELS_ATTENTION_H
#define KERNELS_ATTENTION_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "arch.h"
#include "arm/attention.h"
#include "f16.h"
#include "heads.h"
#include "ops.h"
#include "quant.h"
#include "simd.h"
#include "x86/attention.h"

_Static_assert(CACHE_GROUP == QUANT_GROUP, "the cache's groups are quantized as activations are (quant.h)");

/* ---- q8_0: a query's scores as integer dot products ------------------------------------- */


/* The dot products of one group's query quants q (quads of four, from the group's first
 * dimension) with the same dimensions of the keys of nb blocks (nb <= 4) of KEY_BLOCK
 * positions: keys points at the group's first quad in the first block, the others block_bytes
 * apart; dots[b * 16 + i] = the sum over the group's dimensions of key quant x query quant for
 * position i of block b, an exact integer on every path (at most 32 x 127 x 127 in size). qsum:
 * the sum of the group's query quants (VNNI multiplies unsigned bytes by signed ones: the keys
 * go in as quant + 128, and 128 x qsum comes off again). */
__attribute__((unused)) static inline __attribute__((always_inline)) void key_dots_generic(const int8_t *keys, size_t block_bytes, int nb,
                                                                                   const int8_t *q, int quads, int32_t qsum, int32_t *dots) {
    (void)qsum;
    for (int b = 0; b < nb; b++)
        for (int i = 0; i < KEY_BLOCK; i++) {
            int32_t sum = 0;
            for (int c = 0; c < quads; c++)
                for (int e = 0; e < 4; e++) sum += keys[b * block_bytes + (size_t)c * 64 + i * 4 + e] * q[4 * c + e];
            dots[b * KEY_BLOCK + i] = sum;
        }
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

/* Scores of positions first..n-1 capped as Gemma 2 asks: s -> softcap tanh(s / softcap). */
static void cap_scores(float softcap, int G, float *const *att, int first, int n) {
    for (int g = 0; g < G; g++)
        for (int j = first; j < n; j++) att[g][j] = softcap * tanhf(att[g][j] / softcap);
}

/* One query at position pos: scores of keys 0..pos, VW keys to a vector, softmax, weighted sum
 * of values, VW dimensions to a vector. att: round_up16(pos + 1) floats, which hold the
 * attention weights afterwards; qs: round_up16(head_size) floats.
 * Scores are computed for four vectors of positions at a time (four blocks of keys when VW is
 * 16), each the fma chain over d in order, the four chains independent so that they overlap;
 * the blocks are read front to back. The last block is whole (positions up to round_up16(n)),
 * so the last vector reads cache, not past it; scores past pos are computed and never used.
 * Blocks keep a head's keys one stretch of memory, where a row of n_ctx positions per dimension
 * made them 64 short runs far apart.
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
    float scale = b[0].scale;
    for (g = 0; g < G; g++) {
        const float *query = b[g].query + (size_t)i * b[g].query_stride;
        for (d = 0; d < hs; d++) qs[g][d] = query[d] * scale;
    }
    const void *values[MAX_HEADS_AT_ONCE]; /* of the positions at hand */
    if (cache == CACHE_Q8_0) q8_0_scores(b, G, qs, att, n16);
    else float_scores(b, G, cache, qs, att, n16);
    /* a layer with a window: the positions before its last `window` get weight exactly 0 and
     * enter no sum; the softmax is over the others */
    int seen = b[0].window && n > b[0].window ? n - b[0].window : 0; /* the first position seen */
    if (b[0].softcap != 0.0f) cap_scores(b[0].softcap, G, att, seen, n);
    for (g = 0; g < G; g++) {
        softmax(att[g] + seen, n - seen);
        for (j = 0; j < seen; j++) att[g][j] = 0.0f;
    }
    for (d = 0; d < hs; d += 4 * VW) { /* four vectors of the head's dimensions in flight */
        int vectors = min_int(4, (round_up16(hs) - d + VW - 1) / VW);
        vf acc[MAX_HEADS_AT_ONCE][4];
        for (g = 0; g < G; g++) acc[g][0] = acc[g][1] = acc[g][2] = acc[g][3] = vf_set1(0.0f);
        /* positions in order: those of the shared prefix, then the head's own (the same sums) */
        int own = min_int(b[0].prefix, n); /* the first of the head's own positions */
        for (int part = 0; part < 2; part++) {
            int from = max_int(seen, part ? own : 0), to = part ? n : own;
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

/* Queries q0..q0+15 of a prompt's tile (fewer at its end), one at a time (x86 with AVX-512 puts
 * them in the lanes of a register instead). */
__attribute__((unused)) static void attention_tile16_generic(const HeadAttention *b, int q0, float *scratch) {
    float *qs = scratch + (size_t)16 * round_up16(b->pos + b->nq);
    for (int i = q0; i < min_int(q0 + 16, b->nq); i++) attention_one(b, i, scratch, qs);
}

/* The entry point: a prompt's queries in tiles of 16 (kernels/x86/attention.h's lanes, or one
 * at a time) when their layout allows, else, and for the single query of a decode step, one
 * query at a time. All give the same bits. */
static void attention(const HeadAttention *b, float *scratch) {
    if (b->nq > 1 && b->head_size % 16 == 0 && b->prefix == 0 && b->cache != CACHE_Q8_0 && b->softcap == 0.0f &&
        !b->window) {
        for (int q0 = 0; q0 < b->nq; q0 += 16) attention_tile16(b, q0, scratch);
        return;
    }
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