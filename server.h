/* server.h: --serve: OpenAI's API over HTTP (docs/server.md), many requests decoded together.
 *
 * One thread talks to every client through poll(); the model's work runs on the team of threads
 * between polls. The decoder's caches are `slots`: a request's choice takes a free slot, its
 * prompt is prefilled there a block at a time between decode steps (so that the streams running
 * are not held up by a long prompt), and each decode step feeds one token of every slot decoding
 * through one forward pass (generate.h's decode_step). A slot keeps its cache when its request
 * ends: the next request sharing a prefix with it (the next turn of a conversation, the same
 * system prompt) takes that slot and computes only the rest. Requests beyond the slots wait in
 * order. A client gone frees its slots at once.
 *
 * The loop, each time round: poll the sockets (without waiting while the model has work); read
 * requests, answer the quick ones, queue the completions; give waiting requests free slots; one
 * block of one prompt; one decode step; write what is ready. */
#ifndef SERVER_H
#define SERVER_H

#include "util.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "api.h"
#include "chat.h"
#include "generate.h"
#include "sequence.h"
#include "sink.h"

#define SERVER_CONNECTIONS 64            /* open at once; more are told 503 */
#define SERVER_MAX_OUTPUT (64u << 20)    /* a client reading none of it is let go past this */

/* --serve's options (cli.h). */
typedef struct {
    const char *address;  /* [HOST:]PORT */
    int slots;            /* requests' choices decoded together */
    const char *api_key;  /* every request must carry "Authorization: Bearer KEY"; or NULL */
    size_t max_body;      /* bytes of a request's body */
    double timeout;       /* seconds a request may take to arrive, and a client to take its answer */
} ServeOptions;

typedef struct Connection Connection;

/* One choice of a request: where it runs, and its text on the way out. */
typedef struct {
    int slot;             /* -1: not running */
    int done;
    Finish finish;
    int stop_string;      /* it ended on one of the request's stop strings */
    Buffer held;          /* generated text not passed on yet: it may begin a stop string */
    ThinkSplit split;     /* the reasoning apart from the answer (chat) */
    Buffer content, reasoning; /* the whole answer, when not streamed */
    long generated;
    struct Job *job;
} Choice;

/* A completion request on its way. */
typedef struct Job {
    ApiRequest q;
    GenerateOptions g;    /* its sampling and length, as the sequences read them */
    uint32_t *ids;        /* (n_ids) its prompt's tokens */
    long n_ids, cached;   /* of them, taken from a slot's cache (the first choice's) */
    int empty_prompt;     /* a completion from no text at all */
    long number;          /* its id's number */
    time_t created;
    Choice *choices;      /* (q.n) */
    int finished;         /* choices done */
    const char *model;    /* the name answers carry */
    Connection *conn;
} Job;

enum { CONN_FREE, CONN_READING, CONN_QUEUED, CONN_ANSWERING, CONN_WRITING };

struct Connection {
    int fd, state;
    Buffer in, out;
    size_t sent;          /* of out */
    double deadline;      /* reading a request, or writing with the client not reading */
    int told_continue;    /* sent "100 Continue" */
    int peer_closed;      /* the client sends no more: not polled for reading */
    Job *job;
};

typedef struct {
    Sequence seq;         /* its cache is sequence k of the decoder's */
    Choice *choice;       /* running, or NULL: free */
    int prefilling;       /* its prompt is not all computed yet */
    double last_used;
} Slot;

typedef struct {
    const Decoder *d;
    const ChatTable *table;
    const ServeOptions *o;
    const char *model_name;
    Slot *slots;
    Connection conns[SERVER_CONNECTIONS];
    Job **queue;          /* waiting for slots, oldest first */
    int n_queue, cap_queue;
    Decoding x;
    GenerateOptions base; /* the team size's tuning */
    long requests, prompt_tokens, cached_tokens, generated_tokens, next_number;
    int next_prefill;     /* the slot whose prompt goes next (round robin) */
} Server;

static volatile sig_atomic_t server_stop;
static void on_server_signal(int signal_number) { (void)signal_number; server_stop = 1; }

/* ---- answers ----------------------------------------------------------------------------------- */

static void conn_error(Connection *c, const ApiError *e) {
    http_error(&c->out, e);
    c->state = CONN_WRITING;
}

static void sse(Connection *c, const Buffer *json) {
    buffer_add(&c->out, (const uint8_t *)"data: ", 6);
    buffer_add(&c->out, json->s ? json->s : (const uint8_t *)"", json->n);
    buffer_add(&c->out, (const uint8_t *)"\n\n", 2);
}

static const char *finish_reason(const Choice *ch) {
    return ch->finish == FINISH_LENGTH || ch->finish == FINISH_CONTEXT ? "length" : "stop";
}

