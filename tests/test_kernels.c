/* Checks of the engine's kernels: engine.h is included whole, so the static functions are tested
 * as they are. Three kinds of checks:
 *   - values computed by hand (softmax, a scaled dot product, masking, GELU, LayerNorm, UTF-8
 *     streaming, q8_0 quantization);
 *   - every matrix product and attention against the same computation in double;
 *   - every kernel of this build against the arithmetic kernels/simd.h defines for every path,
 *     written out here in plain C with fmaf, bit for bit: what makes all paths agree exactly.
 * Exit status 1 on failure. */
#include "../engine.h"
#include "../output.h"

static int failures = 0, checks = 0;

static void expect_near(const char *what, double got, double want, double tol) {
    checks++;
    int ok = fabs(got - want) <= tol;
    printf("%s %s: got %.6f, want %.6f (within %g)\n", ok ? "ok" : "not ok", what, got, want, tol);
    if (!ok) failures++;
}

/* n floats of got and want must have the same bits */
static void expect_bits(const char *what, const float *got, const float *want, size_t n) {
    checks++;
    size_t differ = 0, first = 0;
    for (size_t i = n; i-- > 0;)
        if (memcmp(got + i, want + i, sizeof(float)) != 0) differ++, first = i;
    printf("%s %s: %zu of %zu values differ in their bits", differ ? "not ok" : "ok", what, differ, n);
    if (differ) printf(" (first at %zu: %.9g, want %.9g)", first, (double)got[first], (double)want[first]);
    printf("\n");
    if (differ) failures++;
}

/* ---- the shared arithmetic, written out plainly (kernels/simd.h's header defines it) -------------- */

static float ref_exp(float z) {
    z = fminf(fmaxf(z, -87.0f), 87.0f);
    float k = rintf(z * 1.44269504f);
    float r = fmaf(-k, 0.693145752f, z);
    r = fmaf(-k, 1.42860677e-6f, r);
    static const float c[6] = {1.0f / 120, 1.0f / 24, 1.0f / 6, 0.5f, 1.0f, 1.0f};
    float p = 1.0f / 720;
    for (int i = 0; i < 6; i++) p = fmaf(p, r, c[i]);
    return ldexpf(p, (int)k);
}

static float ref_gelu_tanh(float x) {
    float y = 0.7978845608f * fmaf(0.044715f * x, x * x, x);
    return x / (1.0f + ref_exp(y * -2.0f));
}

static float ref_gelu_erf(float x) {
    /* Numerical Recipes in C, 2nd ed., section 6.2, erfcc: t^9 .. t^0 */
    static const float c[10] = {0.17087277f, -0.82215223f, 1.48851587f, -1.13520398f, 0.27886807f,
                                -0.18628806f, 0.09678418f, 0.37409196f, 1.00002368f, -1.26551223f};
    float z = x * 0.70710678118654752f, az = fabsf(z), t = 1.0f / (1.0f + 0.5f * az), p = c[0];
    for (int i = 1; i < 10; i++) p = fmaf(p, t, c[i]);
    float erfc = t * ref_exp(fmaf(-az, az, p));
    return (0.5f * x) * (1.0f + copysignf(1.0f - erfc, z));
}

/* Sums of a row as kernels/simd.h defines them (the norms', the softmax's), written out: 16
 * partial sums, partial l over i = l (mod 16) in order, then the fixed tree; of the values, or
 * (squares) of (x_i - c)^2. */
static float sum16_by_definition(const float *x, int n, float c, int squares) {
    float p[16] = {0};
    for (int i = 0; i < n; i++) p[i % 16] += squares ? (x[i] - c) * (x[i] - c) : x[i];
    for (int half = 8; half >= 1; half /= 2)
        for (int i = 0; i < half; i++) p[i] += p[i + half];
    return p[0];
}

static void ref_softmax(float *x, int n) {
    float max = x[0];
    for (int i = 1; i < n; i++) if (x[i] > max) max = x[i];
    for (int i = 0; i < n; i++) x[i] = ref_exp(x[i] - max);
    float sum = sum16_by_definition(x, n, 0.0f, 0);
    for (int i = 0; i < n; i++) x[i] /= sum;
}

/* decode: 64 partial sums over k = l (mod 64), a fixed tree, then the bias */
static float ref_matvec_row(const float *w, const float *x, int n, float bias) {
    float p[64] = {0};
    for (int k = 0; k < n; k++) p[k % 64] = fmaf(w[k], x[k], p[k % 64]);
    for (int i = 0; i < 32; i++) p[i] += p[i + 32];
    for (int i = 0; i < 16; i++) p[i] += p[i + 16];
    for (int i = 0; i < 8; i++) p[i] += p[i + 8];
    for (int i = 0; i < 4; i++) p[i] += p[i + 4];
    for (int i = 0; i < 2; i++) p[i] += p[i + 2];
    return (p[0] + p[1]) + bias;
}

/* prefill: one fma chain over k, then the bias */
static float ref_prefill_row(const float *w, const float *x, int n, float bias) {
    float acc = 0.0f;
    for (int k = 0; k < n; k++) acc = fmaf(w[k], x[k], acc);
    return acc + bias;
}

/* q8_0: the activations quantized (quantize_q8), exact group dots, an fma chain over the groups */
static float ref_q8_row(const int8_t *wq, const float *ws, const int8_t *xq, const float *xs, int n, float bias) {
    float acc = 0.0f;
    for (int g = 0; g < n / 32; g++) {
        int32_t dot = 0;
        for (int i = 0; i < 32; i++) dot += wq[g * 32 + i] * xq[g * 32 + i];
        acc = fmaf((float)dot, ws[g] * xs[g], acc);
    }
    return acc + bias;
}

/* q4_0 weights for the tests, by model.h's layout (the exporter's rule: the group's largest
 * magnitude becomes quant -8): bytes (16 per group), scales, and the quants as int8 (-8..7)
 * for the reference, which then is ref_q8_row's arithmetic. */
static void quantize_q4_for_test(uint8_t *bytes, float *scale, int8_t *quants, const float *w, int n) {
    for (int g = 0; g < n / 32; g++) {
        const float *wg = w + g * 32;
        float m = 0.0f;
        for (int i = 0; i < 32; i++) if (fabsf(wg[i]) > fabsf(m)) m = wg[i];
        float d = m / -8.0f;
        scale[g] = d;
        for (int i = 0; i < 32; i++) {
            float q = d != 0.0f ? rintf(wg[i] / d) : 0.0f;
            quants[g * 32 + i] = (int8_t)(q < -8 ? -8 : q > 7 ? 7 : q);
        }
        for (int i = 0; i < 16; i++)
            bytes[g * 16 + i] = (uint8_t)((quants[g * 32 + i] + 8) | ((quants[g * 32 + 16 + i] + 8) << 4));
    }
}

/* ---- the block formats (GGUF's blocks, kernels/types.h), decoded here on their own ------------ */

/* A block's numbers as ggml's block structs lay them out, read bit by bit from the byte
 * positions the format describes (not through kernels/types.h's helpers): the integers the
 * kernels multiply, and the float32 scales. */
typedef struct {
    int q[256];             /* per value: q5_0's number - 16, q5_1's, q4_1's, q4_k's, q5_k's numbers, q6_k's
                               - 32, iq4_nl's and iq4_xs's levels */
    int sc[16], m[16];      /* q4_k, q5_k: 6-bit scales and mins of the 8 sub-blocks; q6_k: 16 int8 scales;
                               iq4_xs: each sub-block's 6-bit scale - 32; q2_k: 16 4-bit scales and mins;
                               q3_k: 16 6-bit scales - 32 */
    float d, dmin;          /* binary16 d and dmin (q5_1, q4_1: d and m) as float32 */
} BlockParts;

/* iq4_nl's and iq4_xs's levels as ggml publishes them (ggml-common.h, kvalues_iq4nl) */
static const int ref_levels[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};

/* binary16 -> float32 by its definition: (-1)^s 2^(e - 15) (1 + f / 1024), subnormals 2^-14 f / 1024 */
static float ref_half(const uint8_t *p) {
    int h = p[0] | p[1] << 8, e = (h >> 10) & 31, f = h & 1023;
    double v = e == 0 ? ldexp(f, -24) : ldexp(1024 + f, e - 25);
    return (float)((h & 0x8000) ? -v : v);
}

static int test_block_values(int type) {
    return type == WT_Q5_0 || type == WT_Q5_1 || type == WT_Q4_1 || type == WT_IQ4_NL ? 32 : 256;
}
static int test_block_bytes(int type) {
    return type == WT_Q5_0 ? 22 : type == WT_Q5_1 ? 24 : type == WT_Q4_K ? 144 : type == WT_Q5_K ? 176 :
           type == WT_Q4_1 ? 20 : type == WT_IQ4_NL ? 18 : type == WT_IQ4_XS ? 136 : type == WT_Q2_K ? 84 :
           type == WT_Q3_K ? 110 : 210;
}

static BlockParts block_parts(int type, const uint8_t *b) {
    BlockParts p = {0};
    if (type == WT_Q5_0 || type == WT_Q5_1) { /* {d; [m;] qh[4]; qs[16]} */
        int at = type == WT_Q5_0 ? 2 : 4;
        uint32_t qh = (uint32_t)b[at] | (uint32_t)b[at + 1] << 8 | (uint32_t)b[at + 2] << 16 | (uint32_t)b[at + 3] << 24;
        for (int j = 0; j < 32; j++) {
            int nibble = j < 16 ? b[at + 4 + j] % 16 : b[at + 4 + j - 16] / 16;
            p.q[j] = nibble + 16 * (int)((qh >> j) & 1) - (type == WT_Q5_0 ? 16 : 0);
        }
        p.d = ref_half(b);
        p.dmin = type == WT_Q5_1 ? ref_half(b + 2) : 0.0f;
    } else if (type == WT_Q4_1 || type == WT_IQ4_NL) { /* {d; [m;] qs[16]} */
        int at = type == WT_Q4_1 ? 4 : 2;
        for (int j = 0; j < 32; j++) {
            int nibble = j < 16 ? b[at + j] % 16 : b[at + j - 16] / 16;
            p.q[j] = type == WT_Q4_1 ? nibble : ref_levels[nibble];
        }
        p.d = ref_half(b);
        p.dmin = type == WT_Q4_1 ? ref_half(b + 2) : 0.0f;
    } else if (type == WT_IQ4_XS) { /* {d; scales_h (u16); scales_l[4]; qs[128]} */
        int high = b[2] | b[3] << 8;
        for (int g = 0; g < 8; g++) {
            p.sc[g] = ((b[4 + g / 2] >> (4 * (g % 2))) % 16 + 16 * ((high >> (2 * g)) % 4)) - 32;
            for (int j = 0; j < 32; j++) {
                int byte = b[8 + 16 * g + j % 16];
                p.q[32 * g + j] = ref_levels[j < 16 ? byte % 16 : byte / 16];
            }
        }
        p.d = ref_half(b);
    } else if (type == WT_Q2_K || type == WT_Q3_K) {
        /* q2_k {scales[16]; qs[64]; d; dmin}; q3_k {hmask[32]; qs[64]; scales[12]; d} */
        const uint8_t *qs = b + (type == WT_Q2_K ? 16 : 32);
        for (int i = 0; i < 256; i++) {
            int h = i / 128, k = i % 128 / 32, l = i % 32, two = (qs[32 * h + l] >> (2 * k)) & 3;
            p.q[i] = type == WT_Q2_K ? two : two - ((b[l] >> (4 * h + k)) & 1 ? 0 : 4);
        }
        for (int j = 0; j < 16; j++) {
            if (type == WT_Q2_K) {
                p.sc[j] = b[j] % 16, p.m[j] = b[j] / 16;
            } else {
                const uint8_t *s = b + 96;
                int low = j < 8 ? s[j] % 16 : s[j - 8] / 16, high = (s[8 + j % 4] >> (2 * (j / 4))) % 4;
                p.sc[j] = low + 16 * high - 32;
            }
        }
        p.d = ref_half(b + (type == WT_Q2_K ? 80 : 108));
        p.dmin = type == WT_Q2_K ? ref_half(b + 82) : 0.0f;
    } else if (type == WT_Q4_K || type == WT_Q5_K) { /* {d; dmin; scales[12]; [qh[32];] qs[128]} */
        const uint8_t *s = b + 4, *qs = b + (type == WT_Q4_K ? 16 : 48);
        for (int j = 0; j < 4; j++) {
            p.sc[j] = s[j] % 64, p.m[j] = s[j + 4] % 64;
            p.sc[j + 4] = s[j + 8] % 16 + 16 * (s[j] / 64);
            p.m[j + 4] = s[j + 8] / 16 + 16 * (s[j + 4] / 64);
        }
        for (int i = 0; i < 256; i++) {
            int byte = qs[32 * (i / 64) + i % 32];
            p.q[i] = (i % 64 < 32 ? byte % 16 : byte / 16) + (type == WT_Q5_K ? 16 * ((b[16 + i % 32] >> (i / 32)) & 1) : 0);
        }
        p.d = ref_half(b), p.dmin = ref_half(b + 2);
    } else { /* q6_k {ql[128]; qh[64]; scales[16]; d} */
        for (int i = 0; i < 256; i++) {
            int h = i / 128, k = i % 128 / 32, l = i % 32, low = b[64 * h + 32 * (k % 2) + l];
            p.q[i] = (k < 2 ? low % 16 : low / 16) + 16 * ((b[128 + 32 * h + l] >> (2 * k)) & 3) - 32;
        }
        for (int j = 0; j < 16; j++) p.sc[j] = (int8_t)b[192 + j];
        p.d = ref_half(b + 208);
    }
    return p;
}

