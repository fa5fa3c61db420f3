/* load.h: the weight file (format in model.h) mapped, checked and pointed into. Every field,
 * offset and size is checked in 64-bit arithmetic before any weight is touched; each problem is
 * a one-line error naming the field and the values found.
 *
 *   Config, LayerWeights, TransformerWeights   the model as the file describes it
 *   map_model_file()     the file mapped into memory
 *   load_model_file()    the header, tokenizer section and tensor table checked; the weights
 *                        pointed at their bytes
 *   sinusoid_table()     the positions of a file with sinusoidal ones, computed
 * Each returns 0 with an Error naming the problem (the field, the values found) when the file is
 * not what it should be; free_model_file() then gives back what was built.
 */
#ifndef LOAD_H
#define LOAD_H

#include "util.h"

#include <errno.h>
#include <fcntl.h>
#include <stddef.h>
#include <math.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "kernels/types.h"
#include "model.h"
#include "tokenizer.h"

/* ---- the model as the file describes it ------------------------------------------------ */

typedef struct {
    int n_layer, n_head, n_embd, n_hidden, n_ctx;
    int vocab_size, vocab_padded;
    int n_kv_head;    /* key/value heads: query head h uses h / (n_head / n_kv_head) */
    int head_size;    /* each head's dimensions: the header's (version 5), else n_embd / n_head */
    int qkv_dim;      /* rows of the fused query/key/value projection: (n_head + 2 n_kv_head) head_size */
    int norm;         /* NORM_LAYER or NORM_RMS */
    float norm_eps;
    int pos_kind;     /* POS_LEARNED, POS_SINUSOIDAL (added to the embedding) or POS_ROTARY */
    float rope_theta; /* POS_ROTARY: base of the frequencies */
    int rope_freqs;   /* POS_ROTARY: 1 when the file gives the frequencies (a rope_freqs tensor) */
    int rotary_dims;  /* POS_ROTARY: the dimensions of each head rotated (the first ones) */
    float rope_scale; /* POS_ROTARY: cos and sin times this (1: none) */
    int rope_long;    /* POS_ROTARY: 1 when the file has rope_freqs_long, for a context past rope_original */
    int rope_original;
    int ffn;          /* FFN_GELU, FFN_SWIGLU or FFN_GEGLU */
    int gelu;         /* FFN_GELU, FFN_GEGLU: GELU_TANH or GELU_ERF */
    int qk_norm;      /* QK_NORM_NONE, QK_NORM_HEAD (each head's query and key) or QK_NORM_WHOLE */
    int norm_before;  /* ln_1 and ln_2 normalize each sublayer's input (NORM_BEFORE) */
    int norm_after;   /* attn.post_norm and mlp.post_norm normalize its output (NORM_AFTER) */
    float embed_scale;    /* the token embedding times this (1: none) */
    float attn_scale;     /* the query times this before its scores: 1/sqrt(head_size) unless the file says */
    float residual_scale; /* each sublayer's output times this before the residual add (1: none) */
    float logit_divisor;  /* the logits divided by this (1: none) */
    float attn_softcap;   /* scores s become cap tanh(s / cap) (0: none) */
    float logit_softcap;  /* logits likewise (0: none) */
    int bias;         /* BIAS_* bits: which tensors have biases */
    int tied_head;
    int qkv_apart;    /* the query, key and value projections are three tensors (model.h) */
} Config;

/* One transformer layer's weights. Matrices (kernels/matrix.h: float32, or quantized quants
 * and scales) are nn.Linear's (out, in); vectors are float32. A bias, or the gate, that the
 * file does not have is NULL (model.h says which each block design has). */
typedef struct {
    const float *ln_1_weight;     /* (n_embd) norm before attention (NORM_BEFORE) */
    const float *ln_1_bias;       /* (n_embd) */
    Matrix c_attn;                /* (qkv_dim, n_embd) fused query, key, value projections; with
                                     qkv_apart the rows of qkv[0..2] (a matrix of parts) */
    Matrix qkv[3];                /* qkv_apart: (n_head head_size, n_embd) query, (n_kv_head
                                     head_size, n_embd) key and value projections */
    const float *c_attn_bias;     /* (qkv_dim) */
    const float *q_norm, *k_norm; /* QK_NORM_HEAD: (head_size) each; QK_NORM_WHOLE: (n_head
                                     head_size) and (n_kv_head head_size) */
    const float *attn_post_norm;  /* (n_embd) NORM_AFTER: the norm of attention's output */
    const float *mlp_post_norm;   /* (n_embd) NORM_AFTER: the norm of the feed-forward's output */
    Matrix attn_proj;             /* (n_embd, n_head head_size) attention's output projection */
    const float *attn_proj_bias;  /* (n_embd) */
    const float *ln_2_weight;     /* (n_embd) norm before the feed-forward */
    const float *ln_2_bias;       /* (n_embd) */
    Matrix mlp_gate;              /* (n_hidden, n_embd) SwiGLU's gate */
    const float *mlp_gate_bias;   /* (n_hidden) */
    Matrix c_fc;                  /* (n_hidden, n_embd) the up projection */
    const float *c_fc_bias;       /* (n_hidden) */
    Matrix mlp_proj;              /* (n_embd, n_hidden) the down projection */
    const float *mlp_proj_bias;   /* (n_embd) */
    /* the layer's row of the layer table (model.h): what it need not share with the others */
    int window;                   /* attention over the last `window` positions; 0: the whole context */
    int rotary;                   /* rotary positions in this layer */
    float rope_theta;             /* their base */
    const float *rope_cos, *rope_sin; /* (n_ctx, head_size / 2) its rotary tables (engine.h builds
                                         them, one per base), or NULL */
} LayerWeights;

