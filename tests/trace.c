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
 *   (2, SAMPLE_STEPS, N, vocab_size): together first. They must be the same bits. */
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
    Sequence prompt = sequence_holding(model.config.vocab_size, ids, n);
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
        for (long j = 0; j < n; j++) sequence_push(&prompt, ids[j]);
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

int main(int argc, char **argv) {
    if (argc == 4 && strcmp(argv[2], "rows") == 0) {
        build_transformer(&model, argv[1], 1, 0, CACHE_F16);
        trace = fopen(argv[3], "wb");
        if (!trace) die("cannot create '%s'", argv[3]);
        trace_rows();
        if (fclose(trace) != 0) die("cannot write '%s'", argv[3]);
        free_transformer(&model);
        return 0;
    }
    if (argc != 5) die("usage: trace MODEL.bin PROMPT_FILE BLOCK OUT, or trace MODEL.bin PROMPT_FILE samples:N OUT, or "
                       "trace MODEL.bin rows OUT");
    size_t len;
    uint8_t *text = read_file_or_die(argv[2], &len);
    int samples = strncmp(argv[3], "samples:", 8) == 0 ? (int)parse_long("samples", argv[3] + 8, 1, 64) : 0;
    build_transformer(&model, argv[1], samples ? samples : 1, 0, CACHE_F16);
    int block = samples ? PREFILL_BLOCK : (int)parse_long("BLOCK", argv[3], 1, PREFILL_BLOCK);
    if (model.state.block > block) model.state.block = block;
    long n;
    uint32_t *ids = encode_or_die(&model.tokenizer, text, len, ENCODE_BOS, &n);
    if (n < 1 || n + (samples ? SAMPLE_STEPS : 0) > model.config.n_ctx) die("the prompt must have 1 to n_ctx tokens");
    trace = fopen(argv[4], "wb");
    if (!trace) die("cannot create '%s'", argv[4]);
    if (samples) {
        trace_samples(ids, n, samples);
    } else {
        tracing = 1;
        Decoder d = decoder_of(&model);
        Sequence s = sequence_holding(model.config.vocab_size, ids, n);
        while (s.n_cached < n) sequence_feed(&d, &s, next_block(&d, &s), 1);
        sequence_free(&s);
    }
    if (fclose(trace) != 0) die("cannot write '%s'", argv[4]);
    free(ids);
    free(text);
    free_transformer(&model);
    return 0;
}
