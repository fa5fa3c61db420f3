/* json.h: a conversation read from JSON (RFC 8259): an array of messages, each an object with a
 * string "role" (system, user or assistant) and a string "content", the format of OpenAI's chat
 * API and of Hugging Face's apply_chat_template. Other keys are read and ignored, whatever their
 * value; a key given twice keeps its last value, as Python's json does.
 *
 * The text is a stranger's: every byte is checked (UTF-8, escapes, nesting at most JSON_MAX_DEPTH
 * deep), nothing is trusted, and a problem is one message naming it and where it is (line and
 * column), never a crash (tests/fuzz/fuzz_messages.c). */
#ifndef JSON_H
#define JSON_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "utf8.h"

enum { ROLE_SYSTEM = 0, ROLE_USER = 1, ROLE_ASSISTANT = 2, ROLES };
static const char *const role_names[ROLES] = {"system", "user", "assistant"};

typedef struct {
    int role;          /* ROLE_* */
    uint8_t *content;  /* owned, UTF-8 (may hold NUL bytes: \u0000) */
    size_t len;
    uint8_t *reasoning; /* owned: an assistant's "reasoning_content" (transformers' templates read it
                           apart from the content), or NULL */
    size_t reasoning_len;
} ChatMessage;

#define JSON_MAX_DEPTH 64

typedef struct {
    const uint8_t *s;
    size_t n, at;
    char error[320];
} JsonReader;

/* Records the first problem (with its line and column); returns 0 for the callers' early exits. */
static int json_fail(JsonReader *r, const char *what) {
    if (r->error[0]) return 0;
    size_t line = 1, column = 1;
    for (size_t i = 0; i < r->at && i < r->n; i++) {
        if (r->s[i] == '\n') line++, column = 1;
        else if ((r->s[i] & 0xC0) != 0x80) column++;
    }
    snprintf(r->error, sizeof r->error, "%s at line %zu, column %zu", what, line, column);
    return 0;
}

static void json_space(JsonReader *r) {
    while (r->at < r->n && (r->s[r->at] == ' ' || r->s[r->at] == '\t' || r->s[r->at] == '\n' || r->s[r->at] == '\r'))
        r->at++;
}

/* A comma at r->at: taken, and 1 when a value follows it; a closing bracket after it instead is
 * a trailing comma (JSON has none), reported where the comma is. */
static int json_comma(JsonReader *r) {
    if (r->at >= r->n || r->s[r->at] != ',') return 0;
    size_t comma = r->at++;
    json_space(r);
    if (r->at < r->n && (r->s[r->at] == ']' || r->s[r->at] == '}')) {
        char what[80];
        snprintf(what, sizeof what, "a trailing comma before '%c' (JSON allows none)", r->s[r->at]);
        r->at = comma;
        return json_fail(r, what);
    }
    return 1;
}

static int json_expect(JsonReader *r, char c, const char *what) {
    json_space(r);
    if (r->at >= r->n || r->s[r->at] != (uint8_t)c) return json_fail(r, what);
    r->at++;
    return 1;
}

static int json_hex4(JsonReader *r, uint32_t *v) {
    *v = 0;
    for (int i = 0; i < 4; i++) {
        if (r->at >= r->n) return json_fail(r, "a \\u escape is cut short");
        uint8_t c = r->s[r->at++];
        int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
        if (d < 0) return json_fail(r, "a \\u escape needs four hexadecimal digits");
        *v = *v << 4 | (uint32_t)d;
    }
    return 1;
}

/* A string at r->at (its opening quote next); its bytes into *out (malloc'd, NULL when out is
 * NULL: skipped), length *len. */
