/* cli.h: the command line: the options (docs/cli.md's table), their checks, and reading the
 * prompt and other files. Every bad value or combination is a one-line error. */
#ifndef CLI_H
#define CLI_H

#include "util.h"

#include <dirent.h>
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "chat_repl.h"
#include "generate.h"
#include "kernels/heads.h"
#include "model.h"
#include "server.h"

#define RUN_VERSION "0.9.0"

static void usage(FILE *f, int max_block) {
    fprintf(f,
        "usage: run MODEL.bin [options]\n"
        "Generates text after a prompt; or, with one of the tool modes, scores, draws or inspects.\n"
        "The prompt: -i TEXT, -f FILE (- for stdin), or stdin when it is not a terminal; none\n"
        "starts from the end-of-text token.\n"
        "  -i, --prompt TEXT         prompt text\n"
        "  -f, --prompt-file FILE    prompt read from a file (raw bytes; - reads stdin)\n"
        "      --special             the text of special tokens (<|im_start|>, <s>) in the prompt\n"
        "                            is that token (default: plain text)\n"
        "generation:\n"
        "  -n, --max-new-tokens N    tokens to generate after the prompt (default 256); past the\n"
        "                            context the window moves (--keep); -1: until a stop token\n"
        "                            or the end of the context\n"
        "  -t, --temperature T       0 = greedy argmax (default 1.0)\n"
        "  -k, --top-k K             keep the K most likely tokens, 0 = off (default 0)\n"
        "  -p, --top-p P             nucleus sampling, 1.0 = off (default 0.9)\n"
        "  -s, --seed S              RNG seed (default: from the clock); echoed on stderr\n"
        "      --repeat-penalty R    divide a recent token's positive logit by R, multiply a\n"
        "                            negative one (Hugging Face's rule; default 1.0 = off)\n"
        "      --repeat-last N       tokens the penalty looks back on (default 64)\n"
        "      --stop STR            stop after the token that completes STR in the generated\n"
        "                            text (printed whole; repeatable)\n"
        "      --keep N              tokens kept when the context is full (default: half of it)\n"
        "      --ignore-eos          keep generating past the end-of-text token\n"
        "      --no-echo             leave the prompt out of stdout\n"
        "      --samples N           N continuations decoded together, sample i with seed S+i,\n"
        "                            each after a line '--- sample I of N, seed S ---' (default 1)\n"
        "chat (an instruct model's own template, docs/cli.md's \"Chat\"):\n"
        "      --chat                a conversation: on a terminal, turns typed in; else a user turn\n"
        "                            per line of stdin; each reply streamed, the cache kept\n"
        "      --system TEXT         with --chat: the system message\n"
        "      --messages FILE       with --chat: the next reply to a JSON array of {\"role\",\n"
        "                            \"content\"} messages (- for stdin); with --tokenize, its tokens\n"
        "      --verbose             with --chat: each reply's speed on stderr, not only the total\n"
        "      --no-generation-prompt  with --chat --messages --tokenize: the tokens without the\n"
        "                            assistant's generation prompt\n"
        "      --think, --no-think   with --chat: the template's reasoning switch (enable_thinking)\n"
        "      --template-option KEY=VALUE  with --chat: a boolean option of the template (--info\n"
        "                            lists them; repeatable)\n"
        "server (OpenAI's API over HTTP, docs/server.md):\n"
        "      --serve [HOST:]PORT   answer /v1/chat/completions, /v1/completions, /v1/models and\n"
        "                            /health on HOST (default 127.0.0.1) until SIGINT or SIGTERM\n"
        "      --slots N             requests' choices decoded together, each with its own cache\n"
        "                            of the context (default 4)\n"
        "      --api-key KEY         requests must carry 'Authorization: Bearer KEY' (needed for\n"
        "                            a host other than loopback)\n"
        "      --max-body BYTES      the largest request body (default 1048576)\n"
        "      --timeout SECONDS     for a request to arrive, and a client to read (default 10)\n"
        "tool modes (one at a time, then exit):\n"
        "      --tokenize            show the prompt's tokens (coloured on a terminal)\n"
        "      --ids                 with --tokenize: only the ids, even on a terminal\n"
        "      --perplexity FILE     score FILE (- for stdin): tokens=N nll=X ppl=Y bpb=Z\n"
        "      --attention OUT.html  write the prompt's attention weights as a web page (- for\n"
        "                            stdout)\n"
        "      --logits OUT          write the prompt's logits at every position (float32,\n"
        "                            positions x vocab_size) for comparing with PyTorch (- for\n"
        "                            stdout)\n"
        "      --info                print the model's configuration, file layout and kernels\n"
        "any mode that runs the model:\n"
        "      --threads N           worker threads (default: the CPUs this process may use,\n"
        "                            fewer while generating if that is faster: a busy machine)\n"
        "  -c, --ctx N               positions the key/value cache holds: the context of this run\n"
        "                            (default: the model's, at most 4096)\n"
        "      --cache TYPE          the key/value cache's numbers: f16 (IEEE half precision,\n"
        "                            the default), f32, or q8_0 (int8 with a scale per 32\n"
        "                            dimensions: 56%% of f16's memory)\n"
        "      --block N             prompt tokens per forward pass (default %d; 1 = one at a\n"
        "                            time, as generation does)\n"
        "  -h, --help                this text\n"
        "      --version             the program's version and the model file format it reads\n"
        "examples:\n"
        "  run models/kjv.bin -i \"And God said\" -n 200 -t 0.8 -k 40\n"
        "  echo \"In the beginning\" | run models/kjv.bin -t 0 --repeat-penalty 1.3 --stop \".\"\n"
        "  run models/kjv.bin --perplexity models/heldout.txt\n", max_block);
}

