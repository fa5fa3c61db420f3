/* chat.h: conversations with an instruct model, rendered as its own chat template renders them.
 *
 * The exporter renders the model's template as transformers does and reads it off into a table
 * of plain strings, verified against the template on hundreds of random conversations
 * (export/chat_template.py; the keys are docs/format.md's "Chat"): what a conversation begins
 * with, each role's prefix and suffix, the generation prompt, whether contents are stripped,
 * where a system message goes, today's date where the template prints it, the rules of roles it
 * raises on. Here a conversation is rendered whole by that table, each turn, and tokenized the
 * way Hugging Face's tokenizer splits a rendered conversation: the text of an added token is
 * that token wherever it appears (swallowing the whitespace beside it when the token says
 * rstrip or lstrip), and the texts between are encoded alone (SentencePiece: with or without
 * its leading space, as chat.spaces says). The sequence keeps the longest common prefix of what
 * its cache holds and the new tokens (generate.h's sequence_set), so a turn costs its own tokens,
 * not the history's.
 *
 *   chat_table()    the table from a weight file's metadata, checked
 *   chat_ids()      a conversation's tokens, generation prompt included or not
 *   chat()          --chat: a conversation on a terminal, turns from stdin's lines, or the next
 *                   reply to a messages file (or its tokens, --tokenize)
 */
#ifndef CHAT_H
#define CHAT_H

#include "util.h"

#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"
#include "generate.h"
#include "json.h"
#include "load.h"
#include "output.h"
#include "tokenizer.h"
#include "utf8.h"

/* ---- the table --------------------------------------------------------------------------- */

typedef struct { const uint8_t *s; size_t n; } Text;

enum { PLACE_NONE, PLACE_TURN, PLACE_FIRST_USER, PLACE_LAST_USER };        /* chat.system.place */
enum { CONTENT_KEEP, CONTENT_STRIP, CONTENT_LSTRIP, CONTENT_RSTRIP };       /* chat.ROLE.content */
enum { SPACES_BYTE_LEVEL, SPACES_EVERY, SPACES_FIRST, SPACES_ALWAYS, SPACES_NEVER }; /* chat.spaces */
enum { RULE_ALTERNATE = 1, RULE_USER_FIRST = 2, RULE_NO_SYSTEM = 4, RULE_NO_LATER_SYSTEM = 8 }; /* chat.rules */

typedef struct {
    uint32_t id;
    Text text;           /* what spells it in a rendered conversation */
    int lstrip, rstrip;  /* it swallows the whitespace before / after it */
    int owned;           /* text is allocated here (chat.tokens spells it) */
} ChatToken;

typedef struct {
    int present;                 /* the file has a chat template */
    Text refusal;                /* why it cannot be used, or empty */
    Text begin, end, generation, date;
    Text prefix[ROLES], suffix[ROLES];
    int content[ROLES];
    Text system_begin, system_end, fold_prefix, fold_suffix;
    int place, rules, spaces;
    ChatToken *tokens;           /* (n_tokens) longest text first */
    int n_tokens;
} ChatTable;

static int text_is(Text t, const char *s) { return t.n == strlen(s) && memcmp(t.s, s, t.n) == 0; }

/* Which of names (NULL-ended) the value is, or die naming the key. */
static int table_choice(Text v, const char *key, const char *const *names) {
    for (int i = 0; names[i]; i++) if (text_is(v, names[i])) return i;
    die("model file: metadata %s is '%.*s', none of the values run knows" HINT, key, (int)(v.n < 40 ? v.n : 40), (const char *)v.s);
}