/* A chunk's or a response's head: id, object, created, model. */
static void answer_head(Buffer *b, const Job *j, int chunk) {
    buffer_printf(b, "{\"id\": \"%s-%ld\", \"object\": \"%s\", \"created\": %lld, \"model\": ",
                  j->q.chat ? "chatcmpl" : "cmpl", j->number,
                  j->q.chat ? (chunk ? "chat.completion.chunk" : "chat.completion") : "text_completion",
                  (long long)j->created);
    buffer_json_string(b, (const uint8_t *)j->model, strlen(j->model));
}

static void usage_json(Buffer *b, const Job *j) {
    long generated = 0;
    for (int i = 0; i < j->q.n; i++) generated += j->choices[i].generated;
    buffer_printf(b, "\"usage\": {\"prompt_tokens\": %ld, \"completion_tokens\": %ld, \"total_tokens\": %ld, "
                  "\"prompt_tokens_details\": {\"cached_tokens\": %ld}}", j->n_ids, generated, j->n_ids + generated,
                  j->cached);
}

/* A streamed chunk of choice i: a piece of its answer or of its reasoning (field), or its finish
 * (bytes NULL). */
static void stream_chunk(Job *j, int i, const char *field, const uint8_t *bytes, size_t n) {
    Buffer b = {0};
    answer_head(&b, j, 1);
    buffer_printf(&b, ", \"choices\": [{\"index\": %d, ", i);
    if (j->q.chat) {
        buffer_printf(&b, "\"delta\": {");
        if (bytes) {
            buffer_printf(&b, "\"%s\": ", field);
            buffer_json_string(&b, bytes, n);
        }
        buffer_printf(&b, "}");
    } else {
        buffer_printf(&b, "\"text\": ");
        buffer_json_string(&b, bytes ? bytes : (const uint8_t *)"", bytes ? n : 0);
    }
    if (bytes) buffer_printf(&b, ", \"logprobs\": null, \"finish_reason\": null}]}");
    else buffer_printf(&b, ", \"logprobs\": null, \"finish_reason\": \"%s\"}]}", finish_reason(&j->choices[i]));
    sse(j->conn, &b);
    free(b.s);
}

static int answer_text(ThinkSplit *split, const uint8_t *bytes, size_t n) {
    Choice *ch = split->context;
    if (ch->job->q.stream) stream_chunk(ch->job, (int)(ch - ch->job->choices), "content", bytes, n);
    else buffer_add(&ch->content, bytes, n);
    return 1;
}

static void reasoning_text(ThinkSplit *split, const uint8_t *bytes, size_t n) {
    Choice *ch = split->context;
    if (ch->job->q.stream) stream_chunk(ch->job, (int)(ch - ch->job->choices), "reasoning_content", bytes, n);
    else buffer_add(&ch->reasoning, bytes, n);
}

/* The whole answer, once every choice is done; a stream's last chunks. */
static void job_answer(Job *j) {
    Connection *c = j->conn;
    Buffer b = {0};
    if (j->q.stream) {
        if (j->q.include_usage) {
            answer_head(&b, j, 1);
            buffer_printf(&b, ", \"choices\": [], ");
            usage_json(&b, j);
            buffer_printf(&b, "}");
            sse(c, &b);
        }
        buffer_add(&c->out, (const uint8_t *)"data: [DONE]\n\n", 14);
    } else {
        answer_head(&b, j, 0);
        buffer_printf(&b, ", \"choices\": [");
        for (int i = 0; i < j->q.n; i++) {
            Choice *ch = &j->choices[i];
            const uint8_t *content = ch->content.s ? ch->content.s : (const uint8_t *)"";
            buffer_printf(&b, "%s{\"index\": %d, ", i ? ", " : "", i);
            if (j->q.chat) {
                buffer_printf(&b, "\"message\": {\"role\": \"assistant\", \"content\": ");
                buffer_json_string(&b, content, ch->content.n);
                if (ch->reasoning.n) {
                    buffer_printf(&b, ", \"reasoning_content\": ");
                    buffer_json_string(&b, ch->reasoning.s, ch->reasoning.n);
                }
                buffer_printf(&b, "}");
            } else {
                buffer_printf(&b, "\"text\": ");
                buffer_json_string(&b, content, ch->content.n);
            }
            buffer_printf(&b, ", \"logprobs\": null, \"finish_reason\": \"%s\"}", finish_reason(ch));
        }
        buffer_printf(&b, "], ");
        usage_json(&b, j);
        buffer_printf(&b, "}");
        http_response(&c->out, 200, "application/json", b.s, b.n);
    }
    free(b.s);
    c->state = CONN_WRITING;
}

static void job_free(Job *j) {
    if (!j) return;
    for (int i = 0; j->choices && i < j->q.n; i++) {
        free(j->choices[i].held.s);
        free(j->choices[i].content.s);
        free(j->choices[i].reasoning.s);
    }
    free(j->choices);
    free(j->ids);
    api_request_free(&j->q);
    free(j);
}

/* ---- the text of a choice, on its way ------------------------------------------------------------ */

/* Where a stop string could still begin in held text: none of the bytes from there on can be
 * passed on yet. Returns the first such place (held->n: none). */
