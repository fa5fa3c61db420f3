/* run.c: a GPT-2 style decoder in pure C (libc + OpenMP).
 *
 * Read top to bottom: errors and memory, the model structs, loading and validating the weight
 * file (format in model.h), the forward pass, streaming output, generation, the tool modes
 * (logits, attention picture, perplexity, tokens, info) and the command line. The forward pass
 * mirrors export/model.py's GPT line for line, so the two can be compared number for number
 * (tests/). Beneath it: kernels.h (each neural-net operation, and its instruction-set
 * variants), sampler.h (the next token from the logits), attention_page.h (the --attention
 * picture), tokenizer.c (byte-level BPE).
 */
#define _POSIX_C_SOURCE 200809L
#define _DEFAULT_SOURCE /* MADV_HUGEPAGE, and syscall() for the AMX permission in kernels_q8.h */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
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

#include "attention_page.h"
#include "kernels.h"
#include "model.h"
#include "sampler.h"

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

/* One transformer block's weights. Matrices (kernels.h's Matrix: float32, or q8_0 quants and
 * scales) are nn.Linear's (out, in); vectors are float32; biases are NULL in a file without. */
typedef struct {
    const float *ln_1_weight;     /* (n_embd) */
    const float *ln_1_bias;       /* (n_embd) */
    Matrix c_attn;                /* (3*n_embd, n_embd) fused query, key, value */
    const float *c_attn_bias;     /* (3*n_embd) */
    Matrix attn_proj;             /* (n_embd, n_embd) */
    const float *attn_proj_bias;  /* (n_embd) */
    const float *ln_2_weight;     /* (n_embd) */
    const float *ln_2_bias;       /* (n_embd) */
    Matrix c_fc;                  /* (n_hidden, n_embd) */
    const float *c_fc_bias;       /* (n_hidden) */
    Matrix mlp_proj;              /* (n_embd, n_hidden) */
    const float *mlp_proj_bias;   /* (n_embd) */
} LayerWeights;

typedef struct {
    Matrix wte;                /* (vocab_padded, n_embd) token embedding */
    const float *wpe;          /* (n_ctx, n_embd) learned positions, or the sinusoid table */
    LayerWeights *layer;       /* (n_layer) */
    const float *ln_f_weight;  /* (n_embd) */
    const float *ln_f_bias;    /* (n_embd) or NULL */
    Matrix lm_head;            /* (vocab_size, n_embd), the first rows of its (vocab_padded,
                                  n_embd) tensor, or of wte when tied */
} TransformerWeights;

/* Prompts go through forward() in blocks of up to PREFILL_BLOCK tokens: enough to keep the
 * matrix kernels arithmetic-bound, small enough that the buffers stay modest. */
#define PREFILL_BLOCK 128

typedef struct {
    int block;       /* most tokens of a prompt one forward() call takes: min(n_ctx, PREFILL_BLOCK) */
    int rows;        /* most tokens a forward() call takes: max(block, n_seq), n_seq = the
                        sequences with a key/value cache (--samples decoded together) */
    float *x;        /* (rows, n_embd) the residual stream */
    float *xb;       /* (rows, n_embd) LayerNorm output, then the heads' concatenated outputs */
    float *xb2;      /* (rows, n_embd) output of a projection, added to the residual */
    float *qkv;      /* (rows, 3*n_embd) query, key and value of each position */
    float *hb;       /* (rows, n_hidden) feed-forward hidden activations */
    float *logits;   /* (rows, vocab_size) scores of the next token */
    float *att;      /* attention()'s scratch, one slice of att_slice floats per (query block,
                        head): (max(block / ATTENTION_BLOCK, n_seq), n_head, att_slice) */
    size_t att_slice;
    MatmulScratch mm; /* matmul()'s buffers, sized for rows tokens */
    float *key_cache;   /* (n_seq, layer, n_head, head_size, ctx16): keys transposed, position j's
                           dimension d at [d * ctx16 + j], ctx16 = n_ctx rounded up to 16 */
    float *value_cache; /* (n_seq, layer, n_head, n_ctx, hs16): hs16 = head_size rounded up to 16 */
    float *att_record;  /* (layer, n_head, T, T) attention weights kept for --attention, or NULL */
    int att_record_len; /* T */
    /* Set by tests/trace.c only: sees the input and output of every matrix product. */
    void (*observe_product)(const Matrix *w, const float *x, const float *out, int T);
} RunState;

typedef struct {
    Config config;
    TransformerWeights weights;
    RunState state;
    Tokenizer tokenizer;
    float *sinusoid;    /* owned (n_ctx, n_embd) table for POS_SINUSOIDAL, else NULL */
    void *weights_copy; /* owned: weight matrices rearranged for the kernels (prepare_weights), or NULL */
    const uint8_t *data; /* the whole file, mapped */
    size_t file_size;
    int mapped;          /* data came from mmap (and must be unmapped) */
    const FileHeader *header;
    double load_seconds; /* mapping, checking and preparing the file */
} Transformer;

/* ---------------------------------------------------------------------------------------
 * Loading: map the file, then check every field, size and offset in 64-bit arithmetic
 * before any weight is touched. */

#define HINT " (re-export the model with export/export.py)"

/* model.h's weight types by name, as export.py's --dtype spells them */
static const char *weight_type_name(int type) {
    return type == WT_F32 ? "f32" : type == WT_Q8_0 ? "q8_0" : "q4_0";
}

/* Sizes multiply with an overflow check: a hostile header must not wrap around. */
static uint64_t mul_or_die(uint64_t a, uint64_t b, const char *what) {
    uint64_t r;
    if (__builtin_mul_overflow(a, b, &r)) die("model file: %s overflows 64 bits", what);
    return r;
}

/* One tensor of the file: its shape (layers, rows, cols), layers = 1 for one not stacked over
 * layers, and where it goes: dst, plus stride bytes for each further layer (LayerWeights). */
typedef struct {
    const char *name;
    uint64_t layers, rows, cols;
    int is_matrix; /* a Matrix (quantized in a q8_0 file), else a const float * */
    void *dst;
    size_t stride;
} TensorSpec;

/* The tensors a header implies, in file order (model.h; the exporter writes the same list). */
static int tensor_list(const Config *c, TransformerWeights *w, TensorSpec *out) {
    uint64_t L = (uint64_t)c->n_layer, C = (uint64_t)c->n_embd, H = (uint64_t)c->n_hidden;
    uint64_t Vp = (uint64_t)c->vocab_padded;
    LayerWeights *l0 = w->layer;
    size_t S = sizeof(LayerWeights);
    int n = 0;
#define MODEL(nm, r, k, m, field) out[n++] = (TensorSpec){nm, 1, r, k, m, &w->field, 0}
#define LAYER(nm, r, k, m, field) out[n++] = (TensorSpec){nm, L, r, k, m, &l0->field, S}
    MODEL("wte", Vp, C, 1, wte);
    if (c->pos_kind == POS_LEARNED) MODEL("wpe", (uint64_t)c->n_ctx, C, 0, wpe);
    LAYER("ln_1.weight", 1, C, 0, ln_1_weight);
    if (c->bias) LAYER("ln_1.bias", 1, C, 0, ln_1_bias);
    LAYER("attn.c_attn.weight", 3 * C, C, 1, c_attn);
    if (c->bias) LAYER("attn.c_attn.bias", 1, 3 * C, 0, c_attn_bias);
    LAYER("attn.c_proj.weight", C, C, 1, attn_proj);
    if (c->bias) LAYER("attn.c_proj.bias", 1, C, 0, attn_proj_bias);
    LAYER("ln_2.weight", 1, C, 0, ln_2_weight);
    if (c->bias) LAYER("ln_2.bias", 1, C, 0, ln_2_bias);
    LAYER("mlp.c_fc.weight", H, C, 1, c_fc);
    if (c->bias) LAYER("mlp.c_fc.bias", 1, H, 0, c_fc_bias);
    LAYER("mlp.c_proj.weight", C, H, 1, mlp_proj);
    if (c->bias) LAYER("mlp.c_proj.bias", 1, C, 0, mlp_proj_bias);
    MODEL("ln_f.weight", 1, C, 0, ln_f_weight);
    if (c->bias) MODEL("ln_f.bias", 1, C, 0, ln_f_bias);
    if (!c->tied_head) MODEL("lm_head.weight", Vp, C, 1, lm_head);
#undef MODEL
#undef LAYER
    return n;
}

