/* kernels/types.h: what each weight type is, and a weight matrix as every file sees it: the
 * numbers the kernels share with the files above them, and nothing that runs on a particular
 * instruction set (ggml keeps the same split: a type's traits apart from what a CPU does with it).
 *
 *   WT_*          the weight types, as the weight file names them per tensor (model.h)
 *   Matrix        a weight matrix (rows, cols) in its type, pointing into the mapped file
 *   WeightType    a type's layout in the file: its name, values per block, the bytes of n
 *                 values, placing a matrix at its bytes, reading a row back as float32, where a
 *                 matrix's bytes are
 *   GELU_*        the two forms of GELU (model.h's header field, kernels/ops.h's gelu())
 *
 * The layouts (model.h says the same from the file's side):
 *   f32   n float32 values.
 *   q8_0  n int8 quants, zero padding to a multiple of 4 bytes, then n / 32 float32 scales:
 *         value = quant * the scale of its group of QUANT_GROUP values along the row.
 *   q4_0  n / 2 bytes of quants, zero padding to a multiple of 4 bytes, then n / 32 float32
 *         scales. Each group of 32 values along a row has 16 bytes: byte i holds quant i + 8 in
 *         its low 4 bits and quant i + 16 + 8 in its high 4 bits (quants -8..7); value = quant
 *         * scale.
 * The block formats below are GGUF's (ggml's block structs), stored exactly as a GGUF file stores
 * them, so that such a file's tensors copy into ours block for block: a row of n values is n /
 * block blocks back to back, rows one after another. A binary16 number (f16) converts to
 * float32 exactly; the values below are exactly what ggml's dequantize_row_* computes, float
 * operation for float operation (the row reads compute them so):
 *   q5_0  32 values in 22 bytes {f16 d; u8 qh[4]; u8 qs[16]}: value j < 16 has the low nibble
 *         of qs[j], value j + 16 its high nibble, and bit j of qh (little-endian uint32) is
 *         value j's fifth bit (16); value = (q - 16) * d.
 *   q5_1  32 values in 24 bytes {f16 d; f16 m; u8 qh[4]; u8 qs[16]}: q as q5_0's; value = q *
 *         d + m.
 *   q4_k  256 values in 144 bytes {f16 d; f16 dmin; u8 scales[12]; u8 qs[128]}: 8 sub-blocks of
 *         32, each with a 6-bit scale sc and a 6-bit min m packed in scales[] (q4_k_scales());
 *         value 64c + l (l < 32) has the low nibble of qs[32c + l], value 64c + 32 + l its high
 *         nibble; value = (d * sc) * q - (dmin * m) of its sub-block.
 *   q5_k  256 values in 176 bytes {f16 d; f16 dmin; u8 scales[12]; u8 qh[32]; u8 qs[128]}:
 *         q4_k's nibbles, and bit j of qh[l] the fifth bit (16) of value 32j + l; value as q4_k.
 *   q6_k  256 values in 210 bytes {u8 ql[128]; u8 qh[64]; i8 scales[16]; f16 d}: value 128h +
 *         32k + l (h < 2, k < 4, l < 32) has the low 4 bits of ql[64h + 32(k & 1) + l] (its low
 *         nibble for k < 2, high for k >= 2) and bits 2k, 2k + 1 of qh[32h + l] above them; value
 *         = (d * scales[i / 16]) * (q - 32) for value i.
 *   f16   n IEEE binary16 numbers; bf16: n bfloat16 numbers (a float32's upper 16 bits).
 *   q4_1  32 values in 20 bytes {f16 d; f16 m; u8 qs[16]}: value j < 16 has the low nibble q
 *         of qs[j], value j + 16 its high nibble; value = q * d + m.
 *   iq4_nl  32 values in 18 bytes {f16 d; u8 qs[16]}: nibbles as q4_1's, each an index into
 *         ggml's 16 non-linear levels (kvalues_iq4nl); value = d * level.
 *   iq4_xs  256 values in 136 bytes {f16 d; u16 scales_h; u8 scales_l[4]; u8 qs[128]}: 8
 *         sub-blocks of 32, sub-block b with the 6-bit scale ls = nibble b % 2 of scales_l[b /
 *         2] and bits 2b, 2b + 1 of scales_h above it, its nibbles at qs[16b..] as iq4_nl's;
 *         value = (d * (ls - 32)) * level.
 *   q2_k  256 values in 84 bytes {u8 scales[16]; u8 qs[64]; f16 d; f16 dmin}: value 128h + 32k +
 *         l (h < 2, k < 4, l < 32) has bits 2k, 2k + 1 of qs[32h + l] as q (0..3), and scales[i /
 *         16] for value i a 4-bit scale sc (low nibble) and min m (high); value = (d * sc) * q -
 *         dmin * m.
 *   q3_k  256 values in 110 bytes {u8 hmask[32]; u8 qs[64]; u8 scales[12]; f16 d}: q2_k's 2
 *         bits, less 4 where bit 4h + k of hmask[l] is clear (q -4..3); 16 6-bit scales s packed
 *         in scales[] (q3_k_scale()); value = (d * (s[i / 16] - 32)) * q.
 */