static size_t stop_hold(const Job *j, const Buffer *held) {
    size_t from = held->n;
    for (int k = 0; k < j->q.n_stop; k++)
        for (size_t len = j->q.stop_len[k] - 1 < held->n ? j->q.stop_len[k] - 1 : held->n; len > 0; len--)
            if (held->n - len < from && memcmp(held->s + held->n - len, j->q.stop[k], len) == 0) {
                from = held->n - len;
                break;
            }
    return from;
}

/* The choice's next text: passed on unless it reaches a stop string, which ends it there (the
 * stop string not passed on, as OpenAI's API does). 0: it ends. */
static int choice_text(Choice *ch, const uint8_t *bytes, size_t n) {
    Job *j = ch->job;
    if (!j->q.n_stop) return think_split_text(&ch->split, bytes, n);
    buffer_add(&ch->held, bytes, n);
    if (ch->held.failed) return 0;
    size_t first = ch->held.n;
    for (int k = 0; k < j->q.n_stop; k++) {
        long at = find_text(ch->held.s, ch->held.n, j->q.stop[k], j->q.stop_len[k]);
        if (at >= 0 && (size_t)at < first) first = (size_t)at;
    }
    if (first < ch->held.n) {
        think_split_text(&ch->split, ch->held.s, first);
        ch->held.n = 0;
        ch->stop_string = 1;
        return 0;
    }
    size_t pass = stop_hold(j, &ch->held);
    think_split_text(&ch->split, ch->held.s, pass);
    memmove(ch->held.s, ch->held.s + pass, ch->held.n - pass);
    ch->held.n -= pass;
    return 1;
}

/* ---- slots ----------------------------------------------------------------------------------- */

static void release_slot(Server *s, Choice *ch) {
    if (ch->slot < 0) return;
    Slot *slot = &s->slots[ch->slot];
    slot->choice = NULL;
    slot->prefilling = 0;
    slot->seq.options = NULL;
    slot->last_used = now_seconds();
    ch->slot = -1;
}

static void choice_finish(Server *s, Choice *ch, Finish why) {
    if (ch->done) return;
    if (ch->held.n && !ch->stop_string) think_split_text(&ch->split, ch->held.s, ch->held.n);
    ch->held.n = 0;
    think_split_finish(&ch->split);
    ch->done = 1;
    ch->finish = ch->stop_string ? FINISH_STOP : why;
    if (ch->slot >= 0) ch->generated = s->slots[ch->slot].seq.n_generated;
    s->generated_tokens += ch->generated;
    release_slot(s, ch);
    Job *j = ch->job;
    if (j->q.stream) stream_chunk(j, (int)(ch - j->choices), NULL, NULL, 0);
    if (++j->finished == j->q.n) job_answer(j);
}

/* The decode step's sink: sequence k is slot k. */
static int server_text(Sink *sink, int seq, const uint8_t *bytes, size_t n) {
    Server *s = sink->context;
    Choice *ch = s->slots[seq].choice;
    return ch ? choice_text(ch, bytes, n) : 0;
}
static void server_finish(Sink *sink, int seq, Finish why) {
    Server *s = sink->context;
    Choice *ch = s->slots[seq].choice;
    if (ch) choice_finish(s, ch, why);
}

/* Tokens at the start of ids[0..n) that slot's cache already holds. */
static long shared_prefix(const Slot *slot, const uint32_t *ids, long n) {
    const Sequence *q = &slot->seq;
    long same = 0;
    if (q->window) return 0;
    while (same < q->n_cached && same < n && q->tokens[same] == ids[same]) same++;
    return same;
}

/* The free slot for a prompt: the one whose cache shares most of it, if that keeps at least half
 * of the slot's cache (the previous turn of the same conversation keeps all of it); else the one
 * unused longest, so that a short common start (a template's first tokens) does not take the
 * cache of a conversation that may come back. */
static int pick_slot(const Server *s, const uint32_t *ids, long n) {
    int best = -1;
    long best_same = -1;
    for (int k = 0; k < s->o->slots; k++) {
        const Slot *slot = &s->slots[k];
        if (slot->choice) continue;
        long same = shared_prefix(slot, ids, n);
        if (2 * same < slot->seq.n_cached) same = 0;
        if (same > best_same || (same == best_same && slot->last_used < s->slots[best].last_used))
            best = k, best_same = same;
    }
    return best;
}

/* Choice ch of its job starts in a free slot: its prompt set (what the cache shares stays
 * computed), its sampler built. 0 with the error. */