/* In a quantized tensor of n values the float scales follow the quants (n bytes for q8_0,
 * n / 2 for q4_0), 4-byte aligned. */
static uint64_t scales_offset(int weight_type, uint64_t n) {
    return ((weight_type == WT_Q4_0 ? n / 2 : n) + 3) & ~(uint64_t)3;
}

static uint64_t tensor_bytes(const Config *c, const TensorSpec *t) {
    uint64_t n = mul_or_die(mul_or_die(t->layers, t->rows, t->name), t->cols, t->name);
    if (c->weight_type != WT_F32 && t->is_matrix) /* quants, pad to 4, one float per group */
        return scales_offset(c->weight_type, n) + n / Q8_GROUP * 4;
    return mul_or_die(n, 4, t->name);
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
        if (c->weight_type == WT_F32) {
            m->f32 = (const float *)(const void *)data + l * per_layer;
        } else {
            if (c->weight_type == WT_Q8_0) m->q = (const int8_t *)data + l * per_layer;
            else m->q4 = data + l * per_layer / 2;
            m->scale = (const float *)(const void *)(data + scales_offset(c->weight_type, count)) + l * per_layer / Q8_GROUP;
        }
    }
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
    c->weight_type = field("weight_type", h->weight_type, WT_F32, WT_Q4_0);
    if (c->weight_type == WT_F32) field("group_size", h->group_size, 0, 0);
    else {
        field("group_size", h->group_size, Q8_GROUP, Q8_GROUP);
        if (c->n_embd % Q8_GROUP || c->n_hidden % Q8_GROUP)
            die("model file: %s needs n_embd and n_hidden to be multiples of %d, found %d and %d",
                weight_type_name(c->weight_type), Q8_GROUP, c->n_embd, c->n_hidden);
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
    t->weights.layer = malloc_or_die((size_t)c->n_layer * sizeof(LayerWeights), "layers");
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
        check_range(e.name, e.offset, e.size, t->file_size);
        place_tensor(c, &specs[i], t->data + e.offset);
        end = e.offset + e.size;
    }
    if (c->tied_head) t->weights.lm_head = t->weights.wte;
    t->weights.lm_head.rows = c->vocab_size; /* padded rows are never computed */
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

/* Bytes of one sequence's key (or value) cache: per layer and head, head_size x ctx16 keys or
 * n_ctx x hs16 values (attention()'s layout). */
static uint64_t cache_bytes(const Config *c) {
    uint64_t per_head = (uint64_t)round_up16(c->n_ctx) * (uint64_t)round_up16(c->head_size);
    return mul_or_die(mul_or_die((uint64_t)c->n_layer * (uint64_t)c->n_head, per_head, "KV cache"),
                      sizeof(float), "KV cache");
}

/* The memory this machine has, in bytes (0 if unknown). */
static double physical_memory(void) {
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    return pages > 0 && page > 0 ? (double)pages * (double)page : 0.0;
}

/* Buffers for forward() and key/value caches for n_seq sequences. More samples than this
 * machine's memory holds are refused here, before anything is allocated for them. */
static void build_state(RunState *s, const Config *c, int n_seq, size_t file_size) {
    size_t C = (size_t)c->n_embd, H = (size_t)c->n_hidden, B;
    s->block = c->n_ctx < PREFILL_BLOCK ? c->n_ctx : PREFILL_BLOCK;
    s->rows = max_int(s->block, n_seq);
    s->att_slice = attention_scratch_floats(c->n_ctx, c->head_size);
    size_t blocks = (size_t)max_int((s->block + ATTENTION_BLOCK - 1) / ATTENTION_BLOCK, n_seq) * (size_t)c->n_head;
    double cache = (double)cache_bytes(c), memory = physical_memory();
    /* per sequence: its caches, a row of every buffer, its attention scratch and its sampler */
    double per_seq = 2 * cache + 4.0 * (6 * C + H + (size_t)c->vocab_size) + C +
                     4.0 * (double)c->n_head * (double)s->att_slice + 25.0 * c->vocab_size;
    if (n_seq > 1 && memory > 0 && (double)file_size + n_seq * per_seq > memory)
        die("--samples %d needs %.3g GB for the samples' key/value caches and buffers, more than this "
            "machine's %.3g GB of memory", n_seq, n_seq * per_seq / 1e9, memory / 1e9);
    if (cache > SIZE_MAX / 2 / n_seq) die("model file: the key/value cache would need %.3g bytes", cache * n_seq);
    B = (size_t)s->rows;
    s->x = malloc_or_die(B * C * sizeof(float), "x");
    s->xb = malloc_or_die(B * C * sizeof(float), "xb");
    s->xb2 = malloc_or_die(B * C * sizeof(float), "xb2");
    s->qkv = malloc_or_die(B * 3 * C * sizeof(float), "qkv");
    s->hb = malloc_or_die(B * H * sizeof(float), "hb");
    s->logits = malloc_or_die(B * (size_t)c->vocab_size * sizeof(float), "logits");
    s->att = malloc_or_die(blocks * s->att_slice * sizeof(float), "attention");
    if (!matmul_scratch_init(&s->mm, s->rows, C > H ? (int)C : (int)H, c->weight_type))
        die("out of memory for the matrix products' buffers");
    s->key_cache = malloc_or_die((size_t)cache * n_seq, "key cache");
    s->value_cache = malloc_or_die((size_t)cache * n_seq, "value cache");
}

static void free_state(RunState *s) {
    free(s->x); free(s->xb); free(s->xb2); free(s->qkv); free(s->hb); free(s->logits); free(s->att);
    matmul_scratch_free(&s->mm);
    free(s->key_cache); free(s->value_cache);
}

/* Validate a whole model file held in memory and point the weights into it. Every offset and
 * size is checked against size before it is used; nothing is allocated but the tokenizer's
 * index and the list of layers. Also the entry point of the loader's fuzz target. */
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

/* What generation needs beyond the file: the sinusoid table, the run-time buffers and, for
 * the kernels that want it, the weight matrices rearranged once (kernels.h's prepare_weights). */
static void build_run(Transformer *t, int n_seq) {
    const Config *c = &t->config;
    TransformerWeights *w = &t->weights;
    if (c->pos_kind == POS_SINUSOIDAL) {
        t->sinusoid = sinusoid_table(c->n_ctx, c->n_embd);
        w->wpe = t->sinusoid;
    }
    build_state(&t->state, c, n_seq, t->file_size);
    int count = 0;
    Matrix **matrices = malloc_or_die((4 * (size_t)c->n_layer + 1) * sizeof(Matrix *), "matrix list");
    for (int l = 0; l < c->n_layer; l++) {
        LayerWeights *L = &w->layer[l];
        matrices[count++] = &L->c_attn;
        matrices[count++] = &L->attn_proj;
        matrices[count++] = &L->c_fc;
        matrices[count++] = &L->mlp_proj;
    }
    matrices[count++] = &w->lm_head;
    size_t bytes = prepare_weights(matrices, count, NULL);
    if (bytes) {
        t->weights_copy = alloc_or_die(bytes, "the rearranged copy of the weights", 0); /* every byte written */
        prepare_weights(matrices, count, t->weights_copy);
    }
    free(matrices);
}

