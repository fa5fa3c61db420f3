/* run.c: a GPT-2 style decoder in pure C (libc + OpenMP).
 *
 * Read top to bottom: the run-time state, the forward pass, streaming output, generation, the
 * tool modes (logits, attention picture, perplexity, tokens, info) and main(). The forward pass
 * mirrors export/model.py's GPT line for line, so the two can be compared number for number
 * (tests/). Beside it, each in its own file, every arrow pointing down:
 *   load.h          the weight file (format in model.h): mapped, checked, pointed into
 *   kv_cache.h      the key/value cache: its layout, and attention over it
 *   cli.h           the command line
 *   sampler.h       the next token from the logits
 *   attention_page.h  the --attention picture
 *   util.h          errors, memory, the clock
 *   kernels/        each neural-net operation and its instruction-set variants (matmul.h,
 *                   ops.h, attention.h; one file per weight format)
 *   tokenizer.c     byte-level BPE
 */
#include "util.h"

#include <math.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#include "attention_page.h"
#include "cli.h"
#include "kernels/matmul.h"
#include "kernels/ops.h"
#include "kv_cache.h"
#include "load.h"
#include "model.h"
#include "sampler.h"

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
    float *xb;       /* (rows, n_embd) LayerNorm output, then the heads' concatenated outputs */
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
    /* Set by tests/trace.c only: sees the input and output of every matrix product. */
    void (*observe_product)(const Matrix *w, const float *x, const float *out, int T);
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
} Transformer;

/* The memory this machine has, in bytes (0 if unknown). */
static double physical_memory(void) {
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    return pages > 0 && page > 0 ? (double)pages * (double)page : 0.0;
}

/* --samples N whose caches and buffers (per_seq bytes each) would not fit beside the weights
 * in this machine's memory are refused, before anything is allocated for them. */
static void check_samples_fit(int n_seq, double per_seq, size_t file_size) {
    double memory = physical_memory();
    if (n_seq > 1 && memory > 0 && (double)file_size + n_seq * per_seq > memory)
        die("--samples %d needs %.3g GB for the samples' key/value caches and buffers, more than this "
            "machine's %.3g GB of memory", n_seq, n_seq * per_seq / 1e9, memory / 1e9);
}

/* Buffers for forward() for n_seq sequences; their key/value caches come later
 * (reserve_kv_cache), once a run knows how many positions it needs. */
static void build_state(RunState *s, const Config *c, int n_seq, CacheType cache_type, size_t file_size) {
    size_t C = (size_t)c->n_embd, H = (size_t)c->n_hidden, B;
    s->block = c->n_ctx < PREFILL_BLOCK ? c->n_ctx : PREFILL_BLOCK;
    s->rows = max_int(s->block, n_seq);
    s->att.slice = attention_scratch_floats(c->n_ctx, c->head_size);
    s->cache_type = cache_type;
    s->n_seq = n_seq;
    /* per sequence: a row of every buffer, its attention scratch and its sampler */
    s->buffer_bytes = 4.0 * (3 * C + (size_t)c->qkv_dim + 2 * H + (size_t)c->vocab_size) + C +
                      4.0 * (double)c->n_head * (double)s->att.slice + 25.0 * c->vocab_size;
    check_samples_fit(n_seq, s->buffer_bytes, file_size);
    B = (size_t)s->rows;
    s->x = calloc_or_die(B * C * sizeof(float), "x");
    s->xb = calloc_or_die(B * C * sizeof(float), "xb");
    s->xb2 = calloc_or_die(B * C * sizeof(float), "xb2");
    s->qkv = calloc_or_die(B * (size_t)c->qkv_dim * sizeof(float), "qkv");
    s->hb = calloc_or_die(B * H * sizeof(float), "hb");
    s->hb2 = c->ffn == FFN_SWIGLU ? calloc_or_die(B * H * sizeof(float), "hb2") : NULL;
    s->logits = calloc_or_die(B * (size_t)c->vocab_size * sizeof(float), "logits");
    s->att.buffer = calloc_or_die(attention_jobs(s->block, n_seq, c->n_head) * s->att.slice * sizeof(float), "attention");
    if (!matmul_scratch_init(&s->mm, s->rows, C > H ? (int)C : (int)H, c->weight_type))
        die("out of memory for the matrix products' buffers");
}

