/* load.h: the weight file (format in model.h) mapped, checked and pointed into. Every field,
 * offset and size is checked in 64-bit arithmetic before any weight is touched; each problem is
 * a one-line error naming the field and the values found.
 *
 *   Config, LayerWeights, TransformerWeights   the model as the file describes it
 *   map_model_file()     the file mapped into memory
 *   load_model_file()    the header, tokenizer section and tensor table checked; the weights
 *                        pointed at their bytes
 *   sinusoid_table()     the positions of a file with sinusoidal ones, computed
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

#include "kernels/matmul.h"
#include "kernels/matrix.h"
#include "model.h"

/* ---- the model as the file describes it ------------------------------------------------ */

typedef struct {
    int n_layer, n_head, n_embd, n_hidden, n_ctx;
    int vocab_size, vocab_padded;
    int n_kv_head;    /* key/value heads: query head h uses h / (n_head / n_kv_head) */
    int head_size;    /* n_embd / n_head */
    int qkv_dim;      /* rows of the fused query/key/value projection: (n_head + 2 n_kv_head) head_size */
    int norm;         /* NORM_LAYER or NORM_RMS */
    float norm_eps;
    int pos_kind;     /* POS_LEARNED, POS_SINUSOIDAL (added to the embedding) or POS_ROTARY */
    float rope_theta; /* POS_ROTARY: base of the frequencies */
    int rope_freqs;   /* POS_ROTARY: 1 when the file gives the frequencies (a rope_freqs tensor) */
    int ffn;          /* FFN_GELU or FFN_SWIGLU */
    int gelu;         /* FFN_GELU: GELU_TANH or GELU_ERF */
    int bias;         /* BIAS_* bits: which tensors have biases */
    int tied_head, weight_type;
} Config;

/* One transformer layer's weights. Matrices (kernels/matrix.h: float32, or quantized quants
 * and scales) are nn.Linear's (out, in); vectors are float32. A bias, or the gate, that the
 * file does not have is NULL (model.h says which each block design has). */
typedef struct {
    const float *ln_1_weight;     /* (n_embd) norm before attention */
    const float *ln_1_bias;       /* (n_embd) */
    Matrix c_attn;                /* (qkv_dim, n_embd) fused query, key, value projections */
    const float *c_attn_bias;     /* (qkv_dim) */
    Matrix attn_proj;             /* (n_embd, n_embd) attention's output projection */
    const float *attn_proj_bias;  /* (n_embd) */
    const float *ln_2_weight;     /* (n_embd) norm before the feed-forward */
    const float *ln_2_bias;       /* (n_embd) */
    Matrix mlp_gate;              /* (n_hidden, n_embd) SwiGLU's gate */
    const float *mlp_gate_bias;   /* (n_hidden) */
    Matrix c_fc;                  /* (n_hidden, n_embd) the up projection */
    const float *c_fc_bias;       /* (n_hidden) */
    Matrix mlp_proj;              /* (n_embd, n_hidden) the down projection */
    const float *mlp_proj_bias;   /* (n_embd) */
} LayerWeights;

typedef struct {
    Matrix wte;                /* (vocab_padded, n_embd) token embedding */
    const float *wpe;          /* (n_ctx, n_embd) learned positions, or the sinusoid table */
    const float *rope_freqs;   /* (head_size / 2) rotary frequencies from the file, or NULL */
    LayerWeights *layer;       /* (n_layer) */
    const float *ln_f_weight;  /* (n_embd) */
    const float *ln_f_bias;    /* (n_embd) or NULL */
    Matrix lm_head;            /* (vocab_size, n_embd), the first rows of its (vocab_padded,
                                  n_embd) tensor, or of wte when tied */
    float *sinusoid;           /* owned (n_ctx, n_embd) table that wpe points at, or NULL */
    float *rope_cos, *rope_sin; /* owned (n_ctx, head_size / 2) rotary tables, or NULL */
} TransformerWeights;

/* The file in memory. */
typedef struct {
    const uint8_t *data;       /* the whole file */
    size_t size;
    int mapped;                /* data came from mmap (and must be unmapped) */
    const FileHeader *header;
} ModelFile;

#define HINT " (re-export the model with export/export.py)"

