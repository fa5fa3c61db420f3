/* llama.cpp itself as the reference of the GGUF tests (tests/test_gguf.py): its tokenizer, its
 * forward pass, its quantizer and its dequantizer, from the prebuilt libraries of the npm package
 * @node-llama-cpp/linux-x64 (or linux-arm64) 3.21.1, compiled against the headers of the same
 * release (node-llama-cpp's llama/gitRelease.bundle; the Makefile extracts them into tests/build).
 *
 * usage: llama_ref tokenize MODEL.gguf [--special] < RECORDS
 *            each text of RECORDS (a little-endian uint32 byte count, then the bytes, as
 *            tests/tokenize_lines.c reads them) as one line of ids: the vocabulary's BOS when
 *            its add_bos says so; --special: parse_special, a control token's text is that token
 *        llama_ref logits MODEL.gguf IDS OUT      the logits of every position of IDS (a file of
 *            ids separated by spaces) in one batch, as float32 [n_ids][n_vocab] to OUT
 *        llama_ref generate MODEL.gguf IDS N     N greedy tokens after IDS, one per line: the id
 *            and the gap between the largest logit and the next (how clear the choice was)
 *        llama_ref bench MODEL.gguf IDS N THREADS  speed as llama.cpp runs by default (its context
 *            defaults: binary16 keys and values, flash attention as it decides, the prompt in
 *            one batch), on THREADS threads: IDS prefilled, then N greedy tokens decoded one a
 *            call; prints run's timing line, "timing: load S s, prompt P tokens X tok/s,
 *            generated N tokens Y tok/s" (tests/bench/bench.py reads both programs' alike)
 *        llama_ref quantize IN.gguf OUT.gguf FTYPE [OUTPUT_TYPE [EMBEDDING_TYPE]]
 *            llama_model_quantize to FTYPE (f16, bf16, q8_0, q4_0, q5_0, q5_1, q4_1, and the mixes
 *            q4_k_m, q5_k_m, q6_k, iq4_nl, iq4_xs, q2_k, q3_k_s, q3_k_m, q3_k_l, each as
 *            llama-quantize names it); the output head's and the
 *            token embedding's types (ggml type names) when given
 *        llama_ref vocab MODEL.gguf               what llama.cpp makes of the vocabulary's special
 *            tokens: "bos ID ADD_BOS" (ADD_BOS 1 when it puts BOS before a text), then "eog" and
 *            the ids that end a generation (llama_vocab_is_eog)
 *        llama_ref dequantize MODEL.gguf DIR     every tensor through ggml's own to_float, as
 *            DIR/NAME.f32, and on stdout a line per tensor: name, type, its four dimensions
 *            (ne[0], the length of a row, first)
 *
 * The forward pass runs on the CPU with float32 keys and values and no flash attention, every
 * position of the prompt in one micro-batch, so that what differs from run.c is only what
 * llama.cpp's matrix products round (tests/test_gguf.py derives its tolerance from that).
 * Errors print one line "llama_ref: ..." and exit with status 1. */
#define _POSIX_C_SOURCE 200809L /* clock_gettime */
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "ggml-backend.h"
#include "ggml.h"
#include "gguf.h"
#include "llama.h"

#ifndef LLAMA_LIBS
#error "LLAMA_LIBS: the folder of the prebuilt libraries (the Makefile defines it)"
#endif

static void fail(const char *what, const char *detail) {
    fprintf(stderr, "llama_ref: %s%s%s\n", what, detail ? ": " : "", detail ? detail : "");
    exit(1);
}

static void *checked_malloc(size_t n) {
    void *p = malloc(n ? n : 1);
    if (!p) fail("out of memory", NULL);
    return p;
}

/* llama.cpp's log lines only when they are warnings or errors (the rest is its chatter). */
static void quiet_log(enum ggml_log_level level, const char *text, void *user) {
    static enum ggml_log_level last = GGML_LOG_LEVEL_INFO;
    (void)user;
    if (level != GGML_LOG_LEVEL_CONT) last = level;
    if (last >= GGML_LOG_LEVEL_WARN) fputs(text, stderr);
}

static int32_t *read_ids(const char *path, int *n) {
    FILE *f = fopen(path, "r");
    if (!f) fail("cannot open", path);
    int cap = 256;
    int32_t *ids = checked_malloc(cap * sizeof *ids);
    long v;
    *n = 0;
    while (fscanf(f, "%ld", &v) == 1) {
        if (*n == cap) {
            cap *= 2;
            ids = realloc(ids, cap * sizeof *ids);
            if (!ids) fail("out of memory", NULL);
        }
        ids[(*n)++] = (int32_t)v;
    }
    fclose(f);
    if (*n == 0) fail("no ids in", path);
    return ids;
}

