/* run.c: a GPT-2 style decoder in pure C (libc + OpenMP).
 *
 * Read top to bottom: errors, the model structs, loading and validating the weight file
 * (format in model.h), the neural-net kernels, the forward pass, the sampler, streaming
 * output, generation and the command line. The forward pass mirrors export/model.py's GPT
 * line for line, so the two can be compared number for number (tests/).
 */
#define _POSIX_C_SOURCE 200809L
#define _DEFAULT_SOURCE /* syscall() for AMX's permission request in kernels.h */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#include "kernels.h"
#include "model.h"

/* ---------------------------------------------------------------------------------------
 * Errors: one line on stderr, exit status 1. Fuzz builds (tests/fuzz_*.c) unwind to the
 * harness instead of exiting, since libFuzzer counts an exit as a failure. */

#ifdef FUZZING
#include <setjmp.h>
static jmp_buf fuzz_escape;
#endif

__attribute__((noreturn, format(printf, 1, 2)))
static void die(const char *fmt, ...) {
#ifdef FUZZING
    (void)fmt;
    longjmp(fuzz_escape, 1);
#else
    va_list ap;
    va_start(ap, fmt);
    fflush(stdout);
    fputs("error: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    exit(1);
#endif
}

/* Zeroed memory whose pages are mapped now, so that the first forward pass does not stop at
 * a page fault for every 4 KB of the key/value cache and buffers it writes. Large buffers ask
 * for 2 MB pages (Linux transparent huge pages), which also spares the TLB. Every page gets a
 * volatile write: a memset of calloc'd memory is dropped by the compiler as redundant. */
#define HUGE_PAGE ((size_t)2 << 20)
static void *alloc_or_die(size_t n, const char *what, int zeroed) {
    void *p = NULL;
#ifdef MADV_HUGEPAGE
    if (n >= 2 * HUGE_PAGE && posix_memalign(&p, HUGE_PAGE, n) == 0) {
        madvise(p, n, MADV_HUGEPAGE); /* advice only: 4 KB pages if refused */
        if (zeroed) memset(p, 0, n); /* else the caller writes every byte, touching them */
        return p;
    }
#endif
    p = calloc(1, n ? n : 1);
    if (!p) die("out of memory allocating %zu bytes for %s", n, what);
    for (size_t i = 0; i < n; i += 4096) ((volatile char *)p)[i] = 0;
    return p;
}

static void *malloc_or_die(size_t n, const char *what) { return alloc_or_die(n, what, 1); }

/* ---------------------------------------------------------------------------------------
 * The model: hyperparameters, weights (pointers into the mapped file), run-time state. */

typedef struct {
    int n_layer, n_head, n_embd, n_hidden, n_ctx;
    int vocab_size, vocab_padded;
    int head_size; /* n_embd / n_head */
    float ln_eps;
    int gelu, bias, tied_head, pos_kind, weight_type;
} Config;

/* Matrices (kernels.h's Matrix: float32, or q8_0 quants and scales) are stacked over layers;
 * layer_matrix() points at one layer's. Vectors are always float32. */
typedef struct {
    Matrix wte;                /* (vocab_padded, n_embd) token embedding */
    const float *wpe;          /* (n_ctx, n_embd) learned positions, or the sinusoid table */
    const float *ln_1_weight;  /* (layer, n_embd) */
    const float *ln_1_bias;    /* (layer, n_embd) or NULL */
    Matrix c_attn;             /* (layer, 3*n_embd, n_embd) fused query, key, value */
    const float *c_attn_bias;  /* (layer, 3*n_embd) or NULL */
    Matrix attn_proj;          /* (layer, n_embd, n_embd) */
    const float *attn_proj_bias;   /* (layer, n_embd) or NULL */
    const float *ln_2_weight;  /* (layer, n_embd) */
    const float *ln_2_bias;    /* (layer, n_embd) or NULL */
    Matrix c_fc;               /* (layer, n_hidden, n_embd) */
    const float *c_fc_bias;    /* (layer, n_hidden) or NULL */
    Matrix mlp_proj;           /* (layer, n_embd, n_hidden) */
    const float *mlp_proj_bias;    /* (layer, n_embd) or NULL */
    const float *ln_f_weight;  /* (n_embd) */
    const float *ln_f_bias;    /* (n_embd) or NULL */
    Matrix lm_head;            /* (vocab_padded, n_embd): wte when tied */
} TransformerWeights;

/* Prompts go through forward() in blocks of up to PREFILL_BLOCK tokens: enough to keep the
 * matrix kernels arithmetic-bound, small enough that the buffers stay modest. */
#define PREFILL_BLOCK 128

typedef struct {
    int block;       /* most tokens one forward() call takes: min(n_ctx, PREFILL_BLOCK) */
    float *x;        /* (block, n_embd) the residual stream */
    float *xb;       /* (block, n_embd) LayerNorm output, then the heads' concatenated outputs */
    float *xb2;      /* (block, n_embd) output of a projection, added to the residual */
    float *qkv;      /* (block, 3*n_embd) query, key and value of each position */
    float *att;      /* (block, n_head, n_ctx) attention weights of each position and head
                        (block rounded up to 16: a prompt's attention uses it 16 positions at a time) */
    float *qt;       /* (block / 16, n_head, head_size, 16) a prompt's queries, 16 positions at a time */
    float *hb;       /* (block, n_hidden) feed-forward hidden activations */
    float *logits;   /* (block, vocab_size) scores of the next token */
    MatmulScratch mm; /* matmul()'s buffers, sized for block tokens */
    float *key_cache;   /* (layer, n_head, n_ctx, head_size) */
    float *value_cache; /* (layer, n_head, n_ctx, head_size) */
    float *att_record;  /* (layer, n_head, T, T) attention weights kept for --attention, or NULL */
    int att_record_len; /* T */
} RunState;

typedef struct {
    Config config;
    TransformerWeights weights;
    RunState state;
    Tokenizer tokenizer;
    float *sinusoid;   /* owned (n_ctx, n_embd) table for POS_SINUSOIDAL, else NULL */
    void *packed_copy; /* owned: the matrices rearranged for q8_0 prefill (pack_for_prefill), or NULL */
    const uint8_t *data; /* the whole file, mapped */
    size_t file_size;
    int mapped;          /* data came from mmap (and must be unmapped) */
    const FileHeader *header;
} Transformer;

/* ---------------------------------------------------------------------------------------
 * Loading: map the file, then check every field, size and offset in 64-bit arithmetic
 * before any weight is touched (SPEC section 2). */

#define HINT " (re-export the model with export/export.py)"

/* Sizes multiply with an overflow check: a hostile header must not wrap around. */
static uint64_t mul_or_die(uint64_t a, uint64_t b, const char *what) {
    uint64_t r;
    if (__builtin_mul_overflow(a, b, &r)) die("model file: %s overflows 64 bits", what);
    return r;
}

typedef struct {
    const char *name;
    uint64_t layers, rows, cols; /* shape (layers, rows, cols); layers = 1 for unstacked */
    Matrix *matrix;              /* where a matrix goes (quantized in a q8_0 file), or NULL */
    const float **vector;        /* where a float32 vector or table goes */
} TensorSpec;

/* The tensors a header implies, in file order (the exporter writes the same list). */
static int tensor_list(const Config *c, TransformerWeights *w, TensorSpec *out) {
    uint64_t L = (uint64_t)c->n_layer, C = (uint64_t)c->n_embd, H = (uint64_t)c->n_hidden;
    uint64_t Vp = (uint64_t)c->vocab_padded;
    int n = 0;
#define M(nm, l, r, k, d) out[n++] = (TensorSpec){nm, l, r, k, d, NULL}
#define V(nm, l, r, k, d) out[n++] = (TensorSpec){nm, l, r, k, NULL, d}
    M("wte", 1, Vp, C, &w->wte);
    if (c->pos_kind == POS_LEARNED) V("wpe", 1, (uint64_t)c->n_ctx, C, &w->wpe);
    V("ln_1.weight", L, 1, C, &w->ln_1_weight);
    if (c->bias) V("ln_1.bias", L, 1, C, &w->ln_1_bias);
    M("attn.c_attn.weight", L, 3 * C, C, &w->c_attn);
    if (c->bias) V("attn.c_attn.bias", L, 1, 3 * C, &w->c_attn_bias);
    M("attn.c_proj.weight", L, C, C, &w->attn_proj);
    if (c->bias) V("attn.c_proj.bias", L, 1, C, &w->attn_proj_bias);
    V("ln_2.weight", L, 1, C, &w->ln_2_weight);
    if (c->bias) V("ln_2.bias", L, 1, C, &w->ln_2_bias);
    M("mlp.c_fc.weight", L, H, C, &w->c_fc);
    if (c->bias) V("mlp.c_fc.bias", L, 1, H, &w->c_fc_bias);
    M("mlp.c_proj.weight", L, C, H, &w->mlp_proj);
    if (c->bias) V("mlp.c_proj.bias", L, 1, C, &w->mlp_proj_bias);
    V("ln_f.weight", 1, 1, C, &w->ln_f_weight);
    if (c->bias) V("ln_f.bias", 1, 1, C, &w->ln_f_bias);
    if (!c->tied_head) M("lm_head.weight", 1, Vp, C, &w->lm_head);
#undef M
#undef V
    return n;
}

/* In a q8_0 tensor of n values the float scales follow the quants, 4-byte aligned. */
static uint64_t q8_scales_offset(uint64_t n) { return (n + 3) & ~(uint64_t)3; }

static uint64_t tensor_bytes(const Config *c, const TensorSpec *t) {
    uint64_t n = mul_or_die(mul_or_die(t->layers, t->rows, t->name), t->cols, t->name);
    if (c->weight_type == WT_Q8_0 && t->matrix) /* quants, pad to 4, one float per group */
        return q8_scales_offset(n) + n / Q8_GROUP * 4;
    return mul_or_die(n, 4, t->name);
}

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

static void load_header(Transformer *t) {
    const FileHeader *h = t->header;
    if (h->magic != MODEL_MAGIC)
        die("model file: bad magic (not a model file written by export/export.py)");
    if (h->version != MODEL_VERSION)
        die("model file: format version %u, this program reads version %u" HINT, h->version,
            MODEL_VERSION);
    field("header_size", h->header_size, HEADER_SIZE, HEADER_SIZE);
    if (h->file_size != t->file_size)
        die("model file: header says %llu bytes but the file has %zu (truncated or extended?)",
            (unsigned long long)h->file_size, t->file_size);
    Config *c = &t->config;
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
    c->bias = field("bias", h->bias, 0, 1);
    c->tied_head = field("tied_head", h->tied_head, 0, 1);
    c->pos_kind = field("pos_kind", h->pos_kind, 0, 1);
    c->weight_type = field("weight_type", h->weight_type, WT_F32, WT_Q8_0);
    if (c->weight_type == WT_F32) field("group_size", h->group_size, 0, 0);
    else {
        field("group_size", h->group_size, Q8_GROUP, Q8_GROUP);
        if (c->n_embd % Q8_GROUP || c->n_hidden % Q8_GROUP)
            die("model file: q8_0 needs n_embd and n_hidden to be multiples of %u, found %d and %d",
                Q8_GROUP, c->n_embd, c->n_hidden);
    }
    if (c->n_embd % c->n_head)
        die("model file: n_embd %d is not a multiple of n_head %d", c->n_embd, c->n_head);
    if (c->pos_kind == POS_SINUSOIDAL && c->n_embd % 2)
        die("model file: sinusoidal positions need an even n_embd, found %d", c->n_embd);
    c->head_size = c->n_embd / c->n_head;
    c->ln_eps = h->ln_eps;
    if (!(c->ln_eps > 0.0f && c->ln_eps < 1.0f)) /* also false for NaN */
        die("model file: ln_eps is %g, expected a small positive number", (double)c->ln_eps);
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
static void check_integrity(const Transformer *t, uint64_t meta_end) {
    const FileHeader *h = t->header;
    for (size_t i = 0; i < sizeof h->reserved; i++)
        if (h->reserved[i]) die("model file: reserved header byte %zu is not zero (corrupted?)", 108 + i);
    FileHeader copy;
    memcpy(&copy, h, sizeof copy);
    copy.meta_crc32 = 0;
    uint32_t crc = crc32_update(0, (const uint8_t *)&copy, sizeof copy);
    crc = crc32_update(crc, t->data + HEADER_SIZE, (size_t)(meta_end - HEADER_SIZE));
#ifndef FUZZING /* the fuzzer's mutations should reach the checks below, not stop here */
    if (crc != h->meta_crc32)
#else
    if (crc != h->meta_crc32 && 0)
#endif
        die("model file: checksum of header, tokenizer and tensor table is %08x, the header says"
            " %08x (the file is corrupted)", crc, h->meta_crc32);
}

static void load_tensors(Transformer *t) {
    const FileHeader *h = t->header;
    Config *c = &t->config;
    uint64_t file_size = t->file_size;
    TensorSpec specs[32];
    int n = tensor_list(c, &t->weights, specs);
    if (h->n_tensors != (uint32_t)n)
        die("model file: header lists %u tensors, this configuration has %d" HINT, h->n_tensors, n);
    const TensorEntry *table = (const TensorEntry *)(const void *)(t->data + h->tensors_offset);
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
        check_range(e.name, e.offset, e.size, file_size);
        const uint8_t *at = t->data + e.offset;
        if (specs[i].vector) *specs[i].vector = (const float *)(const void *)at;
        else if (c->weight_type == WT_F32) specs[i].matrix->f32 = (const float *)(const void *)at;
        else {
            uint64_t count = specs[i].layers * specs[i].rows * specs[i].cols;
            specs[i].matrix->q = (const int8_t *)at;
            specs[i].matrix->scale = (const float *)(const void *)(at + q8_scales_offset(count));
        }
        end = e.offset + e.size;
    }
    if (c->tied_head) t->weights.lm_head = t->weights.wte;
}

/* The fixed encoding of "Attention Is All You Need" (section 3.5), computed in double like
 * export/model.py and rounded to float once. */
static float *sinusoid_table(int n_ctx, int n_embd) {
    float *pe = malloc_or_die((size_t)n_ctx * (size_t)n_embd * sizeof(float), "positions");
    for (int pos = 0; pos < n_ctx; pos++)
        for (int i = 0; i < n_embd; i += 2) {
            double angle = pos / pow(10000.0, (double)i / n_embd);
            pe[(size_t)pos * n_embd + i] = (float)sin(angle);
            pe[(size_t)pos * n_embd + i + 1] = (float)cos(angle);
        }
    return pe;
}

static void build_state(RunState *s, const Config *c) {
    size_t C = (size_t)c->n_embd, H = (size_t)c->n_hidden, B;
    uint64_t cache = mul_or_die(mul_or_die((uint64_t)c->n_layer, (uint64_t)c->n_ctx, "KV cache"),
                                mul_or_die(C, sizeof(float), "KV cache"), "KV cache");
    if (cache > SIZE_MAX / 2) die("model file: the key/value cache would need %llu bytes",
                                  (unsigned long long)cache);
    s->block = c->n_ctx < PREFILL_BLOCK ? c->n_ctx : PREFILL_BLOCK;
    B = (size_t)s->block;
    s->x = malloc_or_die(B * C * sizeof(float), "x");
    s->xb = malloc_or_die(B * C * sizeof(float), "xb");
    s->xb2 = malloc_or_die(B * C * sizeof(float), "xb2");
    s->qkv = malloc_or_die(B * 3 * C * sizeof(float), "qkv");
    s->att = malloc_or_die((B + 15) / 16 * 16 * (size_t)c->n_head * (size_t)c->n_ctx * sizeof(float), "att");
    s->qt = malloc_or_die((B + 15) / 16 * 16 * C * sizeof(float), "queries");
    s->hb = malloc_or_die(B * H * sizeof(float), "hb");
    s->logits = malloc_or_die(B * (size_t)c->vocab_size * sizeof(float), "logits");
    size_t B16 = (B + 15) / 16 * 16, widest = C > H ? C : H; /* AMX takes tokens 16 at a time */
    s->mm.q = malloc_or_die(B16 * widest, "quantized activations");
    s->mm.scale = malloc_or_die(B16 * widest / Q8_GROUP * sizeof(float) + 4, "scales");
#ifdef TILE_ROWS
    if (c->weight_type == WT_F32 && B > 1) { /* float32 prefill tiles take the tokens transposed */
        size_t T32 = (B + TILE_TOKENS - 1) / TILE_TOKENS * TILE_TOKENS;
        s->mm.xt = aligned_alloc(64, widest * T32 * sizeof(float));
        if (!s->mm.xt) die("out of memory for the prefill buffer");
    }
#endif
    s->key_cache = malloc_or_die((size_t)cache, "key cache");
    s->value_cache = malloc_or_die((size_t)cache, "value cache");
}

static void free_state(RunState *s) {
    free(s->x); free(s->xb); free(s->xb2); free(s->qkv); free(s->att); free(s->qt); free(s->hb);
    free(s->logits); free(s->mm.q); free(s->mm.scale); free(s->mm.xt);
    free(s->key_cache); free(s->value_cache);
}

/* Validate a whole model file held in memory and point the weights into it. Every offset and
 * size is checked against size before it is used; nothing is allocated but the tokenizer's
 * index. Also the entry point of the loader's fuzz target. */
static void load_model(Transformer *t, const uint8_t *data, size_t size) {
    t->data = data;
    t->file_size = size;
    t->header = (const FileHeader *)(const void *)data;
    if (size < HEADER_SIZE)
        die("model file is %zu bytes, shorter than the %u-byte header (truncated?)", size, HEADER_SIZE);
    load_header(t);
    const FileHeader *h = t->header;
    if (h->tokenizer_offset < HEADER_SIZE || h->tokenizer_offset % TENSOR_ALIGN)
        die("model file: tokenizer offset %llu must be %u-aligned and after the header",
            (unsigned long long)h->tokenizer_offset, TENSOR_ALIGN);
    check_range("tokenizer section", h->tokenizer_offset, h->tokenizer_size, t->file_size);
    if (h->tensors_offset % TENSOR_ALIGN)
        die("model file: tensor table offset %llu is not %u-byte aligned",
            (unsigned long long)h->tensors_offset, TENSOR_ALIGN);
    if (h->tensors_offset < h->tokenizer_offset + h->tokenizer_size)
        die("model file: tensor table at %llu overlaps the tokenizer section (ends at %llu)",
            (unsigned long long)h->tensors_offset,
            (unsigned long long)(h->tokenizer_offset + h->tokenizer_size));
    check_range("tensor table", h->tensors_offset, (uint64_t)h->n_tensors * sizeof(TensorEntry),
                t->file_size);
    check_integrity(t, h->tensors_offset + (uint64_t)h->n_tensors * sizeof(TensorEntry));

    const char *err = tokenizer_init(&t->tokenizer, t->data + h->tokenizer_offset,
                                     h->tokenizer_size);
    if (err) die("model file: %s", err);
    if (t->tokenizer.n_tokens != (uint32_t)t->config.vocab_size)
        die("model file: tokenizer has %u tokens but vocab_size is %d", t->tokenizer.n_tokens,
            t->config.vocab_size);
    if (t->config.n_layer == 0) {
        if (h->n_tensors != 0) die("model file: a tokenizer-only file lists %u tensors", h->n_tensors);
        return;
    }
    load_tensors(t);
}

#ifdef Q8_PACKED_PREFILL
/* With q8_0 weights, prompts go through AMX tile products or VNNI / maddubs kernels that read
 * the weights in their own order (kernels.h's q8_pack): a second copy of every matrix a prompt
 * multiplies, made once here, as large as its quants and scales (plus, for VNNI, one int32 per
 * group). Matrices of a layer have a multiple of 16 rows (q8_0 widths are multiples of 32);
 * of the output head, the rows past the last multiple of 16 are left to the other kernels. */
static size_t packed_values(const Config *c, const TransformerWeights *w, const TensorSpec *spec) {
    if (!spec->matrix || (spec->matrix == &w->wte && !c->tied_head)) return 0; /* wte: a lookup */
    return spec->layers * (spec->rows / 16 * 16) * spec->cols;
}

static void pack_for_prefill(Transformer *t) {
    const Config *c = &t->config;
    if (c->weight_type != WT_Q8_0 || t->state.block < 2) return;
#ifdef VNNI_PREFILL
    int corr = !amx_available(); /* without AMX, the VNNI kernel, which needs correction terms */
#else
    int corr = 0; /* AMX or AVX2's maddubs (an AMX build has AVX2, so one of them runs) */
#endif
    TensorSpec specs[32];
    int n = tensor_list(c, &t->weights, specs);
    size_t per_group = Q8_GROUP + sizeof(float) + (corr ? sizeof(int32_t) : 0), total = 0;
    for (int i = 0; i < n; i++) total += packed_values(c, &t->weights, &specs[i]) / Q8_GROUP * per_group;
    t->packed_copy = alloc_or_die(total, "the prefill copy of the weights", 0); /* q8_pack fills it */
    int8_t *at = t->packed_copy;
    for (int i = 0; i < n; i++) {
        size_t values = packed_values(c, &t->weights, &specs[i]), groups = values / Q8_GROUP;
        if (values == 0) continue;
        Matrix *m = specs[i].matrix;
        float *scales = (float *)(void *)(at + values);
        int32_t *corrections = corr ? (int32_t *)(void *)(scales + groups) : NULL;
        q8_pack(at, scales, corrections, m->q, m->scale, values / specs[i].cols, (int)specs[i].cols);
        m->tiles = at;
        m->tile_scale = scales;
        m->tile_corr = corrections;
        at += groups * per_group;
    }
    if (c->tied_head) t->weights.lm_head = t->weights.wte;
}
#endif

/* What generation needs beyond the file: the sinusoid table, the run-time buffers and, for
 * q8_0, the weights rearranged for prefill. */
static void build_run(Transformer *t) {
    if (t->config.pos_kind == POS_SINUSOIDAL) {
        t->sinusoid = sinusoid_table(t->config.n_ctx, t->config.n_embd);
        t->weights.wpe = t->sinusoid;
    }
    build_state(&t->state, &t->config);
#ifdef Q8_PACKED_PREFILL
    pack_for_prefill(t);
#endif
}

static void build_transformer(Transformer *t, const char *path) {
    memset(t, 0, sizeof *t);
    int fd = open(path, O_RDONLY);
    if (fd < 0) die("cannot open model file '%s': %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0) die("cannot stat model file '%s': %s", path, strerror(errno));
    if (S_ISDIR(st.st_mode)) die("model path '%s' is a directory, not a model file", path);
    if (!S_ISREG(st.st_mode)) die("model path '%s' is not a regular file", path);
    if ((uint64_t)st.st_size < HEADER_SIZE)
        die("model file '%s' is %lld bytes, shorter than the %u-byte header (truncated?)", path,
            (long long)st.st_size, HEADER_SIZE);
    /* MAP_POPULATE: the pages are mapped now rather than at the first read of each weight */
    void *map = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE | MAP_POPULATE, fd, 0);
    close(fd);
    if (map == MAP_FAILED) die("cannot map model file '%s': %s", path, strerror(errno));
    t->mapped = 1;
    load_model(t, map, (size_t)st.st_size);
    if (t->config.n_layer > 0) build_run(t);
}

/* Frees whatever was built, also after a load that stopped part-way (fuzzing). */
static void free_transformer(Transformer *t) {
    free_state(&t->state);
    free(t->sinusoid);
    free(t->packed_copy);
    tokenizer_free(&t->tokenizer);
    if (t->mapped) munmap((void *)t->data, t->file_size);
    memset(t, 0, sizeof *t);
}

/* ---------------------------------------------------------------------------------------
 * Neural-net blocks. Each kernel writes its first argument. */

/* LayerNorm over size values: (x - mean) / sqrt(variance + eps) * weight + bias. */
static void layernorm(float *out, const float *x, const float *weight, const float *bias,
                      int size, float eps) {
    float mean = 0.0f, var = 0.0f;
    for (int i = 0; i < size; i++) mean += x[i];
    mean /= size;
    for (int i = 0; i < size; i++) var += (x[i] - mean) * (x[i] - mean);
    var /= size;
    float inv_std = 1.0f / sqrtf(var + eps);
    for (int i = 0; i < size; i++)
        out[i] = (x[i] - mean) * inv_std * weight[i] + (bias ? bias[i] : 0.0f);
}

/* One layer's (rows, cols) matrix out of a stack over layers. */
static Matrix layer_matrix(Matrix m, int layer, size_t rows, size_t cols) {
    size_t n = (size_t)layer * rows * cols;
    if (m.f32) return (Matrix){.f32 = m.f32 + n};
    return (Matrix){.q = m.q + n, .scale = m.scale + n / Q8_GROUP,
                    .tiles = m.tiles ? m.tiles + n : NULL,
                    .tile_scale = m.tile_scale ? m.tile_scale + n / Q8_GROUP : NULL,
                    .tile_corr = m.tile_corr ? m.tile_corr + n / Q8_GROUP : NULL};
}

/* nn.Linear on T positions: out (T, d) = x (T, n) @ W^T + bias; the kernels are in kernels.h
 * (a matrix-vector product split over rows when T = 1, cache-blocked tiles when T > 1). */
static void linear(RunState *s, float *out, const float *x, Matrix w, const float *bias, int T,
                   int n, int d) {
    matmul(out, x, w, bias, T, n, d, &s->mm);
}

/* In-place softmax: subtract the max for stability, exponentiate, normalise. */
static void softmax(float *x, int size) {
    float max = x[0];
    for (int i = 1; i < size; i++) if (x[i] > max) max = x[i];
    float sum = exp_and_sum(x, size, max); /* x[i] = exp(x[i] - max), kernels.h */
    for (int i = 0; i < size; i++) x[i] /= sum;
}

/* GELU, either GPT-2's tanh approximation or the exact erf form (nanoGPT's nn.GELU()). */
static void gelu_span(float *x, int size, int kind) {
#if defined(__AVX512F__)
    if (kind == GELU_TANH) { gelu_tanh_avx512(x, size); return; }
#endif
    for (int i = 0; i < size; i++) {
        float v = x[i];
        if (kind == GELU_TANH)
            x[i] = 0.5f * v * (1.0f + tanhf(0.7978845608f * (v + 0.044715f * v * v * v)));
        else
            x[i] = 0.5f * v * (1.0f + erff(v * 0.70710678118654752f));
    }
}

/* Element-wise steps over a prompt's block are split between threads in spans of SPAN values;
 * one token's (generation) stay on one thread, where starting the others would cost more. */
#define SPAN 8192

static void gelu(float *x, int size, int kind) {
    int at;
#pragma omp parallel for schedule(static) if (size > SPAN)
    for (at = 0; at < size; at += SPAN) gelu_span(x + at, size - at < SPAN ? size - at : SPAN, kind);
}

static void residual_add(float *x, const float *delta, int size) {
    int i;
#pragma omp parallel for schedule(static) if (size > SPAN)
    for (i = 0; i < size; i++) x[i] += delta[i];
}

static float dot(const float *a, const float *b, int n) { return dot_f32(a, b, n); }

/* One head of causal attention for the query at position pos: weights over keys 0..pos
 * (later positions are masked, i.e. never looked at), then the weighted sum of values.
 * keys, values: (n_ctx, head_size) of this head; att: (n_ctx) scratch; out: (head_size). */
static void attention_head(float *out, float *att, const float *query, const float *keys,
                           const float *values, int pos, int head_size) {
    float scale = 1.0f / sqrtf((float)head_size);
    for (int t = 0; t <= pos; t++)
        att[t] = dot(query, keys + (size_t)t * head_size, head_size) * scale;
    softmax(att, pos + 1);
    weighted_sum(out, att, values, pos + 1, head_size); /* kernels.h */
}

/* Layer l's keys and values of positions pos..pos+T-1 (from qkv) into the cache. */
static void store_keys_values(Transformer *t, int l, int T, int pos) {
    const Config *c = &t->config;
    RunState *s = &t->state;
    int C = c->n_embd, hs = c->head_size;
    size_t C3 = 3 * (size_t)C, layer_cache = (size_t)l * c->n_head * c->n_ctx * hs;
    int h;
#pragma omp parallel for schedule(static) if (T > 1)
    for (h = 0; h < c->n_head; h++) /* each head's rows are consecutive in the cache */
        for (int i = 0; i < T; i++) {
            size_t at = layer_cache + ((size_t)h * c->n_ctx + pos + i) * hs;
            memcpy(s->key_cache + at, s->qkv + i * C3 + C + h * hs, (size_t)hs * sizeof(float));
            memcpy(s->value_cache + at, s->qkv + i * C3 + 2 * C + h * hs, (size_t)hs * sizeof(float));
        }
}

/* Causal attention of positions pos..pos+T-1 in layer l, every head: the queries in qkv, keys
 * and values in the cache; each (position, head) writes its head_size slice of xb. A prompt
 * with AVX-512 goes 16 positions of a head at a time (kernels.h's attention_queries16, the
 * same computation with the positions in a register's lanes); otherwise attention_head() per
 * (position, head), which also keeps the weights for --attention. */
static void multi_head_attention(Transformer *t, int l, int T, int pos) {
    const Config *c = &t->config;
    RunState *s = &t->state;
    int C = c->n_embd, hs = c->head_size, n_head = c->n_head, job;
    size_t C3 = 3 * (size_t)C, layer_cache = (size_t)l * n_head * c->n_ctx * hs;
#if defined(__AVX512F__)
    if (T > 1 && hs % 16 == 0 && !s->att_record) {
#pragma omp parallel for schedule(dynamic, 1)
        for (job = 0; job < (T + 15) / 16 * n_head; job++) {
            int i = job / n_head * 16, h = job % n_head;
            size_t head_cache = layer_cache + (size_t)h * c->n_ctx * hs;
            attention_queries16(s->xb + (size_t)i * C + h * hs, C, s->att + (size_t)job * 16 * c->n_ctx,
                                s->qt + (size_t)job * 16 * hs, s->qkv + i * C3 + h * hs, (int)C3,
                                s->key_cache + head_cache, s->value_cache + head_cache, pos + i,
                                T - i < 16 ? T - i : 16, hs);
        }
        return;
    }
#endif
#pragma omp parallel for schedule(dynamic, 1)
    for (job = 0; job < T * n_head; job++) {
        int i = job / n_head, h = job % n_head;
        size_t head_cache = layer_cache + (size_t)h * c->n_ctx * hs;
        attention_head(s->xb + (size_t)i * C + h * hs, s->att + (size_t)job * c->n_ctx,
                       s->qkv + i * C3 + h * hs, s->key_cache + head_cache,
                       s->value_cache + head_cache, pos + i, hs);
    }
    if (s->att_record) /* keep the weights for the attention picture */
        for (int i = 0; i < T; i++)
            for (int h = 0; h < n_head; h++)
                memcpy(s->att_record + (((size_t)l * n_head + h) * s->att_record_len + pos + i) *
                                           s->att_record_len,
                       s->att + ((size_t)i * n_head + h) * c->n_ctx, (size_t)(pos + i + 1) * sizeof(float));
}

/* ---------------------------------------------------------------------------------------
 * The forward pass for T tokens at positions pos .. pos+T-1 (T = 1 when generating, up to
 * state.block for a prompt). It fills the key/value cache and returns the logits of the last
 * position, or of every position, (T, vocab_size), when all_logits is set. Mirrors GPT.forward
 * in export/model.py: every step below works on all T positions at once. */

static void embed(const Transformer *t, float *x, uint32_t token, int pos) {
    int C = t->config.n_embd;
    Matrix wte = t->weights.wte;
    const float *position = t->weights.wpe + (size_t)pos * C;
    if (wte.f32) {
        const float *tok = wte.f32 + (size_t)token * C;
        for (int i = 0; i < C; i++) x[i] = tok[i] + position[i];
    } else { /* a q8_0 row: quant times its group's scale */
        const int8_t *q = wte.q + (size_t)token * C;
        const float *scale = wte.scale + (size_t)token * C / Q8_GROUP;
        for (int i = 0; i < C; i++) x[i] = q[i] * scale[i / Q8_GROUP] + position[i];
    }
}

static void layernorm_rows(float *out, const float *x, const float *weight, const float *bias,
                           int T, int size, float eps) {
    int i;
#pragma omp parallel for schedule(static) if (T > 1)
    for (i = 0; i < T; i++)
        layernorm(out + (size_t)i * size, x + (size_t)i * size, weight, bias, size, eps);
}

static float *forward(Transformer *t, const uint32_t *tokens, int T, int pos, int all_logits) {
    const Config *c = &t->config;
    const TransformerWeights *w = &t->weights;
    RunState *s = &t->state;
    int C = c->n_embd, H = c->n_hidden;
    size_t C3 = 3 * (size_t)C;
    float *x = s->x;

    /* token embedding plus positional encoding */
    for (int i = 0; i < T; i++) embed(t, x + (size_t)i * C, tokens[i], pos + i);

    for (int l = 0; l < c->n_layer; l++) {
        size_t lC = (size_t)l * C;
        const float *bias_or_null; /* biases exist for all or none of the layers' parts */

        /* attention: LayerNorm, fused query/key/value projection */
        layernorm_rows(s->xb, x, w->ln_1_weight + lC, c->bias ? w->ln_1_bias + lC : NULL, T, C,
                       c->ln_eps);
        bias_or_null = c->bias ? w->c_attn_bias + l * C3 : NULL;
        linear(s, s->qkv, s->xb, layer_matrix(w->c_attn, l, C3, C), bias_or_null, T, C, (int)C3);

        /* causal multi-head attention: each position's key and value go to the cache, then each
         * (position, head) attends over the cache up to its position and writes its slice of xb */
        store_keys_values(t, l, T, pos);
        multi_head_attention(t, l, T, pos);

        /* output projection and residual */
        bias_or_null = c->bias ? w->attn_proj_bias + lC : NULL;
        linear(s, s->xb2, s->xb, layer_matrix(w->attn_proj, l, C, C), bias_or_null, T, C, C);
        residual_add(x, s->xb2, T * C);

        /* feed-forward: LayerNorm, expand, GELU, project back, residual */
        layernorm_rows(s->xb, x, w->ln_2_weight + lC, c->bias ? w->ln_2_bias + lC : NULL, T, C,
                       c->ln_eps);
        bias_or_null = c->bias ? w->c_fc_bias + (size_t)l * H : NULL;
        linear(s, s->hb, s->xb, layer_matrix(w->c_fc, l, H, C), bias_or_null, T, C, H);
        gelu(s->hb, T * H, c->gelu);
        bias_or_null = c->bias ? w->mlp_proj_bias + lC : NULL;
        linear(s, s->xb2, s->hb, layer_matrix(w->mlp_proj, l, C, H), bias_or_null, T, H, C);
        residual_add(x, s->xb2, T * C);
    }

    /* final LayerNorm and the output head, for the last position unless all are wanted;
     * padded vocabulary rows are never computed */
    int first = all_logits ? 0 : T - 1;
    layernorm_rows(x + (size_t)first * C, x + (size_t)first * C, w->ln_f_weight, w->ln_f_bias,
                   T - first, C, c->ln_eps);
    linear(s, s->logits, x + (size_t)first * C, w->lm_head, NULL, T - first, C, c->vocab_size);
    return s->logits;
}

/* Tokens in the forward() block that starts at pos when the input ends at end. */
static int block_at(const Transformer *t, long pos, long end) {
    return end - pos < t->state.block ? (int)(end - pos) : t->state.block;
}

/* The tokens ids[0..n) at positions 0..n-1 through forward() in blocks (the prompt's prefill);
 * returns the last position's logits. */
static float *prefill(Transformer *t, const uint32_t *ids, long n) {
    float *logits = NULL;
    for (long pos = 0; pos < n; pos += t->state.block)
        logits = forward(t, ids + pos, block_at(t, pos, n), (int)pos, 0);
    return logits;
}

/* ---------------------------------------------------------------------------------------
 * The sampler. export/model.py's generate() reproduces it exactly:
 *
 *   random generator: xorshift64* (Vigna, "An experimental exploration of Marsaglia's
 *     xorshift generators", 2016): state ^= state >> 12; state ^= state << 25;
 *     state ^= state >> 27; output = state * 0x2545F4914F6CDD1D (mod 2^64).
 *     Seeding: state = seed + 0x9E3779B97F4A7C15 (mod 2^64), or 1 if that is 0.
 *     uniform() = (output >> 11) * 2^-53, in [0, 1).
 *   temperature 0: the argmax (lowest id on ties); no random number is drawn.
 *   otherwise, in double precision:
 *     1. p_i = exp(z_i - max z) / sum_j exp(z_j - max z), z = logits / temperature, for the
 *        real vocabulary only, sums taken in id order;
 *     2. candidates ordered by p descending, ties by lower id;
 *     3. top-k (k > 0): keep the first k candidates;
 *     4. top-p (p < 1): keep the shortest prefix whose running sum reaches p * mass, where
 *        mass = 1 without top-k, else the sum of the k kept p (in order);
 *     5. the kept candidates are put back in id order; r = uniform() * (sum of their p, in id
 *        order); the chosen token is the first whose running sum exceeds r (the last one if
 *        rounding leaves none). Walking in id order, not probability order, keeps the choice
 *        stable when near-equal probabilities would sort differently after rounding noise.
 *   Exactly one uniform() is drawn per sampled token.
 */

typedef struct {
    uint64_t rng_state;
    double temperature;
    int top_k;
    double top_p;
    double *probs;   /* (vocab_size) */
    double *scratch; /* (vocab_size) for finding the k-th largest probability */
    int *candidates; /* (vocab_size) ids, sorted by probability */
} Sampler;

static uint64_t rng_next(uint64_t *state) {
    *state ^= *state >> 12;
    *state ^= *state << 25;
    *state ^= *state >> 27;
    return *state * 0x2545F4914F6CDD1Dull;
}

static double rng_uniform(uint64_t *state) {
    return (double)(rng_next(state) >> 11) * (1.0 / 9007199254740992.0);
}

static void build_sampler(Sampler *s, int vocab_size, double temperature, int top_k, double top_p,
                          uint64_t seed) {
    s->rng_state = seed + 0x9E3779B97F4A7C15ull;
    if (s->rng_state == 0) s->rng_state = 1;
    s->temperature = temperature;
    s->top_k = top_k;
    s->top_p = top_p;
    s->probs = malloc_or_die((size_t)vocab_size * sizeof(double), "sampler");
    s->scratch = malloc_or_die((size_t)vocab_size * sizeof(double), "sampler");
    s->candidates = malloc_or_die((size_t)vocab_size * sizeof(int), "sampler");
}

static void free_sampler(Sampler *s) {
    free(s->probs);
    free(s->scratch);
    free(s->candidates);
}

static int argmax(const float *x, int n) {
    int best = 0;
    for (int i = 1; i < n; i++) if (x[i] > x[best]) best = i;
    return best;
}

/* The k-th largest of x[0..n) (k from 1), by quickselect; reorders x. */
static double kth_largest(double *x, int n, int k) {
    int lo = 0, hi = n - 1, want = k - 1;
    while (lo < hi) {
        double pivot = x[lo + (hi - lo) / 2];
        int i = lo, j = hi;
        while (i <= j) { /* larger values to the left */
            while (x[i] > pivot) i++;
            while (x[j] < pivot) j--;
            if (i <= j) { double tmp = x[i]; x[i] = x[j]; x[j] = tmp; i++; j--; }
        }
        if (want <= j) hi = j;
        else if (want >= i) lo = i;
        else break;
    }
    return x[want];
}

static const double *sort_probs; /* qsort's comparator has no context argument */

/* Probability descending, then id ascending: a total order, so the result never depends on
 * the sort algorithm. */
static int by_probability(const void *a, const void *b) {
    int i = *(const int *)a, j = *(const int *)b;
    if (sort_probs[i] != sort_probs[j]) return sort_probs[i] > sort_probs[j] ? -1 : 1;
    return (i > j) - (i < j);
}

static int by_id(const void *a, const void *b) {
    int i = *(const int *)a, j = *(const int *)b;
    return (i > j) - (i < j);
}

static int sample(Sampler *s, const float *logits, int n) {
    if (s->temperature == 0.0) return argmax(logits, n);
    double *p = s->probs, max = logits[argmax(logits, n)] / s->temperature, sum = 0.0;
    for (int i = 0; i < n; i++) { p[i] = exp(logits[i] / s->temperature - max); sum += p[i]; }
    for (int i = 0; i < n; i++) p[i] /= sum;

    /* Candidates that can survive truncation. Dropping them before the sort changes nothing:
     * with top-k only tokens at least as likely as the k-th can be kept; with top-p alone,
     * tokens below (1 - top_p) / (n - 1) together hold less than 1 - top_p, so the nucleus
     * never reaches them. */
    int n_cand = 0;
    double cutoff = 0.0;
    if (s->top_k > 0 && s->top_k < n) {
        memcpy(s->scratch, p, (size_t)n * sizeof(double));
        cutoff = kth_largest(s->scratch, n, s->top_k);
    } else if (s->top_p < 1.0 && n > 1) {
        cutoff = (1.0 - s->top_p) / (n - 1);
    }
    for (int i = 0; i < n; i++) if (p[i] >= cutoff) s->candidates[n_cand++] = i;
    if (n_cand == 0) for (int i = 0; i < n; i++) s->candidates[n_cand++] = i; /* rounding */
    sort_probs = p;
    qsort(s->candidates, (size_t)n_cand, sizeof(int), by_probability);
    int top_k_applied = s->top_k > 0 && s->top_k < n;
    if (top_k_applied && s->top_k < n_cand) n_cand = s->top_k;

    if (s->top_p < 1.0) {
        double mass = top_k_applied ? 0.0 : 1.0, running = 0.0;
        if (top_k_applied) for (int i = 0; i < n_cand; i++) mass += p[s->candidates[i]];
        for (int i = 0; i < n_cand; i++) {
            running += p[s->candidates[i]];
            if (running >= s->top_p * mass) { n_cand = i + 1; break; }
        }
    }
    qsort(s->candidates, (size_t)n_cand, sizeof(int), by_id);
    double kept = 0.0, running = 0.0;
    for (int i = 0; i < n_cand; i++) kept += p[s->candidates[i]];
    double r = rng_uniform(&s->rng_state) * kept;
    for (int i = 0; i < n_cand; i++) {
        running += p[s->candidates[i]];
        if (running > r) return s->candidates[i];
    }
    return s->candidates[n_cand - 1];
}

/* ---------------------------------------------------------------------------------------
 * Streaming output: stdout gets exactly the prompt's bytes then the generated bytes. A UTF-8
 * character split across tokens is held back until it is whole. */

typedef struct {
    uint8_t pending[8]; /* at most 3 bytes of an incomplete character are ever held */
    size_t n_pending;
} Output;

static void write_or_die(const void *bytes, size_t n) {
    if (n && fwrite(bytes, 1, n, stdout) != n) {
        if (errno == EPIPE) exit(0); /* the reader went away (e.g. `| head`): stop quietly */
        die("cannot write to stdout: %s", strerror(errno));
    }
}

static void flush_or_die(void) {
    if (fflush(stdout) != 0) {
        if (errno == EPIPE) exit(0);
        die("cannot write to stdout: %s", strerror(errno));
    }
}

/* Length a UTF-8 sequence starting with lead byte b should have (1 for anything invalid). */
static size_t utf8_length(uint8_t b) {
    if (b >= 0xC2 && b <= 0xDF) return 2;
    if (b >= 0xE0 && b <= 0xEF) return 3;
    if (b >= 0xF0 && b <= 0xF4) return 4;
    return 1;
}

static void output_bytes(Output *o, const uint8_t *bytes, size_t n) {
    for (size_t i = 0; i < n; i++) {
        uint8_t b = bytes[i];
        if (o->n_pending > 0 && (b & 0xC0) != 0x80) { /* sequence broken: emit as it is */
            write_or_die(o->pending, o->n_pending);
            o->n_pending = 0;
        }
        if (o->n_pending == 0 && utf8_length(b) == 1) { write_or_die(&b, 1); continue; }
        o->pending[o->n_pending++] = b;
        if (o->n_pending == utf8_length(o->pending[0])) {
            write_or_die(o->pending, o->n_pending);
            o->n_pending = 0;
        }
    }
    flush_or_die();
}

static void output_finish(Output *o) {
    write_or_die(o->pending, o->n_pending);
    o->n_pending = 0;
    flush_or_die();
}

/* ---------------------------------------------------------------------------------------
 * Generation, tokenization and model information. */

static double now_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Output files appear under their name only when complete: written to PATH.tmpPID, renamed. */
typedef struct {
    FILE *f;
    char *tmp;
    const char *path;
} OutFile;

static OutFile create_or_die(const char *path) {
    size_t tmp_len = strlen(path) + 16;
    OutFile o = {NULL, malloc_or_die(tmp_len, "path"), path};
    snprintf(o.tmp, tmp_len, "%s.tmp%d", path, (int)getpid());
    o.f = fopen(o.tmp, "wb");
    if (!o.f) die("cannot create '%s': %s", o.tmp, strerror(errno));
    return o;
}

static void commit_or_die(OutFile *o) {
    if (ferror(o->f) | (fclose(o->f) != 0) || rename(o->tmp, o->path) != 0) {
        remove(o->tmp);
        die("cannot write '%s': %s", o->path, strerror(errno));
    }
    free(o->tmp);
}

static uint32_t *encode_or_die(Transformer *t, const uint8_t *text, size_t len, long *n_ids) {
    uint32_t *ids = NULL;
    size_t cap = 0;
    const char *err;
    *n_ids = tokenizer_encode(&t->tokenizer, text, len, &ids, &cap, &err);
    if (*n_ids < 0) die("cannot tokenize the prompt: %s", err);
    return ids;
}

/* The token generation starts from when there is no prompt: end-of-text, or a newline for a
 * character vocabulary without one. */
static uint32_t start_token(Transformer *t) {
    if (t->tokenizer.eot_id >= 0) return (uint32_t)t->tokenizer.eot_id;
    uint32_t *ids = NULL;
    size_t cap = 0;
    const char *err;
    long n = tokenizer_encode(&t->tokenizer, (const uint8_t *)"\n", 1, &ids, &cap, &err);
    if (n != 1) die("no prompt given and the vocabulary has neither end-of-text nor a newline"
                    " token to start from: give a prompt with -i");
    uint32_t id = ids[0];
    free(ids);
    return id;
}

static void generate(Transformer *t, Sampler *sampler, const uint8_t *prompt, size_t prompt_len,
                     long max_new, int ignore_eos) {
    const Config *c = &t->config;
    long n_prompt;
    uint32_t *tokens = encode_or_die(t, prompt, prompt_len, &n_prompt);
    int from_start = n_prompt == 0;
    if (from_start) {
        free(tokens);
        tokens = malloc_or_die(sizeof(uint32_t), "prompt");
        tokens[0] = start_token(t);
        n_prompt = 1;
    }
    if (n_prompt > c->n_ctx)
        die("the prompt is %ld tokens, longer than the model's context of %d tokens", n_prompt,
            c->n_ctx);

    Output out = {0};
    if (!from_start) output_bytes(&out, prompt, prompt_len);

    /* the prompt, one token at a time through the key/value cache */
    double t0 = now_seconds();
    float *logits = prefill(t, tokens, n_prompt);
    double t1 = now_seconds();

    long n_generated = 0, pos = n_prompt;
    while (n_generated < max_new) {
        if (pos >= c->n_ctx) {
            fprintf(stderr, "note: stopped at the model's context length of %d tokens\n", c->n_ctx);
            break;
        }
        int next = sample(sampler, logits, c->vocab_size);
        if (next == t->tokenizer.eot_id && !ignore_eos) break;
        size_t len;
        const uint8_t *bytes = tokenizer_token(&t->tokenizer, (uint32_t)next, &len);
        output_bytes(&out, bytes, len);
        n_generated++;
        /* feed the token back only when another one will be sampled after it */
        if (n_generated < max_new && pos + 1 < c->n_ctx) {
            uint32_t token = (uint32_t)next;
            logits = forward(t, &token, 1, (int)pos, 0);
        }
        pos++;
    }
    output_finish(&out);
    double t2 = now_seconds();
    fprintf(stderr, "timing: prompt %ld tokens %.2f tok/s, generated %ld tokens %.2f tok/s\n",
            n_prompt, t1 > t0 ? n_prompt / (t1 - t0) : 0.0, n_generated,
            t2 > t1 ? n_generated / (t2 - t1) : 0.0);
    free(tokens);
}

/* --logits: the prompt through the key/value-cache path, logits of every position written as
 * raw little-endian float32, shape (n_prompt, vocab_size); for comparing with PyTorch. The file
 * appears under its name only when complete. */
static void write_logits(Transformer *t, const uint8_t *text, size_t len, const char *path) {
    long n;
    uint32_t *ids = encode_or_die(t, text, len, &n);
    if (n == 0) die("--logits needs a non-empty prompt");
    if (n > t->config.n_ctx)
        die("the prompt is %ld tokens, longer than the model's context of %d tokens", n,
            t->config.n_ctx);
    OutFile out = create_or_die(path);
    for (long pos = 0; pos < n; pos += t->state.block) {
        int T = block_at(t, pos, n);
        const float *logits = forward(t, ids + pos, T, (int)pos, 1);
        fwrite(logits, sizeof(float), (size_t)T * (size_t)t->config.vocab_size, out.f);
    }
    commit_or_die(&out); /* a short write shows up in ferror there */
    free(ids);
}

/* ---------------------------------------------------------------------------------------
 * The attention picture (--attention, SPEC section 5): one self-contained HTML page, the
 * weights as JSON plus a small inline script that draws one heatmap per layer and head and
 * one per layer for the average over heads. A Content-Security-Policy forbids every fetch. */

#define ATTENTION_MAX_TOKENS 64

static const char attention_page_head[] =
    "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\n"
    "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; "
    "script-src 'unsafe-inline'; style-src 'unsafe-inline'\">\n"
    "<title>Attention weights</title>\n<style>\n"
    "body{font:14px system-ui,sans-serif;margin:20px;color:#222;max-width:1400px}\n"
    "h2{font-size:16px;margin:18px 0 6px}.layer{display:flex;flex-wrap:wrap;gap:20px}\n"
    "figure{margin:0}figcaption{font-weight:600;margin-bottom:2px}canvas{display:block}\n"
    ".legend{display:flex;align-items:center;gap:10px;flex-wrap:wrap}\n"
    ".bar{width:180px;height:14px;border:1px solid #999;"
    "background:linear-gradient(to right,#fff,#08306b)}\n"
    ".masked{width:14px;height:14px;background:#eee;border:1px solid #bbb}\n"
    "#tip{position:fixed;pointer-events:none;background:#222;color:#fff;padding:4px 8px;"
    "border-radius:4px;font-size:12px;display:none;white-space:pre}\n"
    "</style></head><body>\n<h1>Attention weights</h1>\n"
    "<p>Each heatmap is one attention head. <b>Row</b> = the query token (the position doing the "
    "looking); <b>column</b> = the key token it looks at. The colour is the attention weight, "
    "the softmax of the scaled query&middot;key scores: each row sums to 1. Cells right of the "
    "diagonal are masked: a token never attends to tokens after it. Hover over a cell to read "
    "its weight. The last map of each layer averages its heads.</p>\n"
    "<div class=\"legend\">weight 0 <span class=\"bar\"></span> 1 &nbsp; <span class=\"masked\">"
    "</span> masked (future) &nbsp; &#9251; = space, &#8629; = newline</div>\n"
    "<p id=\"summary\"></p><div id=\"maps\"></div><div id=\"tip\"></div>\n"
    "<script type=\"application/json\" id=\"attention-data\">";

static const char attention_page_tail[] =
    "</script>\n<script>\n"
    "const d = JSON.parse(document.getElementById('attention-data').textContent);\n"
    "const T = d.tokens.length, tip = document.getElementById('tip');\n"
    "document.getElementById('summary').textContent = `${T} tokens, ${d.n_layer} layers x "
    "${d.n_head} heads (${d.model})`;\n"
    "const cell = T <= 16 ? 22 : T <= 32 ? 16 : 12, font = Math.min(12, cell - 1);\n"
    "const label = t => t.length > 10 ? t.slice(0, 9) + '\\u2026' : t;\n"
    "const ctx0 = document.createElement('canvas').getContext('2d');\n"
    "ctx0.font = font + 'px monospace';\n"
    "const margin = 8 + Math.max(...d.tokens.map(t => ctx0.measureText(label(t)).width));\n"
    "function heatmap(rows, title) {\n"
    "  const fig = document.createElement('figure'), cap = document.createElement('figcaption');\n"
    "  cap.textContent = title; fig.appendChild(cap);\n"
    "  const c = document.createElement('canvas'); c.className = 'heatmap';\n"
    "  const size = margin + T * cell + 2; c.width = size; c.height = size;\n"
    "  const g = c.getContext('2d'); g.fillStyle = '#fff'; g.fillRect(0, 0, size, size);\n"
    "  g.font = font + 'px monospace'; g.fillStyle = '#222'; g.textBaseline = 'middle';\n"
    "  for (let i = 0; i < T; i++) {\n"
    "    g.textAlign = 'right'; g.fillText(label(d.tokens[i]), margin - 4, margin + (i + .5) * cell);\n"
    "    g.save(); g.translate(margin + (i + .5) * cell, margin - 4); g.rotate(-Math.PI / 2);\n"
    "    g.textAlign = 'left'; g.fillText(label(d.tokens[i]), 0, 0); g.restore();\n"
    "  }\n"
    "  for (let i = 0; i < T; i++) for (let j = 0; j < T; j++) {\n"
    "    if (j > i) { g.fillStyle = '#eee'; }\n"
    "    else { const w = rows[i][j];\n"
    "      g.fillStyle = `rgb(${255 - 247 * w},${255 - 207 * w},${255 - 148 * w})`; }\n"
    "    g.fillRect(margin + j * cell, margin + i * cell, cell, cell);\n"
    "  }\n"
    "  g.strokeStyle = '#999'; g.strokeRect(margin - .5, margin - .5, T * cell + 1, T * cell + 1);\n"
    "  c.addEventListener('mousemove', e => {\n"
    "    const r = c.getBoundingClientRect();\n"
    "    const j = Math.floor((e.clientX - r.left - margin) / cell);\n"
    "    const i = Math.floor((e.clientY - r.top - margin) / cell);\n"
    "    if (i < 0 || j < 0 || i >= T || j >= T) { tip.style.display = 'none'; return; }\n"
    "    tip.textContent = `${title}\\nquery #${i} \"${d.tokens[i]}\"\\nkey #${j} \"${d.tokens[j]}\"\\n` +\n"
    "      (j > i ? 'masked: weight 0' : `weight ${rows[i][j].toFixed(4)}`);\n"
    "    tip.style.left = (e.clientX + 14) + 'px'; tip.style.top = (e.clientY + 14) + 'px';\n"
    "    tip.style.display = 'block';\n"
    "  });\n"
    "  c.addEventListener('mouseleave', () => { tip.style.display = 'none'; });\n"
    "  fig.appendChild(c); return fig;\n"
    "}\n"
    "const maps = document.getElementById('maps');\n"
    "for (let l = 0; l < d.n_layer; l++) {\n"
    "  const h2 = document.createElement('h2'); h2.textContent = `Layer ${l}`; maps.appendChild(h2);\n"
    "  const row = document.createElement('div'); row.className = 'layer'; maps.appendChild(row);\n"
    "  const heads = d.weights[l];\n"
    "  heads.forEach((rows, h) => row.appendChild(heatmap(rows, `layer ${l}, head ${h}`)));\n"
    "  const avg = heads[0].map((r, i) => r.map((_, j) => heads.reduce((s, hd) => s + hd[i][j], 0) / heads.length));\n"
    "  row.appendChild(heatmap(avg, `layer ${l}, average of ${heads.length} heads`));\n"
    "}\n"
    "</script>\n</body></html>\n";

/* A token as a JSON string for a label: UTF-8 kept, space and newline made visible, other
 * control characters and bytes that are not valid UTF-8 written as \xNN text; '<' escaped so
 * that the JSON cannot close the <script> element around it. */
static void json_label(FILE *f, const uint8_t *s, size_t n) {
    fputc('"', f);
    for (size_t i = 0; i < n;) {
        uint8_t b = s[i];
        size_t len = utf8_length(b), k = 1;
        if (len > 1 && i + len <= n)
            while (k < len && (s[i + k] & 0xC0) == 0x80) k++;
        if (len > 1 && k == len) { fwrite(s + i, 1, len, f); i += len; continue; }
        if (b == ' ') fputs("\\u2423", f);
        else if (b == '\n') fputs("\\u21b5", f);
        else if (b == '"' || b == '\\') fprintf(f, "\\%c", b);
        else if (b == '<') fputs("\\u003c", f);
        else if (b < 0x20 || b >= 0x7F) fprintf(f, "\\\\x%02X", b);
        else fputc(b, f);
        i++;
    }
    fputc('"', f);
}

static void write_attention(Transformer *t, const uint8_t *text, size_t len, const char *model_path,
                            const char *path) {
    const Config *c = &t->config;
    long n;
    uint32_t *ids = encode_or_die(t, text, len, &n);
    if (n == 0) die("--attention needs a prompt (-i or -f)");
    long limit = c->n_ctx < ATTENTION_MAX_TOKENS ? c->n_ctx : ATTENTION_MAX_TOKENS;
    if (n > limit)
        die("the prompt is %ld tokens; --attention draws at most %ld (a heatmap per head stays "
            "readable up to %d tokens)", n, limit, ATTENTION_MAX_TOKENS);
    RunState *s = &t->state;
    s->att_record_len = (int)n;
    s->att_record = malloc_or_die((size_t)c->n_layer * c->n_head * n * n * sizeof(float), "attention");
    prefill(t, ids, n);

    OutFile out = create_or_die(path);
    FILE *f = out.f;
    fputs(attention_page_head, f);
    fprintf(f, "{\"n_layer\": %d, \"n_head\": %d, \"model\": ", c->n_layer, c->n_head);
    json_label(f, (const uint8_t *)model_path, strlen(model_path));
    fputs(", \"tokens\": [", f);
    for (long i = 0; i < n; i++) {
        size_t tok_len;
        const uint8_t *tok = tokenizer_token(&t->tokenizer, ids[i], &tok_len);
        if (i) fputs(", ", f);
        json_label(f, tok, tok_len);
    }
    /* weights[layer][head][query] = the query's weights over keys 0..query (the rest masked) */
    fputs("],\n\"weights\": [", f);
    for (int l = 0; l < c->n_layer; l++) {
        fputs(l ? ",\n[" : "[", f);
        for (int h = 0; h < c->n_head; h++) {
            fputs(h ? ", [" : "[", f);
            for (long i = 0; i < n; i++) {
                const float *row = s->att_record + (((size_t)l * c->n_head + h) * n + i) * n;
                fputs(i ? ", [" : "[", f);
                for (long j = 0; j <= i; j++) fprintf(f, j ? ",%.7g" : "%.7g", (double)row[j]);
                fputc(']', f);
            }
            fputc(']', f);
        }
        fputc(']', f);
    }
    fputs("]}", f);
    fputs(attention_page_tail, f);
    commit_or_die(&out);
    fprintf(stderr, "wrote %s: %ld tokens, %d layers x %d heads\n", path, n, c->n_layer, c->n_head);
    free(s->att_record);
    s->att_record = NULL;
    free(ids);
}

/* --perplexity (SPEC section 1.4). The file's tokens, after an end-of-text token when the
 * vocabulary has one (so that the first token is predicted too), are scored in windows of
 * n_ctx tokens that start every stride = n_ctx / 2 tokens: the first window scores all its
 * positions, each later window only the positions the previous one did not reach, so every
 * token is predicted once, from at least n_ctx / 2 tokens of context (except at the start).
 * Each window has n_ctx input tokens, each predicting the token after it.
 * Prints tokens (predicted), mean negative log-likelihood in nats, perplexity and bits per byte
 * of the file. export/model.py's perplexity() is the same computation in PyTorch. */
static void perplexity(Transformer *t, const uint8_t *text, size_t len) {
    const Config *c = &t->config;
    long n_text;
    uint32_t *text_ids = encode_or_die(t, text, len, &n_text);
    long n = n_text + (t->tokenizer.eot_id >= 0);
    uint32_t *ids = malloc_or_die((size_t)n * sizeof(uint32_t), "tokens");
    if (t->tokenizer.eot_id >= 0) ids[0] = (uint32_t)t->tokenizer.eot_id;
    memcpy(ids + (n - n_text), text_ids, (size_t)n_text * sizeof(uint32_t));
    free(text_ids);
    if (n < 2) die("--perplexity needs a file of at least %d tokens", t->tokenizer.eot_id >= 0 ? 1 : 2);

    long stride = c->n_ctx > 1 ? c->n_ctx / 2 : 1, scored_to = 1, n_scored = 0;
    double nll = 0.0;
    for (long begin = 0;; begin += stride) {
        /* inputs ids[begin .. end), each predicting the next token */
        long end = begin + c->n_ctx < n - 1 ? begin + c->n_ctx : n - 1;
        for (long chunk = begin; chunk < end; chunk += t->state.block) {
            int T = block_at(t, chunk, end);
            /* a block whose targets the previous window scored only fills the cache */
            int scores = chunk + T + 1 > scored_to;
            const float *all = forward(t, ids + chunk, T, (int)(chunk - begin), scores);
            for (int i = 0; scores && i < T; i++) {
                long target = chunk + i + 1;
                if (target < scored_to) continue; /* predicted by the previous window */
                const float *logits = all + (size_t)i * c->vocab_size;
                double max = logits[argmax(logits, c->vocab_size)], sum = 0.0;
                for (int v = 0; v < c->vocab_size; v++) sum += exp((double)logits[v] - max);
                nll += max + log(sum) - logits[ids[target]];
                n_scored++;
            }
        }
        scored_to = end + 1;
        if (end == n - 1) break;
    }
    double mean = nll / (double)n_scored;
    printf("tokens=%ld nll=%.6f ppl=%.4f bpb=%.4f\n", n_scored, mean, exp(mean),
           len ? nll / log(2.0) / (double)len : 0.0);
    flush_or_die();
    free(ids);
}

/* --tokenize: the ids, space-separated; on a terminal (unless --ids) the text itself with each
 * token on its own background colour, the way tokenizer playgrounds show it, then the count.
 * A colour changes only where a character starts, so a character split across tokens stays
 * whole on screen; newlines end the colour first so it does not bleed to the line's end. */
static void print_tokens(Transformer *t, const uint8_t *text, size_t len, int ids_only) {
    long n;
    uint32_t *ids = encode_or_die(t, text, len, &n);
    if (ids_only || !isatty(STDOUT_FILENO)) {
        for (long i = 0; i < n; i++) printf(i ? " %u" : "%u", ids[i]);
        printf("\n");
    } else {
        static const int palette[] = {153, 223, 194, 218, 187, 189}; /* xterm-256 pastels */
        for (long i = 0; i < n; i++) {
            size_t tok_len;
            const uint8_t *tok = tokenizer_token(&t->tokenizer, ids[i], &tok_len);
            int colour = palette[i % (long)(sizeof palette / sizeof palette[0])], coloured = 0;
            for (size_t j = 0; j < tok_len; j++) {
                uint8_t b = tok[j];
                if (!coloured && (b & 0xC0) != 0x80) { printf("\033[30;48;5;%dm", colour); coloured = 1; }
                if (b == '\n') { printf("\033[0m\n\033[30;48;5;%dm", colour); continue; }
                putchar(b);
            }
        }
        printf("\033[0m\n%ld tokens\n", n);
    }
    flush_or_die();
    free(ids);
}

static void print_info(const Transformer *t, const char *path) {
    const Config *c = &t->config;
    const FileHeader *h = t->header;
    printf("file: %s (%zu bytes, format version %u)\n", path, t->file_size, h->version);
#ifdef _OPENMP
    int threads = omp_get_max_threads();
#else
    int threads = 1;
#endif
#if defined(Q8_PREFILL_KERNEL)
    const char *q8_prefill = amx_available() ? "amx" : Q8_PREFILL_KERNEL;
#else
    const char *q8_prefill = amx_available() ? "amx" : "dot products per token";
#endif
    printf("kernels: %s, q8_0 %s (prefill %s), %d threads\n", KERNEL_PATH, Q8_PATH, q8_prefill, threads);
    printf("tokenizer: %u tokens, %s pre-tokenizer, end-of-text id %d\n", t->tokenizer.n_tokens,
           t->tokenizer.pretokenizer == PRETOK_CHAR ? "character"
           : t->tokenizer.pretokenizer == PRETOK_GPT2 ? "gpt2" : "cl100k",
           t->tokenizer.eot_id);
    if (c->n_layer == 0) { printf("tokenizer-only file (no model)\n"); return; }
    printf("n_layer %d, n_head %d, n_embd %d (head_size %d), n_hidden %d, n_ctx %d\n", c->n_layer,
           c->n_head, c->n_embd, c->head_size, c->n_hidden, c->n_ctx);
    printf("vocab_size %d (padded to %d), ln_eps %g, gelu %s, bias %s, head %s, positions %s,"
           " weights %s\n", c->vocab_size, c->vocab_padded, (double)c->ln_eps,
           c->gelu == GELU_TANH ? "tanh" : "erf", c->bias ? "yes" : "no",
           c->tied_head ? "tied" : "separate", c->pos_kind == POS_LEARNED ? "learned" : "sinusoidal",
           c->weight_type == WT_F32 ? "f32" : "q8_0");
    printf("%-22s %12s %12s\n", "section", "offset", "bytes");
    printf("%-22s %12d %12u\n", "header", 0, HEADER_SIZE);
    printf("%-22s %12llu %12llu\n", "tokenizer", (unsigned long long)h->tokenizer_offset,
           (unsigned long long)h->tokenizer_size);
    const TensorEntry *table = (const TensorEntry *)(const void *)(t->data + h->tensors_offset);
    printf("%-22s %12llu %12llu\n", "tensor table", (unsigned long long)h->tensors_offset,
           (unsigned long long)h->n_tensors * sizeof(TensorEntry));
    for (uint32_t i = 0; i < h->n_tensors; i++)
        printf("%-22s %12llu %12llu\n", table[i].name, (unsigned long long)table[i].offset,
               (unsigned long long)table[i].size);
}

/* ---------------------------------------------------------------------------------------
 * Command line (SPEC section 1.1). */

static void usage(FILE *f) {
    fprintf(f,
        "usage: run MODEL.bin [options]\n"
        "  -i, --prompt TEXT         prompt text\n"
        "  -f, --prompt-file FILE    prompt read from a file (raw bytes)\n"
        "  -n, --max-new-tokens N    tokens to generate after the prompt (default 256)\n"
        "  -t, --temperature T       0 = greedy argmax (default 1.0)\n"
        "  -k, --top-k K             keep the K most likely tokens, 0 = off (default 0)\n"
        "  -p, --top-p P             nucleus sampling, 1.0 = off (default 0.9)\n"
        "  -s, --seed S              RNG seed (default: from the clock); echoed on stderr\n"
        "      --threads N           worker threads (default: all cores)\n"
        "      --block N             prompt tokens per forward pass (default 128; 1 = one at a\n"
        "                            time, as generation does)\n"
        "      --ignore-eos          keep generating past the end-of-text token\n"
        "      --tokenize            show the prompt's tokens (coloured on a terminal), then exit\n"
        "      --ids                 with --tokenize: only the ids, even on a terminal\n"
        "      --perplexity FILE     score FILE with the model, then exit\n"
        "      --attention OUT.html  write the prompt's attention weights as a web page, then exit\n"
        "      --info                print the model's configuration and file layout, then exit\n"
        "      --logits OUT          write the prompt's logits at every position (float32,\n"
        "                            positions x vocab_size) for comparing with PyTorch, then exit\n"
        "  -h, --help                this text\n");
}

static long parse_long(const char *flag, const char *s, long lo, long hi) {
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (*s == '\0' || *end != '\0' || errno == ERANGE)
        die("%s needs a whole number, got '%s'", flag, s);
    if (v < lo || v > hi) die("%s must be between %ld and %ld, got %ld", flag, lo, hi, v);
    return v;
}

static double parse_double(const char *flag, const char *s, double lo, double hi) {
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (*s == '\0' || *end != '\0' || errno == ERANGE || !isfinite(v))
        die("%s needs a number, got '%s'", flag, s);
    if (v < lo || v > hi) die("%s must be between %g and %g, got '%s'", flag, lo, hi, s);
    return v;
}

static uint8_t *read_file_or_die(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) die("cannot open file '%s': %s", path, strerror(errno));
    struct stat st;
    if (fstat(fileno(f), &st) == 0 && S_ISDIR(st.st_mode))
        die("'%s' is a directory, not a file", path);
    size_t cap = 4096, n = 0;
    uint8_t *buf = malloc_or_die(cap, "prompt");
    for (;;) {
        n += fread(buf + n, 1, cap - n, f);
        if (ferror(f)) die("cannot read '%s': %s", path, strerror(errno));
        if (n < cap) break;
        buf = realloc(buf, cap *= 2);
        if (!buf) die("out of memory reading '%s'", path);
    }
    fclose(f);
    *len = n;
    return buf;
}