#if defined(__clang__) /* the row reads are exact without it; clang would fuse a * b - c */
#pragma STDC FP_CONTRACT OFF
#endif
#ifndef KERNELS_TYPES_H
#define KERNELS_TYPES_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* The one list of weight types, in the order of their ids (WT_ID, the number a weight file
 * names a tensor's type by): X(ID, name, values per block, bytes per block when the type is
 * stored in GGUF's blocks, 0 when it is one of ours). Everything per type is derived from it:
 * the ids below, weight_types[] (each type's name_bytes, name_place, name_row, name_ranges and
 * name_check), kernels/matmul.h's name_kernels; export/weight_types.py is Python's list, and
 * tests/test_build.py checks that the two agree. f32, q8_0 and q4_0 are every file version's,
 * the others version 4's and later. */
#define WEIGHT_TYPE_LIST(X)                                                                           \
    X(F32, f32, 1, 0) X(Q8_0, q8_0, QUANT_GROUP, 0) X(Q4_0, q4_0, QUANT_GROUP, 0)                    \
    X(Q5_0, q5_0, QUANT_GROUP, Q5_0_BYTES) X(Q4_K, q4_k, SUPER_BLOCK, Q4_K_BYTES)                     \
    X(Q6_K, q6_k, SUPER_BLOCK, Q6_K_BYTES) X(Q5_K, q5_k, SUPER_BLOCK, Q5_K_BYTES)                     \
    X(Q5_1, q5_1, QUANT_GROUP, Q5_1_BYTES) X(F16, f16, 1, 0) X(BF16, bf16, 1, 0)                     \
    X(Q4_1, q4_1, QUANT_GROUP, Q4_1_BYTES) X(IQ4_NL, iq4_nl, QUANT_GROUP, IQ4_NL_BYTES)               \
    X(IQ4_XS, iq4_xs, SUPER_BLOCK, IQ4_XS_BYTES) X(Q2_K, q2_k, SUPER_BLOCK, Q2_K_BYTES)                \
    X(Q3_K, q3_k, SUPER_BLOCK, Q3_K_BYTES)

#define WEIGHT_TYPE_ID(ID, name, block, block_bytes) WT_##ID,
enum { WEIGHT_TYPE_LIST(WEIGHT_TYPE_ID) WT_COUNT };
#undef WEIGHT_TYPE_ID

/* Values per super-block of the k formats (q4_k, q5_k, q6_k), and their 32-value sub-blocks. */
#define SUPER_BLOCK 256
#define SUB_BLOCKS (SUPER_BLOCK / 32)

/* Values per scale in a q8_0 or q4_0 matrix (the version 1-3 header's group_size). */
#define QUANT_GROUP 32

enum { GELU_TANH = 0, GELU_ERF = 1 };

/* One weight matrix (rows, cols) = nn.Linear's (out_features, in_features), row-major; or the
 * rows of n_parts matrices one after another, each in a type of its own (a GGUF's query, key and
 * value projections, fused: kernels/matmul.h multiplies each part). */