static int json_string(JsonReader *r, uint8_t **out, size_t *len) {
    if (!json_expect(r, '"', "expected a string")) return 0;
    size_t start = r->at, cap = 0;
    uint8_t *buf = NULL;
    if (out) { /* the decoded text is never longer than the source */
        size_t end = start;
        while (end < r->n && r->s[end] != '"') end += r->s[end] == '\\' ? 2 : 1;
        cap = (end < r->n ? end : r->n) - start + 4;
        buf = malloc(cap);
        if (!buf) return json_fail(r, "out of memory");
    }
    size_t k = 0;
    for (;;) {
        if (r->at >= r->n) { free(buf); return json_fail(r, "a string is not closed"); }
        uint8_t c = r->s[r->at];
        if (c == '"') { r->at++; break; }
        if (c < 0x20) { free(buf); return json_fail(r, "a control character must be escaped in a string"); }
        if (c == '\\') {
            r->at++;
            if (r->at >= r->n) { free(buf); return json_fail(r, "a string is not closed"); }
            uint8_t e = r->s[r->at++];
            uint32_t cp;
            const char *simple = strchr("\"\\/bfnrt", e);
            if (e && simple) {
                static const uint8_t value[] = {'"', '\\', '/', '\b', '\f', '\n', '\r', '\t'};
                if (buf) buf[k++] = value[simple - "\"\\/bfnrt"];
                continue;
            }
            if (e != 'u') { r->at--; free(buf); return json_fail(r, "unknown escape in a string"); }
            if (!json_hex4(r, &cp)) { free(buf); return 0; }
            if (cp >= 0xDC00 && cp <= 0xDFFF) { free(buf); return json_fail(r, "a \\u escape is a lone low surrogate"); }
            if (cp >= 0xD800 && cp <= 0xDBFF) {
                uint32_t low;
                if (r->at + 2 > r->n || r->s[r->at] != '\\' || r->s[r->at + 1] != 'u') {
                    free(buf);
                    return json_fail(r, "a \\u escape is a high surrogate without its low one");
                }
                r->at += 2;
                if (!json_hex4(r, &low)) { free(buf); return 0; }
                if (low < 0xDC00 || low > 0xDFFF) { free(buf); return json_fail(r, "a \\u escape's surrogate pair is broken"); }
                cp = 0x10000 + ((cp - 0xD800) << 10) + (low - 0xDC00);
            }
            if (buf) k += utf8_put(buf + k, cp);
            continue;
        }
        size_t n = utf8_valid(r->s + r->at, r->n - r->at);
        if (n == 0) { free(buf); return json_fail(r, "the text is not valid UTF-8"); }
        if (buf) memcpy(buf + k, r->s + r->at, n);
        k += n;
        r->at += n;
    }
    if (out) *out = buf;
    if (len) *len = k;
    return 1;
}

static int json_literal(JsonReader *r, const char *word) {
    size_t n = strlen(word);
    if (r->n - r->at < n || memcmp(r->s + r->at, word, n) != 0) return json_fail(r, "expected a JSON value");
    r->at += n;
    return 1;
}

static int json_number(JsonReader *r) {
    size_t start = r->at;
    if (r->at < r->n && r->s[r->at] == '-') r->at++;
    if (r->at >= r->n || r->s[r->at] < '0' || r->s[r->at] > '9') return json_fail(r, "expected a JSON value");
    if (r->s[r->at] == '0') r->at++;
    else while (r->at < r->n && r->s[r->at] >= '0' && r->s[r->at] <= '9') r->at++;
    if (r->at < r->n && r->s[r->at] == '.') {
        r->at++;
        if (r->at >= r->n || r->s[r->at] < '0' || r->s[r->at] > '9') return json_fail(r, "a number needs digits after its point");
        while (r->at < r->n && r->s[r->at] >= '0' && r->s[r->at] <= '9') r->at++;
    }
    if (r->at < r->n && (r->s[r->at] == 'e' || r->s[r->at] == 'E')) {
        r->at++;
        if (r->at < r->n && (r->s[r->at] == '+' || r->s[r->at] == '-')) r->at++;
        if (r->at >= r->n || r->s[r->at] < '0' || r->s[r->at] > '9') return json_fail(r, "a number's exponent needs digits");
        while (r->at < r->n && r->s[r->at] >= '0' && r->s[r->at] <= '9') r->at++;
    }
    return r->at > start;
}