/* Sizes multiply with an overflow check: a hostile header must not wrap around. */
static uint64_t mul_or_die(uint64_t a, uint64_t b, const char *what) {
    uint64_t r;
    if (__builtin_mul_overflow(a, b, &r)) die("model file: %s overflows 64 bits", what);
    return r;
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

#define MAX_TENSORS 32

/* The tensors a header implies, in file order (model.h; export/weight_file.py writes the same
 * list). */
static int tensor_list(const Config *c, TransformerWeights *w, TensorSpec *out) {
    uint64_t L = (uint64_t)c->n_layer, C = (uint64_t)c->n_embd, H = (uint64_t)c->n_hidden;
    uint64_t Vp = (uint64_t)c->vocab_padded, QKV = (uint64_t)c->qkv_dim;
    int norm_bias = c->bias & BIAS_NORM, qkv_bias = c->bias & BIAS_QKV, out_bias = c->bias & BIAS_ATTN_OUT;
    int ffn_bias = c->bias & BIAS_FFN, swiglu = c->ffn == FFN_SWIGLU;
    LayerWeights *l0 = w->layer;
    size_t S = sizeof(LayerWeights);
    int n = 0;
#define MODEL(nm, r, k, m, field) out[n++] = (TensorSpec){nm, 1, r, k, m, &w->field, 0}
#define LAYER(nm, r, k, m, field) out[n++] = (TensorSpec){nm, L, r, k, m, &l0->field, S}
    MODEL("wte", Vp, C, 1, wte);
    if (c->pos_kind == POS_LEARNED) MODEL("wpe", (uint64_t)c->n_ctx, C, 0, wpe);
    if (c->pos_kind == POS_ROTARY && c->rope_freqs) MODEL("rope_freqs", 1, (uint64_t)c->head_size / 2, 0, rope_freqs);
    LAYER("ln_1.weight", 1, C, 0, ln_1_weight);
    if (norm_bias) LAYER("ln_1.bias", 1, C, 0, ln_1_bias);
    LAYER("attn.c_attn.weight", QKV, C, 1, c_attn);
    if (qkv_bias) LAYER("attn.c_attn.bias", 1, QKV, 0, c_attn_bias);
    LAYER("attn.c_proj.weight", C, C, 1, attn_proj);
    if (out_bias) LAYER("attn.c_proj.bias", 1, C, 0, attn_proj_bias);
    LAYER("ln_2.weight", 1, C, 0, ln_2_weight);
    if (norm_bias) LAYER("ln_2.bias", 1, C, 0, ln_2_bias);
    if (swiglu) LAYER("mlp.gate.weight", H, C, 1, mlp_gate);
    if (swiglu && ffn_bias) LAYER("mlp.gate.bias", 1, H, 0, mlp_gate_bias);
    LAYER("mlp.c_fc.weight", H, C, 1, c_fc);
    if (ffn_bias) LAYER("mlp.c_fc.bias", 1, H, 0, c_fc_bias);
    LAYER("mlp.c_proj.weight", C, H, 1, mlp_proj);
    if (ffn_bias) LAYER("mlp.c_proj.bias", 1, C, 0, mlp_proj_bias);
    MODEL("ln_f.weight", 1, C, 0, ln_f_weight);
    if (norm_bias) MODEL("ln_f.bias", 1, C, 0, ln_f_bias);
    if (!c->tied_head) MODEL("lm_head.weight", Vp, C, 1, lm_head);
#undef MODEL
#undef LAYER
    return n;
}

/* Bytes of a tensor in the file: float32, or a matrix in the file's weight format. */
static uint64_t tensor_bytes(const Config *c, const TensorSpec *t) {
    uint64_t n = mul_or_die(mul_or_die(t->layers, t->rows, t->name), t->cols, t->name);
    uint64_t as_f32 = mul_or_die(n, 4, t->name); /* no format stores more: no size can overflow */
    return t->is_matrix ? weight_format(c->weight_type)->file_bytes(n) : as_f32;
}

/* Point each layer's Matrix or vector at its part of the tensor's data. */
static void place_tensor(const Config *c, const TensorSpec *t, const uint8_t *data) {
    uint64_t per_layer = t->rows * t->cols, count = t->layers * per_layer;
    for (uint64_t l = 0; l < t->layers; l++) {
        void *dst = (char *)t->dst + l * t->stride;
        if (!t->is_matrix) {
            *(const float **)dst = (const float *)(const void *)data + l * per_layer;
            continue;
        }
        Matrix *m = dst;
        *m = (Matrix){.type = c->weight_type, .rows = (int)t->rows, .cols = (int)t->cols};
        weight_format(c->weight_type)->place(m, data, count, l * per_layer);
    }
}

/* ---- checking the header, the table and the checksum ---------------------------------- */

/* A header field must lie in [lo, hi]; the message names the field and the value found. */
static int field(const char *name, uint32_t value, uint32_t lo, uint32_t hi) {
    if (value < lo || value > hi)
        die("model file: %s is %u, expected %u to %u" HINT, name, value, lo, hi);
    return (int)value;
}

/* Check that [offset, offset+size) lies inside the file, without overflow. */
static void check_range(const char *what, uint64_t offset, uint64_t size, uint64_t file_size) {
    if (offset > file_size || size > file_size - offset)
        die("model file: %s at offset %llu, %llu bytes, runs past the end of the %llu-byte file"
            " (truncated?)", what, (unsigned long long)offset, (unsigned long long)size,
            (unsigned long long)file_size);
}

/* A float field must be finite and in (lo, hi); the message names it and the value found. */
static float float_field(const char *name, float value, float lo, float hi, const char *expected) {
    if (!(value > lo && value < hi)) /* also false for NaN */
        die("model file: %s is %g, expected %s" HINT, name, (double)value, expected);
    return value;
}

static void load_header(const ModelFile *f, Config *c) {
    const FileHeader *h = f->header;
    if (h->magic != MODEL_MAGIC)
        die("model file: bad magic (not a model file written by export/export.py)");
    if (h->version < 1 || h->version > MODEL_VERSION)
        die("model file: format version %u, this program reads versions 1 to %u" HINT, h->version,
            MODEL_VERSION);
    field("header_size", h->header_size, HEADER_SIZE, HEADER_SIZE);
    if (h->file_size != f->size)
        die("model file: header says %llu bytes but the file has %zu (truncated or extended?)",
            (unsigned long long)h->file_size, f->size);
    /* Bounds are generous but keep every count an int and every product checked below. */
    c->n_layer = field("n_layer", h->n_layer, 0, 4096);
    c->vocab_size = field("vocab_size", h->vocab_size, 1, 1u << 24);
    if (c->n_layer == 0) return; /* tokenizer-only file */
    c->n_head = field("n_head", h->n_head, 1, 4096);
    c->n_embd = field("n_embd", h->n_embd, 1, 1u << 20);
    c->n_hidden = field("n_hidden", h->n_hidden, 1, 1u << 22);
    c->n_ctx = field("n_ctx", h->n_ctx, 1, 1u << 20);
    c->vocab_padded = field("vocab_padded", h->vocab_padded, h->vocab_size, 1u << 24);
    c->gelu = field("gelu", h->gelu, 0, 1);
    c->tied_head = field("tied_head", h->tied_head, 0, 1);
    c->weight_type = field("weight_type", h->weight_type, 0, WT_COUNT - 1);
    if (h->version == 1) { /* GPT-2's block: its bias flag means every bias or none */
        c->bias = field("bias", h->bias, 0, 1) ? BIAS_ALL : 0;
        c->pos_kind = field("pos_kind", h->pos_kind, POS_LEARNED, POS_SINUSOIDAL);
        c->norm = NORM_LAYER;
        c->ffn = FFN_GELU;
        c->n_kv_head = c->n_head;
    } else {
        c->bias = field("bias", h->bias, 0, BIAS_ALL);
        c->pos_kind = field("pos_kind", h->pos_kind, POS_LEARNED, POS_ROTARY);
        c->norm = field("norm", h->norm, NORM_LAYER, NORM_RMS);
        c->ffn = field("ffn", h->ffn, FFN_GELU, FFN_SWIGLU);
        c->n_kv_head = field("n_kv_head", h->n_kv_head, 1, (uint32_t)c->n_head);
        if (c->n_head % c->n_kv_head)
            die("model file: n_head %d is not a multiple of n_kv_head %d" HINT, c->n_head, c->n_kv_head);
        if (c->norm == NORM_RMS && (c->bias & BIAS_NORM))
            die("model file: bias says the norms have biases, but RMSNorm has none" HINT);
    }
    const WeightFormat *format = weight_format(c->weight_type);
    field("group_size", h->group_size, (uint32_t)format->group_size, (uint32_t)format->group_size);
    if (format->group_size && (c->n_embd % format->group_size || c->n_hidden % format->group_size))
        die("model file: %s needs n_embd and n_hidden to be multiples of %d, found %d and %d",
            format->name, format->group_size, c->n_embd, c->n_hidden);
    if (c->n_embd % c->n_head)
        die("model file: n_embd %d is not a multiple of n_head %d", c->n_embd, c->n_head);
    if (c->pos_kind == POS_SINUSOIDAL && c->n_embd % 2)
        die("model file: sinusoidal positions need an even n_embd, found %d", c->n_embd);
    c->head_size = c->n_embd / c->n_head;
    c->qkv_dim = (c->n_head + 2 * c->n_kv_head) * c->head_size;
    c->norm_eps = float_field("norm_eps", h->norm_eps, 0.0f, 1.0f, "a small positive number");
    if (c->pos_kind == POS_ROTARY) {
        if (c->head_size % 2)
            die("model file: rotary positions need an even head size, found %d" HINT, c->head_size);
        c->rope_theta = float_field("rope_theta", h->rope_theta, 0.0f, INFINITY, "a finite number above 0");
        c->rope_freqs = field("rope_freqs", h->rope_freqs, 0, 1);
    } else if (h->version > 1) {
        if (h->rope_theta != 0.0f || signbit(h->rope_theta))
            die("model file: rope_theta is %g without rotary positions" HINT, (double)h->rope_theta);
        field("rope_freqs", h->rope_freqs, 0, 0);
    }
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
static void check_integrity(const ModelFile *f, uint64_t meta_end) {
    const FileHeader *h = f->header;
    size_t reserved = h->version == 1 ? offsetof(FileHeader, norm) : offsetof(FileHeader, reserved);
    for (size_t i = reserved; i < HEADER_SIZE; i++)
        if (f->data[i]) die("model file: reserved header byte %zu is not zero (corrupted?)", i);
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
        die("model file: checksum of header, tokenizer and tensor table is %08x, the header says"
            " %08x (the file is corrupted)", crc, h->meta_crc32);
}

/* The fixed encoding of "Attention Is All You Need" (section 3.5), computed in double like
 * export/model.py and rounded to float once. n_ctx rows: the positions the run uses. */
static float *sinusoid_table(int n_ctx, int n_embd) {
    float *pe = calloc_or_die((size_t)n_ctx * (size_t)n_embd * sizeof(float), "positions");
    for (int pos = 0; pos < n_ctx; pos++)
        for (int i = 0; i < n_embd; i += 2) {
            double angle = pos / pow(10000.0, (double)i / n_embd);
            pe[(size_t)pos * n_embd + i] = (float)sin(angle);
            pe[(size_t)pos * n_embd + i + 1] = (float)cos(angle);
        }
    return pe;
}

static void load_tensors(const ModelFile *f, const Config *c, TransformerWeights *w) {
    const FileHeader *h = f->header;
    w->layer = calloc_or_die((size_t)c->n_layer * sizeof(LayerWeights), "layers");
    TensorSpec specs[MAX_TENSORS];
    int n = tensor_list(c, w, specs);
    if (h->n_tensors != (uint32_t)n)
        die("model file: header lists %u tensors, this configuration has %d" HINT, h->n_tensors, n);
    const TensorEntry *table = (const TensorEntry *)(const void *)(f->data + h->tensors_offset);
    uint64_t end = h->tensors_offset + (uint64_t)n * sizeof(TensorEntry);
    for (int i = 0; i < n; i++) {
        TensorEntry e;
        memcpy(&e, &table[i], sizeof e);
        if (memchr(e.name, 0, TENSOR_NAME_LEN) == NULL || strcmp(e.name, specs[i].name) != 0)
            die("model file: tensor %d should be '%s' but the table has '%.*s'", i, specs[i].name,
                TENSOR_NAME_LEN, e.name);
        uint64_t expect = tensor_bytes(c, &specs[i]);
        if (e.size != expect)
            die("model file: tensor '%s' has %llu bytes, its shape (%llu, %llu, %llu) needs %llu",
                e.name, (unsigned long long)e.size, (unsigned long long)specs[i].layers,
                (unsigned long long)specs[i].rows, (unsigned long long)specs[i].cols,
                (unsigned long long)expect);
        if (e.offset % TENSOR_ALIGN)
            die("model file: tensor '%s' offset %llu is not %u-byte aligned", e.name,
                (unsigned long long)e.offset, TENSOR_ALIGN);
        if (e.offset < end)
            die("model file: tensor '%s' at offset %llu overlaps what comes before it (ends at %llu)",
                e.name, (unsigned long long)e.offset, (unsigned long long)end);
        check_range(e.name, e.offset, e.size, f->size);
        place_tensor(c, &specs[i], f->data + e.offset);
        end = e.offset + e.size;
    }
    if (c->tied_head) w->lm_head = w->wte;
    w->lm_head.rows = c->vocab_size; /* padded rows are never computed */
}

/* ---- the entry points ------------------------------------------------------------------- */

/* Validate a whole model file held in memory (data, size) and point the weights into it. Every
 * offset and size is checked against size before it is used; nothing is allocated but the
 * tokenizer's index and the list of layers. Also the entry point of the loader's fuzz target. */
static void load_model_file(ModelFile *f, const uint8_t *data, size_t size, Config *c, TransformerWeights *w,
                            Tokenizer *tok) {
    f->data = data;
    f->size = size;
    f->header = (const FileHeader *)(const void *)data;
    if (size < HEADER_SIZE)
        die("model file is %zu bytes, shorter than the %u-byte header (truncated?)", size, HEADER_SIZE);
    load_header(f, c);
    const FileHeader *h = f->header;
    if (h->tokenizer_offset < HEADER_SIZE || h->tokenizer_offset % TENSOR_ALIGN)
        die("model file: tokenizer offset %llu must be %u-aligned and after the header",
            (unsigned long long)h->tokenizer_offset, TENSOR_ALIGN);
    check_range("tokenizer section", h->tokenizer_offset, h->tokenizer_size, f->size);
    if (h->tensors_offset % TENSOR_ALIGN)
        die("model file: tensor table offset %llu is not %u-byte aligned",
            (unsigned long long)h->tensors_offset, TENSOR_ALIGN);
    if (h->tensors_offset < h->tokenizer_offset + h->tokenizer_size)
        die("model file: tensor table at %llu overlaps the tokenizer section (ends at %llu)",
            (unsigned long long)h->tensors_offset,
            (unsigned long long)(h->tokenizer_offset + h->tokenizer_size));
    check_range("tensor table", h->tensors_offset, (uint64_t)h->n_tensors * sizeof(TensorEntry), f->size);
    check_integrity(f, h->tensors_offset + (uint64_t)h->n_tensors * sizeof(TensorEntry));

    const char *err = tokenizer_init(tok, f->data + h->tokenizer_offset, h->tokenizer_size, h->version);
    if (err) die("model file: %s", err);
    if (tok->n_tokens != (uint32_t)c->vocab_size)
        die("model file: tokenizer has %u tokens but vocab_size is %d", tok->n_tokens, c->vocab_size);
    if (c->n_layer == 0) {
        if (h->n_tensors != 0) die("model file: a tokenizer-only file lists %u tensors", h->n_tensors);
        return;
    }
    load_tensors(f, c, w);
}

/* The file at path, mapped read-only with its pages read in now (MAP_POPULATE) rather than at
 * the first read of each weight. */
static void map_model_file(ModelFile *f, const char *path) {
    int fd = open(path, O_RDONLY);
    if (fd < 0) die("cannot open model file '%s': %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0) die("cannot stat model file '%s': %s", path, strerror(errno));
    if (S_ISDIR(st.st_mode)) die("model path '%s' is a directory, not a model file", path);
    if (!S_ISREG(st.st_mode)) die("model path '%s' is not a regular file", path);
    if ((uint64_t)st.st_size < HEADER_SIZE)
        die("model file '%s' is %lld bytes, shorter than the %u-byte header (truncated?)", path,
            (long long)st.st_size, HEADER_SIZE);
    void *map = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE | MAP_POPULATE, fd, 0);
    close(fd);
    if (map == MAP_FAILED) die("cannot map model file '%s': %s", path, strerror(errno));
    f->data = map;
    f->size = (size_t)st.st_size;
    f->mapped = 1;
}

/* The rotary tables (model.h): cos and sin of p * f_i for positions p < n_ctx and pairs i <
 * head_size / 2, in double, rounded to float once. freqs: the file's frequencies, or NULL for
 * theta^(-2i/head_size). */
static void rotary_tables(float **cos_out, float **sin_out, int n_ctx, int head_size, double theta, const float *freqs) {
    int half = head_size / 2;
    float *cos_table = calloc_or_die((size_t)n_ctx * half * sizeof(float), "rotary positions");
    float *sin_table = calloc_or_die((size_t)n_ctx * half * sizeof(float), "rotary positions");
    for (int i = 0; i < half; i++) {
        double freq = freqs ? (double)freqs[i] : pow(theta, -2.0 * i / head_size);
        for (int pos = 0; pos < n_ctx; pos++) {
            double angle = pos * freq;
            cos_table[(size_t)pos * half + i] = (float)cos(angle);
            sin_table[(size_t)pos * half + i] = (float)sin(angle);
        }
    }
    *cos_out = cos_table;
    *sin_out = sin_table;
}

static void free_model_file(ModelFile *f, TransformerWeights *w) {
    free(w->layer);
    free(w->sinusoid);
    free(w->rope_cos);
    free(w->rope_sin);
    if (f->mapped) munmap((void *)f->data, f->size);
    memset(w, 0, sizeof *w);
    memset(f, 0, sizeof *f);
}

#endif
