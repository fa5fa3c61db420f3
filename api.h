/* api.h: OpenAI's API as the server reads and writes it (docs/server.md): an HTTP request's head
 * and body taken apart, a completion request's JSON read into what generation needs, and the
 * JSON of the answers written. Everything here is pure (bytes in, a struct or bytes out), so
 * that the fuzzer (tests/fuzz/fuzz_request.c) reaches every line; server.h does the sockets.
 *
 * A request is a stranger's: every byte is bounded and checked, and what cannot be honoured is
 * refused with a status and one line naming the field, never answered wrongly in silence. */
#ifndef API_H
#define API_H

#include "util.h"

#include <ctype.h>
#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "chat.h"
#include "json.h"
#include "utf8.h"

/* An answer that is an error: the HTTP status, OpenAI's error object's message, and the field
 * it names (empty: none). */
typedef struct {
    int status;
    char message[400];
    char param[64];
} ApiError;

__attribute__((format(printf, 4, 5)))
static int api_fail(ApiError *e, int status, const char *param, const char *fmt, ...) {
    e->status = status;
    snprintf(e->param, sizeof e->param, "%s", param ? param : "");
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->message, sizeof e->message, fmt, ap);
    va_end(ap);
    return 0;
}

/* ---- HTTP/1.1 requests (RFC 9112), as far as a JSON API needs ---------------------------------- */

#define HTTP_MAX_HEAD 16384   /* the request line and the headers */
#define HTTP_MAX_HEADERS 100

typedef struct {
    char method[8];           /* GET, POST */
    char path[256];           /* the target without its query */
    size_t head_len;          /* bytes of the request line and headers, blank line included */
    size_t body_len;          /* Content-Length (0 without one) */
    int expect_continue;      /* Expect: 100-continue: the client waits for a go-ahead */
    char authorization[300];  /* the Authorization header's value, or empty */
} HttpRequest;

enum { HTTP_MORE = 0, HTTP_WHOLE = 1 };

/* One line of the head at s[0..n) ending at the next "\n" (a "\r" before it dropped): its
 * length, or -1 when the head holds no more lines. */
static long http_line(const uint8_t *s, size_t n, size_t *next) {
    const uint8_t *nl = memchr(s, '\n', n);
    if (!nl) return -1;
    *next = (size_t)(nl - s) + 1;
    size_t len = (size_t)(nl - s);
    if (len && s[len - 1] == '\r') len--;
    return (long)len;
}

/* The request in buf[0..n) so far: HTTP_WHOLE (head and body all there), HTTP_MORE (not yet:
 * r->head_len is nonzero once the head is whole), or -1 with the error (its status). The body
 * may be at most max_body bytes. */
