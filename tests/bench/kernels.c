/* tests/bench/kernels.c: the decode kernels alone, against a plain read of the same bytes.
 *
 * usage: kernels FORMAT ROWS COLS THREADS [TOKENS]   (FORMAT a weight type: f32, q8_0, q4_k, ...)
 *        kernels layers FORMAT LAYERS WIDTH THREADS
 *        kernels attention f16|f32|q8_0 POS [HEADS]
 *
 * A weight matrix of ROWS x COLS with random values in FORMAT, prepared as run's loader prepares
 * it (q8_0 and q4_0: rearranged for this build's kernels), then matmul() of one token (a decode
 * step's product; with TOKENS, that many samples' decode steps at once, as --samples runs them)
 * repeated, about 2 GB a round, with THREADS threads. Prints one line: the bytes
 * the kernel reads per product (quants and scales, or the float32 matrix) and the GB/s
 * at which it consumes them (best of 5 rounds). tests/bench/bench.py sets this beside
 * tests/build/bandwidth's read of a buffer of the same size: a matrix that fits the cache shows
 * the kernel's own speed, one that does not, memory's.
 *
 * `kernels layers FORMAT LAYERS WIDTH THREADS`: the same for the four matrices of each of LAYERS
 * GPT-2 layers of WIDTH, one after another as a decode step takes them (layers_bench): the bytes
 * of all and the GB/s, where a whole model's matrices outgrow the cache.
 *
 * `kernels attention CACHE POS [HEADS]`: attention_heads() of one decode query of HEADS heads
 * (default 2, as a decode step hands a thread; 1: a head alone) of 64 dimensions at position POS,
 * each over its own keys and values in a cache of CACHE numbers (they stay in L1/L2, so this is
 * the arithmetic's own speed), repeated on one thread. Prints the nanoseconds per head (best of
 * 5 rounds) and the GB/s of cache that is.
 *
 * engine.h is included whole, as in tests/test_kernels.c. */
#include "../../engine.h"

#include <omp.h>

static uint64_t state = 88172645463325252ull;
static uint64_t next(void) { /* xorshift64 */
    state ^= state << 13;
    state ^= state >> 7;
    state ^= state << 17;
    return state;
}

/* A value in [-1, 1], in steps of 1/1000. */
static float next_value(void) { return (float)(next() % 2001) / 1000.0f - 1.0f; }

static int attention_bench(int argc, char **argv) {
    if ((argc != 4 && argc != 5) || (strcmp(argv[2], "f16") && strcmp(argv[2], "f32") && strcmp(argv[2], "q8_0")))
        die("usage: kernels attention f16|f32|q8_0 POS [HEADS]");
    int hs = 64, pos = atoi(argv[3]), n_ctx = round_up16(pos + 1), G = argc == 5 ? atoi(argv[4]) : MAX_HEADS_AT_ONCE;
    if (pos < 0 || pos > 65535) die("bad position");
    if (G < 1 || G > MAX_HEADS_AT_ONCE) die("HEADS is 1 to %d", MAX_HEADS_AT_ONCE);
    CacheType cache = !strcmp(argv[2], "f16") ? CACHE_F16 : !strcmp(argv[2], "q8_0") ? CACHE_Q8_0 : CACHE_F32;
    /* q8_0: the scales after the quants, laid out as kv_cache.h lays them */
    size_t numbers = (size_t)n_ctx * hs, scales = (size_t)n_ctx * cache_groups(hs), bytes = numbers * cache_number_bytes(cache);
    size_t cache_bytes = bytes + (cache == CACHE_Q8_0 ? scales * sizeof(float) : 0);
    HeadAttention heads[MAX_HEADS_AT_ONCE];
    float *scratch = malloc(attention_scratch_floats(n_ctx, hs) * sizeof(float));
    for (int g = 0; g < G; g++) { /* each head its own query, keys and values */
        void *keys = malloc(cache_bytes), *values = malloc(cache_bytes);
        float *q = malloc(hs * sizeof(float)), *out = malloc(hs * sizeof(float));
        for (size_t i = 0; i < numbers; i++) {
            float k = next_value(), v = next_value();
            if (cache == CACHE_F16) ((uint16_t *)keys)[i] = f16_from_f32(k), ((uint16_t *)values)[i] = f16_from_f32(v);
            else if (cache == CACHE_Q8_0) ((int8_t *)keys)[i] = (int8_t)(k * 127), ((int8_t *)values)[i] = (int8_t)(v * 127);
            else ((float *)keys)[i] = k, ((float *)values)[i] = v;
        }
        for (size_t i = 0; cache == CACHE_Q8_0 && i < scales; i++)
            ((float *)((char *)keys + bytes))[i] = ((float *)((char *)values + bytes))[i] = (float)(next() % 100 + 1) * 1e-4f;
        for (int d = 0; d < hs; d++) q[d] = next_value();
        heads[g] = (HeadAttention){.query = q, .query_stride = hs, .keys = keys, .values = values, .value_stride = hs,
                                   .cache = cache, .scales_at = bytes, .out = out, .out_stride = hs, .pos = pos, .nq = 1, .head_size = hs};
    }
    int reps = (int)(2e8 / (double)(pos + 1) / hs / G) + 1;
    double best = 1e30;
    for (int round = 0; round < 6; round++) {
        double t0 = now_seconds();
        for (int r = 0; r < reps; r++) attention_heads(heads, G, scratch);
        double ns = (now_seconds() - t0) / reps / G * 1e9;
        if (round > 0 && ns < best) best = ns;
    }
    /* keys and values of positions 0..pos */
    printf("%.0f ns per head, %.1f GB/s of cache\n", best,
           2.0 * (pos + 1) * ((double)hs * cache_number_bytes(cache) + (cache == CACHE_Q8_0 ? cache_groups(hs) * 4.0 : 0)) / best);
    return 0;
}

