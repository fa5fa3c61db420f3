/* run.c: a GPT-style decoder in pure C (libc + OpenMP): GPT-2's block and the Llama family's
 * through one forward pass. This file is the program's story: the command line asks for a mode,
 * and each mode drives the engine. Read top to bottom: the tool modes (logits, attention
 * picture, perplexity, tokens) and main(). Beside it, each in its own file, every arrow
 * pointing down:
 *   cli.h           the command line
 *   chat.h          --chat: conversations rendered by the model's own template (json.h: messages)
 *   server.h        --serve: OpenAI's API over HTTP (api.h: requests read, answers written)
 *   generate.h      generation: samples decoded together, the window past the context
 *   engine.h        the model: the weight file loaded, the run-time state, forward(); it mirrors
 *                   export/model.py's GPT line for line, so the two compare number for number
 *   sequence.h      sequences of tokens stepped through the model
 *   load.h          the weight file (format in model.h): mapped, checked, pointed into
 *   kv_cache.h      the key/value cache: its layout, and attention over it
 *   sampler.h       the next token from the logits
 *   output.h        what run writes: the stream, samples in order, files
 *   threads.h       the team of threads, and its size on a shared machine
 *   attention_page.h  the --attention picture
 *   info.h          --info: what the file holds, and how this run runs it
 *   util.h          errors, memory, the clock
 *   kernels/        each neural-net operation: a portable definition, and each instruction
 *                   set's versions beside it (kernels/arch.h)
 *   tokenizer.c     the tokenizers (tokenizer.h)
 */
#include "util.h"

#include <math.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "attention_page.h"
#include "chat_repl.h"
#include "cli.h"
#include "engine.h"
#include "generate.h"
#include "info.h"
#include "output.h"
#include "sequence.h"
#include "tokenizer.h"

/* ---------------------------------------------------------------------------------------
 * Tool modes: --logits, --attention, --perplexity, --tokenize, --info. Each runs the prompt (or
 * a file) through a Sequence of sequence.h, as generation does. */

/* The command line's: text's tokens, or the error and exit. */
static uint32_t *encode_or_die(Tokenizer *tok, const uint8_t *text, size_t len, unsigned how, long *n) {
    Error e;
    uint32_t *ids = encode_text(tok, text, len, how, n, &e);
    if (!ids) die("%s", e.message);
    return ids;
}

/* A sequence of the model holding ids[0..n), the caches reserved for `positions`, or the error
 * and exit. */
static Sequence sequence_or_die(Transformer *t, const uint32_t *ids, long n, long positions) {
    Error e;
    Sequence s;
    if (!reserve_kv_cache(t, positions, &e) || !sequence_holding(&s, t->config.vocab_size, ids, n, &e))
        die("%s", e.message);
    return s;
}

/* --logits: the prompt through the key/value-cache path, logits of every position written as
 * raw little-endian float32, shape (n_prompt, vocab_size); for comparing with PyTorch. */
static void write_logits(Transformer *t, const uint8_t *text, size_t len, unsigned how, const char *path) {
    long n;
    uint32_t *ids = encode_or_die(&t->tokenizer, text, len, how, &n);
    if (n == 0) die("--logits needs a non-empty prompt");
    if (n > t->config.n_ctx)
        die("the prompt is %ld tokens, longer than the model's context of %d tokens", n, t->config.n_ctx);
    Decoder d = decoder_of(t);
    Sequence s = sequence_or_die(t, ids, n, n);
    OutFile out = create_or_die(path);
    while (s.n_cached < n) {
        int T = next_block(&d, &s);
        fwrite(sequence_feed(&d, &s, T, 1), sizeof(float), (size_t)T * (size_t)t->config.vocab_size, out.f);
    }
    commit_or_die(&out); /* a short write shows up in ferror there */
    sequence_free(&s);
    free(ids);
}

/* --attention: the prompt's attention weights, kept by the layers' attention as it runs
 * (kv_cache.h), as a web page (attention_page.h). */
