/* chat_repl.h: --chat on the command line (chat.h is the conversation itself): a conversation
 * typed on a terminal, with its commands and Ctrl-C; turns from stdin's lines; the next reply to
 * a messages file, or its tokens (--tokenize). Replies stream to stdout; notes and the timing
 * line go to stderr. docs/cli.md's "Chat" says what a person sees. */
#ifndef CHAT_REPL_H
#define CHAT_REPL_H

#include "util.h"

#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "chat.h"
#include "generate.h"
#include "json.h"
#include "load.h"
#include "output.h"
#include "sequence.h"
#include "sink.h"

/* --chat's options. */
#define TEMPLATE_OPTIONS 8

typedef struct {
    const char *system;        /* --system TEXT, or NULL */
    const char *messages_path; /* --messages FILE ("-": stdin), or NULL */
    int tokenize;              /* --tokenize: print the conversation's tokens */
    int generation_prompt;     /* 0: --no-generation-prompt */
    int verbose;               /* --verbose: each turn's timing line */
    const char *template_options[TEMPLATE_OPTIONS]; /* --template-option KEY=VALUE (--think:
                                                       enable_thinking=true, --no-think: =false) */
    int n_template_options;
} ChatOptions;

enum { TURN_END, TURN_LINE, TURN_INTERRUPTED };

/* Ctrl-C in a conversation on a terminal: counted here, acted on by the loops that read it (the
 * reply stops; at the prompt, a second one in a row ends the session). */
static volatile sig_atomic_t chat_interrupts;
static void on_chat_interrupt(int signal_number) { (void)signal_number; chat_interrupts++; }

/* Waits until stdin has a line to read (a terminal in canonical mode hands over whole lines) or
 * Ctrl-C was pressed; checked every tenth of a second, since the signal may land on any thread. */
static int wait_for_line(sig_atomic_t interrupts_before) {
    struct pollfd in = {.fd = STDIN_FILENO, .events = POLLIN};
    for (;;) {
        if (chat_interrupts != interrupts_before) return 0;
        int ready = poll(&in, 1, 100);
        if (ready > 0) return 1;
        if (ready < 0 && errno != EINTR) return 1; /* let getline report it */
    }
}

/* One turn from stdin: a line; on a terminal a line ending in a backslash goes on on the next
 * line. Returns TURN_END at the end of the input, TURN_INTERRUPTED for Ctrl-C at the prompt. */
static int read_turn(Buffer *turn, int terminal) {
    char *line = NULL;
    size_t cap = 0;
    sig_atomic_t interrupts = chat_interrupts;
    turn->n = 0;
    for (;;) {
        if (terminal) fputs(turn->n ? ". " : "> ", stderr);
        if (terminal && !wait_for_line(interrupts)) { free(line); return TURN_INTERRUPTED; }
        ssize_t len = getline(&line, &cap, stdin);
        if (len < 0 && terminal && errno == EINTR) { clearerr(stdin); free(line); return TURN_INTERRUPTED; }
        if (len < 0) {
            free(line);
            if (terminal) fputc('\n', stderr); /* Ctrl-D: what follows starts on a line of its own */
            return turn->n > 0 ? TURN_LINE : TURN_END;
        }
        if (len > 0 && line[len - 1] == '\n') len--;
        if (len > 0 && line[len - 1] == '\r') len--;
        if (terminal && len > 0 && line[len - 1] == '\\') {
            buffer_add(turn, (const uint8_t *)line, (size_t)len - 1);
            buffer_add(turn, (const uint8_t *)"\n", 1);
            continue;
        }
        buffer_add(turn, (const uint8_t *)line, (size_t)len);
        free(line);
        return TURN_LINE;
    }
}

static const char chat_help[] =
    "a line is a turn (end it with \\ to go on on the next line); commands:\n"
    "  /help          this list\n"
    "  /reset         start the conversation over (the system message stays)\n"
    "  /system TEXT   the system message becomes TEXT (/system alone: none)\n"
    "  /think, /no_think   reasoning on or off from the next turn (templates with enable_thinking)\n"
    "  /exit          end the session (also Ctrl-D, or Ctrl-C twice)\n"
    "  //TEXT         send /TEXT as a turn\n"
    "Ctrl-C stops a reply; the conversation goes on from what it said.\n";

