/* tokenizer.c: byte-level BPE (GPT-2 style) and character vocabularies.
 *
 * Encoding, as OpenAI's tiktoken does it (SPEC section 4):
 *   1. pre-tokenize: split the text into pieces with GPT-2's pattern
 *        's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
 *      implemented by hand below (no regex library);
 *   2. a piece that is itself a mergeable token becomes that token;
 *   3. otherwise start from its single bytes and repeatedly merge the adjacent pair whose
 *      concatenation is the token of lowest merge rank (leftmost on ties), until no adjacent
 *      pair concatenates to a mergeable token.
 * A character vocabulary (nanoGPT's meta.pkl) maps each UTF-8 character to one token.
 */
#include <stdlib.h>
#include <string.h>

#include "model.h"

/* ---- reading the tokenizer section -------------------------------------------------- */

static uint32_t read_u32(const uint8_t *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static uint64_t hash_bytes(const uint8_t *s, size_t n) {
    uint64_t h = 1469598103934665603ull; /* FNV-1a, 64-bit */
    for (size_t i = 0; i < n; i++) h = (h ^ s[i]) * 1099511628211ull;
    return h;
}

const uint8_t *tokenizer_token(const Tokenizer *t, uint32_t id, size_t *len) {
    if (id >= t->n_tokens) return NULL;
    *len = t->offsets[id + 1] - t->offsets[id];
    return t->blob + t->offsets[id];
}

/* Id of the token whose bytes are exactly s[0..n), or RANK_NONE. */
static uint32_t lookup(const Tokenizer *t, const uint8_t *s, size_t n) {
    for (uint64_t i = hash_bytes(s, n) & t->table_mask;; i = (i + 1) & t->table_mask) {
        uint32_t slot = t->table[i];
        if (slot == 0) return RANK_NONE;
        size_t len = 0;
        const uint8_t *tok = tokenizer_token(t, slot - 1, &len);
        if (len == n && memcmp(tok, s, n) == 0) return slot - 1;
    }
}

/* Merge rank of the token spelled s[0..n), RANK_NONE when there is no mergeable one. */
static uint32_t rank_of(const Tokenizer *t, const uint8_t *s, size_t n) {
    uint32_t id = lookup(t, s, n);
    return id == RANK_NONE ? RANK_NONE : t->ranks[id];
}

const char *tokenizer_init(Tokenizer *t, const uint8_t *data, uint64_t size) {
    memset(t, 0, sizeof *t);
    if (size < 16) return "tokenizer section is shorter than its 16-byte header";
    uint64_t n = read_u32(data), bytes_size = read_u32(data + 12);
    uint32_t kind = read_u32(data + 4);
    int32_t eot = (int32_t)read_u32(data + 8);
    if (n == 0) return "tokenizer has no tokens";
    if (kind > PRETOK_CL100K) return "tokenizer has an unknown pre-tokenizer kind";
    uint64_t need = 16 + 4 * n + 4 * (n + 1) + bytes_size; /* n < 2^32: no overflow */
    if (need > size) return "tokenizer section is truncated (tables larger than the section)";
    if (eot < -1 || (eot >= 0 && (uint64_t)eot >= n)) return "tokenizer end-of-text id is out of range";
    t->n_tokens = (uint32_t)n;
    t->pretokenizer = (int)kind;
    t->eot_id = eot;
    /* The section starts 64-aligned in the mapped file, so these 4-byte tables are aligned. */
    t->ranks = (const uint32_t *)(const void *)(data + 16);
    t->offsets = (const uint32_t *)(const void *)(data + 16 + 4 * n);
    t->blob = data + 16 + 8 * n + 4;
    if (t->offsets[0] != 0 || t->offsets[n] != bytes_size)
        return "tokenizer byte offsets do not span the byte blob";
    for (uint64_t i = 0; i < n; i++)
        if (t->offsets[i + 1] <= t->offsets[i]) return "tokenizer has an empty or out-of-order token";

    uint64_t table_size = 1;
    while (table_size < 2 * n) table_size <<= 1;
    t->table = calloc(table_size, sizeof *t->table);
    if (!t->table) return "out of memory for the tokenizer's table";
    t->table_mask = table_size - 1;
    for (uint32_t id = 0; id < n; id++) {
        size_t len;
        const uint8_t *s = tokenizer_token(t, id, &len);
        uint64_t i = hash_bytes(s, len) & t->table_mask;
        for (; t->table[i]; i = (i + 1) & t->table_mask) {
            size_t other_len = 0;
            const uint8_t *other = tokenizer_token(t, t->table[i] - 1, &other_len);
            if (other_len == len && memcmp(other, s, len) == 0) {
                tokenizer_free(t);
                return "tokenizer has two tokens with the same bytes";
            }
        }
        t->table[i] = id + 1;
    }
    for (int b = 0; b < 256; b++) {
        uint8_t byte = (uint8_t)b;
        t->byte_token[b] = lookup(t, &byte, 1);
    }
    return NULL;
}

void tokenizer_free(Tokenizer *t) {
    free(t->table);
    free(t->parts);
    t->table = NULL;
    t->parts = NULL;
    t->parts_cap = 0;
}

/* ---- UTF-8 and character classes ---------------------------------------------------- */

/* Decode one UTF-8 character at s[0..n). Returns its length; *cp is the code point, or -1 for
 * a byte that does not start a valid sequence (it then stands alone, length 1). */
static size_t utf8_decode(const uint8_t *s, size_t n, long *cp) {
    uint8_t c = s[0];
    size_t len;
    long v, min;
    if (c < 0x80) { *cp = c; return 1; }
    else if ((c & 0xE0) == 0xC0) { len = 2; v = c & 0x1F; min = 0x80; }
    else if ((c & 0xF0) == 0xE0) { len = 3; v = c & 0x0F; min = 0x800; }
    else if ((c & 0xF8) == 0xF0) { len = 4; v = c & 0x07; min = 0x10000; }
    else { *cp = -1; return 1; }
    if (len > n) { *cp = -1; return 1; }
    for (size_t i = 1; i < len; i++) {
        if ((s[i] & 0xC0) != 0x80) { *cp = -1; return 1; }
        v = v << 6 | (s[i] & 0x3F);
    }
    if (v < min || v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF)) { *cp = -1; return 1; }
    *cp = v;
    return len;
}