/* chat.tokens: "ID", "ID:FLAGS" or "ID:FLAGS:HEX" separated by spaces (export/tokenizer_files.py). */
static void table_tokens(ChatTable *c, Text v, const Tokenizer *tok) {
    c->tokens = calloc_or_die((v.n / 2 + 1) * sizeof *c->tokens, "the chat tokens");
    size_t at = 0;
    while (at < v.n) {
        size_t end = at;
        while (end < v.n && v.s[end] != ' ') end++;
        char item[600];
        if (end - at >= sizeof item) die("model file: metadata chat.tokens has an entry longer than %zu bytes", sizeof item);
        memcpy(item, v.s + at, end - at);
        item[end - at] = '\0';
        char *rest;
        unsigned long id = strtoul(item, &rest, 10);
        if (rest == item || id >= tok->n_tokens) die("model file: metadata chat.tokens names '%s', not a token id", item);
        ChatToken *t = &c->tokens[c->n_tokens++];
        t->id = (uint32_t)id;
        t->text.s = tokenizer_token(tok, t->id, &t->text.n);
        if (*rest == ':') {
            for (rest++; *rest == 'l' || *rest == 'r'; rest++) *(*rest == 'l' ? &t->lstrip : &t->rstrip) = 1;
            if (*rest == ':') { /* the text in hex, where it differs from the token's bytes */
                size_t n = strlen(++rest);
                if (n % 2 || n == 0) die("model file: metadata chat.tokens has a bad text for token %lu", id);
                uint8_t *text = malloc_or_die(n / 2, "the chat tokens");
                for (size_t j = 0; j < n / 2; j++) {
                    unsigned byte;
                    if (sscanf(rest + 2 * j, "%2x", &byte) != 1) die("model file: metadata chat.tokens has a bad text for token %lu", id);
                    text[j] = (uint8_t)byte;
                }
                t->text = (Text){text, n / 2};
                t->owned = 1;
                rest += n;
            }
        }
        if (*rest) die("model file: metadata chat.tokens has a bad entry '%s'", item);
        if (t->text.n == 0) die("model file: metadata chat.tokens names token %lu, which has no text", id);
        at = end + 1;
    }
    for (int i = 1; i < c->n_tokens; i++) /* longest first: the longest match at a position wins */
        for (int j = i; j > 0 && c->tokens[j - 1].text.n < c->tokens[j].text.n; j--) {
            ChatToken swap = c->tokens[j];
            c->tokens[j] = c->tokens[j - 1];
            c->tokens[j - 1] = swap;
        }
}