static long parse_long(const char *flag, const char *s, long lo, long hi) {
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (*s == '\0' || *end != '\0') die("%s needs a whole number from %ld to %ld, got '%s'", flag, lo, hi, s);
    if (errno == ERANGE || v < lo || v > hi) die("%s must be between %ld and %ld, got %s", flag, lo, hi, s);
    return v;
}

/* hint: said after the error when the value is not a number at all */
static double parse_double(const char *flag, const char *s, double lo, double hi, const char *hint) {
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (*s == '\0' || *end != '\0' || isnan(v))
        die("%s needs a number from %g to %g, got '%s'%s", flag, lo, hi, s, hint ? hint : "");
    if (errno == ERANGE || !isfinite(v) || v < lo || v > hi)
        die("%s must be between %g and %g, got %s", flag, lo, hi, s);
    return v;
}

/* Everything the command line says. */
typedef struct {
    const char *model_path;
    const char *prompt, *prompt_file;
    const char *logits_path, *perplexity_path, *attention_path;
    long threads, block, ctx;
    int tokenize, ids_only, info;
    CacheType cache;              /* --cache */
    GenerateOptions gen;          /* generation's options, and how every mode tokenizes the prompt */
    /* for refusing combinations */
    const char *mode;             /* the tool mode, or NULL for generation */
    const char *generation_flag;  /* the first flag given that only generation uses, or NULL */
    int block_given;              /* --block: only modes that run the model use it */
    int cache_given;              /* --cache: likewise */
    int special;                  /* --special */
    int chat;                     /* --chat */
    ChatOptions chat_options;
    ServeOptions serve;           /* --serve: address NULL when not serving */
    int serve_flag_given;         /* a flag of --serve's given */
} Options;

enum { OPT_BLOCK = 255, OPT_THREADS = 256, OPT_IGNORE_EOS, OPT_TOKENIZE, OPT_IDS, OPT_PERPLEXITY, OPT_ATTENTION,
       OPT_INFO, OPT_LOGITS, OPT_STOP, OPT_KEEP, OPT_REPEAT_PENALTY, OPT_REPEAT_LAST, OPT_NO_ECHO, OPT_VERSION,
       OPT_SAMPLES, OPT_SPECIAL, OPT_CACHE, OPT_CHAT, OPT_SYSTEM, OPT_MESSAGES, OPT_NO_GENERATION_PROMPT,
       OPT_VERBOSE, OPT_THINK, OPT_NO_THINK, OPT_TEMPLATE_OPTION, OPT_SERVE, OPT_SLOTS, OPT_API_KEY, OPT_MAX_BODY,
       OPT_TIMEOUT };

static void set_mode(Options *o, const char *flag) {
    if (o->mode && strcmp(o->mode, flag) != 0) die("%s and %s are two modes: give one at a time", o->mode, flag);
    o->mode = flag;
}