static int start_choice(Server *s, Choice *ch, Error *e) {
    Job *j = ch->job;
    int k = pick_slot(s, j->ids, j->n_ids);
    Slot *slot = &s->slots[k];
    Sequence *q = &slot->seq;
    int i = (int)(ch - j->choices);
    TRY(sequence_set(s->d, q, j->ids, j->n_ids, e));
    if (i == 0) j->cached = q->n_cached;
    s->cached_tokens += q->n_cached;
    free_sampler(&q->sampler);
    if (!build_sampler(&q->sampler, s->d->vocab_size, j->g.temperature, j->g.top_k, j->g.top_p, j->g.seed + (uint64_t)i))
        return fail(e, "out of memory for the sampler");
    q->options = &j->g;
    q->text = tokenizer_decoder(s->d->tokenizer, !j->empty_prompt);
    q->held = (Utf8Hold){0};
    q->stop.tail_len = 0;
    q->n_generated = 0;
    q->done = 0;
    slot->choice = ch;
    slot->prefilling = 1;
    ch->slot = k;
    return 1;
}

static int free_slots(const Server *s) {
    int n = 0;
    for (int k = 0; k < s->o->slots; k++) n += !s->slots[k].choice;
    return n;
}

/* Waiting requests take free slots, in order: a request starts when all its choices can. */
static void start_waiting(Server *s) {
    while (s->n_queue && free_slots(s) >= s->queue[0]->q.n) {
        Job *j = s->queue[0];
        memmove(s->queue, s->queue + 1, (size_t)--s->n_queue * sizeof *s->queue);
        j->conn->state = CONN_ANSWERING;
        for (int i = 0; i < j->q.n; i++) {
            Choice *ch = &j->choices[i];
            Error e;
            if (j->g.max_new == 0) {
                choice_finish(s, ch, FINISH_LENGTH);
                continue;
            }
            if (!start_choice(s, ch, &e)) {
                fprintf(stderr, "error: request %ld: %s\n", j->number, e.message);
                choice_finish(s, ch, FINISH_STOPPED);
            }
        }
    }
}

/* The client went away: its slots go back, its request with it. */
static void cancel_job(Server *s, Job *j) {
    for (int i = 0; i < j->q.n; i++) {
        if (j->choices[i].slot >= 0) s->generated_tokens += s->slots[j->choices[i].slot].seq.n_generated;
        release_slot(s, &j->choices[i]);
    }
    for (int k = 0; k < s->n_queue; k++)
        if (s->queue[k] == j) {
            memmove(s->queue + k, s->queue + k + 1, (size_t)(s->n_queue - k - 1) * sizeof *s->queue);
            s->n_queue--;
            break;
        }
}

/* ---- requests ---------------------------------------------------------------------------------- */

static void health_answer(Server *s, Connection *c) {
    Buffer b = {0};
    int busy = s->o->slots - free_slots(s);
    buffer_printf(&b, "{\"status\": \"ok\", \"slots\": %d, \"slots_busy\": %d, \"waiting\": %d, \"requests\": %ld, "
                  "\"prompt_tokens\": %ld, \"cached_tokens\": %ld, \"generated_tokens\": %ld}", s->o->slots, busy,
                  s->n_queue, s->requests, s->prompt_tokens, s->cached_tokens, s->generated_tokens);
    http_response(&c->out, 200, "application/json", b.s, b.n);
    free(b.s);
    c->state = CONN_WRITING;
}

static void models_answer(Server *s, Connection *c) {
    Buffer b = {0};
    buffer_printf(&b, "{\"object\": \"list\", \"data\": [{\"id\": ");
    buffer_json_string(&b, (const uint8_t *)s->model_name, strlen(s->model_name));
    buffer_printf(&b, ", \"object\": \"model\", \"created\": 0, \"owned_by\": \"run\"}]}");
    http_response(&c->out, 200, "application/json", b.s, b.n);
    free(b.s);
    c->state = CONN_WRITING;
}

/* A note from rendering (turns dropped to fit the context) goes to the server's log. */
static void log_note(Sink *sink, const char *message) {
    (void)sink;
    fprintf(stderr, "note: %s\n", message);
}

/* The request's prompt as tokens, with its options; 0 with the error. */
static int job_prompt(Server *s, Job *j, ApiError *ae) {
    const Decoder *d = s->d;
    Error e;
    if (j->q.chat) {
        if (!s->table->present)
            return api_fail(ae, 400, "messages", "this model has no chat template: use /v1/completions");
        if (s->table->refusal.n)
            return api_fail(ae, 400, "messages", "this model's chat template cannot be used: %.*s",
                            (int)s->table->refusal.n, (const char *)s->table->refusal.s);
        Conversation c;
        conversation_init(&c, d, &j->g, s->table, 0);
        for (int k = 0; k < j->q.n_options; k++) {
            int option = chat_option(s->table, (const char *)j->q.option_name[k]);
            if (option >= 0) c.options[option] = j->q.option_value[k];
        }
        c.m = j->q.m;
        c.n = c.cap = j->q.n_messages;
        Sink notes = {.note = log_note};
        j->ids = c.n ? fitting_ids(&c, &notes, &j->n_ids, &e) : NULL;
        j->q.m = c.m;
        j->q.n_messages = c.n;
        if (!c.n) return api_fail(ae, 400, "messages", "messages is empty");
        if (!j->ids) return api_fail(ae, 400, "messages", "%s", e.message);
        return 1;
    }
    PromptTokens p;
    if (!prompt_tokens(d, j->q.prompt, j->q.prompt_len, ENCODE_BOS, &p, &e)) return api_fail(ae, 400, "prompt", "%s", e.message);
    j->ids = p.ids;
    j->n_ids = p.n_tokens;
    j->empty_prompt = p.empty;
    if (p.n_tokens >= d->n_ctx)
        return api_fail(ae, 400, "prompt", "the prompt is %ld tokens: the context holds %d with the reply", p.n_tokens,
                        d->n_ctx);
    return 1;
}