/* A random matrix of ROWS x COLS in format type, its data as run's loader holds it (not yet
 * rearranged: prepare_weights does that for a list). */
static Matrix random_matrix(int type, int rows, int cols) {
    size_t values = (size_t)rows * cols;
    Matrix m = {.type = type, .rows = rows, .cols = cols};
    if (type == WT_F32) {
        /* aligned as run's file mapping places a tensor (model.h: TENSOR_ALIGN); malloc's 16
         * bytes would split a vector load in four across two cache lines */
        float *f;
        if (posix_memalign((void **)&f, TENSOR_ALIGN, values * sizeof(float))) die("out of memory");
        for (size_t i = 0; i < values; i++) f[i] = next_value();
        m.f32 = f;
        return m;
    }
    if (weight_types[type].block_bytes || type == WT_F16 || type == WT_BF16) {
        /* random bytes (every bit pattern of quants and scales), binary16 scales small and finite */
        size_t bytes = weight_types[type].bytes(values);
        uint8_t *data;
        if (posix_memalign((void **)&data, TENSOR_ALIGN, bytes)) die("out of memory");
        for (size_t i = 0; i < bytes; i++) data[i] = (uint8_t)next();
        int block = weight_types[type].block, size = weight_types[type].block_bytes;
        int at = type == WT_Q6_K ? 208 : 0, halves = type == WT_Q5_0 || type == WT_Q6_K ? 1 : 2;
        for (size_t b = 0; size && b < values / (size_t)block; b++)
            for (int h = 0; h < halves; h++) memcpy(data + b * size + at + 2 * h, &(uint16_t){0x1800 + next() % 256}, 2);
        if (!size) /* f16 or bf16 values: finite ones of either sign below 4 */
            for (size_t i = 0; i < values; i++) ((uint16_t *)data)[i] = (uint16_t)(type == WT_F16 ? next() % 0x4400 : next() % 0x4080) | (uint16_t)(next() & 0x8000);
        weight_types[type].place(&m, data, values, 0);
        return m;
    }
    float *scale = malloc(values / 32 * sizeof(float));
    if (!scale) die("out of memory");
    for (size_t i = 0; i < values / 32; i++) scale[i] = (float)(next() % 1000 + 1) * 1e-5f;
    m.scale = scale;
    if (type == WT_Q8_0) {
        int8_t *q8 = malloc(values);
        if (!q8) die("out of memory");
        for (size_t i = 0; i < values; i++) q8[i] = (int8_t)(next() % 255 - 127);
        m.q8 = q8;
    } else {
        uint8_t *q4 = malloc(values / 2);
        if (!q4) die("out of memory");
        for (size_t i = 0; i < values / 2; i++) q4[i] = (uint8_t)next();
        m.q4 = q4;
    }
    return m;
}

/* The matrices of list rearranged for this build's kernels, as run.c does at load (one copy for
 * all, from malloc_or_die); returns the bytes one product of each reads: float32 values, or the
 * quants and one float scale per 32 (of the copy's whole panels of 16 rows where there is a
 * copy). */
static size_t prepare_all(Matrix **list, int n) {
    size_t copy_bytes = prepare_weights(list, n, NULL), bytes = 0;
    void *copy = copy_bytes ? malloc_or_die(copy_bytes, "the copy") : NULL;
    if (copy) prepare_weights(list, n, copy);
    for (int i = 0; i < n; i++) {
        const Matrix *m = list[i];
        size_t values = (size_t)m->rows * m->cols, stored = copy_bytes ? panel_rows(m->rows) * (size_t)m->cols : values;
        if (m->type != WT_F32 && m->type != WT_Q8_0 && m->type != WT_Q4_0) /* the copy's bytes, or the file's */
            bytes += copy_bytes ? matrix_kernels(m->type)->packed_bytes(m) : weight_types[m->type].bytes(values);
        else bytes += m->type == WT_F32 ? values * sizeof(float) : stored / (m->type == WT_Q4_0 ? 2 : 1) + stored / 32 * 4;
    }
    return bytes;
}