typedef struct {
    Matrix wte;                /* (vocab_padded, n_embd) token embedding */
    const float *wpe;          /* (n_ctx, n_embd) learned positions, or the sinusoid table */
    const float *rope_freqs;   /* (rotary_dims / 2) rotary frequencies from the file, or NULL */
    const float *rope_freqs_long; /* (rotary_dims / 2) those for a context past rope_original, or NULL */
    LayerWeights *layer;       /* (n_layer) */
    const float *ln_f_weight;  /* (n_embd) */
    const float *ln_f_bias;    /* (n_embd) or NULL */
    Matrix lm_head;            /* (vocab_size, n_embd), the first rows of its (vocab_padded,
                                  n_embd) tensor, or of wte when tied */
    float *sinusoid;           /* owned (n_ctx, n_embd) table that wpe points at, or NULL */
    float **rope_tables;       /* owned: each rotary base's (n_ctx, rotary_dims / 2) cos and sin tables,
                                  in pairs, that the layers point at */
    int n_rope_tables;
} TransformerWeights;

/* The file in memory. */
typedef struct {
    const uint8_t *data;       /* the whole file */
    size_t size;
    int mapped;                /* data came from mmap (and must be unmapped) */
    const FileHeader *header;
    const uint8_t *metadata;   /* the metadata section (version 4), or NULL */
    uint32_t n_metadata;       /* its entries */
} ModelFile;

#define HINT " (re-export the model with export/export.py)"

/* Sizes multiply with an overflow check: a hostile header must not wrap around. */
static int mul_checked(uint64_t a, uint64_t b, uint64_t *r, const char *what, Error *e) {
    if (__builtin_mul_overflow(a, b, r)) return fail(e, "model file: %s overflows 64 bits", what);
    return 1;
}

/* The matrices the forward pass multiplies by, into out (room for MATRICES_PER_LAYER n_layer +
 * 1), the output head last; returns their number. With qkv_apart the query, key and value
 * projections are three matrices (each packed, and its pages given back, on its own). */
#define MATRICES_PER_LAYER 7
static int product_matrices(const Config *c, TransformerWeights *w, Matrix **out) {
    int count = 0;
    for (int l = 0; l < c->n_layer; l++) {
        LayerWeights *L = &w->layer[l];
        for (int p = 0; p < (c->qkv_apart ? 3 : 0); p++) out[count++] = &L->qkv[p];
        if (!c->qkv_apart) out[count++] = &L->c_attn;
        out[count++] = &L->attn_proj;
        if (c->ffn != FFN_GELU) out[count++] = &L->mlp_gate;
        out[count++] = &L->c_fc;
        out[count++] = &L->mlp_proj;
    }
    out[count++] = &w->lm_head;
    return count;
}

/* ---- the tensors a header implies ------------------------------------------------------ */

/* One tensor of the file: its shape (layers, rows, cols), layers = 1 for one not stacked over
 * layers, and where it goes: dst, plus stride bytes for each further layer (LayerWeights). */
typedef struct {
    const char *name;
    uint64_t layers, rows, cols;
    int is_matrix; /* a Matrix (quantized in a quantized file), else a const float * */
    void *dst;
    size_t stride;
} TensorSpec;

#define MAX_TENSORS 40

/* The tensors a header implies, in file order (model.h; export/weight_file.py writes the same
 * list). */
static int tensor_list(const Config *c, TransformerWeights *w, TensorSpec *out) {
    uint64_t L = (uint64_t)c->n_layer, C = (uint64_t)c->n_embd, H = (uint64_t)c->n_hidden;
    uint64_t Vp = (uint64_t)c->vocab_padded, QKV = (uint64_t)c->qkv_dim;
    int norm_bias = c->bias & BIAS_NORM, qkv_bias = c->bias & BIAS_QKV, out_bias = c->bias & BIAS_ATTN_OUT;
    int ffn_bias = c->bias & BIAS_FFN, gated = c->ffn == FFN_SWIGLU || c->ffn == FFN_GEGLU;
    uint64_t Q = (uint64_t)c->n_head * (uint64_t)c->head_size, KV = (uint64_t)c->n_kv_head * (uint64_t)c->head_size;
    uint64_t hs = (uint64_t)c->head_size, whole = c->qk_norm == QK_NORM_WHOLE;
    LayerWeights *l0 = w->layer;
    size_t S = sizeof(LayerWeights);
    int n = 0;
#define MODEL(nm, r, k, m, field) out[n++] = (TensorSpec){nm, 1, r, k, m, &w->field, 0}
#define LAYER(nm, r, k, m, field) out[n++] = (TensorSpec){nm, L, r, k, m, &l0->field, S}
    MODEL("wte", Vp, C, 1, wte);
    if (c->pos_kind == POS_LEARNED) MODEL("wpe", (uint64_t)c->n_ctx, C, 0, wpe);
    if (c->pos_kind == POS_ROTARY && c->rope_freqs) MODEL("rope_freqs", 1, (uint64_t)c->rotary_dims / 2, 0, rope_freqs);
    if (c->pos_kind == POS_ROTARY && c->rope_long) MODEL("rope_freqs_long", 1, (uint64_t)c->rotary_dims / 2, 0, rope_freqs_long);
    if (c->norm_before) LAYER("ln_1.weight", 1, C, 0, ln_1_weight);
    if (c->norm_before && norm_bias) LAYER("ln_1.bias", 1, C, 0, ln_1_bias);
    if (c->qkv_apart) {
        LAYER("attn.q.weight", Q, C, 1, qkv[0]);
        LAYER("attn.k.weight", KV, C, 1, qkv[1]);
        LAYER("attn.v.weight", KV, C, 1, qkv[2]);
    } else {
        LAYER("attn.c_attn.weight", QKV, C, 1, c_attn);
    }
    if (qkv_bias) LAYER("attn.c_attn.bias", 1, QKV, 0, c_attn_bias);
    if (c->qk_norm) LAYER("attn.q_norm.weight", 1, whole ? Q : hs, 0, q_norm);
    if (c->qk_norm) LAYER("attn.k_norm.weight", 1, whole ? KV : hs, 0, k_norm);
    LAYER("attn.c_proj.weight", C, Q, 1, attn_proj);
    if (out_bias) LAYER("attn.c_proj.bias", 1, C, 0, attn_proj_bias);
    if (c->norm_after) LAYER("attn.post_norm.weight", 1, C, 0, attn_post_norm);
    if (c->norm_before) LAYER("ln_2.weight", 1, C, 0, ln_2_weight);
    if (c->norm_before && norm_bias) LAYER("ln_2.bias", 1, C, 0, ln_2_bias);
    if (gated) LAYER("mlp.gate.weight", H, C, 1, mlp_gate);
    if (gated && ffn_bias) LAYER("mlp.gate.bias", 1, H, 0, mlp_gate_bias);
    LAYER("mlp.c_fc.weight", H, C, 1, c_fc);
    if (ffn_bias) LAYER("mlp.c_fc.bias", 1, H, 0, c_fc_bias);
    LAYER("mlp.c_proj.weight", C, H, 1, mlp_proj);
    if (ffn_bias) LAYER("mlp.c_proj.bias", 1, C, 0, mlp_proj_bias);
    if (c->norm_after) LAYER("mlp.post_norm.weight", 1, C, 0, mlp_post_norm);
    MODEL("ln_f.weight", 1, C, 0, ln_f_weight);
    if (norm_bias) MODEL("ln_f.bias", 1, C, 0, ln_f_bias);
    if (!c->tied_head) MODEL("lm_head.weight", Vp, C, 1, lm_head);
#undef MODEL
#undef LAYER
    return n;
}