static int http_request(const uint8_t *buf, size_t n, size_t max_body, HttpRequest *r, ApiError *e) {
    *r = (HttpRequest){0};
    size_t end = 0;
    for (size_t i = 0; i + 1 < n && !end; i++) { /* the blank line: "\r\n\r\n" or "\n\n" */
        if (buf[i] == '\n' && buf[i + 1] == '\n') end = i + 2;
        else if (buf[i] == '\n' && buf[i + 1] == '\r' && i + 2 < n && buf[i + 2] == '\n') end = i + 3;
    }
    if (!end) {
        if (n > HTTP_MAX_HEAD) return api_fail(e, 431, NULL, "the request's headers are over %d bytes", HTTP_MAX_HEAD), -1;
        for (size_t i = 0; i < n; i++)
            if (buf[i] == 0) return api_fail(e, 400, NULL, "the request holds a NUL byte: not HTTP"), -1;
        return HTTP_MORE;
    }
    if (end > HTTP_MAX_HEAD) return api_fail(e, 431, NULL, "the request's headers are over %d bytes", HTTP_MAX_HEAD), -1;
    size_t at = 0, next;
    long len = http_line(buf, end, &next);
    /* the request line: METHOD SP TARGET SP HTTP/1.x */
    const uint8_t *line = buf;
    const uint8_t *sp1 = len > 0 ? memchr(line, ' ', (size_t)len) : NULL;
    const uint8_t *sp2 = sp1 ? memchr(sp1 + 1, ' ', (size_t)(line + len - sp1 - 1)) : NULL;
    if (!sp2 || sp1 == line || sp2 == sp1 + 1 || line + len - sp2 - 1 != 8 || memcmp(sp2 + 1, "HTTP/1.", 7) != 0 ||
        (sp2[8] != '0' && sp2[8] != '1'))
        return api_fail(e, 400, NULL, "the request line is not 'METHOD /path HTTP/1.1'"), -1;
    size_t method_len = (size_t)(sp1 - line), target_len = (size_t)(sp2 - sp1 - 1);
    for (size_t i = 0; i < method_len; i++)
        if (line[i] < 'A' || line[i] > 'Z') return api_fail(e, 400, NULL, "the request's method is not a word in capitals"), -1;
    if (method_len >= sizeof r->method) return api_fail(e, 405, NULL, "the method is not GET or POST"), -1;
    memcpy(r->method, line, method_len);
    const uint8_t *target = sp1 + 1, *query = memchr(target, '?', target_len);
    size_t path_len = query ? (size_t)(query - target) : target_len;
    if (target[0] != '/') return api_fail(e, 400, NULL, "the request's target is not a path starting with '/'"), -1;
    if (path_len >= sizeof r->path) return api_fail(e, 414, NULL, "the request's path is over %zu bytes", sizeof r->path - 1), -1;
    for (size_t i = 0; i < target_len; i++)
        if (target[i] <= 0x20 || target[i] >= 0x7F) return api_fail(e, 400, NULL, "the request's target holds a byte URLs do not"), -1;
    memcpy(r->path, target, path_len);
    int have_length = 0, headers = 0;
    for (at = next; at < end;) {
        len = http_line(buf + at, end - at, &next);
        if (len <= 0) break; /* the blank line */
        const uint8_t *h = buf + at;
        at += next;
        if (++headers > HTTP_MAX_HEADERS) return api_fail(e, 431, NULL, "the request has over %d headers", HTTP_MAX_HEADERS), -1;
        const uint8_t *colon = memchr(h, ':', (size_t)len);
        if (!colon || colon == h) return api_fail(e, 400, NULL, "a header line has no 'name:'"), -1;
        size_t name_len = (size_t)(colon - h);
        for (size_t i = 0; i < name_len; i++)
            if (h[i] <= 0x20 || h[i] >= 0x7F) return api_fail(e, 400, NULL, "a header's name holds a space or a byte that is not a letter"), -1;
        const uint8_t *v = colon + 1, *v_end = h + len;
        for (const uint8_t *c = v; c < v_end; c++)
            if ((*c < 0x20 && *c != '\t') || *c == 0x7F) return api_fail(e, 400, NULL, "a header's value holds a control byte"), -1;
        while (v < v_end && (*v == ' ' || *v == '\t')) v++;
        while (v_end > v && (v_end[-1] == ' ' || v_end[-1] == '\t')) v_end--;
        size_t v_len = (size_t)(v_end - v);
#define HEADER_IS(s) (name_len == sizeof(s) - 1 && strncasecmp((const char *)h, s, name_len) == 0)
        if (HEADER_IS("content-length")) {
            size_t value = 0;
            if (!v_len) return api_fail(e, 400, NULL, "Content-Length is empty"), -1;
            for (size_t i = 0; i < v_len; i++) {
                if (v[i] < '0' || v[i] > '9') return api_fail(e, 400, NULL, "Content-Length is not a number"), -1;
                if (value > (SIZE_MAX - 9) / 10) return api_fail(e, 413, NULL, "the body is over %zu bytes (--max-body)", max_body), -1;
                value = value * 10 + (size_t)(v[i] - '0');
            }
            if (have_length && value != r->body_len) return api_fail(e, 400, NULL, "two different Content-Length headers"), -1;
            have_length = 1;
            r->body_len = value;
        } else if (HEADER_IS("transfer-encoding")) {
            return api_fail(e, 501, NULL, "a body sent with Transfer-Encoding is not read here: send it with Content-Length"), -1;
        } else if (HEADER_IS("expect")) {
            if (v_len != 12 || strncasecmp((const char *)v, "100-continue", 12) != 0)
                return api_fail(e, 417, NULL, "the only Expect this server meets is 100-continue"), -1;
            r->expect_continue = 1;
        } else if (HEADER_IS("authorization")) {
            if (v_len >= sizeof r->authorization) return api_fail(e, 401, NULL, "the Authorization header is too long"), -1;
            memcpy(r->authorization, v, v_len);
            r->authorization[v_len] = 0;
        }
#undef HEADER_IS
    }
    r->head_len = end;
    if (strcmp(r->method, "POST") == 0 && !have_length)
        return api_fail(e, 411, NULL, "a POST request needs a Content-Length"), -1;
    if (r->body_len > max_body) return api_fail(e, 413, NULL, "the body is over %zu bytes (--max-body)", max_body), -1;
    return n - end >= r->body_len ? HTTP_WHOLE : HTTP_MORE;
}