typedef struct Matrix {
    int type;                  /* WT_* (of the first part, for a matrix of parts) */
    int rows, cols;
    union {                    /* the weights as the file stores them, by type: */
        const float *f32;      /*   (rows, cols) float32 */
        const int8_t *q8;      /*   (rows, cols) int8 quants */
        const uint8_t *q4;     /*   (rows, cols / 2) bytes of two 4-bit quants */
        const uint8_t *blocks; /*   a block format: (rows, cols / block) blocks */
        const uint16_t *halves;/*   (rows, cols) binary16 or bfloat16 numbers */
    };
    const float *scale;        /* quantized: (rows, cols / QUANT_GROUP), value = quant * scale */
    const void *packed;        /* the same weights rearranged at load for the kernels, or NULL */
    int packing;               /* how they are rearranged (the format's own code) */
    const struct Matrix *parts;/* n_parts > 0: the matrix is their rows, in order */
    int n_parts;
} Matrix;

/* A stretch of a matrix's bytes. */
typedef struct {
    const void *at;
    size_t bytes;
} ByteRange;

/* A weight type's layout in the file. */
typedef struct {
    const char *name;  /* as export.py's --dtype spells it */
    int block;         /* values per block along a row: a row's length is a multiple of it */
    /* bytes in the file of a tensor of n values (n a multiple of block, below 2^62) */
    uint64_t (*bytes)(uint64_t n);
    /* point m (type, rows and cols set) at the values [first, first + rows * cols) of a tensor
     * of count values stored at data */
    void (*place)(Matrix *m, const uint8_t *data, uint64_t count, uint64_t first);
    /* row r of m as float32 (embedding lookups) */
    void (*row)(const Matrix *m, int r, float *out);
    /* where m's bytes are: into out (at most 2 ranges), returning how many */
    int (*ranges)(const Matrix *m, ByteRange *out);
    /* a block format: bytes per block; and whether the n values at data have no binary16 scale
     * that is infinite or NaN (else *bad is the first such block), NULL where any bits are
     * numbers (f32, f16, bf16) */
    int block_bytes;
    int (*check)(const uint8_t *data, uint64_t n, uint64_t *bad);
} WeightType;

/* binary16 -> float32, exact (IEEE 754 half: 1 sign, 5 exponent bits with bias 15, 10
 * fraction bits). */
static inline float f32_from_f16(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16, exponent = (h >> 10) & 0x1Fu, fraction = h & 0x3FFu, x;
    if (exponent == 0) { /* zero or subnormal: fraction * 2^-24 */
        float f = (float)fraction * 5.9604644775390625e-8f;
        return sign ? -f : f;
    }
    if (exponent == 0x1F) x = sign | 0x7F800000u | (fraction << 13); /* infinity, NaN */
    else x = sign | ((exponent + 112u) << 23) | (fraction << 13);     /* bias 15 -> 127 */
    float f;
    memcpy(&f, &x, sizeof f);
    return f;
}

/* bfloat16 -> float32: the upper half of the float's bits, exact. */
static inline float f32_from_bf16(uint16_t h) {
    uint32_t x = (uint32_t)h << 16;
    float f;
    memcpy(&f, &x, sizeof f);
    return f;
}

/* The binary16 number at p (any alignment), as float32. */
static inline float f16_at(const uint8_t *p) {
    uint16_t h;
    memcpy(&h, p, sizeof h);
    return f32_from_f16(h);
}

/* A binary16 number is infinite or NaN when its exponent bits are all ones. */
static inline int f16_finite_at(const uint8_t *p) {
    uint16_t h;
    memcpy(&h, p, sizeof h);
    return (h & 0x7C00u) != 0x7C00u;
}

/* Quant k (0..31) of a q4_0 group's 16 bytes. */
static inline int q4_quant(const uint8_t *group, int k) {
    return (k < 16 ? group[k] & 15 : group[k - 16] >> 4) - 8;
}

/* ---- f32 ---- */
static uint64_t f32_bytes(uint64_t n) { return 4 * n; }
static void f32_place(Matrix *m, const uint8_t *data, uint64_t count, uint64_t first) {
    (void)count;
    m->f32 = (const float *)(const void *)data + first;
}
static void f32_row(const Matrix *m, int r, float *out) {
    memcpy(out, m->f32 + (size_t)r * m->cols, (size_t)m->cols * sizeof(float));
}
static int f32_ranges(const Matrix *m, ByteRange *out) {
    out[0] = (ByteRange){m->f32, (size_t)m->rows * m->cols * sizeof(float)};
    return 1;
}