/* One entry of the tensor table as the header implies it: tensor spec of layer `layer` (every
 * layer at once, layer -1, in a file before version 4, whose tensors are stacked). */
typedef struct {
    const TensorSpec *spec;
    int layer;
} Expected;

/* The order of the entries a header implies: version 4 lists each layer's tensors apart, after
 * the model's first ones and before its last ones; earlier versions list each spec once. */
typedef struct {
    const TensorSpec *specs;
    int n_specs, first_layer, after_layers; /* specs [first_layer, after_layers) are per layer */
    uint64_t layers;                        /* times the per-layer specs are listed */
    int per_layer_entries;                  /* version 4: each entry names its layer */
} TableOrder;

/* Returns the number of entries. Computed, not allocated: a refused file leaves nothing behind. */
static uint64_t table_order(TableOrder *o, const Config *c, const TensorSpec *specs, int n_specs, uint32_t version) {
    int first = 0;
    while (first < n_specs && specs[first].layers == 1 && specs[first].stride == 0) first++;
    int after = first;
    while (after < n_specs && specs[after].stride) after++;
    *o = (TableOrder){specs, n_specs, first, after, version >= 4 ? (uint64_t)c->n_layer : 1, version >= 4};
    uint64_t per_layer = (uint64_t)(after - first);
    return (uint64_t)n_specs - per_layer + per_layer * o->layers;
}

/* Entry i of the table (i below table_order's count). */
static Expected expected_entry(const TableOrder *o, uint64_t i) {
    uint64_t per_layer = (uint64_t)(o->after_layers - o->first_layer);
    if (i < (uint64_t)o->first_layer) return (Expected){&o->specs[i], 0};
    uint64_t j = i - (uint64_t)o->first_layer;
    if (j < per_layer * o->layers)
        return (Expected){&o->specs[o->first_layer + j % per_layer], o->per_layer_entries ? (int)(j / per_layer) : -1};
    return (Expected){&o->specs[o->after_layers + (j - per_layer * o->layers)], 0};
}

/* An entry's expected name: NAME, or h.L.NAME for one layer's tensor (version 4). */
static void expected_name(const Expected *e, char name[TENSOR_NAME_LEN]) {
    if (e->layer < 0 || e->spec->stride == 0) snprintf(name, TENSOR_NAME_LEN, "%s", e->spec->name);
    else snprintf(name, TENSOR_NAME_LEN, "h.%d.%s", e->layer, e->spec->name);
}

/* The weight type of an entry (*type): version 4's own (only matrices may be other than f32, in
 * a type whose block divides their rows), before it the header's for every matrix. */
static int entry_type(const FileHeader *h, const TensorEntry *entry, const TensorSpec *t, const char *name,
                      uint32_t *type_out, Error *e) {
    if (h->version < 4) {
        *type_out = t->is_matrix ? h->weight_type : WT_F32;
        return 1;
    }
    const WeightType *type = weight_type(entry->type);
    if (entry->reserved) return fail(e, "model file: tensor '%s' has reserved bytes that are not zero (corrupted?)", name);
    if (!type)
        return fail(e, "model file: tensor '%s' has weight type %u, which this program does not know" HINT, name,
                    entry->type);
    if (!t->is_matrix && entry->type != WT_F32)
        return fail(e, "model file: tensor '%s' is %s, but only matrices may have a type other than f32" HINT, name,
                    type->name);
    if (t->cols % (uint64_t)type->block)
        return fail(e, "model file: tensor '%s' is %s, whose blocks of %d values do not divide its rows of %llu" HINT,
                    name, type->name, type->block, (unsigned long long)t->cols);
    *type_out = entry->type;
    return 1;
}

/* Values of an entry's tensor (*n): one layer's, or all layers'. */
static int entry_values(const Expected *x, const char *name, uint64_t *n, Error *e) {
    const TensorSpec *t = x->spec;
    uint64_t layers = x->layer < 0 ? t->layers : 1, rows, bytes;
    TRY(mul_checked(layers, t->rows, &rows, name, e));
    TRY(mul_checked(rows, t->cols, n, name, e));
    return mul_checked(*n, 4, &bytes, name, e); /* no format stores more than float32: no size can overflow */
}

/* A block format's blocks each have finite scales: a file with an infinite or NaN one (from a
 * stranger, or corrupted) is refused here rather than giving NaN logits. */
static int check_blocks(const uint8_t *data, uint64_t n, uint32_t type, const char *name, Error *e) {
    const WeightType *t = weight_type(type);
    uint64_t bad;
    if (t->check && !t->check(data, n, &bad))
        return fail(e, "model file: tensor '%s' (%s) block %llu has a scale that is infinite or NaN", name, t->name,
                    (unsigned long long)bad);
    return 1;
}

/* Point the entry's Matrix or vector (each layer's, when stacked) at its part of the data. */
static void place_entry(const Expected *e, uint32_t type, const uint8_t *data) {
    const TensorSpec *t = e->spec;
    uint64_t per_layer = t->rows * t->cols, first = e->layer < 0 ? 0 : (uint64_t)e->layer;
    uint64_t layers = e->layer < 0 ? t->layers : 1, count = layers * per_layer;
    for (uint64_t l = 0; l < layers; l++) {
        void *dst = (char *)t->dst + (first + l) * t->stride;
        if (!t->is_matrix) {
            *(const float **)dst = (const float *)(const void *)data + l * per_layer;
            continue;
        }
        Matrix *m = dst;
        *m = (Matrix){.type = (int)type, .rows = (int)t->rows, .cols = (int)t->cols};
        weight_type(type)->place(m, data, count, l * per_layer);
    }
}

