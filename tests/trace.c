/* Every matrix product of a forward pass, written out so that tests/test_paths.py can check each
 * one against a reference computed from the same input: what it asserts then never depends on
 * how another program (PyTorch, its BLAS) rounds the numbers before them. engine.h is included
 * whole, and with TRACE_PRODUCTS it calls
 * trace_product() below with each product as forward() makes it.
 *
 * usage: trace MODEL.bin PROMPT_FILE BLOCK OUT
 *   runs the prompt's tokens through the model in forward() blocks of BLOCK tokens (1: one at a
 *   time, as generation does), all positions' logits computed, and writes to OUT, per product:
 *   int32 layer (-1 for the output head), int32 matrix (0 attn.c_attn, 1 attn.c_proj,
 *   2 mlp.c_fc, 3 mlp.c_proj, 4 lm_head, 5 mlp.gate), int32 T, rows, cols; then the input x
 *   (T, cols) and the output (T, rows) as float32, biases included.
 *
 * usage: trace MODEL.bin rows OUT
 *   every matrix's rows as run reads them back (its weight type's row read, kernels/types.h: an
 *   embedding lookup's numbers), in product_matrices()'s order and then the token embedding:
 *   per matrix int32 rows, cols, then (rows, cols) float32.
 *
 * usage: trace MODEL.bin PROMPT_FILE samples:N OUT
 *   prefills the prompt once, then decodes SAMPLE_STEPS steps of N samples together (sample i
 *   is fed token (7 i + 3 s + 1) mod vocab_size at step s), and then each sample alone, in a
 *   single sequence from the same prompt; writes to OUT the logits of both, float32
 *   (2, SAMPLE_STEPS, N, vocab_size): together first. They must be the same bits.
 *
 * usage: trace MODEL.bin PROMPT_FILE steps:N OUT [f16|f32|q8_0]
 *   sequence i holds the prompt's first n - 3 i tokens, each prefilled in a cache of its own,
 *   then all N step SAMPLE_STEPS tokens together, each at its own position (generate.h's decode
 *   step: sequences_step), and then each alone, one token a forward pass in one sequence; the
 *   logits of both as for samples:N, with that key/value cache (default f16). */
#define TRACE_PRODUCTS
#include "../cli.h"
#include "../engine.h"

static Transformer model;
static FILE *trace;
static int tracing; /* the products mode: every product written */

static void trace_product(const Matrix *w, const float *x, const float *out, int T) {
    if (!tracing) return;
    int32_t head[5] = {-1, 4, T, w->rows, w->cols};
    for (int l = 0; l < model.config.n_layer; l++) {
        const LayerWeights *L = &model.weights.layer[l];
        const Matrix *which[6] = {&L->c_attn, &L->attn_proj, &L->c_fc, &L->mlp_proj, NULL, &L->mlp_gate};
        for (int m = 0; m < 6; m++)
            if (w == which[m]) head[0] = l, head[1] = m;
    }
    if (fwrite(head, sizeof head, 1, trace) != 1 ||
        fwrite(x, sizeof(float), (size_t)T * w->cols, trace) != (size_t)T * w->cols ||
        fwrite(out, sizeof(float), (size_t)T * w->rows, trace) != (size_t)T * w->rows)
        die("cannot write the trace");
}

#define SAMPLE_STEPS 8

static uint32_t sample_token(int i, int step) { return (uint32_t)(7 * i + 3 * step + 1) % (uint32_t)model.config.vocab_size; }

static void write_floats(const float *x, size_t n) {
    if (fwrite(x, sizeof(float), n, trace) != n) die("cannot write the trace");
}

