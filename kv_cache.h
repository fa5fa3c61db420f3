/* kv_cache.h: the key/value cache. Every position's key and value of every layer and head are
 * kept once computed, so that a new token attends to all earlier ones without recomputing them;
 * one cache per sequence (several with --samples). This file is the one home of its layout:
 * it allocates the cache, stores each token's keys and values, lets samples share the cache of
 * their prompt, and runs a layer's attention over it, split between threads, with
 * kernels/attention.h computing each head.
 *
 * The cache holds the n_kv_head key/value heads; with grouped-query attention several query
 * heads read the same one (query head h reads key/value head h / (n_head / n_kv_head)).
 *
 * The numbers are IEEE binary16 by default (kernels/f16.h: rounded to nearest even as they are
 * stored, read back exactly): half the memory of float32 and half the bytes each decode step
 * reads, for a change in the logits of the order of binary16's precision (2^-11 relative);
 * --cache f32 keeps float32. --cache q8_0 stores int8 quants and, per group of up to 32
 * dimensions of a position's key or value, a float32 scale (kernels/attention.h): 1.125 bytes
 * a number, and a change in perplexity as small as binary16's on the shipped model (docs/cli.md).
 *
 * Layout, per sequence, layer and key/value head (HeadAttention's, so that a vector holds 16
 * positions' keys at once):
 *   keys    (ctx16 / 16, head_size, 16): blocks of 16 positions, each transposed: dimension d
 *           of position j at [key_index(head_size, j, d)] = [(j / 16 * head_size + d) * 16 +
 *           j % 16], ctx16 = n_ctx rounded up to 16;
 *   values  (n_ctx, hs16): position j's at [j * hs16], hs16 = head_size rounded up to 16, the
 *           padding zero.
 * q8_0: keys in blocks of 16 positions too, but each position's dimensions in fours
 * (kernels/attention.h's key_quad_index(), for integer dot products); after the quants of each
 * head's keys (values), at scales_at bytes, their scales (ctx16 / 16, groups, 16): group g of
 * position j at [key_index(groups, j, g)], groups = cache_groups(head_size) (keys and values
 * alike; the scales of 16 positions' keys for a group then fill one vector).
 */
#ifndef KV_CACHE_H
#define KV_CACHE_H

#include "util.h"

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "kernels/attention.h"
#include "kernels/f16.h"
#include "kernels/parallel.h"
#include "kernels/quant.h"
#include "kernels/simd.h"

typedef struct {
    void *keys;    /* (n_seq, n_layer, n_kv_head, ctx16 / 16, head_size, 16) of uint16_t, float or
                      int8_t (then each head's scales) */
    void *values;  /* (n_seq, n_layer, n_kv_head, n_ctx, hs16) of the same */
    CacheType type;
    size_t number; /* bytes of one number: 1 (q8_0), 2 (binary16) or 4 (float32) */
    size_t scales_at, head_bytes; /* a head's keys (values): q8_0's scales from scales_at, then the
                                     next head's from head_bytes */
    int n_layer, n_kv_head, head_size, n_ctx;
    int ctx16, hs16, groups;
    int *prefix;   /* (n_seq) sequence s reads positions 0..prefix[s]-1 from sequence 0's cache
                      (samples sharing their prompt's), 0: none */
} KVCache;

static size_t cache_number_bytes(CacheType type) { return cache_types[type].number_bytes; }

/* Where the T tokens of a forward() call are: consecutive positions pos, pos+1, ... of one
 * sequence (a prompt's block, or a decode step of a single run), or, with samples, the next
 * token of each of T sequences: all at position pos (--samples decode together), or each at its
 * own (positions: sequences of different lengths, a server's conversations). */
typedef struct {
    int pos;              /* position of the first token, or of every one with samples */
    int seq;              /* the sequence of all T tokens, without samples */
    const int *samples;   /* (T) or NULL: token i is the next one of sequence samples[i] */
    const int *positions; /* (T) or NULL: with samples, token i at position positions[i] */
} Positions;

static Positions in_sequence(int seq, long pos) { return (Positions){(int)pos, seq, NULL, NULL}; }
static int position_of(const Positions *at, int i) {
    return at->positions ? at->positions[i] : at->samples ? at->pos : at->pos + i;
}
static int sequence_of(const Positions *at, int i) { return at->samples ? at->samples[i] : at->seq; }