/* ---- checking the header, the table and the checksum ---------------------------------- */

/* A header field must lie in [lo, hi] (*out, unless NULL); the message names the field and the
 * value found. */
static int field(const char *name, uint32_t value, uint32_t lo, uint32_t hi, int *out, Error *e) {
    if (value < lo || value > hi) return fail(e, "model file: %s is %u, expected %u to %u" HINT, name, value, lo, hi);
    if (out) *out = (int)value;
    return 1;
}

/* Check that [offset, offset+size) lies inside the file, without overflow. */
static int check_range(const char *what, uint64_t offset, uint64_t size, uint64_t file_size, Error *e) {
    if (offset > file_size || size > file_size - offset)
        return fail(e, "model file: %s at offset %llu, %llu bytes, runs past the end of the %llu-byte file"
                    " (truncated?)", what, (unsigned long long)offset, (unsigned long long)size,
                    (unsigned long long)file_size);
    return 1;
}

/* A float field must be finite and in (lo, hi) (*out); the message names it and the value found. */
static int float_field(const char *name, float value, float lo, float hi, const char *expected, float *out, Error *e) {
    if (!(value > lo && value < hi)) /* also false for NaN */
        return fail(e, "model file: %s is %g, expected %s" HINT, name, (double)value, expected);
    *out = value;
    return 1;
}

/* Version 5's switches of the block (model.h, bytes 160 to 207), each checked. */
static int load_block_fields(const FileHeader *h, Config *c, Error *e) {
    TRY(field("qk_norm", h->qk_norm, QK_NORM_NONE, QK_NORM_WHOLE, &c->qk_norm, e));
    int place = 0;
    TRY(field("norm_place", h->norm_place, NORM_BEFORE, NORM_BEFORE | NORM_AFTER, &place, e));
    c->norm_before = place & NORM_BEFORE, c->norm_after = (place & NORM_AFTER) != 0;
    if (c->qk_norm && c->norm != NORM_RMS)
        return fail(e, "model file: qk_norm %d needs RMSNorm (norm %d)" HINT, c->qk_norm, c->norm);
    TRY(float_field("embed_scale", h->embed_scale, 0.0f, INFINITY, "a finite number above 0", &c->embed_scale, e));
    TRY(float_field("residual_scale", h->residual_scale, 0.0f, INFINITY, "a finite number above 0", &c->residual_scale, e));
    TRY(float_field("logit_divisor", h->logit_divisor, 0.0f, INFINITY, "a finite number above 0", &c->logit_divisor, e));
    if (h->attn_scale == 0.0f && !signbit(h->attn_scale)) c->attn_scale = 0.0f; /* 1/sqrt(head_size), below */
    else TRY(float_field("attn_scale", h->attn_scale, 0.0f, INFINITY, "0 or a finite number above 0", &c->attn_scale, e));
    const char *caps[2] = {"attn_softcap", "logit_softcap"};
    float given[2] = {h->attn_softcap, h->logit_softcap}, *into[2] = {&c->attn_softcap, &c->logit_softcap};
    for (int k = 0; k < 2; k++) {
        if (given[k] == 0.0f && !signbit(given[k])) *into[k] = 0.0f;
        else TRY(float_field(caps[k], given[k], 0.0f, INFINITY, "0 or a finite number above 0", into[k], e));
    }
    if (c->pos_kind == POS_ROTARY) {
        c->rotary_dims = (int)(h->rotary_dims > 1u << 16 ? 1u << 16 : h->rotary_dims); /* checked below */
        TRY(float_field("rope_scale", h->rope_scale, 0.0f, INFINITY, "a finite number above 0", &c->rope_scale, e));
        TRY(field("rope_long", h->rope_long, 0, 1, &c->rope_long, e));
        TRY(field("rope_original", h->rope_original, c->rope_long ? 1 : 0, c->rope_long ? 1u << 24 : 0,
                  &c->rope_original, e));
    }
    return 1;
}

