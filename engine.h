/* engine.h: the model built from a weight file and run: the run-time state (every activation
 * buffer and the key/value cache), the forward pass, and the Decoder the sequences of
 * sequence.h use. What the command line (run.c), a test or a server holds to generate.
 *
 *   build_transformer()  the file mapped, checked and made ready to run n_seq sequences
 *   forward()            T tokens, each at its position in its sequence, through the model
 *   decoder_of()         the model as sequences step it
 *   free_transformer()   everything built, given back */
#ifndef ENGINE_H
#define ENGINE_H

#include "util.h"

#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kernels/matmul.h"
#include "kernels/ops.h"
#include "kv_cache.h"
#include "load.h"
#include "model.h"
#include "sequence.h"
#include "threads.h"
#include "tokenizer.h"

/* ---------------------------------------------------------------------------------------
 * The run-time state: every activation buffer and the key/value cache, each allocated once. */

/* Prompts go through forward() in blocks of up to PREFILL_BLOCK tokens: enough to keep the
 * matrix kernels arithmetic-bound, small enough that the buffers stay modest. */
#define PREFILL_BLOCK 128

/* Positions a run holds in its key/value cache unless -c/--ctx says otherwise: the model's
 * context, but at most this many. The cache of Llama 3.2 1B's 131072 positions would be 4.3 GB
 * of binary16 (16 layers x 8 key/value heads x 64 x 131072 x 2 x 2 bytes), allocated and
 * touched before the first pass, for positions few prompts reach (generation holds only the
 * positions its tokens take, but --perplexity's windows are the whole context). */
#define DEFAULT_CONTEXT 4096

typedef struct {
    int block;       /* most tokens of a prompt one forward() call takes: min(n_ctx, PREFILL_BLOCK) */
    int rows;        /* most tokens a forward() call takes: max(block, n_seq), n_seq = the
                        sequences with a key/value cache (--samples decoded together) */
    float *x;        /* (rows, n_embd) the residual stream */
    float *xb;       /* (rows, n_embd) the norm's output */
    float *heads;    /* (rows, n_head head_size) the attention heads' outputs, side by side */
    float *xb2;      /* (rows, n_embd) output of a projection, added to the residual */
    float *qkv;      /* (rows, qkv_dim) query, key and value of each position */
    float *hb;       /* (rows, n_hidden) feed-forward hidden activations */
    float *hb2;      /* (rows, n_hidden) SwiGLU's gate */
    float *logits;   /* (rows, vocab_size) scores of the next token */
    KVCache kv;      /* (n_seq, ...) keys and values of every position so far (kv_cache.h), built
                        by reserve_kv_cache() */
    CacheType cache_type; /* its numbers (--cache) */
    int n_seq;
    double buffer_bytes; /* per sequence, every buffer above but the cache (the memory check) */
    AttentionScratch att; /* attention's scratch, and the weights kept for --attention */
    MatmulScratch mm; /* matmul()'s buffers, sized for rows tokens */
} RunState;

typedef struct {
    Config config;              /* n_ctx: this run's context (at most the file's, see file_n_ctx) */
    int file_n_ctx;             /* the context the file's header gives */
    TransformerWeights weights; /* pointers into the mapped file */
    Tokenizer tokenizer;
    RunState state;
    ModelFile file;
    void *weights_copy; /* owned: weight matrices rearranged for the kernels (prepare_weights), or NULL */
    double load_seconds; /* mapping, checking and preparing the file */
    char note[160];      /* what the caller may want to tell (the context held is shorter), or empty */
} Transformer;

/* The memory this machine has, in bytes (0 if unknown). */
static double physical_memory(void) {
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    return pages > 0 && page > 0 ? (double)pages * (double)page : 0.0;
}

/* n_seq sequences (--samples) whose caches and buffers (per_seq bytes each) would not fit beside
 * the weights in this machine's memory are refused, before anything is allocated for them. */
static int check_samples_fit(int n_seq, double per_seq, size_t file_size, Error *e) {
    double memory = physical_memory();
    if (n_seq > 1 && memory > 0 && (double)file_size + n_seq * per_seq > memory)
        return fail(e, "--samples %d needs %.3g GB for the samples' key/value caches and buffers, more than this "
                    "machine's %.3g GB of memory", n_seq, n_seq * per_seq / 1e9, memory / 1e9);
    return 1;
}