/* the quants and the scales of a q8_0 or q4_0 matrix, `quant_bytes` of quants per row */
static int quant_ranges(const Matrix *m, const void *quants, size_t quant_bytes, ByteRange *out) {
    out[0] = (ByteRange){quants, (size_t)m->rows * quant_bytes};
    out[1] = (ByteRange){m->scale, (size_t)m->rows * (m->cols / QUANT_GROUP) * sizeof(float)};
    return 2;
}

/* ---- q8_0 ---- */
static uint64_t q8_0_scales_offset(uint64_t n) { return (n + 3) & ~(uint64_t)3; }
static uint64_t q8_0_bytes(uint64_t n) { return q8_0_scales_offset(n) + n / QUANT_GROUP * 4; }
static void q8_0_place(Matrix *m, const uint8_t *data, uint64_t count, uint64_t first) {
    m->q8 = (const int8_t *)data + first;
    m->scale = (const float *)(const void *)(data + q8_0_scales_offset(count)) + first / QUANT_GROUP;
}
static void q8_0_row(const Matrix *m, int r, float *out) {
    const int8_t *q = m->q8 + (size_t)r * m->cols;
    const float *scale = m->scale + (size_t)r * m->cols / QUANT_GROUP;
    for (int i = 0; i < m->cols; i++) out[i] = (float)q[i] * scale[i / QUANT_GROUP];
}
static int q8_0_ranges(const Matrix *m, ByteRange *out) { return quant_ranges(m, m->q8, (size_t)m->cols, out); }

/* ---- q4_0 ---- */
static uint64_t q4_0_scales_offset(uint64_t n) { return (n / 2 + 3) & ~(uint64_t)3; }
static uint64_t q4_0_bytes(uint64_t n) { return q4_0_scales_offset(n) + n / QUANT_GROUP * 4; }
static void q4_0_place(Matrix *m, const uint8_t *data, uint64_t count, uint64_t first) {
    m->q4 = data + first / 2;
    m->scale = (const float *)(const void *)(data + q4_0_scales_offset(count)) + first / QUANT_GROUP;
}
static void q4_0_row(const Matrix *m, int r, float *out) {
    const uint8_t *q = m->q4 + (size_t)r * m->cols / 2;
    const float *scale = m->scale + (size_t)r * m->cols / QUANT_GROUP;
    for (int i = 0; i < m->cols; i++)
        out[i] = (float)q4_quant(q + i / QUANT_GROUP * (QUANT_GROUP / 2), i % QUANT_GROUP) * scale[i / QUANT_GROUP];
}
static int q4_0_ranges(const Matrix *m, ByteRange *out) { return quant_ranges(m, m->q4, (size_t)m->cols / 2, out); }

/* ---- the block formats (GGUF's layouts) ---- */

/* Where a block format's matrix is: blocks back to back, row after row. */
#define BLOCK_FORMAT(name, BLOCK, BYTES)                                                          \
    static uint64_t name##_bytes(uint64_t n) { return n / (BLOCK) * (BYTES); }                     \
    static void name##_place(Matrix *m, const uint8_t *data, uint64_t count, uint64_t first) {     \
        (void)count;                                                                              \
        m->blocks = data + first / (BLOCK) * (BYTES);                                             \
    }                                                                                             \
    static int name##_ranges(const Matrix *m, ByteRange *out) {                                   \
        out[0] = (ByteRange){m->blocks, (size_t)m->rows * (size_t)(m->cols / (BLOCK)) * (BYTES)}; \
        return 1;                                                                                 \
    }

/* Row r's first block. */
static inline const uint8_t *block_row(const Matrix *m, int r, int block, int bytes) {
    return m->blocks + (size_t)r * (size_t)(m->cols / block) * (size_t)bytes;
}

/* Every block's binary16 numbers at the offsets `at` (count of them) are finite. */
static int blocks_finite(const uint8_t *data, uint64_t n, int block, int bytes, const int *at, int count,
                         uint64_t *bad) {
    for (uint64_t b = 0; b < n / (uint64_t)block; b++)
        for (int i = 0; i < count; i++)
            if (!f16_finite_at(data + b * (uint64_t)bytes + at[i])) {
                *bad = b;
                return 0;
            }
    return 1;
}

