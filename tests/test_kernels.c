/* Hand-computed checks of run.c's kernels: run.c is included whole (its main() is left out
 * under TESTING), so the static functions are tested as they are. Exit status 1 on failure. */
#define TESTING
#include "../run.c"

static int failures = 0, checks = 0;

static void expect_near(const char *what, double got, double want, double tol) {
    checks++;
    int ok = fabs(got - want) <= tol;
    printf("%s %s: got %.6f, want %.6f (within %g)\n", ok ? "ok" : "not ok", what, got, want, tol);
    if (!ok) failures++;
}


/* matmul() (decode and prefill kernels; for q8_0 the weights rearranged as the loader does,
 * for whichever kernel this build and CPU use: AMX, VNNI or maddubs) against the same product
 * summed here in double, for shapes with ragged edges: widths of an odd number of 32-groups,
 * row counts that leave rows over after whole tiles (of 12, 3 or 4 rows, and of 16 for q8_0),
 * token counts that end in a part tile. For q8_0 the reference quantizes the activations with
 * the same quantize_q8, so both sides multiply identical integers and only the summation order
 * differs. */
static void check_matmul(int n, int d, int T, int type, int packed) {
    float *w = malloc(sizeof(float) * d * n), *x = malloc(sizeof(float) * T * n), *bias = malloc(sizeof(float) * d);
    float *out = malloc(sizeof(float) * T * d), *ws = malloc(sizeof(float) * d * n / 32 + 4);
    int8_t *wq = malloc((size_t)d * n), *copy = NULL;
    uint64_t seed = 777 + n + d + T;
    for (int i = 0; i < d * n; i++) w[i] = (float)(rng_uniform(&seed) * 2 - 1);
    for (int i = 0; i < T * n; i++) x[i] = (float)(rng_uniform(&seed) * 6 - 3);
    for (int i = 0; i < d; i++) bias[i] = (float)(rng_uniform(&seed) - 0.5);
    Matrix m = {.type = type, .rows = d, .cols = n, .f32 = w};
    const char *how = "float32";
    if (type == WT_Q8_0) {
        for (int r = 0; r < d; r++) quantize_q8(wq + (size_t)r * n, ws + r * (n / 32), w + (size_t)r * n, n);
        m = (Matrix){.type = WT_Q8_0, .rows = d, .cols = n, .q = wq, .scale = ws};
        how = "q8_0 dot products";
        if (packed) { /* as build_run() does through prepare_for_prefill() */
            Matrix *list[1] = {&m};
            copy = malloc(prepare_for_prefill(list, 1, NULL));
            prepare_for_prefill(list, 1, copy);
            how = q8_description();
        }
    }
    MatmulScratch scratch = {0};
    matmul_scratch_init(&scratch, T, n, type);
    for (int pass = 0; pass < 2; pass++) { /* all T tokens at once (prefill), then one by one */
        if (pass == 0) matmul(out, x, &m, bias, T, &scratch);
        else for (int t = 0; t < T; t++) matmul(out + (size_t)t * d, x + (size_t)t * n, &m, bias, 1, &scratch);
        double worst = 0.0;
        int8_t xq[1024];
        float xs[32];
        for (int t = 0; t < T; t++) {
            if (type == WT_Q8_0) quantize_q8(xq, xs, x + (size_t)t * n, n);
            for (int r = 0; r < d; r++) {
                double sum = bias[r], size = fabs(bias[r]);
                for (int i = 0; i < n; i++) {
                    double term = type == WT_Q8_0 ? (double)wq[(size_t)r * n + i] * ws[r * (n / 32) + i / 32] * xq[i] * xs[i / 32]
                                                  : (double)w[(size_t)r * n + i] * x[(size_t)t * n + i];
                    sum += term;
                    size += fabs(term);
                }
                double err = fabs(out[(size_t)t * d + r] - sum) / size;
                if (err > worst) worst = err;
            }
        }
        char what[200];
        snprintf(what, sizeof what, "matmul %s, n %d, d %d, %s: worst error / sum of |terms|", how, n, d,
                 pass == 0 ? (T == 1 ? "1 token" : "prefill") : "one token at a time");
        checks++;
        printf("%s %s: %.2e (at most 1e-6)\n", worst <= 1e-6 ? "ok" : "not ok", what, worst);
        if (!(worst <= 1e-6)) failures++;
        if (T == 1) break;
    }
    free(w); free(x); free(bias); free(out); free(ws); free(wq); free(copy);
    matmul_scratch_free(&scratch);
}