/* The flag's name when only generation uses it, else NULL. */
static const char *generation_only(int opt) {
    switch (opt) {
    case 'n': return "-n"; case 't': return "-t"; case 'k': return "-k"; case 'p': return "-p";
    case 's': return "-s"; case OPT_IGNORE_EOS: return "--ignore-eos"; case OPT_STOP: return "--stop";
    case OPT_KEEP: return "--keep"; case OPT_REPEAT_PENALTY: return "--repeat-penalty";
    case OPT_REPEAT_LAST: return "--repeat-last"; case OPT_NO_ECHO: return "--no-echo";
    case OPT_SAMPLES: return "--samples";
    default: return NULL;
    }
}

/* Generation and the modes that read a prompt (-i, -f or stdin). */
static int takes_prompt(const Options *o) {
    return !o->chat && (!o->mode || o->tokenize || o->attention_path || o->logits_path);
}

static uint64_t parse_seed(const char *s) {
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (!*s || *end || *s == '-') die("-s/--seed needs a whole number from 0 to 2^64-1, got '%s'", s);
    if (errno == ERANGE) die("-s/--seed must be between 0 and 2^64-1, got %s", s);
    return v;
}

static CacheType parse_cache(const char *s) {
    for (int type = 0; type < CACHE_TYPES; type++)
        if (strcmp(s, cache_types[type].name) == 0) return (CacheType)type;
    die("--cache needs f16, f32 or q8_0, got '%s'", s);
}

static void add_stop(GenerateOptions *g, const char *s) {
    size_t n = strlen(s);
    if (n == 0 || n > 256) die("--stop needs a string of 1 to 256 bytes, got %zu bytes", n);
    const char **more = realloc(g->stop, (size_t)(g->n_stop + 1) * sizeof *more);
    if (!more) die("out of memory for the stop strings");
    g->stop = more;
    g->stop[g->n_stop++] = s;
}

/* One option of generation (its value arg); returns 0 when opt is not one. */
static int generation_option(GenerateOptions *g, int opt, const char *arg, int *have_seed) {
    switch (opt) {
    case 'n': g->max_new = parse_long("-n/--max-new-tokens", arg, -1, MAX_NEW_TOKENS); break;
    case 't': g->temperature = parse_double("-t/--temperature", arg, 0.0, 1e6, NULL); break;
    case 'k': g->top_k = (int)parse_long("-k/--top-k", arg, 0, INT_MAX); break;
    case 'p': g->top_p = parse_double("-p/--top-p", arg, 1e-9, 1.0, " (the prompt is given with -i TEXT)"); break;
    case 's': g->seed = parse_seed(arg); *have_seed = 1; break;
    case OPT_IGNORE_EOS: g->ignore_eos = 1; break;
    case OPT_STOP: add_stop(g, arg); break;
    case OPT_KEEP: g->keep = parse_long("--keep", arg, 0, INT_MAX); break;
    case OPT_REPEAT_PENALTY: g->repeat_penalty = parse_double("--repeat-penalty", arg, 1e-3, 1e3, NULL); break;
    case OPT_REPEAT_LAST: g->repeat_last = parse_long("--repeat-last", arg, 1, INT_MAX); break;
    case OPT_NO_ECHO: g->echo = 0; break;
    case OPT_SAMPLES: g->samples = (int)parse_long("--samples", arg, 1, 1L << 30); break;
    default: return 0;
    }
    return 1;
}