static void free_state(RunState *s) {
    free(s->x); free(s->xb); free(s->xb2); free(s->qkv); free(s->hb); free(s->hb2); free(s->logits); free(s->att.buffer);
    matmul_scratch_free(&s->mm);
    free_kv_cache(&s->kv);
}

/* The key/value caches of the state's sequences, for positions 0..positions-1 of each (at most
 * the run's context), built once: by generate() for the positions its tokens will take (a short
 * run of a long-context model, or many samples, then holds and touches far less than the whole
 * context), or else by the first forward() pass, for the whole context. */
static void reserve_kv_cache(Transformer *t, long positions) {
    const Config *c = &t->config;
    RunState *s = &t->state;
    if (s->kv.keys) return;
    int n = (int)(positions < c->n_ctx ? positions : c->n_ctx);
    check_samples_fit(s->n_seq, s->buffer_bytes + 2 * kv_cache_bytes(c->n_layer, c->n_kv_head, c->head_size, n, s->cache_type),
                      t->file.size);
    build_kv_cache(&s->kv, c->n_layer, c->n_kv_head, c->head_size, n, s->n_seq, s->cache_type);
}

/* Validate a whole model file held in memory (load.h). Also the entry point of the loader's
 * fuzz target. */
static void load_model(Transformer *t, const uint8_t *data, size_t size) {
    load_model_file(&t->file, data, size, &t->config, &t->weights, &t->tokenizer);
}

/* What generation needs beyond the file: the sinusoid or rotary tables, the run-time buffers
 * and, for the kernels that want it, the weight matrices rearranged once (kernels/matmul.h's
 * prepare_weights). */
static void build_run(Transformer *t, int n_seq, CacheType cache) {
    const Config *c = &t->config;
    TransformerWeights *w = &t->weights;
    if (c->pos_kind == POS_SINUSOIDAL) w->wpe = w->sinusoid = sinusoid_table(c->n_ctx, c->n_embd);
    if (c->pos_kind == POS_ROTARY)
        rotary_tables(&w->rope_cos, &w->rope_sin, c->n_ctx, c->head_size, c->rope_theta, w->rope_freqs);
    build_state(&t->state, c, n_seq, cache, t->file.size);
    int count = 0;
    Matrix **matrices = calloc_or_die((5 * (size_t)c->n_layer + 1) * sizeof(Matrix *), "matrix list");
    for (int l = 0; l < c->n_layer; l++) {
        LayerWeights *L = &w->layer[l];
        matrices[count++] = &L->c_attn;
        matrices[count++] = &L->attn_proj;
        if (c->ffn == FFN_SWIGLU) matrices[count++] = &L->mlp_gate;
        matrices[count++] = &L->c_fc;
        matrices[count++] = &L->mlp_proj;
    }
    matrices[count++] = &w->lm_head;
    size_t bytes = prepare_weights(matrices, count, NULL);
    if (bytes) {
        t->weights_copy = malloc_or_die(bytes, "the rearranged copy of the weights"); /* every byte written */
        prepare_weights(matrices, count, t->weights_copy);
    }
    free(matrices);
}

/* The run's context: ctx positions (-c/--ctx), or 0 for the file's up to DEFAULT_CONTEXT. Every
 * position past it is one the run never uses, so the weights load as they are. */
static void limit_context(Transformer *t, long ctx) {
    Config *c = &t->config;
    t->file_n_ctx = c->n_ctx;
    if (ctx > c->n_ctx) die("-c/--ctx must be between 1 and the model's context of %d, got %ld", c->n_ctx, ctx);
    if (ctx == 0 && c->n_ctx > DEFAULT_CONTEXT) {
        fprintf(stderr, "note: the model's context is %d positions; this run holds %d (-c/--ctx to change)\n",
                c->n_ctx, DEFAULT_CONTEXT);
        ctx = DEFAULT_CONTEXT;
    }
    if (ctx > 0) c->n_ctx = (int)ctx;
}