/* Character classes of the pre-tokenizer. ASCII only for now; non-ASCII letters count as
 * letters so that words in other scripts stay whole. */
static int is_letter(long cp) {
    return (cp >= 'a' && cp <= 'z') || (cp >= 'A' && cp <= 'Z') || cp >= 0x80;
}
static int is_number(long cp) { return cp >= '0' && cp <= '9'; }
static int is_space(long cp) { return cp == ' ' || (cp >= 0x09 && cp <= 0x0D); }

/* ---- GPT-2 pre-tokenizer ------------------------------------------------------------ */

typedef int (*CharClass)(long cp);

static int is_other(long cp) { return !is_space(cp) && !is_letter(cp) && !is_number(cp); }

/* End of the run of characters of class cls starting at i. */
static size_t run_of(const uint8_t *s, size_t n, size_t i, CharClass cls) {
    while (i < n) {
        long cp;
        size_t len = utf8_decode(s + i, n - i, &cp);
        if (!cls(cp)) break;
        i += len;
    }
    return i;
}

/* Length of the pre-token of GPT-2's pattern that starts at s[0] (n > 0). */
static size_t gpt2_piece(const uint8_t *s, size_t n) {
    if (s[0] == '\'' && n >= 2) { /* contractions, case-sensitive */
        if (s[1] == 's' || s[1] == 't' || s[1] == 'm' || s[1] == 'd') return 2;
        if (n >= 3 && ((s[1] == 'r' && s[2] == 'e') || (s[1] == 'v' && s[2] == 'e') ||
                       (s[1] == 'l' && s[2] == 'l')))
            return 3;
    }
    long cp;
    size_t start = (s[0] == ' ' && n > 1) ? 1 : 0; /* the optional leading space */
    utf8_decode(s + start, n - start, &cp);
    if (is_letter(cp)) return run_of(s, n, start, is_letter);
    if (is_number(cp)) return run_of(s, n, start, is_number);
    if (is_other(cp)) return run_of(s, n, start, is_other);
    /* whitespace: \s+(?!\S) takes the run but leaves its last character to the next piece when
     * a non-space follows; a single whitespace character before a non-space is \s+ alone. */
    size_t end = run_of(s, n, 0, is_space);
    if (end == n) return end;
    size_t last = end - 1;
    while ((s[last] & 0xC0) == 0x80) last--; /* start of the last whitespace character */
    return last > 0 ? last : end;
}