/* The chat table of a file's metadata (present = 0 when it has none). */
static ChatTable chat_table(const ModelFile *f, const Tokenizer *tok) {
    static const char *const places[] = {"none", "turn", "first-user", "last-user", NULL};
    static const char *const contents[] = {"keep", "strip", "lstrip", "rstrip", NULL};
    static const char *const spaces[] = {"byte-level", "every", "first", "always", "never", NULL};
    ChatTable c = {0};
    Text tokens = {0};
    int seen = 0;
    uint64_t at = 4;
    for (uint32_t i = 0; i < f->n_metadata; i++) {
        MetadataEntry e = metadata_next(f, &at);
        Text v = {e.value, e.value_len}, k = {e.key, e.key_len};
        if (e.key_len < 5 || memcmp(e.key, "chat.", 5) != 0) continue;
        c.present = 1;
        struct { const char *name; Text *to; } strings[] = {
            {"chat.refusal", &c.refusal}, {"chat.begin", &c.begin}, {"chat.end", &c.end}, {"chat.generation", &c.generation},
            {"chat.date", &c.date}, {"chat.system.begin", &c.system_begin}, {"chat.system.end", &c.system_end},
            {"chat.system.fold-prefix", &c.fold_prefix}, {"chat.system.fold-suffix", &c.fold_suffix},
            {"chat.user.prefix", &c.prefix[ROLE_USER]}, {"chat.user.suffix", &c.suffix[ROLE_USER]},
            {"chat.assistant.prefix", &c.prefix[ROLE_ASSISTANT]}, {"chat.assistant.suffix", &c.suffix[ROLE_ASSISTANT]},
            {"chat.system.prefix", &c.prefix[ROLE_SYSTEM]}, {"chat.system.suffix", &c.suffix[ROLE_SYSTEM]},
            {"chat.tokens", &tokens}};
        for (size_t s = 0; s < sizeof strings / sizeof strings[0]; s++)
            if (text_is(k, strings[s].name)) { *strings[s].to = v; seen |= s == 1 || s == 9 || s == 11 ? 1 << s : 0; }
        if (text_is(k, "chat.system.place")) c.place = table_choice(v, "chat.system.place", places);
        if (text_is(k, "chat.user.content")) c.content[ROLE_USER] = table_choice(v, "chat.user.content", contents);
        if (text_is(k, "chat.assistant.content")) c.content[ROLE_ASSISTANT] = table_choice(v, "chat.assistant.content", contents);
        if (text_is(k, "chat.system.content")) c.content[ROLE_SYSTEM] = table_choice(v, "chat.system.content", contents);
        if (text_is(k, "chat.spaces")) c.spaces = table_choice(v, "chat.spaces", spaces);
        if (text_is(k, "chat.rules")) {
            static const char *const rules[] = {"alternate", "user-first", "no-system", "no-later-system", NULL};
            for (size_t s = 0; s < v.n;) {
                size_t end = s;
                while (end < v.n && v.s[end] != ' ') end++;
                c.rules |= 1 << table_choice((Text){v.s + s, end - s}, "chat.rules", rules);
                s = end + 1;
            }
        }
    }
    if (c.present && !c.refusal.n && seen != ((1 << 1) | (1 << 9) | (1 << 11)))
        die("model file: the chat table lacks chat.begin, chat.user.prefix or chat.assistant.prefix" HINT);
    if (c.date.n > 64) die("model file: metadata chat.date is %zu bytes long, more than 64", c.date.n);
    if (tokens.n) table_tokens(&c, tokens, tok);
    if ((c.spaces == SPACES_BYTE_LEVEL) != !(tok->flags & TOK_SENTENCEPIECE) && c.present && !c.refusal.n)
        die("model file: metadata chat.spaces does not fit its tokenizer" HINT);
    return c;
}

static void free_chat_table(ChatTable *c) {
    for (int i = 0; i < c->n_tokens; i++) if (c->tokens[i].owned) free((void *)c->tokens[i].text.s);
    free(c->tokens);
}

/* ---- rendering --------------------------------------------------------------------------- */

typedef struct { uint8_t *s; size_t n, cap; } Buffer;

static void buffer_add(Buffer *b, const uint8_t *s, size_t n) {
    if (b->n + n + 1 > b->cap) {
        b->cap = 2 * (b->n + n) + 256;
        b->s = realloc(b->s, b->cap);
        if (!b->s) die("out of memory for the conversation");
    }
    if (n) memcpy(b->s + b->n, s, n);
    b->n += n;
}

/* A table string: each 0xFF byte (never a byte of UTF-8) stands for today's date. */
static void buffer_table(Buffer *b, Text t, const char *date) {
    for (size_t i = 0; i < t.n; i++) {
        if (t.s[i] == 0xFF) buffer_add(b, (const uint8_t *)date, strlen(date));
        else buffer_add(b, t.s + i, 1);
    }
}