#define Q5_0_BYTES 22
#define Q5_1_BYTES 24
#define Q4_K_BYTES 144
#define Q5_K_BYTES 176
#define Q6_K_BYTES 210
#define Q4_1_BYTES 20
#define IQ4_NL_BYTES 18
#define IQ4_XS_BYTES 136
#define Q2_K_BYTES 84
#define Q3_K_BYTES 110

/* q2_k's and q3_k's 2 bits of value i (0..255) of a block's qs. */
static inline int k_two_bits(const uint8_t *qs, int i) { return (qs[32 * (i / 128) + i % 32] >> (2 * (i % 128 / 32))) & 3; }

/* q3_k's number i (-4..3): its 2 bits, less 4 where its bit of hmask is clear. */
static inline int q3_k_number(const uint8_t *block, int i) {
    return k_two_bits(block + 32, i) - ((block[i % 32] >> (4 * (i / 128) + i % 128 / 32)) & 1 ? 0 : 4);
}

/* q3_k's 6-bit scale j (0..15), not yet less 32: the low 4 bits are nibble j / 8 of scales[j %
 * 8] (low for j < 8), the top 2 bits are bits 2 (j / 4) .. of scales[8 + j % 4] (ggml's kmask
 * shuffle of the 12 bytes). */
static inline int q3_k_scale(const uint8_t *scales, int j) {
    int low = j < 8 ? scales[j] & 15 : scales[j - 8] >> 4;
    return low | ((scales[8 + j % 4] >> (2 * (j / 4))) & 3) << 4;
}

/* iq4_nl's and iq4_xs's 16 levels, ggml's kvalues_iq4nl (ggml-common.h). */
static const int8_t iq4_levels[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};

/* Nibble j (0..31) of a 32-value group's 16 bytes: j < 16 the low nibble of byte j, else the
 * high nibble of byte j - 16 (q4_1's, iq4_nl's and iq4_xs's sub-blocks). */
static inline int group_nibble(const uint8_t *qs, int j) { return j < 16 ? qs[j] & 15 : qs[j - 16] >> 4; }

/* iq4_xs's 6-bit scale of sub-block b (0..7), not yet less 32. */
static inline int iq4_xs_scale(const uint8_t *block, int b) {
    uint16_t high;
    memcpy(&high, block + 2, 2);
    return ((block[4 + b / 2] >> 4 * (b % 2)) & 15) | ((high >> 2 * b) & 3) << 4;
}

/* q5_0's and q5_1's 5-bit number j (0..31) of a block's qh (as a little-endian uint32) and qs. */
static inline int q5_number(uint32_t qh, const uint8_t *qs, int j) {
    return j < 16 ? (qs[j] & 15) | ((qh >> j) & 1) << 4 : (qs[j - 16] >> 4) | ((qh >> j) & 1) << 4;
}

static inline uint32_t u32_at(const uint8_t *p) {
    uint32_t v;
    memcpy(&v, p, sizeof v);
    return v;
}

/* q4_k's and q5_k's scale sc[j] and min m[j] of sub-block j, 6 bits each, from their 12 bytes:
 * bytes 0-3 hold sc[0..3] in their low 6 bits, bytes 4-7 m[0..3]; bytes 8-11 the low 4 bits of
 * sc[4..7] (low nibble) and of m[4..7] (high nibble), whose top 2 bits are the top 2 bits of
 * bytes 0-3 (sc) and 4-7 (m) (ggml's get_scale_min_k4). */
static inline void k_scales(const uint8_t *s, uint8_t sc[SUB_BLOCKS], uint8_t m[SUB_BLOCKS]) {
    for (int j = 0; j < 4; j++) {
        sc[j] = s[j] & 63;
        m[j] = s[j + 4] & 63;
        sc[j + 4] = (uint8_t)((s[j + 8] & 15) | (s[j] >> 6) << 4);
        m[j + 4] = (uint8_t)((s[j + 8] >> 4) | (s[j + 4] >> 6) << 4);
    }
}