static double now_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* The model at path, ready to run n_seq sequences at once (1, or --samples). */
static void build_transformer(Transformer *t, const char *path, int n_seq) {
    memset(t, 0, sizeof *t);
    double start = now_seconds();
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
    if (t->config.n_layer > 0) build_run(t, n_seq);
    t->load_seconds = now_seconds() - start;
}

/* Frees whatever was built, also after a load that stopped part-way (fuzzing). */
static void free_transformer(Transformer *t) {
    free_state(&t->state);
    free(t->weights.layer);
    free(t->sinusoid);
    free(t->weights_copy);
    tokenizer_free(&t->tokenizer);
    if (t->mapped) munmap((void *)t->data, t->file_size);
    memset(t, 0, sizeof *t);
}

/* ---------------------------------------------------------------------------------------
 * The forward pass for T tokens: consecutive positions of one sequence (T = 1 when generating,
 * up to state.block for a prompt), or the next token of each of T samples (Positions).
 * It fills the key/value cache and returns the logits of the last token, or of every token,
 * (T, vocab_size), when all_logits is set (always with samples). Mirrors GPT.forward in
 * export/model.py: every step below works on all T tokens at once, with the operations of
 * kernels.h. */

/* token embedding plus positional encoding, into x (n_embd) */
static void embed(const Transformer *t, float *x, uint32_t token, int pos) {
    int C = t->config.n_embd;
    const Matrix *wte = &t->weights.wte;
    const float *position = t->weights.wpe + (size_t)pos * C;
    if (wte->type == WT_F32) {
        const float *row = wte->f32 + (size_t)token * C;
        for (int i = 0; i < C; i++) x[i] = row[i] + position[i];
    } else { /* a quantized row: quant times its group's scale */
        const float *scale = wte->scale + (size_t)token * C / Q8_GROUP;
        for (int i = 0; i < C; i++) x[i] = (float)quant_at(wte, (size_t)token * C + (size_t)i) * scale[i / Q8_GROUP] + position[i];
    }
}

/* nn.Linear on T tokens: out (T, rows) = x (T, cols) @ W^T + bias; decode: the tokens are
 * samples' decode steps (kernels.h's matmul) */
static void linear(RunState *s, float *out, const float *x, const Matrix *w, const float *bias, int T, int decode) {
    matmul(out, x, w, bias, T, decode, &s->mm);
    if (s->observe_product) s->observe_product(w, x, out, T);
}

/* Where the T tokens of a forward() call are: consecutive positions pos, pos+1, ... of one
 * sequence (a prompt's block, or a decode step of a single run), or, with samples, the next
 * token of each of T samples, all at position pos (--samples: samples decode together). */
typedef struct {
    int pos;            /* position of the first token, or of every one with samples */
    int seq;            /* the sequence of all T tokens, without samples */
    const int *samples; /* (T) or NULL: token i is the next one of sequence samples[i] */
} Positions;

static Positions in_sequence(int seq, long pos) { return (Positions){(int)pos, seq, NULL}; }
static int position_of(const Positions *at, int i) { return at->samples ? at->pos : at->pos + i; }
static int sequence_of(const Positions *at, int i) { return at->samples ? at->samples[i] : at->seq; }

/* One head's keys and values in layer l's cache of sequence seq (RunState's layout). */
static size_t head_offset(const Transformer *t, int seq, int l, int h) {
    const Config *c = &t->config;
    size_t per_head = (size_t)round_up16(c->n_ctx) * round_up16(c->head_size);
    return (((size_t)seq * c->n_layer + l) * c->n_head + h) * per_head;
}

static float *head_keys(Transformer *t, int seq, int l, int h) { return t->state.key_cache + head_offset(t, seq, l, h); }
static float *head_values(Transformer *t, int seq, int l, int h) { return t->state.value_cache + head_offset(t, seq, l, h); }

/* Layer l's keys and values of the T tokens (from qkv) into their sequences' caches. */
static void store_keys_values(Transformer *t, int l, int T, const Positions *at) {
    const Config *c = &t->config;
    RunState *s = &t->state;
    int C = c->n_embd, hs = c->head_size, ctx16 = round_up16(c->n_ctx), hs16 = round_up16(hs);
    size_t C3 = 3 * (size_t)C;
    int h;
#pragma omp parallel for schedule(static) if (T > 1)
    for (h = 0; h < c->n_head; h++) {
        for (int i = 0; i < T; i++) {
            float *keys = head_keys(t, sequence_of(at, i), l, h), *values = head_values(t, sequence_of(at, i), l, h);
            const float *key = s->qkv + i * C3 + C + h * hs, *value = key + C;
            int pos = position_of(at, i);
            for (int d = 0; d < hs; d++) keys[(size_t)d * ctx16 + pos] = key[d];
            memcpy(values + (size_t)pos * hs16, value, (size_t)hs * sizeof(float));
        }
    }
}

/* Causal attention of the T tokens in layer l, every head: the queries in qkv, keys and values
 * in the cache of each token's sequence; each head's output is its head_size slice of xb. The
 * work is split between threads by (block of up to ATTENTION_BLOCK consecutive positions, or
 * one sample's token, head). */
static void multi_head_attention(Transformer *t, int l, int T, const Positions *at) {
    const Config *c = &t->config;
    RunState *s = &t->state;
    int C = c->n_embd, hs = c->head_size, n_head = c->n_head, job;
    int per_block = at->samples ? 1 : ATTENTION_BLOCK;
    int blocks = (T + per_block - 1) / per_block, len = s->att_record_len;
    size_t C3 = 3 * (size_t)C;
#pragma omp parallel for schedule(dynamic, 1)
    for (job = 0; job < blocks * n_head; job++) {
        int i = job / n_head * per_block, h = job % n_head, seq = sequence_of(at, i), pos = position_of(at, i);
        AttentionBlock b = {
            .query = s->qkv + i * C3 + h * hs, .query_stride = (int)C3,
            .keys = head_keys(t, seq, l, h), .key_stride = round_up16(c->n_ctx),
            .values = head_values(t, seq, l, h), .value_stride = round_up16(hs),
            .out = s->xb + (size_t)i * C + h * hs, .out_stride = C,
            .pos = pos, .nq = min_int(per_block, T - i), .head_size = hs,
            /* for the attention picture: row pos+i of this head's (len, len) weights */
            .weights = s->att_record ? s->att_record + (((size_t)l * n_head + h) * len + pos) * len : NULL,
            .weights_stride = len,
        };
        attention(&b, s->att + (size_t)job * s->att_slice);
    }
}

static float *forward(Transformer *t, const uint32_t *tokens, int T, Positions at, int all_logits) {
    const Config *c = &t->config;
    const TransformerWeights *w = &t->weights;
    RunState *s = &t->state;
    int C = c->n_embd, H = c->n_hidden;
    int decode = T == 1 || at.samples; /* every token by itself: the decode arithmetic */
    float *x = s->x;

    /* token embedding plus positional encoding */
    for (int i = 0; i < T; i++) embed(t, x + (size_t)i * C, tokens[i], position_of(&at, i));

    for (int l = 0; l < c->n_layer; l++) {
        const LayerWeights *L = &w->layer[l];

        /* attention: LayerNorm, fused query/key/value projection */
        layernorm(s->xb, x, L->ln_1_weight, L->ln_1_bias, T, C, c->ln_eps);
        linear(s, s->qkv, s->xb, &L->c_attn, L->c_attn_bias, T, decode);

        /* causal multi-head attention: each token's key and value go to its sequence's cache,
         * then each (token, head) attends over that cache up to its position and writes its
         * slice of xb */
        store_keys_values(t, l, T, &at);
        multi_head_attention(t, l, T, &at);

        /* output projection and residual */
        linear(s, s->xb2, s->xb, &L->attn_proj, L->attn_proj_bias, T, decode);
        residual_add(x, s->xb2, T * C);

        /* feed-forward: LayerNorm, expand, GELU, project back, residual */
        layernorm(s->xb, x, L->ln_2_weight, L->ln_2_bias, T, C, c->ln_eps);
        linear(s, s->hb, s->xb, &L->c_fc, L->c_fc_bias, T, decode);
        gelu(s->hb, T * H, c->gelu);
        linear(s, s->xb2, s->hb, &L->mlp_proj, L->mlp_proj_bias, T, decode);
        residual_add(x, s->xb2, T * C);
    }

    /* final LayerNorm and the output head (vocab_size rows: padded ones are never computed),
     * for the last token unless all are wanted */
    int first = all_logits || at.samples ? 0 : T - 1;
    float *last = x + (size_t)first * C;
    layernorm(last, last, w->ln_f_weight, w->ln_f_bias, T - first, C, c->ln_eps);
    linear(s, s->logits, last, &w->lm_head, NULL, T - first, decode);
    return s->logits;
}