/* A line starting with '/' on the terminal: one of the REPL's commands, answered on stderr.
 * Returns 0 when the session ends. */
static int chat_command(Conversation *c, const Buffer *turn) {
    Text line = {turn->s, turn->n};
    if (text_is(line, "/exit") || text_is(line, "/quit")) return 0;
    int thinking = chat_option(c->table, "enable_thinking");
    if (text_is(line, "/think") || text_is(line, "/no_think")) {
        if (thinking < 0) {
            fprintf(stderr, "this model's chat template has no thinking switch (enable_thinking)\n");
        } else { /* the conversation is rendered anew from the next turn; the cache keeps what agrees */
            c->options[thinking] = text_is(line, "/think");
            fprintf(stderr, "(reasoning %s from the next turn)\n", c->options[thinking] ? "on" : "off");
        }
    } else if (text_is(line, "/help")) {
        fputs(chat_help, stderr);
    } else if (text_is(line, "/reset")) {
        conversation_reset(c);
        fprintf(stderr, "(the conversation starts over%s)\n", c->n ? "; the system message stays" : "");
    } else if (text_is(line, "/system") || (line.n > 8 && memcmp(line.s, "/system ", 8) == 0)) {
        if (c->n && c->m[0].role == ROLE_SYSTEM) { /* the old one goes */
            free_message(&c->m[0]);
            memmove(c->m, c->m + 1, --c->n * sizeof *c->m);
        }
        if (line.n > 8) { /* the new one goes first */
            Error e;
            if (!conversation_add(c, ROLE_SYSTEM, line.s + 8, line.n - 8, &e)) {
                fprintf(stderr, "error: %s\n", e.message);
                return 1;
            }
            ChatMessage system = c->m[c->n - 1];
            memmove(c->m + 1, c->m, (c->n - 1) * sizeof *c->m);
            c->m[0] = system;
        }
        fprintf(stderr, line.n > 8 ? "(the system message is set)\n" : "(no system message)\n");
    } else {
        int len = 0;
        while ((size_t)len < line.n && len < 40 && line.s[len] != ' ') len++;
        fprintf(stderr, "unknown command '%.*s': /help lists the commands (//TEXT sends /TEXT)\n", len,
                (const char *)line.s);
    }
    return 1;
}

/* A reply's reasoning on the command line (chat.h's ThinkSplit keeps it apart): dimmed on
 * stdout on a terminal, else on stderr, each reasoning ending its line there, so that stdout
 * holds the answer alone. */
typedef struct {
    Sink *answer;
    int terminal;   /* stdout is a terminal: the reasoning goes there, dimmed */
    int line_open;  /* on stderr: reasoning written since its last newline */
} ReasoningShown;

static void show_reasoning(ThinkSplit *split, const uint8_t *bytes, size_t n) {
    ReasoningShown *r = split->context;
    if (r->terminal) {
        r->answer->text(r->answer, 0, (const uint8_t *)"\033[2m", 4);
        r->answer->text(r->answer, 0, bytes, n);
        r->answer->text(r->answer, 0, (const uint8_t *)"\033[0m", 4);
    } else {
        fwrite(bytes, 1, n, stderr);
        fflush(stderr);
        r->line_open = bytes[n - 1] != '\n';
    }
}

static void end_reasoning(ThinkSplit *split) {
    ReasoningShown *r = split->context;
    if (r->line_open) fputc('\n', stderr);
    r->line_open = 0;
}

static int show_answer(ThinkSplit *split, const uint8_t *bytes, size_t n) {
    ReasoningShown *r = split->context;
    return r->answer->text(r->answer, 0, bytes, n);
}

static int split_text(Sink *sink, int seq, const uint8_t *bytes, size_t n) {
    (void)seq;
    return think_split_text(sink->context, bytes, n);
}