/* ---- the completion requests ------------------------------------------------------------------ */

#define API_STOPS 16          /* stop strings a request may give */
#define API_STOP_BYTES 256
#define API_OPTIONS 8         /* chat_template_kwargs a request may give */

typedef struct {
    int chat;                 /* /v1/chat/completions: messages; else /v1/completions: prompt */
    ChatMessage *m;           /* (n_messages) the conversation, owned */
    size_t n_messages;
    uint8_t *prompt;          /* (prompt_len) the prompt, owned */
    size_t prompt_len;
    long max_tokens;          /* -1: until the context ends */
    double temperature, top_p, repetition_penalty;
    int top_k;
    int has_seed;
    uint64_t seed;
    uint8_t *stop[API_STOPS]; /* owned; the text ends before the first one generated */
    size_t stop_len[API_STOPS];
    int n_stop;
    int stream, include_usage;
    int n;                    /* choices */
    uint8_t *option_name[API_OPTIONS]; /* chat_template_kwargs, owned, with their values */
    size_t option_len[API_OPTIONS];
    int option_value[API_OPTIONS];
    int n_options;
} ApiRequest;

static void api_request_free(ApiRequest *q) {
    free_messages(q->m, q->n_messages);
    free(q->prompt);
    for (int i = 0; i < q->n_stop; i++) free(q->stop[i]);
    for (int i = 0; i < q->n_options; i++) free(q->option_name[i]);
    memset(q, 0, sizeof *q);
}

/* The JSON reader's problem as a 400 naming the field being read. */
static int json_error(ApiError *e, JsonReader *r, const char *param) {
    return api_fail(e, 400, param, "%s%s%s", param ? param : "", param ? ": " : "", r->error[0] ? r->error : "malformed JSON");
}

/* The value next is null (taken). */
static int json_null_next(JsonReader *r) {
    json_space(r);
    if (r->n - r->at >= 4 && memcmp(r->s + r->at, "null", 4) == 0) { r->at += 4; return 1; }
    return 0;
}

/* A number value; 0 with the error naming param. */
static int json_read_number(JsonReader *r, const char *param, double *v, char *text, size_t text_size, ApiError *e) {
    json_space(r);
    size_t start = r->at;
    if (strcmp(json_kind(r), "a number") != 0)
        return api_fail(e, 400, param, "%s must be a number, not %s", param, json_kind(r));
    if (!json_number(r)) return json_error(e, r, param);
    size_t len = r->at - start;
    if (len >= text_size) return api_fail(e, 400, param, "%s has over %zu digits", param, text_size - 1);
    memcpy(text, r->s + start, len);
    text[len] = 0;
    *v = strtod(text, NULL);
    return 1;
}

static int json_read_double(JsonReader *r, const char *param, double lo, double hi, double *v, ApiError *e) {
    char text[64];
    if (!json_read_number(r, param, v, text, sizeof text, e)) return 0;
    if (!(*v >= lo && *v <= hi)) return api_fail(e, 400, param, "%s must be between %g and %g, got %s", param, lo, hi, text);
    return 1;
}

static int json_read_long(JsonReader *r, const char *param, long lo, long hi, long *v, ApiError *e) {
    char text[64];
    double d;
    if (!json_read_number(r, param, &d, text, sizeof text, e)) return 0;
    if (d != floor(d) || !(d >= (double)lo && d <= (double)hi))
        return api_fail(e, 400, param, "%s must be a whole number from %ld to %ld, got %s", param, lo, hi, text);
    *v = (long)d;
    return 1;
}