static int load_header(const ModelFile *f, Config *c, Error *e) {
    const FileHeader *h = f->header;
    if (h->magic != MODEL_MAGIC) return fail(e, "model file: bad magic (not a model file written by export/export.py)");
    if (h->version < 1 || h->version > MODEL_VERSION)
        return fail(e, "model file: format version %u, this program reads versions 1 to %u" HINT, h->version,
                    MODEL_VERSION);
    TRY(field("header_size", h->header_size, HEADER_SIZE, HEADER_SIZE, NULL, e));
    if (h->file_size != f->size)
        return fail(e, "model file: header says %llu bytes but the file has %zu (truncated or extended?)",
                    (unsigned long long)h->file_size, f->size);
    /* Bounds are generous but keep every count an int and every product checked below. */
    TRY(field("n_layer", h->n_layer, 0, 4096, &c->n_layer, e));
    TRY(field("vocab_size", h->vocab_size, 1, 1u << 24, &c->vocab_size, e));
    if (c->n_layer == 0) { /* tokenizer-only file: version 5's fields of a model are zero */
        if (h->version >= 5 && h->head_size)
            return fail(e, "model file: a tokenizer-only file has head_size %u, expected 0" HINT, h->head_size);
        for (size_t i = offsetof(FileHeader, qk_norm); h->version >= 5 && i < offsetof(FileHeader, reserved); i++)
            if (f->data[i]) return fail(e, "model file: a tokenizer-only file has a block field at byte %zu" HINT, i);
        return 1;
    }
    TRY(field("n_head", h->n_head, 1, 4096, &c->n_head, e));
    TRY(field("n_embd", h->n_embd, 1, 1u << 20, &c->n_embd, e));
    TRY(field("n_hidden", h->n_hidden, 1, 1u << 22, &c->n_hidden, e));
    TRY(field("n_ctx", h->n_ctx, 1, 1u << 20, &c->n_ctx, e));
    TRY(field("vocab_padded", h->vocab_padded, h->vocab_size, 1u << 24, &c->vocab_padded, e));
    TRY(field("gelu", h->gelu, 0, 1, &c->gelu, e));
    TRY(field("tied_head", h->tied_head, 0, 1, &c->tied_head, e));
    c->qkv_apart = 0; /* a version 4 field, below */
    if (h->version == 1) { /* GPT-2's block: its bias flag means every bias or none */
        TRY(field("bias", h->bias, 0, 1, &c->bias, e));
        c->bias = c->bias ? BIAS_ALL : 0;
        TRY(field("pos_kind", h->pos_kind, POS_LEARNED, POS_SINUSOIDAL, &c->pos_kind, e));
        c->norm = NORM_LAYER;
        c->ffn = FFN_GELU;
        c->n_kv_head = c->n_head;
    } else {
        TRY(field("bias", h->bias, 0, BIAS_ALL, &c->bias, e));
        TRY(field("pos_kind", h->pos_kind, POS_LEARNED, POS_ROTARY, &c->pos_kind, e));
        TRY(field("norm", h->norm, NORM_LAYER, NORM_RMS, &c->norm, e));
        TRY(field("ffn", h->ffn, FFN_GELU, h->version >= 5 ? FFN_GEGLU : FFN_SWIGLU, &c->ffn, e));
        TRY(field("n_kv_head", h->n_kv_head, 1, (uint32_t)c->n_head, &c->n_kv_head, e));
        if (c->n_head % c->n_kv_head)
            return fail(e, "model file: n_head %d is not a multiple of n_kv_head %d" HINT, c->n_head, c->n_kv_head);
        if (c->norm == NORM_RMS && (c->bias & BIAS_NORM))
            return fail(e, "model file: bias says the norms have biases, but RMSNorm has none" HINT);
    }
    if (h->version >= 4) { /* each tensor names its type */
        TRY(field("weight_type", h->weight_type, 0, 0, NULL, e));
        TRY(field("group_size", h->group_size, 0, 0, NULL, e));
        TRY(field("qkv_apart", h->qkv_apart, 0, 1, &c->qkv_apart, e));
    } else {
        int weight_type_id = 0;
        TRY(field("weight_type", h->weight_type, 0, WT_Q4_0, &weight_type_id, e));
        const WeightType *type = weight_type((uint32_t)weight_type_id);
        uint32_t group = type->block > 1 ? (uint32_t)type->block : 0;
        TRY(field("group_size", h->group_size, group, group, NULL, e));
        if (c->n_embd % type->block || c->n_hidden % type->block)
            return fail(e, "model file: %s needs n_embd and n_hidden to be multiples of %d, found %d and %d",
                        type->name, type->block, c->n_embd, c->n_hidden);
    }
    if (h->version >= 5) {
        TRY(field("head_size", h->head_size, 1, 1u << 16, &c->head_size, e));
        TRY(load_block_fields(h, c, e));
    } else {
        if (c->n_embd % c->n_head)
            return fail(e, "model file: n_embd %d is not a multiple of n_head %d", c->n_embd, c->n_head);
        c->head_size = c->n_embd / c->n_head;
        c->qk_norm = QK_NORM_NONE, c->norm_before = 1, c->norm_after = 0;
        c->embed_scale = c->residual_scale = c->logit_divisor = 1.0f;
        c->attn_scale = 0.0f, c->attn_softcap = c->logit_softcap = 0.0f;
    }
    if (c->attn_scale == 0.0f) c->attn_scale = 1.0f / sqrtf((float)c->head_size);
    if (c->pos_kind == POS_SINUSOIDAL && c->n_embd % 2)
        return fail(e, "model file: sinusoidal positions need an even n_embd, found %d", c->n_embd);
    c->qkv_dim = (c->n_head + 2 * c->n_kv_head) * c->head_size;
    TRY(float_field("norm_eps", h->norm_eps, 0.0f, 1.0f, "a small positive number", &c->norm_eps, e));
    if (c->pos_kind == POS_ROTARY) {
        if (c->head_size % 2)
            return fail(e, "model file: rotary positions need an even head size, found %d" HINT, c->head_size);
        TRY(float_field("rope_theta", h->rope_theta, 0.0f, INFINITY, "a finite number above 0", &c->rope_theta, e));
        TRY(field("rope_freqs", h->rope_freqs, 0, 1, &c->rope_freqs, e));
        if (h->version < 5) c->rotary_dims = c->head_size, c->rope_scale = 1.0f, c->rope_long = c->rope_original = 0;
        if (c->rotary_dims % 2 || c->rotary_dims < 2 || c->rotary_dims > c->head_size)
            return fail(e, "model file: rotary_dims is %d, expected an even number from 2 to the head size %d" HINT,
                        c->rotary_dims, c->head_size);
        if (c->rope_long && !c->rope_freqs)
            return fail(e, "model file: rope_long is set without rope_freqs (the short frequencies)" HINT);
    } else if (h->version > 1) {
        if (h->rope_theta != 0.0f || signbit(h->rope_theta))
            return fail(e, "model file: rope_theta is %g without rotary positions" HINT, (double)h->rope_theta);
        TRY(field("rope_freqs", h->rope_freqs, 0, 0, NULL, e));
        if (h->version >= 5 && (h->rotary_dims || h->rope_scale != 0.0f || signbit(h->rope_scale) || h->rope_long ||
                                h->rope_original))
            return fail(e, "model file: rotary_dims, rope_scale, rope_long and rope_original are for rotary "
                        "positions, and must be 0 without them" HINT);
    }
    return 1;
}

/* CRC-32 as zlib computes it (reflected polynomial 0xEDB88320), table built on first use. */
static uint32_t crc32_update(uint32_t crc, const uint8_t *p, size_t n) {
    static uint32_t table[256];
    if (!table[1])
        for (uint32_t i = 0; i < 256; i++) {
            uint32_t c = i;
            for (int k = 0; k < 8; k++) c = c & 1 ? 0xEDB88320u ^ (c >> 1) : c >> 1;
            table[i] = c;
        }
    crc = ~crc;
    for (size_t i = 0; i < n; i++) crc = table[(crc ^ p[i]) & 0xFF] ^ (crc >> 8);
    return ~crc;
}