/* The model at path, ready to run n_seq sequences at once (1, or --samples) over a context of
 * ctx positions (0: the default, limit_context()), with a key/value cache of that type. */
static void build_transformer(Transformer *t, const char *path, int n_seq, long ctx, CacheType cache) {
    memset(t, 0, sizeof *t);
    double start = now_seconds();
    map_model_file(&t->file, path);
    load_model(t, t->file.data, t->file.size);
    if (t->config.n_layer > 0) {
        limit_context(t, ctx);
        build_run(t, n_seq, cache);
    }
    t->load_seconds = now_seconds() - start;
}

/* Frees whatever was built, also after a load that stopped part-way (fuzzing). */
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

/* The token's embedding into x (n_embd), plus its position's encoding unless the positions
 * are rotary (those enter each layer's queries and keys instead) */
static void embed(const Transformer *t, float *x, uint32_t token, int pos) {
    int C = t->config.n_embd;
    weight_format(t->config.weight_type)->row(&t->weights.wte, (int)token, x); /* dequantized if need be */
    if (t->config.pos_kind == POS_ROTARY) return;
    const float *position = t->weights.wpe + (size_t)pos * C;
    for (int i = 0; i < C; i++) x[i] += position[i];
}

/* LayerNorm (GPT-2) or RMSNorm (Llama) of T positions, by the file's norm */
static void norm(const Config *c, float *out, const float *x, const float *weight, const float *bias, int T) {
    if (c->norm == NORM_RMS) rmsnorm(out, x, weight, T, c->n_embd, c->norm_eps);
    else layernorm(out, x, weight, bias, T, c->n_embd, c->norm_eps);
}

/* Rotary positions: each of the T tokens' query heads and key heads (qkv rows, queries then
 * keys) rotated by the token's position (model.h) */
static void rotate_queries_keys(const Transformer *t, float *qkv, int T, const Positions *at) {
    const Config *c = &t->config;
    int half = c->head_size / 2, i;
    SPLIT_FOR(T > 1, schedule(static), (i = 0; i < T; i++), {
        float *query = qkv + (size_t)i * c->qkv_dim, *key = query + (size_t)c->n_head * c->head_size;
        size_t row = (size_t)position_of(at, i) * half;
        rotary(query, c->n_head, c->head_size, t->weights.rope_cos + row, t->weights.rope_sin + row);
        rotary(key, c->n_kv_head, c->head_size, t->weights.rope_cos + row, t->weights.rope_sin + row);
    });
}

/* nn.Linear on T tokens: out (T, rows) = x (T, cols) @ W^T + bias; decode: the tokens are
 * samples' decode steps (kernels/matmul.h) */
static void linear(RunState *s, float *out, const float *x, const Matrix *w, const float *bias, int T, int decode) {
    matmul(out, x, w, bias, T, decode, &s->mm);
    if (s->observe_product) ONE_THREAD(s->observe_product(w, x, out, T));
}

/* forward()'s steps. Every thread of the team runs them all (kernels/parallel.h): each loop
 * split between threads shares its work and ends when all threads have done their part, and
 * every other write to a buffer is made by one thread. */