/* q4_k's number i (0..15) of a block, and q5_k's (0..31). */
static inline int q4_k_number(const uint8_t *block, int i) {
    uint8_t byte = block[16 + 32 * (i / 64) + i % 32];
    return i % 64 < 32 ? byte & 15 : byte >> 4;
}
static inline int q5_k_number(const uint8_t *block, int i) {
    uint8_t byte = block[48 + 32 * (i / 64) + i % 32];
    return (i % 64 < 32 ? byte & 15 : byte >> 4) | ((block[16 + i % 32] >> (i / 32)) & 1) << 4;
}

/* q6_k's quant i (-32..31) of a block: its 6-bit number less 32. */
static inline int q6_k_quant(const uint8_t *block, int i) {
    int h = i / 128, k = i % 128 / 32, l = i % 32;
    uint8_t low = block[64 * h + 32 * (k & 1) + l], high = block[128 + 32 * h + l];
    return ((k < 2 ? low & 15 : low >> 4) | ((high >> (2 * k)) & 3) << 4) - 32;
}

/* ---- q5_0, q5_1 ---- */
BLOCK_FORMAT(q5_0, QUANT_GROUP, Q5_0_BYTES)
BLOCK_FORMAT(q5_1, QUANT_GROUP, Q5_1_BYTES)
static void q5_0_row(const Matrix *m, int r, float *out) {
    const uint8_t *block = block_row(m, r, QUANT_GROUP, Q5_0_BYTES);
    for (int b = 0; b < m->cols / QUANT_GROUP; b++, block += Q5_0_BYTES) {
        float d = f16_at(block);
        for (int j = 0; j < QUANT_GROUP; j++) out[b * QUANT_GROUP + j] = (float)(q5_number(u32_at(block + 2), block + 6, j) - 16) * d;
    }
}
static void q5_1_row(const Matrix *m, int r, float *out) {
    const uint8_t *block = block_row(m, r, QUANT_GROUP, Q5_1_BYTES);
    for (int b = 0; b < m->cols / QUANT_GROUP; b++, block += Q5_1_BYTES) {
        float d = f16_at(block), min = f16_at(block + 2);
        for (int j = 0; j < QUANT_GROUP; j++) out[b * QUANT_GROUP + j] = (float)q5_number(u32_at(block + 4), block + 8, j) * d + min;
    }
}
static int q5_0_check(const uint8_t *data, uint64_t n, uint64_t *bad) {
    static const int at[1] = {0};
    return blocks_finite(data, n, QUANT_GROUP, Q5_0_BYTES, at, 1, bad);
}
static int q5_1_check(const uint8_t *data, uint64_t n, uint64_t *bad) {
    static const int at[2] = {0, 2};
    return blocks_finite(data, n, QUANT_GROUP, Q5_1_BYTES, at, 2, bad);
}

/* ---- q4_k, q5_k, q6_k ---- */
BLOCK_FORMAT(q4_k, SUPER_BLOCK, Q4_K_BYTES)
BLOCK_FORMAT(q5_k, SUPER_BLOCK, Q5_K_BYTES)
BLOCK_FORMAT(q6_k, SUPER_BLOCK, Q6_K_BYTES)
/* (d * sc) * q - dmin * m: d * sc is exact (11 + 6 significant bits), and so is its product
 * with a 4- or 5-bit q, so only the subtraction rounds, as in ggml. */
