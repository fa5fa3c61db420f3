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
 *   chat_table()        the table from a weight file's metadata, checked
 *   chat_ids()          a conversation's tokens, generation prompt included or not
 *   conversation_add()  a turn; chat_reply() the assistant's next one, through the decode step
 * Each returns 0 (or NULL) with an Error naming the problem; the conversation is still usable
 * after one. chat_repl.h is --chat on the command line.
 */
#ifndef CHAT_H
#define CHAT_H

#include "util.h"

#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "generate.h"
#include "json.h"
#include "load.h"
#include "sequence.h"
#include "sink.h"
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

/* Which of names (NULL-ended) the value is (*choice), or the error naming the key. */
static int table_choice(Text v, const char *key, const char *const *names, int *choice, Error *e) {
    for (int i = 0; names[i]; i++)
        if (text_is(v, names[i])) {
            *choice = i;
            return 1;
        }
    return fail(e, "model file: metadata %s is '%.*s', none of the values run knows" HINT, key, (int)(v.n < 40 ? v.n : 40),
                (const char *)v.s);
}

/* chat.tokens: "ID", "ID:FLAGS" or "ID:FLAGS:HEX" separated by spaces (export/tokenizer_files.py). */
static int table_tokens(ChatTable *c, Text v, const Tokenizer *tok, Error *e) {
    if (!(c->tokens = alloc_zeroed((v.n / 2 + 1) * sizeof *c->tokens, "the chat tokens", e))) return 0;
    size_t at = 0;
    while (at < v.n) {
        size_t end = at;
        while (end < v.n && v.s[end] != ' ') end++;
        char item[600];
        if (end - at >= sizeof item)
            return fail(e, "model file: metadata chat.tokens has an entry longer than %zu bytes", sizeof item);
        memcpy(item, v.s + at, end - at);
        item[end - at] = '\0';
        char *rest;
        unsigned long id = strtoul(item, &rest, 10);
        if (rest == item || id >= tok->n_tokens)
            return fail(e, "model file: metadata chat.tokens names '%s', not a token id", item);
        ChatToken *t = &c->tokens[c->n_tokens++];
        t->id = (uint32_t)id;
        t->text.s = tokenizer_token(tok, t->id, &t->text.n);
        if (*rest == ':') {
            for (rest++; *rest == 'l' || *rest == 'r'; rest++) *(*rest == 'l' ? &t->lstrip : &t->rstrip) = 1;
            if (*rest == ':') { /* the text in hex, where it differs from the token's bytes */
                size_t n = strlen(++rest);
                if (n % 2 || n == 0) return fail(e, "model file: metadata chat.tokens has a bad text for token %lu", id);
                uint8_t *text = alloc_uninit(n / 2, "the chat tokens", e);
                if (!text) return 0;
                t->text = (Text){text, n / 2};
                t->owned = 1;
                for (size_t j = 0; j < n / 2; j++) {
                    unsigned byte;
                    if (sscanf(rest + 2 * j, "%2x", &byte) != 1)
                        return fail(e, "model file: metadata chat.tokens has a bad text for token %lu", id);
                    text[j] = (uint8_t)byte;
                }
                rest += n;
            }
        }
        if (*rest) return fail(e, "model file: metadata chat.tokens has a bad entry '%s'", item);
        if (t->text.n == 0) return fail(e, "model file: metadata chat.tokens names token %lu, which has no text", id);
        at = end + 1;
    }
    for (int i = 1; i < c->n_tokens; i++) /* longest first: the longest match at a position wins */
        for (int j = i; j > 0 && c->tokens[j - 1].text.n < c->tokens[j].text.n; j--) {
            ChatToken swap = c->tokens[j];
            c->tokens[j] = c->tokens[j - 1];
            c->tokens[j - 1] = swap;
        }
    return 1;
}

static void free_chat_table(ChatTable *c);

/* The chat table of a file's metadata (present = 0 when it has none); 0 with the error, the table
 * then empty. */