/* The samples mode above: the prompt's n tokens are ids. */
static void trace_samples(const uint32_t *ids, long n, int N) {
    int vocab = model.config.vocab_size;
    int *seqs = malloc_or_die((size_t)N * sizeof(int), "samples");
    uint32_t *tokens = malloc_or_die((size_t)N * sizeof(uint32_t), "samples");
    for (int i = 0; i < N; i++) seqs[i] = i;
    Decoder d = decoder_of(&model);
    Sequence prompt;
    Error e;
    if (!sequence_holding(&prompt, model.config.vocab_size, ids, n, &e)) die("%s", e.message);
    sequence_prefill(&d, &prompt);
    for (int i = 1; i < N; i++) share_prompt(&model.state.kv, i, n);
    for (int step = 0; step < SAMPLE_STEPS; step++) {
        for (int i = 0; i < N; i++) tokens[i] = sample_token(i, step);
        Positions at = {.pos = (int)n + step, .samples = seqs};
        write_floats(forward(&model, tokens, N, at, 0), (size_t)N * vocab);
    }
    float *alone = malloc_or_die((size_t)SAMPLE_STEPS * N * vocab * sizeof(float), "logits");
    for (int i = 0; i < N; i++) {
        sequence_truncate(&d, &prompt, 0);
        for (long j = 0; j < n; j++)
            if (!sequence_push(&prompt, ids[j], &e)) die("%s", e.message);
        sequence_prefill(&d, &prompt);
        for (int step = 0; step < SAMPLE_STEPS; step++) {
            uint32_t token = sample_token(i, step);
            memcpy(alone + ((size_t)step * N + i) * vocab, forward(&model, &token, 1, in_sequence(0, n + step), 0),
                   (size_t)vocab * sizeof(float));
        }
    }
    write_floats(alone, (size_t)SAMPLE_STEPS * N * vocab);
    sequence_free(&prompt);
    free(alone); free(seqs); free(tokens);
}

/* The steps mode above: the prompt's n tokens are ids. */
static void trace_steps(const uint32_t *ids, long n, int N) {
    int vocab = model.config.vocab_size;
    Decoder d = decoder_of(&model);
    Error e;
    Sequence *s = calloc_or_die((size_t)N * sizeof *s, "sequences"), **all = calloc_or_die((size_t)N * sizeof *all, "");
    int *seqs = calloc_or_die((size_t)N * sizeof(int), ""), *positions = calloc_or_die((size_t)N * sizeof(int), "");
    uint32_t *tokens = calloc_or_die((size_t)N * sizeof(uint32_t), "");
    float *together = calloc_or_die((size_t)SAMPLE_STEPS * N * vocab * sizeof(float), "logits"),
          *alone = calloc_or_die((size_t)SAMPLE_STEPS * N * vocab * sizeof(float), "logits");
    for (int i = 0; i < N; i++) {
        if (!sequence_init(&s[i], i, n + SAMPLE_STEPS, vocab, &e)) die("%s", e.message);
        for (long j = 0; j < n - 3 * i; j++)
            if (!sequence_push(&s[i], ids[j], &e)) die("%s", e.message);
        sequence_prefill(&d, &s[i]);
        all[i] = &s[i], seqs[i] = i;
    }
    for (int step = 0; step < SAMPLE_STEPS; step++) {
        for (int i = 0; i < N; i++) {
            tokens[i] = sample_token(i, step);
            if (!sequence_push(&s[i], tokens[i], &e)) die("%s", e.message);
        }
        sequences_step(&d, all, seqs, positions, tokens, N);
        for (int i = 0; i < N; i++)
            memcpy(together + ((size_t)step * N + i) * vocab, s[i].logits, (size_t)vocab * sizeof(float));
    }
    for (int i = 0; i < N; i++) {
        Sequence one;
        if (!sequence_holding(&one, vocab, ids, n - 3 * i, &e)) die("%s", e.message);
        sequence_prefill(&d, &one);
        for (int step = 0; step < SAMPLE_STEPS; step++) {
            if (!sequence_push(&one, sample_token(i, step), &e)) die("%s", e.message);
            memcpy(alone + ((size_t)step * N + i) * vocab, sequence_feed(&d, &one, 1, 0), (size_t)vocab * sizeof(float));
        }
        sequence_free(&one);
    }
    write_floats(together, (size_t)SAMPLE_STEPS * N * vocab);
    write_floats(alone, (size_t)SAMPLE_STEPS * N * vocab);
    for (int i = 0; i < N; i++) sequence_free(&s[i]);
    free(s); free(all); free(seqs); free(positions); free(tokens); free(together); free(alone);
}