static void split_finish(Sink *sink, int seq, Finish why) {
    ThinkSplit *split = sink->context;
    ReasoningShown *r = split->context;
    think_split_finish(split);
    r->answer->finish(r->answer, seq, why);
}

static void split_note(Sink *sink, const char *message) {
    ReasoningShown *r = ((ThinkSplit *)sink->context)->context;
    if (r->answer->note) r->answer->note(r->answer, message);
}

/* The reply on stdout: its text as it comes, then a newline; how it ended, on stderr. */
static int reply_text(Sink *sink, int seq, const uint8_t *bytes, size_t n) {
    (void)seq;
    output_bytes(sink->context, bytes, n);
    return 1;
}
static void reply_finish(Sink *sink, int seq, Finish why) {
    (void)seq, (void)why;
    output_finish(sink->context);
}
static void reply_note(Sink *sink, const char *message) {
    (void)sink;
    fprintf(stderr, "note: %s\n", message);
}

/* The next reply, printed; how it ended said as the person at the terminal needs it. Returns 0
 * with the error (the conversation is as before the turn). */
static int reply_printed(Conversation *c, const ChatOptions *o, Error *e) {
    Output out = {0};
    Sink sink = {.text = reply_text, .finish = reply_finish, .note = reply_note, .context = &out};
    ReasoningShown shown = {.answer = &sink, .terminal = isatty(STDOUT_FILENO)};
    ThinkSplit split = think_split(c->table, show_answer, show_reasoning, end_reasoning, &shown);
    Sink apart = {.text = split_text, .finish = split_finish, .note = split_note, .context = &split};
    if (!chat_reply(c, &apart, e)) return 0;
    if (c->reply_finish == FINISH_STOPPED)
        fprintf(stderr, "\nnote: the reply was stopped (Ctrl-C); Ctrl-C again or Ctrl-D ends the session\n");
    else if (c->reply_finish == FINISH_LENGTH)
        fprintf(stderr, "\nnote: the reply was cut at %ld tokens (-n)\n", c->g->max_new);
    else if (c->reply_finish == FINISH_CONTEXT)
        fprintf(stderr, "\nnote: the reply reached the end of the context of %d positions\n", c->d->n_ctx);
    write_or_die("\n", 1);
    flush_or_die();
    if (o->verbose)
        fprintf(stderr, "turn %ld: prompt %ld tokens (%ld computed) %.2f tok/s, generated %ld tokens %.2f tok/s\n",
                c->turns, c->reply_prompt, c->reply_computed,
                c->reply_prefill_seconds > 0 ? c->reply_computed / c->reply_prefill_seconds : 0.0, c->reply_generated,
                c->reply_decode_seconds > 0 ? c->reply_generated / c->reply_decode_seconds : 0.0);
    return 1;
}