static int chat_table(ChatTable *table, const ModelFile *f, const Tokenizer *tok, Error *e) {
    static const char *const places[] = {"none", "turn", "first-user", "last-user", NULL};
    static const char *const contents[] = {"keep", "strip", "lstrip", "rstrip", NULL};
    static const char *const spaces[] = {"byte-level", "every", "first", "always", "never", NULL};
    ChatTable c = {0};
    Text tokens = {0};
    int ok = 1;
    int seen = 0;
    uint64_t at = 4;
    for (uint32_t i = 0; ok && i < f->n_metadata; i++) {
        MetadataEntry entry = metadata_next(f, &at);
        Text v = {entry.value, entry.value_len}, k = {entry.key, entry.key_len};
        if (entry.key_len < 5 || memcmp(entry.key, "chat.", 5) != 0) continue;
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
        if (text_is(k, "chat.system.place")) ok = table_choice(v, "chat.system.place", places, &c.place, e);
        if (text_is(k, "chat.user.content"))
            ok = table_choice(v, "chat.user.content", contents, &c.content[ROLE_USER], e);
        if (text_is(k, "chat.assistant.content"))
            ok = table_choice(v, "chat.assistant.content", contents, &c.content[ROLE_ASSISTANT], e);
        if (text_is(k, "chat.system.content"))
            ok = table_choice(v, "chat.system.content", contents, &c.content[ROLE_SYSTEM], e);
        if (text_is(k, "chat.spaces")) ok = table_choice(v, "chat.spaces", spaces, &c.spaces, e);
        if (text_is(k, "chat.rules")) {
            static const char *const rules[] = {"alternate", "user-first", "no-system", "no-later-system", NULL};
            for (size_t s = 0, rule; ok && s < v.n;) {
                size_t end = s;
                while (end < v.n && v.s[end] != ' ') end++;
                int choice = 0;
                ok = table_choice((Text){v.s + s, end - s}, "chat.rules", rules, &choice, e);
                rule = (size_t)choice;
                if (ok) c.rules |= 1 << rule;
                s = end + 1;
            }
        }
    }
    if (ok && c.present && !c.refusal.n && seen != ((1 << 1) | (1 << 9) | (1 << 11)))
        ok = fail(e, "model file: the chat table lacks chat.begin, chat.user.prefix or chat.assistant.prefix" HINT);
    if (ok && c.date.n > 64) ok = fail(e, "model file: metadata chat.date is %zu bytes long, more than 64", c.date.n);
    if (ok && tokens.n) ok = table_tokens(&c, tokens, tok, e);
    if (ok && (c.spaces == SPACES_BYTE_LEVEL) != !(tok->flags & TOK_SENTENCEPIECE) && c.present && !c.refusal.n)
        ok = fail(e, "model file: metadata chat.spaces does not fit its tokenizer" HINT);
    if (!ok) free_chat_table(&c);
    *table = c;
    return ok;
}

static void free_chat_table(ChatTable *c) {
    for (int i = 0; i < c->n_tokens; i++) if (c->tokens[i].owned) free((void *)c->tokens[i].text.s);
    free(c->tokens);
    memset(c, 0, sizeof *c);
}

/* ---- rendering --------------------------------------------------------------------------- */

/* Bytes that grow; once memory has run out (failed) adds do nothing, and the caller checks the
 * flag when the buffer is done, as a stream's error flag. */
typedef struct { uint8_t *s; size_t n, cap; int failed; } Buffer;