/* attention() for nq queries at positions pos.. (the 16-lane path when nq > 1 and the head size
 * is a multiple of 16, one query at a time otherwise) against the same attention computed here
 * in double: scores, softmax, weighted sum; and the weights it reports for the picture. */
static void check_attention(int pos, int nq, int hs) {
    int n_keys = pos + nq;
    float *q = malloc(sizeof(float) * nq * hs), *k = malloc(sizeof(float) * n_keys * hs);
    float *v = malloc(sizeof(float) * n_keys * hs), *out = malloc(sizeof(float) * nq * hs);
    float *weights = malloc(sizeof(float) * nq * n_keys);
    float *scratch = malloc(sizeof(float) * attention_scratch_floats(n_keys, hs));
    uint64_t seed = 99 + pos + nq + hs;
    for (int i = 0; i < nq * hs; i++) q[i] = (float)(rng_uniform(&seed) * 4 - 2);
    for (int i = 0; i < n_keys * hs; i++) k[i] = (float)(rng_uniform(&seed) * 4 - 2);
    for (int i = 0; i < n_keys * hs; i++) v[i] = (float)(rng_uniform(&seed) * 2 - 1);
    AttentionBlock b = {.query = q, .query_stride = hs, .keys = k, .values = v, .out = out,
                        .out_stride = hs, .pos = pos, .nq = nq, .head_size = hs,
                        .weights = weights, .weights_stride = n_keys};
    attention(&b, scratch);
    double worst_out = 0.0, worst_weight = 0.0;
    for (int i = 0; i < nq; i++) {
        int keys = pos + i + 1; /* query i sees keys 0..pos+i */
        double score[512], max = -1e300, sum = 0.0;
        for (int j = 0; j < keys; j++) {
            score[j] = 0.0;
            for (int d = 0; d < hs; d++) score[j] += (double)q[i * hs + d] * k[j * hs + d];
            score[j] /= sqrt((double)hs);
            if (score[j] > max) max = score[j];
        }
        for (int j = 0; j < keys; j++) { score[j] = exp(score[j] - max); sum += score[j]; }
        for (int j = 0; j < keys; j++) {
            score[j] /= sum;
            double err = fabs(weights[i * n_keys + j] - score[j]);
            if (err > worst_weight) worst_weight = err; /* not fmax: gcc 12 for aarch64 fails on it */
        }
        for (int d = 0; d < hs; d++) {
            double want = 0.0;
            for (int j = 0; j < keys; j++) want += score[j] * v[j * hs + d];
            if (fabs(out[i * hs + d] - want) > worst_out) worst_out = fabs(out[i * hs + d] - want);
        }
    }
    char what[120];
    snprintf(what, sizeof what, "attention of %d queries from position %d, head size %d", nq, pos, hs);
    checks++;
    int ok = worst_out <= 1e-5 && worst_weight <= 1e-6;
    printf("%s %s: worst |output error| %.1e (at most 1e-5), |weight error| %.1e (at most 1e-6)\n",
           ok ? "ok" : "not ok", what, worst_out, worst_weight);
    if (!ok) failures++;
    free(q); free(k); free(v); free(out); free(weights); free(scratch);
}