static struct llama_model *load_model(const char *path, int vocab_only) {
    struct llama_model_params params = llama_model_default_params();
    params.n_gpu_layers = 0;
    params.vocab_only = vocab_only;
    struct llama_model *model = llama_model_load_from_file(path, params);
    if (!model) fail("llama.cpp cannot load", path);
    return model;
}

static int tokenize(const char *path, int special) {
    struct llama_model *model = load_model(path, 1);
    const struct llama_vocab *vocab = llama_model_get_vocab(model);
    uint8_t head[4];
    char *text = NULL;
    int32_t *ids = NULL;
    while (fread(head, 1, 4, stdin) == 4) {
        uint32_t len = head[0] | (uint32_t)head[1] << 8 | (uint32_t)head[2] << 16 | (uint32_t)head[3] << 24;
        text = realloc(text, len + 1);
        ids = realloc(ids, ((size_t)len + 8) * sizeof *ids);  /* at most a token per byte, and BOS */
        if (!text || !ids) fail("out of memory", NULL);
        if (fread(text, 1, len, stdin) != len) fail("a record is cut short", NULL);
        int32_t n = llama_tokenize(vocab, text, (int32_t)len, ids, (int32_t)len + 8, 1, special);
        if (n < 0) fail("llama_tokenize failed", NULL);
        for (int32_t i = 0; i < n; i++) printf(i ? " %d" : "%d", ids[i]);
        putchar('\n');
    }
    free(text);
    free(ids);
    llama_model_free(model);
    return 0;
}

/* A context for n_ctx positions on `threads` CPU threads: float32 keys and values, no flash
 * attention, one micro-batch holding a whole prompt. */
static struct llama_context *context(struct llama_model *model, int n_ctx, int threads) {
    struct llama_context_params params = llama_context_default_params();
    params.n_ctx = params.n_batch = params.n_ubatch = (uint32_t)n_ctx;
    params.n_seq_max = 1;
    params.n_threads = params.n_threads_batch = threads;
    params.flash_attn_type = LLAMA_FLASH_ATTN_TYPE_DISABLED;
    params.type_k = params.type_v = GGML_TYPE_F32;
    params.offload_kqv = false;
    params.op_offload = false;
    params.no_perf = true;
    struct llama_context *ctx = llama_init_from_model(model, params);
    if (!ctx) fail("llama_init_from_model failed", NULL);
    return ctx;
}

/* ids at positions first, first + 1, ...; logits wanted for each when all_logits, else the last. */
static void decode(struct llama_context *ctx, const int32_t *ids, int n, int first, int all_logits) {
    struct llama_batch batch = llama_batch_init(n, 0, 1);
    for (int i = 0; i < n; i++) {
        batch.token[i] = ids[i];
        batch.pos[i] = first + i;
        batch.n_seq_id[i] = 1;
        batch.seq_id[i][0] = 0;
        batch.logits[i] = all_logits || i == n - 1;
    }
    batch.n_tokens = n;
    int rc = llama_decode(ctx, batch);
    llama_batch_free(batch);
    if (rc != 0) fail("llama_decode failed", NULL);
}

static int vocab_tokens(const char *path) {
    struct llama_model *model = load_model(path, 1);
    const struct llama_vocab *vocab = llama_model_get_vocab(model);
    printf("bos %d %d\neog", llama_vocab_bos(vocab), llama_vocab_get_add_bos(vocab) ? 1 : 0);
    for (int32_t id = 0; id < llama_vocab_n_tokens(vocab); id++)
        if (llama_vocab_is_eog(vocab, id)) printf(" %d", id);
    putchar('\n');
    llama_model_free(model);
    return 0;
}

static int logits(const char *path, const char *ids_path, const char *out_path) {
    int n;
    int32_t *ids = read_ids(ids_path, &n);
    struct llama_model *model = load_model(path, 0);
    int n_vocab = llama_vocab_n_tokens(llama_model_get_vocab(model));
    for (int i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= n_vocab) fail("an id outside the vocabulary in", ids_path);
    struct llama_context *ctx = context(model, n, 2);
    decode(ctx, ids, n, 0, 1);
    FILE *out = fopen(out_path, "wb");
    if (!out) fail("cannot write", out_path);
    for (int i = 0; i < n; i++) {
        const float *row = llama_get_logits_ith(ctx, i);
        if (!row || fwrite(row, sizeof(float), (size_t)n_vocab, out) != (size_t)n_vocab) fail("cannot write", out_path);
    }
    if (fclose(out) != 0) fail("cannot write", out_path);
    llama_free(ctx);
    llama_model_free(model);
    free(ids);
    return 0;
}