static void buffer_add(Buffer *b, const uint8_t *s, size_t n) {
    if (b->failed) return;
    if (b->n + n + 1 > b->cap) {
        size_t cap = 2 * (b->n + n) + 256;
        uint8_t *bigger = realloc(b->s, cap);
        if (!bigger) {
            b->failed = 1;
            return;
        }
        b->s = bigger, b->cap = cap;
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
static int chat_check(const ChatTable *c, const ChatMessage *m, size_t n, Error *e) {
    if (n == 0) return fail(e, "the conversation has no messages");
    size_t first = m[0].role == ROLE_SYSTEM;
    if (first && (c->rules & RULE_NO_SYSTEM))
        return fail(e, "this model's chat template drops or refuses system messages: leave it out");
    for (size_t i = first; i < n; i++) {
        if (m[i].role == ROLE_SYSTEM && (c->rules & (RULE_NO_LATER_SYSTEM | RULE_NO_SYSTEM)))
            return fail(e, "message %zu is a system message: this model's chat template takes one only at the start",
                        i + 1);
        int want = (i - first) % 2 == 0 ? ROLE_USER : ROLE_ASSISTANT;
        if ((c->rules & RULE_ALTERNATE) && m[i].role != want)
            return fail(e, "message %zu is from the %s: this model's chat template wants user and assistant turns to "
                        "alternate, starting with the user", i + 1, role_names[m[i].role]);
        if ((c->rules & RULE_USER_FIRST) && i == first && m[i].role != ROLE_USER)
            return fail(e, "message %zu is from the %s: this model's chat template wants the user first", i + 1,
                        role_names[m[i].role]);
    }
    return 1;
}

/* The conversation rendered as its template renders it (export/chat_template.py's table_render). */
static int chat_render(const ChatTable *c, const ChatMessage *m, size_t n, int generation, Buffer *out, Error *e) {
    char date[256] = "";
    if (c->date.n) {
        char format[80];
        time_t now = time(NULL);
        struct tm local;
        memcpy(format, c->date.s, c->date.n);
        format[c->date.n] = '\0';
        if (!localtime_r(&now, &local) || strftime(date, sizeof date, format, &local) == 0)
            return fail(e, "cannot print today's date in the chat template's format '%s'", format);
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
    buffer_table(out, generation ? c->generation : c->end, date);
    int failed = folded.failed || out->failed;
    free(folded.s);
    return failed ? fail(e, "out of memory for the conversation") : 1;
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
 * chat.spaces says, Hugging Face's Prepend normalizer or Metaspace pre-tokenizer), appended to
 * ids[0..*count). */
static int encode_piece(const ChatTable *c, Tokenizer *tok, const uint8_t *s, size_t n, int at_start, uint32_t **ids,
                        size_t *cap, long *count, Error *e) {
    if (n == 0) return 1;
    int spaced = s[0] == ' ' || (n >= 3 && memcmp(s, "\xE2\x96\x81", 3) == 0);
    int space = c->spaces == SPACES_EVERY || (c->spaces == SPACES_ALWAYS && !spaced) ||
                (c->spaces == SPACES_FIRST && at_start && !spaced);
    unsigned how = c->spaces == SPACES_BYTE_LEVEL ? 0 : space ? ENCODE_SPACE_FIRST : ENCODE_NO_SPACE_FIRST;
    uint32_t *piece = NULL;
    size_t piece_cap = 0;
    const char *err;
    long k = tokenizer_encode(tok, s, n, how, &piece, &piece_cap, &err);
    int ok = k >= 0 ? grow((void **)ids, cap, (size_t)(*count + k), sizeof **ids, "the conversation's tokens", e)
                    : fail(e, "cannot tokenize the conversation: %s", err);
    if (ok) {
        memcpy(*ids + *count, piece, (size_t)k * sizeof *piece);
        *count += k;
    }
    free(piece);
    return ok;
}

/* A rendered conversation's tokens, split as Hugging Face's added vocabulary splits it: the
 * leftmost and longest chat token first, with the whitespace before (lstrip) and after (rstrip)
 * it that it swallows; the texts between encoded alone. NULL with the error. */
static uint32_t *chat_encode(const ChatTable *c, Tokenizer *tok, const uint8_t *text, size_t n, long *count, Error *e) {
    size_t cap = n + 16, piece = 0, len;
    uint32_t *ids = alloc_uninit(cap * sizeof *ids, "the conversation's tokens", e);
    *count = 0;
    for (size_t i = 0; ids && i < n;) {
        const ChatToken *t = chat_token_at(c, text + i, n - i);
        if (!t) { i++; continue; }
        size_t start = i, stop = i + t->text.n;
        if (t->lstrip)
            while (start > piece && unicode_space(code_point(text + last_char(text, start), start - last_char(text, start), &len)))
                start = last_char(text, start);
        if (t->rstrip)
            while (stop < n && unicode_space(code_point(text + stop, n - stop, &len))) stop += len;
        if (!encode_piece(c, tok, text + piece, start - piece, piece == 0, &ids, &cap, count, e) ||
            !grow((void **)&ids, &cap, (size_t)*count + 1, sizeof *ids, "the conversation's tokens", e)) {
            free(ids);
            return NULL;
        }
        ids[(*count)++] = t->id;
        piece = i = stop;
    }
    if (ids && !encode_piece(c, tok, text + piece, n - piece, piece == 0, &ids, &cap, count, e)) {
        free(ids);
        return NULL;
    }
    return ids;
}

/* The conversation's tokens as the model is fed them (generation prompt included or not), or
 * NULL with the error. */
static uint32_t *chat_ids(const ChatTable *c, Tokenizer *tok, const ChatMessage *m, size_t n, int generation, long *count,
                          Error *e) {
    Buffer text = {0};
    uint32_t *ids = chat_render(c, m, n, generation, &text, e) ? chat_encode(c, tok, text.s, text.n, count, e) : NULL;
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
    int cache;                    /* its key/value cache: sequence `cache` of the decoder's */
    Sequence seq;
    long turns, prompt_tokens, computed, generated;
    double prefill_seconds, decode_seconds;
    volatile sig_atomic_t *stop;  /* set (by Ctrl-C) to end the reply being written; or NULL */
    /* the last reply's */
    long reply_prompt, reply_computed, reply_generated;
    double reply_prefill_seconds, reply_decode_seconds;
    Finish reply_finish;          /* why it ended */
} Conversation;

/* A conversation of table's template in key/value cache `cache` of the decoder's (0 for one at
 * a time; conversations kept side by side each have their own), with no turns yet. */
static void conversation_init(Conversation *c, const Decoder *d, const GenerateOptions *g, const ChatTable *table,
                              int cache) {
    *c = (Conversation){.d = d, .g = g, .table = table, .cache = cache};
}

/* Its sequence made ready for replies (the decoder's caches reserved for the whole context),
 * before its first one; 0 with the error. */
static int conversation_start(Conversation *c, Error *e) {
    const Decoder *d = c->d;
    const GenerateOptions *g = c->g;
    if (!sequence_init(&c->seq, c->cache, 1024, d->vocab_size, e) ||
        (!build_sampler(&c->seq.sampler, d->vocab_size, g->temperature, g->top_k, g->top_p, g->seed) &&
         !fail(e, "out of memory for the sampler")) ||
        !d->reserve(d->model, d->n_ctx, e)) {
        sequence_free(&c->seq);
        return 0;
    }
    return 1;
}

static void conversation_free(Conversation *c) {
    free_messages(c->m, c->n);
    sequence_free(&c->seq);
    memset(c, 0, sizeof *c);
}

/* A turn at the end: text, which must be UTF-8. */
static int conversation_add(Conversation *c, int role, const uint8_t *text, size_t len, Error *e) {
    for (size_t i = 0; i < len;) {
        size_t n = utf8_valid(text + i, len - i);
        if (n == 0) return fail(e, "the %s turn is not valid UTF-8 text", role_names[role]);
        i += n;
    }
    TRY(grow((void **)&c->m, &c->cap, c->n + 1, sizeof *c->m, "the conversation", e));
    uint8_t *content = alloc_uninit(len + 1, "the conversation", e);
    if (!content) return 0;
    if (len) memcpy(content, text, len);
    c->m[c->n++] = (ChatMessage){.role = role, .content = content, .len = len};
    return 1;
}

/* The conversation's tokens with the generation prompt, its oldest turns dropped (the system
 * message kept, the sink told) until they leave room for a reply in the context. NULL with the
 * error. */
static uint32_t *fitting_ids(Conversation *c, Sink *sink, long *count, Error *e) {
    long room = c->g->max_new >= 0 && c->g->max_new < c->d->n_ctx / 2 ? c->g->max_new : c->d->n_ctx / 2;
    for (;;) {
        if (!chat_check(c->table, c->m, c->n, e)) return NULL;
        uint32_t *ids = chat_ids(c->table, c->d->tokenizer, c->m, c->n, 1, count, e);
        if (!ids) return NULL;
        if (*count == 0) {
            free(ids);
            fail(e, "the conversation renders to no tokens: give it a user message");
            return NULL;
        }
        if (*count + room <= c->d->n_ctx) return ids;
        free(ids);
        size_t first = c->m[0].role == ROLE_SYSTEM, drop = 1;
        if (c->n - first <= 1) {
            fail(e, "the conversation's last turn%s is %ld tokens: with %ld kept for the reply it does not fit the "
                 "context of %d (-c/--ctx)", first ? " with the system message" : "", *count, room, c->d->n_ctx);
            return NULL;
        }
        if (c->m[first].role == ROLE_USER && c->n - first > 2 && c->m[first + 1].role == ROLE_ASSISTANT) drop = 2;
        sink_note(sink, "the conversation is %ld tokens, too many for the context of %d with room for a reply: its "
                  "oldest turn was dropped", *count, c->d->n_ctx);
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

/* A reply's text on its way to the caller's sink, kept for the conversation too. */
typedef struct {
    Sink *to;
    Buffer reply;
} ReplyRecorder;

static int record_text(Sink *sink, int seq, const uint8_t *bytes, size_t n) {
    ReplyRecorder *r = sink->context;
    buffer_add(&r->reply, bytes, n);
    return r->to->text(r->to, seq, bytes, n);
}
static void record_finish(Sink *sink, int seq, Finish why) {
    ReplyRecorder *r = sink->context;
    r->to->finish(r->to, seq, why);
}
static void record_note(Sink *sink, const char *message) {
    ReplyRecorder *r = sink->context;
    if (r->to->note) r->to->note(r->to, message);
}

/* The assistant's next reply, its text to the sink (sequence 0) as it is made, and kept in the
 * conversation as the template will render it. Only the tokens the cache does not already hold
 * go through the model; then the reply is decoded step by step (generate.h's decode_step) until
 * it ends (c->reply_finish says why: a stop token, -n, the context's end, or c->stop). 0 with
 * the error; the conversation is then as before the call. */
static int chat_reply(Conversation *c, Sink *sink, Error *e) {
    const Decoder *d = c->d;
    Sequence *s = &c->seq;
    long n;
    size_t before = c->n;
    if (!s->tokens && !conversation_start(c, e)) return 0;
    uint32_t *ids = fitting_ids(c, sink, &n, e);
    if (!ids || !sequence_set(d, s, ids, n, e)) {
        free(ids);
        return 0;
    }
    free(ids);
    c->turns++;
    c->prompt_tokens += n;
    c->reply_prompt = n;
    c->reply_computed = n - s->n_cached;
    c->computed += c->reply_computed;
    double t0 = now_seconds();
    sequence_prefill(d, s);
    c->reply_prefill_seconds = now_seconds() - t0;
    c->prefill_seconds += c->reply_prefill_seconds;
    t0 = now_seconds();
    s->text = tokenizer_decoder(d->tokenizer, 1);
    s->held = (Utf8Hold){0};
    s->stop.tail_len = 0;
    s->n_generated = 0;
    s->done = 0;
    ReplyRecorder recorder = {.to = sink};
    Sink recording = {.text = record_text, .finish = record_finish, .note = record_note, .context = &recorder};
    Decoding x;
    Sequence *active[1] = {s};
    int going = 1, ok = decoding_init(&x, d, c->g, &recording, -1, 1, e);
    while (ok && going) {
        if (c->stop && *c->stop) { /* Ctrl-C: the reply so far is the reply */
            finish_sequence(&x, s, FINISH_STOPPED);
            break;
        }
        ok = (going = decode_step(&x, active, going, e)) >= 0;
    }
    decoding_free(&x);
    c->reply_finish = s->finish;
    c->reply_generated = s->n_generated;
    c->generated += s->n_generated;
    c->reply_decode_seconds = now_seconds() - t0;
    c->decode_seconds += c->reply_decode_seconds;
    Buffer text = {0};
    lossy_utf8(&text, recorder.reply.s ? recorder.reply.s : (const uint8_t *)"", recorder.reply.n);
    if (ok && (recorder.reply.failed || text.failed)) ok = fail(e, "out of memory for the reply");
    if (ok) ok = conversation_add(c, ROLE_ASSISTANT, text.s ? text.s : (const uint8_t *)"", text.n, e);
    free(recorder.reply.s);
    free(text.s);
    if (!ok) { /* the turns dropped to fit it stay dropped; a reply not kept is not half kept */
        for (size_t i = before; i < c->n; i++) free(c->m[i].content);
        if (c->n > before) c->n = before;
    }
    return ok;
}

/* Everything but the system message goes: the conversation starts over. */
static void conversation_reset(Conversation *c) {
    size_t keep = c->n && c->m[0].role == ROLE_SYSTEM;
    for (size_t i = keep; i < c->n; i++) free(c->m[i].content);
    c->n = keep;
}

#endif