/* Bytes of one head's keys (or values): room for ctx16 x hs16 numbers, which holds ctx16 x
 * head_size keys and n_ctx x hs16 values, and with q8_0 their ctx16 x groups scales. As a
 * double, for the memory check before anything is allocated (dimensions up to the loader's
 * bounds cannot overflow it). */
static double head_cache_bytes(int head_size, int n_ctx, CacheType type) {
    double numbers = (double)round_up16(n_ctx) * round_up16(head_size) * (double)cache_number_bytes(type);
    return numbers + (type == CACHE_Q8_0 ? (double)round_up16(n_ctx) * cache_groups(head_size) * sizeof(float) : 0.0);
}

/* Bytes of one sequence's keys (or values), every layer and key/value head. */
static double kv_cache_bytes(int n_layer, int n_kv_head, int head_size, int n_ctx, CacheType type) {
    return (double)n_layer * n_kv_head * head_cache_bytes(head_size, n_ctx, type);
}

/* Zeroed caches for n_seq sequences, touched now (util.h) rather than in the first forward pass;
 * 0 with the error when memory runs out (free_kv_cache() gives back what was made). */
static int build_kv_cache(KVCache *kv, int n_layer, int n_kv_head, int head_size, int n_ctx, int n_seq,
                          CacheType type, Error *e) {
    *kv = (KVCache){.type = type, .number = cache_number_bytes(type), .n_layer = n_layer, .n_kv_head = n_kv_head,
                    .head_size = head_size, .n_ctx = n_ctx, .ctx16 = round_up16(n_ctx), .hs16 = round_up16(head_size),
                    .groups = cache_groups(head_size)};
    kv->scales_at = (size_t)kv->ctx16 * kv->hs16 * kv->number;
    kv->head_bytes = (size_t)head_cache_bytes(head_size, n_ctx, type);
    double bytes = kv_cache_bytes(n_layer, n_kv_head, head_size, n_ctx, type) * n_seq;
    if (bytes > (double)(SIZE_MAX / 2)) return fail(e, "the key/value cache would need %.3g bytes", bytes);
    if (!(kv->keys = alloc_zeroed((size_t)bytes, "the key cache", e))) return 0;
    if (!(kv->values = alloc_zeroed((size_t)bytes, "the value cache", e))) return 0;
    return (kv->prefix = alloc_zeroed((size_t)n_seq * sizeof(int), "the key/value cache", e)) != NULL;
}

static void free_kv_cache(KVCache *kv) {
    free(kv->keys);
    free(kv->values);
    free(kv->prefix);
    memset(kv, 0, sizeof *kv);
}

/* Key/value head h's keys (or values) in layer l's cache of sequence seq: the byte offset. */
static size_t head_offset(const KVCache *kv, int seq, int l, int h) {
    return (((size_t)seq * kv->n_layer + l) * kv->n_kv_head + h) * kv->head_bytes;
}
static void *head_keys(const KVCache *kv, int seq, int l, int h) { return (char *)kv->keys + head_offset(kv, seq, l, h); }
static void *head_values(const KVCache *kv, int seq, int l, int h) { return (char *)kv->values + head_offset(kv, seq, l, h); }

/* q8_0: position pos's key (is_key) or value src into the head whose keys (values) start at
 * head, quantized group by group: quants at [key_quad_index(head_size, pos, d)] (keys) or [pos *
 * hs16 + d] (values), the scale of group g at [key_index(groups, pos, g)] of the head's scales. */
static void cache_put_q8_0(const KVCache *kv, char *head, int pos, const float *src, int is_key) {
    float *scales = (float *)(void *)(head + kv->scales_at);
    for (int g = 0; g < kv->groups; g++) {
        int8_t quants[CACHE_GROUP];
        int d0 = g * CACHE_GROUP, m = min_int(CACHE_GROUP, kv->head_size - d0);
        quantize_short_group(quants, &scales[key_index(kv->groups, pos, g)], src + d0, m);
        for (int i = 0; i < m; i++)
            head[is_key ? key_quad_index(kv->head_size, pos, d0 + i) : (size_t)pos * kv->hs16 + d0 + i] = (char)quants[i];
    }
}

/* n floats into a cache's numbers at dst, every stride-th one (stride 1: consecutive). */
static void cache_put(const KVCache *kv, void *dst, const float *src, int n, size_t stride) {
    if (kv->type == CACHE_F32) {
        float *out = dst;
        for (int i = 0; i < n; i++) out[(size_t)i * stride] = src[i];
    } else if (stride == 1) {
        f16_store(dst, src, n);
    } else {
        uint16_t *out = dst, halves[16];
        for (int i0 = 0; i0 < n; i0 += 16) { /* converted 16 at a time, then spread */
            int m = min_int(16, n - i0);
            f16_store(halves, src + i0, m);
            for (int i = 0; i < m; i++) out[(size_t)(i0 + i) * stride] = halves[i];
        }
    }
}