/* Buffers for forward() for n_seq sequences; their key/value caches come later
 * (reserve_kv_cache), once a run knows how many positions it needs. */
static int build_state(RunState *s, const Config *c, int n_seq, CacheType cache_type, size_t file_size,
                       unsigned product_types, Error *e) {
    size_t C = (size_t)c->n_embd, H = (size_t)c->n_hidden, Q = (size_t)c->n_head * (size_t)c->head_size, B;
    s->block = c->n_ctx < PREFILL_BLOCK ? c->n_ctx : PREFILL_BLOCK;
    s->rows = max_int(s->block, n_seq);
    s->att.slice = attention_scratch_floats(c->n_ctx, c->head_size);
    s->cache_type = cache_type;
    s->n_seq = n_seq;
    /* per sequence: a row of every buffer, its attention scratch and its sampler */
    s->buffer_bytes = 4.0 * (3 * C + Q + (size_t)c->qkv_dim + 2 * H + (size_t)c->vocab_size) + C +
                      4.0 * (double)c->n_head * (double)s->att.slice + (double)sampler_bytes(c->vocab_size);
    TRY(check_samples_fit(n_seq, s->buffer_bytes, file_size, e));
    B = (size_t)s->rows;
    if (!(s->x = alloc_zeroed(B * C * sizeof(float), "x", e)) || !(s->xb = alloc_zeroed(B * C * sizeof(float), "xb", e)) ||
        !(s->xb2 = alloc_zeroed(B * C * sizeof(float), "xb2", e)) ||
        !(s->heads = alloc_zeroed(B * Q * sizeof(float), "the heads' outputs", e)) ||
        !(s->qkv = alloc_zeroed(B * (size_t)c->qkv_dim * sizeof(float), "qkv", e)) ||
        !(s->hb = alloc_zeroed(B * H * sizeof(float), "hb", e)) ||
        (c->ffn != FFN_GELU && !(s->hb2 = alloc_zeroed(B * H * sizeof(float), "hb2", e))) ||
        !(s->logits = alloc_zeroed(B * (size_t)c->vocab_size * sizeof(float), "logits", e)) ||
        !(s->att.buffer = alloc_zeroed(attention_jobs(s->block, n_seq, c->n_head) * s->att.slice * sizeof(float),
                                       "attention", e)))
        return 0;
    size_t widest = C > H ? C : H; /* a product's input row */
    if (!matmul_scratch_init(&s->mm, s->rows, (int)(widest > Q ? widest : Q), product_types) ||
        (c->qkv_apart && !matmul_scratch_parts(&s->mm, s->rows, c->n_head * c->head_size)))
        return fail(e, "out of memory for the matrix products' buffers");
    return 1;
}

static void free_state(RunState *s) {
    free(s->x); free(s->xb); free(s->xb2); free(s->heads); free(s->qkv); free(s->hb); free(s->hb2); free(s->logits);
    free(s->att.buffer);
    matmul_scratch_free(&s->mm);
    free_kv_cache(&s->kv);
}

/* The key/value caches of the state's sequences, for positions 0..positions-1 of each (at most
 * the run's context), built once: by generate() for the positions its tokens will take (a short
 * run of a long-context model, or many samples, then holds and touches far less than the whole
 * context), or else by the first forward() pass, for the whole context. */
static int reserve_kv_cache(Transformer *t, long positions, Error *e) {
    const Config *c = &t->config;
    RunState *s = &t->state;
    if (s->kv.keys) return 1;
    int n = (int)(positions < c->n_ctx ? positions : c->n_ctx);
    TRY(check_samples_fit(s->n_seq, s->buffer_bytes + 2 * kv_cache_bytes(c->n_layer, c->n_kv_head, c->head_size, n,
                                                                          s->cache_type), t->file.size, e));
    if (build_kv_cache(&s->kv, c->n_layer, c->n_kv_head, c->head_size, n, s->n_seq, s->cache_type, e)) return 1;
    free_kv_cache(&s->kv);
    return 0;
}

/* Validate a whole model file held in memory (load.h). Also the entry point of the loader's
 * fuzz target. */
static int load_model(Transformer *t, const uint8_t *data, size_t size, Error *e) {
    return load_model_file(&t->file, data, size, &t->config, &t->weights, &t->tokenizer, e);
}