static void write_attention(Transformer *t, const uint8_t *text, size_t len, unsigned how, const char *model_path,
                            const char *path) {
    const Config *c = &t->config;
    long n;
    uint32_t *ids = encode_or_die(&t->tokenizer, text, len, how, &n);
    if (n == 0) die("--attention needs a prompt (-i or -f)");
    long limit = c->n_ctx < ATTENTION_MAX_TOKENS ? c->n_ctx : ATTENTION_MAX_TOKENS;
    if (n > limit)
        die("the prompt is %ld tokens; --attention draws at most %ld (a heatmap per head stays "
            "readable up to %d tokens)", n, limit, ATTENTION_MAX_TOKENS);
    RunState *rs = &t->state;
    rs->att.record_len = (int)n;
    rs->att.record = calloc_or_die((size_t)c->n_layer * c->n_head * n * n * sizeof(float), "attention");
    Decoder d = decoder_of(t);
    Sequence s = sequence_or_die(t, ids, n, n);
    sequence_prefill(&d, &s);

    OutFile out = create_or_die(path);
    AttentionPicture picture = {model_path, &t->tokenizer, ids, n, c->n_layer, c->n_head, rs->att.record};
    write_attention_page(out.f, &picture);
    commit_or_die(&out);
    fprintf(stderr, "wrote %s: %ld tokens, %d layers x %d heads\n", path, n, c->n_layer, c->n_head);
    free(rs->att.record);
    rs->att.record = NULL;
    sequence_free(&s);
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
static void perplexity(Transformer *t, const uint8_t *text, size_t len, unsigned how) {
    const Config *c = &t->config;
    long n_text;
    uint32_t *text_ids = encode_or_die(&t->tokenizer, text, len, how, &n_text);
    /* the first token is predicted too: after end-of-text, unless the vocabulary already puts
     * a beginning-of-text token before every text */
    int lead = t->tokenizer.bos_id < 0 && t->tokenizer.eot_id >= 0;
    long n = n_text + lead;
    uint32_t *ids = calloc_or_die((size_t)n * sizeof(uint32_t), "tokens");
    if (lead) ids[0] = (uint32_t)t->tokenizer.eot_id;
    memcpy(ids + lead, text_ids, (size_t)n_text * sizeof(uint32_t));
    free(text_ids);
    if (n < 2) die("--perplexity needs a file of at least %d tokens", 2 - lead - (t->tokenizer.bos_id >= 0));

    Decoder d = decoder_of(t);
    Sequence s = sequence_or_die(t, NULL, 0, c->n_ctx);
    Error e;
    long stride = c->n_ctx > 1 ? c->n_ctx / 2 : 1, scored_to = 1, n_scored = 0;
    double nll = 0.0;
    for (long begin = 0;; begin += stride) {
        /* inputs ids[begin .. end), each predicting the next token: a sequence of their own */
        long end = begin + c->n_ctx < n - 1 ? begin + c->n_ctx : n - 1;
        sequence_truncate(&d, &s, 0);
        for (long i = begin; i < end; i++)
            if (!sequence_push(&s, ids[i], &e)) die("%s", e.message);
        while (s.n_cached < end - begin) {
            long chunk = begin + s.n_cached;
            int T = next_block(&d, &s);
            /* a block whose targets the previous window scored only fills the cache */
            int scores = chunk + T + 1 > scored_to;
            const float *all = sequence_feed(&d, &s, T, scores);
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
    sequence_free(&s);
    free(ids);
}

/* --tokenize: the ids, space-separated; on a terminal (unless --ids) the text itself with each
 * token on its own background colour, the way tokenizer playgrounds show it, then the count.
 * A colour changes only where a character starts, so a character split across tokens stays
 * whole on screen; newlines end the colour first so it does not bleed to the line's end. */
static void print_tokens(Transformer *t, const uint8_t *text, size_t len, unsigned how, int ids_only) {
    long n;
    uint32_t *ids = encode_or_die(&t->tokenizer, text, len, how, &n);
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

/* ---------------------------------------------------------------------------------------
 * Generation: the prompt and what follows on stdout, samples one after the other; the seed,
 * notes and the timing line on stderr. */

static void generation(const Decoder *d, const uint8_t *prompt, size_t prompt_len, const GenerateOptions *g,
                       double load_seconds) {
    int N = g->samples;
    PromptTokens tokens;
    Error e;
    if (!prompt_tokens(d, prompt, prompt_len, g->encode, &tokens, &e)) die("%s", e.message);
    if (N > 1) fprintf(stderr, "seed: %llu (samples: seeds %llu to %llu)\n", (unsigned long long)g->seed,
                       (unsigned long long)g->seed, (unsigned long long)(g->seed + (uint64_t)N - 1));
    else fprintf(stderr, "seed: %llu\n", (unsigned long long)g->seed);
    if (tokens.window)
        fprintf(stderr, "note: the prompt is %ld tokens, longer than the context of %d: its first %ld tokens were "
                "dropped\n", tokens.n_tokens, d->n_ctx, tokens.window);
    if (N > 1 && g->temperature == 0) fprintf(stderr, "note: -t 0 (greedy) makes all %d samples the same\n", N);
    Printer p;
    printer_init(&p, N, g->seed, prompt, g->echo && !tokens.from_start ? prompt_len : 0);
    Sink sink = printer_sink(&p);
    GenerateStats stats;
    if (!generate(d, &tokens, g, &sink, &stats, &e)) die("%s", e.message);
    prompt_tokens_free(&tokens);
    output_finish(&p.out);
    if (p.out.written && p.out.last != '\n' && same_terminal()) fputc('\n', stderr);
    if (stats.context_full)
        fprintf(stderr, "note: generation reached the end of the context of %d positions (-n -1)\n", d->n_ctx);
    printer_free(&p);
    fprintf(stderr, "timing: load %.3f s, prompt %ld tokens %.2f tok/s, generated %ld tokens %.2f tok/s\n",
            load_seconds, stats.prefilled, stats.prefill_seconds > 0 ? stats.prefilled / stats.prefill_seconds : 0.0,
            stats.generated, stats.decode_seconds > 0 ? stats.generated / stats.decode_seconds : 0.0);
}

/* ---------------------------------------------------------------------------------------
 * main(): the command line (cli.h) to the mode it asks for. */

int main(int argc, char **argv) {
    Options o = parse_options(argc, argv, PREFILL_BLOCK);
    signal(SIGPIPE, SIG_IGN); /* a closed pipe shows up as EPIPE, handled in write_or_die */
    if (o.threads > 0) set_team_size((int)o.threads);
    size_t text_len = 0;
    uint8_t *text = takes_prompt(&o) ? read_prompt(&o, &text_len) : NULL;

    check_model_path(o.model_path);
    Transformer transformer;
    Error e;
    int n_seq = o.serve.address ? o.serve.slots : o.mode ? 1 : o.gen.samples;
    if (!build_transformer(&transformer, o.model_path, n_seq, o.ctx, o.cache, &e))
        die("%s", e.message);
    if (transformer.note[0]) fprintf(stderr, "note: %s\n", transformer.note);
    const Config *c = &transformer.config;
    if (transformer.state.block > o.block) transformer.state.block = (int)o.block;
    if (o.info) {
        FileInfo info = {&transformer.file, c, transformer.file_n_ctx, &transformer.weights, &transformer.tokenizer,
                         transformer.state.cache_type, transformer.load_seconds};
        print_info(&info, o.model_path);
    }
    else if (o.chat) {
        o.chat_options.tokenize = o.tokenize;
        if (!o.tokenize && c->n_layer == 0)
            die("'%s' holds only a tokenizer: it can --tokenize but not chat", o.model_path);
        Decoder d = decoder_of(&transformer);
        chat(&d, &transformer.file, &o.chat_options, &o.gen, o.model_path, transformer.load_seconds);
    }
    else if (o.serve.address) {
        if (c->n_layer == 0) die("'%s' holds only a tokenizer: it cannot serve", o.model_path);
        Decoder d = decoder_of(&transformer);
        serve(&d, &transformer.file, &o.serve, &o.gen, o.model_path);
    }
    else if (o.tokenize) print_tokens(&transformer, text, text_len, o.gen.encode, o.ids_only);
    else if (c->n_layer == 0)
        die("'%s' holds only a tokenizer: it can --tokenize but not generate", o.model_path);
    else if (o.perplexity_path) {
        size_t file_len;
        uint8_t *file = read_file_or_die(o.perplexity_path, &file_len);
        perplexity(&transformer, file, file_len, o.gen.encode);
        free(file);
    } else if (o.attention_path) {
        write_attention(&transformer, text, text_len, o.gen.encode, o.model_path, o.attention_path);
    } else if (o.logits_path) {
        write_logits(&transformer, text, text_len, o.gen.encode, o.logits_path);
    } else {
        if (o.gen.keep >= c->n_ctx)
            die("--keep must be between 0 and %d (the context less one), got %ld", c->n_ctx - 1, o.gen.keep);
        Decoder d = decoder_of(&transformer);
        generation(&d, text, text_len, &o.gen, transformer.load_seconds);
    }
    free_transformer(&transformer);
    free(text);
    free(o.gen.stop);
    return 0;
}