/* Layer l's keys and values of the T tokens into their sequences' caches: token i's key of
 * key/value head h is keys[i * stride + h * head_size ..], its value values[i * stride + h *
 * head_size ..]. */
static void store_keys_values(const KVCache *kv, int l, const float *keys, const float *values, size_t stride,
                              int T, const Positions *at) {
    int hs = kv->head_size, h;
    SPLIT_FOR(T > 1, schedule(static), (h = 0; h < kv->n_kv_head; h++), {
        for (int i = 0; i < T; i++) {
            int seq = sequence_of(at, i), pos = position_of(at, i);
            const float *key = keys + i * stride + h * hs, *value = values + i * stride + h * hs;
            /* the key into its block: dimension d at [key_index(hs, pos, d)], 16 apart; the
             * value at [pos * hs16] */
            char *head_k = head_keys(kv, seq, l, h), *head_v = head_values(kv, seq, l, h);
            if (kv->type == CACHE_Q8_0) {
                cache_put_q8_0(kv, head_k, pos, key, 1);
                cache_put_q8_0(kv, head_v, pos, value, 0);
                continue;
            }
            cache_put(kv, head_k + key_index(hs, pos, 0) * kv->number, key, hs, KEY_BLOCK);
            cache_put(kv, head_v + (size_t)pos * kv->hs16 * kv->number, value, hs, 1);
        }
    });
}

/* Where the block of keys starting at position j (a multiple of KEY_BLOCK) starts in a head's
 * keys: the byte offset. */
static size_t key_block_bytes(const KVCache *kv, int j) {
    return kv->type == CACHE_Q8_0 ? key_quad_index(kv->head_size, j, 0) : key_index(kv->head_size, j, 0) * kv->number;
}

/* Sequence 0's cache of positions 0..n-1 (a prompt prefilled once for every sample) given to
 * sequence to: the positions up to the last multiple of PREFIX_STEP are shared, read from
 * sequence 0's cache where they are (so that every sample's attention reads the same bytes,
 * which stay in the processor's cache, instead of a copy each), the rest copied. Sequence 0
 * must not change those positions while they are shared (its later tokens go after n). */
static void share_prompt(const KVCache *kv, int to, long n) {
    int shared = (int)(n / PREFIX_STEP * PREFIX_STEP);
    kv->prefix[to] = shared;
    /* per head, the bytes from position `shared` on: the key blocks up to n's (the last one's
     * later positions too: attention never uses those before they are stored), the values up
     * to n; with q8_0 their scales, of the positions the keys' bytes hold */
    size_t scales_from = kv->scales_at + key_index(kv->groups, shared, 0) * sizeof(float),
           scales_bytes = (key_index(kv->groups, round_up16((int)n), 0) - key_index(kv->groups, shared, 0)) * sizeof(float);
    size_t keys_at = key_block_bytes(kv, shared), keys_bytes = key_block_bytes(kv, round_up16((int)n)) - keys_at,
           values_at = (size_t)shared * kv->hs16 * kv->number, values_bytes = (size_t)(n - shared) * kv->hs16 * kv->number;
    for (int l = 0; l < kv->n_layer; l++)
        for (int h = 0; h < kv->n_kv_head; h++) {
            memcpy((char *)head_keys(kv, to, l, h) + keys_at, (char *)head_keys(kv, 0, l, h) + keys_at, keys_bytes);
            memcpy((char *)head_values(kv, to, l, h) + values_at, (char *)head_values(kv, 0, l, h) + values_at, values_bytes);
            if (kv->type != CACHE_Q8_0) continue;
            memcpy((char *)head_keys(kv, to, l, h) + scales_from, (char *)head_keys(kv, 0, l, h) + scales_from, scales_bytes);
            memcpy((char *)head_values(kv, to, l, h) + scales_from, (char *)head_values(kv, 0, l, h) + scales_from, scales_bytes);
        }
}

/* No sequence reads another's cache any more (before sequences are filled anew from position 0). */
static void share_nothing(const KVCache *kv, int n_seq) { memset(kv->prefix, 0, (size_t)n_seq * sizeof(int)); }

/* Scratch for multi_head_attention(): one slice per job in flight, and optionally the place
 * where the attention weights are kept for the --attention picture. */
