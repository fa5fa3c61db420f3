/* tokenizer.c: byte-level BPE (GPT-2 and cl100k_base styles) and character vocabularies.
 *
 * Encoding, exactly as OpenAI's tiktoken does it in its ordinary mode (README.md, "Tokenizer"):
 *   1. pre-tokenize: split the text into pieces with the vocabulary's pattern, implemented by
 *      hand below (no regex library), with Unicode's letter, number and White_Space classes
 *      (unicode_tables.h, Unicode 16.0 like tiktoken):
 *        gpt2:    's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
 *        cl100k:  (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|
 *                 ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
 *      Alternatives are tried in order at each position; the first that matches wins.
 *   2. a piece that is itself a mergeable token becomes that token;
 *   3. otherwise start from its single bytes and repeatedly merge the adjacent pair whose
 *      concatenation is the token of lowest merge rank (leftmost on ties), until no adjacent
 *      pair concatenates to a mergeable token. A min-heap of (rank, position) makes this
 *      O(n log n) in the piece's length n.
 * Bytes that are not valid UTF-8 count as single "other" characters, so any byte string
 * encodes, and decoding gives it back. A character vocabulary (nanoGPT's meta.pkl) maps each
 * UTF-8 character to one token.
 */
#include <stdlib.h>
#include <string.h>

#include "model.h"
#include "unicode_tables.h"

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
    if (n > t->max_token_len) return RANK_NONE; /* keeps each lookup short on long pieces */
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
    for (uint64_t i = 0; i < n; i++) {
        if (t->offsets[i + 1] <= t->offsets[i]) return "tokenizer has an empty or out-of-order token";
        if (t->offsets[i + 1] - t->offsets[i] > t->max_token_len)
            t->max_token_len = t->offsets[i + 1] - t->offsets[i];
    }

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
    free(t->heap);
    t->table = NULL;
    t->parts = NULL;
    t->heap = NULL;
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

/* Class of a code point (CLASS_LETTER, _NUMBER, _SPACE or _OTHER): binary search over the
 * generated ranges, with ASCII answered directly. */
static int char_class(long cp) {
    if (cp < 0) return CLASS_OTHER; /* an invalid byte */
    if (cp < 128) {
        if ((cp >= 'a' && cp <= 'z') || (cp >= 'A' && cp <= 'Z')) return CLASS_LETTER;
        if (cp >= '0' && cp <= '9') return CLASS_NUMBER;
        if (cp == ' ' || (cp >= 0x09 && cp <= 0x0D)) return CLASS_SPACE;
        return CLASS_OTHER;
    }
    size_t lo = 0, hi = sizeof unicode_ranges / sizeof unicode_ranges[0];
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if ((uint32_t)cp < unicode_ranges[mid].first) hi = mid;
        else if ((uint32_t)cp > unicode_ranges[mid].last) lo = mid + 1;
        else return unicode_ranges[mid].cls;
    }
    return CLASS_OTHER;
}

typedef struct {
    size_t len; /* bytes */
    int cls;    /* CLASS_* */
} Char;

static Char char_at(const uint8_t *s, size_t n, size_t i) {
    long cp;
    Char c;
    c.len = utf8_decode(s + i, n - i, &cp);
    c.cls = char_class(cp);
    return c;
}

/* End of the run of characters of class cls starting at i. */
static size_t run_of(const uint8_t *s, size_t n, size_t i, int cls) {
    while (i < n) {
        Char c = char_at(s, n, i);
        if (c.cls != cls) break;
        i += c.len;
    }
    return i;
}

static int is_newline(uint8_t b) { return b == '\r' || b == '\n'; }

/* A whitespace run starting at s[0]: \s+(?!\S) takes the run but leaves its last character to
 * the next piece when a non-space follows; a single whitespace character before a non-space is
 * \s+ alone. */
static size_t whitespace_piece(const uint8_t *s, size_t n) {
    size_t end = run_of(s, n, 0, CLASS_SPACE);
    if (end == n) return end;
    size_t last = end - 1;
    while ((s[last] & 0xC0) == 0x80) last--; /* start of the run's last character */
    return last > 0 ? last : end;
}

/* ---- GPT-2 pre-tokenizer ------------------------------------------------------------ */