enum { OPT_BLOCK = 255, OPT_THREADS = 256, OPT_IGNORE_EOS, OPT_TOKENIZE, OPT_IDS, OPT_PERPLEXITY, OPT_ATTENTION,
       OPT_INFO, OPT_LOGITS };

#ifndef TESTING
int main(int argc, char **argv) {
    const char *prompt = NULL, *prompt_file = NULL, *logits_path = NULL, *perplexity_path = NULL,
               *attention_path = NULL;
    long max_new = 256, top_k = 0, threads = 0, block = PREFILL_BLOCK;
    double temperature = 1.0, top_p = 0.9;
    uint64_t seed = 0;
    int have_seed = 0, ignore_eos = 0, tokenize = 0, ids_only = 0, info = 0;
    static const struct option options[] = {
        {"prompt", required_argument, 0, 'i'},
        {"prompt-file", required_argument, 0, 'f'},
        {"max-new-tokens", required_argument, 0, 'n'},
        {"temperature", required_argument, 0, 't'},
        {"top-k", required_argument, 0, 'k'},
        {"top-p", required_argument, 0, 'p'},
        {"seed", required_argument, 0, 's'},
        {"threads", required_argument, 0, OPT_THREADS},
        {"block", required_argument, 0, OPT_BLOCK},
        {"ignore-eos", no_argument, 0, OPT_IGNORE_EOS},
        {"tokenize", no_argument, 0, OPT_TOKENIZE},
        {"ids", no_argument, 0, OPT_IDS},
        {"perplexity", required_argument, 0, OPT_PERPLEXITY},
        {"attention", required_argument, 0, OPT_ATTENTION},
        {"info", no_argument, 0, OPT_INFO},
        {"logits", required_argument, 0, OPT_LOGITS},
        {"help", no_argument, 0, 'h'},
        {0, 0, 0, 0},
    };
    opterr = 0; /* we print our own one-line errors */
    int opt;
    while ((opt = getopt_long(argc, argv, ":i:f:n:t:k:p:s:h", options, NULL)) != -1) {
        switch (opt) {
        case 'i': prompt = optarg; break;
        case 'f': prompt_file = optarg; break;
        case 'n': max_new = parse_long("-n/--max-new-tokens", optarg, 0, INT_MAX); break;
        case 't': temperature = parse_double("-t/--temperature", optarg, 0.0, 1e6); break;
        case 'k': top_k = parse_long("-k/--top-k", optarg, 0, INT_MAX); break;
        case 'p': top_p = parse_double("-p/--top-p", optarg, 1e-9, 1.0); break;
        case 's': {
            char *end;
            errno = 0;
            unsigned long long v = strtoull(optarg, &end, 10);
            if (!*optarg || *end || errno == ERANGE || *optarg == '-')
                die("-s/--seed needs a whole number from 0 to 2^64-1, got '%s'", optarg);
            seed = v;
            have_seed = 1;
            break;
        }
        case OPT_THREADS: threads = parse_long("--threads", optarg, 1, 1024); break;
        case OPT_BLOCK: block = parse_long("--block", optarg, 1, PREFILL_BLOCK); break;
        case OPT_IGNORE_EOS: ignore_eos = 1; break;
        case OPT_TOKENIZE: tokenize = 1; break;
        case OPT_IDS: ids_only = 1; break;
        case OPT_PERPLEXITY: perplexity_path = optarg; break;
        case OPT_ATTENTION: attention_path = optarg; break;
        case OPT_INFO: info = 1; break;
        case OPT_LOGITS: logits_path = optarg; break;
        case 'h': usage(stdout); return 0;
        case ':': die("option '%s' needs a value (see --help)", argv[optind - 1]);
        default: die("unknown option '%s' (see --help)", argv[optind - 1]);
        }
    }
    if (optind >= argc) die("no model file given (usage: run MODEL.bin [options], see --help)");
    if (optind + 1 < argc) die("unexpected argument '%s' (see --help)", argv[optind + 1]);
    if (prompt && prompt_file) die("give the prompt with -i or -f, not both");
    const char *model_path = argv[optind];
    signal(SIGPIPE, SIG_IGN); /* a closed pipe shows up as EPIPE, handled in write_or_die */
#ifdef _OPENMP
    if (threads > 0) omp_set_num_threads((int)threads);
#endif

    uint8_t *text = NULL;
    size_t text_len = 0;
    if (prompt_file) text = read_file_or_die(prompt_file, &text_len);
    else if (prompt) { text_len = strlen(prompt); text = malloc_or_die(text_len, "prompt");
                       memcpy(text, prompt, text_len); }

    Transformer transformer;
    build_transformer(&transformer, model_path);
    if (transformer.state.block > block) transformer.state.block = (int)block;
    if (info) print_info(&transformer, model_path);
    else if (tokenize) print_tokens(&transformer, text, text_len, ids_only);
    else {
        if (transformer.config.n_layer == 0)
            die("'%s' holds only a tokenizer: it can --tokenize but not generate", model_path);
        if (perplexity_path) {
            size_t file_len;
            uint8_t *file = read_file_or_die(perplexity_path, &file_len);
            perplexity(&transformer, file, file_len);
            free(file);
            free_transformer(&transformer);
            free(text);
            return 0;
        }
        if (attention_path) {
            write_attention(&transformer, text, text_len, model_path, attention_path);
            free_transformer(&transformer);
            free(text);
            return 0;
        }
        if (logits_path) {
            write_logits(&transformer, text, text_len, logits_path);
            free_transformer(&transformer);
            free(text);
            return 0;
        }
        if (!have_seed) seed = (uint64_t)time(NULL) ^ ((uint64_t)getpid() << 32);
        fprintf(stderr, "seed: %llu\n", (unsigned long long)seed);
        Sampler sampler;
        build_sampler(&sampler, transformer.config.vocab_size, temperature, (int)top_k,
                      top_p, seed);
        generate(&transformer, &sampler, text, text_len, max_new, ignore_eos);
        free_sampler(&sampler);
    }
    free_transformer(&transformer);
    free(text);
    return 0;
}
#endif