/* Value i of a block, in double. */
static double block_value(int type, const BlockParts *p, int i) {
    switch (type) {
    case WT_Q5_0: return (double)p->q[i] * p->d;
    case WT_Q5_1: case WT_Q4_1: return (double)p->q[i] * p->d + p->dmin;
    case WT_IQ4_NL: return (double)p->q[i] * p->d;
    case WT_IQ4_XS: return (double)p->d * p->sc[i / 32] * p->q[i];
    case WT_Q2_K: return (double)p->d * p->sc[i / 16] * p->q[i] - (double)p->dmin * p->m[i / 16];
    case WT_Q3_K: return (double)p->d * p->sc[i / 16] * p->q[i];
    case WT_Q6_K: return (double)p->d * p->sc[i / 16] * p->q[i];
    default: return (double)p->d * p->sc[i / 32] * p->q[i] - (double)p->dmin * p->m[i / 32];
    }
}

/* The size of value i's terms (what rounding error scales with): the scale's part and the min's. */
static double block_value_size(int type, const BlockParts *p, int i) {
    switch (type) {
    case WT_Q5_1: case WT_Q4_1: return fabs((double)p->q[i] * p->d) + fabs(p->dmin);
    case WT_Q2_K: return fabs((double)p->d * p->sc[i / 16] * p->q[i]) + fabs((double)p->dmin * p->m[i / 16]);
    case WT_Q4_K: case WT_Q5_K: return fabs((double)p->d * p->sc[i / 32] * p->q[i]) + fabs((double)p->dmin * p->m[i / 32]);
    default: return fabs(block_value(type, p, i));
    }
}

/* One row of blocks with one token's quantized activations (quants xq, scales xs), written out
 * as kernels/simd.h defines each format's arithmetic, with plain fmaf. */
static float ref_block_row(int type, const uint8_t *row, int n, const int8_t *xq, const float *xs, float bias) {
    int values = test_block_values(type), bytes = test_block_bytes(type);
    float acc = 0.0f;
    for (int b = 0; b < n / values; b++) {
        BlockParts p = block_parts(type, row + (size_t)b * bytes);
        const int8_t *x = xq + b * values;
        const float *s = xs + b * values / 32;
        if (type == WT_Q5_0 || type == WT_Q5_1 || type == WT_Q4_1 || type == WT_IQ4_NL) {
            int dot = 0, sum = 0;
            for (int j = 0; j < 32; j++) dot += p.q[j] * x[j], sum += x[j];
            acc = fmaf((float)dot, p.d * s[0], acc);
            if (type == WT_Q5_1 || type == WT_Q4_1) acc = fmaf((float)sum, p.dmin * s[0], acc);
        } else if (type == WT_Q2_K || type == WT_Q3_K) {
            float dsum = 0.0f, msum = 0.0f;
            for (int g = 0; g < 8; g++) {
                int dot = 0, mins = 0;
                for (int l = 0; l < 32; l++) {
                    int j = 2 * g + l / 16;
                    dot += p.sc[j] * p.q[32 * g + l] * x[32 * g + l];
                    mins += p.m[j] * x[32 * g + l];
                }
                dsum = fmaf((float)dot, s[g], dsum);
                msum = fmaf((float)mins, s[g], msum);
            }
            acc = fmaf(p.d, dsum, acc);
            if (type == WT_Q2_K) acc = fmaf(-p.dmin, msum, acc);
        } else if (type == WT_IQ4_XS) {
            for (int g = 0; g < 8; g++) {
                int dot = 0;
                for (int l = 0; l < 32; l++) dot += p.q[32 * g + l] * x[32 * g + l];
                acc = fmaf((float)dot, p.d * (float)p.sc[g] * s[g], acc);
            }
        } else if (type == WT_Q6_K) {
            float dsum = 0.0f;
            for (int g = 0; g < 8; g++) {
                int half[2] = {0, 0};
                for (int l = 0; l < 32; l++) half[l / 16] += p.q[32 * g + l] * x[32 * g + l];
                dsum = fmaf((float)(p.sc[2 * g] * half[0] + p.sc[2 * g + 1] * half[1]), s[g], dsum);
            }
            acc = fmaf(p.d, dsum, acc);
        } else {
            float dsum = 0.0f, msum = 0.0f;
            for (int g = 0; g < 8; g++) {
                int dot = 0, sum = 0;
                for (int l = 0; l < 32; l++) dot += p.q[32 * g + l] * x[32 * g + l], sum += x[32 * g + l];
                dsum = fmaf((float)(p.sc[g] * dot), s[g], dsum);
                msum = fmaf((float)(p.m[g] * sum), s[g], msum);
            }
            acc = fmaf(-p.dmin, msum, fmaf(p.d, dsum, acc));
        }
    }
    return acc + bias;
}

/* A random block: every byte random (so every bit of the quants and of the 6-bit and int8
 * scales varies), then its binary16 scales set to finite values of either sign. */
static void random_block(int type, uint8_t *b, uint64_t *seed) {
    int bytes = test_block_bytes(type);
    for (int i = 0; i < bytes; i++) b[i] = (uint8_t)(rng_uniform(seed) * 256);
    uint16_t h[2];
    for (int k = 0; k < 2; k++) {
        double v = (0.002 + 0.05 * rng_uniform(seed)) * (rng_uniform(seed) < 0.2 ? -1 : 1);
        h[k] = f16_from_f32((float)v);
    }
    if (type == WT_Q6_K) memcpy(b + 208, h, 2);
    else if (type == WT_Q2_K) memcpy(b + 80, h, 4);
    else if (type == WT_Q3_K) memcpy(b + 108, h, 2);
    else memcpy(b, h, type == WT_Q5_0 || type == WT_IQ4_NL || type == WT_IQ4_XS ? 2 : 4);
}

/* ---- attention cases: random queries, keys and values in the cache's layout ---------------- */

typedef struct {
    HeadAttention block;
    float *q, *keys, *v, *out, *weights, *scratch;
} AttentionCase;

static AttentionCase attention_case(int pos, int nq, int hs) {
    int n_keys = pos + nq, ks = round_up16(n_keys), vs = round_up16(hs);
    AttentionCase a = {
        .q = malloc(sizeof(float) * nq * hs), .keys = calloc((size_t)hs * ks, sizeof(float)),
        .v = calloc((size_t)n_keys * vs, sizeof(float)), .out = malloc(sizeof(float) * nq * hs),
        .weights = malloc(sizeof(float) * nq * n_keys),
        .scratch = malloc(sizeof(float) * attention_scratch_floats(n_keys, hs)),
    };
    uint64_t seed = 99 + pos + nq + hs;
    for (int i = 0; i < nq * hs; i++) a.q[i] = (float)(rng_uniform(&seed) * 4 - 2);
    for (int j = 0; j < n_keys; j++)
        for (int d = 0; d < hs; d++) a.keys[key_index(hs, j, d)] = (float)(rng_uniform(&seed) * 4 - 2);
    for (int j = 0; j < n_keys; j++)
        for (int d = 0; d < hs; d++) a.v[(size_t)j * vs + d] = (float)(rng_uniform(&seed) * 2 - 1);
    a.block = (HeadAttention){.query = a.q, .query_stride = hs, .keys = a.keys, .values = a.v, .value_stride = vs, .out = a.out, .out_stride = hs,
                               .pos = pos, .nq = nq, .head_size = hs, .scale = 1.0f / sqrtf((float)hs)};
    return a;
}

/* attention() of b, then the weights of its queries as the --attention picture reads them
 * (kv_cache.h's attention_recorded, one query at a time): row i of weights, stride floats a row.
 * The outputs stay attention()'s. */
static void attention_and_weights(const HeadAttention *b, float *scratch, float *weights, int stride) {
    attention(b, scratch);
    HeadAttention copy = *b;
    float *out = malloc(sizeof(float) * (size_t)b->nq * (size_t)b->out_stride);
    copy.out = out;
    attention_recorded(&copy, scratch, weights, (size_t)stride);
    free(out);
}

static void free_attention_case(AttentionCase *a) {
    free(a->q); free(a->keys); free(a->v); free(a->out); free(a->weights); free(a->scratch);
}

/* matmul() (decode and prefill kernels; for q8_0 the weights rearranged as the loader does,
 * for whichever kernel this build and CPU use: AMX, VNNI or maddubs) against the same product
 * summed here in double, for shapes with ragged edges: widths of an odd number of 32-groups,
 * row counts that leave rows over after whole tiles (of 12, 3 or 4 rows, and of 16 for q8_0),
 * token counts that end in a part tile. For q8_0 the reference quantizes the activations with
 * the same quantize_q8, so both sides multiply identical integers and only the summation order
 * differs. */
/* A random weight matrix (d, n) in one format, as build_run() prepares it: float32; q8_0
 * (rearranged for the packed kernels when `packed`); q4_0 (always through prepare_weights: x86
 * reads only the copy). wq holds the quants as int8 for the references. */
typedef struct {
    Matrix m;
    float *w, *ws;
    int8_t *wq, *copy;
    uint8_t *w4, *blocks;
    uint16_t *halves;
} TestWeights;

static int is_block_type(int type) { return (type >= WT_Q5_0 && type <= WT_Q5_1) || type >= WT_Q4_1; }
static int is_half_type(int type) { return type == WT_F16 || type == WT_BF16; }

static TestWeights test_weights(int type, int packed, int n, int d, uint64_t *seed) {
    TestWeights t = {.w = malloc(sizeof(float) * d * n), .ws = malloc(sizeof(float) * d * n / 32 + 4),
                     .wq = malloc((size_t)d * n), .w4 = malloc((size_t)d * n / 2 + 1)};
    for (int i = 0; i < d * n; i++) t.w[i] = (float)(rng_uniform(seed) * 2 - 1);
    t.m = (Matrix){.type = type, .rows = d, .cols = n, .f32 = t.w};
    if (is_block_type(type)) {
        size_t blocks = (size_t)d * n / test_block_values(type);
        t.blocks = malloc(blocks * test_block_bytes(type));
        for (size_t b = 0; b < blocks; b++) random_block(type, t.blocks + b * test_block_bytes(type), seed);
        t.m = (Matrix){.type = type, .rows = d, .cols = n, .blocks = t.blocks};
    }
    if (is_half_type(type)) { /* the float32 values rounded to the format (bf16: cut, which is exact) */
        t.halves = malloc(sizeof(uint16_t) * d * n);
        for (int i = 0; i < d * n; i++) {
            uint32_t bits;
            memcpy(&bits, &t.w[i], 4);
            t.halves[i] = type == WT_F16 ? f16_from_f32(t.w[i]) : (uint16_t)(bits >> 16);
            bits = type == WT_F16 ? 0 : (uint32_t)t.halves[i] << 16;
            if (type == WT_F16) t.w[i] = ref_half((const uint8_t *)&t.halves[i]);
            else memcpy(&t.w[i], &bits, 4);
        }
        t.m = (Matrix){.type = type, .rows = d, .cols = n, .halves = t.halves};
    }
    if (is_block_type(type)) {
        Matrix *list[1] = {&t.m};
        size_t bytes = prepare_weights(list, 1, NULL);
        t.copy = malloc(bytes + 1);
        if (bytes) prepare_weights(list, 1, t.copy);
    }
    for (int r = 0; r < d && type == WT_Q8_0; r++)
        quantize_q8(t.wq + (size_t)r * n, t.ws + r * (n / 32), t.w + (size_t)r * n, n);
    for (int r = 0; r < d && type == WT_Q4_0; r++)
        quantize_q4_for_test(t.w4 + (size_t)r * n / 2, t.ws + r * (n / 32), t.wq + (size_t)r * n, t.w + (size_t)r * n, n);
    if (type == WT_Q8_0) t.m = (Matrix){.type = WT_Q8_0, .rows = d, .cols = n, .q8 = t.wq, .scale = t.ws};
    if (type == WT_Q4_0) t.m = (Matrix){.type = WT_Q4_0, .rows = d, .cols = n, .q4 = t.w4, .scale = t.ws};
    if ((type == WT_Q8_0 && packed) || type == WT_Q4_0) {
        Matrix *list[1] = {&t.m};
        t.copy = malloc(prepare_weights(list, 1, NULL) + 1);
        prepare_weights(list, 1, t.copy);
    }
    return t;
}