/* A matrix's pages of the mapped file given back (read again from the file if touched). */
static void release_matrix_pages(const Matrix *m) {
    ByteRange ranges[2];
    int n = weight_type((uint32_t)m->type)->ranges(m, ranges);
    for (int k = 0; k < n; k++) release_mapped(ranges[k].at, ranges[k].bytes);
}

/* Each rotary layer's tables, one pair per base (a layer of the header's base with the file's
 * rope_freqs, when it has them), shared by the layers of that base. */
static int layer_rotary_tables(const Config *c, TransformerWeights *w, Error *e) {
    if (!(w->rope_tables = alloc_zeroed(2 * (size_t)c->n_layer * sizeof(float *), "rotary tables", e))) return 0;
    for (int l = 0; l < c->n_layer; l++) {
        LayerWeights *L = &w->layer[l];
        if (!L->rotary) continue;
        for (int k = 0; k < l && !L->rope_cos; k++)
            if (w->layer[k].rotary && w->layer[k].rope_theta == L->rope_theta)
                L->rope_cos = w->layer[k].rope_cos, L->rope_sin = w->layer[k].rope_sin;
        if (L->rope_cos) continue;
        /* LongRoPE: the long frequencies for a context past the one the short ones serve */
        const float *file_freqs = c->rope_long && c->n_ctx > c->rope_original ? w->rope_freqs_long : w->rope_freqs;
        const float *freqs = L->rope_theta == c->rope_theta ? file_freqs : NULL;
        float **pair = &w->rope_tables[w->n_rope_tables];
        TRY(rotary_tables(&pair[0], &pair[1], c->n_ctx, c->rotary_dims, L->rope_theta, freqs, c->rope_scale, e));
        w->n_rope_tables += 2;
        L->rope_cos = pair[0], L->rope_sin = pair[1];
    }
    return 1;
}

/* What generation needs beyond the file: the sinusoid or rotary tables, the run-time buffers
 * and, for the kernels that want it, the weight matrices rearranged once (kernels/matmul.h's
 * prepare_weights). */
static int build_run(Transformer *t, int n_seq, CacheType cache, Error *e) {
    const Config *c = &t->config;
    TransformerWeights *w = &t->weights;
    if (c->pos_kind == POS_SINUSOIDAL && !(w->wpe = w->sinusoid = sinusoid_table(c->n_ctx, c->n_embd, e))) return 0;
    if (c->pos_kind == POS_ROTARY) TRY(layer_rotary_tables(c, w, e));
    Matrix **matrices = alloc_zeroed(((size_t)MATRICES_PER_LAYER * c->n_layer + 1) * sizeof(Matrix *), "matrix list", e);
    if (!matrices) return 0;
    int count = product_matrices(c, w, matrices);
    unsigned types = 0; /* the weight types of the products, each with its buffers */
    for (int i = 0; i < count; i++) types |= 1u << matrices[i]->type;
    size_t bytes = prepare_weights(matrices, count, NULL), at = 0, *sizes = NULL;
    if (!build_state(&t->state, c, n_seq, cache, t->file.size, types, e) ||
        (bytes && !(t->weights_copy = alloc_uninit(bytes, "the rearranged copy of the weights", e))) || /* every byte written */
        !(sizes = alloc_zeroed((size_t)count * sizeof *sizes, "matrix sizes", e))) {
        free(matrices);
        return 0;
    }
    /* The weights are never held twice: the file's pages of every matrix the kernels read from a
     * copy are given back first (the loader's checks read them all), and the matrices are copied
     * largest first, each one's pages coming back while it is copied and leaving after. So at
     * most the copies made so far, one matrix's pages and its copy are resident: about the
     * weights and a small matrix, not the weights and the largest (a tied embedding, which reads
     * its rows back from the file, a few pages a token). */
    for (int i = 0; i < count; i++) {
        sizes[i] = prepare_weights(&matrices[i], 1, NULL);
        if (sizes[i] && t->file.mapped) release_matrix_pages(matrices[i]);
    }
    for (int done = 0; done < count && bytes; done++) {
        int next = 0; /* the largest matrix not yet copied (a copied one's size is set to 0) */
        for (int i = 1; i < count; i++) if (sizes[i] > sizes[next]) next = i;
        if (!sizes[next]) break;
        at += prepare_weights(&matrices[next], 1, (char *)t->weights_copy + at);
        if (t->file.mapped) release_matrix_pages(matrices[next]);
        sizes[next] = 0;
    }
    free(sizes);
    free(matrices);
    return 1;
}