static int json_read_bool(JsonReader *r, const char *param, int *v, ApiError *e) {
    json_space(r);
    const char *kind = json_kind(r);
    if (strcmp(kind, "a boolean") != 0) return api_fail(e, 400, param, "%s must be true or false, not %s", param, kind);
    *v = r->s[r->at] == 't';
    if (!json_literal(r, *v ? "true" : "false")) return json_error(e, r, param);
    return 1;
}

static int json_read_string(JsonReader *r, const char *param, uint8_t **s, size_t *len, ApiError *e) {
    const char *kind = json_kind(r);
    if (strcmp(kind, "a string") != 0) return api_fail(e, 400, param, "%s must be a string, not %s", param, kind);
    if (!json_string(r, s, len)) return json_error(e, r, param);
    return 1;
}

/* Reads an object's members one at a time: 1 with the next key (owned by the caller), 0 at
 * its end, -1 on error. */
static int json_next_member(JsonReader *r, int *first, uint8_t **key, size_t *key_len) {
    json_space(r);
    if (*first) {
        *first = 0;
        if (r->at < r->n && r->s[r->at] == '}') { r->at++; return 0; }
    } else {
        if (json_comma(r)) goto read_key;
        if (r->error[0] || !json_expect(r, '}', "expected ',' or '}' in an object")) return -1;
        return 0;
    }
read_key:
    if (!json_string(r, key, key_len)) return -1;
    if (!json_expect(r, ':', "expected ':' after a key")) { free(*key); return -1; }
    return 1;
}

/* The value next is what a client sends for "none of this" (null, false, 0 however written, "",
 * [], {}): a field the server cannot honour is welcome with it. */
static int json_empty_next(JsonReader *r) {
    json_space(r);
    if (r->at >= r->n) return 0;
    if (strcmp(json_kind(r), "a number") == 0) { /* 0, 0.0, -0e5: zero however written */
        size_t start = r->at;
        char text[64];
        if (!json_number(r) || r->at - start >= sizeof text) { r->at = start; r->error[0] = 0; return 0; }
        memcpy(text, r->s + start, r->at - start);
        text[r->at - start] = 0;
        if (strtod(text, NULL) == 0.0) return 1;
        r->at = start;
        return 0;
    }
    static const char *const empty[] = {"null", "false", "\"\"", "[]", "{}"};
    for (size_t k = 0; k < sizeof empty / sizeof *empty; k++) {
        size_t n = strlen(empty[k]);
        if (r->n - r->at >= n && memcmp(r->s + r->at, empty[k], n) == 0) {
            size_t after = r->at + n;
            if (after < r->n && (isalnum(r->s[after]) || r->s[after] == '.')) continue; /* 0.5, nullx */
            r->at = after;
            return 1;
        }
    }
    json_space(r);
    size_t at = r->at; /* [ ] and { } with spaces inside */
    if (r->s[at] == '[' || r->s[at] == '{') {
        uint8_t close = r->s[at] == '[' ? ']' : '}';
        at++;
        while (at < r->n && (r->s[at] == ' ' || r->s[at] == '\t' || r->s[at] == '\n' || r->s[at] == '\r')) at++;
        if (at < r->n && r->s[at] == close) { r->at = at + 1; return 1; }
    }
    return 0;
}

/* "stop": a string, an array of strings, or null. */
static int read_stops(JsonReader *r, ApiRequest *q, ApiError *e) {
    if (json_null_next(r)) return 1;
    json_space(r);
    int list = r->at < r->n && r->s[r->at] == '[';
    if (list) {
        r->at++;
        json_space(r);
        if (r->at < r->n && r->s[r->at] == ']') { r->at++; return 1; }
    }
    for (;;) {
        uint8_t *s;
        size_t len;
        if (!json_read_string(r, "stop", &s, &len, e)) return 0;
        if (len == 0 || len > API_STOP_BYTES || q->n_stop == API_STOPS) {
            free(s);
            return len == 0 ? api_fail(e, 400, "stop", "stop: a stop string is empty")
                 : len > API_STOP_BYTES ? api_fail(e, 400, "stop", "stop: a stop string is over %d bytes", API_STOP_BYTES)
                                        : api_fail(e, 400, "stop", "stop: over %d stop strings", API_STOPS);
        }
        q->stop[q->n_stop] = s;
        q->stop_len[q->n_stop++] = len;
        if (!list) return 1;
        json_space(r);
        if (json_comma(r)) continue;
        if (r->error[0] || !json_expect(r, ']', "expected ',' or ']' in the stop list")) return json_error(e, r, "stop");
        return 1;
    }
}