static int format_of(const char *name) {
    for (int type = 0; type < WT_COUNT; type++)
        if (!strcmp(name, weight_types[type].name)) return type;
    return -1;
}

/* The products of matrices ms[0..n) one after another, one token each, repeated (about 2 GB a
 * round): GB/s of weights consumed, best of 5 rounds. */
static double products_gbs(Matrix *ms, int n, size_t bytes, int tokens) {
    int widest = 0, tallest = 0;
    for (int i = 0; i < n; i++) widest = ms[i].cols > widest ? ms[i].cols : widest, tallest = ms[i].rows > tallest ? ms[i].rows : tallest;
    float *x = malloc((size_t)tokens * widest * sizeof(float)), *out = malloc((size_t)tokens * tallest * sizeof(float));
    if (!x || !out) die("out of memory");
    for (int i = 0; i < tokens * widest; i++) x[i] = next_value();
    MatmulScratch scratch = {0};
    if (!matmul_scratch_init(&scratch, tokens, widest, 1u << ms[0].type)) die("out of memory");
    int reps = (int)(2e9 / (double)bytes) + 1;
    double best = 0.0;
    for (int round = 0; round < 6; round++) {
        double t0 = now_seconds();
        for (int r = 0; r < reps; r++)
            for (int i = 0; i < n; i++) matmul(out, x, &ms[i], NULL, tokens, 1, &scratch);
        double gbs = (double)bytes * reps / (now_seconds() - t0) / 1e9;
        if (round > 0 && gbs > best) best = gbs; /* round 0 warms the caches */
    }
    return best;
}

/* `kernels layers FORMAT LAYERS WIDTH THREADS`: the four matrices of each of LAYERS GPT-2 layers
 * of WIDTH (query/key/value 3W x W, projection W x W, feed-forward 4W x W and W x 4W), in the
 * order a decode step takes them, each its own random weights: the kernels as a model's step
 * feeds them, short matrices one after another, with the working set growing with LAYERS. */
static int layers_bench(int argc, char **argv) {
    if (argc != 6) die("usage: kernels layers f32|q8_0|q4_0 LAYERS WIDTH THREADS");
    int type = format_of(argv[2]), layers = atoi(argv[3]), width = atoi(argv[4]), threads = atoi(argv[5]);
    if (type < 0 || layers < 1 || layers > 1000 || width < 32 || width > 16384 || width % 32 || threads < 1) die("bad arguments");
    omp_set_num_threads(threads);
    int shapes[4][2] = {{3 * width, width}, {width, width}, {4 * width, width}, {width, 4 * width}};
    Matrix *ms = malloc((size_t)layers * 4 * sizeof(Matrix));
    Matrix **list = malloc((size_t)layers * 4 * sizeof(Matrix *));
    if (!ms || !list) die("out of memory");
    for (int i = 0; i < layers * 4; i++) {
        ms[i] = random_matrix(type, shapes[i % 4][0], shapes[i % 4][1]);
        list[i] = &ms[i];
    }
    size_t bytes = prepare_all(list, layers * 4);
    printf("%zu %.2f\n", bytes, products_gbs(ms, layers * 4, bytes, 1));
    return 0;
}

int main(int argc, char **argv) {
    if (argc > 1 && !strcmp(argv[1], "attention")) return attention_bench(argc, argv);
    if (argc > 1 && !strcmp(argv[1], "layers")) return layers_bench(argc, argv);
    if (argc != 5 && argc != 6) die("usage: kernels FORMAT ROWS COLS THREADS [TOKENS]");
    int type = format_of(argv[1]);
    int rows = atoi(argv[2]), cols = atoi(argv[3]), threads = atoi(argv[4]), tokens = argc == 6 ? atoi(argv[5]) : 1;
    if (type < 0 || rows < 16 || cols < 32 || cols % weight_types[type].block || cols % 32 || threads < 1 || tokens < 1 || tokens > 64)
        die("bad arguments");
    omp_set_num_threads(threads);
    Matrix m = random_matrix(type, rows, cols);
    Matrix *list[1] = {&m};
    size_t bytes = prepare_all(list, 1);
    printf("%zu %.2f\n", bytes, products_gbs(&m, 1, bytes, tokens));
    return 0;
}