typedef struct {
    float *buffer;  /* (jobs, slice) */
    size_t slice;   /* attention_scratch_floats(n_ctx, head_size) */
    float *record;  /* (n_layer, n_head, record_len, record_len) attention weights, or NULL */
    int record_len;
} AttentionScratch;

/* Jobs of one multi_head_attention() call at most: tiles of QUERY_TILE consecutive queries of a
 * block of `block` tokens, or one token of each of n_seq samples, times the heads. */
static size_t attention_jobs(int block, int n_seq, int n_head) {
    return (size_t)max_int((block + QUERY_TILE - 1) / QUERY_TILE, n_seq) * (size_t)n_head;
}

/* attention() of one head's queries one at a time, query i's weights (pos + i + 1 of them) kept
 * from the scratch, where kernels/attention.h leaves them, at weights + i * stride: the same bits
 * as attention() of them all at once. */
static void attention_recorded(const HeadAttention *b, float *scratch, float *weights, size_t stride) {
    for (int i = 0; i < b->nq; i++) {
        HeadAttention one = *b;
        one.query += (size_t)i * b->query_stride;
        one.out += (size_t)i * b->out_stride;
        one.pos += i;
        one.nq = 1;
        attention(&one, scratch);
        memcpy(weights + (size_t)i * stride, scratch, (size_t)(one.pos + 1) * sizeof(float));
    }
}

/* Causal attention of the T tokens in layer l, every one of n_head query heads: token i's query
 * of head h at queries[i * q_stride + h * head_size ..], keys and values those of key/value head
 * h / (n_head / n_kv_head) in the cache of its sequence; head h's output goes to out[i *
 * out_stride + h * head_size ..]. The scores are shaped by the layer: the query's scale, a cap,
 * a window (HeadAttention). The work is split between threads by (tile of up to QUERY_TILE
 * consecutive positions, or one token; query heads): a decode step's token (one query per head)
 * gives a job two heads, which attention_heads() interleaves. */
typedef struct {
    float scale;   /* the query times this before its scores */
    float softcap; /* scores capped at +-softcap by tanh (0: none) */
    int window;    /* the last `window` positions seen (0: all) */
} ScoreShape;

static void multi_head_attention(const KVCache *kv, int l, int n_head, int T, const Positions *at, const float *queries,
                                 int q_stride, float *out, int out_stride, ScoreShape shape,
                                 const AttentionScratch *scratch) {
    int hs = kv->head_size, group = n_head / kv->n_kv_head, job;
    int per_tile = at->samples ? 1 : QUERY_TILE, heads_per_job = T == 1 || at->samples ? MAX_HEADS_AT_ONCE : 1;
    int tiles = (T + per_tile - 1) / per_tile, len = scratch->record_len;
    int head_jobs = (n_head + heads_per_job - 1) / heads_per_job; /* per tile */
    SPLIT_FOR(1, schedule(dynamic, 1), (job = 0; job < tiles * head_jobs; job++), {
        int i = job / head_jobs * per_tile, h0 = job % head_jobs * heads_per_job, seq = sequence_of(at, i), pos = position_of(at, i);
        int G = min_int(heads_per_job, n_head - h0);
        HeadAttention b[MAX_HEADS_AT_ONCE];
        for (int g = 0; g < G; g++) {
            int h = h0 + g;
            b[g] = (HeadAttention){
                .query = queries + (size_t)i * q_stride + h * hs, .query_stride = q_stride,
                .keys = head_keys(kv, seq, l, h / group),
                .values = head_values(kv, seq, l, h / group), .value_stride = kv->hs16, .cache = kv->type, .scales_at = kv->scales_at,
                .prefix = kv->prefix[seq], .prefix_keys = head_keys(kv, 0, l, h / group),
                .prefix_values = head_values(kv, 0, l, h / group),
                .out = out + (size_t)i * out_stride + h * hs, .out_stride = out_stride,
                .pos = pos, .nq = min_int(per_tile, T - i), .head_size = hs,
                .scale = shape.scale, .softcap = shape.softcap, .window = shape.window,
            };
        }
        float *buffer = scratch->buffer + (size_t)job * scratch->slice;
        if (scratch->record) /* the --attention picture: rows pos.. of each head's (len, len) weights */
            for (int g = 0; g < G; g++)
                attention_recorded(&b[g], buffer, scratch->record + (((size_t)l * n_head + h0 + g) * len + pos) * len, (size_t)len);
        else
            attention_heads(b, G, buffer);
    });
}

#endif