static size_t gpt2_piece(const uint8_t *s, size_t n) {
    if (s[0] == '\'' && n >= 2) { /* contractions, case-sensitive */
        if (s[1] == 's' || s[1] == 't' || s[1] == 'm' || s[1] == 'd') return 2;
        if (n >= 3 && ((s[1] == 'r' && s[2] == 'e') || (s[1] == 'v' && s[2] == 'e') ||
                       (s[1] == 'l' && s[2] == 'l')))
            return 3;
    }
    size_t start = 0; /* ` ?` : an optional leading space before a non-space */
    Char c = char_at(s, n, 0);
    if (s[0] == ' ' && n > 1) {
        Char next = char_at(s, n, 1);
        if (next.cls != CLASS_SPACE) { start = 1; c = next; }
    }
    if (c.cls != CLASS_SPACE) return run_of(s, n, start, c.cls); /* letters, numbers, other */
    return whitespace_piece(s, n);
}

/* ---- cl100k_base pre-tokenizer ------------------------------------------------------ */

/* (?i:'s|'t|'re|'ve|'m|'ll|'d) after the apostrophe: case-insensitive, where Unicode's simple
 * case folding also maps U+017F LATIN SMALL LETTER LONG S (C5 BF) to s. Returns the length
 * matched after the apostrophe, or 0. */
static size_t contraction_ci(const uint8_t *s, size_t n) {
    if (n >= 1) {
        int c = s[0] | 0x20;
        if (c == 't' || c == 'm' || c == 'd' || c == 's') return 1;
        if (n >= 2 && s[0] == 0xC5 && s[1] == 0xBF) return 2;
    }
    if (n >= 2) {
        int a = s[0] | 0x20, b = s[1] | 0x20;
        if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) return 2;
    }
    return 0;
}

static size_t cl100k_piece(const uint8_t *s, size_t n) {
    if (s[0] == '\'') {
        size_t k = contraction_ci(s + 1, n - 1);
        if (k) return 1 + k;
    }
    Char c = char_at(s, n, 0);
    /* [^\r\n\p{L}\p{N}]?\p{L}+ */
    if (c.cls == CLASS_LETTER) return run_of(s, n, 0, CLASS_LETTER);
    if (c.cls != CLASS_NUMBER && !is_newline(s[0]) && c.len < n &&
        char_at(s, n, c.len).cls == CLASS_LETTER)
        return run_of(s, n, c.len, CLASS_LETTER);
    /* \p{N}{1,3} */
    if (c.cls == CLASS_NUMBER) {
        size_t i = 0;
        for (int k = 0; k < 3 && i < n; k++) {
            Char d = char_at(s, n, i);
            if (d.cls != CLASS_NUMBER) break;
            i += d.len;
        }
        return i;
    }
    /* ` ?[^\s\p{L}\p{N}]+[\r\n]*` */
    size_t start = 0;
    if (s[0] == ' ' && n > 1 && char_at(s, n, 1).cls == CLASS_OTHER) start = 1;
    if (start == 1 || c.cls == CLASS_OTHER) {
        size_t end = run_of(s, n, start, CLASS_OTHER);
        while (end < n && is_newline(s[end])) end++;
        return end;
    }
    /* \s*[\r\n]+ : the whitespace run up to and including its last newline */
    size_t end = run_of(s, n, 0, CLASS_SPACE);
    for (size_t j = end; j > 0; j--)
        if (is_newline(s[j - 1])) return j;
    return whitespace_piece(s, n); /* \s+(?!\S)|\s+ */
}

/* ---- byte pair merging -------------------------------------------------------------- */

/* Part i of a piece starts at byte i; dead parts have been merged into their left neighbour. */
struct BpePart {
    uint32_t next;  /* start of the next live part (the piece's length for the last one) */
    uint32_t prev;  /* start of the previous live part */
    uint32_t rank;  /* rank of merging this part with the next, RANK_NONE if impossible */
    uint32_t alive;
};

static uint32_t pair_rank(const Tokenizer *t, const uint8_t *piece, const struct BpePart *parts,
                          uint32_t len, uint32_t i) {
    uint32_t j = parts[i].next;
    if (j >= len) return RANK_NONE;
    uint32_t end = parts[j].next;
    return rank_of(t, piece + i, end - i);
}

