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
 */
#ifndef KERNELS_TYPES_H
#define KERNELS_TYPES_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

enum { WT_F32 = 0, WT_Q8_0 = 1, WT_Q4_0 = 2, WT_COUNT };

/* Values per scale in a q8_0 or q4_0 matrix (the version 1-3 header's group_size). */
#define QUANT_GROUP 32

enum { GELU_TANH = 0, GELU_ERF = 1 };

/* One weight matrix (rows, cols) = nn.Linear's (out_features, in_features), row-major. */
typedef struct {
    int type;                  /* WT_* */
    int rows, cols;
    union {                    /* the weights as the file stores them, by type: */
        const float *f32;      /*   (rows, cols) float32 */
        const int8_t *q8;      /*   (rows, cols) int8 quants */
        const uint8_t *q4;     /*   (rows, cols / 2) bytes of two 4-bit quants */
    };
    const float *scale;        /* quantized: (rows, cols / QUANT_GROUP), value = quant * scale */
    const void *packed;        /* the same weights rearranged at load for the kernels, or NULL */
    int packing;               /* how they are rearranged (the format's own code) */
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
} WeightType;

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

/* Every weight type, by its WT_* id. */
static const WeightType weight_types[WT_COUNT] = {
    [WT_F32] = {"f32", 1, f32_bytes, f32_place, f32_row, f32_ranges},
    [WT_Q8_0] = {"q8_0", QUANT_GROUP, q8_0_bytes, q8_0_place, q8_0_row, q8_0_ranges},
    [WT_Q4_0] = {"q4_0", QUANT_GROUP, q4_0_bytes, q4_0_place, q4_0_row, q4_0_ranges},
};

/* The type with id `type`, or NULL for an id no type has. */
static inline const WeightType *weight_type(uint32_t type) { return type < WT_COUNT ? &weight_types[type] : NULL; }

#endif