/* Python's str.isspace(), which str.strip() and jinja2's trim strip. */
static int python_space(long cp) {
    return (cp >= 0x09 && cp <= 0x0D) || (cp >= 0x1C && cp <= 0x20) || cp == 0x85 || cp == 0xA0 || cp == 0x1680 ||
           (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 || cp == 0x202F || cp == 0x205F || cp == 0x3000;
}

/* Unicode's White_Space: the \s of the Rust regex Hugging Face's lstrip and rstrip use. */
static int unicode_space(long cp) { return python_space(cp) && !(cp >= 0x1C && cp <= 0x1F); }

/* The code point at s[0..n) (valid UTF-8: json.h and the line reader check), its length in *len. */
static long code_point(const uint8_t *s, size_t n, size_t *len) {
    *len = utf8_valid(s, n);
    if (*len == 0) { *len = 1; return -1; }
    long cp = *len == 1 ? s[0] : s[0] & (0x7F >> *len);
    for (size_t i = 1; i < *len; i++) cp = cp << 6 | (s[i] & 0x3F);
    return cp;
}

/* The start of the last character of s[0..n). */
static size_t last_char(const uint8_t *s, size_t n) {
    size_t i = n - 1;
    while (i > 0 && (s[i] & 0xC0) == 0x80 && n - i < 4) i--;
    return i;
}

static void buffer_content(Buffer *b, const uint8_t *s, size_t n, int how) {
    size_t len;
    if (how == CONTENT_STRIP || how == CONTENT_LSTRIP)
        while (n > 0 && python_space(code_point(s, n, &len))) s += len, n -= len;
    if (how == CONTENT_STRIP || how == CONTENT_RSTRIP)
        while (n > 0) {
            size_t i = last_char(s, n);
            if (!python_space(code_point(s + i, n - i, &len)) || i + len != n) break;
            n = i;
        }
    buffer_add(b, s, n);
}

/* A conversation the table's rules refuse, said in one line (index i from 1 for the messages). */
static void chat_check(const ChatTable *c, const ChatMessage *m, size_t n) {
    if (n == 0) die("the conversation has no messages");
    size_t first = m[0].role == ROLE_SYSTEM;
    if (first && (c->rules & RULE_NO_SYSTEM))
        die("this model's chat template drops or refuses system messages: leave it out");
    for (size_t i = first; i < n; i++) {
        if (m[i].role == ROLE_SYSTEM && (c->rules & (RULE_NO_LATER_SYSTEM | RULE_NO_SYSTEM)))
            die("message %zu is a system message: this model's chat template takes one only at the start", i + 1);
        int want = (i - first) % 2 == 0 ? ROLE_USER : ROLE_ASSISTANT;
        if ((c->rules & RULE_ALTERNATE) && m[i].role != want)
            die("message %zu is from the %s: this model's chat template wants user and assistant turns to "
                "alternate, starting with the user", i + 1, role_names[m[i].role]);
        if ((c->rules & RULE_USER_FIRST) && i == first && m[i].role != ROLE_USER)
            die("message %zu is from the %s: this model's chat template wants the user first", i + 1, role_names[m[i].role]);
    }
}

/* The conversation rendered as its template renders it (export/chat_template.py's table_render). */
static void chat_render(const ChatTable *c, const ChatMessage *m, size_t n, int generation, Buffer *out) {
    char date[256] = "";
    if (c->date.n) {
        char format[80];
        time_t now = time(NULL);
        struct tm local;
        memcpy(format, c->date.s, c->date.n);
        format[c->date.n] = '\0';
        if (!localtime_r(&now, &local) || strftime(date, sizeof date, format, &local) == 0)
            die("cannot print today's date in the chat template's format '%s'", format);
    }
    out->n = 0;
    size_t first = n && m[0].role == ROLE_SYSTEM, fold = (size_t)-1;
    if (first && c->place == PLACE_FIRST_USER && n > 1 && m[1].role == ROLE_USER) fold = 1;
    if (first && c->place == PLACE_LAST_USER && n > 1 && m[n - 1].role == ROLE_USER) fold = n - 1;
    if (first && c->place == PLACE_TURN) {
        buffer_table(out, c->system_begin, date);
        buffer_content(out, m[0].content, m[0].len, c->content[ROLE_SYSTEM]);
        buffer_table(out, c->system_end, date);
    } else {
        buffer_table(out, c->begin, date);
    }
    Buffer folded = {0};
    for (size_t i = first; i < n; i++) {
        const uint8_t *content = m[i].content;
        size_t len = m[i].len;
        if (i == fold) { /* the system message inside this user turn, transformed with it */
            folded.n = 0;
            buffer_table(&folded, c->fold_prefix, date);
            buffer_add(&folded, m[0].content, m[0].len);
            buffer_table(&folded, c->fold_suffix, date);
            buffer_add(&folded, content, len);
            content = folded.s, len = folded.n;
        }
        buffer_table(out, c->prefix[m[i].role], date);
        buffer_content(out, content, len, c->content[m[i].role]);
        buffer_table(out, c->suffix[m[i].role], date);
    }
    free(folded.s);
    buffer_table(out, generation ? c->generation : c->end, date);
}

/* ---- tokenizing a rendered conversation ---------------------------------------------------- */

/* The chat token whose text starts text[0..n), the longest, or NULL. */
static const ChatToken *chat_token_at(const ChatTable *c, const uint8_t *text, size_t n) {
    for (int k = 0; k < c->n_tokens; k++) {
        const ChatToken *t = &c->tokens[k];
        if (t->text.n <= n && t->text.s[0] == text[0] && memcmp(t->text.s, text, t->text.n) == 0) return t;
    }
    return NULL;
}

/* The text between two chat tokens, encoded alone (SentencePiece: its leading space as
 * chat.spaces says, Hugging Face's Prepend normalizer or Metaspace pre-tokenizer). */
static void encode_piece(const ChatTable *c, Tokenizer *tok, const uint8_t *s, size_t n, int at_start, uint32_t **ids,
                         size_t *cap, long *count) {
    if (n == 0) return;
    int spaced = s[0] == ' ' || (n >= 3 && memcmp(s, "\xE2\x96\x81", 3) == 0);
    int space = c->spaces == SPACES_EVERY || (c->spaces == SPACES_ALWAYS && !spaced) ||
                (c->spaces == SPACES_FIRST && at_start && !spaced);
    unsigned how = c->spaces == SPACES_BYTE_LEVEL ? 0 : space ? ENCODE_SPACE_FIRST : ENCODE_NO_SPACE_FIRST;
    uint32_t *piece = NULL;
    size_t piece_cap = 0;
    const char *err;
    long k = tokenizer_encode(tok, s, n, how, &piece, &piece_cap, &err);
    if (k < 0) die("cannot tokenize the conversation: %s", err);
    if ((size_t)(*count + k) > *cap) {
        *cap = 2 * (size_t)(*count + k) + 64;
        *ids = realloc(*ids, *cap * sizeof **ids);
        if (!*ids) die("out of memory for the conversation's tokens");
    }
    memcpy(*ids + *count, piece, (size_t)k * sizeof *piece);
    *count += k;
    free(piece);
}

/* A rendered conversation's tokens, split as Hugging Face's added vocabulary splits it: the
 * leftmost and longest chat token first, with the whitespace before (lstrip) and after (rstrip)
 * it that it swallows; the texts between encoded alone. */
static uint32_t *chat_encode(const ChatTable *c, Tokenizer *tok, const uint8_t *text, size_t n, long *count) {
    size_t cap = n + 16, piece = 0, len;
    uint32_t *ids = malloc_or_die(cap * sizeof *ids, "the conversation's tokens");
    *count = 0;
    for (size_t i = 0; i < n;) {
        const ChatToken *t = chat_token_at(c, text + i, n - i);
        if (!t) { i++; continue; }
        size_t start = i, stop = i + t->text.n;
        if (t->lstrip)
            while (start > piece && unicode_space(code_point(text + last_char(text, start), start - last_char(text, start), &len)))
                start = last_char(text, start);
        if (t->rstrip)
            while (stop < n && unicode_space(code_point(text + stop, n - stop, &len))) stop += len;
        encode_piece(c, tok, text + piece, start - piece, piece == 0, &ids, &cap, count);
        if ((size_t)*count + 1 > cap) ids = realloc(ids, (cap *= 2) * sizeof *ids);
        if (!ids) die("out of memory for the conversation's tokens");
        ids[(*count)++] = t->id;
        piece = i = stop;
    }
    encode_piece(c, tok, text + piece, n - piece, piece == 0, &ids, &cap, count);
    return ids;
}

/* The conversation's tokens as the model is fed them (generation prompt included or not). */
static uint32_t *chat_ids(const ChatTable *c, Tokenizer *tok, const ChatMessage *m, size_t n, int generation, long *count) {
    Buffer text = {0};
    chat_render(c, m, n, generation, &text);
    uint32_t *ids = chat_encode(c, tok, text.s, text.n, count);
    free(text.s);
    return ids;
}

/* ---- the conversation ---------------------------------------------------------------------- */

typedef struct {
    const Decoder *d;
    const GenerateOptions *g;
    const ChatTable *table;
    ChatMessage *m;
    size_t n, cap;
    Sequence seq;
    long turns, prompt_tokens, computed, generated;
    double prefill_seconds, decode_seconds;
    int verbose;                  /* a timing line after each reply */
    volatile sig_atomic_t *stop;  /* set (by Ctrl-C) to end the reply being written; or NULL */
} Conversation;

static void conversation_add(Conversation *c, int role, const uint8_t *text, size_t len) {
    for (size_t i = 0; i < len;) {
        size_t n = utf8_valid(text + i, len - i);
        if (n == 0) die("the %s turn is not valid UTF-8 text", role_names[role]);
        i += n;
    }
    if (c->n == c->cap) {
        c->m = realloc(c->m, (c->cap = 2 * c->cap + 8) * sizeof *c->m);
        if (!c->m) die("out of memory for the conversation");
    }
    c->m[c->n].role = role;
    c->m[c->n].content = malloc_or_die(len + 1, "the conversation");
    if (len) memcpy(c->m[c->n].content, text, len);
    c->m[c->n++].len = len;
}

/* The conversation's tokens with the generation prompt, its oldest turns dropped (the system
 * message kept) until they leave room for a reply in the context. */
static uint32_t *fitting_ids(Conversation *c, long *count) {
    long room = c->g->max_new >= 0 && c->g->max_new < c->d->n_ctx / 2 ? c->g->max_new : c->d->n_ctx / 2;
    for (;;) {
        chat_check(c->table, c->m, c->n);
        uint32_t *ids = chat_ids(c->table, c->d->tokenizer, c->m, c->n, 1, count);
        if (*count == 0) die("the conversation renders to no tokens: give it a user message");
        if (*count + room <= c->d->n_ctx) return ids;
        free(ids);
        size_t first = c->m[0].role == ROLE_SYSTEM, drop = 1;
        if (c->n - first <= 1)
            die("the conversation's last turn%s is %ld tokens: with %ld kept for the reply it does not fit the "
                "context of %d (-c/--ctx)", first ? " with the system message" : "", *count, room, c->d->n_ctx);
        if (c->m[first].role == ROLE_USER && c->n - first > 2 && c->m[first + 1].role == ROLE_ASSISTANT) drop = 2;
        fprintf(stderr, "note: the conversation is %ld tokens, too many for the context of %d with room for a reply: "
                "its oldest turn was dropped\n", *count, c->d->n_ctx);
        for (size_t i = first; i < first + drop; i++) free(c->m[i].content);
        memmove(c->m + first, c->m + first + drop, (c->n - first - drop) * sizeof *c->m);
        c->n -= drop;
    }
}

/* The reply as text for the conversation: bytes that are not UTF-8 (a model may emit half a
 * character) become U+FFFD, one for each maximal part of a character, as Hugging Face's decode
 * and Python's errors="replace" give them. */
static void lossy_utf8(Buffer *out, const uint8_t *s, size_t n) {
    for (size_t i = 0; i < n;) {
        size_t len = utf8_valid(s + i, n - i);
        if (len) { buffer_add(out, s + i, len); i += len; continue; }
        buffer_add(out, (const uint8_t *)"\xEF\xBF\xBD", 3);
        uint8_t c = s[i];
        size_t want = c >= 0xC2 && c <= 0xDF ? 2 : c >= 0xE0 && c <= 0xEF ? 3 : c >= 0xF0 && c <= 0xF4 ? 4 : 1, k = 1;
        while (k < want && i + k < n) { /* the continuation bytes that still fit a character */
            uint8_t b = s[i + k], lo = 0x80, hi = 0xBF;
            if (k == 1) lo = c == 0xE0 ? 0xA0 : c == 0xF0 ? 0x90 : 0x80, hi = c == 0xED ? 0x9F : c == 0xF4 ? 0x8F : 0xBF;
            if (b < lo || b > hi) break;
            k++;
        }
        i += k;
    }
}

/* The assistant's next reply: streamed to stdout, then a newline, and kept in the conversation.
 * Only the tokens the cache does not already hold go through the model. */
static void chat_reply(Conversation *c) {
    const Decoder *d = c->d;
    const GenerateOptions *g = c->g;
    Sequence *s = &c->seq;
    long n;
    uint32_t *ids = fitting_ids(c, &n);
    sequence_set(d, s, ids, n);
    free(ids);
    c->turns++;
    c->prompt_tokens += n;
    long computed = n - s->n_cached, generated = c->generated;
    c->computed += computed;
    double t0 = now_seconds();
    sequence_prefill(d, s);
    double prefill = now_seconds() - t0;
    c->prefill_seconds += prefill;
    t0 = now_seconds();
    Output out = {0};
    Buffer reply = {0};
    TokenDecoder text = tokenizer_decoder(d->tokenizer, 1);
    s->stop.tail_len = 0;
    for (long k = 0; g->max_new < 0 || k < g->max_new; k++) {
        if (c->stop && *c->stop) { /* Ctrl-C: the reply so far is the reply */
            output_finish(&out);
            fprintf(stderr, "\nnote: the reply was stopped (Ctrl-C); Ctrl-C again or Ctrl-D ends the session\n");
            break;
        }
        draw_token(d, g, s);
        if (tokenizer_stops(d->tokenizer, (uint32_t)s->next) && !g->ignore_eos) break;
        size_t len, fresh;
        const uint8_t *bytes = tokenizer_decode(d->tokenizer, &text, (uint32_t)s->next, &len);
        output_bytes(&out, bytes, len);
        buffer_add(&reply, bytes, len);
        sequence_push(s, (uint32_t)s->next);
        c->generated++;
        if (g->n_stop) {
            remember_text(&s->stop, bytes, len, &fresh);
            if (completes_stop(g, s->stop.tail, s->stop.tail_len, fresh)) break;
        }
        if (k + 1 == g->max_new) {
            output_finish(&out);
            fprintf(stderr, "\nnote: the reply was cut at %ld tokens (-n)\n", g->max_new);
            break;
        }
        if (s->n_cached >= d->n_ctx) { /* no position left for the token */
            output_finish(&out);
            fprintf(stderr, "\nnote: the reply reached the end of the context of %d positions\n", d->n_ctx);
            break;
        }
        sequence_prefill(d, s);
    }
    output_finish(&out);
    write_or_die("\n", 1);
    flush_or_die();
    double decode = now_seconds() - t0;
    c->decode_seconds += decode;
    generated = c->generated - generated;
    if (c->verbose)
        fprintf(stderr, "turn %ld: prompt %ld tokens (%ld computed) %.2f tok/s, generated %ld tokens %.2f tok/s\n",
                c->turns, n, computed, prefill > 0 ? computed / prefill : 0.0, generated,
                decode > 0 ? generated / decode : 0.0);
    Buffer text_reply = {0};
    lossy_utf8(&text_reply, reply.s ? reply.s : (const uint8_t *)"", reply.n);
    conversation_add(c, ROLE_ASSISTANT, text_reply.s ? text_reply.s : (const uint8_t *)"", text_reply.n);
    free(reply.s);
    free(text_reply.s);
}

/* Everything but the system message goes: the conversation starts over. */
static void conversation_reset(Conversation *c) {
    size_t keep = c->n && c->m[0].role == ROLE_SYSTEM;
    for (size_t i = keep; i < c->n; i++) free(c->m[i].content);
    c->n = keep;
}

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
    "  /exit          end the session (also Ctrl-D, or Ctrl-C twice)\n"
    "  //TEXT         send /TEXT as a turn\n"
    "Ctrl-C stops a reply; the conversation goes on from what it said.\n";

/* A line starting with '/' on the terminal: one of the REPL's commands, answered on stderr.
 * Returns 0 when the session ends. */
static int chat_command(Conversation *c, const Buffer *turn) {
    Text line = {turn->s, turn->n};
    if (text_is(line, "/exit") || text_is(line, "/quit")) return 0;
    if (text_is(line, "/help")) {
        fputs(chat_help, stderr);
    } else if (text_is(line, "/reset")) {
        conversation_reset(c);
        fprintf(stderr, "(the conversation starts over%s)\n", c->n ? "; the system message stays" : "");
    } else if (text_is(line, "/system") || (line.n > 8 && memcmp(line.s, "/system ", 8) == 0)) {
        if (c->n && c->m[0].role == ROLE_SYSTEM) { /* the old one goes */
            free(c->m[0].content);
            memmove(c->m, c->m + 1, --c->n * sizeof *c->m);
        }
        if (line.n > 8) { /* the new one goes first */
            conversation_add(c, ROLE_SYSTEM, line.s + 8, line.n - 8);
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

/* --chat: see the top of this file and docs/cli.md's "Chat". */
static void chat(const Decoder *d, const ModelFile *f, const ChatOptions *o, const GenerateOptions *g,
                 const char *model_path, double load_seconds) {
    ChatTable table = chat_table(f, d->tokenizer);
    if (!table.present)
        die("'%s' has no chat template (not an instruct model, or exported before chat): generate with -i instead", model_path);
    if (table.refusal.n)
        die("this model's chat template cannot be used: %.*s", (int)table.refusal.n, (const char *)table.refusal.s);
    Conversation c = {.d = d, .g = g, .table = &table, .verbose = o->verbose};
    if (o->system) conversation_add(&c, ROLE_SYSTEM, (const uint8_t *)o->system, strlen(o->system));
    if (o->messages_path) {
        size_t len, n;
        char err[400];
        uint8_t *text = read_file_or_die(o->messages_path, &len);
        if (json_messages(text, len, &c.m, &n, err, sizeof err))
            die("messages '%s': %s", strcmp(o->messages_path, "-") ? o->messages_path : "standard input", err);
        c.n = c.cap = n;
        free(text);
        chat_check(&table, c.m, c.n);
    }
    if (o->tokenize) {
        long n;
        uint32_t *ids = chat_ids(&table, d->tokenizer, c.m, c.n, o->generation_prompt, &n);
        for (long i = 0; i < n; i++) printf(i ? " %u" : "%u", ids[i]);
        printf("\n");
        flush_or_die();
        free(ids);
    } else {
        fprintf(stderr, "seed: %llu\n", (unsigned long long)g->seed);
        sequence_init(&c.seq, 0, 1024, d->vocab_size);
        if (!build_sampler(&c.seq.sampler, d->vocab_size, g->temperature, g->top_k, g->top_p, g->seed))
            die("out of memory for the sampler");
        d->reserve(d->model, d->n_ctx);
        if (o->messages_path) {
            chat_reply(&c);
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
                conversation_add(&c, ROLE_USER, text, len);
                chat_reply(&c);
            }
            if (terminal) sigaction(SIGINT, &before, NULL);
            free(turn.s);
        }
        fprintf(stderr, "timing: load %.3f s, %ld turns, prompt %ld tokens (%ld computed, the rest from the cache) "
                "%.2f tok/s, generated %ld tokens %.2f tok/s\n", load_seconds, c.turns, c.prompt_tokens, c.computed,
                c.prefill_seconds > 0 ? c.computed / c.prefill_seconds : 0.0, c.generated,
                c.decode_seconds > 0 ? c.generated / c.decode_seconds : 0.0);
        sequence_free(&c.seq);
    }
    free_messages(c.m, c.n);
    free_chat_table(&table);
}

#endif