/* One option of the modes, the model and the run (its value arg); exits for --help and --version. */
static void run_option(Options *o, int opt, const char *arg, char **argv, int max_block) {
    switch (opt) {
    case 'i': o->prompt = arg; break;
    case 'f': o->prompt_file = arg; break;
    case OPT_THREADS: o->threads = parse_long("--threads", arg, 1, 1024); break;
    case OPT_BLOCK: o->block = parse_long("--block", arg, 1, max_block); o->block_given = 1; break;
    case 'c': o->ctx = parse_long("-c/--ctx", arg, 1, 1L << 20); break;
    case OPT_CACHE: o->cache = parse_cache(arg); o->cache_given = 1; break;
    case OPT_TOKENIZE: set_mode(o, "--tokenize"); o->tokenize = 1; break;
    case OPT_IDS: o->ids_only = 1; break;
    case OPT_SPECIAL: o->special = 1; break;
    case OPT_PERPLEXITY: set_mode(o, "--perplexity"); o->perplexity_path = arg; break;
    case OPT_ATTENTION: set_mode(o, "--attention"); o->attention_path = arg; break;
    case OPT_INFO: set_mode(o, "--info"); o->info = 1; break;
    case OPT_LOGITS: set_mode(o, "--logits"); o->logits_path = arg; break;
    case OPT_CHAT: o->chat = 1; break;
    case OPT_SYSTEM: o->chat_options.system = arg; break;
    case OPT_MESSAGES: o->chat_options.messages_path = arg; break;
    case OPT_NO_GENERATION_PROMPT: o->chat_options.generation_prompt = 0; break;
    case OPT_VERBOSE: o->chat_options.verbose = 1; break;
    case OPT_THINK:
    case OPT_NO_THINK:
    case OPT_TEMPLATE_OPTION: {
        ChatOptions *c = &o->chat_options;
        if (c->n_template_options == TEMPLATE_OPTIONS) die("at most %d template options", TEMPLATE_OPTIONS);
        c->template_options[c->n_template_options++] = opt == OPT_THINK      ? "enable_thinking=true"
                                                       : opt == OPT_NO_THINK ? "enable_thinking=false" : arg;
        break;
    }
    case OPT_SERVE: set_mode(o, "--serve"); o->serve.address = arg; break;
    case OPT_SLOTS: o->serve.slots = (int)parse_long("--slots", arg, 1, 256); o->serve_flag_given = 1; break;
    case OPT_API_KEY:
        if (!*arg || strlen(arg) > 256) die("--api-key needs a key of 1 to 256 bytes");
        o->serve.api_key = arg;
        o->serve_flag_given = 1;
        break;
    case OPT_MAX_BODY: o->serve.max_body = (size_t)parse_long("--max-body", arg, 1024, 1L << 30); o->serve_flag_given = 1; break;
    case OPT_TIMEOUT: o->serve.timeout = parse_double("--timeout", arg, 0.01, 86400, NULL); o->serve_flag_given = 1; break;
    case 'h': usage(stdout, max_block); exit(0);
    case OPT_VERSION:
        printf("run %s (model file format version %u)\n", RUN_VERSION, MODEL_VERSION);
        exit(0);
    case ':': die("option '%s' needs a value (see --help)", argv[optind - 1]);
    default: die("unknown option '%s' (see --help)", argv[optind - 1]);
    }
}

/* Combinations that would leave a flag without effect are refused. */
static void check_combinations(const Options *o) {
    if (o->prompt && o->prompt_file) die("give the prompt with -i or -f, not both");
    if (o->chat && (o->prompt || o->prompt_file))
        die("--chat takes its turns from the terminal or stdin, or a conversation from --messages FILE, not -i/-f");
    if (!takes_prompt(o) && (o->prompt || o->prompt_file))
        die("%s takes no prompt (-i/-f): %s", o->mode,
            o->perplexity_path ? "it scores the file given to it" : "it reads only the model");
    if (o->ids_only && !o->tokenize) die("--ids only goes with --tokenize");
    if (o->logits_path && strcmp(o->logits_path, "-") == 0 && isatty(STDOUT_FILENO))
        die("--logits - writes binary float32 numbers, not text: redirect stdout to a file or a pipe, or give a file name");
    if (o->special && o->info) die("--special does nothing with --info (it encodes no text)");
    if (o->serve_flag_given && !o->serve.address) die("--slots, --api-key, --max-body and --timeout go with --serve");
    if (o->serve.address && o->chat) die("--serve and --chat are two modes: the server renders each request's messages");
    if (o->serve.address && o->generation_flag)
        die("%s does nothing with --serve: each request gives its own sampling options (docs/server.md)", o->generation_flag);
    if (o->serve.address && o->special) die("--special does nothing with --serve");
    if (o->mode && o->generation_flag) die("%s only affects generation, not %s", o->generation_flag, o->mode);
    /* --info reports the thread count, so it takes --threads */
    if ((o->tokenize || o->info) && o->block_given) die("--block does nothing with %s (it runs no model)", o->mode);
    if (o->tokenize && o->threads > 0) die("--threads does nothing with --tokenize (it runs no model)");
    if (o->tokenize && o->ctx > 0) die("--ctx does nothing with --tokenize (it runs no model)");
    if (o->tokenize && o->cache_given) die("--cache does nothing with --tokenize (it runs no model)");
    const ChatOptions *c = &o->chat_options;
    if (!o->chat && (c->system || c->messages_path || !c->generation_prompt || c->verbose || c->n_template_options))
        die("%s goes with --chat", c->system ? "--system" : c->messages_path ? "--messages" :
            c->verbose ? "--verbose" : c->n_template_options ? "--think, --no-think and --template-option" :
            "--no-generation-prompt");
    if (!o->chat) return;
    if (o->mode && !o->tokenize) die("--chat and %s are two modes: give one at a time", o->mode);
    if (o->tokenize && !c->messages_path) die("--chat --tokenize shows the tokens of a --messages FILE: give one");
    if (c->system && c->messages_path) die("--system and --messages: the messages file holds the system message");
    if (!c->generation_prompt && !o->tokenize) die("--no-generation-prompt only changes what --chat --tokenize shows");
    if (o->gen.samples > 1) die("--samples does not go with --chat: a conversation has one reply a turn");
    if (o->gen.keep >= 0) die("--keep does nothing with --chat (a full context drops the oldest turns)");
    if (!o->gen.echo) die("--no-echo does nothing with --chat (it echoes nothing)");
    if (o->special) die("--special does nothing with --chat (the template's special tokens are always tokens)");
}