/* Tokens in the forward() block that starts at pos when the input ends at end. */
static int block_at(const Transformer *t, long pos, long end) {
    return end - pos < t->state.block ? (int)(end - pos) : t->state.block;
}

/* The tokens ids[0..n) at positions 0..n-1 of sequence seq through forward() in blocks of up
 * to state.block (the prompt's prefill); returns the last position's logits. */
static float *prefill(Transformer *t, int seq, const uint32_t *ids, long n) {
    float *logits = NULL;
    for (long pos = 0; pos < n; pos += t->state.block)
        logits = forward(t, ids + pos, block_at(t, pos, n), in_sequence(seq, pos), 0);
    return logits;
}

/* Sequence from's cache of positions 0..n-1 copied to sequence to (a prompt prefilled once
 * for every sample). */
static void copy_sequence(Transformer *t, int from, int to, long n) {
    const Config *c = &t->config;
    size_t ctx16 = (size_t)round_up16(c->n_ctx), hs16 = (size_t)round_up16(c->head_size);
    for (int l = 0; l < c->n_layer; l++)
        for (int h = 0; h < c->n_head; h++) {
            for (int d = 0; d < c->head_size; d++)
                memcpy(head_keys(t, to, l, h) + d * ctx16, head_keys(t, from, l, h) + d * ctx16, (size_t)n * sizeof(float));
            memcpy(head_values(t, to, l, h), head_values(t, from, l, h), (size_t)n * hs16 * sizeof(float));
        }
}

/* ---------------------------------------------------------------------------------------
 * Streaming output: stdout gets exactly the prompt's bytes then the generated bytes. A UTF-8
 * character split across tokens is held back until it is whole. */