/* Any value, read and dropped (depth: how deep it sits). */
static int json_skip(JsonReader *r, int depth) {
    json_space(r);
    if (depth > JSON_MAX_DEPTH) return json_fail(r, "values are nested deeper than 64 levels");
    if (r->at >= r->n) return json_fail(r, "expected a JSON value, found the end");
    uint8_t c = r->s[r->at];
    if (c == '"') return json_string(r, NULL, NULL);
    if (c == 't') return json_literal(r, "true");
    if (c == 'f') return json_literal(r, "false");
    if (c == 'n') return json_literal(r, "null");
    if (c == '[' || c == '{') {
        uint8_t close = c == '[' ? ']' : '}';
        r->at++;
        json_space(r);
        if (r->at < r->n && r->s[r->at] == close) { r->at++; return 1; }
        for (;;) {
            if (c == '{' && !(json_string(r, NULL, NULL) && json_expect(r, ':', "expected ':' after a key"))) return 0;
            if (!json_skip(r, depth + 1)) return 0;
            json_space(r);
            if (json_comma(r)) continue;
            if (r->error[0]) return 0;
            return json_expect(r, (char)close, c == '[' ? "expected ',' or ']' in an array" : "expected ',' or '}' in an object");
        }
    }
    return json_number(r);
}

/* The type of the value next, for messages naming what was found instead of a string. */
static const char *json_kind(JsonReader *r) {
    json_space(r);
    if (r->at >= r->n) return "nothing";
    switch (r->s[r->at]) {
    case '"': return "a string";
    case '{': return "an object";
    case '[': return "an array";
    case 't': case 'f': return "a boolean";
    case 'n': return "null";
    case '-': case '0': case '1': case '2': case '3': case '4': case '5': case '6': case '7': case '8': case '9':
        return "a number";
    default: return "text that is not JSON";
    }
}

/* One message object, the i-th (from 1). */
static int json_message(JsonReader *r, size_t i, ChatMessage *m) {
    char what[260];
    uint8_t *role = NULL;
    size_t role_len = 0;
    int have_content = 0;
    snprintf(what, sizeof what, "message %zu is %s, not an object with \"role\" and \"content\"", i, json_kind(r));
    if (!json_expect(r, '{', what)) return 0;
    json_space(r);
    int empty = r->at < r->n && r->s[r->at] == '}';
    if (empty) r->at++;
    while (!empty) {
        uint8_t *key;
        size_t key_len;
        if (!json_string(r, &key, &key_len)) goto fail;
        int is_role = key_len == 4 && memcmp(key, "role", 4) == 0, is_content = key_len == 7 && memcmp(key, "content", 7) == 0;
        int is_reasoning = key_len == 17 && memcmp(key, "reasoning_content", 17) == 0;
        free(key);
        if (!json_expect(r, ':', "expected ':' after a key")) goto fail;
        if (is_reasoning && strcmp(json_kind(r), "null") != 0) { /* null: none, as a template reads it */
            const char *kind = json_kind(r);
            if (strcmp(kind, "a string") != 0) {
                snprintf(what, sizeof what, "message %zu has a \"reasoning_content\" that is %s, not a string", i, kind);
                json_fail(r, what);
                goto fail;
            }
            free(m->reasoning);
            m->reasoning = NULL;
            if (!json_string(r, &m->reasoning, &m->reasoning_len)) goto fail;
        } else if (is_role || is_content) {
            const char *kind = json_kind(r);
            if (strcmp(kind, "a string") != 0) {
                snprintf(what, sizeof what, "message %zu has a \"%s\" that is %s, not a string", i, is_role ? "role" : "content", kind);
                json_fail(r, what);
                goto fail;
            }
            if (is_role) { free(role); role = NULL; }
            if (is_content) { free(m->content); m->content = NULL; }
            if (!json_string(r, is_role ? &role : &m->content, is_role ? &role_len : &m->len)) goto fail;
            have_content |= is_content;
        } else if (!json_skip(r, 2)) {
            goto fail;
        }
        json_space(r);
        if (json_comma(r)) continue;
        if (r->error[0] || !json_expect(r, '}', "expected ',' or '}' in a message")) goto fail;
        break;
    }
    if (!role || !have_content) {
        snprintf(what, sizeof what, "message %zu has no \"%s\"", i, role ? "content" : "role");
        r->at--;
        json_fail(r, what);
        goto fail;
    }
    m->role = -1;
    for (int k = 0; k < ROLES; k++)
        if (strlen(role_names[k]) == role_len && memcmp(role, role_names[k], role_len) == 0) m->role = k;
    if (m->role < 0) {
        char shown[4 * 40 + 1] = ""; /* the role as text on one line: control bytes escaped, at most 40 bytes */
        size_t k = 0;
        for (size_t j = 0; j < role_len && j < 40; j++)
            k += (size_t)(role[j] < 0x20 || role[j] == 0x7F ? snprintf(shown + k, 5, "\\x%02x", role[j])
                                                             : snprintf(shown + k, 2, "%c", role[j]));
        snprintf(what, sizeof what, "message %zu has the role '%s' (run knows system, user and assistant)", i, shown);
        r->at--;
        json_fail(r, what);
        goto fail;
    }
    free(role);
    return 1;
fail:
    free(role);
    return 0;
}

