/* Every matrix product of a forward pass, written out so that tests/test_paths.py can check each
 * one against a reference computed from the same input: what it asserts then never depends on
 * how another program (PyTorch, its BLAS) rounds the numbers before them. run.c is included
 * whole (its main() is left out under TESTING) and its test hook observe_product sees each
 * product as forward() makes it.
 *
 * usage: trace MODEL.bin PROMPT_FILE BLOCK OUT
 *   runs the prompt's tokens through the model in forward() blocks of BLOCK tokens (1: one at a
 *   time, as generation does), all positions' logits computed, and writes to OUT, per product:
 *   int32 layer (-1 for the output head), int32 matrix (0 attn.c_attn, 1 attn.c_proj,
 *   2 mlp.c_fc, 3 mlp.c_proj, 4 lm_head), int32 T, rows, cols; then the input x (T, cols) and
 *   the output (T, rows) as float32, biases included. */
#define TESTING
#include "../run.c"

static Transformer model;
static FILE *trace;

static void record(const Matrix *w, const float *x, const float *out, int T) {
    int32_t head[5] = {-1, 4, T, w->rows, w->cols};
    for (int l = 0; l < model.config.n_layer; l++) {
        const LayerWeights *L = &model.weights.layer[l];
        const Matrix *which[4] = {&L->c_attn, &L->attn_proj, &L->c_fc, &L->mlp_proj};
        for (int m = 0; m < 4; m++)
            if (w == which[m]) head[0] = l, head[1] = m;
    }
    if (fwrite(head, sizeof head, 1, trace) != 1 ||
        fwrite(x, sizeof(float), (size_t)T * w->cols, trace) != (size_t)T * w->cols ||
        fwrite(out, sizeof(float), (size_t)T * w->rows, trace) != (size_t)T * w->rows)
        die("cannot write the trace");
}

int main(int argc, char **argv) {
    if (argc != 5) die("usage: trace MODEL.bin PROMPT_FILE BLOCK OUT");
    size_t len;
    uint8_t *text = read_file_or_die(argv[2], &len);
    build_transformer(&model, argv[1]);
    int block = (int)parse_long("BLOCK", argv[3], 1, PREFILL_BLOCK);
    if (model.state.block > block) model.state.block = block;
    long n;
    uint32_t *ids = encode_or_die(&model, text, len, &n);
    if (n < 1 || n > model.config.n_ctx) die("the prompt must have 1 to n_ctx tokens");
    trace = fopen(argv[4], "wb");
    if (!trace) die("cannot create '%s'", argv[4]);
    model.state.observe_product = record;
    for (long pos = 0; pos < n; pos += model.state.block)
        forward(&model, ids + pos, block_at(&model, pos, n), (int)pos, 1);
    if (fclose(trace) != 0) die("cannot write '%s'", argv[4]);
    free(ids);
    free(text);
    free_transformer(&model);
    return 0;
}