static void free_transformer(Transformer *t);

/* The run's context: ctx positions (-c/--ctx), or 0 for the file's up to DEFAULT_CONTEXT (the
 * transformer's note then says so). Every position past it is one the run never uses, so the
 * weights load as they are. */
static int limit_context(Transformer *t, long ctx, Error *e) {
    Config *c = &t->config;
    t->file_n_ctx = c->n_ctx;
    if (ctx > c->n_ctx) return fail(e, "-c/--ctx must be between 1 and the model's context of %d, got %ld", c->n_ctx, ctx);
    if (ctx == 0 && c->n_ctx > DEFAULT_CONTEXT) {
        snprintf(t->note, sizeof t->note, "the model's context is %d positions; this run holds %d (-c/--ctx to change)",
                 c->n_ctx, DEFAULT_CONTEXT);
        ctx = DEFAULT_CONTEXT;
    }
    if (ctx > 0) c->n_ctx = (int)ctx;
    return 1;
}

/* The model at path, ready to run n_seq sequences at once (1, or --samples) over a context of
 * ctx positions (0: the default, limit_context()), with a key/value cache of that type. 0 with
 * the error when the file or this machine will not do; *t is then empty, everything given back. */
static int build_transformer(Transformer *t, const char *path, int n_seq, long ctx, CacheType cache, Error *e) {
    memset(t, 0, sizeof *t);
    double start = now_seconds();
    if (!map_model_file(&t->file, path, e) || !load_model(t, t->file.data, t->file.size, e) ||
        (t->config.n_layer > 0 && (!limit_context(t, ctx, e) || !build_run(t, n_seq, cache, e)))) {
        free_transformer(t);
        return 0;
    }
    t->load_seconds = now_seconds() - start;
    return 1;
}

/* Frees whatever was built, also after a load that stopped part-way. */
static void free_transformer(Transformer *t) {
    free_state(&t->state);
    free(t->weights_copy);
    tokenizer_free(&t->tokenizer);
    free_model_file(&t->file, &t->weights);
    memset(t, 0, sizeof *t);
}

/* ---------------------------------------------------------------------------------------
 * The forward pass for T tokens: consecutive positions of one sequence (T = 1 when generating,
 * up to state.block for a prompt), or the next token of each of T samples (Positions).
 * It fills the key/value cache and returns the logits of the last token, or of every token,
 * (T, vocab_size), when all_logits is set (always with samples). Mirrors GPT.forward in
 * export/model.py: every step below works on all T tokens at once, with the operations of
 * kernels/ and the key/value cache of kv_cache.h. */

/* The token's embedding into x (n_embd), times the file's scale (Gemma, Granite), plus its
 * position's encoding unless the positions are rotary (those enter each layer's queries and keys
 * instead) */
static void embed(const Transformer *t, float *x, uint32_t token, int pos) {
    int C = t->config.n_embd;
    weight_type((uint32_t)t->weights.wte.type)->row(&t->weights.wte, (int)token, x); /* dequantized if need be */
    if (t->config.embed_scale != 1.0f)
        for (int i = 0; i < C; i++) x[i] *= t->config.embed_scale;
    if (t->config.pos_kind == POS_ROTARY) return;
    const float *position = t->weights.wpe + (size_t)pos * C;
    for (int i = 0; i < C; i++) x[i] += position[i];
}

/* LayerNorm (GPT-2) or RMSNorm (Llama) of T positions, by the file's norm */
static void norm(const Config *c, float *out, const float *x, const float *weight, const float *bias, int T) {
    if (c->norm == NORM_RMS) rmsnorm(out, x, weight, T, c->n_embd, c->norm_eps);
    else layernorm(out, x, weight, bias, T, c->n_embd, c->norm_eps);
}

/* The queries' and keys' own norms (qk_norm), of the T tokens' qkv rows: RMSNorm over each head
 * (Qwen3, Gemma 3), or over the whole query and the whole key (OLMo 2) */