/* Min-heap of (rank << 32 | start): the lowest rank first, the leftmost among equal ranks. */
static void heap_push(uint64_t *heap, size_t *n, uint64_t v) {
    size_t i = (*n)++;
    while (i > 0 && heap[(i - 1) / 2] > v) { heap[i] = heap[(i - 1) / 2]; i = (i - 1) / 2; }
    heap[i] = v;
}

static uint64_t heap_pop(uint64_t *heap, size_t *n) {
    uint64_t top = heap[0], v = heap[--(*n)];
    size_t i = 0;
    for (;;) {
        size_t child = 2 * i + 1;
        if (child >= *n) break;
        if (child + 1 < *n && heap[child + 1] < heap[child]) child++;
        if (heap[child] >= v) break;
        heap[i] = heap[child];
        i = child;
    }
    if (*n) heap[i] = v;
    return top;
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
static int bpe_piece(Tokenizer *t, const uint8_t *piece, size_t size, uint32_t **ids, size_t *cap,
                     size_t *count, const char **err) {
    uint32_t whole = lookup(t, piece, size);
    if (whole != RANK_NONE && t->ranks[whole] != RANK_NONE)
        return push_id(ids, cap, count, whole);
    if (size >= UINT32_MAX / 4) { *err = "a single pre-token is longer than 1 GB"; return -1; }
    uint32_t len = (uint32_t)size;
    if (len > t->parts_cap) {
        struct BpePart *parts = realloc(t->parts, len * sizeof *parts);
        if (parts) t->parts = parts;
        uint64_t *heap = realloc(t->heap, 3 * (size_t)len * sizeof *heap);
        if (heap) t->heap = heap;
        if (!parts || !heap) { *err = "out of memory while encoding"; return -1; }
        t->parts_cap = len;
    }
    struct BpePart *parts = t->parts;
    uint64_t *heap = t->heap;
    size_t n_heap = 0;
    for (uint32_t i = 0; i < len; i++)
        parts[i] = (struct BpePart){i + 1, i ? i - 1 : 0, RANK_NONE, 1};
    for (uint32_t i = 0; i < len; i++) {
        parts[i].rank = pair_rank(t, piece, parts, len, i);
        if (parts[i].rank != RANK_NONE) heap_push(heap, &n_heap, (uint64_t)parts[i].rank << 32 | i);
    }
    while (n_heap > 0) {
        uint64_t top = heap_pop(heap, &n_heap);
        uint32_t i = (uint32_t)top, rank = (uint32_t)(top >> 32);
        if (!parts[i].alive || parts[i].rank != rank) continue; /* stale entry */
        uint32_t j = parts[i].next; /* merge part j into part i */
        parts[j].alive = 0;
        parts[i].next = parts[j].next;
        if (parts[i].next < len) parts[parts[i].next].prev = i;
        parts[i].rank = pair_rank(t, piece, parts, len, i);
        if (parts[i].rank != RANK_NONE) heap_push(heap, &n_heap, (uint64_t)parts[i].rank << 32 | i);
        if (i > 0) {
            uint32_t p = parts[i].prev;
            parts[p].rank = pair_rank(t, piece, parts, len, p);
            if (parts[p].rank != RANK_NONE) heap_push(heap, &n_heap, (uint64_t)parts[p].rank << 32 | p);
        }
    }
    for (uint32_t i = 0; i < len; i = parts[i].next) {
        uint32_t id = lookup(t, piece + i, parts[i].next - i);
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
        size_t n;
        if (t->pretokenizer == PRETOK_CHAR) {
            long cp;
            n = utf8_decode(text + i, len - i, &cp);
            uint32_t id = lookup(t, text + i, n);
            if (id == RANK_NONE) {
                *err = "the text has a character that is not in the model's character vocabulary";
                return -1;
            }
            if (push_id(ids, cap, &count, id)) { *err = "out of memory while encoding"; return -1; }
        } else {
            n = t->pretokenizer == PRETOK_GPT2 ? gpt2_piece(text + i, len - i)
                                               : cl100k_piece(text + i, len - i);
            if (bpe_piece(t, text + i, n, ids, cap, &count, err)) {
                if (!*err) *err = "out of memory while encoding";
                return -1;
            }
        }
        i += n;
    }
    return (long)count;
}
