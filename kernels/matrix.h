/* kernels/matrix.h: a weight matrix as the kernels see it, the buffers of a matrix product, and
 * what each weight format (kernels/f32.h, q8_0.h, q4_0.h) provides: a record of its operations
 * that kernels/matmul.h picks by the file's weight type. A new format is one file filling in a
 * WeightFormat, plus one arm of weight_format()'s switch. */
#ifndef KERNELS_MATRIX_H
#define KERNELS_MATRIX_H

#include <stddef.h>
#include <stdint.h>

/* One weight matrix (rows, cols) = nn.Linear's (out_features, in_features), row-major. */
typedef struct {
    int type;                  /* WT_F32, WT_Q8_0 or WT_Q4_0 (model.h) */
    int rows, cols;
    union {                    /* the weights as the file stores them (model.h), by type: */
        const float *f32;      /*   (rows, cols) float32 */
        const int8_t *q8;      /*   (rows, cols) int8 quants */
        const uint8_t *q4;     /*   (rows, cols / 2) bytes of two 4-bit quants */
    };
    const float *scale;        /* quantized: (rows, cols / QUANT_GROUP), value = quant * scale */
    const void *packed;        /* the same weights rearranged at load for the kernels, or NULL */
    int packing;               /* how they are rearranged (the format's own code) */
} Matrix;

/* Buffers for matmul(), allocated once for up to max_tokens tokens (no allocation per call). */
typedef struct {
    float *xt;    /* float32 prefill: the tokens transposed, per tile of F32_TILE_TOKENS (n, F32_TILE_TOKENS) */
    int8_t *q;    /* quantized formats: the activations quantized (kernels/quant.h) */
    float *scale; /*   their scales, one per group */
    int32_t *sum; /*   each group's sum of quants (q4_0) */
} MatmulScratch;

/* What a weight format provides (all functions of the format's file). */
typedef struct {
    const char *name; /* as export.py's --dtype spells it */
    int group_size;   /* values per scale, the header's group_size (0: not quantized) */
    /* bytes in the file of a matrix tensor of n values (model.h's layout) */
    uint64_t (*file_bytes)(uint64_t n);
    /* point m (type, rows and cols set) at the values [first, first + rows * cols) of a tensor
     * of count values stored at data */
    void (*place)(Matrix *m, const uint8_t *data, uint64_t count, uint64_t first);
    /* row r of m as float32 (embedding lookups) */
    void (*row)(const Matrix *m, int r, float *out);
    /* at load: the bytes of m's rearranged copy for this build's kernels (0: none), and
     * making it at dst (m->packed then points there) */
    size_t (*packed_bytes)(const Matrix *m);
    void (*pack)(Matrix *m, void *dst);
    /* out (T, rows) = x (T, cols) @ W^T + bias; decode: the T tokens are decode steps of T
     * samples, each to be computed with the arithmetic of a single token */
    void (*matmul)(float *out, const float *x, const Matrix *w, const float *bias, int T, int decode,
                   MatmulScratch *scratch);
    /* the kernels this build runs on this CPU, for --info */
    const char *(*describe)(void);
    /* the format's buffers in scratch for products of up to T tokens of at most n inputs
     * (freed by matmul_scratch_free); 0 when memory runs out */
    int (*scratch_init)(MatmulScratch *scratch, size_t T, size_t n);
} WeightFormat;

#endif