/* A whole request on connection c: answered at once, or queued for the slots. */
static void take_request(Server *s, Connection *c, const HttpRequest *h) {
    ApiError ae = {0};
    const uint8_t *body = c->in.s + h->head_len;
    if (s->o->api_key) {
        size_t n = strlen(s->o->api_key);
        if (strncmp(h->authorization, "Bearer ", 7) != 0 || strlen(h->authorization + 7) != n ||
            memcmp(h->authorization + 7, s->o->api_key, n) != 0) {
            api_fail(&ae, 401, NULL, "a request needs the header 'Authorization: Bearer KEY' with the server's key");
            conn_error(c, &ae);
            return;
        }
    }
    int get = strcmp(h->method, "GET") == 0, post = strcmp(h->method, "POST") == 0;
    int chat = strcmp(h->path, "/v1/chat/completions") == 0, completions = strcmp(h->path, "/v1/completions") == 0;
    if (strcmp(h->path, "/health") == 0 || strcmp(h->path, "/v1/models") == 0) {
        if (!get) api_fail(&ae, 405, NULL, "%s takes GET", h->path), conn_error(c, &ae);
        else if (h->path[1] == 'h') health_answer(s, c);
        else models_answer(s, c);
        return;
    }
    if (!chat && !completions) {
        api_fail(&ae, 404, NULL, "no such endpoint: %s (this server has /v1/chat/completions, /v1/completions, "
                 "/v1/models and /health)", h->path);
        conn_error(c, &ae);
        return;
    }
    if (!post) {
        api_fail(&ae, 405, NULL, "%s takes POST", h->path);
        conn_error(c, &ae);
        return;
    }
    Job *j = calloc(1, sizeof *j);
    if (!j) {
        api_fail(&ae, 503, NULL, "out of memory");
        conn_error(c, &ae);
        return;
    }
    if (!api_read_request(body, h->body_len, chat, &j->q, &ae)) {
        free(j);
        conn_error(c, &ae);
        return;
    }
    j->conn = c;
    j->model = s->model_name;
    j->number = ++s->next_number;
    j->created = time(NULL);
    j->g = (GenerateOptions){.max_new = j->q.max_tokens, .samples = 1, .temperature = j->q.temperature,
                             .top_p = j->q.top_p, .top_k = j->q.top_k, .repeat_penalty = j->q.repetition_penalty,
                             .repeat_last = 64, .keep = -1,
                             .seed = j->q.has_seed ? j->q.seed : (uint64_t)time(NULL) ^ ((uint64_t)j->number << 32)};
    int ok = 1;
    if (j->q.n > s->o->slots)
        ok = api_fail(&ae, 400, "n", "n is %d: this server decodes at most %d choices together (--slots)", j->q.n,
                      s->o->slots);
    if (ok) ok = job_prompt(s, j, &ae);
    if (ok && !(j->choices = calloc((size_t)j->q.n, sizeof *j->choices))) ok = api_fail(&ae, 503, NULL, "out of memory");
    if (ok && s->n_queue == s->cap_queue) {
        int cap = s->cap_queue ? 2 * s->cap_queue : 16;
        Job **q = realloc(s->queue, (size_t)cap * sizeof *q);
        if (!q) ok = api_fail(&ae, 503, NULL, "out of memory");
        else s->queue = q, s->cap_queue = cap;
    }
    if (!ok) {
        job_free(j);
        conn_error(c, &ae);
        return;
    }
    for (int i = 0; i < j->q.n; i++) {
        Choice *ch = &j->choices[i];
        ch->slot = -1;
        ch->job = j;
        ch->split = think_split(j->q.chat ? s->table : NULL, answer_text, reasoning_text, NULL, ch);
    }
    s->requests++;
    s->prompt_tokens += j->n_ids;
    c->job = j;
    c->state = CONN_QUEUED;
    if (j->q.stream) {
        buffer_printf(&c->out, "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\n"
                      "Connection: close\r\n\r\n");
        if (j->q.chat)
            for (int i = 0; i < j->q.n; i++) { /* OpenAI's first chunk: the role */
                Buffer b = {0};
                answer_head(&b, j, 1);
                buffer_printf(&b, ", \"choices\": [{\"index\": %d, \"delta\": {\"role\": \"assistant\", \"content\": \"\"}, "
                              "\"logprobs\": null, \"finish_reason\": null}]}", i);
                sse(c, &b);
                free(b.s);
            }
    }
    s->queue[s->n_queue++] = j;
}

