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
enum { CONTENT_KEEP, CONTENT_STRIP, CONTENT_LSTRIP, CONTENT_RSTRIP, CONTENT_LSTRIP_NEWLINES }; /* chat.ROLE.content */
enum { SPACES_BYTE_LEVEL, SPACES_EVERY, SPACES_FIRST, SPACES_ALWAYS, SPACES_NEVER }; /* chat.spaces */
enum { RULE_ALTERNATE = 1, RULE_USER_FIRST = 2, RULE_NO_SYSTEM = 4, RULE_NO_LATER_SYSTEM = 8 }; /* chat.rules */

typedef struct {
    uint32_t id;
    Text text;           /* what spells it in a rendered conversation */
    int lstrip, rstrip;  /* it swallows the whitespace before / after it */
    int owned;           /* text is allocated here (chat.tokens spells it) */
} ChatToken;

/* What a template option's value may change: the table's strings and its contents' transforms. */
typedef struct {
    Text begin, end, generation;
    Text prefix[ROLES], suffix[ROLES];
    int content[ROLES];
    Text system_begin, system_end, fold_prefix, fold_suffix;
    Text think_open, think_close;  /* chat.reasoning's block around an assistant's reasoning */
} ChatStrings;

#define CHAT_OPTIONS 2 /* the boolean options of a template (chat.option.NAME) */
#define CHAT_FLAGS 8   /* the texts of a system message that set an option (chat.system.flags) */

typedef struct {
    Text name;
    int value;        /* its default */
} ChatOption;

typedef struct {      /* chat.when.NAME.VALUE.KEY: KEY's text when option NAME is VALUE */
    int option, value;
    Text key, text;
} ChatOverride;

typedef struct {      /* a system message holding text sets option `option` to `value` */
    Text text;
    int option, value;
} ChatFlag;