typedef struct {
    uint8_t pending[8]; /* at most 3 bytes of an incomplete character are ever held */
    size_t n_pending;
    size_t written;     /* bytes written so far */
    uint8_t last;       /* the last of them */
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

static void output_bytes(Output *o, const uint8_t *bytes, size_t n) {
    if (n) o->written += n, o->last = bytes[n - 1];
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
 * Generation. */

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

/* ---------------------------------------------------------------------------------------
 * Threads on a shared machine. A decode step is about 50 short matrix products, and each
 * ends when its slowest thread does: when another program keeps a core busy, the thread that
 * shares that core is now and then descheduled for a whole time slice and the team waits (on
 * 2 cores with one busy program, 2 threads decode at half the speed of 1). So decode, unless
 * --threads was given, measures itself as it goes. It keeps a smoothed time per token for the
 * team size in use (the mean of about the last 16 tokens, so that the rare long waits count)
 * and now and then tries another size for TRIAL_TOKENS tokens: the first, which warms up after
 * the change, is not counted, and a trial that is clearly slower ends early. A smaller team
 * that was faster takes over; a larger one only when it was 10% faster (a margin against a
 * lucky trial: fewer threads leave more of the machine to the others). The first trial comes
 * at the 4th token, the next 16 tokens later, then 4 times further apart each time the choice
 * holds (at most 256), and 16 apart again after a change. Team sizes are all threads, half, a
 * quarter ... one. Only the speed depends on the team size, never the numbers (kernels.h). */
#define TEAM_SIZES 8
#define TRIAL_TOKENS 3
#define FIRST_TRIAL 4
#define FIRST_INTERVAL 16
#define LAST_INTERVAL 256
typedef struct {
    int size[TEAM_SIZES], n_sizes; /* candidate team sizes, largest first */
    int current;                   /* index of the size in use */
    double seconds;                /* its smoothed seconds per token; 0 = not measured yet */
    int trying;                    /* index of the size on trial, or -1 */
    double trial_seconds;          /* the trial's tokens so far: their seconds, their count */
    int trial_tokens;
    int next_try;                  /* the trials go round the other sizes */
    int interval, countdown;       /* tokens between trials, and until the next one */
} ThreadChoice;

static void thread_choice_init(ThreadChoice *tc, int threads) {
    memset(tc, 0, sizeof *tc);
    for (int n = threads; n >= 1 && tc->n_sizes < TEAM_SIZES; n /= 2) tc->size[tc->n_sizes++] = n;
    tc->size[tc->n_sizes - 1] = 1;
    tc->trying = -1;
    tc->interval = FIRST_INTERVAL;
    tc->countdown = FIRST_TRIAL;
}

/* The team size for the next token. */
static int thread_choice_next(ThreadChoice *tc) {
    if (tc->trying < 0 && tc->n_sizes > 1 && --tc->countdown <= 0) {
        tc->next_try = (tc->next_try + 1) % tc->n_sizes;
        if (tc->next_try == tc->current) tc->next_try = (tc->next_try + 1) % tc->n_sizes;
        tc->trying = tc->next_try;
        tc->trial_seconds = 0;
        tc->trial_tokens = 0;
    }
    return tc->size[tc->trying >= 0 ? tc->trying : tc->current];
}

/* How long that token took. */
static void thread_choice_record(ThreadChoice *tc, double seconds) {
    if (tc->trying < 0) {
        tc->seconds = tc->seconds > 0 ? (15 * tc->seconds + seconds) / 16 : seconds;
        return;
    }
    if (++tc->trial_tokens == 1) return; /* the first token after a change warms up: not counted */
    tc->trial_seconds += seconds;
    double trial = tc->trial_seconds / (tc->trial_tokens - 1);
    int clearly_slower = trial > 1.25 * tc->seconds; /* no need to go on */
    if (tc->trial_tokens < TRIAL_TOKENS && !clearly_slower) return;
    int smaller = tc->size[tc->trying] < tc->size[tc->current];
    if (trial < (smaller ? 1.0 : 0.9) * tc->seconds) {
        tc->current = tc->trying;
        tc->seconds = trial;
        tc->interval = FIRST_INTERVAL;
    } else if (tc->interval < LAST_INTERVAL) {
        tc->interval *= 4;
    }
    tc->trying = -1;
    tc->countdown = tc->interval;
}

static int thread_count(void) {
#ifdef _OPENMP
    return omp_get_max_threads();
#else
    return 1;
#endif
}

static void set_team_size(int n) {
#ifdef _OPENMP
    omp_set_num_threads(n);
#else
    (void)n;
#endif
}

/* What generate() is asked for besides the prompt. */
typedef struct {
    long max_new;          /* tokens to generate at most, per sample */
    int samples;           /* continuations of the prompt decoded together (--samples) */
    double temperature, top_p; /* the sampler (sampler.h) */
    int top_k;
    uint64_t seed;         /* sample i draws from the random stream of seed + i */
    int ignore_eos;        /* go on past end-of-text */
    int adapt_threads;     /* choose the team size per token (ThreadChoice); else keep it */
    int echo;              /* the prompt's bytes go to stdout before the generated ones */
    long keep;             /* tokens kept when the context is full */
    const char **stop;     /* generation ends with the token that completes one of these */
    int n_stop;
    double repeat_penalty; /* 1: off */
    long repeat_last;      /* tokens the penalty looks back on */
} GenerateOptions;

/* One continuation of the prompt: a plain run has one, --samples N has N, each in its own
 * sequence of the key/value cache. */
typedef struct {
    uint32_t *tokens;   /* the sequence: prompt, then the generated tokens */
    long n_tokens, cap;
    long window;        /* tokens [window, n_tokens) are in its cache, at positions 0... */
    long n_generated;
    Sampler sampler;    /* seeded with seed + the sample's index */
    float *logits;      /* (vocab_size) what its next token is sampled from */
    float *own_logits;  /* (vocab_size) logits of a prefill, which every sample gets a copy of */
    uint8_t tail[1024]; /* the last generated bytes, for the stop strings (each at most 256) */
    size_t tail_len;
    uint8_t *held;      /* generated bytes waiting until the sample's turn to be printed */
    size_t held_len, held_cap;
    int next;           /* the token just drawn */
    int done;
} Sample;

/* Whether a stop string ends within the last `fresh` of the generated bytes held in tail (the
 * last tail_len of them): the token just generated completed one. */
static int completes_stop(const GenerateOptions *g, const uint8_t *tail, size_t tail_len, size_t fresh) {
    for (int i = 0; i < g->n_stop; i++) {
        size_t n = strlen(g->stop[i]);
        for (size_t end = tail_len; end >= n && end + fresh > tail_len; end--)
            if (memcmp(tail + end - n, g->stop[i], n) == 0) return 1;
    }
    return 0;
}

/* stdout and stderr are one terminal: then text that did not end a line would have the
 * timing line glued to it. */
static int same_terminal(void) {
    struct stat out, err;
    return isatty(1) && isatty(2) && fstat(1, &out) == 0 && fstat(2, &err) == 0 &&
           out.st_rdev == err.st_rdev;
}

/* Printing the samples in order: the first unfinished one streams as it is generated, the later
 * ones hold their bytes until their turn. With several samples, each starts with a line of its
 * own, "--- sample I of N, seed S ---", and ends with a newline that is not part of it. */
typedef struct {
    Output out;
    Sample *sample;
    int n, printing; /* samples, and the one printing now */
    const GenerateOptions *g;
    const uint8_t *prompt;
    size_t prompt_len;
} Printer;

static void start_sample(Printer *p) {
    if (p->n > 1) {
        char line[96];
        int len = snprintf(line, sizeof line, "--- sample %d of %d, seed %llu ---\n", p->printing + 1, p->n,
                           (unsigned long long)(p->g->seed + (uint64_t)p->printing));
        output_bytes(&p->out, (const uint8_t *)line, (size_t)len);
    }
    if (p->g->echo) output_bytes(&p->out, p->prompt, p->prompt_len);
    Sample *sm = &p->sample[p->printing];
    output_bytes(&p->out, sm->held, sm->held_len);
    free(sm->held);
    sm->held = NULL;
}

static void print_generated(Printer *p, int i, const uint8_t *bytes, size_t len) {
    if (i == p->printing) { output_bytes(&p->out, bytes, len); return; }
    Sample *sm = &p->sample[i];
    if (sm->held_len + len > sm->held_cap) {
        sm->held_cap = 2 * (sm->held_len + len) + 256;
        sm->held = realloc(sm->held, sm->held_cap);
        if (!sm->held) die("out of memory for the samples' text");
    }
    memcpy(sm->held + sm->held_len, bytes, len);
    sm->held_len += len;
}

/* Sample i is finished: print it to the end, then every later one that is finished too, and
 * start the first that is not. */
static void finish_sample(Printer *p, int i) {
    p->sample[i].done = 1;
    while (p->printing < p->n && p->sample[p->printing].done) {
        output_finish(&p->out);
        if (p->n > 1) output_bytes(&p->out, (const uint8_t *)"\n", 1);
        if (++p->printing < p->n) start_sample(p);
    }
}

/* A sample's next token, drawn from its logits by its own sampler (samplers share nothing, so
 * the samples draw at once). */
static void draw_token(const Transformer *t, const GenerateOptions *g, Sample *sm) {
    int vocab = t->config.vocab_size;
    if (g->repeat_penalty != 1.0) {
        long back = sm->n_tokens < g->repeat_last ? sm->n_tokens : g->repeat_last;
        repeat_penalty(&sm->sampler, sm->logits, vocab, sm->tokens + sm->n_tokens - back, back, g->repeat_penalty);
    }
    sm->next = sample(&sm->sampler, sm->logits, vocab);
}

/* Sample i's token just drawn, printed (or held); returns 0 when it finishes the sample
 * (end-of-text, a stop string, or max_new tokens), else 1: the token is to be fed back. */
static int take_token(Transformer *t, const GenerateOptions *g, Printer *p, int i) {
    Sample *sm = &p->sample[i];
    int next = sm->next;
    if (next == t->tokenizer.eot_id && !g->ignore_eos) return 0;
    size_t len;
    const uint8_t *bytes = tokenizer_token(&t->tokenizer, (uint32_t)next, &len);
    print_generated(p, i, bytes, len);
    sm->n_generated++;
    if (sm->n_tokens == sm->cap) {
        sm->tokens = realloc(sm->tokens, (size_t)(sm->cap *= 2) * sizeof(uint32_t));
        if (!sm->tokens) die("out of memory for the generated tokens");
    }
    sm->tokens[sm->n_tokens++] = (uint32_t)next;
    if (g->n_stop) { /* the last sizeof tail generated bytes */
        size_t fresh = len < sizeof sm->tail ? len : sizeof sm->tail;
        size_t drop = sm->tail_len + fresh > sizeof sm->tail ? sm->tail_len + fresh - sizeof sm->tail : 0;
        memmove(sm->tail, sm->tail + drop, sm->tail_len - drop);
        memcpy(sm->tail + sm->tail_len - drop, bytes + len - fresh, fresh);
        sm->tail_len += fresh - drop;
        if (completes_stop(g, sm->tail, sm->tail_len, fresh)) return 0;
    }
    /* fed back only when another token will be sampled after it */
    return sm->n_generated < g->max_new;
}

/* Generation past the context window: a sample's key/value cache holds its window, tokens
 * [window, n_tokens) of the sequence at positions 0... When the next token would not fit
 * (position n_ctx), the window moves to the last g->keep tokens before it, which go through
 * the model again at positions 0..keep-1 with the new token after them (one prefill); then
 * decoding goes on. A prompt longer than the context keeps its last n_ctx tokens.
 * export/model.py's generate() does exactly this, so the tokens stay the reference's.
 * Samples (g->samples > 1): the prompt is prefilled once and its cache copied to every sample;
 * then each step feeds the next token of every unfinished sample through one forward() call,
 * each attending to its own cache. All of them are the same number of tokens long, so their
 * windows move together. Sample i is byte for byte a plain run with seed + i: its numbers are
 * computed with the same arithmetic (kernels.h's decode arithmetic). */
static void generate(Transformer *t, const uint8_t *prompt, size_t prompt_len, const GenerateOptions *g) {
    const Config *c = &t->config;
    int N = g->samples, vocab = c->vocab_size;
    long n_tokens;
    uint32_t *ids = encode_or_die(t, prompt, prompt_len, &n_tokens);
    int from_start = n_tokens == 0;
    if (from_start) {
        free(ids);
        ids = malloc_or_die(sizeof(uint32_t), "the prompt's tokens");
        ids[n_tokens++] = start_token(t);
    }
    long window = 0;
    if (n_tokens > c->n_ctx) {
        window = n_tokens - c->n_ctx;
        fprintf(stderr, "note: the prompt is %ld tokens, longer than the context of %d: its first %ld "
                "tokens were dropped\n", n_tokens, c->n_ctx, window);
    }
    if (N > 1 && g->temperature == 0)
        fprintf(stderr, "note: -t 0 (greedy) makes all %d samples the same\n", N);

    Sample *samples = malloc_or_die((size_t)N * sizeof(Sample), "samples");   /* (N), zeroed */
    int *active = malloc_or_die((size_t)N * sizeof(int), "samples");           /* (N) sequences of this step */
    uint32_t *next = malloc_or_die((size_t)N * sizeof(uint32_t), "samples");   /* (N) their tokens */
    for (int i = 0; i < N; i++) {
        Sample *sm = &samples[i];
        sm->cap = n_tokens + 1 + (g->max_new < 4096 ? g->max_new : 4096);
        sm->tokens = malloc_or_die((size_t)sm->cap * sizeof(uint32_t), "the samples' tokens");
        memcpy(sm->tokens, ids, (size_t)n_tokens * sizeof(uint32_t));
        sm->n_tokens = n_tokens;
        sm->window = window;
        sm->own_logits = malloc_or_die((size_t)vocab * sizeof(float), "the samples' logits");
        sm->logits = sm->own_logits;
        if (!build_sampler(&sm->sampler, vocab, g->temperature, g->top_k, g->top_p, g->seed + (uint64_t)i))
            die("out of memory for the sampler");
    }
    free(ids);
    Printer p = {.sample = samples, .n = N, .g = g, .prompt = prompt, .prompt_len = from_start ? 0 : prompt_len};
    start_sample(&p);

    /* the prompt through the model in blocks (prefill), filling the first sample's key/value
     * cache; the others get a copy */
    double t0 = now_seconds();
    long n_prefilled = n_tokens - window;
    const float *logits = prefill(t, 0, samples[0].tokens + window, n_prefilled);
    for (int i = 0; i < N; i++) {
        memcpy(samples[i].own_logits, logits, (size_t)vocab * sizeof(float));
        if (i > 0) copy_sequence(t, 0, i, n_prefilled);
    }
    double t1 = now_seconds();

    ThreadChoice threads;
    thread_choice_init(&threads, g->adapt_threads ? thread_count() : 1);
    if (g->max_new == 0) for (int i = 0; i < N; i++) finish_sample(&p, i);
    for (;;) {
        int T = 0, j;
        for (int i = 0; i < N; i++) if (!samples[i].done) active[T++] = i;
        if (T == 0) break;
#pragma omp parallel for schedule(dynamic, 1) if (T > 1)
        for (j = 0; j < T; j++) draw_token(t, g, &samples[active[j]]);
        int fed = 0; /* each unfinished sample's token, fed back in one forward() call */
        for (j = 0; j < T; j++) {
            if (!take_token(t, g, &p, active[j])) { finish_sample(&p, active[j]); continue; }
            next[fed] = (uint32_t)samples[active[j]].next;
            active[fed++] = active[j];
        }
        if ((T = fed) == 0) break;
        Sample *first = &samples[active[0]]; /* all T are as long as this one */
        if (first->n_tokens - 1 - first->window == c->n_ctx) { /* no room for the token: move the windows */
            for (j = 0; j < T; j++) {
                Sample *sm = &samples[active[j]];
                sm->window = sm->n_tokens - 1 - g->keep;
                logits = prefill(t, active[j], sm->tokens + sm->window, g->keep + 1);
                memcpy(sm->own_logits, logits, (size_t)vocab * sizeof(float));
                sm->logits = sm->own_logits;
            }
            continue;
        }
        if (g->adapt_threads) set_team_size(thread_choice_next(&threads));
        double step = now_seconds();
        Positions at = {.pos = (int)(first->n_tokens - 1 - first->window), .samples = active};
        float *rows = forward(t, next, T, at, 0);
        for (j = 0; j < T; j++) samples[active[j]].logits = rows + (size_t)j * vocab;
        if (g->adapt_threads) thread_choice_record(&threads, (now_seconds() - step) / T);
    }
    output_finish(&p.out);
    if (g->adapt_threads) set_team_size(threads.size[0]);
    double t2 = now_seconds();
    long n_generated = 0;
    for (int i = 0; i < N; i++) {
        n_generated += samples[i].n_generated;
        free(samples[i].tokens);
        free(samples[i].own_logits);
        free_sampler(&samples[i].sampler);
    }
    free(samples); free(active); free(next);
    if (p.out.written && p.out.last != '\n' && same_terminal()) fputc('\n', stderr);
    fprintf(stderr, "timing: load %.3f s, prompt %ld tokens %.2f tok/s, generated %ld tokens %.2f tok/s\n",
            t->load_seconds, n_prefilled, t1 > t0 ? n_prefilled / (t1 - t0) : 0.0, n_generated,
            t2 > t1 ? n_generated / (t2 - t1) : 0.0);
}

/* ---------------------------------------------------------------------------------------
 * Tool modes: --logits, --attention, --perplexity, --tokenize, --info. */

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
    if (!o.f) die("cannot create '%s': %s", path, strerror(errno));
    return o;
}

static void commit_or_die(OutFile *o) {
    if (ferror(o->f) | (fclose(o->f) != 0) || rename(o->tmp, o->path) != 0) {
        remove(o->tmp);
        die("cannot write '%s': %s", o->path, strerror(errno));
    }
    free(o->tmp);
}

/* --logits: the prompt through the key/value-cache path, logits of every position written as
 * raw little-endian float32, shape (n_prompt, vocab_size); for comparing with PyTorch. */
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
        const float *logits = forward(t, ids + pos, T, in_sequence(0, pos), 1);
        fwrite(logits, sizeof(float), (size_t)T * (size_t)t->config.vocab_size, out.f);
    }
    commit_or_die(&out); /* a short write shows up in ferror there */
    free(ids);
}