/* ---- connections -------------------------------------------------------------------------------- */

static void close_conn(Server *s, Connection *c) {
    if (c->job) {
        cancel_job(s, c->job);
        job_free(c->job);
    }
    close(c->fd);
    free(c->in.s);
    free(c->out.s);
    *c = (Connection){.fd = -1};
}

/* What the client sent: a request read further, or (once it is answering) its going away. */
static void conn_read(Server *s, Connection *c) {
    uint8_t buf[65536];
    ssize_t got = recv(c->fd, buf, sizeof buf, 0);
    if (got < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return;
    if (got <= 0) { /* closed or broken: whatever it waited for is not wanted, but an answer
                       complete already is still sent */
        if (c->state != CONN_WRITING || got < 0) close_conn(s, c);
        else c->peer_closed = 1;
        return;
    }
    if (c->state != CONN_READING) return; /* bytes after a request are not read */
    buffer_add(&c->in, buf, (size_t)got);
    HttpRequest h;
    ApiError ae = {0};
    if (c->in.failed) {
        api_fail(&ae, 503, NULL, "out of memory");
        conn_error(c, &ae);
        return;
    }
    int whole = http_request(c->in.s, c->in.n, s->o->max_body, &h, &ae);
    if (whole < 0) conn_error(c, &ae);
    else if (whole == HTTP_WHOLE) take_request(s, c, &h);
    else if (h.head_len && h.expect_continue && !c->told_continue) {
        buffer_printf(&c->out, "HTTP/1.1 100 Continue\r\n\r\n");
        c->told_continue = 1;
    }
}

/* Sends what is ready; a connection whose answer is all sent is closed. */
static void conn_write(Server *s, Connection *c, double now) {
    while (c->sent < c->out.n) {
        ssize_t put = send(c->fd, c->out.s + c->sent, c->out.n - c->sent, MSG_NOSIGNAL);
        if (put < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) break;
        if (put <= 0) {
            close_conn(s, c);
            return;
        }
        c->sent += (size_t)put;
        c->deadline = now + s->o->timeout;
    }
    if (c->sent == c->out.n) {
        c->sent = c->out.n = 0;
        if (c->state == CONN_WRITING) {
            shutdown(c->fd, SHUT_WR);
            close_conn(s, c);
        }
    } else if (c->out.n - c->sent > SERVER_MAX_OUTPUT) {
        close_conn(s, c); /* a client that reads nothing while its answer grows */
    }
}

static void accept_clients(Server *s, int listener, double now) {
    for (;;) {
        int fd = accept(listener, NULL, NULL);
        if (fd < 0) return;
        fcntl(fd, F_SETFL, O_NONBLOCK);
        int one = 1;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        Connection *c = NULL;
        for (int i = 0; i < SERVER_CONNECTIONS && !c; i++)
            if (s->conns[i].state == CONN_FREE) c = &s->conns[i];
        if (!c) { /* too many: told so, in one try */
            static const char busy[] = "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\n"
                                       "Content-Length: 91\r\nConnection: close\r\n\r\n{\"error\": {\"message\": "
                                       "\"too many connections\", \"type\": \"server_error\", \"param\": null, \"code\": null}}";
            ssize_t put = send(fd, busy, sizeof busy - 1, MSG_NOSIGNAL);
            (void)put;
            close(fd);
            continue;
        }
        *c = (Connection){.fd = fd, .state = CONN_READING, .deadline = now + s->o->timeout};
    }
}

/* ---- the model's work -------------------------------------------------------------------------- */

/* One block of one prompt (round robin among the slots prefilling). Decoding slots' logits live
 * in the forward pass's buffer, which the block overwrites: they are kept first. */
static void prefill_block(Server *s) {
    const Decoder *d = s->d;
    int n = s->o->slots, k = -1;
    for (int i = 0; i < n && k < 0; i++) {
        int c = (s->next_prefill + i) % n;
        if (s->slots[c].choice && s->slots[c].prefilling) k = c;
    }
    if (k < 0) return;
    s->next_prefill = (k + 1) % n;
    for (int i = 0; i < n; i++) {
        Sequence *q = &s->slots[i].seq;
        if (s->slots[i].choice && !s->slots[i].prefilling && q->logits != q->own_logits) {
            memcpy(q->own_logits, q->logits, (size_t)d->vocab_size * sizeof(float));
            q->logits = q->own_logits;
        }
    }
    Slot *slot = &s->slots[k];
    Sequence *q = &slot->seq;
    const float *logits = sequence_feed(d, q, next_block(d, q), 0);
    if (q->window + q->n_cached == q->n_tokens) {
        memcpy(q->own_logits, logits, (size_t)d->vocab_size * sizeof(float));
        q->logits = q->own_logits;
        slot->prefilling = 0;
    }
}

/* One decode step of every slot decoding. */
static void decode_slots(Server *s) {
    Sequence *active[256];
    int n = 0;
    for (int k = 0; k < s->o->slots; k++)
        if (s->slots[k].choice && !s->slots[k].prefilling) active[n++] = &s->slots[k].seq;
    if (!n) return;
    Error e;
    if (decode_step(&s->x, active, n, &e) < 0) { /* out of memory: those requests end as they are */
        fprintf(stderr, "error: %s\n", e.message);
        for (int k = 0; k < s->o->slots; k++)
            if (s->slots[k].choice && !s->slots[k].prefilling) choice_finish(s, s->slots[k].choice, FINISH_STOPPED);
    }
}

/* ---- the server ----------------------------------------------------------------------------- */

/* A listening socket on [HOST:]PORT; -1 with the error. */
static int listen_on(const char *address, char *shown, size_t shown_size, Error *e) {
    char host[256] = "127.0.0.1";
    const char *colon = strrchr(address, ':'), *port = colon ? colon + 1 : address;
    if (colon) {
        size_t n = (size_t)(colon - address);
        if (n >= sizeof host) return fail(e, "--serve %s: the host is too long", address), -1;
        memcpy(host, address, n);
        host[n] = 0;
        if (n >= 2 && host[0] == '[' && host[n - 1] == ']') memmove(host, host + 1, n - 2), host[n - 2] = 0;
    }
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM, .ai_flags = AI_PASSIVE}, *found;
    int rc = getaddrinfo(host, port, &hints, &found);
    if (rc) return fail(e, "--serve %s: %s", address, gai_strerror(rc)), -1;
    int fd = -1;
    for (struct addrinfo *a = found; a && fd < 0; a = a->ai_next) {
        fd = socket(a->ai_family, a->ai_socktype, a->ai_protocol);
        int one = 1;
        if (fd >= 0) setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
        if (fd >= 0 && (bind(fd, a->ai_addr, a->ai_addrlen) || listen(fd, 128))) {
            fail(e, "--serve %s: %s", address, strerror(errno));
            close(fd);
            fd = -1;
        }
        if (fd >= 0) {
            struct sockaddr_storage at;
            socklen_t len = sizeof at;
            char name[INET6_ADDRSTRLEN] = "?";
            getsockname(fd, (struct sockaddr *)&at, &len);
            int v6 = at.ss_family == AF_INET6;
            inet_ntop(at.ss_family, v6 ? (void *)&((struct sockaddr_in6 *)&at)->sin6_addr
                                       : (void *)&((struct sockaddr_in *)&at)->sin_addr, name, sizeof name);
            snprintf(shown, shown_size, "http://%s%s%s:%d", v6 ? "[" : "", name, v6 ? "]" : "",
                     ntohs(v6 ? ((struct sockaddr_in6 *)&at)->sin6_port : ((struct sockaddr_in *)&at)->sin_port));
        }
    }
    if (fd < 0 && !e->message[0]) fail(e, "--serve %s: no address to listen on", address);
    freeaddrinfo(found);
    if (fd >= 0) fcntl(fd, F_SETFL, O_NONBLOCK);
    return fd;
}