/* The header's reserved bytes are zero and its CRC matches the header, tokenizer section and
 * tensor table (whose ranges have been checked to lie inside the file). */
static int check_integrity(const ModelFile *f, uint64_t meta_end, Error *e) {
    const FileHeader *h = f->header;
    size_t reserved = h->version == 1   ? offsetof(FileHeader, norm)
                      : h->version < 4 ? offsetof(FileHeader, metadata_offset)
                      : h->version < 5 ? offsetof(FileHeader, head_size)
                                       : offsetof(FileHeader, reserved);
    for (size_t i = reserved; i < HEADER_SIZE; i++)
        if (f->data[i]) return fail(e, "model file: reserved header byte %zu is not zero (corrupted?)", i);
    FileHeader copy;
    memcpy(&copy, h, sizeof copy);
    copy.meta_crc32 = 0;
    uint32_t crc = crc32_update(0, (const uint8_t *)&copy, sizeof copy);
    crc = crc32_update(crc, f->data + HEADER_SIZE, (size_t)(meta_end - HEADER_SIZE));
#ifndef FUZZING /* the fuzzer's mutations should reach the checks below, not stop here */
    if (crc != h->meta_crc32)
#else
    if (crc != h->meta_crc32 && 0)
#endif
        return fail(e, "model file: checksum of header, tokenizer, metadata and tensor table is %08x, the header says"
                    " %08x (the file is corrupted)", crc, h->meta_crc32);
    return 1;
}

/* The fixed encoding of "Attention Is All You Need" (section 3.5), computed in double like
 * export/model.py and rounded to float once. n_ctx rows: the positions the run uses. */
static float *sinusoid_table(int n_ctx, int n_embd, Error *e) {
    float *pe = alloc_zeroed((size_t)n_ctx * (size_t)n_embd * sizeof(float), "positions", e);
    if (!pe) return NULL;
    for (int pos = 0; pos < n_ctx; pos++)
        for (int i = 0; i < n_embd; i += 2) {
            double angle = pos / pow(10000.0, (double)i / n_embd);
            pe[(size_t)pos * n_embd + i] = (float)sin(angle);
            pe[(size_t)pos * n_embd + i + 1] = (float)cos(angle);
        }
    return pe;
}

/* Whether two layers' rows of the layer table say the same. */
static int same_layer_kind(const LayerWeights *a, const LayerWeights *b) {
    return a->window == b->window && a->rotary == b->rotary && a->rope_theta == b->rope_theta;
}

/* Each layer's row of the layer table (version 5), checked, into its LayerWeights; a file before
 * version 5 reads as every layer whole-context, rotary as the header says, with its base. */
static int load_layers(const ModelFile *f, const Config *c, TransformerWeights *w, Error *e) {
    const FileHeader *h = f->header;
    if (!(w->layer = alloc_zeroed((size_t)c->n_layer * sizeof(LayerWeights), "layers", e))) return 0;
    for (int l = 0; l < c->n_layer; l++) {
        LayerWeights *L = &w->layer[l];
        if (h->version < 5) {
            L->rotary = c->pos_kind == POS_ROTARY;
            L->rope_theta = L->rotary ? c->rope_theta : 0.0f;
            continue;
        }
        LayerRow row;
        memcpy(&row, f->data + h->layers_offset + (uint64_t)l * LAYER_ROW_SIZE, sizeof row);
        for (int k = 0; k < 5; k++)
            if (row.reserved[k]) return fail(e, "model file: layer %d's row has reserved bytes that are not zero" HINT, l);
        if (row.window > (uint32_t)c->n_ctx)
            return fail(e, "model file: layer %d's window of %u positions is longer than the context of %d (0 is the "
                        "whole context)" HINT, l, row.window, c->n_ctx);
        if (row.rotary > 1 || (row.rotary && c->pos_kind != POS_ROTARY))
            return fail(e, "model file: layer %d's rotary is %u, expected %s" HINT, l, row.rotary,
                        c->pos_kind == POS_ROTARY ? "0 or 1" : "0 (the file's positions are not rotary)");
        if (row.rotary && !(row.rope_theta > 0.0f && row.rope_theta < INFINITY))
            return fail(e, "model file: layer %d's rope_theta is %g, expected a finite number above 0" HINT, l,
                        (double)row.rope_theta);
        if (!row.rotary && (row.rope_theta != 0.0f || signbit(row.rope_theta)))
            return fail(e, "model file: layer %d has no rotary positions but a rope_theta of %g" HINT, l,
                        (double)row.rope_theta);
        L->window = (int)row.window;
        L->rotary = (int)row.rotary;
        L->rope_theta = row.rope_theta;
    }
    return 1;
}

/* Each table entry checked against the one the header implies (its name, type, size and place
 * in the file) and its weights pointed at. */