static void normalize_queries_keys(const Config *c, const LayerWeights *L, float *qkv, int T) {
    int hs = c->head_size, i;
    SPLIT_FOR(T > 1, schedule(static), (i = 0; i < T; i++), {
        float *query = qkv + (size_t)i * c->qkv_dim, *key = query + (size_t)c->n_head * hs;
        if (c->qk_norm == QK_NORM_HEAD) {
            for (int h = 0; h < c->n_head; h++) rms_row(query + h * hs, query + h * hs, L->q_norm, hs, c->norm_eps);
            for (int h = 0; h < c->n_kv_head; h++) rms_row(key + h * hs, key + h * hs, L->k_norm, hs, c->norm_eps);
        } else {
            rms_row(query, query, L->q_norm, c->n_head * hs, c->norm_eps);
            rms_row(key, key, L->k_norm, c->n_kv_head * hs, c->norm_eps);
        }
    });
}

/* Rotary positions: each of the T tokens' query heads and key heads (qkv rows, queries then
 * keys) rotated by the token's position (model.h), their first rotary_dims dimensions */
static void rotate_queries_keys(const Config *c, const LayerWeights *L, float *qkv, int T, const Positions *at) {
    int half = c->rotary_dims / 2, i;
    SPLIT_FOR(T > 1, schedule(static), (i = 0; i < T; i++), {
        float *query = qkv + (size_t)i * c->qkv_dim, *key = query + (size_t)c->n_head * c->head_size;
        size_t row = (size_t)position_of(at, i) * half;
        rotary(query, c->n_head, c->head_size, c->rotary_dims, L->rope_cos + row, L->rope_sin + row);
        rotary(key, c->n_kv_head, c->head_size, c->rotary_dims, L->rope_cos + row, L->rope_sin + row);
    });
}

/* A sublayer's output (T, n_embd) into the residual stream: normalized first when the block
 * normalizes outputs (NORM_AFTER), scaled when the file says (Granite), then added */
static void add_to_residual(const Config *c, float *x, float *out, const float *post_norm, int T) {
    if (c->norm_after) norm(c, out, out, post_norm, NULL, T);
    if (c->residual_scale != 1.0f) {
        int i;
        SPLIT_FOR(T * c->n_embd > 4096, schedule(static), (i = 0; i < T * c->n_embd; i++), { out[i] *= c->residual_scale; });
    }
    residual_add(x, out, T * c->n_embd);
}

/* The logits of `rows` tokens as the file shapes them: divided (Granite), then capped (Gemma 2) */
static void shape_logits(const Config *c, float *logits, int rows) {
    long n = (long)rows * c->vocab_size, i;
    float divisor = c->logit_divisor, cap = c->logit_softcap;
    if (divisor != 1.0f) SPLIT_FOR(n > 4096, schedule(static), (i = 0; i < n; i++), { logits[i] /= divisor; });
    if (cap != 0.0f) SPLIT_FOR(n > 4096, schedule(static), (i = 0; i < n; i++), { logits[i] = cap * tanhf(logits[i] / cap); });
}

/* nn.Linear on T tokens: out (T, rows) = x (T, cols) @ W^T + bias; separate: the tokens are
 * steps of separate samples (kernels/matmul.h) */
#ifdef TRACE_PRODUCTS /* tests/trace.c sees the input and output of every product */
static void trace_product(const Matrix *w, const float *x, const float *out, int T);
#endif

static void linear(RunState *s, float *out, const float *x, const Matrix *w, const float *bias, int T, int separate) {
    matmul(out, x, w, bias, T, separate, &s->mm);
#ifdef TRACE_PRODUCTS
    ONE_THREAD(trace_product(w, x, out, T));
#endif
}

/* forward()'s steps. Every thread of the team runs them all (kernels/parallel.h): each loop
 * split between threads shares its work and ends when all threads have done their part, and
 * every other write to a buffer is made by one thread. */