static void free_message(ChatMessage *m) {
    free(m->content);
    free(m->reasoning);
    m->content = m->reasoning = NULL;
}

static void free_messages(ChatMessage *m, size_t n) {
    for (size_t i = 0; i < n; i++) free_message(&m[i]);
    free(m);
}

/* The array of messages at r's place: *out (n of them, owned by the caller) and 1, or 0 with
 * r->error saying what is wrong. */
static int json_messages_at(JsonReader *r, ChatMessage **out, size_t *n) {
    size_t count = 0, cap = 8;
    ChatMessage *m = calloc(cap, sizeof *m);
    *out = NULL;
    *n = 0;
    if (!m) return json_fail(r, "out of memory");
    if (!json_expect(r, '[', "the messages must be a JSON array of {\"role\", \"content\"} objects")) goto fail;
    json_space(r);
    if (r->at < r->n && r->s[r->at] == ']') r->at++;
    else for (;;) {
        if (count == cap) {
            ChatMessage *grown = realloc(m, (cap *= 2) * sizeof *m);
            if (!grown) { json_fail(r, "out of memory"); goto fail; }
            m = grown;
            memset(m + count, 0, (cap - count) * sizeof *m);
        }
        if (!json_message(r, count + 1, &m[count])) { count++; goto fail; }
        count++;
        json_space(r);
        if (json_comma(r)) continue;
        if (r->error[0] || !json_expect(r, ']', "expected ',' or ']' after a message")) goto fail;
        break;
    }
    *out = m;
    *n = count;
    return 1;
fail:
    free_messages(m, count);
    return 0;
}

/* The conversation in text[0..len): *out (n of them, owned by the caller) and NULL, or NULL
 * messages and a message saying what is wrong (in buffer err of size err_size). */
static const char *json_messages(const uint8_t *text, size_t len, ChatMessage **out, size_t *n, char *err,
                                 size_t err_size) {
    JsonReader r = {.s = text, .n = len};
    if (len >= 3 && memcmp(text, "\xEF\xBB\xBF", 3) == 0) r.at = 3; /* a byte-order mark, as Python's utf-8-sig */
    if (json_messages_at(&r, out, n)) {
        json_space(&r);
        if (r.at == r.n) return NULL;
        json_fail(&r, "text follows the array");
        free_messages(*out, *n);
        *out = NULL;
        *n = 0;
    }
    snprintf(err, err_size, "%s", r.error[0] ? r.error : "malformed JSON");
    return err;
}

#endif