static void forward_steps(Transformer *t, const uint32_t *tokens, int T, Positions at, int all_logits) {
    const Config *c = &t->config;
    const TransformerWeights *w = &t->weights;
    RunState *s = &t->state;
    int C = c->n_embd, H = c->n_hidden, QKV = c->qkv_dim;
    int decode = T == 1 || at.samples; /* every token by itself: the decode arithmetic */
    float *x = s->x;

    /* token embedding (plus positional encoding when the positions are added, not rotary) */
    int i;
    SPLIT_FOR(T > 1, schedule(static), (i = 0; i < T; i++), { embed(t, x + (size_t)i * C, tokens[i], position_of(&at, i)); });

    for (int l = 0; l < c->n_layer; l++) {
        const LayerWeights *L = &w->layer[l];

        /* attention: norm, fused query/key/value projection, rotary positions when the file
         * has them: (T, QKV) rows of n_head queries, then n_kv_head keys and values */
        norm(c, s->xb, x, L->ln_1_weight, L->ln_1_bias, T);
        linear(s, s->qkv, s->xb, &L->c_attn, L->c_attn_bias, T, decode);
        float *query = s->qkv, *key = query + c->n_head * c->head_size, *value = key + c->n_kv_head * c->head_size;
        if (c->pos_kind == POS_ROTARY) rotate_queries_keys(t, s->qkv, T, &at);

        /* causal multi-head attention: each token's keys and values go to its sequence's cache,
         * then each (token, query head) attends over that cache up to its position and writes
         * its slice of xb */
        store_keys_values(&s->kv, l, key, value, (size_t)QKV, T, &at);
        multi_head_attention(&s->kv, l, c->n_head, T, &at, query, QKV, s->xb, C, &s->att);

        /* output projection and residual */
        linear(s, s->xb2, s->xb, &L->attn_proj, L->attn_proj_bias, T, decode);
        residual_add(x, s->xb2, T * C);

        /* feed-forward: norm, up projection, GELU (or SwiGLU: times silu of the gate), down
         * projection, residual */
        norm(c, s->xb, x, L->ln_2_weight, L->ln_2_bias, T);
        linear(s, s->hb, s->xb, &L->c_fc, L->c_fc_bias, T, decode);
        if (c->ffn == FFN_SWIGLU) {
            linear(s, s->hb2, s->xb, &L->mlp_gate, L->mlp_gate_bias, T, decode);
            swiglu(s->hb, s->hb2, T * H);
        } else {
            gelu(s->hb, T * H, c->gelu);
        }
        linear(s, s->xb2, s->hb, &L->mlp_proj, L->mlp_proj_bias, T, decode);
        residual_add(x, s->xb2, T * C);
    }

    /* final norm and the output head (vocab_size rows: padded ones are never computed), for
     * the last token unless all are wanted */
    int first = all_logits || at.samples ? 0 : T - 1;
    float *last = x + (size_t)first * C;
    norm(c, last, last, w->ln_f_weight, w->ln_f_bias, T - first);
    linear(s, s->logits, last, &w->lm_head, NULL, T - first, decode);
}

/* The T tokens (at their positions in their sequences) through the model: returns the logits
 * of the last token, or of every token (all_logits, or samples: one row each). The steps run
 * on one team of threads for the whole pass, not one team per split loop. */