static void forward_steps(Transformer *t, const uint32_t *tokens, int T, Positions at, int all_logits) {
    const Config *c = &t->config;
    const TransformerWeights *w = &t->weights;
    RunState *s = &t->state;
    int C = c->n_embd, H = c->n_hidden, QKV = c->qkv_dim, Q = c->n_head * c->head_size;
    int separate = at.samples != NULL; /* each token with the arithmetic of one alone */
    float *x = s->x;

    /* token embedding (plus positional encoding when the positions are added, not rotary) */
    int i;
    SPLIT_FOR(T > 1, schedule(static), (i = 0; i < T; i++), { embed(t, x + (size_t)i * C, tokens[i], position_of(&at, i)); });

    for (int l = 0; l < c->n_layer; l++) {
        const LayerWeights *L = &w->layer[l]; /* its weights, and its row of the layer table */

        /* attention: norm (or, in a block that normalizes outputs only, the residual stream
         * itself), fused query/key/value projection, the queries' and keys' own norms and rotary
         * positions when the layer has them: (T, QKV) rows of n_head queries, then n_kv_head
         * keys and values */
        const float *in = x;
        if (c->norm_before) norm(c, s->xb, x, L->ln_1_weight, L->ln_1_bias, T), in = s->xb;
        linear(s, s->qkv, in, &L->c_attn, L->c_attn_bias, T, separate);
        float *query = s->qkv, *key = query + c->n_head * c->head_size, *value = key + c->n_kv_head * c->head_size;
        if (c->qk_norm) normalize_queries_keys(c, L, s->qkv, T);
        if (L->rotary) rotate_queries_keys(c, L, s->qkv, T, &at);

        /* causal multi-head attention: each token's keys and values go to its sequence's cache,
         * then each (token, query head) attends over that cache up to its position (the last
         * `window` of them in a layer with a window) and writes its slice of heads,
         * (T, n_head head_size) */
        store_keys_values(&s->kv, l, key, value, (size_t)QKV, T, &at);
        ScoreShape shape = {c->attn_scale, c->attn_softcap, L->window};
        multi_head_attention(&s->kv, l, c->n_head, T, &at, query, QKV, s->heads, Q, shape, &s->att);

        /* output projection, into the residual stream */
        linear(s, s->xb2, s->heads, &L->attn_proj, L->attn_proj_bias, T, separate);
        add_to_residual(c, x, s->xb2, L->attn_post_norm, T);

        /* feed-forward: norm, up projection, GELU (or SwiGLU, GEGLU: times silu, gelu of the
         * gate), down projection, into the residual stream */
        in = x;
        if (c->norm_before) norm(c, s->xb, x, L->ln_2_weight, L->ln_2_bias, T), in = s->xb;
        linear(s, s->hb, in, &L->c_fc, L->c_fc_bias, T, separate);
        if (c->ffn == FFN_GELU) {
            gelu(s->hb, T * H, c->gelu);
        } else {
            linear(s, s->hb2, in, &L->mlp_gate, L->mlp_gate_bias, T, separate);
            if (c->ffn == FFN_SWIGLU) swiglu(s->hb, s->hb2, T * H);
            else geglu(s->hb, s->hb2, T * H, c->gelu);
        }
        linear(s, s->xb2, s->hb, &L->mlp_proj, L->mlp_proj_bias, T, separate);
        add_to_residual(c, x, s->xb2, L->mlp_post_norm, T);
    }

    /* final norm and the output head (vocab_size rows: padded ones are never computed), for
     * the last token unless all are wanted */
    int first = all_logits || at.samples ? 0 : T - 1;
    float *last = x + (size_t)first * C;
    norm(c, last, last, w->ln_f_weight, w->ln_f_bias, T - first);
    linear(s, s->logits, last, &w->lm_head, NULL, T - first, separate);
    shape_logits(c, s->logits, T - first);
}

/* The T tokens (at their positions in their sequences) through the model: returns the logits
 * of the last token, or of every token (all_logits, or samples: one row each). The steps run
 * on one team of threads for the whole pass, not one team per split loop. The caches hold the
 * positions (reserve_kv_cache() first): nothing here allocates, nothing fails. */
static float *forward(Transformer *t, const uint32_t *tokens, int T, Positions at, int all_logits) {
    IN_TEAM(forward_steps(t, tokens, T, at, all_logits));
    return t->state.logits;
}

/* The model as sequence.h's sequences see it. */
static float *forward_model(void *model, const uint32_t *tokens, int T, Positions at, int all_logits) {
    return forward(model, tokens, T, at, all_logits);
}
static int reserve_model(void *model, long positions, Error *e) { return reserve_kv_cache(model, positions, e); }

static Decoder decoder_of(Transformer *t) {
    return (Decoder){.model = t, .forward = forward_model, .reserve = reserve_model, .kv = &t->state.kv,
                     .tokenizer = &t->tokenizer, .n_ctx = t->config.n_ctx, .vocab_size = t->config.vocab_size,
                     .block = t->state.block};
}

#endif