static Options parse_options(int argc, char **argv, int max_block) {
    Options o = {.block = max_block, .cache = CACHE_F16, .chat_options = {.generation_prompt = 1},
                 .gen = {.max_new = 256, .samples = 1, .temperature = 1.0, .top_p = 0.9, .keep = -1, .echo = 1,
                         .repeat_penalty = 1.0, .repeat_last = 64},
                 .serve = {.slots = 4, .max_body = 1 << 20, .timeout = 10}};
    static const struct option options[] = {
        {"prompt", required_argument, 0, 'i'},
        {"prompt-file", required_argument, 0, 'f'},
        {"max-new-tokens", required_argument, 0, 'n'},
        {"temperature", required_argument, 0, 't'},
        {"top-k", required_argument, 0, 'k'},
        {"top-p", required_argument, 0, 'p'},
        {"seed", required_argument, 0, 's'},
        {"threads", required_argument, 0, OPT_THREADS},
        {"block", required_argument, 0, OPT_BLOCK},
        {"ctx", required_argument, 0, 'c'},
        {"cache", required_argument, 0, OPT_CACHE},
        {"ignore-eos", no_argument, 0, OPT_IGNORE_EOS},
        {"stop", required_argument, 0, OPT_STOP},
        {"keep", required_argument, 0, OPT_KEEP},
        {"repeat-penalty", required_argument, 0, OPT_REPEAT_PENALTY},
        {"repeat-last", required_argument, 0, OPT_REPEAT_LAST},
        {"no-echo", no_argument, 0, OPT_NO_ECHO},
        {"samples", required_argument, 0, OPT_SAMPLES},
        {"tokenize", no_argument, 0, OPT_TOKENIZE},
        {"ids", no_argument, 0, OPT_IDS},
        {"special", no_argument, 0, OPT_SPECIAL},
        {"perplexity", required_argument, 0, OPT_PERPLEXITY},
        {"attention", required_argument, 0, OPT_ATTENTION},
        {"info", no_argument, 0, OPT_INFO},
        {"logits", required_argument, 0, OPT_LOGITS},
        {"chat", no_argument, 0, OPT_CHAT},
        {"system", required_argument, 0, OPT_SYSTEM},
        {"messages", required_argument, 0, OPT_MESSAGES},
        {"no-generation-prompt", no_argument, 0, OPT_NO_GENERATION_PROMPT},
        {"verbose", no_argument, 0, OPT_VERBOSE},
        {"think", no_argument, 0, OPT_THINK},
        {"no-think", no_argument, 0, OPT_NO_THINK},
        {"template-option", required_argument, 0, OPT_TEMPLATE_OPTION},
        {"serve", required_argument, 0, OPT_SERVE},
        {"slots", required_argument, 0, OPT_SLOTS},
        {"api-key", required_argument, 0, OPT_API_KEY},
        {"max-body", required_argument, 0, OPT_MAX_BODY},
        {"timeout", required_argument, 0, OPT_TIMEOUT},
        {"help", no_argument, 0, 'h'},
        {"version", no_argument, 0, OPT_VERSION},
        {0, 0, 0, 0},
    };
    opterr = 0; /* we print our own one-line errors */
    int opt, have_seed = 0;
    while ((opt = getopt_long(argc, argv, ":i:f:n:t:k:p:s:c:h", options, NULL)) != -1) {
        if (!o.generation_flag) o.generation_flag = generation_only(opt);
        if (!generation_option(&o.gen, opt, optarg, &have_seed)) run_option(&o, opt, optarg, argv, max_block);
    }
    if (optind >= argc) die("no model file given (usage: run MODEL.bin [options], see --help)");
    if (optind + 1 < argc) die("unexpected argument '%s' (see --help)", argv[optind + 1]);
    o.model_path = argv[optind];
    check_combinations(&o);
    if (!have_seed) o.gen.seed = (uint64_t)time(NULL) ^ ((uint64_t)getpid() << 32);
    o.gen.adapt_threads = o.threads == 0;
    o.gen.encode = ENCODE_BOS | (o.special ? ENCODE_SPECIAL : 0);
    return o;
}