/* --attention: the prompt's attention weights, kept by forward() as it runs, as a web page
 * (attention_page.h). */
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
    prefill(t, 0, ids, n);

    OutFile out = create_or_die(path);
    AttentionPicture picture = {model_path, &t->tokenizer, ids, n, c->n_layer, c->n_head, s->att_record};
    write_attention_page(out.f, &picture);
    commit_or_die(&out);
    fprintf(stderr, "wrote %s: %ld tokens, %d layers x %d heads\n", path, n, c->n_layer, c->n_head);
    free(s->att_record);
    s->att_record = NULL;
    free(ids);
}

/* --perplexity. The file's tokens, after an end-of-text token when the vocabulary has one (so
 * that the first token is predicted too), are scored in windows of n_ctx tokens that start
 * every stride = n_ctx / 2 tokens: the first window scores all its positions, each later window
 * only the positions the previous one did not reach, so every token is predicted once, from at
 * least n_ctx / 2 tokens of context (except at the start). Each window has n_ctx input tokens,
 * each predicting the token after it. Prints tokens (predicted), mean negative log-likelihood
 * in nats, perplexity and bits per byte of the file. export/model.py's perplexity() is the
 * same computation in PyTorch. */
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
            const float *all = forward(t, ids + chunk, T, in_sequence(0, chunk - begin), scores);
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
    printf("file: %s (%zu bytes, format version %u), loaded in %.3f s\n", path, t->file_size,
           h->version, t->load_seconds);
    printf("kernels: %s, %d threads\n", kernels_description(), thread_count());
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
           weight_type_name(c->weight_type));
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
 * Command line. */

#define RUN_VERSION "0.9.0"