static void k_row(const Matrix *m, int r, float *out, int bytes, int (*number)(const uint8_t *, int)) {
    const uint8_t *block = block_row(m, r, SUPER_BLOCK, bytes);
    for (int b = 0; b < m->cols / SUPER_BLOCK; b++, block += bytes) {
        float d = f16_at(block), dmin = f16_at(block + 2);
        uint8_t sc[SUB_BLOCKS], mn[SUB_BLOCKS];
        k_scales(block + 4, sc, mn);
        for (int i = 0; i < SUPER_BLOCK; i++)
            out[b * SUPER_BLOCK + i] = d * (float)sc[i / 32] * (float)number(block, i) - dmin * (float)mn[i / 32];
    }
}
static void q4_k_row(const Matrix *m, int r, float *out) { k_row(m, r, out, Q4_K_BYTES, q4_k_number); }
static void q5_k_row(const Matrix *m, int r, float *out) { k_row(m, r, out, Q5_K_BYTES, q5_k_number); }
/* (d * scale) * quant, in that order: d * scale is exact (11 + 8 bits), its product rounds */
static void q6_k_row(const Matrix *m, int r, float *out) {
    const uint8_t *block = block_row(m, r, SUPER_BLOCK, Q6_K_BYTES);
    for (int b = 0; b < m->cols / SUPER_BLOCK; b++, block += Q6_K_BYTES) {
        float d = f16_at(block + 208);
        for (int i = 0; i < SUPER_BLOCK; i++)
            out[b * SUPER_BLOCK + i] = d * (float)(int8_t)block[192 + i / 16] * (float)q6_k_quant(block, i);
    }
}
static int k_check(const uint8_t *data, uint64_t n, uint64_t *bad, int bytes) {
    static const int at[2] = {0, 2};
    return blocks_finite(data, n, SUPER_BLOCK, bytes, at, 2, bad);
}
static int q4_k_check(const uint8_t *data, uint64_t n, uint64_t *bad) { return k_check(data, n, bad, Q4_K_BYTES); }
static int q5_k_check(const uint8_t *data, uint64_t n, uint64_t *bad) { return k_check(data, n, bad, Q5_K_BYTES); }
static int q6_k_check(const uint8_t *data, uint64_t n, uint64_t *bad) {
    static const int at[1] = {208};
    return blocks_finite(data, n, SUPER_BLOCK, Q6_K_BYTES, at, 1, bad);
}

/* ---- q4_1, iq4_nl, iq4_xs ---- */
BLOCK_FORMAT(q4_1, QUANT_GROUP, Q4_1_BYTES)
BLOCK_FORMAT(iq4_nl, QUANT_GROUP, IQ4_NL_BYTES)
BLOCK_FORMAT(iq4_xs, SUPER_BLOCK, IQ4_XS_BYTES)
/* q * d + m: q * d is exact (4 + 11 bits), only the sum rounds, as in ggml */
static void q4_1_row(const Matrix *m, int r, float *out) {
    const uint8_t *block = block_row(m, r, QUANT_GROUP, Q4_1_BYTES);
    for (int b = 0; b < m->cols / QUANT_GROUP; b++, block += Q4_1_BYTES) {
        float d = f16_at(block), min = f16_at(block + 2);
        for (int j = 0; j < QUANT_GROUP; j++) out[b * QUANT_GROUP + j] = (float)group_nibble(block + 4, j) * d + min;
    }
}
/* d * level and (d * (ls - 32)) * level are exact (at most 11 + 6 + 7 bits), as in ggml */
static void iq4_nl_row(const Matrix *m, int r, float *out) {
    const uint8_t *block = block_row(m, r, QUANT_GROUP, IQ4_NL_BYTES);
    for (int b = 0; b < m->cols / QUANT_GROUP; b++, block += IQ4_NL_BYTES) {
        float d = f16_at(block);
        for (int j = 0; j < QUANT_GROUP; j++) out[b * QUANT_GROUP + j] = d * (float)iq4_levels[group_nibble(block + 2, j)];
    }
}
static void iq4_xs_row(const Matrix *m, int r, float *out) {
    const uint8_t *block = block_row(m, r, SUPER_BLOCK, IQ4_XS_BYTES);
    for (int b = 0; b < m->cols / SUPER_BLOCK; b++, block += IQ4_XS_BYTES) {
        float d = f16_at(block);
        for (int g = 0; g < SUB_BLOCKS; g++) {
            float dl = d * (float)(iq4_xs_scale(block, g) - 32);
            for (int j = 0; j < 32; j++)
                out[b * SUPER_BLOCK + g * 32 + j] = dl * (float)iq4_levels[group_nibble(block + 8 + 16 * g, j)];
        }
    }
}
static int q4_1_check(const uint8_t *data, uint64_t n, uint64_t *bad) {
    static const int at[2] = {0, 2};
    return blocks_finite(data, n, QUANT_GROUP, Q4_1_BYTES, at, 2, bad);
}
static int iq4_nl_check(const uint8_t *data, uint64_t n, uint64_t *bad) {
    static const int at[1] = {0};
    return blocks_finite(data, n, QUANT_GROUP, IQ4_NL_BYTES, at, 1, bad);
}
static int iq4_xs_check(const uint8_t *data, uint64_t n, uint64_t *bad) {
    static const int at[1] = {0};
    return blocks_finite(data, n, SUPER_BLOCK, IQ4_XS_BYTES, at, 1, bad);
}