/* What people pass before they have exported anything: a GGUF file or a Hugging Face folder.
 * Each is named, with the command that converts it; anything else is left to the loader. */
static void check_model_path(const char *path) {
    static const char export_cmd[] = "/usr/bin/python3 export/export.py";
    struct stat st;
    if (stat(path, &st) != 0) return;
    if (S_ISDIR(st.st_mode)) {
        size_t n = strlen(path);
        int slash = n && path[n - 1] == '/';
        char *config = calloc_or_die(n + 16, "path");
        snprintf(config, n + 16, "%s%sconfig.json", path, slash ? "" : "/");
        int hf = access(config, R_OK) == 0;
        free(config);
        if (hf)
            die("'%s' is a Hugging Face folder: convert it first with `%s %s model.bin`, then run model.bin",
                path, export_cmd, path);
        char gguf[256] = "";
        int n_gguf = 0;
        DIR *dir = opendir(path);
        for (struct dirent *e; dir && (e = readdir(dir));) {
            size_t len = strlen(e->d_name);
            if (len > 5 && strcmp(e->d_name + len - 5, ".gguf") == 0 && n_gguf++ == 0 && len < sizeof gguf)
                memcpy(gguf, e->d_name, len + 1);
        }
        if (dir) closedir(dir);
        if (n_gguf && gguf[0])
            die("'%s' is a folder of %d .gguf file%s: convert one of them with `%s %s%s%s %.*s.bin`", path, n_gguf,
                n_gguf > 1 ? "s" : "", export_cmd, path, slash ? "" : "/", gguf, (int)strlen(gguf) - 5, gguf);
        die("'%s' is a folder, not a model file: give a file written by export/export.py", path);
    }
    FILE *f = S_ISREG(st.st_mode) ? fopen(path, "rb") : NULL;
    char magic[4] = {0};
    size_t got = f ? fread(magic, 1, 4, f) : 0;
    if (f) fclose(f);
    if (got == 4 && memcmp(magic, "GGUF", 4) == 0) {
        size_t n = strlen(path);
        int dot_gguf = n > 5 && strcmp(path + n - 5, ".gguf") == 0;
        die("'%s' is a GGUF file (llama.cpp's format): convert it first with `%s %s %.*s.bin`, then run that",
            path, export_cmd, path, (int)(dot_gguf ? n - 5 : n), path);
    }
}

/* The prompt: -i, -f (- for stdin), else stdin when it is not a terminal, else none. */
static uint8_t *read_prompt(const Options *o, size_t *len) {
    *len = 0;
    if (o->prompt_file) return read_file_or_die(o->prompt_file, len);
    if (o->prompt) {
        *len = strlen(o->prompt);
        uint8_t *text = calloc_or_die(*len + 1, "prompt");
        memcpy(text, o->prompt, *len);
        return text;
    }
    if (!isatty(0)) return read_file_or_die("-", len);
    return NULL;
}

#endif