static void usage(FILE *f) {
    fprintf(f,
        "usage: run MODEL.bin [options]\n"
        "Generates text after a prompt; or, with one of the tool modes, scores, draws or inspects.\n"
        "The prompt: -i TEXT, -f FILE (- for stdin), or stdin when it is not a terminal; none\n"
        "starts from the end-of-text token.\n"
        "  -i, --prompt TEXT         prompt text\n"
        "  -f, --prompt-file FILE    prompt read from a file (raw bytes; - reads stdin)\n"
        "generation:\n"
        "  -n, --max-new-tokens N    tokens to generate after the prompt (default 256); past the\n"
        "                            context the window moves (--keep)\n"
        "  -t, --temperature T       0 = greedy argmax (default 1.0)\n"
        "  -k, --top-k K             keep the K most likely tokens, 0 = off (default 0)\n"
        "  -p, --top-p P             nucleus sampling, 1.0 = off (default 0.9)\n"
        "  -s, --seed S              RNG seed (default: from the clock); echoed on stderr\n"
        "      --repeat-penalty R    divide a recent token's positive logit by R, multiply a\n"
        "                            negative one (Hugging Face's rule; default 1.0 = off)\n"
        "      --repeat-last N       tokens the penalty looks back on (default 64)\n"
        "      --stop STR            stop after the token that completes STR in the generated\n"
        "                            text (printed whole; repeatable)\n"
        "      --keep N              tokens kept when the context is full (default: half of it)\n"
        "      --ignore-eos          keep generating past the end-of-text token\n"
        "      --no-echo             leave the prompt out of stdout\n"
        "      --samples N           N continuations decoded together, sample i with seed S+i,\n"
        "                            each after a line '--- sample I of N, seed S ---' (default 1)\n"
        "tool modes (one at a time, then exit):\n"
        "      --tokenize            show the prompt's tokens (coloured on a terminal)\n"
        "      --ids                 with --tokenize: only the ids, even on a terminal\n"
        "      --perplexity FILE     score FILE (- for stdin): tokens=N nll=X ppl=Y bpb=Z\n"
        "      --attention OUT.html  write the prompt's attention weights as a web page\n"
        "      --logits OUT          write the prompt's logits at every position (float32,\n"
        "                            positions x vocab_size) for comparing with PyTorch\n"
        "      --info                print the model's configuration, file layout and kernels\n"
        "any mode that runs the model:\n"
        "      --threads N           worker threads (default: the CPUs this process may use,\n"
        "                            fewer while generating if that is faster: a busy machine)\n"
        "      --block N             prompt tokens per forward pass (default 128; 1 = one at a\n"
        "                            time, as generation does)\n"
        "  -h, --help                this text\n"
        "      --version             the program's version and the model file format it reads\n"
        "examples:\n"
        "  run models/kjv.bin -i \"And God said\" -n 200 -t 0.8 -k 40\n"
        "  echo \"In the beginning\" | run models/kjv.bin -t 0 --repeat-penalty 1.3 --stop \".\"\n"
        "  run models/kjv.bin --perplexity heldout.txt\n");
}

static long parse_long(const char *flag, const char *s, long lo, long hi) {
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (*s == '\0' || *end != '\0') die("%s needs a whole number from %ld to %ld, got '%s'", flag, lo, hi, s);
    if (errno == ERANGE || v < lo || v > hi) die("%s must be between %ld and %ld, got %s", flag, lo, hi, s);
    return v;
}

/* hint: said after the error when the value is not a number at all */
static double parse_double(const char *flag, const char *s, double lo, double hi, const char *hint) {
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (*s == '\0' || *end != '\0' || isnan(v))
        die("%s needs a number from %g to %g, got '%s'%s", flag, lo, hi, s, hint ? hint : "");
    if (errno == ERANGE || !isfinite(v) || v < lo || v > hi)
        die("%s must be between %g and %g, got %s", flag, lo, hi, s);
    return v;
}

/* The whole of a file, or of stdin for "-". */
static uint8_t *read_file_or_die(const char *path, size_t *len) {
    int is_stdin = strcmp(path, "-") == 0;
    const char *name = is_stdin ? "standard input" : path;
    FILE *f = is_stdin ? stdin : fopen(path, "rb");
    if (!f) die("cannot open file '%s': %s", path, strerror(errno));
    struct stat st;
    if (fstat(fileno(f), &st) == 0 && S_ISDIR(st.st_mode))
        die("'%s' is a directory, not a file", name);
    size_t cap = 4096, n = 0;
    uint8_t *buf = malloc_or_die(cap, "prompt");
    for (;;) {
        n += fread(buf + n, 1, cap - n, f);
        if (ferror(f)) die("cannot read '%s': %s", name, strerror(errno));
        if (n < cap) break;
        buf = realloc(buf, cap *= 2);
        if (!buf) die("out of memory reading '%s'", name);
    }
    if (!is_stdin) fclose(f);
    *len = n;
    return buf;
}

/* Everything the command line says. */
typedef struct {
    const char *model_path;
    const char *prompt, *prompt_file;
    const char *logits_path, *perplexity_path, *attention_path;
    long max_new, top_k, threads, block, keep, repeat_last, samples;
    double temperature, top_p, repeat_penalty;
    uint64_t seed;
    int have_seed, ignore_eos, tokenize, ids_only, info, no_echo;
    const char **stop;
    int n_stop;
    /* for refusing combinations */
    const char *mode;             /* the tool mode, or NULL for generation */
    const char *generation_flag;  /* the first flag given that only generation uses, or NULL */
    int block_given;              /* --block: only modes that run the model use it */
} Options;

enum { OPT_BLOCK = 255, OPT_THREADS = 256, OPT_IGNORE_EOS, OPT_TOKENIZE, OPT_IDS, OPT_PERPLEXITY, OPT_ATTENTION,
       OPT_INFO, OPT_LOGITS, OPT_STOP, OPT_KEEP, OPT_REPEAT_PENALTY, OPT_REPEAT_LAST, OPT_NO_ECHO, OPT_VERSION,
       OPT_SAMPLES };

static void set_mode(Options *o, const char *flag) {
    if (o->mode && strcmp(o->mode, flag) != 0) die("%s and %s are two modes: give one at a time", o->mode, flag);
    o->mode = flag;
}

/* The flag's name when only generation uses it, else NULL. */
static const char *generation_only(int opt) {
    switch (opt) {
    case 'n': return "-n"; case 't': return "-t"; case 'k': return "-k"; case 'p': return "-p";
    case 's': return "-s"; case OPT_IGNORE_EOS: return "--ignore-eos"; case OPT_STOP: return "--stop";
    case OPT_KEEP: return "--keep"; case OPT_REPEAT_PENALTY: return "--repeat-penalty";
    case OPT_REPEAT_LAST: return "--repeat-last"; case OPT_NO_ECHO: return "--no-echo";
    case OPT_SAMPLES: return "--samples";
    default: return NULL;
    }
}

/* Generation and the modes that read a prompt (-i, -f or stdin). */
static int takes_prompt(const Options *o) {
    return !o->mode || o->tokenize || o->attention_path || o->logits_path;
}