static int generate(const char *path, const char *ids_path, int steps) {
    int n;
    int32_t *ids = read_ids(ids_path, &n);
    struct llama_model *model = load_model(path, 0);
    int n_vocab = llama_vocab_n_tokens(llama_model_get_vocab(model));
    struct llama_context *ctx = context(model, n + steps, 1); /* one token a step: one thread */
    decode(ctx, ids, n, 0, 0);
    for (int step = 0; step < steps; step++) {
        const float *row = llama_get_logits_ith(ctx, -1);
        int best = 0;
        for (int j = 1; j < n_vocab; j++)
            if (row[j] > row[best]) best = j;
        float second = -INFINITY;
        for (int j = 0; j < n_vocab; j++)
            if (j != best && row[j] > second) second = row[j];
        printf("%d %.9g\n", best, (double)(row[best] - second));
        int32_t next = best;
        decode(ctx, &next, 1, n + step, 0);
    }
    llama_free(ctx);
    llama_model_free(model);
    free(ids);
    return 0;
}

static double seconds_now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static int bench(const char *path, const char *ids_path, int steps, int threads) {
    int n;
    int32_t *ids = read_ids(ids_path, &n);
    double start = seconds_now();
    struct llama_model *model = load_model(path, 0);
    int n_vocab = llama_vocab_n_tokens(llama_model_get_vocab(model));
    struct llama_context_params params = llama_context_default_params();
    params.n_ctx = (uint32_t)(n + steps);
    params.n_seq_max = 1;
    params.n_threads = params.n_threads_batch = threads;
    params.no_perf = true;
    struct llama_context *ctx = llama_init_from_model(model, params);
    if (!ctx) fail("llama_init_from_model failed", NULL);
    double loaded = seconds_now();
    decode(ctx, ids, n, 0, 0);
    double prefilled = seconds_now();
    for (int step = 0; step < steps; step++) {
        const float *row = llama_get_logits_ith(ctx, -1);
        int32_t best = 0;
        for (int j = 1; j < n_vocab; j++)
            if (row[j] > row[best]) best = j;
        decode(ctx, &best, 1, n + step, 0);
    }
    double done = seconds_now();
    fprintf(stderr, "timing: load %.3f s, prompt %d tokens %.2f tok/s, generated %d tokens %.2f tok/s\n",
            loaded - start, n, n / (prefilled - loaded), steps, steps / (done - prefilled));
    llama_free(ctx);
    llama_model_free(model);
    free(ids);
    return 0;
}

static enum ggml_type type_named(const char *name) {
    for (int t = 0; t < GGML_TYPE_COUNT; t++) {
        const char *known = ggml_type_name((enum ggml_type)t);
        if (known && strcmp(known, name) == 0) return (enum ggml_type)t;
    }
    fail("no ggml type named", name);
    return GGML_TYPE_COUNT;
}

static int quantize(int argc, char **argv) {
    static const struct { const char *name; enum llama_ftype ftype; } ftypes[] = {
        {"f16", LLAMA_FTYPE_MOSTLY_F16}, {"bf16", LLAMA_FTYPE_MOSTLY_BF16},
        {"q8_0", LLAMA_FTYPE_MOSTLY_Q8_0}, {"q4_0", LLAMA_FTYPE_MOSTLY_Q4_0},
        {"q5_0", LLAMA_FTYPE_MOSTLY_Q5_0}, {"q5_1", LLAMA_FTYPE_MOSTLY_Q5_1},
        {"q4_k_m", LLAMA_FTYPE_MOSTLY_Q4_K_M}, {"q5_k_m", LLAMA_FTYPE_MOSTLY_Q5_K_M},
        {"q6_k", LLAMA_FTYPE_MOSTLY_Q6_K}, {"q4_1", LLAMA_FTYPE_MOSTLY_Q4_1},
        {"iq4_nl", LLAMA_FTYPE_MOSTLY_IQ4_NL}, {"iq4_xs", LLAMA_FTYPE_MOSTLY_IQ4_XS},
        {"q2_k", LLAMA_FTYPE_MOSTLY_Q2_K}, {"q3_k_s", LLAMA_FTYPE_MOSTLY_Q3_K_S},
        {"q3_k_m", LLAMA_FTYPE_MOSTLY_Q3_K_M}, {"q3_k_l", LLAMA_FTYPE_MOSTLY_Q3_K_L},
    };
    llama_model_quantize_params params = llama_model_quantize_default_params();
    params.nthread = 2;
    size_t k = 0;
    while (k < sizeof ftypes / sizeof ftypes[0] && strcmp(ftypes[k].name, argv[4]) != 0) k++;
    if (k == sizeof ftypes / sizeof ftypes[0]) fail("FTYPE is one of f16, bf16, q8_0, q4_0, q5_0, q5_1, q4_k_m, q5_k_m, q6_k, q4_1, iq4_nl, iq4_xs, q2_k, q3_k_s, q3_k_m, q3_k_l, not", argv[4]);
    params.ftype = ftypes[k].ftype;
    if (argc > 5) params.output_tensor_type = type_named(argv[5]);
    if (argc > 6) params.token_embedding_type = type_named(argv[6]);
    if (llama_model_quantize(argv[2], argv[3], &params) != 0) fail("llama_model_quantize failed for", argv[2]);
    return 0;
}