/* ---- byte pair merging -------------------------------------------------------------- */

struct BpePart {
    uint32_t start; /* byte offset of this part in the piece */
    uint32_t rank;  /* rank of merging this part with the next one, RANK_NONE if impossible */
};

/* Rank of the pair formed by parts[i] and parts[i+1]: bytes parts[i].start .. parts[i+2].start */
static uint32_t pair_rank(const Tokenizer *t, const uint8_t *piece, const struct BpePart *parts,
                          size_t n_parts, size_t i) {
    if (i + 2 >= n_parts) return RANK_NONE;
    return rank_of(t, piece + parts[i].start, parts[i + 2].start - parts[i].start);
}

static int push_id(uint32_t **ids, size_t *cap, size_t *count, uint32_t id) {
    if (*count == *cap) {
        size_t new_cap = *cap ? *cap * 2 : 64;
        uint32_t *grown = realloc(*ids, new_cap * sizeof **ids);
        if (!grown) return -1;
        *ids = grown;
        *cap = new_cap;
    }
    (*ids)[(*count)++] = id;
    return 0;
}

/* Encode one pre-token piece by merge rank and append its ids. */
static int bpe_piece(Tokenizer *t, const uint8_t *piece, size_t len, uint32_t **ids, size_t *cap,
                     size_t *count, const char **err) {
    uint32_t whole = lookup(t, piece, len);
    if (whole != RANK_NONE && t->ranks[whole] != RANK_NONE)
        return push_id(ids, cap, count, whole);
    /* parts[0..len] with a sentinel part at the end marking the piece's end */
    if (len + 1 > t->parts_cap) {
        struct BpePart *grown = realloc(t->parts, (len + 1) * sizeof *grown);
        if (!grown) { *err = "out of memory while encoding"; return -1; }
        t->parts = grown;
        t->parts_cap = len + 1;
    }
    struct BpePart *parts = t->parts;
    size_t n_parts = len + 1;
    for (size_t i = 0; i < n_parts; i++) parts[i].start = (uint32_t)i;
    for (size_t i = 0; i < n_parts; i++) parts[i].rank = pair_rank(t, piece, parts, n_parts, i);
    for (;;) {
        size_t best = 0;
        uint32_t best_rank = RANK_NONE;
        for (size_t i = 0; i + 1 < n_parts; i++)
            if (parts[i].rank < best_rank) { best_rank = parts[i].rank; best = i; }
        if (best_rank == RANK_NONE) break;
        memmove(parts + best + 1, parts + best + 2, (n_parts - best - 2) * sizeof *parts);
        n_parts--;
        parts[best].rank = pair_rank(t, piece, parts, n_parts, best);
        if (best > 0) parts[best - 1].rank = pair_rank(t, piece, parts, n_parts, best - 1);
    }
    for (size_t i = 0; i + 1 < n_parts; i++) {
        uint32_t id = lookup(t, piece + parts[i].start, parts[i + 1].start - parts[i].start);
        if (id == RANK_NONE) { *err = "the text has a byte the vocabulary has no token for"; return -1; }
        if (push_id(ids, cap, count, id)) { *err = "out of memory while encoding"; return -1; }
    }
    return 0;
}

long tokenizer_encode(Tokenizer *t, const uint8_t *text, size_t len, uint32_t **ids, size_t *cap,
                      const char **err) {
    size_t count = 0;
    *err = NULL;
    for (size_t i = 0; i < len;) {
        if (t->pretokenizer == PRETOK_CHAR) {
            long cp;
            size_t n = utf8_decode(text + i, len - i, &cp);
            uint32_t id = lookup(t, text + i, n);
            if (id == RANK_NONE) {
                *err = "the text has a character that is not in the model's character vocabulary";
                return -1;
            }
            if (push_id(ids, cap, &count, id)) { *err = "out of memory while encoding"; return -1; }
            i += n;
        } else {
            size_t n = gpt2_piece(text + i, len - i);
            if (bpe_piece(t, text + i, n, ids, cap, &count, err)) {
                if (!*err) *err = "out of memory while encoding";
                return -1;
            }
            i += n;
        }
    }
    return (long)count;
}