/* Whether the address is this machine's loopback only (no key needed). */
static int loopback_only(const char *address) {
    const char *colon = strrchr(address, ':');
    if (!colon) return 1;
    size_t n = (size_t)(colon - address);
    return (n == 9 && strncmp(address, "127.0.0.1", 9) == 0) || (n == 9 && strncmp(address, "localhost", 9) == 0) ||
           (n == 5 && strncmp(address, "[::1]", 5) == 0);
}

/* --serve: see the top of this file and docs/server.md. Returns when SIGINT or SIGTERM comes. */
static void serve(const Decoder *d, const ModelFile *f, const ServeOptions *o, const GenerateOptions *g,
                  const char *model_path) {
    Error e = {0};
    ChatTable table;
    if (!chat_table(&table, f, d->tokenizer, &e)) die("%s", e.message);
    if (!o->api_key && !loopback_only(o->address))
        die("--serve %s listens beyond this machine: give --api-key KEY, which every request must then carry",
            o->address);
    const char *slash = strrchr(model_path, '/');
    Server s = {.d = d, .table = &table, .o = o, .model_name = slash ? slash + 1 : model_path};
    s.base = (GenerateOptions){.adapt_threads = g->adapt_threads, .samples = 1};
    Sink sink = {.text = server_text, .finish = server_finish, .note = log_note, .context = &s};
    if (!d->reserve(d->model, d->n_ctx, &e) || !decoding_init(&s.x, d, &s.base, &sink, -1, o->slots, &e))
        die("%s", e.message);
    s.slots = calloc_or_die((size_t)o->slots * sizeof *s.slots, "the slots");
    for (int k = 0; k < o->slots; k++)
        if (!sequence_init(&s.slots[k].seq, k, 1024, d->vocab_size, &e)) die("%s", e.message);
    for (int i = 0; i < SERVER_CONNECTIONS; i++) s.conns[i] = (Connection){.fd = -1};
    char shown[300];
    int listener = listen_on(o->address, shown, sizeof shown, &e);
    if (listener < 0) die("%s", e.message);
    /* kept to the end: a second signal while the server winds down changes nothing */
    struct sigaction on_stop = {.sa_handler = on_server_signal};
    sigemptyset(&on_stop.sa_mask);
    sigaction(SIGINT, &on_stop, NULL);
    sigaction(SIGTERM, &on_stop, NULL);
    fprintf(stderr, "listening on %s (model %s, %d slots of %d positions%s)\n", shown, s.model_name, o->slots,
            d->n_ctx, table.present ? ", chat" : ", no chat template: completions only");
    struct pollfd fds[SERVER_CONNECTIONS + 1];
    Connection *of[SERVER_CONNECTIONS + 1];
    double stopping_since = 0;
    for (;;) {
        double now = now_seconds();
        if (server_stop && !stopping_since) { /* no new requests; those running end as they are */
            stopping_since = now;
            close(listener);
            listener = -1;
            for (int k = 0; k < o->slots; k++)
                if (s.slots[k].choice) choice_finish(&s, s.slots[k].choice, FINISH_STOPPED);
            for (int i = 0; i < SERVER_CONNECTIONS; i++) {
                Connection *c = &s.conns[i];
                ApiError ae = {0};
                if (c->state == CONN_READING) close_conn(&s, c);
                else if (c->state == CONN_QUEUED) {
                    cancel_job(&s, c->job);
                    job_free(c->job);
                    c->job = NULL;
                    api_fail(&ae, 503, NULL, "the server is stopping");
                    if (c->out.n) { /* a stream's headers are out: it ends */
                        buffer_add(&c->out, (const uint8_t *)"data: [DONE]\n\n", 14);
                        c->state = CONN_WRITING;
                    } else {
                        conn_error(c, &ae);
                    }
                }
            }
        }
        int n = 0, busy = 0, open = 0;
        for (int k = 0; k < o->slots; k++) busy |= s.slots[k].choice != NULL;
        if (listener >= 0) fds[n] = (struct pollfd){.fd = listener, .events = POLLIN}, of[n++] = NULL;
        for (int i = 0; i < SERVER_CONNECTIONS; i++) {
            Connection *c = &s.conns[i];
            if (c->state == CONN_FREE) continue;
            open++;
            fds[n] = (struct pollfd){.fd = c->fd, .events = (short)((c->peer_closed ? 0 : POLLIN) |
                                                                    (c->out.n > c->sent ? POLLOUT : 0))};
            of[n++] = c;
        }
        if (stopping_since && (!open || now - stopping_since > 5)) break;
        int ready = poll(fds, (nfds_t)n, busy ? 0 : 100);
        if (ready < 0 && errno != EINTR) die("poll: %s", strerror(errno));
        now = now_seconds();
        for (int i = 0; ready > 0 && i < n; i++) {
            if (!fds[i].revents) continue;
            if (!of[i]) accept_clients(&s, listener, now);
            else if (of[i]->state != CONN_FREE && (fds[i].revents & (POLLIN | POLLHUP | POLLERR))) conn_read(&s, of[i]);
        }
        for (int i = 0; i < SERVER_CONNECTIONS; i++) { /* too slow to ask, or to take the answer */
            Connection *c = &s.conns[i];
            int waiting_on_client = c->state == CONN_READING || (c->out.n > c->sent && c->state == CONN_WRITING);
            if (c->state != CONN_FREE && waiting_on_client && now > c->deadline) {
                if (c->state == CONN_READING && c->in.n) {
                    ApiError ae = {0};
                    api_fail(&ae, 408, NULL, "the request did not arrive within %g seconds", o->timeout);
                    conn_error(c, &ae);
                    c->deadline = now + o->timeout;
                } else {
                    close_conn(&s, c);
                }
            }
        }
        start_waiting(&s);
        prefill_block(&s);
        decode_slots(&s);
        for (int i = 0; i < SERVER_CONNECTIONS; i++)
            if (s.conns[i].state != CONN_FREE && s.conns[i].out.n > s.conns[i].sent) conn_write(&s, &s.conns[i], now);
            else if (s.conns[i].state == CONN_WRITING) conn_write(&s, &s.conns[i], now);
    }
    for (int i = 0; i < SERVER_CONNECTIONS; i++)
        if (s.conns[i].state != CONN_FREE) close_conn(&s, &s.conns[i]);
    if (listener >= 0) close(listener);
    fprintf(stderr, "stopped: %ld requests, prompt %ld tokens (%ld from the cache), generated %ld tokens\n",
            s.requests, s.prompt_tokens, s.cached_tokens, s.generated_tokens);
    decoding_free(&s.x);
    for (int k = 0; k < o->slots; k++) sequence_free(&s.slots[k].seq);
    free(s.slots);
    free(s.queue);
    free_chat_table(&table);
}

#endif