/* An object read member by member; each member's value by `member` (which must take it). */
static int read_object(JsonReader *r, const char *param, ApiRequest *q, ApiError *e,
                       int (*member)(JsonReader *, const uint8_t *, size_t, ApiRequest *, ApiError *)) {
    json_space(r);
    if (json_null_next(r)) return 1;
    const char *kind = json_kind(r);
    if (strcmp(kind, "an object") != 0) return api_fail(e, 400, param, "%s must be an object, not %s", param, kind);
    r->at++;
    int first = 1, more;
    uint8_t *key;
    size_t key_len;
    while ((more = json_next_member(r, &first, &key, &key_len)) > 0) {
        int ok = member(r, key, key_len, q, e);
        free(key);
        if (!ok) return 0;
    }
    return more == 0 ? 1 : json_error(e, r, param);
}

static int stream_option(JsonReader *r, const uint8_t *key, size_t len, ApiRequest *q, ApiError *e) {
    if (len == 13 && memcmp(key, "include_usage", 13) == 0) {
        if (json_null_next(r)) return 1;
        return json_read_bool(r, "stream_options.include_usage", &q->include_usage, e);
    }
    return json_skip(r, 2) || json_error(e, r, "stream_options");
}

static int template_kwarg(JsonReader *r, const uint8_t *key, size_t len, ApiRequest *q, ApiError *e) {
    if (q->n_options == API_OPTIONS) return api_fail(e, 400, "chat_template_kwargs", "chat_template_kwargs: over %d of them", API_OPTIONS);
    int value;
    if (!json_read_bool(r, "chat_template_kwargs", &value, e)) return 0;
    uint8_t *name = malloc(len + 1);
    if (!name) return api_fail(e, 500, NULL, "out of memory");
    memcpy(name, key, len);
    name[len] = 0;
    q->option_name[q->n_options] = name;
    q->option_len[q->n_options] = len;
    q->option_value[q->n_options++] = value;
    return 1;
}

static int response_format(JsonReader *r, const uint8_t *key, size_t len, ApiRequest *q, ApiError *e) {
    (void)q;
    if (len == 4 && memcmp(key, "type", 4) == 0) {
        uint8_t *type;
        size_t type_len;
        if (!json_read_string(r, "response_format", &type, &type_len, e)) return 0;
        int text = type_len == 4 && memcmp(type, "text", 4) == 0;
        free(type);
        if (!text) return api_fail(e, 400, "response_format", "response_format: only {\"type\": \"text\"} is served here (no JSON mode or schema)");
        return 1;
    }
    return json_skip(r, 2) || json_error(e, r, "response_format");
}

/* Fields a request may carry that this server cannot honour: welcome only when they ask for
 * nothing (json_empty_next), else a 400 naming them. */
static const char *const unsupported_fields[] = {
    "tools", "functions", "function_call", "logprobs", "top_logprobs", "logit_bias", "presence_penalty",
    "frequency_penalty", "audio", "prediction", "suffix", "echo", "web_search_options", "images",
};

/* The request body (JSON) of /v1/chat/completions (chat) or /v1/completions into q, with
 * OpenAI's defaults for what it leaves out (temperature 1, top_p 1, n 1; max_tokens: until the
 * context ends, 16 for completions); 0 with the error. */