static Options parse_options(int argc, char **argv) {
    Options o = {.max_new = 256, .block = PREFILL_BLOCK, .temperature = 1.0, .top_p = 0.9, .keep = -1,
                 .repeat_penalty = 1.0, .repeat_last = 64, .samples = 1};
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
        {"stop", required_argument, 0, OPT_STOP},
        {"keep", required_argument, 0, OPT_KEEP},
        {"repeat-penalty", required_argument, 0, OPT_REPEAT_PENALTY},
        {"repeat-last", required_argument, 0, OPT_REPEAT_LAST},
        {"no-echo", no_argument, 0, OPT_NO_ECHO},
        {"samples", required_argument, 0, OPT_SAMPLES},
        {"tokenize", no_argument, 0, OPT_TOKENIZE},
        {"ids", no_argument, 0, OPT_IDS},
        {"perplexity", required_argument, 0, OPT_PERPLEXITY},
        {"attention", required_argument, 0, OPT_ATTENTION},
        {"info", no_argument, 0, OPT_INFO},
        {"logits", required_argument, 0, OPT_LOGITS},
        {"help", no_argument, 0, 'h'},
        {"version", no_argument, 0, OPT_VERSION},
        {0, 0, 0, 0},
    };
    opterr = 0; /* we print our own one-line errors */
    int opt;
    while ((opt = getopt_long(argc, argv, ":i:f:n:t:k:p:s:h", options, NULL)) != -1) {
        if (!o.generation_flag) o.generation_flag = generation_only(opt);
        switch (opt) {
        case 'i': o.prompt = optarg; break;
        case 'f': o.prompt_file = optarg; break;
        case 'n': o.max_new = parse_long("-n/--max-new-tokens", optarg, 0, LONG_MAX / 2); break;
        case 't': o.temperature = parse_double("-t/--temperature", optarg, 0.0, 1e6, NULL); break;
        case 'k': o.top_k = parse_long("-k/--top-k", optarg, 0, INT_MAX); break;
        case 'p': o.top_p = parse_double("-p/--top-p", optarg, 1e-9, 1.0, " (the prompt is given with -i TEXT)"); break;
        case 's': {
            char *end;
            errno = 0;
            unsigned long long v = strtoull(optarg, &end, 10);
            if (!*optarg || *end || *optarg == '-')
                die("-s/--seed needs a whole number from 0 to 2^64-1, got '%s'", optarg);
            if (errno == ERANGE) die("-s/--seed must be between 0 and 2^64-1, got %s", optarg);
            o.seed = v;
            o.have_seed = 1;
            break;
        }
        case OPT_THREADS: o.threads = parse_long("--threads", optarg, 1, 1024); break;
        case OPT_BLOCK: o.block = parse_long("--block", optarg, 1, PREFILL_BLOCK); o.block_given = 1; break;
        case OPT_IGNORE_EOS: o.ignore_eos = 1; break;
        case OPT_STOP: {
            size_t n = strlen(optarg);
            if (n == 0 || n > 256) die("--stop needs a string of 1 to 256 bytes, got %zu bytes", n);
            const char **more = realloc(o.stop, (size_t)(o.n_stop + 1) * sizeof *more);
            if (!more) die("out of memory for the stop strings");
            o.stop = more;
            o.stop[o.n_stop++] = optarg;
            break;
        }
        case OPT_KEEP: o.keep = parse_long("--keep", optarg, 0, INT_MAX); break;
        case OPT_REPEAT_PENALTY: o.repeat_penalty = parse_double("--repeat-penalty", optarg, 1e-3, 1e3, NULL); break;
        case OPT_REPEAT_LAST: o.repeat_last = parse_long("--repeat-last", optarg, 1, INT_MAX); break;
        case OPT_NO_ECHO: o.no_echo = 1; break;
        case OPT_SAMPLES: o.samples = parse_long("--samples", optarg, 1, 1L << 30); break;
        case OPT_TOKENIZE: set_mode(&o, "--tokenize"); o.tokenize = 1; break;
        case OPT_IDS: o.ids_only = 1; break;
        case OPT_PERPLEXITY: set_mode(&o, "--perplexity"); o.perplexity_path = optarg; break;
        case OPT_ATTENTION: set_mode(&o, "--attention"); o.attention_path = optarg; break;
        case OPT_INFO: set_mode(&o, "--info"); o.info = 1; break;
        case OPT_LOGITS: set_mode(&o, "--logits"); o.logits_path = optarg; break;
        case 'h': usage(stdout); exit(0);
        case OPT_VERSION:
            printf("run %s (model file format version %u)\n", RUN_VERSION, MODEL_VERSION);
            exit(0);
        case ':': die("option '%s' needs a value (see --help)", argv[optind - 1]);
        default: die("unknown option '%s' (see --help)", argv[optind - 1]);
        }
    }
    if (optind >= argc) die("no model file given (usage: run MODEL.bin [options], see --help)");
    if (optind + 1 < argc) die("unexpected argument '%s' (see --help)", argv[optind + 1]);
    o.model_path = argv[optind];

    /* combinations that would leave a flag without effect are refused */
    if (o.prompt && o.prompt_file) die("give the prompt with -i or -f, not both");
    if (!takes_prompt(&o) && (o.prompt || o.prompt_file))
        die("%s takes no prompt (-i/-f): %s", o.mode,
            o.perplexity_path ? "it scores the file given to it" : "it reads only the model");
    if (o.ids_only && !o.tokenize) die("--ids only goes with --tokenize");
    if (o.mode && o.generation_flag) die("%s only affects generation, not %s", o.generation_flag, o.mode);
    /* --info reports the thread count, so it takes --threads */
    if ((o.tokenize || o.info) && o.block_given) die("--block does nothing with %s (it runs no model)", o.mode);
    if (o.tokenize && o.threads > 0) die("--threads does nothing with --tokenize (it runs no model)");
    return o;
}

/* The prompt: -i, -f (- for stdin), else stdin when it is not a terminal, else none. */
static uint8_t *read_prompt(const Options *o, size_t *len) {
    *len = 0;
    if (o->prompt_file) return read_file_or_die(o->prompt_file, len);
    if (o->prompt) {
        *len = strlen(o->prompt);
        uint8_t *text = malloc_or_die(*len + 1, "prompt");
        memcpy(text, o->prompt, *len);
        return text;
    }
    if (!isatty(0)) return read_file_or_die("-", len);
    return NULL;
}

#ifndef TESTING
int main(int argc, char **argv) {
    Options o = parse_options(argc, argv);
    signal(SIGPIPE, SIG_IGN); /* a closed pipe shows up as EPIPE, handled in write_or_die */
    if (o.threads > 0) set_team_size((int)o.threads);
    size_t text_len = 0;
    uint8_t *text = takes_prompt(&o) ? read_prompt(&o, &text_len) : NULL;

    Transformer transformer;
    build_transformer(&transformer, o.model_path, o.mode ? 1 : (int)o.samples);
    const Config *c = &transformer.config;
    if (transformer.state.block > o.block) transformer.state.block = (int)o.block;
    if (o.info) print_info(&transformer, o.model_path);
    else if (o.tokenize) print_tokens(&transformer, text, text_len, o.ids_only);
    else if (c->n_layer == 0)
        die("'%s' holds only a tokenizer: it can --tokenize but not generate", o.model_path);
    else if (o.perplexity_path) {
        size_t file_len;
        uint8_t *file = read_file_or_die(o.perplexity_path, &file_len);
        perplexity(&transformer, file, file_len);
        free(file);
    } else if (o.attention_path) {
        write_attention(&transformer, text, text_len, o.model_path, o.attention_path);
    } else if (o.logits_path) {
        write_logits(&transformer, text, text_len, o.logits_path);
    } else {
        if (o.keep >= c->n_ctx)
            die("--keep must be between 0 and %d (the context less one), got %ld", c->n_ctx - 1, o.keep);
        uint64_t seed = o.have_seed ? o.seed : (uint64_t)time(NULL) ^ ((uint64_t)getpid() << 32);
        if (o.samples > 1) fprintf(stderr, "seed: %llu (samples: seeds %llu to %llu)\n", (unsigned long long)seed,
                                   (unsigned long long)seed, (unsigned long long)(seed + (uint64_t)o.samples - 1));
        else fprintf(stderr, "seed: %llu\n", (unsigned long long)seed);
        GenerateOptions g = {.max_new = o.max_new, .samples = (int)o.samples, .temperature = o.temperature,
                             .top_p = o.top_p, .top_k = (int)o.top_k, .seed = seed, .ignore_eos = o.ignore_eos,
                             .adapt_threads = o.threads == 0, .echo = !o.no_echo,
                             .keep = o.keep >= 0 ? o.keep : c->n_ctx / 2, .stop = o.stop, .n_stop = o.n_stop,
                             .repeat_penalty = o.repeat_penalty, .repeat_last = o.repeat_last};
        generate(&transformer, text, text_len, &g);
    }
    free_transformer(&transformer);
    free(text);
    free(o.stop);
    return 0;
}
#endif