static int dequantize(const char *path, const char *dir) {
    struct gguf_init_params params = {.no_alloc = true, .ctx = NULL};
    struct gguf_context *gguf = gguf_init_from_file(path, params);
    if (!gguf) fail("ggml cannot read", path);
    FILE *in = fopen(path, "rb");
    if (!in) fail("cannot open", path);
    if (mkdir(dir, 0755) != 0 && errno != EEXIST) fail("cannot make", dir);
    for (int64_t i = 0; i < gguf_get_n_tensors(gguf); i++) {
        const char *name = gguf_get_tensor_name(gguf, i);
        enum ggml_type type = gguf_get_tensor_type(gguf, i);
        size_t size = gguf_get_tensor_size(gguf, i);
        const int64_t *ne = gguf_get_tensor_ne(gguf, i);
        int64_t count = ne[0] * ne[1] * ne[2] * ne[3];
        uint8_t *raw = checked_malloc(size);
        float *values = checked_malloc((size_t)count * sizeof(float));
        if (fseek(in, (long)(gguf_get_data_offset(gguf) + gguf_get_tensor_offset(gguf, i)), SEEK_SET) != 0 ||
            fread(raw, 1, size, in) != size)
            fail("cannot read the data of", name);
        if (type == GGML_TYPE_F32) {
            memcpy(values, raw, size);
        } else {
            const struct ggml_type_traits *traits = ggml_get_type_traits(type);
            if (!traits->to_float) fail("ggml has no to_float for", name);
            traits->to_float(raw, values, count);
        }
        char out_path[4096];
        snprintf(out_path, sizeof out_path, "%s/%s.f32", dir, name);
        FILE *out = fopen(out_path, "wb");
        if (!out || fwrite(values, sizeof(float), (size_t)count, out) != (size_t)count || fclose(out) != 0)
            fail("cannot write", out_path);
        printf("%s %s %lld %lld %lld %lld\n", name, ggml_type_name(type), (long long)ne[0], (long long)ne[1],
               (long long)ne[2], (long long)ne[3]);
        free(raw);
        free(values);
    }
    fclose(in);
    gguf_free(gguf);
    return 0;
}

int main(int argc, char **argv) {
    const char *usage = "usage: llama_ref tokenize|vocab|logits|generate|bench|quantize|dequantize MODEL.gguf ... "
                        "(tests/llama_ref.c says what each takes)";
    if (argc < 3) fail(usage, NULL);
    llama_log_set(quiet_log, NULL);
    ggml_log_set(quiet_log, NULL);
    const char *command = argv[1];
    if (strcmp(command, "dequantize") == 0 && argc == 4) return dequantize(argv[2], argv[3]);
    /* The prebuilt ggml finds its CPU backends (one library per x86 generation, the best one
       this CPU runs is chosen) in the folder it is told, not beside a program of ours. */
    ggml_backend_load_all_from_path(LLAMA_LIBS);
    if (ggml_backend_reg_count() == 0) fail("no ggml backend loaded from", LLAMA_LIBS);
    llama_backend_init();
    int rc;
    if (strcmp(command, "tokenize") == 0 && (argc == 3 || (argc == 4 && strcmp(argv[3], "--special") == 0)))
        rc = tokenize(argv[2], argc == 4);
    else if (strcmp(command, "vocab") == 0 && argc == 3) rc = vocab_tokens(argv[2]);
    else if (strcmp(command, "logits") == 0 && argc == 5) rc = logits(argv[2], argv[3], argv[4]);
    else if (strcmp(command, "generate") == 0 && argc == 5) rc = generate(argv[2], argv[3], atoi(argv[4]));
    else if (strcmp(command, "bench") == 0 && argc == 6) rc = bench(argv[2], argv[3], atoi(argv[4]), atoi(argv[5]));
    else if (strcmp(command, "quantize") == 0 && argc >= 5 && argc <= 7) rc = quantize(argc, argv);
    else fail(usage, NULL);
    llama_backend_free();
    return rc;
}