static int api_read_request(const uint8_t *body, size_t len, int chat, ApiRequest *q, ApiError *e) {
    *q = (ApiRequest){.chat = chat, .max_tokens = chat ? -1 : 16, .temperature = 1.0, .top_p = 1.0,
                      .repetition_penalty = 1.0, .n = 1};
    JsonReader r = {.s = body, .n = len};
    json_space(&r);
    if (strcmp(json_kind(&r), "an object") != 0)
        return api_fail(e, 400, NULL, "the body must be a JSON object, not %s", json_kind(&r));
    r.at++;
    int first = 1, more, have_input = 0;
    uint8_t *key;
    size_t key_len;
    while ((more = json_next_member(&r, &first, &key, &key_len)) > 0) {
        char name[40];
        snprintf(name, sizeof name, "%.*s", (int)(key_len < 39 ? key_len : 39), (const char *)key);
        int known = strlen(name) == key_len, ok = 1;
        free(key);
#define IS(s) (known && strcmp(name, s) == 0)
        long v = 0;
        if (IS("messages") && chat) {
            free_messages(q->m, q->n_messages);
            q->m = NULL;
            q->n_messages = 0;
            ok = json_messages_at(&r, &q->m, &q->n_messages) || json_error(e, &r, "messages");
            have_input = 1;
        } else if (IS("prompt") && !chat) {
            json_space(&r);
            if (strcmp(json_kind(&r), "an array") == 0)
                ok = api_fail(e, 400, "prompt", "prompt: give one string (a list of prompts or of token ids is not served here)");
            else {
                free(q->prompt);
                q->prompt = NULL;
                ok = json_read_string(&r, "prompt", &q->prompt, &q->prompt_len, e);
            }
            have_input = 1;
        } else if (IS("max_tokens") || IS("max_completion_tokens")) {
            if (!json_null_next(&r) && (ok = json_read_long(&r, name, 0, 1000000000L, &v, e))) q->max_tokens = v;
        } else if (IS("temperature")) {
            if (!json_null_next(&r)) ok = json_read_double(&r, name, 0, 2, &q->temperature, e);
        } else if (IS("top_p")) {
            if (!json_null_next(&r)) ok = json_read_double(&r, name, 0, 1, &q->top_p, e);
        } else if (IS("top_k")) {
            if (!json_null_next(&r) && (ok = json_read_long(&r, name, 0, 1000000000L, &v, e))) q->top_k = (int)v;
        } else if (IS("repetition_penalty")) {
            if (!json_null_next(&r)) ok = json_read_double(&r, name, 0.01, 100, &q->repetition_penalty, e);
        } else if (IS("n")) {
            if (!json_null_next(&r) && (ok = json_read_long(&r, name, 1, 64, &v, e))) q->n = (int)v;
        } else if (IS("seed")) {
            if (!json_null_next(&r)) {
                double d;
                char text[64];
                ok = json_read_number(&r, name, &d, text, sizeof text, e);
                if (ok && (strpbrk(text, ".eE") || d < -9.3e18 || d > 1.8e19))
                    ok = api_fail(e, 400, "seed", "seed must be a whole number, got %s", text);
                if (ok) {
                    q->has_seed = 1;
                    q->seed = text[0] == '-' ? (uint64_t)strtoll(text, NULL, 10) : strtoull(text, NULL, 10);
                }
            }
        } else if (IS("stream")) {
            if (!json_null_next(&r)) ok = json_read_bool(&r, name, &q->stream, e);
        } else if (IS("stream_options")) {
            ok = read_object(&r, name, q, e, stream_option);
        } else if (IS("stop")) {
            ok = read_stops(&r, q, e);
        } else if (IS("chat_template_kwargs") && chat) {
            ok = read_object(&r, name, q, e, template_kwarg);
        } else if (IS("response_format")) {
            ok = read_object(&r, name, q, e, response_format);
        } else if (IS("tool_choice")) {
            json_space(&r);
            if (!json_empty_next(&r)) {
                uint8_t *s = NULL;
                size_t n = 0;
                ok = strcmp(json_kind(&r), "a string") == 0 && json_string(&r, &s, &n) &&
                     ((n == 4 && memcmp(s, "none", 4) == 0) || (n == 4 && memcmp(s, "auto", 4) == 0));
                free(s);
                if (!ok) api_fail(e, 400, "tool_choice", "tool_choice: tools are not served here");
            }
        } else if (IS("n_probs") || IS("best_of")) {
            if (!json_empty_next(&r) && !(json_read_long(&r, name, 1, 1, &v, e)))
                ok = api_fail(e, 400, name, "%s: only 1 is served here", name);
        } else {
            int unsupported = 0;
            for (size_t k = 0; k < sizeof unsupported_fields / sizeof *unsupported_fields; k++)
                unsupported |= IS(unsupported_fields[k]);
            if (unsupported && !json_empty_next(&r))
                ok = api_fail(e, 400, name, "%s is not supported by this server: leave it out", name);
            else if (!unsupported)
                ok = json_skip(&r, 1) || json_error(e, &r, NULL); /* unknown fields are ignored, as OpenAI's servers do */
        }
#undef IS
        if (!ok) {
            api_request_free(q);
            return 0;
        }
    }
    if (more < 0) {
        json_error(e, &r, NULL);
        api_request_free(q);
        return 0;
    }
    json_space(&r);
    if (r.at != r.n) {
        json_fail(&r, "text follows the JSON object");
        json_error(e, &r, NULL);
        api_request_free(q);
        return 0;
    }
    if (!have_input) {
        api_request_free(q);
        return api_fail(e, 400, chat ? "messages" : "prompt", "%s is missing", chat ? "messages" : "prompt");
    }
    if (q->include_usage && !q->stream) q->include_usage = 0;
    return 1;
}