static int load_tensors(const ModelFile *f, Config *c, TransformerWeights *w, Error *e) {
    const FileHeader *h = f->header;
    TensorSpec specs[MAX_TENSORS];
    TableOrder order;
    uint64_t n = table_order(&order, c, specs, tensor_list(c, w, specs), h->version);
    if (h->n_tensors != n)
        return fail(e, "model file: header lists %u tensors, this configuration has %llu" HINT, h->n_tensors,
                    (unsigned long long)n);
    const uint8_t *table = f->data + h->tensors_offset;
    uint64_t end = h->tensors_offset + n * sizeof(TensorEntry);
    size_t name_len = h->version >= 4 ? TENSOR_NAME_LEN : TENSOR_NAME_LEN + 8; /* before 4: 48, over the type */
    for (uint64_t i = 0; i < n; i++) {
        TensorEntry entry;
        memcpy(&entry, table + i * sizeof entry, sizeof entry);
        Expected expected = expected_entry(&order, i);
        char name[TENSOR_NAME_LEN];
        expected_name(&expected, name);
        const char *found = (const char *)table + i * sizeof entry;
        if (memchr(found, 0, name_len) == NULL || strcmp(found, name) != 0)
            return fail(e, "model file: tensor %llu should be '%s' but the table has '%.*s'", (unsigned long long)i,
                        name, (int)name_len, found);
        uint32_t type = WT_F32;
        uint64_t values = 0;
        TRY(entry_type(h, &entry, expected.spec, name, &type, e));
        TRY(entry_values(&expected, name, &values, e));
        uint64_t expect = weight_type(type)->bytes(values);
        if (entry.size != expect)
            return fail(e, "model file: tensor '%s' has %llu bytes, its shape (%llu, %llu) as %s needs %llu", name,
                        (unsigned long long)entry.size, (unsigned long long)expected.spec->rows,
                        (unsigned long long)expected.spec->cols, weight_type(type)->name, (unsigned long long)expect);
        if (entry.offset % TENSOR_ALIGN)
            return fail(e, "model file: tensor '%s' offset %llu is not %u-byte aligned", name,
                        (unsigned long long)entry.offset, TENSOR_ALIGN);
        if (entry.offset < end)
            return fail(e, "model file: tensor '%s' at offset %llu overlaps what comes before it (ends at %llu)", name,
                        (unsigned long long)entry.offset, (unsigned long long)end);
        TRY(check_range(name, entry.offset, entry.size, f->size, e));
        TRY(check_blocks(f->data + entry.offset, values, type, name, e));
        place_entry(&expected, type, f->data + entry.offset);
        end = entry.offset + entry.size;
    }
    for (int l = 0; l < c->n_layer && c->qkv_apart; l++) { /* the fused projection, as its three parts */
        LayerWeights *L = &w->layer[l];
        L->c_attn = (Matrix){.type = L->qkv[0].type, .rows = c->qkv_dim, .cols = c->n_embd, .parts = L->qkv, .n_parts = 3};
    }
    if (c->tied_head) w->lm_head = w->wte;
    w->lm_head.rows = c->vocab_size; /* padded rows are never computed */
    return 1;
}

/* ---- the sections ---------------------------------------------------------------------- */

/* The sections lie inside the file, 64-aligned, in order: header, tokenizer, metadata (version
 * 4), tensor table. */
static int check_sections(const ModelFile *f, Error *e) {
    const FileHeader *h = f->header;
    if (h->tokenizer_offset < HEADER_SIZE || h->tokenizer_offset % TENSOR_ALIGN)
        return fail(e, "model file: tokenizer offset %llu must be %u-aligned and after the header",
                    (unsigned long long)h->tokenizer_offset, TENSOR_ALIGN);
    TRY(check_range("tokenizer section", h->tokenizer_offset, h->tokenizer_size, f->size, e));
    uint64_t end = h->tokenizer_offset + h->tokenizer_size;
    const char *before = "the tokenizer section";
    if (h->version >= 4) {
        if (h->metadata_offset % TENSOR_ALIGN || h->metadata_offset < end)
            return fail(e, "model file: metadata offset %llu must be %u-aligned and after the tokenizer section "
                        "(ends at %llu)", (unsigned long long)h->metadata_offset, TENSOR_ALIGN, (unsigned long long)end);
        TRY(check_range("metadata section", h->metadata_offset, h->metadata_size, f->size, e));
        end = h->metadata_offset + h->metadata_size;
        before = "the metadata section";
    }
    if (h->version >= 5 && h->n_layer > 0) {
        if (h->layers_offset % TENSOR_ALIGN || h->layers_offset < end)
            return fail(e, "model file: layer table offset %llu must be %u-aligned and after %s (ends at %llu)",
                        (unsigned long long)h->layers_offset, TENSOR_ALIGN, before, (unsigned long long)end);
        TRY(check_range("layer table", h->layers_offset, (uint64_t)h->n_layer * LAYER_ROW_SIZE, f->size, e));
        end = h->layers_offset + (uint64_t)h->n_layer * LAYER_ROW_SIZE;
        before = "the layer table";
    } else if (h->version >= 5 && h->layers_offset != 0) {
        return fail(e, "model file: a tokenizer-only file has a layer table offset of %llu, expected 0",
                    (unsigned long long)h->layers_offset);
    }
    if (h->tensors_offset % TENSOR_ALIGN)
        return fail(e, "model file: tensor table offset %llu is not %u-byte aligned",
                    (unsigned long long)h->tensors_offset, TENSOR_ALIGN);
    if (h->tensors_offset < end)
        return fail(e, "model file: tensor table at %llu overlaps %s (ends at %llu)",
                    (unsigned long long)h->tensors_offset, before, (unsigned long long)end);
    return check_range("tensor table", h->tensors_offset, (uint64_t)h->n_tensors * sizeof(TensorEntry), f->size, e);
}

static uint32_t metadata_u32(const uint8_t *p) {
    uint32_t v;
    memcpy(&v, p, sizeof v);
    return v;
}

/* Entry i of the metadata section from byte *at (MetadataEntry's key and value point into the
 * file); *at moves past it. Only for a section load_metadata() has checked. */
typedef struct {
    const uint8_t *key, *value;
    uint32_t key_len, value_len;
} MetadataEntry;

static MetadataEntry metadata_next(const ModelFile *f, uint64_t *at) {
    MetadataEntry e;
    e.key_len = metadata_u32(f->metadata + *at);
    e.key = f->metadata + *at + 4;
    e.value_len = metadata_u32(e.key + e.key_len);
    e.value = e.key + e.key_len + 4;
    *at += 8 + (uint64_t)e.key_len + e.value_len;
    return e;
}

/* The metadata section checked: its entries fill it exactly, each key 1 to METADATA_KEY_MAX
 * bytes of [a-z0-9._-] and found once. */