/* The rows mode above. */
static void trace_rows(void) {
    const Config *c = &model.config;
    Matrix **matrices = malloc_or_die(((size_t)MATRICES_PER_LAYER * c->n_layer + 2) * sizeof(Matrix *), "matrices");
    int n = product_matrices(c, &model.weights, matrices);
    matrices[n++] = &model.weights.wte;
    for (int i = 0; i < n; i++) {
        const Matrix *m = matrices[i];
        int32_t shape[2] = {m->rows, m->cols};
        float *row = malloc_or_die((size_t)m->cols * sizeof(float), "a row");
        if (fwrite(shape, sizeof shape, 1, trace) != 1) die("cannot write the trace");
        for (int r = 0; r < m->rows; r++) {
            weight_types[m->type].row(m, r, row);
            write_floats(row, (size_t)m->cols);
        }
        free(row);
    }
    free(matrices);
}

/* The model of path for n_seq sequences, its caches (of that type) reserved for the whole
 * context. */
static void load_or_die(const char *path, int n_seq, CacheType cache) {
    Error e;
    if (!build_transformer(&model, path, n_seq, 0, cache, &e) || !reserve_kv_cache(&model, model.config.n_ctx, &e))
        die("%s", e.message);
}

int main(int argc, char **argv) {
    if (argc == 4 && strcmp(argv[2], "rows") == 0) {
        load_or_die(argv[1], 1, CACHE_F16);
        trace = fopen(argv[3], "wb");
        if (!trace) die("cannot create '%s'", argv[3]);
        trace_rows();
        if (fclose(trace) != 0) die("cannot write '%s'", argv[3]);
        free_transformer(&model);
        return 0;
    }
    if (argc != 5 && argc != 6)
        die("usage: trace MODEL.bin PROMPT_FILE BLOCK OUT, or trace MODEL.bin PROMPT_FILE samples:N OUT, or trace "
            "MODEL.bin PROMPT_FILE steps:N OUT [CACHE], or trace MODEL.bin rows OUT");
    size_t len;
    uint8_t *text = read_file_or_die(argv[2], &len);
    int samples = strncmp(argv[3], "samples:", 8) == 0 ? (int)parse_long("samples", argv[3] + 8, 1, 64) : 0;
    int steps = strncmp(argv[3], "steps:", 6) == 0 ? (int)parse_long("steps", argv[3] + 6, 1, 64) : 0;
    load_or_die(argv[1], samples ? samples : steps ? steps : 1, argc == 6 ? parse_cache(argv[5]) : CACHE_F16);
    if (steps) samples = steps;
    int block = samples ? PREFILL_BLOCK : (int)parse_long("BLOCK", argv[3], 1, PREFILL_BLOCK);
    if (model.state.block > block) model.state.block = block;
    long n;
    Error e;
    uint32_t *ids = encode_text(&model.tokenizer, text, len, ENCODE_BOS, &n, &e);
    if (!ids) die("%s", e.message);
    if (n < 1 || n + (samples ? SAMPLE_STEPS : 0) > model.config.n_ctx) die("the prompt must have 1 to n_ctx tokens");
    trace = fopen(argv[4], "wb");
    if (!trace) die("cannot create '%s'", argv[4]);
    if (steps) {
        if (n <= 3 * (steps - 1)) die("the prompt must be longer than 3 (N - 1) tokens");
        trace_steps(ids, n, steps);
    } else if (samples) {
        trace_samples(ids, n, samples);
    } else {
        tracing = 1;
        Decoder d = decoder_of(&model);
        Sequence s;
        if (!sequence_holding(&s, model.config.vocab_size, ids, n, &e)) die("%s", e.message);
        while (s.n_cached < n) sequence_feed(&d, &s, next_block(&d, &s), 1);
        sequence_free(&s);
    }
    if (fclose(trace) != 0) die("cannot write '%s'", argv[4]);
    free(ids);
    free(text);
    free_transformer(&model);
    return 0;
}