static float *forward(Transformer *t, const uint32_t *tokens, int T, Positions at, int all_logits) {
    reserve_kv_cache(t, t->config.n_ctx); /* when nothing reserved it before */
    IN_TEAM(forward_steps(t, tokens, T, at, all_logits));
    return t->state.logits;
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

/* The token generation starts from when there is no prompt and the vocabulary puts no
 * beginning-of-text token before every text: end-of-text, or a newline for a character
 * vocabulary without one. */
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
 * quarter ... one. Only the speed depends on the team size, never the numbers (kernels/simd.h). */
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
    int at_start;       /* nothing printed yet, after no prompt, by a SentencePiece vocabulary */
    int bos_space_seen; /* leading_space() has dropped its space */
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

/* SentencePiece's decoding drops the space its dummy prefix put before a text: a generation
 * with no prompt prints its first words as SentencePiece's decode() would (sentencepiece_
 * processor.cc): while nothing is printed, a normal token (not a byte or unknown piece) that
 * starts with a space loses it, only the first such token unless extra spaces are removed. */
static int drops_leading_space(const Tokenizer *tok) {
    return (tok->flags & TOK_SENTENCEPIECE) && (tok->flags & (TOK_DUMMY_PREFIX | TOK_REMOVE_EXTRA_SPACES));
}

static void leading_space(const Tokenizer *tok, Sample *sm, uint32_t id, const uint8_t **bytes, size_t *len) {
    if (tok->kinds && tok->kinds[id] == TOKEN_NORMAL && !sm->bos_space_seen && *len > 0 && (*bytes)[0] == ' ') {
        (*bytes)++;
        (*len)--;
        sm->bos_space_seen = !(tok->flags & TOK_REMOVE_EXTRA_SPACES);
    }
    if (*len > 0) sm->at_start = 0;
}

/* Sample i's token just drawn, printed (or held); returns 0 when it finishes the sample
 * (end-of-text, a stop string, or max_new tokens), else 1: the token is to be fed back. */
static int take_token(Transformer *t, const GenerateOptions *g, Printer *p, int i) {
    Sample *sm = &p->sample[i];
    int next = sm->next;
    if (next == t->tokenizer.eot_id && !g->ignore_eos) return 0;
    size_t len;
    const uint8_t *bytes = tokenizer_output(&t->tokenizer, (uint32_t)next, &len);
    if (sm->at_start) leading_space(&t->tokenizer, sm, (uint32_t)next, &bytes, &len);
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

/* The prompt's tokens (*n of them), or the start token when it has none (*from_start set). */
static uint32_t *prompt_tokens(Transformer *t, const uint8_t *prompt, size_t prompt_len, long *n, int *from_start) {
    uint32_t *ids = encode_or_die(t, prompt, prompt_len, n);
    *from_start = *n == 0;
    if (*from_start) {
        free(ids);
        ids = calloc_or_die(sizeof(uint32_t), "the prompt's tokens");
        ids[(*n)++] = start_token(t);
    }
    return ids;
}

/* N samples (zeroed, then filled in), each starting as the prompt's n tokens with the cache
 * window from position `window`, sample i drawing with seed + i. */
static Sample *start_samples(const Transformer *t, const GenerateOptions *g, const uint32_t *ids, long n, long window,
                             int no_prompt) {
    int N = g->samples, vocab = t->config.vocab_size;
    Sample *samples = calloc_or_die((size_t)N * sizeof(Sample), "samples");
    for (int i = 0; i < N; i++) {
        Sample *sm = &samples[i];
        sm->at_start = no_prompt && drops_leading_space(&t->tokenizer);
        sm->cap = n + 1 + (g->max_new < 4096 ? g->max_new : 4096);
        sm->tokens = calloc_or_die((size_t)sm->cap * sizeof(uint32_t), "the samples' tokens");
        memcpy(sm->tokens, ids, (size_t)n * sizeof(uint32_t));
        sm->n_tokens = n;
        sm->window = window;
        sm->own_logits = calloc_or_die((size_t)vocab * sizeof(float), "the samples' logits");
        sm->logits = sm->own_logits;
        if (!build_sampler(&sm->sampler, vocab, g->temperature, g->top_k, g->top_p, g->seed + (uint64_t)i))
            die("out of memory for the sampler");
    }
    return samples;
}

/* Frees the N samples; returns the tokens they generated in all. */
static long free_samples(Sample *samples, int N) {
    long n_generated = 0;
    for (int i = 0; i < N; i++) {
        n_generated += samples[i].n_generated;
        free(samples[i].tokens);
        free(samples[i].own_logits);
        free_sampler(&samples[i].sampler);
    }
    free(samples);
    return n_generated;
}

/* The T active samples have no room for their next token: each one's window moves to its last
 * g->keep tokens and the new one, which go through the model again from position 0. */
static void move_windows(Transformer *t, const GenerateOptions *g, Sample *samples, const int *active, int T) {
    share_nothing(&t->state.kv, g->samples);
    for (int j = 0; j < T; j++) {
        Sample *sm = &samples[active[j]];
        sm->window = sm->n_tokens - 1 - g->keep;
        const float *logits = prefill(t, active[j], sm->tokens + sm->window, g->keep + 1);
        memcpy(sm->own_logits, logits, (size_t)t->config.vocab_size * sizeof(float));
        sm->logits = sm->own_logits;
    }
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
 * computed with the same arithmetic (kernels/simd.h's decode arithmetic). */
static void generate(Transformer *t, const uint8_t *prompt, size_t prompt_len, const GenerateOptions *g) {
    const Config *c = &t->config;
    int N = g->samples, vocab = c->vocab_size, from_start;
    long n_tokens, window = 0;
    uint32_t *ids = prompt_tokens(t, prompt, prompt_len, &n_tokens, &from_start);
    if (n_tokens > c->n_ctx) window = n_tokens - c->n_ctx;
    /* the cache's positions: the prompt's and the new tokens' (the last one is never fed
     * back), or the whole context when they do not fit, the window then moving */
    reserve_kv_cache(t, n_tokens - window + g->max_new);
    if (N > 1) fprintf(stderr, "seed: %llu (samples: seeds %llu to %llu)\n", (unsigned long long)g->seed,
                       (unsigned long long)g->seed, (unsigned long long)(g->seed + (uint64_t)N - 1));
    else fprintf(stderr, "seed: %llu\n", (unsigned long long)g->seed);
    if (window)
        fprintf(stderr, "note: the prompt is %ld tokens, longer than the context of %d: its first %ld "
                "tokens were dropped\n", n_tokens, c->n_ctx, window);
    if (N > 1 && g->temperature == 0)
        fprintf(stderr, "note: -t 0 (greedy) makes all %d samples the same\n", N);
    Sample *samples = start_samples(t, g, ids, n_tokens, window, prompt_len == 0);
    free(ids);
    int *active = calloc_or_die((size_t)N * sizeof(int), "samples");           /* (N) sequences of this step */
    uint32_t *next = calloc_or_die((size_t)N * sizeof(uint32_t), "samples");   /* (N) their tokens */
    Printer p = {.sample = samples, .n = N, .g = g, .prompt = prompt, .prompt_len = from_start ? 0 : prompt_len};
    start_sample(&p);

    /* the prompt through the model in blocks (prefill), filling the first sample's key/value
     * cache; the others share it (kv_cache.h) */
    double t0 = now_seconds();
    long n_prefilled = n_tokens - window;
    const float *logits = prefill(t, 0, samples[0].tokens + window, n_prefilled);
    for (int i = 0; i < N; i++) {
        memcpy(samples[i].own_logits, logits, (size_t)vocab * sizeof(float));
        if (i > 0) share_prompt(&t->state.kv, i, n_prefilled);
    }
    double t1 = now_seconds();

    /* then token by token: every unfinished sample draws its next token, and those that go on
     * are fed back through one forward() call */
    ThreadChoice threads;
    thread_choice_init(&threads, g->adapt_threads ? thread_count() : 1);
    if (g->max_new == 0) for (int i = 0; i < N; i++) finish_sample(&p, i);
    for (;;) {
        int T = 0, j;
        for (int i = 0; i < N; i++) if (!samples[i].done) active[T++] = i;
        if (T == 0) break;
        SPLIT_FOR(T > 1, schedule(dynamic, 1), (j = 0; j < T; j++), { draw_token(t, g, &samples[active[j]]); });
        int fed = 0;
        for (j = 0; j < T; j++) {
            if (!take_token(t, g, &p, active[j])) { finish_sample(&p, active[j]); continue; }
            next[fed] = (uint32_t)samples[active[j]].next;
            active[fed++] = active[j];
        }
        if ((T = fed) == 0) break;
        Sample *first = &samples[active[0]]; /* all T are as long as this one */
        if (first->n_tokens - 1 - first->window == c->n_ctx) { /* no room for the token */
            move_windows(t, g, samples, active, T);
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
    long n_generated = free_samples(samples, N);
    free(active); free(next);
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
    OutFile o = {NULL, calloc_or_die(tmp_len, "path"), path};
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
    s->att.record_len = (int)n;
    s->att.record = calloc_or_die((size_t)c->n_layer * c->n_head * n * n * sizeof(float), "attention");
    prefill(t, 0, ids, n);

    OutFile out = create_or_die(path);
    AttentionPicture picture = {model_path, &t->tokenizer, ids, n, c->n_layer, c->n_head, s->att.record};
    write_attention_page(out.f, &picture);
    commit_or_die(&out);
    fprintf(stderr, "wrote %s: %ld tokens, %d layers x %d heads\n", path, n, c->n_layer, c->n_head);
    free(s->att.record);
    s->att.record = NULL;
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
    /* the first token is predicted too: after end-of-text, unless the vocabulary already puts
     * a beginning-of-text token before every text */
    int lead = t->tokenizer.bos_id < 0 && t->tokenizer.eot_id >= 0;
    long n = n_text + lead;
    uint32_t *ids = calloc_or_die((size_t)n * sizeof(uint32_t), "tokens");
    if (lead) ids[0] = (uint32_t)t->tokenizer.eot_id;
    memcpy(ids + lead, text_ids, (size_t)n_text * sizeof(uint32_t));
    free(text_ids);
    if (n < 2) die("--perplexity needs a file of at least %d tokens", 2 - lead - (t->tokenizer.bos_id >= 0));

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

/* "block: Llama (RMSNorm, rotary positions theta 10000, SwiGLU, ...)": the four places where
 * GPT-2's and Llama's blocks differ, as this file chooses them */
static void print_block_design(const Config *c) {
    int gpt2 = c->norm == NORM_LAYER && c->pos_kind != POS_ROTARY && c->ffn == FFN_GELU;
    int llama = c->norm == NORM_RMS && c->pos_kind == POS_ROTARY && c->ffn == FFN_SWIGLU;
    printf("block: %s (%s, ", gpt2 ? "GPT-2" : llama ? "Llama" : "mixed", c->norm == NORM_RMS ? "RMSNorm" : "LayerNorm");
    if (c->pos_kind == POS_ROTARY)
        printf("rotary positions theta %g%s, ", (double)c->rope_theta, c->rope_freqs ? " rescaled by the file" : "");
    else printf("%s positions added, ", c->pos_kind == POS_LEARNED ? "learned" : "sinusoidal");
    if (c->ffn == FFN_SWIGLU) printf("SwiGLU feed-forward, ");
    else printf("GELU (%s) feed-forward, ", c->gelu == GELU_TANH ? "tanh" : "erf");
    if (c->n_kv_head == c->n_head) printf("multi-head attention, ");
    else if (c->n_kv_head == 1) printf("multi-query attention, ");
    else printf("grouped-query attention %d:%d, ", c->n_head, c->n_kv_head);
    static const char *parts[] = {"query/key/value", "attention output", "feed-forward", "norms"};
    if (c->bias == BIAS_ALL) printf("biases everywhere)\n");
    else if (c->bias == 0) printf("no biases)\n");
    else {
        printf("biases on");
        for (int b = 0, first = 1; b < 4; b++)
            if (c->bias & (1 << b)) printf("%s %s", first ? "" : ",", parts[b]), first = 0;
        printf(")\n");
    }
}

static void print_info(const Transformer *t, const char *path) {
    const Config *c = &t->config;
    const FileHeader *h = t->file.header;
    printf("file: %s (%zu bytes, format version %u), loaded in %.3f s\n", path, t->file.size,
           h->version, t->load_seconds);
    printf("kernels: %s, %d threads\n", kernels_description(), thread_count());
    static const char *pretokenizers[PRETOK_COUNT] = {"character", "gpt2", "cl100k", "whole-text", "digits+gpt2", "qwen2"};
    const Tokenizer *tok = &t->tokenizer;
    const char *merging = tok->flags & TOK_SENTENCEPIECE ? "SentencePiece BPE"
                        : tok->flags & TOK_MERGE_PAIRS ? "byte-level BPE by merge list"
                        : tok->pretokenizer == PRETOK_CHAR ? "characters" : "byte-level BPE by rank";
    printf("tokenizer: %u tokens, %s, %s pre-tokenizer, end-of-text id %d, beginning-of-text id %d\n",
           tok->n_tokens, merging, pretokenizers[tok->pretokenizer], tok->eot_id, tok->bos_id);
    if (tok->flags & TOK_SENTENCEPIECE)
        printf("  %u normalization rules%s%s, %s\n", tok->n_rules, tok->flags & TOK_DUMMY_PREFIX ? ", dummy prefix" : "",
               tok->flags & TOK_REMOVE_EXTRA_SPACES ? ", extra spaces removed" : "",
               tok->flags & TOK_BYTE_FALLBACK ? "byte fallback" : "unknown piece");
    else if (tok->flags & (TOK_NFC | TOK_MERGE_PAIRS))
        printf("  %u merges%s%s\n", tok->n_merges, tok->flags & TOK_NFC ? ", NFC normalizer" : "",
               tok->flags & TOK_WHOLE_PIECES ? ", whole pieces first (ignore_merges)" : "");
    if (c->n_layer == 0) { printf("tokenizer-only file (no model)\n"); return; }
    printf("n_layer %d, n_head %d, n_embd %d (head_size %d), n_hidden %d, n_ctx %d", c->n_layer,
           c->n_head, c->n_embd, c->head_size, c->n_hidden, t->file_n_ctx);
    if (c->n_ctx != t->file_n_ctx) printf(" (this run: %d)", c->n_ctx);
    printf("\n");
    print_block_design(c);
    printf("vocab_size %d (padded to %d), norm_eps %g, head %s, weights %s\n", c->vocab_size, c->vocab_padded,
           (double)c->norm_eps, c->tied_head ? "tied" : "separate", weight_format(c->weight_type)->name);
    CacheType cache = t->state.cache_type;
    printf("key/value cache: %s, %d positions at most, %.1f MB (generation holds the positions its tokens take)\n",
           cache_type_name(cache), c->n_ctx, 2 * kv_cache_bytes(c->n_layer, c->n_kv_head, c->head_size, c->n_ctx, cache) / 1e6);
    printf("%-22s %12s %12s\n", "section", "offset", "bytes");
    printf("%-22s %12d %12u\n", "header", 0, HEADER_SIZE);
    printf("%-22s %12llu %12llu\n", "tokenizer", (unsigned long long)h->tokenizer_offset,
           (unsigned long long)h->tokenizer_size);
    const TensorEntry *table = (const TensorEntry *)(const void *)(t->file.data + h->tensors_offset);
    printf("%-22s %12llu %12llu\n", "tensor table", (unsigned long long)h->tensors_offset,
           (unsigned long long)h->n_tensors * sizeof(TensorEntry));
    for (uint32_t i = 0; i < h->n_tensors; i++)
        printf("%-22s %12llu %12llu\n", table[i].name, (unsigned long long)table[i].offset,
               (unsigned long long)table[i].size);
}

/* ---------------------------------------------------------------------------------------
 * main(): the command line (cli.h) to the mode it asks for. */

#ifndef TESTING
int main(int argc, char **argv) {
    Options o = parse_options(argc, argv, PREFILL_BLOCK);
    signal(SIGPIPE, SIG_IGN); /* a closed pipe shows up as EPIPE, handled in write_or_die */
    if (o.threads > 0) set_team_size((int)o.threads);
    size_t text_len = 0;
    uint8_t *text = takes_prompt(&o) ? read_prompt(&o, &text_len) : NULL;

    Transformer transformer;
    build_transformer(&transformer, o.model_path, o.mode ? 1 : (int)o.samples, o.ctx,
                      !o.cache || !strcmp(o.cache, "f16") ? CACHE_F16 : !strcmp(o.cache, "f32") ? CACHE_F32 : CACHE_Q8_0);
    const Config *c = &transformer.config;
    if (transformer.state.block > o.block) transformer.state.block = (int)o.block;
    transformer.tokenizer.parse_special = o.special;
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