static int load_metadata(ModelFile *f, Error *e) {
    const FileHeader *h = f->header;
    const uint8_t *data = f->data + h->metadata_offset;
    uint64_t size = h->metadata_size, at = 4;
    if (size < 4)
        return fail(e, "model file: the metadata section is %llu bytes, shorter than its count", (unsigned long long)size);
    uint32_t n = metadata_u32(data);
    if (n > 4096) return fail(e, "model file: the metadata section lists %u entries, more than the 4096 allowed" HINT, n);
    for (uint32_t i = 0; i < n; i++) {
        if (size - at < 4) return fail(e, "model file: metadata entry %u runs past the section's end", i);
        uint32_t key_len = metadata_u32(data + at);
        if (key_len < 1 || key_len > METADATA_KEY_MAX)
            return fail(e, "model file: metadata key %u is %u bytes long, not 1 to %d", i, key_len, METADATA_KEY_MAX);
        if (size - at - 4 < (uint64_t)key_len + 4) return fail(e, "model file: metadata entry %u runs past the section's end", i);
        const uint8_t *key = data + at + 4;
        for (uint32_t k = 0; k < key_len; k++)
            if (!((key[k] >= 'a' && key[k] <= 'z') || (key[k] >= '0' && key[k] <= '9') || key[k] == '.' || key[k] == '_' || key[k] == '-'))
                return fail(e, "model file: metadata key %u has a byte 0x%02x outside [a-z0-9._-]", i, key[k]);
        uint32_t value_len = metadata_u32(key + key_len);
        if (size - at - 8 - key_len < value_len)
            return fail(e, "model file: metadata entry '%.*s' runs past the section's end", (int)key_len, key);
        for (uint64_t j = 4, k = 0; k < i; k++) { /* each key once */
            uint32_t other = metadata_u32(data + j);
            if (other == key_len && memcmp(data + j + 4, key, key_len) == 0)
                return fail(e, "model file: metadata key '%.*s' appears twice", (int)key_len, key);
            j += 8 + (uint64_t)other + metadata_u32(data + j + 4 + other);
        }
        at += 8 + (uint64_t)key_len + value_len;
    }
    if (at != size)
        return fail(e, "model file: the metadata section has %llu bytes after its last entry", (unsigned long long)(size - at));
    f->metadata = data;
    f->n_metadata = n;
    return 1;
}

/* ---- the entry points ------------------------------------------------------------------- */

/* Validate a whole model file held in memory (data, size) and point the weights into it. Every
 * offset and size is checked against size before it is used; nothing is allocated but the
 * tokenizer's index and the list of layers. Also the entry point of the loader's fuzz target. */
static int load_model_file(ModelFile *f, const uint8_t *data, size_t size, Config *c, TransformerWeights *w,
                           Tokenizer *tok, Error *e) {
    f->data = data;
    f->size = size;
    f->header = (const FileHeader *)(const void *)data;
    if (size < HEADER_SIZE)
        return fail(e, "model file is %zu bytes, shorter than the %u-byte header (truncated?)", size, HEADER_SIZE);
    TRY(load_header(f, c, e));
    const FileHeader *h = f->header;
    TRY(check_sections(f, e));
    TRY(check_integrity(f, h->tensors_offset + (uint64_t)h->n_tensors * sizeof(TensorEntry), e));
    if (h->version >= 4) TRY(load_metadata(f, e));

    const char *err = tokenizer_init(tok, f->data + h->tokenizer_offset, h->tokenizer_size, h->version);
    if (err) return fail(e, "model file: %s", err);
    if (tok->n_tokens != (uint32_t)c->vocab_size)
        return fail(e, "model file: tokenizer has %u tokens but vocab_size is %d", tok->n_tokens, c->vocab_size);
    if (c->n_layer == 0) {
        if (h->n_tensors != 0) return fail(e, "model file: a tokenizer-only file lists %u tensors", h->n_tensors);
        return 1;
    }
    return load_layers(f, c, w, e) && load_tensors(f, c, w, e);
}

/* The file at path, mapped read-only with its pages read in now (MAP_POPULATE) rather than at
 * the first read of each weight. */
static int map_model_file(ModelFile *f, const char *path, Error *e) {
    int fd = open(path, O_RDONLY);
    if (fd < 0) return fail(e, "cannot open model file '%s': %s", path, strerror(errno));
    struct stat st;
    const char *problem = NULL;
    if (fstat(fd, &st) != 0) problem = strerror(errno);
    else if (S_ISDIR(st.st_mode)) problem = "it is a directory, not a model file";
    else if (!S_ISREG(st.st_mode)) problem = "it is not a regular file";
    if (problem) {
        close(fd);
        return fail(e, "cannot read model file '%s': %s", path, problem);
    }
    if ((uint64_t)st.st_size < HEADER_SIZE) {
        close(fd);
        return fail(e, "model file '%s' is %lld bytes, shorter than the %u-byte header (truncated?)", path,
                    (long long)st.st_size, HEADER_SIZE);
    }
    void *map = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE | MAP_POPULATE, fd, 0);
    close(fd);
    if (map == MAP_FAILED) return fail(e, "cannot map model file '%s': %s", path, strerror(errno));
    f->data = map;
    f->size = (size_t)st.st_size;
    f->mapped = 1;
    return 1;
}

/* The rotary tables (model.h): cos and sin of p * f_i, times scale, for positions p < n_ctx and
 * pairs i < dims / 2 (the rotated dimensions of a head), in double, rounded to float once.
 * freqs: the file's frequencies, or NULL for theta^(-2i/dims). */
static int rotary_tables(float **cos_out, float **sin_out, int n_ctx, int dims, double theta, const float *freqs,
                         double scale, Error *e) {
    int half = dims / 2;
    float *cos_table = alloc_zeroed((size_t)n_ctx * half * sizeof(float), "rotary positions", e);
    float *sin_table = cos_table ? alloc_zeroed((size_t)n_ctx * half * sizeof(float), "rotary positions", e) : NULL;
    if (!sin_table) {
        free(cos_table);
        return 0;
    }
    for (int i = 0; i < half; i++) {
        double freq = freqs ? (double)freqs[i] : pow(theta, -2.0 * i / dims);
        for (int pos = 0; pos < n_ctx; pos++) {
            double angle = pos * freq;
            cos_table[(size_t)pos * half + i] = (float)(cos(angle) * scale);
            sin_table[(size_t)pos * half + i] = (float)(sin(angle) * scale);
        }
    }
    *cos_out = cos_table;
    *sin_out = sin_table;
    return 1;
}

static void free_model_file(ModelFile *f, TransformerWeights *w) {
    free(w->layer);
    free(w->sinusoid);
    for (int k = 0; k < w->n_rope_tables; k++) free(w->rope_tables[k]);
    free(w->rope_tables);
    if (f->mapped) munmap((void *)f->data, f->size);
    memset(w, 0, sizeof *w);
    memset(f, 0, sizeof *f);
}

#endif
