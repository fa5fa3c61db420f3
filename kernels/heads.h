/* kernels/heads.h: one head's keys and values as attention reads them from the key/value
 * cache: the cache's number types, the layout of keys in blocks of positions, and
 * HeadAttention, the description of one head's attention that kernels/attention.h computes
 * (kv_cache.h lays the whole cache out and fills one for each head of a layer). */
#ifndef KERNELS_HEADS_H
#define KERNELS_HEADS_H

#include <stddef.h>
#include <stdint.h>

#include "f16.h"
#include "simd.h"

/* The number format of the key/value cache: float32, IEEE binary16 (the default), or int8
 * quants with a scale per group (--cache). */
typedef enum { CACHE_F32 = 0, CACHE_F16 = 1, CACHE_Q8_0 = 2, CACHE_TYPES } CacheType;

/* Each cache type's name (--cache) and the bytes of one of its numbers (q8_0's scales come on
 * top: a float32 per group). */
static const struct {
    const char *name;
    size_t number_bytes;
} cache_types[CACHE_TYPES] = {
    [CACHE_F32] = {"f32", sizeof(float)},
    [CACHE_F16] = {"f16", sizeof(uint16_t)},
    [CACHE_Q8_0] = {"q8_0", sizeof(int8_t)},
};

/* q8_0: a position's key (or value) of one head is quantized in groups of CACHE_GROUP
 * dimensions (the last one shorter when head_size is not a multiple of it) by quant.h's rule,
 * scale = max |x| / 127, quant = x * (127 / max |x|) rounded to nearest even; the number a
 * quant stands for is quant * scale. (llama.cpp's -ctk q8_0 groups by 32 too.) */
#define CACHE_GROUP 32
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
    float scale;         /* the query times this before its scores (1/sqrt(head_size) usually) */
    float softcap;       /* each score s becomes softcap tanh(s / softcap) (0: none) */
    int window;          /* a query sees the last `window` positions, itself included (0: all) */
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

#endif