/* ---- JSON written ----------------------------------------------------------------------------- */

/* text as a JSON string; bytes that are not UTF-8 (a model may emit half a character) become
 * U+FFFD, as chat.h's lossy_utf8 counts them. */
static void buffer_json_string(Buffer *b, const uint8_t *s, size_t n) {
    buffer_add(b, (const uint8_t *)"\"", 1);
    for (size_t i = 0; i < n;) {
        size_t len = utf8_valid(s + i, n - i);
        if (!len) {
            buffer_add(b, (const uint8_t *)"\\ufffd", 6);
            i += bad_utf8_span(s + i, n - i);
            continue;
        }
        uint8_t c = s[i];
        if (c == '"' || c == '\\') {
            uint8_t esc[2] = {'\\', c};
            buffer_add(b, esc, 2);
        } else if (c < 0x20) {
            char esc[8];
            snprintf(esc, sizeof esc, "\\u%04x", c);
            buffer_add(b, (const uint8_t *)esc, 6);
        } else {
            buffer_add(b, s + i, len);
        }
        i += len;
    }
    buffer_add(b, (const uint8_t *)"\"", 1);
}

__attribute__((format(printf, 2, 3)))
static void buffer_printf(Buffer *b, const char *fmt, ...) {
    char text[1024];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(text, sizeof text, fmt, ap);
    va_end(ap);
    if (n > 0) buffer_add(b, (const uint8_t *)text, (size_t)n < sizeof text ? (size_t)n : sizeof text - 1);
}

/* OpenAI's error object. */
static void api_error_json(Buffer *b, const ApiError *e) {
    static const char *const types[] = {"invalid_request_error", "authentication_error", "not_found_error", "server_error"};
    int t = e->status == 401 ? 1 : e->status == 404 ? 2 : e->status >= 500 ? 3 : 0;
    buffer_printf(b, "{\"error\": {\"message\": ");
    buffer_json_string(b, (const uint8_t *)e->message, strlen(e->message));
    buffer_printf(b, ", \"type\": \"%s\", \"param\": ", types[t]);
    if (e->param[0]) buffer_json_string(b, (const uint8_t *)e->param, strlen(e->param));
    else buffer_printf(b, "null");
    buffer_printf(b, ", \"code\": null}}");
}

static const char *http_reason(int status) {
    switch (status) {
    case 200: return "OK"; case 400: return "Bad Request"; case 401: return "Unauthorized";
    case 404: return "Not Found"; case 405: return "Method Not Allowed"; case 408: return "Request Timeout";
    case 411: return "Length Required"; case 413: return "Content Too Large"; case 414: return "URI Too Long";
    case 417: return "Expectation Failed"; case 431: return "Request Header Fields Too Large";
    case 500: return "Internal Server Error"; case 501: return "Not Implemented"; case 503: return "Service Unavailable";
    default: return "Error";
    }
}

/* A whole response: status line, headers, body; the connection closes after it. */
static void http_response(Buffer *out, int status, const char *content_type, const uint8_t *body, size_t n) {
    buffer_printf(out, "HTTP/1.1 %d %s\r\nContent-Type: %s\r\nContent-Length: %zu\r\nConnection: close\r\n%s\r\n",
                  status, http_reason(status), content_type, n,
                  status == 401 ? "WWW-Authenticate: Bearer\r\n" : status == 405 ? "Allow: GET, POST\r\n" : "");
    buffer_add(out, body, n);
}

static void http_error(Buffer *out, const ApiError *e) {
    Buffer body = {0};
    api_error_json(&body, e);
    http_response(out, e->status, "application/json", body.s ? body.s : (const uint8_t *)"", body.n);
    free(body.s);
}

#endif