/* How x86 lays out a q8_0 matrix's copy (kernels/x86/q8_0.h), for the messages. */
static const char *q8_copy_kind(const Matrix *m) {
#ifdef KERNELS_X86
    return m->packing == Q8_PACK_UNSIGNED ? "quants + 128" : "signed quants";
#else
    (void)m;
    return "no copy";
#endif
}

static void free_test_weights(TestWeights *t) {
    free(t->w); free(t->ws); free(t->wq); free(t->w4); free(t->copy); free(t->blocks); free(t->halves);
}

static const char *type_name(int type) { return weight_types[type].name; }

static void check_matmul(int n, int d, int T, int type, int packed) {
    uint64_t seed = 777 + n + d + T;
    TestWeights tw = test_weights(type, packed, n, d, &seed);
    const Matrix m = tw.m;
    const float *w = tw.w, *ws = tw.ws;
    const int8_t *wq = tw.wq;
    float *x = malloc(sizeof(float) * T * n), *bias = malloc(sizeof(float) * d), *out = malloc(sizeof(float) * T * d);
    for (int i = 0; i < T * n; i++) x[i] = (float)(rng_uniform(&seed) * 6 - 3);
    for (int i = 0; i < d; i++) bias[i] = (float)(rng_uniform(&seed) - 0.5);
    const char *how = type == WT_F32 ? "float32" : type == WT_Q4_0 ? q4_0_describe()
                    : type == WT_Q8_0 ? (m.packed ? q8_0_describe() : "q8_0 dot products") : type_name(type);
    /* the block formats: float32 rounding in (additions + 8) steps, each at most 2^-24 of the
     * size of the terms (as tests/test_paths.py bounds every product) */
    double bound = is_block_type(type) ? (n / 32 * 2 + 8) * 0x1p-24 : 1e-6;
    char copy[64] = "";
    if (type == WT_Q8_0 && m.packed) snprintf(copy, sizeof copy, " (copy: %s)", q8_copy_kind(&m));
    MatmulScratch scratch = {0};
    matmul_scratch_init(&scratch, T, n, 1u << type);
    for (int pass = 0; pass < 3; pass++) { /* all T tokens at once (prefill), one by one, as T samples */
        if (pass == 0) matmul(out, x, &m, bias, T, 0, &scratch);
        else if (pass == 1) for (int t = 0; t < T; t++) matmul(out + (size_t)t * d, x + (size_t)t * n, &m, bias, 1, 0, &scratch);
        else matmul(out, x, &m, bias, T, 1, &scratch);
        double worst = 0.0;
        int8_t xq[1024];
        float xs[32];
        for (int t = 0; t < T; t++) {
            int quantized = type != WT_F32 && !is_half_type(type);
            if (quantized) quantize_q8(xq, xs, x + (size_t)t * n, n);
            for (int r = 0; r < d; r++) {
                double sum = bias[r], size = fabs(bias[r]);
                if (is_block_type(type)) {
                    int values = test_block_values(type);
                    for (int b = 0; b < n / values; b++) {
                        BlockParts p = block_parts(type, tw.blocks + ((size_t)r * (n / values) + b) * test_block_bytes(type));
                        for (int i = 0; i < values; i++) {
                            double xv = (double)xq[b * values + i] * xs[(b * values + i) / 32];
                            sum += block_value(type, &p, i) * xv;
                            size += block_value_size(type, &p, i) * fabs(xv);
                        }
                    }
                }
                for (int i = 0; i < n && !is_block_type(type); i++) {
                    double term = quantized ? (double)wq[(size_t)r * n + i] * ws[r * (n / 32) + i / 32] * xq[i] * xs[i / 32]
                                            : (double)w[(size_t)r * n + i] * x[(size_t)t * n + i];
                    sum += term;
                    size += fabs(term);
                }
                double err = fabs(out[(size_t)t * d + r] - sum) / size;
                if (err > worst) worst = err;
            }
        }
        char what[300];
        snprintf(what, sizeof what, "matmul %s%s, n %d, d %d, %s: worst error / sum of |terms|", how, copy, n, d,
                 pass == 0 ? (T == 1 ? "1 token" : "prefill") : pass == 1 ? "one token at a time" : "T samples");
        checks++;
        printf("%s %s: %.2e (at most %.2g)\n", worst <= bound ? "ok" : "not ok", what, worst, bound);
        if (!(worst <= bound)) failures++;
        if (T == 1) break;
    }
    free(x); free(bias); free(out);
    free_test_weights(&tw);
    matmul_scratch_free(&scratch);
}

/* attention() for nq queries at positions pos.. (the 16-lane path when nq > 1 and the head size
 * is a multiple of 16, one query at a time otherwise) against the same attention computed here
 * in double: scores, softmax, weighted sum; and the weights it reports for the picture. */