/* --chat: see the top of this file and docs/cli.md's "Chat". */
static void chat(const Decoder *d, const ModelFile *f, const ChatOptions *o, const GenerateOptions *g,
                 const char *model_path, double load_seconds) {
    ChatTable table;
    Error e;
    if (!chat_table(&table, f, d->tokenizer, &e)) die("%s", e.message);
    if (!table.present)
        die("'%s' has no chat template (not an instruct model, or exported before chat): generate with -i instead", model_path);
    if (table.refusal.n)
        die("this model's chat template cannot be used: %.*s", (int)table.refusal.n, (const char *)table.refusal.s);
    Conversation c;
    conversation_init(&c, d, g, &table, 0);
    for (int k = 0; k < o->n_template_options; k++) { /* KEY=VALUE of a boolean option the template takes */
        const char *kv = o->template_options[k], *eq = strchr(kv, '=');
        char key[80];
        snprintf(key, sizeof key, "%.*s", eq ? (int)(eq - kv) : 0, kv);
        int option = eq ? chat_option(&table, key) : -1;
        if (option < 0) {
            char listed[200] = "";
            for (int i = 0; i < table.n_options; i++)
                snprintf(listed + strlen(listed), sizeof listed - strlen(listed), "%s%.*s", i ? ", " : "",
                         (int)table.options[i].name.n, (const char *)table.options[i].name.s);
            die("--template-option %s: this model's chat template takes %s%s", kv, table.n_options ? "" : "no options",
                listed);
        }
        if (strcmp(eq + 1, "true") && strcmp(eq + 1, "false"))
            die("--template-option %s: %s takes true or false", kv, key);
        c.options[option] = strcmp(eq + 1, "true") == 0;
    }
    if (o->system && !conversation_add(&c, ROLE_SYSTEM, (const uint8_t *)o->system, strlen(o->system), &e))
        die("%s", e.message);
    if (o->messages_path) {
        size_t len, n;
        char err[400];
        uint8_t *text = read_file_or_die(o->messages_path, &len);
        if (json_messages(text, len, &c.m, &n, err, sizeof err))
            die("messages '%s': %s", strcmp(o->messages_path, "-") ? o->messages_path : "standard input", err);
        c.n = c.cap = n;
        free(text);
        if (!chat_check(&table, c.m, c.n, &e)) die("%s", e.message);
    }
    if (o->tokenize) {
        long n;
        uint32_t *ids = chat_ids(&table, d->tokenizer, c.m, c.n, o->generation_prompt, c.options, &n, &e);
        if (!ids) die("%s", e.message);
        for (long i = 0; i < n; i++) printf(i ? " %u" : "%u", ids[i]);
        printf("\n");
        flush_or_die();
        free(ids);
    } else {
        fprintf(stderr, "seed: %llu\n", (unsigned long long)g->seed);
        if (!conversation_start(&c, &e)) die("%s", e.message);
        if (o->messages_path) {
            if (!reply_printed(&c, o, &e)) die("%s", e.message);
        } else {
            int terminal = isatty(STDIN_FILENO), read;
            Buffer turn = {0};
            struct sigaction on_ctrl_c = {.sa_handler = on_chat_interrupt}, before;
            if (terminal) {
                fprintf(stderr, "chat: a line is a turn; /help lists the commands; Ctrl-C stops a reply, "
                        "Ctrl-D ends\n");
                sigemptyset(&on_ctrl_c.sa_mask);
                sigaction(SIGINT, &on_ctrl_c, &before); /* no SA_RESTART: a read at the prompt returns */
                c.stop = &chat_interrupts;
            }
            while ((read = read_turn(&turn, terminal)) != TURN_END) {
                if (turn.failed) die("out of memory for the turn");
                if (read == TURN_INTERRUPTED) {
                    if (chat_interrupts > 1) { fputc('\n', stderr); break; }
                    fprintf(stderr, "\n(Ctrl-C again or Ctrl-D ends the session)\n");
                    continue;
                }
                chat_interrupts = 0;
                const uint8_t *text = turn.s;
                size_t len = turn.n;
                if (len > 0 && text[0] == '/') {
                    if (len > 1 && text[1] == '/') text++, len--; /* //TEXT: the turn is /TEXT */
                    else if (!chat_command(&c, &turn)) break;
                    else continue;
                }
                if (len == 0) continue;
                int ok = conversation_add(&c, ROLE_USER, text, len, &e);
                if (ok && !(ok = reply_printed(&c, o, &e))) c.n--, free_message(&c.m[c.n]); /* the turn goes too */
                if (!ok && !terminal) die("%s", e.message);
                if (!ok) fprintf(stderr, "error: %s\n", e.message); /* on a terminal the session goes on */
            }
            if (terminal) sigaction(SIGINT, &before, NULL);
            free(turn.s);
        }
        fprintf(stderr, "timing: load %.3f s, %ld turns, prompt %ld tokens (%ld computed, the rest from the cache) "
                "%.2f tok/s, generated %ld tokens %.2f tok/s\n", load_seconds, c.turns, c.prompt_tokens, c.computed,
                c.prefill_seconds > 0 ? c.computed / c.prefill_seconds : 0.0, c.generated,
                c.decode_seconds > 0 ? c.generated / c.decode_seconds : 0.0);
    }
    conversation_free(&c);
    free_chat_table(&table);
}

#endif