/* ---- q2_k, q3_k ---- */
BLOCK_FORMAT(q2_k, SUPER_BLOCK, Q2_K_BYTES)
BLOCK_FORMAT(q3_k, SUPER_BLOCK, Q3_K_BYTES)
/* (d * sc) * q - dmin * m: both products exact (11 + 4 + 2 and 11 + 4 bits), only the
 * subtraction rounds; (d * (s - 32)) * q exact: as ggml */
static void q2_k_row(const Matrix *m, int r, float *out) {
    const uint8_t *block = block_row(m, r, SUPER_BLOCK, Q2_K_BYTES);
    for (int b = 0; b < m->cols / SUPER_BLOCK; b++, block += Q2_K_BYTES) {
        float d = f16_at(block + 80), dmin = f16_at(block + 82);
        for (int i = 0; i < SUPER_BLOCK; i++) {
            uint8_t sc = block[i / 16];
            out[b * SUPER_BLOCK + i] = d * (float)(sc & 15) * (float)k_two_bits(block + 16, i) - dmin * (float)(sc >> 4);
        }
    }
}
static void q3_k_row(const Matrix *m, int r, float *out) {
    const uint8_t *block = block_row(m, r, SUPER_BLOCK, Q3_K_BYTES);
    for (int b = 0; b < m->cols / SUPER_BLOCK; b++, block += Q3_K_BYTES) {
        float d = f16_at(block + 108);
        for (int i = 0; i < SUPER_BLOCK; i++)
            out[b * SUPER_BLOCK + i] = d * (float)(q3_k_scale(block + 96, i / 16) - 32) * (float)q3_k_number(block, i);
    }
}
static int q2_k_check(const uint8_t *data, uint64_t n, uint64_t *bad) {
    static const int at[2] = {80, 82};
    return blocks_finite(data, n, SUPER_BLOCK, Q2_K_BYTES, at, 2, bad);
}
static int q3_k_check(const uint8_t *data, uint64_t n, uint64_t *bad) {
    static const int at[1] = {108};
    return blocks_finite(data, n, SUPER_BLOCK, Q3_K_BYTES, at, 1, bad);
}

/* ---- f16, bf16 ---- */
static uint64_t half_bytes(uint64_t n) { return 2 * n; }
static void half_place(Matrix *m, const uint8_t *data, uint64_t count, uint64_t first) {
    (void)count;
    m->halves = (const uint16_t *)(const void *)data + first;
}
static int half_ranges(const Matrix *m, ByteRange *out) {
    out[0] = (ByteRange){m->halves, (size_t)m->rows * (size_t)m->cols * 2};
    return 1;
}
static void f16_row(const Matrix *m, int r, float *out) {
    for (int i = 0; i < m->cols; i++) out[i] = f32_from_f16(m->halves[(size_t)r * m->cols + i]);
}
static void bf16_row(const Matrix *m, int r, float *out) {
    for (int i = 0; i < m->cols; i++) out[i] = f32_from_bf16(m->halves[(size_t)r * m->cols + i]);
}

/* The types without a block check, and the 16-bit ones' shared layout, under each one's name. */
#define f32_check NULL
#define q8_0_check NULL
#define q4_0_check NULL
#define f16_check NULL
#define bf16_check NULL
#define f16_bytes half_bytes
#define bf16_bytes half_bytes
#define f16_place half_place
#define bf16_place half_place
#define f16_ranges half_ranges
#define bf16_ranges half_ranges

/* Every weight type, by its WT_* id (WEIGHT_TYPE_LIST). */
#define WEIGHT_TYPE_ENTRY(ID, name, block, block_bytes) \
    [WT_##ID] = {#name, block, name##_bytes, name##_place, name##_row, name##_ranges, block_bytes, name##_check},
static const WeightType weight_types[WT_COUNT] = {WEIGHT_TYPE_LIST(WEIGHT_TYPE_ENTRY)};
#undef WEIGHT_TYPE_ENTRY

/* The type with id `type`, or NULL for an id no type has. */
static inline const WeightType *weight_type(uint32_t type) { return type < WT_COUNT ? &weight_types[type] : NULL; }

#endif