int main(void) {
    /* softmax([4.0, -1.0, 2.1]) = exp(x) / sum exp(x): 54.598, 0.368, 8.166 over 63.132 */
    float a[3] = {4.0f, -1.0f, 2.1f};
    softmax(a, 3);
    expect_near("softmax([4,-1,2.1])[0]", a[0], 0.8648, 5e-5);
    expect_near("softmax([4,-1,2.1])[1]", a[1], 0.0058, 5e-5);
    expect_near("softmax([4,-1,2.1])[2]", a[2], 0.1294, 5e-5);

    /* the issue quotes these to three digits, truncated (0.34859 appears as 0.348) */
    float b[3] = {0.606f, 0.2f, -0.8f};
    softmax(b, 3);
    expect_near("softmax([0.606,0.2,-0.8])[0]", b[0], 0.523, 1e-3);
    expect_near("softmax([0.606,0.2,-0.8])[1]", b[1], 0.348, 1e-3);
    expect_near("softmax([0.606,0.2,-0.8])[2]", b[2], 0.128, 1e-3);

    /* scaled dot product (0.6,0.3,0.8).(0.5,0.1,0.9)/sqrt(3) = 1.05/1.732 = 0.606 */
    float q[3] = {0.6f, 0.3f, 0.8f}, k[3] = {0.5f, 0.1f, 0.9f};
    expect_near("scaled dot product", dot_f32(q, k, 3) / sqrtf(3.0f), 0.606, 5e-4);

    /* The attention weights for that query over keys [k, 0] are softmax([0.606, 0]) ... */
    float keys[3 * 3] = {0.5f, 0.1f, 0.9f, 0, 0, 0, NAN, NAN, NAN};
    float values[3 * 3] = {1, 2, 3, 4, 5, 6, NAN, NAN, NAN};
    float att[3], out[3];
    att[2] = -7.0f; /* sentinel: position 2 is in the future for pos = 1 */
    attention_one(out, att, q, keys, values, 1, 3);
    expect_near("attention weight of key 0", att[0], 1 / (1 + exp(-0.606218)), 1e-5);
    expect_near("attention weight of key 1", att[1], 1 / (1 + exp(0.606218)), 1e-5);
    expect_near("output = weighted sum of values", out[0], att[0] * 1 + att[1] * 4, 1e-6);
    /* ... and a masked (future) position gets weight exactly 0: its NaN key and value, which
     * would poison any sum they entered, leave the output finite. */
    checks++;
    int masked_ok = isfinite(out[0]) && isfinite(out[1]) && isfinite(out[2]) && att[2] == -7.0f;
    printf("%s masked position has weight exactly 0\n", masked_ok ? "ok" : "not ok");
    if (!masked_ok) failures++;
    /* pos = 0: the only visible key gets weight exactly 1 */
    attention_one(out, att, q, keys, values, 0, 3);
    expect_near("single visible key has weight 1", att[0], 1.0, 0.0);

    /* GELU at 1: tanh form 0.841192, erf form 0.841345 (x * Phi(x)) */
    float g[2] = {1.0f, 1.0f};
    gelu(g, 1, GELU_TANH);
    gelu(g + 1, 1, GELU_ERF);
    expect_near("gelu_tanh(1)", g[0], 0.841192, 1e-5);
    expect_near("gelu_erf(1)", g[1], 0.841345, 1e-5);

    /* GELU over a range (the vector path when there is one) against tanh in double */
    enum { NG = 4001 };
    static float gx[NG];
    for (int i = 0; i < NG; i++) gx[i] = -20.0f + 40.0f * i / (NG - 1);
    float gy[NG];
    memcpy(gy, gx, sizeof gy);
    gelu(gy, NG, GELU_TANH);
    double worst = 0.0;
    for (int i = 0; i < NG; i++) {
        double v = gx[i], want = 0.5 * v * (1.0 + tanh(0.7978845608028654 * (v + 0.044715 * v * v * v)));
        double err = fabs(gy[i] - want) / (1.0 + fabs(want));
        if (err > worst) worst = err;
    }
    expect_near("gelu_tanh on [-20, 20], worst |error| / (1 + |gelu|)", worst, 0.0, 1e-6);

    /* LayerNorm of [1, 2, 3]: mean 2, variance 2/3 -> [-1.2247, 0, 1.2247] */
    float x[3] = {1, 2, 3}, w[3] = {1, 1, 1}, y[3];
    layernorm(y, x, w, NULL, 1, 3, 0.0f);
    expect_near("layernorm([1,2,3])[0]", y[0], -1.224745, 1e-5);
    expect_near("layernorm([1,2,3])[2]", y[2], 1.224745, 1e-5);

    /* Streaming output holds back a UTF-8 character split across tokens: "—" is E2 80 94. */
    fflush(stdout);
    int saved = dup(1);
    FILE *capture = tmpfile();
    dup2(fileno(capture), 1);
    Output o = {0};
    const uint8_t dash[3] = {0xE2, 0x80, 0x94};
    long sizes[3];
    for (int i = 0; i < 3; i++) {
        output_bytes(&o, dash + i, 1);
        sizes[i] = lseek(1, 0, SEEK_END);
    }
    output_bytes(&o, (const uint8_t *)"a\xC3", 2); /* "a" then half of "é" */
    long before_finish = lseek(1, 0, SEEK_END);
    output_finish(&o); /* at the end, whatever remains is flushed */
    long after_finish = lseek(1, 0, SEEK_END);
    fflush(stdout);
    dup2(saved, 1);
    checks++;
    int stream_ok = sizes[0] == 0 && sizes[1] == 0 && sizes[2] == 3 && before_finish == 4 &&
                    after_finish == 5;
    printf("%s split UTF-8 held back until whole (%ld %ld %ld %ld %ld)\n", stream_ok ? "ok" : "not ok",
           sizes[0], sizes[1], sizes[2], before_finish, after_finish);
    if (!stream_ok) failures++;

    /* q8_0: quantize_q8 keeps quants in [-127, 127] with scale max|x|/127, and dot_q8 equals
     * the dot product of the dequantized values (computed here in double) */
    enum { N = 320 };
    static float wv[N], xv[N], ws[N / 32], xs[N / 32];
    static int8_t wq[N], xq[N];
    uint64_t seed = 12345;
    for (int i = 0; i < N; i++) {
        wv[i] = (float)(rng_uniform(&seed) * 2 - 1);
        xv[i] = (float)(rng_uniform(&seed) * 8 - 4);
    }
    for (int i = 64; i < 96; i++) xv[i] = 0.0f; /* an all-zero block: scale 0, no NaN */
    quantize_q8(wq, ws, wv, N);
    quantize_q8(xq, xs, xv, N);
    double exact = 0.0, dequant = 0.0;
    int range_ok = 1;
    for (int i = 0; i < N; i++) {
        exact += (double)wv[i] * xv[i];
        dequant += (double)wq[i] * ws[i / 32] * ((double)xq[i] * xs[i / 32]);
        if (wq[i] < -127 || xq[i] < -127) range_ok = 0;
    }
    float got = dot_q8(wq, ws, xq, xs, N);
    expect_near("dot_q8 = dot of dequantized values", got, dequant, 1e-4 * fabs(dequant) + 1e-5);
    expect_near("q8_0 dot close to the float dot", got, exact, 0.02 * sqrt((double)N));
    checks++;
    int zero_ok = range_ok && xs[2] == 0.0f && isfinite(got);
    printf("%s quants in [-127, 127], zero block has scale 0\n", zero_ok ? "ok" : "not ok");
    if (!zero_ok) failures++;

    /* matmul() shapes: 3 and 9 groups of 32 (odd), rows 40 and 30 (not whole tiles of 16 or 12),
     * 37 and 45 tokens (part tiles), one token (decode) */
    int shapes[][3] = {{96, 40, 37}, {288, 48, 45}, {256, 64, 100}, {64, 30, 33}, {96, 40, 1}};
    for (int i = 0; i < 5; i++) {
        check_matmul(shapes[i][0], shapes[i][1], shapes[i][2], WT_F32, 0);
        check_matmul(shapes[i][0], shapes[i][1], shapes[i][2], WT_Q8_0, 0);
        check_matmul(shapes[i][0], shapes[i][1], shapes[i][2], WT_Q8_0, 1);
    }
    check_matmul(50, 30, 45, WT_F32, 0); /* float32 takes any width */

    /* attention: one query (decode), a block of 16 and one of 20 (a part block after a whole
     * one) from past position 0, head sizes that do and do not fit the 16-lane path */
    check_attention(0, 1, 64);
    check_attention(37, 1, 48);
    check_attention(0, 16, 64);
    check_attention(5, 20, 32);
    check_attention(9, 7, 36);

    printf("%d passed, %d failed\n", checks - failures, failures);
    return failures ? 1 : 0;
}