typedef struct {
    int present;                 /* the file has a chat template */
    Text refusal;                /* why it cannot be used, or empty */
    ChatStrings s;               /* at the options' defaults */
    Text date;
    ChatOption options[CHAT_OPTIONS];
    int n_options;
    ChatOverride *overrides;     /* (n_overrides) */
    int n_overrides;
    ChatFlag flags[CHAT_FLAGS];  /* in the template's order: the first found wins */
    int n_flags;
    Text refuse;                 /* texts a system message may not hold, space-separated */
    Text think_tags;             /* "OPEN CLOSE": the tags around a model's reasoning, or empty */
    int place, rules, spaces;
    int fold_outside;            /* a system message folded into the first user turn stays out of
                                    its content's transform (Gemma 3), else goes in (Llama 2) */
    int empty_as_none;           /* a system message that comes out empty prints as none (SmolLM3) */
    int reasoning;               /* Qwen3's rule for an assistant's reasoning (chat.reasoning) */
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

/* One key of the table's strings and transforms (KEY of chat.KEY, or of chat.when.NAME.VALUE.KEY)
 * into s: 1 when it is one of them, 0 when not, -1 with the error. */
static int strings_key(ChatStrings *s, Text k, Text v, int *seen, Error *e) {
    static const char *const contents[] = {"keep", "strip", "lstrip", "rstrip", "lstrip-newlines", NULL};
    struct { const char *name; Text *to; } strings[] = {
        {"begin", &s->begin}, {"end", &s->end}, {"generation", &s->generation},
        {"system.begin", &s->system_begin}, {"system.end", &s->system_end},
        {"system.fold-prefix", &s->fold_prefix}, {"system.fold-suffix", &s->fold_suffix},
        {"user.prefix", &s->prefix[ROLE_USER]}, {"user.suffix", &s->suffix[ROLE_USER]},
        {"assistant.prefix", &s->prefix[ROLE_ASSISTANT]}, {"assistant.suffix", &s->suffix[ROLE_ASSISTANT]},
        {"system.prefix", &s->prefix[ROLE_SYSTEM]}, {"system.suffix", &s->suffix[ROLE_SYSTEM]},
        {"think.open", &s->think_open}, {"think.close", &s->think_close}};
    for (size_t i = 0; i < sizeof strings / sizeof strings[0]; i++)
        if (text_is(k, strings[i].name)) {
            *strings[i].to = v;
            if (seen) *seen |= 1 << i;
            return 1;
        }
    static const char *const roles[ROLES] = {"system.content", "user.content", "assistant.content"};
    for (int r = 0; r < ROLES; r++)
        if (text_is(k, roles[r])) return table_choice(v, "chat.ROLE.content", contents, &s->content[r], e) ? 1 : -1;
    return 0;
}

/* k with its first `skip` bytes and the next part up to a dot taken off: *part gets that part. */
static Text key_part(Text k, size_t skip, Text *part) {
    size_t i = skip;
    while (i < k.n && k.s[i] != '.') i++;
    *part = (Text){k.s + skip, i - skip};
    return i < k.n ? (Text){k.s + i + 1, k.n - i - 1} : (Text){k.s + k.n, 0};
}

static int text_equal(Text a, Text b) { return a.n == b.n && memcmp(a.s, b.s, a.n) == 0; }

/* "true" or "false" (*value), else the error naming the key. */
static int table_bool(Text v, const char *key, int *value, Error *e) {
    static const char *const bools[] = {"false", "true", NULL};
    return table_choice(v, key, bools, value, e);
}

/* chat.system.flags: "TEXT=NAME.VALUE" separated by spaces, each NAME one of the options. */
static int table_flags(ChatTable *c, Text v, Error *e) {
    for (size_t at = 0; at < v.n;) {
        size_t end = at, eq = 0;
        while (end < v.n && v.s[end] != ' ') end++;
        for (size_t i = at; i < end && !eq; i++) if (v.s[i] == '=') eq = i;
        Text setting = {v.s + eq + 1, eq ? end - eq - 1 : 0}, name, value;
        Text rest = key_part(setting, 0, &name);
        value = rest;
        int option = -1, b = 0;
        for (int o = 0; o < c->n_options; o++) if (text_equal(c->options[o].name, name)) option = o;
        if (!eq || eq == at || option < 0 || c->n_flags == CHAT_FLAGS || !table_bool(value, "chat.system.flags", &b, e))
            return fail(e, "model file: metadata chat.system.flags has a bad entry '%.*s'" HINT, (int)(end - at < 60 ? end - at : 60),
                        (const char *)v.s + at);
        c->flags[c->n_flags++] = (ChatFlag){{v.s + at, eq - at}, option, b};
        at = end + 1;
    }
    return 1;
}

/* The chat table of a file's metadata (present = 0 when it has none); 0 with the error, the table
 * then empty. */
static int chat_table(ChatTable *table, const ModelFile *f, const Tokenizer *tok, Error *e) {
    static const char *const places[] = {"none", "turn", "first-user", "last-user", NULL};
    static const char *const spaces[] = {"byte-level", "every", "first", "always", "never", NULL};
    static const char *const folds[] = {"inside", "outside", NULL};
    ChatTable c = {0};
    Text tokens = {0}, flags = {0};
    int ok = 1, seen = 0;
    size_t overrides_cap = 0;
    uint64_t at = 4;
    /* the options first (chat.option.NAME), as the keys that depend on them name them */
    for (uint32_t i = 0; ok && i < f->n_metadata; i++) {
        MetadataEntry entry = metadata_next(f, &at);
        Text v = {entry.value, entry.value_len}, k = {entry.key, entry.key_len}, name;
        if (k.n < 12 || memcmp(k.s, "chat.option.", 12) != 0) continue;
        key_part(k, 12, &name);
        if (c.n_options == CHAT_OPTIONS || name.n == 0 || name.n != k.n - 12)
            ok = fail(e, "model file: metadata %.*s: a chat template has at most %d options, each a name" HINT,
                      (int)k.n, (const char *)k.s, CHAT_OPTIONS);
        else
            ok = table_bool(v, "chat.option", &c.options[c.n_options].value, e), c.options[c.n_options++].name = name;
    }
    at = 4;
    for (uint32_t i = 0; ok && i < f->n_metadata; i++) {
        MetadataEntry entry = metadata_next(f, &at);
        Text v = {entry.value, entry.value_len}, k = {entry.key, entry.key_len};
        if (k.n < 5 || memcmp(k.s, "chat.", 5) != 0) continue;
        c.present = 1;
        Text key = {k.s + 5, k.n - 5};
        int found = strings_key(&c.s, key, v, &seen, e);
        if (found) { ok = found > 0; continue; }
        if (text_is(key, "refusal")) c.refusal = v;
        else if (text_is(key, "date")) c.date = v;
        else if (text_is(key, "tokens")) tokens = v;
        else if (text_is(key, "system.flags")) flags = v;
        else if (text_is(key, "system.refuse")) c.refuse = v;
        else if (text_is(key, "think.tags")) c.think_tags = v;
        else if (text_is(key, "system.place")) ok = table_choice(v, "chat.system.place", places, &c.place, e);
        else if (text_is(key, "system.fold")) ok = table_choice(v, "chat.system.fold", folds, &c.fold_outside, e);
        else if (text_is(key, "system.empty")) {
            static const char *const empties[] = {"none", NULL};
            int none = 0;
            ok = table_choice(v, "chat.system.empty", empties, &none, e);
            c.empty_as_none = 1;
        } else if (text_is(key, "reasoning")) {
            static const char *const rules[] = {"after-last-user", NULL};
            int rule = 0;
            ok = table_choice(v, "chat.reasoning", rules, &rule, e);
            c.reasoning = 1;
        } else if (text_is(key, "spaces")) ok = table_choice(v, "chat.spaces", spaces, &c.spaces, e);
        else if (key.n > 5 && memcmp(key.s, "when.", 5) == 0) { /* chat.when.NAME.VALUE.KEY */
            Text name, value, rest = key_part(key, 5, &name);
            rest = key_part(rest, 0, &value);
            int option = -1, b = 0;
            for (int o = 0; o < c.n_options; o++) if (text_equal(c.options[o].name, name)) option = o;
            ChatStrings probe = {0};
            if (option < 0 || !table_bool(value, "chat.when", &b, e) || strings_key(&probe, rest, v, NULL, e) != 1) {
                ok = fail(e, "model file: metadata %.*s names no option, value and key of the table" HINT,
                          (int)(k.n < 80 ? k.n : 80), (const char *)k.s);
            } else if (grow((void **)&c.overrides, &overrides_cap, (size_t)c.n_overrides + 1, sizeof *c.overrides,
                            "the chat table", e)) {
                c.overrides[c.n_overrides++] = (ChatOverride){option, b, rest, v};
            } else {
                ok = 0;
            }
        } else if (text_is(key, "rules")) {
            static const char *const rules[] = {"alternate", "user-first", "no-system", "no-later-system", NULL};
            for (size_t s0 = 0; ok && s0 < v.n;) {
                size_t end = s0;
                while (end < v.n && v.s[end] != ' ') end++;
                int choice = 0;
                ok = table_choice((Text){v.s + s0, end - s0}, "chat.rules", rules, &choice, e);
                if (ok) c.rules |= 1 << choice;
                s0 = end + 1;
            }
        }
    }
    const int needed = (1 << 0) | (1 << 7) | (1 << 9); /* begin, user.prefix, assistant.prefix */
    if (ok && c.present && !c.refusal.n && (seen & needed) != needed)
        ok = fail(e, "model file: the chat table lacks chat.begin, chat.user.prefix or chat.assistant.prefix" HINT);
    if (ok && c.reasoning && (c.think_tags.n < 3 || !memchr(c.think_tags.s, ' ', c.think_tags.n)))
        ok = fail(e, "model file: the chat table's reasoning has no chat.think.tags" HINT);
    if (ok && c.date.n > 64) ok = fail(e, "model file: metadata chat.date is %zu bytes long, more than 64", c.date.n);
    if (ok && flags.n) ok = table_flags(&c, flags, e);
    if (ok && tokens.n) ok = table_tokens(&c, tokens, tok, e);
    if (ok && (c.spaces == SPACES_BYTE_LEVEL) != !(tok->flags & TOK_SENTENCEPIECE) && c.present && !c.refusal.n)
        ok = fail(e, "model file: metadata chat.spaces does not fit its tokenizer" HINT);
    if (!ok) free_chat_table(&c);
    *table = c;
    return ok;
}

/* The index of a template option by name, or -1. */
static int chat_option(const ChatTable *c, const char *name) {
    for (int o = 0; o < c->n_options; o++)
        if (c->options[o].name.n == strlen(name) && memcmp(c->options[o].name.s, name, strlen(name)) == 0) return o;
    return -1;
}

static void free_chat_table(ChatTable *c) {
    for (int i = 0; i < c->n_tokens; i++) if (c->tokens[i].owned) free((void *)c->tokens[i].text.s);
    free(c->tokens);
    free(c->overrides);
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
    if (how == CONTENT_LSTRIP_NEWLINES) /* Python's str.lstrip("\n") */
        while (n > 0 && s[0] == '\n') s++, n--;
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

/* Where needle first occurs in s[0..n), or -1. */
static long find_text(const uint8_t *s, size_t n, const uint8_t *needle, size_t len) {
    if (len == 0) return 0;
    for (size_t i = 0; i + len <= n; i++)
        if (s[i] == needle[0] && memcmp(s + i, needle, len) == 0) return (long)i;
    return -1;
}

/* Where needle last occurs in s[0..n), or -1. */
static long find_last(const uint8_t *s, size_t n, const uint8_t *needle, size_t len) {
    for (size_t i = n >= len ? n - len + 1 : 0; i-- > 0;)
        if (s[i] == needle[0] && memcmp(s + i, needle, len) == 0) return (long)i;
    return -1;
}

/* A conversation the table's rules refuse, said in one line (index i from 1 for the messages). */
static int chat_check(const ChatTable *c, const ChatMessage *m, size_t n, Error *e) {
    if (n == 0) return fail(e, "the conversation has no messages");
    size_t first = m[0].role == ROLE_SYSTEM;
    if (first && (c->rules & RULE_NO_SYSTEM))
        return fail(e, "this model's chat template drops or refuses system messages: leave it out");
    for (size_t at = 0; first && at < c->refuse.n;) { /* texts that make the template print what the table cannot */
        size_t end = at;
        while (end < c->refuse.n && c->refuse.s[end] != ' ') end++;
        if (find_text(m[0].content, m[0].len, c->refuse.s + at, end - at) >= 0)
            return fail(e, "the system message holds '%.*s', which this model's chat template treats in a way run does "
                        "not render", (int)(end - at), (const char *)c->refuse.s + at);
        at = end + 1;
    }
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

/* The table's strings for these option values (-1: the default): its overrides over the defaults. */
static ChatStrings chat_strings(const ChatTable *c, const int *values) {
    ChatStrings s = c->s;
    for (int i = 0; i < c->n_overrides; i++) {
        const ChatOverride *o = &c->overrides[i];
        if (o->value == values[o->option] && o->value != c->options[o->option].value)
            strings_key(&s, o->key, o->text, NULL, NULL);
    }
    return s;
}

/* The index of the last user message that is not a tool's response (Qwen3's last_query_index), or
 * the last message's when there is none. */
static size_t last_query(const ChatMessage *m, size_t n) {
    static const char open[] = "<tool_response>", close[] = "</tool_response>";
    for (size_t i = n; i-- > 0;)
        if (m[i].role == ROLE_USER && !(m[i].len >= sizeof open - 1 && memcmp(m[i].content, open, sizeof open - 1) == 0 &&
                                        m[i].len >= sizeof close - 1 &&
                                        memcmp(m[i].content + m[i].len - (sizeof close - 1), close, sizeof close - 1) == 0))
            return i;
    return n ? n - 1 : 0;
}

/* Python's s.strip("\n") / lstrip / rstrip of a Text. */
static Text trim_newlines(Text t, int left, int right) {
    while (left && t.n && t.s[0] == '\n') t.s++, t.n--;
    while (right && t.n && t.s[t.n - 1] == '\n') t.n--;
    return t;
}

/* An assistant message by Qwen3's rule (chat.reasoning, export/chat_template.py's assistant_text):
 * its reasoning (reasoning_content, else what its content holds before the first closing tag,
 * after the last opening one) in a think block when it comes after the last user message and is
 * the last turn or has reasoning; else its content without the reasoning. */
static void buffer_assistant(Buffer *out, const ChatTable *c, const ChatStrings *s, const ChatMessage *m, int after_query,
                             int last, const char *date) {
    Text content = {m->content, m->len}, reasoning = {m->reasoning, m->reasoning_len};
    size_t space = (size_t)((const uint8_t *)memchr(c->think_tags.s, ' ', c->think_tags.n) - c->think_tags.s);
    Text open = {c->think_tags.s, space}, close = {c->think_tags.s + space + 1, c->think_tags.n - space - 1};
    if (!m->reasoning) {
        reasoning = (Text){(const uint8_t *)"", 0};
        long first_close = find_text(content.s, content.n, close.s, close.n);
        if (first_close >= 0) {
            Text before = trim_newlines((Text){content.s, (size_t)first_close}, 0, 1);
            long last_open = find_last(before.s, before.n, open.s, open.n);
            if (last_open >= 0) before = (Text){before.s + last_open + open.n, before.n - (size_t)last_open - open.n};
            reasoning = trim_newlines(before, 1, 0);
            long last_close = find_last(content.s, content.n, close.s, close.n);
            content = trim_newlines((Text){content.s + last_close + close.n, content.n - (size_t)last_close - close.n}, 1, 0);
        }
    }
    if (after_query && (last || reasoning.n)) {
        buffer_table(out, s->think_open, date);
        Text r = trim_newlines(reasoning, 1, 1);
        buffer_add(out, r.s, r.n);
        buffer_table(out, s->think_close, date);
        content = trim_newlines(content, 1, 0);
        buffer_add(out, content.s, content.n);
        return;
    }
    buffer_content(out, content.s, content.n, s->content[ROLE_ASSISTANT]);
}

/* The conversation rendered as its template renders it with these option values (options: one a
 * template option, -1 for its default; NULL: every default), export/chat_template.py's
 * table_render. */
static int chat_render(const ChatTable *c, const ChatMessage *m, size_t n, int generation, const int *options,
                       Buffer *out, Error *e) {
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
    int values[CHAT_OPTIONS];
    for (int o = 0; o < c->n_options; o++) values[o] = options && options[o] >= 0 ? options[o] : c->options[o].value;
    out->n = 0;
    size_t first = n && m[0].role == ROLE_SYSTEM, fold = (size_t)-1;
    Buffer system = {0}, folded = {0};
    if (first) { /* the system message's flags set options (the first found), and leave its text */
        for (int k = 0; k < c->n_flags; k++)
            if (find_text(m[0].content, m[0].len, c->flags[k].text.s, c->flags[k].text.n) >= 0) {
                values[c->flags[k].option] = c->flags[k].value;
                break;
            }
        buffer_add(&system, m[0].content, m[0].len);
        for (int k = 0; k < c->n_flags; k++) { /* every flag out, in turn, as str.replace */
            Text flag = c->flags[k].text;
            size_t w = 0;
            for (size_t r = 0; r < system.n;)
                if (r + flag.n <= system.n && memcmp(system.s + r, flag.s, flag.n) == 0) r += flag.n;
                else system.s[w++] = system.s[r++];
            system.n = w;
        }
    }
    ChatStrings s = chat_strings(c, values);
    int shown = (int)first; /* the system message prints: a template may print one that comes out empty as none */
    if (first && c->place == PLACE_TURN && c->empty_as_none) {
        Buffer probe = {0};
        buffer_content(&probe, system.s ? system.s : (const uint8_t *)"", system.n, s.content[ROLE_SYSTEM]);
        if (!probe.failed && probe.n == 0) shown = 0;
        free(probe.s);
    }
    if (shown && c->place == PLACE_FIRST_USER && n > 1 && m[1].role == ROLE_USER) fold = 1;
    if (shown && c->place == PLACE_LAST_USER && n > 1 && m[n - 1].role == ROLE_USER) fold = n - 1;
    if (shown && c->place == PLACE_TURN) {
        buffer_table(out, s.system_begin, date);
        buffer_content(out, system.s ? system.s : (const uint8_t *)"", system.n, s.content[ROLE_SYSTEM]);
        buffer_table(out, s.system_end, date);
    } else {
        buffer_table(out, s.begin, date);
    }
    size_t query = last_query(m, n);
    for (size_t i = first; i < n; i++) {
        const uint8_t *content = m[i].content;
        size_t len = m[i].len;
        buffer_table(out, s.prefix[m[i].role], date);
        if (m[i].role == ROLE_ASSISTANT && c->reasoning) {
            buffer_assistant(out, c, &s, &m[i], i > query, i == n - 1, date);
        } else if (i == fold && c->fold_outside) { /* the system message before this user turn's transformed content */
            buffer_table(out, s.fold_prefix, date);
            buffer_add(out, system.s ? system.s : (const uint8_t *)"", system.n);
            buffer_table(out, s.fold_suffix, date);
            buffer_content(out, content, len, s.content[m[i].role]);
        } else if (i == fold) { /* the system message inside this user turn, transformed with it */
            folded.n = 0;
            buffer_table(&folded, s.fold_prefix, date);
            buffer_add(&folded, system.s ? system.s : (const uint8_t *)"", system.n);
            buffer_table(&folded, s.fold_suffix, date);
            buffer_add(&folded, content, len);
            buffer_content(out, folded.s ? folded.s : (const uint8_t *)"", folded.n, s.content[m[i].role]);
        } else {
            buffer_content(out, content, len, s.content[m[i].role]);
        }
        buffer_table(out, s.suffix[m[i].role], date);
    }
    buffer_table(out, generation ? s.generation : s.end, date);
    int failed = folded.failed || system.failed || out->failed;
    free(folded.s);
    free(system.s);
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
static uint32_t *chat_ids(const ChatTable *c, Tokenizer *tok, const ChatMessage *m, size_t n, int generation,
                          const int *options, long *count, Error *e) {
    Buffer text = {0};
    uint32_t *ids = chat_render(c, m, n, generation, options, &text, e) ? chat_encode(c, tok, text.s, text.n, count, e)
                                                                        : NULL;
    free(text.s);
    return ids;
}

/* ---- reasoning apart ------------------------------------------------------------------------ */

/* A reply's reasoning apart from its answer, as its text comes: what lies between the
 * template's think tags goes to `reasoning`, the rest to `answer`; the tags themselves, and the
 * newlines right after the closing one, to neither. A template without think tags: all answer.
 * The conversation keeps the whole reply (chat_reply), as the template reads it next turn. */
typedef struct ThinkSplit {
    Text open, close;     /* the tags; empty: nothing is kept apart */
    int inside;           /* within the reasoning */
    int after_close;      /* newlines right after the closing tag are dropped */
    uint8_t held[64];     /* the start of what may be a tag, until the next text says */
    size_t n_held;
    int (*answer)(struct ThinkSplit *split, const uint8_t *bytes, size_t n); /* 0: the reader is gone */
    void (*reasoning)(struct ThinkSplit *split, const uint8_t *bytes, size_t n);
    void (*reasoning_ends)(struct ThinkSplit *split); /* at a closing tag, or the reply's end; or NULL */
    void *context;
} ThinkSplit;

static ThinkSplit think_split(const ChatTable *t, int (*answer)(ThinkSplit *, const uint8_t *, size_t),
                              void (*reasoning)(ThinkSplit *, const uint8_t *, size_t),
                              void (*reasoning_ends)(ThinkSplit *), void *context) {
    ThinkSplit split = {.answer = answer, .reasoning = reasoning, .reasoning_ends = reasoning_ends,
                        .context = context};
    const uint8_t *space = t && t->think_tags.n ? memchr(t->think_tags.s, ' ', t->think_tags.n) : NULL;
    if (space) {
        split.open = (Text){t->think_tags.s, (size_t)(space - t->think_tags.s)};
        split.close = (Text){space + 1, t->think_tags.n - split.open.n - 1};
    }
    return split;
}

static int split_out(ThinkSplit *r, const uint8_t *bytes, size_t n) {
    if (r->inside) {
        if (n) r->reasoning(r, bytes, n);
        return 1;
    }
    while (r->after_close && n && bytes[0] == '\n') bytes++, n--;
    if (!n) return 1;
    r->after_close = 0;
    return r->answer(r, bytes, n);
}

/* The reply's next text; 0 when the answer's reader is gone. */
static int think_split_text(ThinkSplit *r, const uint8_t *bytes, size_t n) {
    if (!r->open.n) return n ? r->answer(r, bytes, n) : 1;
    uint8_t buf[4096];
    while (n) { /* what is held, then the new bytes, scanned for the tag expected next */
        size_t take = n < sizeof buf - r->n_held ? n : sizeof buf - r->n_held, len = r->n_held + take;
        memcpy(buf, r->held, r->n_held);
        memcpy(buf + r->n_held, bytes, take);
        bytes += take, n -= take;
        r->n_held = 0;
        size_t at = 0;
        while (at < len) {
            Text tag = r->inside ? r->close : r->open;
            long found = find_text(buf + at, len - at, tag.s, tag.n);
            size_t upto = found >= 0 ? at + (size_t)found : len;
            if (found < 0) { /* hold back a tail that may be a tag's start */
                for (size_t keep = tag.n - 1 < len - at ? tag.n - 1 : len - at; keep > 0; keep--)
                    if (memcmp(buf + len - keep, tag.s, keep) == 0 && keep <= sizeof r->held) {
                        upto = len - keep;
                        memcpy(r->held, buf + upto, keep);
                        r->n_held = keep;
                        break;
                    }
            }
            if (!split_out(r, buf + at, upto - at)) return 0;
            if (found < 0) break;
            at = upto + tag.n;
            if (r->inside && r->reasoning_ends) r->reasoning_ends(r);
            r->after_close = r->inside;
            r->inside = !r->inside;
        }
    }
    return 1;
}

/* The reply ended: a tag's start held back was text after all. */
static void think_split_finish(ThinkSplit *r) {
    if (r->n_held) split_out(r, r->held, r->n_held);
    r->n_held = 0;
    if (r->inside && r->reasoning_ends) r->reasoning_ends(r);
}

/* ---- the conversation ---------------------------------------------------------------------- */

typedef struct {
    const Decoder *d;
    const GenerateOptions *g;
    const ChatTable *table;
    ChatMessage *m;
    size_t n, cap;
    int cache;                    /* its key/value cache: sequence `cache` of the decoder's */
    int options[CHAT_OPTIONS];    /* the template's options (chat_option()), -1: the default; a
                                     change re-renders, and the cache keeps what still agrees */
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
    *c = (Conversation){.d = d, .g = g, .table = table, .cache = cache, .options = {-1, -1}};
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
        uint32_t *ids = chat_ids(c->table, c->d->tokenizer, c->m, c->n, 1, c->options, count, e);
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
        for (size_t i = first; i < first + drop; i++) free_message(&c->m[i]);
        memmove(c->m + first, c->m + first + drop, (c->n - first - drop) * sizeof *c->m);
        c->n -= drop;
    }
}

/* Bytes at s[0..n) that do not start a UTF-8 character: how many of them one U+FFFD stands
 * for (a maximal part of a character, as Hugging Face's decode and Python's errors="replace"
 * count them). */
static size_t bad_utf8_span(const uint8_t *s, size_t n) {
    uint8_t c = s[0];
    size_t want = c >= 0xC2 && c <= 0xDF ? 2 : c >= 0xE0 && c <= 0xEF ? 3 : c >= 0xF0 && c <= 0xF4 ? 4 : 1, k = 1;
    while (k < want && k < n) { /* the continuation bytes that still fit a character */
        uint8_t b = s[k], lo = 0x80, hi = 0xBF;
        if (k == 1) lo = c == 0xE0 ? 0xA0 : c == 0xF0 ? 0x90 : 0x80, hi = c == 0xED ? 0x9F : c == 0xF4 ? 0x8F : 0xBF;
        if (b < lo || b > hi) break;
        k++;
    }
    return k;
}

/* The reply as text for the conversation: bytes that are not UTF-8 (a model may emit half a
 * character) become U+FFFD, one for each maximal part of a character. */
static void lossy_utf8(Buffer *out, const uint8_t *s, size_t n) {
    for (size_t i = 0; i < n;) {
        size_t len = utf8_valid(s + i, n - i);
        if (len) { buffer_add(out, s + i, len); i += len; continue; }
        buffer_add(out, (const uint8_t *)"\xEF\xBF\xBD", 3);
        i += bad_utf8_span(s + i, n - i);
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
        for (size_t i = before; i < c->n; i++) free_message(&c->m[i]);
        if (c->n > before) c->n = before;
    }
    return ok;
}

/* Everything but the system message goes: the conversation starts over. */
static void conversation_reset(Conversation *c) {
    size_t keep = c->n && c->m[0].role == ROLE_SYSTEM;
    for (size_t i = keep; i < c->n; i++) free_message(&c->m[i]);
    c->n = keep;
}

#endif