static void check_attention(int pos, int nq, int hs) {
    int n_keys = pos + nq;
    AttentionCase a = attention_case(pos, nq, hs);
    float *q = a.q, *v = a.v, *out = a.out, *weights = a.weights;
    attention_and_weights(&a.block, a.scratch, a.weights, n_keys);
    double worst_out = 0.0, worst_weight = 0.0;
    for (int i = 0; i < nq; i++) {
        int keys = pos + i + 1; /* query i sees keys 0..pos+i */
        double score[512], max = -1e300, sum = 0.0;
        for (int j = 0; j < keys; j++) {
            score[j] = 0.0;
            for (int d = 0; d < hs; d++) score[j] += (double)q[i * hs + d] * a.keys[key_index(hs, j, d)];
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
            for (int j = 0; j < keys; j++) want += score[j] * v[(size_t)j * a.block.value_stride + d];
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
    free_attention_case(&a);
}


/* ---- this build's kernels against the shared arithmetic, bit for bit ------------------------ */

static void check_elementwise_bits(void) {
    enum { N = 20011 }; /* not a multiple of any vector width: part vectors too */
    static float x[N], got[N], want[N];
    uint64_t seed = 4242;
    for (int i = 0; i < N; i++) x[i] = (float)(rng_uniform(&seed) * 40 - 20);
    x[0] = 0.0f; x[1] = -0.0f; x[2] = 1e-30f; x[3] = -1e-30f; x[4] = 87.5f; x[5] = -150.0f; x[6] = 7.9e-39f;
    memcpy(got, x, sizeof x);
    ELEMENTWISE(got, N, vf_exp);
    for (int i = 0; i < N; i++) want[i] = ref_exp(x[i]);
    expect_bits("exp on [-20, 20] and edge values", got, want, N);
    memcpy(got, x, sizeof x);
    gelu(got, N, GELU_TANH);
    for (int i = 0; i < N; i++) want[i] = ref_gelu_tanh(x[i]);
    expect_bits("gelu, tanh form", got, want, N);
    memcpy(got, x, sizeof x);
    gelu(got, N, GELU_ERF);
    for (int i = 0; i < N; i++) want[i] = ref_gelu_erf(x[i]);
    expect_bits("gelu, erf form", got, want, N);
    static float up[N];
    for (int i = 0; i < N; i++) up[i] = (float)(rng_uniform(&seed) * 6 - 3);
    memcpy(got, up, sizeof up);
    swiglu(got, x, N);
    for (int i = 0; i < N; i++) want[i] = x[i] / (1.0f + ref_exp(x[i] * -1.0f)) * up[i];
    expect_bits("swiglu: silu(gate) x up", got, want, N);
    for (int n = 1; n < 70; n += 7) {
        memcpy(got, x, sizeof x);
        memcpy(want, x, sizeof x);
        softmax(got, n);
        ref_softmax(want, n);
        char what[60];
        snprintf(what, sizeof what, "softmax of %d values", n);
        expect_bits(what, got, want, (size_t)n);
    }
}

/* matmul() of every format and kernel (decode, prefill, packed or not) against the arithmetic */
static void check_matmul_bits(int n, int d, int T, int type, int packed) {
    uint64_t seed = 31 + n + d + T;
    TestWeights tw = test_weights(type, packed, n, d, &seed);
    const Matrix m = tw.m;
    const float *w = tw.w, *ws = tw.ws;
    const int8_t *wq = tw.wq;
    float *x = malloc(sizeof(float) * T * n), *bias = malloc(sizeof(float) * d);
    float *got = malloc(sizeof(float) * T * d), *want = malloc(sizeof(float) * T * d), xs[32];
    int8_t xq[1024];
    for (int i = 0; i < T * n; i++) x[i] = (float)(rng_uniform(&seed) * 6 - 3);
    for (int i = 0; i < d; i++) bias[i] = (float)(rng_uniform(&seed) - 0.5);
    MatmulScratch scratch = {0};
    matmul_scratch_init(&scratch, T, n, 1u << type);
    for (int pass = 0; pass < 3; pass++) { /* all T tokens at once (prefill), one by one, as T samples */
        if (pass == 0) matmul(got, x, &m, bias, T, 0, &scratch);
        else if (pass == 1) for (int t = 0; t < T; t++) matmul(got + (size_t)t * d, x + (size_t)t * n, &m, bias, 1, 0, &scratch);
        else matmul(got, x, &m, bias, T, 1, &scratch);
        int decode = pass > 0 || T == 1;
        for (int t = 0; t < T; t++) {
            int quantized = type != WT_F32 && !is_half_type(type);
            if (quantized) quantize_q8(xq, xs, x + (size_t)t * n, n);
            for (int r = 0; r < d; r++)
                want[(size_t)t * d + r] =
                    is_block_type(type) ? ref_block_row(type, tw.blocks + (size_t)r * (n / test_block_values(type)) * test_block_bytes(type), n, xq, xs, bias[r])
                    : quantized ? ref_q8_row(wq + (size_t)r * n, ws + r * (n / 32), xq, xs, n, bias[r])
                    : decode    ? ref_matvec_row(w + (size_t)r * n, x + (size_t)t * n, n, bias[r])
                                : ref_prefill_row(w + (size_t)r * n, x + (size_t)t * n, n, bias[r]);
        }
        char what[300];
        snprintf(what, sizeof what, "matmul %s%s, n %d, d %d, %s",
                 type == WT_F32 ? "float32" : type_name(type),
                 !m.packed ? "" : type != WT_Q8_0 ? " rearranged" : q8_copy_kind(&m)[0] == 'q' ? " rearranged, quants + 128" : " rearranged, signed quants", n, d, pass == 2 ? "decode of T samples" : decode ? "decode" : "prefill");
        expect_bits(what, got, want, (size_t)T * d);
        if (T == 1) break;
    }
    free(x); free(bias); free(got); free(want);
    free_test_weights(&tw);
    matmul_scratch_free(&scratch);
}

static void check_attention_bits(int pos, int nq, int hs) {
    AttentionCase a = attention_case(pos, nq, hs);
    int n_keys = pos + nq, vs = a.block.value_stride;
    attention_and_weights(&a.block, a.scratch, a.weights, n_keys);
    float *want = malloc(sizeof(float) * nq * hs), *want_weights = calloc((size_t)nq * n_keys, sizeof(float));
    float *got_weights = calloc((size_t)nq * n_keys, sizeof(float)), scale = 1.0f / sqrtf((float)hs);
    for (int i = 0; i < nq; i++) {
        int keys = pos + i + 1;
        float *att = want_weights + (size_t)i * n_keys;
        for (int j = 0; j < keys; j++) {
            float s = 0.0f;
            for (int d = 0; d < hs; d++) s = fmaf(a.q[i * hs + d] * scale, a.keys[key_index(hs, j, d)], s);
            att[j] = s;
        }
        ref_softmax(att, keys);
        for (int d = 0; d < hs; d++) {
            float acc = 0.0f;
            for (int j = 0; j < keys; j++) acc = fmaf(att[j], a.v[(size_t)j * vs + d], acc);
            want[i * hs + d] = acc;
        }
        memcpy(got_weights + (size_t)i * n_keys, a.weights + (size_t)i * n_keys, sizeof(float) * keys);
    }
    char what[120];
    snprintf(what, sizeof what, "attention of %d queries from position %d, head size %d: outputs", nq, pos, hs);
    expect_bits(what, a.out, want, (size_t)nq * hs);
    snprintf(what, sizeof what, "attention of %d queries from position %d, head size %d: weights", nq, pos, hs);
    expect_bits(what, got_weights, want_weights, (size_t)nq * n_keys);
    free(want); free(want_weights); free(got_weights);
    free_attention_case(&a);
}

/* ---- the binary16 key/value cache ------------------------------------------------------ */

/* float32 -> binary16 and back against values worked out by hand (a half: sign, 5 exponent
 * bits with bias 15, 10 fraction bits; round to nearest, ties to even). */
static void check_f16_by_hand(void) {
    static const struct { float f; uint16_t h; const char *why; } cases[] = {
        {1.0f, 0x3C00, "1 = 2^0: exponent 15"},
        {-2.0f, 0xC000, "-2: sign, exponent 16"},
        {0.1f, 0x2E66, "0.1 = 1.6 x 2^-4: exponent 11, fraction round(0.6 x 1024) = 614"},
        {65504.0f, 0x7BFF, "65504, the largest half"},
        {65519.0f, 0x7BFF, "65519 rounds down to 65504"},
        {65520.0f, 0x7C00, "65520: the tie between 65504 and 65536 goes to the even one, infinity"},
        {1e6f, 0x7C00, "1e6 overflows to infinity"},
        {INFINITY, 0x7C00, "infinity"},
        {-0.0f, 0x8000, "-0"},
        {6.103515625e-05f, 0x0400, "2^-14, the smallest normal half"},
        {5.9604644775390625e-08f, 0x0001, "2^-24, the smallest subnormal"},
        {2.98023223876953125e-08f, 0x0000, "2^-25: the tie between 0 and 2^-24 goes to 0"},
        {8.94069671630859375e-08f, 0x0002, "3 x 2^-25: the tie between 1 and 2 x 2^-24 goes to 2"},
        {1.00048828125f, 0x3C00, "1 + 2^-11: the tie between 1 and 1 + 2^-10 goes to 1"},
        {1.00146484375f, 0x3C02, "1 + 3 x 2^-11: the tie goes to the even fraction 2"},
        {1.0009765625f, 0x3C01, "1 + 2^-10: exact"},
    };
    char what[160];
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        float same[16]; /* a whole vector of it, so that this build's vector conversion runs */
        uint16_t h = f16_from_f32(cases[i].f), stored[16];
        for (int k = 0; k < 16; k++) same[k] = cases[i].f;
        f16_store(stored, same, 16);
        snprintf(what, sizeof what, "binary16 of %s", cases[i].why);
        expect_near(what, h, cases[i].h, 0);
        snprintf(what, sizeof what, "binary16 of %s, this build's conversion", cases[i].why);
        expect_near(what, stored[15], cases[i].h, 0);
    }
    expect_near("binary16 of NaN is NaN", f32_from_f16(f16_from_f32(NAN)) != f32_from_f16(f16_from_f32(NAN)), 1, 0);
    static const struct { uint16_t h; double f; } back[] = {
        {0x3555, 0.333251953125 /* (1 + 341/1024) / 4: 1/3 rounded */}, {0x7BFF, 65504}, {0x0400, 6.103515625e-05},
        {0x3C01, 1.0009765625}, {0x0001, 5.9604644775390625e-08}, {0x03FF, 6.0975551605224609e-05 /* 1023 x 2^-24 */},
        {0xC000, -2}, {0x7C00, INFINITY}, {0xFC00, -INFINITY}};
    for (size_t i = 0; i < sizeof back / sizeof back[0]; i++) {
        snprintf(what, sizeof what, "binary16 0x%04X back to float32", back[i].h);
        if (isinf(back[i].f)) expect_near(what, f32_from_f16(back[i].h) == back[i].f, 1, 0);
        else expect_near(what, f32_from_f16(back[i].h), back[i].f, 0);
    }
    expect_near("binary16 0x8000 back to float32 is -0", signbit(f32_from_f16(0x8000)) != 0, 1, 0);
}

/* This build's conversions (F16C, AVX-512, NEON where it has them) against the portable C ones:
 * every 4099th float32 bit pattern to binary16 (NaNs only need to stay NaNs), and all 65536
 * halves back. */
static void check_f16_conversions(void) {
    enum { N = 1048576 };
    float *f = malloc(sizeof(float) * N), *back = malloc(sizeof(float) * N), *want = malloc(sizeof(float) * N);
    uint16_t *h = malloc(sizeof(uint16_t) * N), *hw = malloc(sizeof(uint16_t) * N);
    for (uint32_t i = 0; i < N; i++) {
        uint32_t bits = i * 4099u;
        memcpy(&f[i], &bits, sizeof bits);
    }
    f16_store(h, f, N - 3); /* a length that leaves a part vector */
    h[N - 3] = f16_from_f32(f[N - 3]), h[N - 2] = f16_from_f32(f[N - 2]), h[N - 1] = f16_from_f32(f[N - 1]);
    size_t differ = 0;
    for (uint32_t i = 0; i < N; i++) {
        uint16_t p = f16_from_f32(f[i]);
        int nan = (p & 0x7C00) == 0x7C00 && (p & 0x3FF), got_nan = (h[i] & 0x7C00) == 0x7C00 && (h[i] & 0x3FF);
        if (nan ? !got_nan : h[i] != p) differ++;
    }
    checks++;
    printf("%s this build's float32 -> binary16 against the portable C one: %zu of %d differ\n",
           differ ? "not ok" : "ok", differ, N);
    if (differ) failures++;
    for (uint32_t i = 0; i < 65536; i++) hw[i] = (uint16_t)i, want[i] = f32_from_f16((uint16_t)i);
    for (uint32_t i = 0; i < 65536; i += VW) vf_store(back + i, vf_load_f16(hw + i));
    for (uint32_t i = 0; i < 65536; i++) /* NaN halves: both NaN, with any payload */
        if (want[i] != want[i] && back[i] != back[i]) back[i] = want[i];
    expect_bits("this build's binary16 -> float32 against the portable C one, every half", back, want, 65536);
    free(f); free(back); free(want); free(h); free(hw);
}

/* attention() over a binary16 cache gives the bits of attention() over a float32 cache holding
 * the same (converted) numbers: reading halves changes nothing but the load, on every path. */
static void check_attention_f16(int pos, int nq, int hs) {
    AttentionCase a = attention_case(pos, nq, hs);
    int n_keys = pos + nq;
    size_t nk = (size_t)hs * round_up16(n_keys), nv = (size_t)n_keys * a.block.value_stride;
    uint16_t *keys16 = malloc(sizeof(uint16_t) * nk), *values16 = malloc(sizeof(uint16_t) * nv);
    for (size_t i = 0; i < nk; i++) keys16[i] = f16_from_f32(a.keys[i]), a.keys[i] = f32_from_f16(keys16[i]);
    for (size_t i = 0; i < nv; i++) values16[i] = f16_from_f32(a.v[i]), a.v[i] = f32_from_f16(values16[i]);
    attention_and_weights(&a.block, a.scratch, a.weights, n_keys);
    float *want = malloc(sizeof(float) * nq * hs), *want_weights = malloc(sizeof(float) * nq * n_keys);
    memcpy(want, a.out, sizeof(float) * nq * hs);
    memcpy(want_weights, a.weights, sizeof(float) * nq * n_keys);
    HeadAttention half = a.block;
    half.keys = keys16, half.values = values16, half.cache = CACHE_F16;
    attention_and_weights(&half, a.scratch, a.weights, n_keys);
    char what[120];
    snprintf(what, sizeof what, "attention of %d queries from position %d, head size %d, binary16 cache", nq, pos, hs);
    expect_bits(what, a.out, want, (size_t)nq * hs);
    expect_bits("  and its weights", a.weights, want_weights, (size_t)nq * n_keys);
    free(keys16); free(values16); free(want); free(want_weights);
    free_attention_case(&a);
}

/* ---- the q8_0 key/value cache ----------------------------------------------------------- */

/* A case's keys and values as a q8_0 cache holds them (quants, keys in key_quad_index()'s
 * layout, then at scales_at their scales, laid out as kv_cache.h lays them), quantized here from
 * the definition (groups of up to 32 dimensions, scale = max |x| / 127, quant = x * (127 /
 * max |x|) rounded to nearest even, all in float32); the case's float copies are replaced by
 * the numbers the quants stand for. */
typedef struct {
    int8_t *keys, *values;
    size_t scales_at;
} QuantCache;

static void quantize_for_cache(int8_t *quants, float *scales, float *x, int n) {
    float amax = 0.0f;
    for (int i = 0; i < n; i++) amax = fmaxf(amax, fabsf(x[i]));
    float inv = amax > 0.0f ? 127.0f / amax : 0.0f;
    *scales = amax / 127.0f;
    for (int i = 0; i < n; i++) quants[i] = (int8_t)nearbyintf(x[i] * inv);
}

static QuantCache quant_cache(AttentionCase *a) {
    int hs = a->block.head_size, n_keys = a->block.pos + a->block.nq, ks = round_up16(n_keys), vs = a->block.value_stride;
    int groups = (hs + 31) / 32;
    QuantCache c = {.scales_at = (size_t)ks * vs};
    size_t bytes = c.scales_at + (size_t)ks * groups * sizeof(float);
    c.keys = calloc(bytes, 1), c.values = calloc(bytes, 1);
    float *key_scales = (float *)(void *)(c.keys + c.scales_at), *value_scales = (float *)(void *)(c.values + c.scales_at);
    for (int j = 0; j < n_keys; j++)
        for (int g = 0; g < groups; g++) {
            int d0 = 32 * g, m = hs - d0 < 32 ? hs - d0 : 32;
            float key[32], scale;
            int8_t q[32];
            for (int d = 0; d < m; d++) key[d] = a->keys[key_index(hs, j, d0 + d)];
            quantize_for_cache(q, &scale, key, m);
            key_scales[key_index(groups, j, g)] = scale;
            for (int d = 0; d < m; d++) c.keys[key_quad_index(hs, j, d0 + d)] = q[d], a->keys[key_index(hs, j, d0 + d)] = q[d] * scale;
            quantize_for_cache(q, &scale, a->v + (size_t)j * vs + d0, m);
            value_scales[key_index(groups, j, g)] = scale;
            for (int d = 0; d < m; d++) c.values[(size_t)j * vs + d0 + d] = q[d], a->v[(size_t)j * vs + d0 + d] = q[d] * scale;
        }
    return c;
}

/* attention() over a q8_0 cache against its definition (kernels/simd.h), computed here one
 * float operation at a time: the query q_d * (1 / sqrt(hs)) quantized per group as the keys
 * are; score_j = fma chain over groups g of dot_jg * (key scale_jg * query scale_g), dot_jg
 * the integer sum of key quant x query quant over g's dimensions; softmax; out_d = fma chain
 * over j of (weight_j * value scale_jg) * quant_jd. Bit for bit, outputs and weights; and
 * within float rounding of attention in double over the numbers the quants stand for. */
static void check_attention_q8(int pos, int nq, int hs) {
    AttentionCase a = attention_case(pos, nq, hs);
    QuantCache c = quant_cache(&a);
    int n_keys = pos + nq, vs = a.block.value_stride, groups = (hs + 31) / 32;
    const float *key_scales = (const float *)(const void *)(c.keys + c.scales_at),
                *value_scales = (const float *)(const void *)(c.values + c.scales_at);
    HeadAttention q8 = a.block;
    q8.keys = c.keys, q8.values = c.values, q8.cache = CACHE_Q8_0, q8.scales_at = c.scales_at;
    attention_and_weights(&q8, a.scratch, a.weights, n_keys);
    float *want = calloc((size_t)nq * hs, sizeof(float)), *want_weights = calloc((size_t)nq * n_keys, sizeof(float));
    float *got_weights = calloc((size_t)nq * n_keys, sizeof(float)), scale = 1.0f / sqrtf((float)hs);
    double worst = 0.0;
    for (int i = 0; i < nq; i++) {
        int keys = pos + i + 1;
        float *att = want_weights + (size_t)i * n_keys, query[hs], q_scale[groups];
        int8_t qq[hs];
        for (int d = 0; d < hs; d++) query[d] = a.q[i * hs + d] * scale;
        for (int g = 0; g < groups; g++) {
            int d0 = 32 * g, m = hs - d0 < 32 ? hs - d0 : 32;
            quantize_for_cache(qq + d0, &q_scale[g], query + d0, m);
            for (int d = d0; d < d0 + m; d++) query[d] = qq[d] * q_scale[g]; /* for the double below */
        }
        for (int j = 0; j < keys; j++) {
            float s = 0.0f;
            for (int g = 0; g < groups; g++) {
                int32_t dot = 0;
                for (int d = 32 * g; d < hs && d < 32 * g + 32; d++) dot += qq[d] * c.keys[key_quad_index(hs, j, d)];
                s = fmaf((float)dot, key_scales[key_index(groups, j, g)] * q_scale[g], s);
            }
            att[j] = s;
        }
        ref_softmax(att, keys);
        /* the same attention in double over the dequantized numbers: its weights */
        double exact_weights[keys], top = -INFINITY, weight_sum = 0.0;
        for (int j = 0; j < keys; j++) {
            exact_weights[j] = 0.0;
            for (int d = 0; d < hs; d++) exact_weights[j] += (double)query[d] * a.keys[key_index(hs, j, d)];
            top = exact_weights[j] > top ? exact_weights[j] : top;
        }
        for (int j = 0; j < keys; j++) weight_sum += exact_weights[j] = exp(exact_weights[j] - top);
        for (int d = 0; d < hs; d++) {
            float acc = 0.0f;
            double exact = 0.0;
            for (int j = 0; j < keys; j++) {
                acc = fmaf(att[j] * value_scales[key_index(groups, j, d / 32)], (float)c.values[(size_t)j * vs + d], acc);
                exact += exact_weights[j] / weight_sum * a.v[(size_t)j * vs + d];
            }
            want[i * hs + d] = acc;
            worst = fmax(worst, fabs(exact - acc));
        }
        memcpy(got_weights + (size_t)i * n_keys, a.weights + (size_t)i * n_keys, sizeof(float) * keys);
    }
    char what[120];
    snprintf(what, sizeof what, "attention of %d queries from position %d, head size %d, q8_0 cache: outputs", nq, pos, hs);
    expect_bits(what, a.out, want, (size_t)nq * hs);
    expect_bits("  and its weights", got_weights, want_weights, (size_t)nq * n_keys);
    /* outputs are averages of values in [-1, 1]: float32 rounding of the ~100 operations
     * behind each stays far below 1e-4 */
    checks++;
    if (!(worst < 1e-4)) {
        failures++;
        printf("not ok %s: %.3g from attention in double over the dequantized cache\n", what, worst);
    }
    free(c.keys); free(c.values); free(want); free(want_weights); free(got_weights);
    free_attention_case(&a);
}

/* attention_heads() of two heads of a decode step (one query each, at the same position;
 * interleaved by attend()) gives each head the bits of attention() of that head alone, which
 * check_attention_bits() holds to the arithmetic; for both cache types. The second head's
 * numbers differ from the first's (its query negated and halved, its values reversed), so a
 * head that took the other's keys, values or weights would not match. */
static void check_attention_pair(int pos, int hs, CacheType cache) {
    AttentionCase a = attention_case(pos, 1, hs), c = attention_case(pos, 1, hs);
    int n_keys = pos + 1, vs = a.block.value_stride;
    size_t nk = (size_t)hs * round_up16(n_keys), nv = (size_t)n_keys * vs;
    for (int d = 0; d < hs; d++) c.q[d] = -0.5f * c.q[d];
    for (size_t i = 0; i < nv / 2; i++) { float t = c.v[i]; c.v[i] = c.v[nv - 1 - i]; c.v[nv - 1 - i] = t; }
    uint16_t *half[4] = {NULL};
    HeadAttention heads[2] = {a.block, c.block};
    QuantCache quants[2] = {{0}};
    if (cache == CACHE_Q8_0) { /* the same numbers quantized */
        AttentionCase *cases[2] = {&a, &c};
        for (int g = 0; g < 2; g++) {
            quants[g] = quant_cache(cases[g]);
            heads[g].keys = quants[g].keys, heads[g].values = quants[g].values, heads[g].cache = CACHE_Q8_0;
            heads[g].scales_at = quants[g].scales_at;
        }
    }
    if (cache == CACHE_F16) { /* the same numbers as halves (and the float copies rounded to match) */
        AttentionCase *cases[2] = {&a, &c};
        for (int g = 0; g < 2; g++) {
            half[2 * g] = malloc(sizeof(uint16_t) * nk), half[2 * g + 1] = malloc(sizeof(uint16_t) * nv);
            for (size_t i = 0; i < nk; i++) half[2 * g][i] = f16_from_f32(cases[g]->keys[i]);
            for (size_t i = 0; i < nv; i++) half[2 * g + 1][i] = f16_from_f32(cases[g]->v[i]);
            heads[g].keys = half[2 * g], heads[g].values = half[2 * g + 1], heads[g].cache = CACHE_F16;
        }
    }
    float *want = malloc(sizeof(float) * 2 * hs);
    for (int g = 0; g < 2; g++) {
        attention(&heads[g], a.scratch);
        memcpy(want + g * hs, heads[g].out, sizeof(float) * hs);
        memset(heads[g].out, 0, sizeof(float) * hs);
    }
    attention_heads(heads, 2, a.scratch);
    for (int g = 0; g < 2; g++) {
        char what[160];
        snprintf(what, sizeof what, "two heads at once, position %d, head size %d, %s cache: head %d's outputs", pos, hs,
                 cache == CACHE_F16 ? "binary16" : cache == CACHE_Q8_0 ? "q8_0" : "float32", g);
        expect_bits(what, heads[g].out, want + g * hs, (size_t)hs);
    }
    for (int i = 0; i < 4; i++) free(half[i]);
    for (int g = 0; g < 2; g++) free(quants[g].keys), free(quants[g].values);
    free(want);
    free_attention_case(&a);
    free_attention_case(&c);
}

/* The team-size choice of decode (run.c's ThreadChoice) on a made-up machine whose time per
 * token for each team size is given: ms[k] for team size k (k = 1, 2, 4, 8), from token
 * `change` on ms_after. Returns the team size in use at the end; *tokens_with[k] counts the
 * tokens run with size k. */
static int simulate_team_choice(int threads, int tokens, const double *ms, int change, const double *ms_after,
                                int tokens_with[9]) {
    ThreadChoice tc;
    thread_choice_init(&tc, threads);
    memset(tokens_with, 0, 9 * sizeof(int));
    for (int i = 0; i < tokens; i++) {
        int size = thread_choice_next(&tc);
        tokens_with[size]++;
        thread_choice_record(&tc, 1e-3 * (i < change ? ms : ms_after)[size]);
    }
    return tc.size[tc.current];
}

static void check_team_choice(void) {
    int with[9], end;
    /* idle 2 cores: 2 threads 6 ms a token, 1 thread 10 ms. Trials of 1 thread: a warm-up
     * token and one measured token each (10 ms is clearly slower: the trial ends), starting at
     * tokens 3, 68 (64 after the last trial's end), then 256 after: 325, 582, 839. So 2 trials
     * in 128 tokens, 5 in 1,000. */
    double idle[9] = {0, 10, 6}, loaded[9] = {0, 10, 20};
    end = simulate_team_choice(2, 128, idle, 1 << 30, idle, with);
    expect_near("idle: team of 2 kept", end, 2, 0);
    expect_near("idle: tokens tried with 1 thread in 128", with[1], 4, 0);
    simulate_team_choice(2, 1000, idle, 1 << 30, idle, with);
    expect_near("idle: tokens tried with 1 thread in 1000", with[1], 2 * 5, 0);
    /* one busy program beside us: 2 threads 20 ms, 1 thread 10 ms. Tokens 0-2 with 2 threads;
     * the trial at tokens 3-5 switches to 1 thread; then trials of 2 threads (2 tokens each)
     * start 16, 64, then 256 tokens after the last: at 21, 86, 343, 599, 855. */
    end = simulate_team_choice(2, 1000, loaded, 1 << 30, loaded, with);
    expect_near("loaded: team of 1 chosen", end, 1, 0);
    expect_near("loaded: tokens with 2 threads in 1000", with[2], 3 + 2 * 5, 0);
    /* the load comes at token 300 and goes at 700: the choice follows (trials at most 256 +
     * 3 tokens apart) */
    ThreadChoice tc;
    thread_choice_init(&tc, 2);
    for (int i = 0; i < 1000; i++) {
        int size = thread_choice_next(&tc);
        thread_choice_record(&tc, 1e-3 * (i < 300 || i >= 700 ? idle : loaded)[size]);
        if (i == 699) expect_near("load present: 1 thread at token 699", tc.size[tc.current], 1, 0);
    }
    expect_near("load gone: 2 threads again by token 1000", tc.size[tc.current], 2, 0);
    /* 8 threads where 4 is best (half the machine busy): sizes 8, 4, 2, 1 tried in turn */
    double half[9] = {0, 40, 21, 0, 12, 0, 0, 0, 30};
    end = simulate_team_choice(8, 1000, half, 1 << 30, half, with);
    expect_near("8 threads, 4 best: team of 4 chosen", end, 4, 0);
}

/* The repetition penalty by hand: logits (2, -2, 0, 3, 5), recent tokens 0, 1, 0, 2 and 7 (past
 * the vocabulary of 5: ignored), R = 2: id 0 once (2 / 2 = 1, not 0.5), id 1 -2 * 2 = -4, id 2
 * stays 0, ids 3 and 4 untouched. */
static void check_repeat_penalty(void) {
    Sampler s;
    build_sampler(&s, 5, 1.0, 0, 1.0, 1);
    float logits[5] = {2, -2, 0, 3, 5}, want[5] = {1, -4, 0, 3, 5};
    uint32_t recent[5] = {0, 1, 0, 2, 7};
    repeat_penalty(&s, logits, 5, recent, 5, 2.0);
    expect_bits("repetition penalty (2, -2, 0, 3, 5) over ids 0 1 0 2 7, R = 2", logits, want, 5);
    int clear = 1;
    for (int i = 0; i < 5; i++) clear &= s.seen[i] == 0;
    expect_near("repetition penalty leaves its marks cleared", clear, 1, 0);
    free_sampler(&s);
}

/* The team of kernels/parallel.h: rounds of steps each of which reads what the step before
 * wrote on other threads (a split loop, one thread's sum of everything, a loop split with
 * dynamic scheduling that reads that sum, a loop not worth splitting that reads its neighbours
 * as they change, so that it is wrong unless one thread runs it in order), run by a team of 3
 * threads, more than some machines have, so that the barrier also waits for a descheduled
 * thread, and by one thread without a team: every value must agree. */
static void team_rounds(long *a, long *total, int n, int rounds) {
    for (int r = 0; r < rounds; r++) {
        int i;
        SPLIT_FOR(1, schedule(static), (i = 0; i < n; i++), { a[i] = (a[i] * 3 + i + r + *total % 7) % 1000003; });
        ONE_THREAD({
            long sum = 0;
            for (int k = 0; k < n; k++) sum += a[k];
            *total = sum % 1000003;
        });
        SPLIT_FOR(1, schedule(dynamic, 1), (i = 0; i < n; i++), { a[i] = (a[i] + *total) % 1000003; });
        SPLIT_FOR(0, schedule(static), (i = 0; i < n; i++), { a[i] = (a[i] + a[(i + 1) % n]) % 1000003; });
    }
}

static void check_team(void) {
    enum { N = 37, ROUNDS = 500 };
    long alone[N], together[N], total_alone = 0, total_together = 0;
    for (int i = 0; i < N; i++) alone[i] = together[i] = i;
#ifdef _OPENMP
    int threads = omp_get_max_threads();
    omp_set_num_threads(1);
    team_rounds(alone, &total_alone, N, ROUNDS);
    omp_set_num_threads(3);
    IN_TEAM(team_rounds(together, &total_together, N, ROUNDS));
    omp_set_num_threads(threads);
#else
    team_rounds(alone, &total_alone, N, ROUNDS);
    IN_TEAM(team_rounds(together, &total_together, N, ROUNDS));
#endif
    int same = total_alone == total_together && total_alone != 0;
    for (int i = 0; i < N; i++) same &= alone[i] == together[i];
    checks++;
    printf("%s a team of 3 threads computes what one thread does (%d rounds of dependent steps)\n",
           same ? "ok" : "not ok", ROUNDS);
    if (!same) failures++;
}

/* kth_largest (top-k's cutoff) against the k-th value of a descending sort: random values with
 * many repeats, ascending and descending runs (every value replaces the heap's smallest, or
 * none does), k = 1, k = n and between. */
static int descending(const void *a, const void *b) {
    float x = *(const float *)a, y = *(const float *)b;
    return (x < y) - (x > y);
}

static void check_kth_largest(void) {
    enum { N = 300 };
    float x[N], sorted[N], heap[N];
    uint64_t seed = 12345;
    int ok = 1;
    for (int kind = 0; kind < 3; kind++) {
        for (int i = 0; i < N; i++)
            x[i] = kind == 0 ? (float)(int)(rng_uniform(&seed) * 40) : kind == 1 ? i * 0.5f : (N - i) * 0.25f;
        memcpy(sorted, x, sizeof x);
        qsort(sorted, N, sizeof(float), descending);
        int ks[] = {1, 2, 7, 40, 299, 300};
        for (int j = 0; j < 6; j++) ok &= kth_largest(x, N, ks[j], heap) == sorted[ks[j] - 1];
    }
    checks++;
    printf("%s k-th largest equals the k-th of a descending sort (repeats, sorted runs, k = 1..n)\n",
           ok ? "ok" : "not ok");
    if (!ok) failures++;
}

/* argmax (VW logits at a time) against its definition written out, `best = 0; best = i if
 * x[i] > x[best]`, and top-k's candidate filter (first_at_least) against a scan of x[i] >= t:
 * lengths 1 to 70 (whole vectors and tails), values with many ties, NaN at the start, inside
 * and throughout, -0 beside +0, infinities. */
static void check_argmax(void) {
    enum { N = 70 };
    float x[N];
    uint64_t seed = 777;
    int ok = 1, cases = 0;
    for (int n = 1; n <= N; n++)
        for (int kind = 0; kind < 6; kind++) {
            for (int i = 0; i < n; i++) {
                float r = (float)(int)(rng_uniform(&seed) * 7) - 3.0f; /* -3..3, ties everywhere */
                x[i] = kind == 1 && i % 5 == 2 ? NAN : kind == 2 && i == 0 ? NAN : kind == 3 ? (i % 2 ? 0.0f : -0.0f)
                     : kind == 4 && i == n / 2 ? INFINITY : kind == 5 ? NAN : r;
            }
            int best = 0;
            for (int i = 1; i < n; i++) if (x[i] > x[best]) best = i;
            ok &= argmax(x, n) == best;
            for (int from = 0; from < n; from += 3) {
                float t = (float)(int)(rng_uniform(&seed) * 9) - 4.0f;
                int want = from;
                while (want < n && !(x[want] >= t)) want++;
                ok &= first_at_least(x, from, n, t) == want;
            }
            cases++;
        }
    checks++;
    printf("%s argmax and first_at_least equal their scalar loops (%d arrays: ties, NaN, -0, inf)\n",
           ok ? "ok" : "not ok", cases);
    if (!ok) failures++;
}

/* quantize_q8 (a vector loop on x86 and aarch64) against the definition: by hand, a group
 * whose max|x| is 127 (scale 1, so each quant is x rounded half to even, NaN 0), then the
 * portable quantize_group bit for bit on groups of random values mixed with NaN, infinities,
 * -0, subnormals, huge values, all-zero groups and halves. */
static void check_quantize(void) {
    enum { GROUPS = 400 };
    static float x[GROUPS * 32], scale[GROUPS], want_scale[GROUPS];
    static int8_t q[GROUPS * 32], want[GROUPS * 32];
    const float by_hand[8] = {2.5f, -3.5f, 0.5f, 1.5f, -0.5f, 126.6f, -127.0f, NAN};
    const int8_t expected[8] = {2, -4, 0, 2, 0, 127, -127, 0};
    for (int i = 0; i < 32; i++) x[i] = i < 8 ? by_hand[i] : (float)(i - 16);
    quantize_q8(q, scale, x, 32);
    int ok = scale[0] == 1.0f;
    for (int i = 0; i < 32; i++) ok &= q[i] == (i < 8 ? expected[i] : i - 16);
    checks++;
    printf("%s quantize_q8 by hand: scale 1, halves to even, NaN to 0\n", ok ? "ok" : "not ok");
    if (!ok) failures++;

    const float special[] = {NAN, INFINITY, -INFINITY, -0.0f, 1e-40f, -3e-39f, 3e38f, -3e38f, 0.5f, -1.5f};
    uint64_t seed = 777;
    for (int g = 0; g < GROUPS; g++) {
        int kind = g % 5; /* 0: plain, 1: some special values, 2: all zero, 3: subnormal only, 4: halves of 127 */
        for (int i = 0; i < 32; i++) {
            float r = (float)(rng_uniform(&seed) * 8 - 4), *v = &x[g * 32 + i];
            *v = kind == 0 ? r : kind == 2 ? 0.0f : kind == 3 ? r * 1e-39f : kind == 4 ? (float)(int)(r * 30) + 0.5f : r;
            if (kind == 1 && rng_uniform(&seed) < 0.15) *v = special[(int)(rng_uniform(&seed) * 10)];
        }
        if (kind == 4) x[g * 32 + 5] = 127.0f; /* scale 1: every value a tie */
        quantize_group_generic(want + g * 32, want_scale + g, x + g * 32);
    }
    quantize_q8(q, scale, x, GROUPS * 32);
    ok = memcmp(q, want, sizeof q) == 0 && memcmp(scale, want_scale, sizeof scale) == 0;
    checks++;
    printf("%s quantize_q8 equals quantize_group bit for bit (NaN, infinities, subnormals, ties)\n", ok ? "ok" : "not ok");
    if (!ok) failures++;
}

/* The norms' sums (kernels/ops.h) against their definition written out in scalar code (sum16_by_definition): 16
 * partial sums in order, then the fixed tree; widths with and without a part block at the end,
 * values of mixed magnitudes so that another order gives other bits. Then layernorm and rmsnorm
 * value by value from those sums. */
static void check_norm_sums(void) {
    enum { N = 1000 };
    static float x[N], w[N], b[N], out[N];
    uint64_t seed = 4242;
    for (int i = 0; i < N; i++) {
        x[i] = (float)((rng_uniform(&seed) * 2 - 1) * (i % 7 == 0 ? 1000.0 : 1.0));
        w[i] = (float)(rng_uniform(&seed) + 0.5);
        b[i] = (float)(rng_uniform(&seed) - 0.5);
    }
    int sizes[] = {1, 3, 16, 50, 512, 768, 1000}, ok = 1, order_matters = 0;
    for (int k = 0; k < 7; k++) {
        int n = sizes[k];
        float mean = sum16_by_definition(x, n, 0, 0) / n, var = sum16_by_definition(x, n, mean, 1) / n;
        ok &= sum_of(x, n) == sum16_by_definition(x, n, 0, 0);
        ok &= sum_of_squares(x, n, mean) == sum16_by_definition(x, n, mean, 1);
        ok &= sum_of_squares(x, n, 0.0f) == sum16_by_definition(x, n, 0.0f, 1);
        float in_order = 0.0f;
        for (int i = 0; i < n; i++) in_order += x[i];
        order_matters |= in_order != sum_of(x, n);
        layernorm(out, x, w, b, 1, n, 1e-5f);
        float inv_std = 1.0f / sqrtf(var + 1e-5f);
        for (int i = 0; i < n; i++) ok &= out[i] == (x[i] - mean) * inv_std * w[i] + b[i];
        rmsnorm(out, x, w, 1, n, 1e-5f);
        float inv_rms = 1.0f / sqrtf(sum16_by_definition(x, n, 0.0f, 1) / n + 1e-5f);
        for (int i = 0; i < n; i++) ok &= out[i] == x[i] * inv_rms * w[i];
    }
    checks++;
    printf("%s norm sums: 16 partial sums then the tree, bit for bit (n = 1 .. 1000; in order differs: %s)\n",
           ok && order_matters ? "ok" : "not ok", order_matters ? "yes" : "no");
    if (!ok || !order_matters) failures++;
}

/* ---- the block formats by hand ---------------------------------------------------------- */

/* One row of one block (32 or 256 values) times activations x through matmul(), as the loader
 * prepares it; and what the format's row read gives for value i. */
static float block_product(int type, const uint8_t *block, const float *x, int n) {
    Matrix m = {.type = type, .rows = 1, .cols = n, .blocks = block}, *list[1] = {&m};
    size_t bytes = prepare_weights(list, 1, NULL);
    void *copy = malloc(bytes + 1);
    if (bytes) prepare_weights(list, 1, copy);
    MatmulScratch scratch = {0};
    matmul_scratch_init(&scratch, 1, n, 1u << type);
    float out;
    matmul(&out, x, &m, NULL, 1, 0, &scratch);
    matmul_scratch_free(&scratch);
    free(copy);
    return out;
}
static float block_value_read(int type, const uint8_t *block, int n, int i) {
    Matrix m = {.type = type, .rows = 1, .cols = n, .blocks = block};
    float row[256];
    weight_types[type].row(&m, 0, row);
    return row[i];
}

/* Activations whose quantization is exact: per group of 32, 127 first and 1 after it, so the
 * group's scale is 127 / 127 = 1 and its quants are the values: each group's quants sum to 158. */
static void exact_activations(float *x, int n) {
    for (int i = 0; i < n; i++) x[i] = i % 32 == 0 ? 127.0f : 1.0f;
}

static void check_block_formats_by_hand(void) {
    float x[256];
    exact_activations(x, 256);
    uint8_t b[256];

    /* q5_0: d = 0.5 (binary16 0x3800); qs[j] = j | (15 - j) << 4; qh = 0xAAAA5555 (bits 0, 2, ...,
     * 14 and 17, 19, ..., 31). Value j < 16: number j + 16 for even j (its bit set), j for odd, so
     * quant j or j - 16; value 16 + j: number 15 - j, + 16 for odd j: quant 15 - j or -1 - j.
     * Quants 0..15 sum to (0 + 2 + ... + 14) + (1 + 3 + ... + 15 - 8 x 16) = 56 - 64 = -8, quants
     * 16..31 to (14 + 12 + ... + 0) + (-1 - 3 - ... - 15) = 56 - 64 = -8. With activation 127 at
     * value 0 (quant 0) and 1 elsewhere: dot = -16, product -16 x 0.5 = -8. */
    memset(b, 0, sizeof b);
    b[0] = 0x00, b[1] = 0x38;
    b[2] = 0x55, b[3] = 0x55, b[4] = 0xAA, b[5] = 0xAA;
    for (int j = 0; j < 16; j++) b[6 + j] = (uint8_t)(j | (15 - j) << 4);
    expect_near("q5_0 block by hand: product", block_product(WT_Q5_0, b, x, 32), -8.0, 0);
    expect_near("q5_0 block by hand: group dot", q5_0_group_dot(b, (const int8_t[32]){127, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
                                                                 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1}), -16, 0);
    expect_near("q5_0 value 1 (quant -15) x 0.5", block_value_read(WT_Q5_0, b, 32, 1), -7.5, 0);
    expect_near("q5_0 value 16 (quant -1) x 0.5", block_value_read(WT_Q5_0, b, 32, 16), -0.5, 0);
    expect_near("q5_0 value 17 (quant 14) x 0.5", block_value_read(WT_Q5_0, b, 32, 17), 7.0, 0);

    /* q5_1: the same quant bits, d = 0.25 (0x3400), m = -1.5 (0xBE00): numbers are q5_0's quants +
     * 16, summing to -16 + 32 x 16 = 496; dot = 496 + 126 x number 0 (16) = 2512; product 2512 x
     * 0.25 + 158 x -1.5 = 628 - 237 = 391. */
    memset(b, 0, sizeof b);
    b[0] = 0x00, b[1] = 0x34, b[2] = 0x00, b[3] = 0xBE;
    b[4] = 0x55, b[5] = 0x55, b[6] = 0xAA, b[7] = 0xAA;
    for (int j = 0; j < 16; j++) b[8 + j] = (uint8_t)(j | (15 - j) << 4);
    expect_near("q5_1 block by hand: product", block_product(WT_Q5_1, b, x, 32), 391.0, 0);
    expect_near("q5_1 value 1: 1 x 0.25 - 1.5", block_value_read(WT_Q5_1, b, 32, 1), -1.25, 0);
    expect_near("q5_1 value 31: 16 x 0.25 - 1.5", block_value_read(WT_Q5_1, b, 32, 31), 2.5, 0);

    /* q4_1: d = 0.25 (0x3400), m = -1.5 (0xBE00), qs[j] = j | (15 - j) << 4: numbers 0..15, then
     * 15..0, summing to 240; dot = 240 + 126 x number 0 (0) = 240; product 240 x 0.25 + 158 x -1.5
     * = 60 - 237 = -177. */
    memset(b, 0, sizeof b);
    b[0] = 0x00, b[1] = 0x34, b[2] = 0x00, b[3] = 0xBE;
    for (int j = 0; j < 16; j++) b[4 + j] = (uint8_t)(j | (15 - j) << 4);
    expect_near("q4_1 block by hand: product", block_product(WT_Q4_1, b, x, 32), -177.0, 0);
    expect_near("q4_1 value 1: 1 x 0.25 - 1.5", block_value_read(WT_Q4_1, b, 32, 1), -1.25, 0);
    expect_near("q4_1 value 16: 15 x 0.25 - 1.5", block_value_read(WT_Q4_1, b, 32, 16), 2.25, 0);

    /* iq4_nl: d = 0.5 (0x3800), the same nibbles: each half indexes all 16 levels, which sum to
     * -495 + 401 = -94; dot = 2 x -94 + 126 x level 0 (-127) = -16190; product -16190 x 0.5 =
     * -8095. */
    memset(b, 0, sizeof b);
    b[0] = 0x00, b[1] = 0x38;
    for (int j = 0; j < 16; j++) b[2 + j] = (uint8_t)(j | (15 - j) << 4);
    expect_near("iq4_nl block by hand: product", block_product(WT_IQ4_NL, b, x, 32), -8095.0, 0);
    expect_near("iq4_nl value 1: 0.5 x -104", block_value_read(WT_IQ4_NL, b, 32, 1), -52.0, 0);
    expect_near("iq4_nl value 16: 0.5 x 113", block_value_read(WT_IQ4_NL, b, 32, 16), 56.5, 0);

    /* iq4_xs: d = 0.25 (0x3400); scales ls = 0, 63, 32, 33, 1, 62, 16, 47 (every bit of both
     * fields): scales_l = 0xF0, 0x10, 0xE1, 0xF0 (the low nibbles, two a byte), scales_h = the top
     * two bits of each, 0x9CAC; ls - 32 = -32, 31, 0, 1, -31, 30, -16, 15, summing to -2. Each
     * sub-block's nibbles as iq4_nl's, so each dot is -16190; product -16190 x 0.25 x -2 = 8095. */
    memset(b, 0, sizeof b);
    b[0] = 0x00, b[1] = 0x34, b[2] = 0xAC, b[3] = 0x9C, b[4] = 0xF0, b[5] = 0x10, b[6] = 0xE1, b[7] = 0xF0;
    for (int g = 0; g < 8; g++)
        for (int j = 0; j < 16; j++) b[8 + 16 * g + j] = (uint8_t)(j | (15 - j) << 4);
    expect_near("iq4_xs block by hand: product", block_product(WT_IQ4_XS, b, x, 256), 8095.0, 0);
    expect_near("iq4_xs value 33: 0.25 x 31 x -104", block_value_read(WT_IQ4_XS, b, 256, 33), -806.0, 0);
    expect_near("iq4_xs value 16: 0.25 x -32 x 113", block_value_read(WT_IQ4_XS, b, 256, 16), -904.0, 0);
    expect_near("iq4_xs value 240: 0.25 x 15 x 113", block_value_read(WT_IQ4_XS, b, 256, 240), 423.75, 0);

    /* q2_k: scales[i] = i | (15 - i) << 4 (scale i, min 15 - i: every bit), qs all 0xE4 (group g's
     * numbers all g % 4), d = 0.25 (0x3400), dmin = 2 (0x4000). Group g's first 16 activations sum
     * to 142, its last 16 to 16: dsum = sum of (g % 4)(142 x 2g + 16 x (2g + 1)) = 16624, msum =
     * sum of 142 (15 - 2g) + 16 (14 - 2g) = 9984; product 0.25 x 16624 - 2 x 9984 = -15812. */
    memset(b, 0, sizeof b);
    for (int i = 0; i < 16; i++) b[i] = (uint8_t)(i | (15 - i) << 4);
    memset(b + 16, 0xE4, 64);
    b[80] = 0x00, b[81] = 0x34, b[82] = 0x00, b[83] = 0x40;
    expect_near("q2_k block by hand: product", block_product(WT_Q2_K, b, x, 256), -15812.0, 0);
    expect_near("q2_k value 0: 0.25 x 0 x 0 - 2 x 15", block_value_read(WT_Q2_K, b, 256, 0), -30.0, 0);
    expect_near("q2_k value 33: 0.25 x 2 x 1 - 2 x 13", block_value_read(WT_Q2_K, b, 256, 33), -25.5, 0);
    expect_near("q2_k value 255: 0.25 x 15 x 3 - 0", block_value_read(WT_Q2_K, b, 256, 255), 11.25, 0);

    /* q3_k: 6-bit scales 0, 63, 32, 33, 1, 62, 16, 47, 5, 10, 20, 40, 48, 24, 12, 6 (every bit of
     * the 12 bytes), qs all 0xE4 (2 bits g % 4), hmask all 0x0F (groups 4-7 less 4: numbers 0, 1,
     * 2, 3, -4, -3, -2, -1), d = 0.5 (0x3800). Group g's dot = number_g ((s_2g - 32) 142 + (s_2g+1
     * - 32) 16): 0, 16, -7844, -6096, 16744, 4728, -4288, 3256, summing to 6516; product 3258. */
    static const uint8_t q3_scales[12] = {0x50, 0xAF, 0x40, 0x81, 0x01, 0x8E, 0xC0, 0x6F, 0xC0, 0x4F, 0x16, 0x2A};
    memset(b, 0, sizeof b);
    memset(b, 0x0F, 32);
    memset(b + 32, 0xE4, 64);
    memcpy(b + 96, q3_scales, 12);
    b[108] = 0x00, b[109] = 0x38;
    expect_near("q3_k block by hand: product", block_product(WT_Q3_K, b, x, 256), 3258.0, 0);
    expect_near("q3_k value 48: 0.5 x 1 x 1", block_value_read(WT_Q3_K, b, 256, 48), 0.5, 0);
    expect_near("q3_k value 128: 0.5 x -27 x -4", block_value_read(WT_Q3_K, b, 256, 128), 54.0, 0);
    expect_near("q3_k value 255: 0.5 x -26 x -1", block_value_read(WT_Q3_K, b, 256, 255), 13.0, 0);

    /* q4_k: d = 0.25 (0x3400), dmin = 2 (0x4000); scales sc = 1, 2, 4, 8, 16, 32, 63, 47 and mins
     * m = 3, 5, 9, 17, 33, 62, 0, 63, packed: bytes 0-3 sc[j] | (sc[j+4] >> 4) << 6 = 0x41, 0x82,
     * 0xC4, 0x88; bytes 4-7 m[j] | (m[j+4] >> 4) << 6 = 0x83, 0xC5, 0x09, 0xD1; bytes 8-11 sc[j+4] %
     * 16 | (m[j+4] % 16) << 4 = 0x10, 0xE0, 0x0F, 0xFF (every top bit and both 63s). qs[32c + l] = l
     * % 16 | (15 - l % 16) << 4: even sub-blocks hold numbers l % 16, odd ones 15 - l % 16. Dot of
     * an even one: 2 x (0 + ... + 15) + 126 x 0 = 240; of an odd one 240 + 126 x 15 = 2130.
     * dsum = 240 x (1 + 4 + 16 + 63) + 2130 x (2 + 8 + 32 + 47) = 20160 + 189570 = 209730; msum =
     * 158 x (3 + 5 + 9 + 17 + 33 + 62 + 0 + 63) = 158 x 192 = 30336; product 0.25 x 209730 - 2 x
     * 30336 = 52432.5 - 60672 = -8239.5. */
    static const uint8_t k_scale_bytes[12] = {0x41, 0x82, 0xC4, 0x88, 0x83, 0xC5, 0x09, 0xD1, 0x10, 0xE0, 0x0F, 0xFF};
    memset(b, 0, sizeof b);
    b[0] = 0x00, b[1] = 0x34, b[2] = 0x00, b[3] = 0x40;
    memcpy(b + 4, k_scale_bytes, 12);
    for (int i = 0; i < 128; i++) b[16 + i] = (uint8_t)(i % 16 | (15 - i % 16) << 4);
    expect_near("q4_k block by hand (6-bit scales and mins using every bit): product", block_product(WT_Q4_K, b, x, 256), -8239.5, 0);
    uint8_t sc[8], mn[8];
    k_scales(b + 4, sc, mn);
    static const uint8_t want_sc[8] = {1, 2, 4, 8, 16, 32, 63, 47}, want_m[8] = {3, 5, 9, 17, 33, 62, 0, 63};
    expect_near("q4_k scales and mins unpacked", memcmp(sc, want_sc, 8) == 0 && memcmp(mn, want_m, 8) == 0, 1, 0);
    /* value 32: sub-block 1, number 15: 0.25 x 2 x 15 - 2 x 5 = -2.5; value 200: sub-block 6,
     * number 8: 0.25 x 63 x 8 - 0 = 126; value 255: number 0, - 2 x 63 = -126 */
    expect_near("q4_k value 32", block_value_read(WT_Q4_K, b, 256, 32), -2.5, 0);
    expect_near("q4_k value 200", block_value_read(WT_Q4_K, b, 256, 200), 126.0, 0);
    expect_near("q4_k value 255", block_value_read(WT_Q4_K, b, 256, 255), -126.0, 0);

    /* q5_k: q4_k's scales and nibbles, qh[l] = 0x55 for l < 16 (the fifth bit of the even
     * sub-blocks' first 16), 0xAA after (the odd ones' last 16). Even sub-block numbers: l + 16
     * for l < 16, l - 16 after; dot = (120 + 256) + 120 + 126 x 16 = 2512. Odd: 15 - l, then 47 -
     * l; dot = 120 + 376 + 126 x 15 = 2386. dsum = 2512 x 84 + 2386 x 89 = 423362; product 0.25 x
     * 423362 - 60672 = 45168.5. */
    memset(b, 0, sizeof b);
    b[0] = 0x00, b[1] = 0x34, b[2] = 0x00, b[3] = 0x40;
    memcpy(b + 4, k_scale_bytes, 12);
    for (int l = 0; l < 32; l++) b[16 + l] = l < 16 ? 0x55 : 0xAA;
    for (int i = 0; i < 128; i++) b[48 + i] = (uint8_t)(i % 16 | (15 - i % 16) << 4);
    expect_near("q5_k block by hand: product", block_product(WT_Q5_K, b, x, 256), 45168.5, 0);
    /* value 0: number 16: 0.25 x 1 x 16 - 2 x 3 = -2; value 63: sub-block 1, l = 31, number 16:
     * 0.25 x 2 x 16 - 10 = -2 */
    expect_near("q5_k value 0", block_value_read(WT_Q5_K, b, 256, 0), -2.0, 0);
    expect_near("q5_k value 63", block_value_read(WT_Q5_K, b, 256, 63), -2.0, 0);

    /* q6_k: ql all 0x21 (low nibble 1, high 2), qh all 0xE4 (bits 2k, 2k+1 = k): value 128h + 32k
     * + l has number 1 + 16k for k < 2 and 2 + 16k after: quants -31, -15, 2, 18 for k = 0..3;
     * scales 127, -128, 1, -1, 64, -64, 2, 3, 5, 7, 11, 13, -17, 19, -23, 100; d = 0.125 (0x3000).
     * Group g (k = g % 4) has activations summing to 142 over its first 16 and 16 over its last:
     * dot_g = quant_k x (142 sc_2g + 16 sc_2g+1): -31 x 15986, -15 x 126, 2 x 8064, 18 x 332,
     * -31 x 822, -15 x 1770, 2 x -2110, 18 x -1666 = -495566 - 1890 + 16128 + 5976 - 25482 - 26550
     * - 4220 - 29988 = -561592; product 0.125 x -561592 = -70199. */
    static const int8_t q6_scales[16] = {127, -128, 1, -1, 64, -64, 2, 3, 5, 7, 11, 13, -17, 19, -23, 100};
    memset(b, 0, sizeof b);
    memset(b, 0x21, 128);
    memset(b + 128, 0xE4, 64);
    memcpy(b + 192, q6_scales, 16);
    b[208] = 0x00, b[209] = 0x30;
    expect_near("q6_k block by hand (scales 127 and -128): product", block_product(WT_Q6_K, b, x, 256), -70199.0, 0);
    /* value 0: 0.125 x 127 x -31 = -492.125; value 16: 0.125 x -128 x -31 = 496; value 200 (h 1,
     * k 2, sub-block 12): 0.125 x -17 x 2 = -4.25 */
    expect_near("q6_k value 0", block_value_read(WT_Q6_K, b, 256, 0), -492.125, 0);
    expect_near("q6_k value 16", block_value_read(WT_Q6_K, b, 256, 16), 496.0, 0);
    expect_near("q6_k value 200", block_value_read(WT_Q6_K, b, 256, 200), -4.25, 0);

    /* f16 and bf16 rows read: 0x3C00 = 1, 0xC000 = -2, 0x0001 = 2^-24 (subnormal); bfloat16
     * 0x3F80 = 1, 0xC040 = -3, 0x7F7F = 3.3895314e38 (its largest finite) */
    uint16_t halves[3] = {0x3C00, 0xC000, 0x0001}, brain[3] = {0x3F80, 0xC040, 0x7F7F};
    float row[3];
    Matrix hm = {.type = WT_F16, .rows = 1, .cols = 3, .halves = halves};
    weight_types[WT_F16].row(&hm, 0, row);
    expect_near("f16 row read by hand", row[0] == 1.0f && row[1] == -2.0f && row[2] == 0x1p-24f, 1, 0);
    hm = (Matrix){.type = WT_BF16, .rows = 1, .cols = 3, .halves = brain};
    weight_types[WT_BF16].row(&hm, 0, row);
    expect_near("bf16 row read by hand", row[0] == 1.0f && row[1] == -3.0f && row[2] == 3.3895314e38f, 1, 0);
    printf("# kernels: %s\n", kernels_description());
}

int main(void) {
    check_norm_sums();
    check_quantize();
    check_team_choice();
    check_team();
    check_repeat_penalty();
    check_kth_largest();
    check_argmax();

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

    /* The attention weights of that query over keys [k, 0] are softmax([0.606, 0]). Keys are
     * stored in blocks of 16 positions, transposed (dimension d of position j at d * 16 + j, in
     * the first block); values 16 floats apart. Position 2 lies in the
     * future of a query at position 1: its key and value are NaN, which would poison any sum
     * they entered, and its weight is never reported. */
    float keys[3 * 16], values[3 * 16], out[3], weights[3] = {0, 0, -7.0f}, scratch[2 * 16 * 16 + 64];
    for (int i = 0; i < 3 * 16; i++) keys[i] = values[i] = NAN;
    for (int d = 0; d < 3; d++) {
        keys[d * 16 + 0] = k[d];
        keys[d * 16 + 1] = 0.0f;
        values[0 * 16 + d] = (float)(1 + d);
        values[1 * 16 + d] = (float)(4 + d);
    }
    HeadAttention block = {.query = q, .query_stride = 3, .keys = keys, .values = values,
                            .value_stride = 16, .out = out, .out_stride = 3, .pos = 1, .nq = 1, .head_size = 3, .scale = 1.0f / sqrtf(3.0f)};
    attention_and_weights(&block, scratch, weights, 3);
    expect_near("attention weight of key 0", weights[0], 1 / (1 + exp(-0.606218)), 1e-5);
    expect_near("attention weight of key 1", weights[1], 1 / (1 + exp(0.606218)), 1e-5);
    expect_near("output = weighted sum of values", out[0], weights[0] * 1 + weights[1] * 4, 1e-6);
    checks++;
    int masked_ok = isfinite(out[0]) && isfinite(out[1]) && isfinite(out[2]) && weights[2] == -7.0f;
    printf("%s masked position never enters the sums, its weight never reported\n", masked_ok ? "ok" : "not ok");
    if (!masked_ok) failures++;
    /* pos = 0: the only visible key gets weight exactly 1 */
    block.pos = 0;
    attention_and_weights(&block, scratch, weights, 3);
    expect_near("single visible key has weight 1", weights[0], 1.0, 0.0);
    /* a window of 1 at position 1: key 0 falls outside (weight exactly 0), key 1 gets all */
    block.pos = 1, block.window = 1;
    attention_and_weights(&block, scratch, weights, 3);
    expect_near("a key before the window has weight 0", weights[0], 0.0, 0.0);
    expect_near("the window's one key has weight 1", weights[1], 1.0, 0.0);
    expect_near("output = the window's value", out[0], 4.0, 0.0);
    /* scores capped at 0.5: 0.606218 becomes 0.5 tanh(0.606218 / 0.5) */
    block.window = 0, block.softcap = 0.5f;
    attention_and_weights(&block, scratch, weights, 3);
    expect_near("capped score's weight", weights[0], 1 / (1 + exp(-0.5 * tanh(0.606218 / 0.5))), 1e-5);

    /* GELU at 1: tanh form 0.841192, erf form 0.841345 (x * Phi(x)) */
    float g[2] = {1.0f, 1.0f};
    gelu(g, 1, GELU_TANH);
    gelu(g + 1, 1, GELU_ERF);
    expect_near("gelu_tanh(1)", g[0], 0.841192, 1e-5);
    expect_near("gelu_erf(1)", g[1], 0.841345, 1e-5);

    /* GELU over a range against tanh and erf in double */
    enum { NG = 4001 };
    static float gx[NG];
    for (int i = 0; i < NG; i++) gx[i] = -20.0f + 40.0f * i / (NG - 1);
    for (int kind = GELU_TANH; kind <= GELU_ERF; kind++) {
        float gy[NG];
        memcpy(gy, gx, sizeof gy);
        gelu(gy, NG, kind);
        double worst = 0.0;
        for (int i = 0; i < NG; i++) {
            double v = gx[i], want = kind == GELU_TANH ? 0.5 * v * (1.0 + tanh(0.7978845608028654 * (v + 0.044715 * v * v * v)))
                                                       : 0.5 * v * (1.0 + erf(v / sqrt(2.0)));
            double err = fabs(gy[i] - want) / (1.0 + fabs(want));
            if (err > worst) worst = err;
        }
        expect_near(kind == GELU_TANH ? "gelu_tanh on [-20, 20], worst |error| / (1 + |gelu|)"
                                      : "gelu_erf on [-20, 20], worst |error| / (1 + |gelu|)", worst, 0.0, 1e-6);
    }

    /* LayerNorm of [1, 2, 3]: mean 2, variance 2/3 -> [-1.2247, 0, 1.2247] */
    float x[3] = {1, 2, 3}, w[3] = {1, 1, 1}, y[3] = {0};
    layernorm(y, x, w, NULL, 1, 3, 0.0f);
    expect_near("layernorm([1,2,3])[0]", y[0], -1.224745, 1e-5);
    expect_near("layernorm([1,2,3])[2]", y[2], 1.224745, 1e-5);

    /* RMSNorm of [1, 2, 3, 4] with weights [1, 1, 2, 0.5]: mean of squares (1 + 4 + 9 + 16) / 4 =
     * 7.5, rms = sqrt(7.5) = 2.738613 -> [1, 2, 3 x 2, 4 x 0.5] / 2.738613 = [0.365148,
     * 0.730297, 2.190890, 0.730297] */
    float r_in[4] = {1, 2, 3, 4}, r_w[4] = {1, 1, 2, 0.5f}, r_out[4] = {0};
    rmsnorm(r_out, r_in, r_w, 1, 4, 0.0f);
    expect_near("rmsnorm([1,2,3,4])[0]", r_out[0], 0.365148, 1e-6);
    expect_near("rmsnorm([1,2,3,4])[1]", r_out[1], 0.730297, 1e-6);
    expect_near("rmsnorm([1,2,3,4])[2]", r_out[2], 2.190890, 1e-6);
    expect_near("rmsnorm([1,2,3,4])[3]", r_out[3], 0.730297, 1e-6);

    /* One rotary rotation: a 4-dimensional head x = [1, 2, 3, 4], theta 10000: pair 0 (dims 0, 1)
     * turns at f_0 = 10000^(-0/4) = 1, pair 1 (dims 2, 3) at f_1 = 10000^(-2/4) = 0.01.
     * Position 1: angles 1 and 0.01. cos 1 = 0.540302, sin 1 = 0.841471: (1 x 0.540302 - 2 x
     *   0.841471, 1 x 0.841471 + 2 x 0.540302) = (-1.142640, 1.922076); cos 0.01 = 0.999950,
     *   sin 0.01 = 0.010000: (3 x 0.999950 - 4 x 0.010000, 3 x 0.010000 + 4 x 0.999950) =
     *   (2.959851, 4.029800).
     * Position 2: angles 2 and 0.02. cos 2 = -0.416147, sin 2 = 0.909297: (-0.416147 - 1.818595,
     *   0.909297 - 0.832294) = (-2.234742, 0.077004); cos 0.02 = 0.999800, sin 0.02 = 0.019999:
     *   (2.999400 - 0.079995, 0.059996 + 3.999200) = (2.919405, 4.059196). */
    float *rope_cos, *rope_sin;
    Error rope_error;
    if (!rotary_tables(&rope_cos, &rope_sin, 3, 4, 10000.0, NULL, 1.0, &rope_error)) die("%s", rope_error.message);
    static const float rope_want[2][4] = {{-1.142640f, 1.922076f, 2.959851f, 4.029800f},
                                          {-2.234742f, 0.077004f, 2.919405f, 4.059196f}};
    for (int pos = 1; pos <= 2; pos++) {
        float head[4] = {1, 2, 3, 4};
        rotary(head, 1, 4, 4, rope_cos + pos * 2, rope_sin + pos * 2);
        for (int d = 0; d < 4; d++) {
            char what[60];
            snprintf(what, sizeof what, "rotary [1,2,3,4] at position %d, dimension %d", pos, d);
            expect_near(what, head[d], rope_want[pos - 1][d], 2e-6);
        }
    }
    expect_near("rotary position 0 leaves the head as it is", rope_cos[0] == 1.0f && rope_sin[1] == 0.0f, 1, 0);
    free(rope_cos);
    free(rope_sin);

    /* SwiGLU: silu(g) * u with silu(g) = g / (1 + e^-g): gates [1, -2, 0], ups [2, 3, 5] ->
     * [1 / (1 + 0.367879) x 2, -2 / (1 + 7.389056) x 3, 0] = [1.462117, -0.715218, 0] */
    float up[3] = {2, 3, 5}, gate3[3] = {1, -2, 0};
    swiglu(up, gate3, 3);
    expect_near("swiglu(gate 1, up 2)", up[0], 1.462117, 1e-6);
    expect_near("swiglu(gate -2, up 3)", up[1], -0.715218, 1e-6);
    expect_near("swiglu(gate 0, up 5)", up[2], 0.0, 0.0);

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
        check_matmul_bits(shapes[i][0], shapes[i][1], shapes[i][2], WT_F32, 0);
        check_matmul_bits(shapes[i][0], shapes[i][1], shapes[i][2], WT_Q8_0, 0);
        check_matmul_bits(shapes[i][0], shapes[i][1], shapes[i][2], WT_Q8_0, 1);
        check_matmul(shapes[i][0], shapes[i][1], shapes[i][2], WT_Q4_0, 1);
        check_matmul_bits(shapes[i][0], shapes[i][1], shapes[i][2], WT_Q4_0, 1);
    }
#ifdef VNNI512_KERNELS
    /* the signed copy's decode kernel, which AMX machines run beside their tiles (prefill needs
     * the tiles: one token only) */
    forced_q8_packing = Q8_PACK_SIGNED;
    for (int i = 0; i < 3; i++) {
        check_matmul(shapes[i][0], shapes[i][1], 1, WT_Q8_0, 1);
        check_matmul_bits(shapes[i][0], shapes[i][1], 1, WT_Q8_0, 1);
    }
    forced_q8_packing = -1;
#endif
    /* q4_0 quants and the group dot by hand: bytes 0x0F (quant 7, then -8 in the high half),
     * activations 1..32: 7 x (1 + ... + 16) - 8 x (17 + ... + 32) = 952 - 3136 = -2184 */
    uint8_t g4[16];
    int8_t x32[32];
    for (int i = 0; i < 16; i++) g4[i] = 0x0F;
    for (int i = 0; i < 32; i++) x32[i] = (int8_t)(i + 1);
    expect_near("q4_0 quant 0 of byte 0x0F", q4_quant(g4, 0), 7, 0);
    expect_near("q4_0 quant 16 of byte 0x0F", q4_quant(g4, 16), -8, 0);
    expect_near("q4_0 group dot by hand", q4_0_group_dot(g4, x32), -2184, 0);
    expect_near("q4_0 group dot by hand, portable", q4_0_group_dot_generic(g4, x32), -2184, 0);
    check_matmul(50, 30, 45, WT_F32, 0); /* float32 takes any width */
    check_matmul_bits(50, 30, 45, WT_F32, 0);

    /* the block formats: q5_0 and q5_1 as q4_0's shapes; the k formats rows of 1 to 3 super-blocks,
     * rows that leave part panels, part tiles of tokens, one token; f16 and bf16 as float32 */
    check_block_formats_by_hand();
    for (int i = 0; i < 5; i++)
        for (int type = WT_Q5_0; type <= WT_BF16; type++)
            if (type == WT_Q5_0 || type == WT_Q5_1 || is_half_type(type)) {
                check_matmul(shapes[i][0], shapes[i][1], shapes[i][2], type, 1);
                check_matmul_bits(shapes[i][0], shapes[i][1], shapes[i][2], type, 1);
            }
    int kshapes[][3] = {{256, 40, 37}, {768, 48, 45}, {512, 30, 33}, {256, 64, 100}, {768, 17, 1}};
    for (int i = 0; i < 5; i++)
        for (int type = WT_Q4_K; type <= WT_Q5_K; type++) {
            check_matmul(kshapes[i][0], kshapes[i][1], kshapes[i][2], type, 1);
            check_matmul_bits(kshapes[i][0], kshapes[i][1], kshapes[i][2], type, 1);
        }
    for (int type = WT_F16; type <= WT_BF16; type++) {
        check_matmul(50, 30, 45, type, 0);
        check_matmul_bits(50, 30, 45, type, 0);
    }
    for (int i = 0; i < 5; i++) /* q4_1, iq4_nl as q5_1's shapes; iq4_xs, q2_k, q3_k as the k formats' */
        for (int type = WT_Q4_1; type <= WT_Q3_K; type++) {
            int (*shape)[3] = type >= WT_IQ4_XS ? kshapes : shapes;
            check_matmul(shape[i][0], shape[i][1], shape[i][2], type, 1);
            check_matmul_bits(shape[i][0], shape[i][1], shape[i][2], type, 1);
        }

    /* attention: one query (decode), a block of 16 and one of 20 (a part block after a whole
     * one) from past position 0, head sizes that do and do not fit the 16-lane path; queries
     * past 64 keys, whose scores take four vectors of keys at a time and then the rest */
    int cases[][3] = {{0, 1, 64}, {37, 1, 48}, {0, 16, 64}, {5, 20, 32}, {9, 7, 36}, {70, 16, 64},
                      {150, 1, 64}, {90, 3, 40}};
    for (int i = 0; i < 8; i++) {
        check_attention(cases[i][0], cases[i][1], cases[i][2]);
        check_attention_bits(cases[i][0], cases[i][1], cases[i][2]);
        check_attention_f16(cases[i][0], cases[i][1], cases[i][2]);
        check_attention_q8(cases[i][0], cases[i][1], cases[i][2]);
    }
    /* two heads of a decode step at once: before and past 64 keys, head sizes of one and of
     * several vectors, and one that ends in a part vector */
    int pairs[][2] = {{0, 64}, {37, 48}, {150, 64}, {90, 40}, {300, 128}};
    for (int i = 0; i < 5; i++) {
        check_attention_pair(pairs[i][0], pairs[i][1], CACHE_F32);
        check_attention_pair(pairs[i][0], pairs[i][1], CACHE_F16);
        check_attention_pair(pairs[i][0], pairs[i][1], CACHE_Q8_0);
    }
    check_f16_by_hand();
    check_f16_conversions();
    check_elementwise_bits();

    printf("%d passed, %d failed\n", checks - failures, failures);
    return failures ? 1 : 0;
}
