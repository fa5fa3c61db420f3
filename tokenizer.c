/* tokenizer.c: the tokenizers of the models run.c runs: byte-level BPE (GPT-2, cl100k_base,
 * and Hugging Face's tokenizer.json: SmolLM2, Qwen2.5, Llama 3), SentencePiece's BPE (Llama 2,
 * TinyLlama, llama2.c's models), and character vocabularies. model.h's tokenizer section says
 * which, and what each step below does with it.
 *
 * Encoding a text:
 *   0. --special only: the text of added and control tokens (<|im_start|>, <s>) becomes that
 *      token, leftmost first and the longest at a position; what lies between goes on alone.
 *   1. normalize: SentencePiece's rules and spaces (sentencepiece_normalize), or Unicode NFC
 *      (Qwen2), or nothing;
 *   2. pre-tokenize: split the text into pieces by the vocabulary's pattern, implemented by
 *      hand below (no regex library), with Unicode's letter, number and White_Space classes
 *      (unicode_tables.h, Unicode 16.0 like tiktoken):
 *        gpt2:    's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
 *        cl100k:  (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|
 *                 ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+   (Llama 3's)
 *        qwen2:   cl100k's with \p{N} for \p{N}{1,3}
 *        digits_gpt2: each numeric character alone (Rust's char::is_numeric, by its own
 *                 Unicode version), gpt2's pattern on the text between (SmolLM2: Hugging
 *                 Face's Digits(individual_digits) then ByteLevel)
 *        whole:   none, the whole text is one piece (SentencePiece)
 *      Alternatives are tried in order at each position; the first that matches wins.
 *   3. merge each piece, starting from its bytes (byte-level BPE) or its UTF-8 characters
 *      (SentencePiece): a piece that is itself a token first becomes that token
 *      (TOK_WHOLE_PIECES); then repeatedly the adjacent pair of best rank merges, leftmost on
 *      ties, where the rank of a pair is the merge rank of the token its concatenation spells
 *      (tiktoken; SentencePiece, with ranks from the pieces' scores) or the rank of that exact
 *      pair in the merge list (Hugging Face BPE, TOK_MERGE_PAIRS). A min-heap of (rank,
 *      position) makes this O(n log n) in the piece's length n.
 *   4. SentencePiece: a merged piece no token spells becomes its bytes' byte pieces (byte
 *      fallback) or the unknown token (one for a run of them).
 * Byte-level vocabularies encode any bytes (bytes that are not valid UTF-8 count as single
 * "other" characters), and decoding gives them back. A character vocabulary (nanoGPT's
 * meta.pkl) maps each UTF-8 character to one token.
 */
#include <stdlib.h>
#include <string.h>

#include "tokenizer.h"
#include "unicode_nfc.h"
#include "unicode_tables.h"
#include "utf8.h"

/* ---- reading the tokenizer section -------------------------------------------------- */

static uint32_t read_u32(const uint8_t *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static uint64_t hash_bytes(const uint8_t *s, size_t n) {
    uint64_t h = 1469598103934665603ull; /* FNV-1a, 64-bit */
    for (size_t i = 0; i < n; i++) h = (h ^ s[i]) * 1099511628211ull;
    return h;
}

static uint64_t hash_pair(uint32_t left, uint32_t right) {
    uint64_t h = ((uint64_t)left << 32 | right) * 0x9E3779B97F4A7C15ull;
    return h ^ (h >> 29);
}

static int kind_of(const Tokenizer *t, uint32_t id) { return t->kinds ? t->kinds[id] : TOKEN_NORMAL; }

const uint8_t *tokenizer_token(const Tokenizer *t, uint32_t id, size_t *len) {
    if (id >= t->n_tokens) return NULL;
    *len = t->offsets[id + 1] - t->offsets[id];
    return t->blob + t->offsets[id];
}

/* Id of the normal token whose bytes are exactly s[0..n), or RANK_NONE. */
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

/* The merge listed for the pair (left, right), as its index (its rank), or RANK_NONE. */
static uint32_t pair_merge(const Tokenizer *t, uint32_t left, uint32_t right) {
    for (uint64_t i = hash_pair(left, right) & t->pair_mask;; i = (i + 1) & t->pair_mask) {
        uint32_t slot = t->pair_table[i];
        if (slot == 0) return RANK_NONE;
        const uint32_t *m = t->merges + 3 * (size_t)(slot - 1);
        if (m[0] == left && m[1] == right) return slot - 1;
    }
}

/* An open-addressing table of at least 2 n slots (a power of two), zeroed; NULL if out of memory. */
static uint32_t *new_table(uint64_t n, uint64_t *mask) {
    uint64_t size = 1;
    while (size < 2 * n) size <<= 1;
    *mask = size - 1;
    return calloc(size, sizeof(uint32_t));
}

/* Rule i's key (or its value, with value set) in the SentencePiece rules. */
static const uint8_t *rule_part(const Tokenizer *t, uint32_t i, int value, size_t *len) {
    uint32_t begin = t->rule_offsets[2 * i + value], end = t->rule_offsets[2 * i + value + 1];
    *len = end - begin;
    return t->rules_blob + begin;
}

/* The rule whose key is exactly s[0..n), or RANK_NONE. */
static uint32_t rule_of(const Tokenizer *t, const uint8_t *s, size_t n) {
    for (uint64_t i = hash_bytes(s, n) & t->rule_mask;; i = (i + 1) & t->rule_mask) {
        uint32_t slot = t->rule_table[i];
        if (slot == 0) return RANK_NONE;
        size_t len;
        const uint8_t *key = rule_part(t, slot - 1, 0, &len);
        if (len == n && memcmp(key, s, n) == 0) return slot - 1;
    }
}

/* Version 3's part of the section (model.h), from `at`: flags, ids, kinds, merges, rules.
 * Returns NULL, or a message; *end is where the part ends. */
static const char *read_version_3(Tokenizer *t, const uint8_t *data, uint64_t size, uint64_t at, uint64_t *end) {
    uint64_t n = t->n_tokens;
    at = (at + 3) & ~(uint64_t)3;
    if (at > size || size - at < 24) return "tokenizer section is truncated (no version 3 fields)";
    t->flags = read_u32(data + at);
    t->bos_id = (int32_t)read_u32(data + at + 4);
    t->unk_id = (int32_t)read_u32(data + at + 8);
    uint64_t n_merges = read_u32(data + at + 12), n_rules = read_u32(data + at + 16), rules_size = read_u32(data + at + 20);
    at += 24;
    if (t->flags & ~(uint32_t)TOK_ALL) return "tokenizer has unknown flags";
    if (t->bos_id < -1 || (t->bos_id >= 0 && (uint64_t)t->bos_id >= n)) return "tokenizer bos_id is out of range";
    if (t->unk_id < -1 || (t->unk_id >= 0 && (uint64_t)t->unk_id >= n)) return "tokenizer unk_id is out of range";
    uint64_t need = ((n + 3) & ~(uint64_t)3) + 12 * n_merges + 4 * (2 * n_rules + 1) + rules_size; /* < 2^38 */
    if (need > size - at) return "tokenizer section is truncated (kinds, merges or rules past its end)";
    t->kinds = data + at;
    at += (n + 3) & ~(uint64_t)3;
    t->merges = (const uint32_t *)(const void *)(data + at);
    t->n_merges = (uint32_t)n_merges;
    at += 12 * n_merges;
    t->rule_offsets = (const uint32_t *)(const void *)(data + at);
    t->rules_blob = data + at + 4 * (2 * n_rules + 1);
    t->n_rules = (uint32_t)n_rules;
    *end = at + 4 * (2 * n_rules + 1) + rules_size;
    for (uint64_t i = 0; i < n; i++)
        if (t->kinds[i] > TOKEN_SPECIAL) return "tokenizer has a token of unknown kind";
    for (uint64_t i = 0; i < 3 * n_merges; i++)
        if (t->merges[i] >= n) return "tokenizer has a merge of a token id out of range";
    if (n_merges && !(t->flags & TOK_MERGE_PAIRS)) return "tokenizer lists merges without TOK_MERGE_PAIRS";
    if (t->rule_offsets[0] != 0 || t->rule_offsets[2 * n_rules] != rules_size)
        return "tokenizer rule offsets do not span the rules' bytes";
    for (uint64_t i = 0; i < 2 * n_rules; i++)
        if (t->rule_offsets[i + 1] < t->rule_offsets[i] || (i % 2 == 0 && t->rule_offsets[i + 1] == t->rule_offsets[i]))
            return "tokenizer has an empty or out-of-order normalization rule";
    if (n_rules && !(t->flags & TOK_SENTENCEPIECE)) return "tokenizer has normalization rules without TOK_SENTENCEPIECE";
    if ((t->flags & TOK_SENTENCEPIECE) && t->pretokenizer != PRETOK_WHOLE)
        return "a SentencePiece tokenizer must have the whole-text pre-tokenizer";
    return NULL;
}

/* Version 4's part, from `at`: the stop set, n_stop then the ids, each in range and listed once. */
static const char *read_version_4(Tokenizer *t, const uint8_t *data, uint64_t size, uint64_t at) {
    at = (at + 3) & ~(uint64_t)3;
    if (at > size || size - at < 4) return "tokenizer section is truncated (no stop set)";
    uint64_t n_stop = read_u32(data + at);
    if (n_stop > TOKENIZER_MAX_STOP) return "tokenizer lists more stop tokens than the 64 allowed";
    if (4 * n_stop > size - at - 4) return "tokenizer section is truncated (stop set past its end)";
    const uint32_t *stop = (const uint32_t *)(const void *)(data + at + 4);
    for (uint64_t i = 0; i < n_stop; i++) {
        if (stop[i] >= t->n_tokens) return "tokenizer has a stop token id out of range";
        for (uint64_t j = 0; j < i; j++)
            if (stop[j] == stop[i]) return "tokenizer lists a stop token twice";
    }
    t->stop = stop;
    t->n_stop = (uint32_t)n_stop;
    return NULL;
}

/* The first part of the section, every version: the counts, the end-of-text id, the ranks,
 * offsets and bytes of the tokens. *end is where it ends. */
static const char *read_tokens(Tokenizer *t, const uint8_t *data, uint64_t size, uint32_t version, uint64_t *end) {
    if (size < 16) return "tokenizer section is shorter than its 16-byte header";
    uint64_t n = read_u32(data), bytes_size = read_u32(data + 12);
    uint32_t kind = read_u32(data + 4);
    int32_t eot = (int32_t)read_u32(data + 8);
    if (n == 0) return "tokenizer has no tokens";
    if (kind >= PRETOK_COUNT || (version < 3 && kind > PRETOK_CL100K)) return "tokenizer has an unknown pre-tokenizer kind";
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
        if (t->offsets[i + 1] < t->offsets[i]) return "tokenizer has an empty or out-of-order token";
    *end = need;
    return NULL;
}

/* Every token's bytes are in order, normal ones non-empty and the only ones with ranks. */
static const char *check_tokens(Tokenizer *t) {
    for (uint32_t i = 0; i < t->n_tokens; i++) {
        int normal = kind_of(t, i) == TOKEN_NORMAL;
        if (t->offsets[i + 1] == t->offsets[i] && normal) return "tokenizer has an empty or out-of-order token";
        if (normal && t->offsets[i + 1] - t->offsets[i] > t->max_token_len)
            t->max_token_len = t->offsets[i + 1] - t->offsets[i];
        if (!normal && t->ranks[i] != RANK_NONE) return "tokenizer has a rank for a token that is not normal";
    }
    return NULL;
}

/* Normal tokens by their bytes (the others, specials and byte pieces, are never merged into),
 * and the token of each single byte. */
static const char *index_tokens(Tokenizer *t) {
    t->table = new_table(t->n_tokens, &t->table_mask);
    if (!t->table) return "out of memory for the tokenizer's table";
    for (uint32_t id = 0; id < t->n_tokens; id++) {
        if (kind_of(t, id) != TOKEN_NORMAL) continue;
        size_t len;
        const uint8_t *s = tokenizer_token(t, id, &len);
        uint64_t i = hash_bytes(s, len) & t->table_mask;
        for (; t->table[i]; i = (i + 1) & t->table_mask) {
            size_t other_len = 0;
            const uint8_t *other = tokenizer_token(t, t->table[i] - 1, &other_len);
            if (other_len == len && memcmp(other, s, len) == 0) return "tokenizer has two tokens with the same bytes";
        }
        t->table[i] = id + 1;
    }
    for (int b = 0; b < 256; b++) {
        uint8_t byte = (uint8_t)b;
        t->byte_token[b] = lookup(t, &byte, 1);
        t->byte_piece[b] = RANK_NONE;
    }
    for (uint32_t id = 0; id < t->n_tokens; id++) {
        size_t len;
        const uint8_t *s = tokenizer_token(t, id, &len);
        if (kind_of(t, id) != TOKEN_BYTE) continue;
        if (len != 1) return "tokenizer has a byte piece that is not one byte";
        t->byte_piece[s[0]] = id;
    }
    if ((t->flags & TOK_BYTE_FALLBACK))
        for (int b = 0; b < 256; b++)
            if (t->byte_piece[b] == RANK_NONE) return "tokenizer has byte fallback but lacks a byte piece";
    if ((t->flags & TOK_SENTENCEPIECE) && !(t->flags & TOK_BYTE_FALLBACK) && t->unk_id < 0)
        return "a SentencePiece tokenizer needs byte fallback or an unknown token";
    return NULL;
}

/* The tokens whose text a prompt may spell with --special (added and control tokens with a
 * text), longest text first: the longest one matching at a position wins. */
static const char *index_specials(Tokenizer *t) {
    for (uint32_t id = 0; id < t->n_tokens; id++) {
        size_t len;
        tokenizer_token(t, id, &len);
        if ((kind_of(t, id) == TOKEN_SPECIAL || kind_of(t, id) == TOKEN_CONTROL) && len > 0) t->n_specials++;
    }
    t->specials = malloc((t->n_specials + 1) * sizeof(uint32_t));
    if (!t->specials) return "out of memory for the tokenizer's table";
    uint32_t k = 0;
    for (uint32_t id = 0; id < t->n_tokens; id++) {
        size_t len;
        tokenizer_token(t, id, &len);
        if ((kind_of(t, id) != TOKEN_SPECIAL && kind_of(t, id) != TOKEN_CONTROL) || len == 0) continue;
        uint32_t j = k++;
        for (; j > 0; j--) { /* insertion by length, longest first; ids ascending among equals */
            size_t other = 0;
            tokenizer_token(t, t->specials[j - 1], &other);
            if (other >= len) break;
            t->specials[j] = t->specials[j - 1];
        }
        t->specials[j] = id;
    }
    return NULL;
}

/* Hugging Face's merge list by its pairs (TOK_MERGE_PAIRS). */
static const char *index_merges(Tokenizer *t) {
    t->pair_table = new_table(t->n_merges, &t->pair_mask);
    if (!t->pair_table) return "out of memory for the tokenizer's table";
    for (uint32_t m = 0; m < t->n_merges; m++) {
        const uint32_t *pair = t->merges + 3 * (size_t)m;
        if (kind_of(t, pair[0]) != TOKEN_NORMAL || kind_of(t, pair[1]) != TOKEN_NORMAL || kind_of(t, pair[2]) != TOKEN_NORMAL)
            return "tokenizer merges a token that is not normal";
        uint64_t i = hash_pair(pair[0], pair[1]) & t->pair_mask;
        for (; t->pair_table[i]; i = (i + 1) & t->pair_mask) {
            const uint32_t *other = t->merges + 3 * (size_t)(t->pair_table[i] - 1);
            if (other[0] == pair[0] && other[1] == pair[1]) return "tokenizer lists a merge twice";
        }
        t->pair_table[i] = m + 1;
    }
    return NULL;
}

/* SentencePiece's normalization rules by their keys. */
static const char *index_rules(Tokenizer *t) {
    t->rule_table = new_table(t->n_rules, &t->rule_mask);
    if (!t->rule_table) return "out of memory for the tokenizer's table";
    for (uint32_t r = 0; r < t->n_rules; r++) {
        size_t len;
        const uint8_t *key = rule_part(t, r, 0, &len);
        if (len > 64) return "tokenizer has a normalization rule longer than 64 bytes";
        if (rule_of(t, key, len) != RANK_NONE) return "tokenizer has two normalization rules for the same text";
        uint64_t i = hash_bytes(key, len) & t->rule_mask;
        while (t->rule_table[i]) i = (i + 1) & t->rule_mask;
        t->rule_table[i] = r + 1;
        t->rule_lengths |= 1ull << (len - 1);
        rule_part(t, r, 1, &len);
        if (len > t->max_rule_value) t->max_rule_value = (uint32_t)len;
    }
    return NULL;
}

/* The section's parts for its version, then the indexes built from them. */
static const char *read_section(Tokenizer *t, const uint8_t *data, uint64_t size, uint32_t version) {
    uint64_t end = 0;
    const char *err = read_tokens(t, data, size, version, &end);
    if (!err && version >= 3) err = read_version_3(t, data, size, end, &end);
    else if (!err && t->pretokenizer != PRETOK_CHAR) t->flags = TOK_WHOLE_PIECES; /* versions 1, 2: tiktoken's BPE */
    if (!err && version >= 4) err = read_version_4(t, data, size, end);
    else if (!err && t->eot_id >= 0) { /* versions 1-3: the stop set is end-of-text */
        t->eot_stop = (uint32_t)t->eot_id;
        t->stop = &t->eot_stop;
        t->n_stop = 1;
    }
    if (!err) err = check_tokens(t);
    if (!err) err = index_tokens(t);
    if (!err) err = index_specials(t);
    if (!err && (t->flags & TOK_MERGE_PAIRS)) err = index_merges(t);
    if (!err && t->n_rules) err = index_rules(t);
    return err;
}

const char *tokenizer_init(Tokenizer *t, const uint8_t *data, uint64_t size, uint32_t version) {
    memset(t, 0, sizeof *t);
    t->bos_id = t->unk_id = -1;
    const char *err = read_section(t, data, size, version);
    if (err) tokenizer_free(t);
    return err;
}

int tokenizer_stops(const Tokenizer *t, uint32_t id) {
    for (uint32_t i = 0; i < t->n_stop; i++)
        if (t->stop[i] == id) return 1;
    return 0;
}

void tokenizer_free(Tokenizer *t) {
    free(t->table);
    free(t->pair_table);
    free(t->rule_table);
    free(t->specials);
    free(t->parts);
    free(t->heap);
    free(t->normalized);
    t->table = t->pair_table = t->rule_table = t->specials = NULL;
    t->parts = NULL;
    t->heap = NULL;
    t->normalized = NULL;
    t->parts_cap = t->normalized_cap = 0;
}

/* ---- UTF-8 and character classes ---------------------------------------------------- */

/* The value of the range of one of unicode_tables.h's tables (n ranges) that holds cp, or 0. */
static int range_value(const UnicodeRange *ranges, size_t n, long cp) {
    size_t lo = 0, hi = n;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if ((uint32_t)cp < ranges[mid].first) hi = mid;
        else if ((uint32_t)cp > ranges[mid].last) lo = mid + 1;
        else return ranges[mid].value;
    }
    return 0;
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
    return range_value(unicode_ranges, sizeof unicode_ranges / sizeof unicode_ranges[0], cp);
}

typedef struct {
    size_t len; /* bytes */
    int cls;    /* CLASS_* */
    long cp;    /* the code point, or -1 for an invalid byte */
} Char;

static Char char_at(const uint8_t *s, size_t n, size_t i) {
    Char c;
    c.len = utf8_decode(s + i, n - i, &c.cp);
    c.cls = char_class(c.cp);
    return c;
}

/* A letter's case for o200k_base (CASE_UPPER, _LOWER, _BOTH or _NONE), as char_class finds a
 * class. */
static int char_case(long cp) {
    if (cp < 0) return CASE_NONE;
    if (cp < 128) return cp >= 'a' && cp <= 'z' ? CASE_LOWER : cp >= 'A' && cp <= 'Z' ? CASE_UPPER : CASE_NONE;
    return range_value(unicode_cases, sizeof unicode_cases / sizeof unicode_cases[0], cp);
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

/* ---- cl100k_base's pre-tokenizer (Llama 3's too; Qwen2's with one digit at a time) ---- */

/* What follows the words in cl100k_base's pattern and o200k_base's, from s[0] (whose character
 * is c): \p{N}{1,max_digits}, ` ?[^\s\p{L}\p{N}]+[\r\n]*` (o200k: [\r\n/]*), \s*[\r\n]+,
 * \s+(?!\S), \s+. */
static size_t split_rest(const uint8_t *s, size_t n, Char c, int max_digits, int slash) {
    if (c.cls == CLASS_NUMBER) {
        size_t i = 0;
        for (int k = 0; k < max_digits && i < n; k++) {
            Char d = char_at(s, n, i);
            if (d.cls != CLASS_NUMBER) break;
            i += d.len;
        }
        return i;
    }
    size_t start = 0;
    if (s[0] == ' ' && n > 1 && char_at(s, n, 1).cls == CLASS_OTHER) start = 1;
    if (start == 1 || c.cls == CLASS_OTHER) {
        size_t end = run_of(s, n, start, CLASS_OTHER);
        while (end < n && (is_newline(s[end]) || (slash && s[end] == '/'))) end++;
        return end;
    }
    /* \s*[\r\n]+ : the whitespace run up to and including its last newline */
    size_t end = run_of(s, n, 0, CLASS_SPACE);
    for (size_t j = end; j > 0; j--)
        if (is_newline(s[j - 1])) return j;
    return whitespace_piece(s, n); /* \s+(?!\S)|\s+ */
}

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

static size_t cl100k_piece(const uint8_t *s, size_t n, int max_digits) {
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
    /* then numbers (Qwen2: one at a time), punctuation, whitespace */
    return split_rest(s, n, c, max_digits, 0);
}

/* ---- o200k_base's pre-tokenizer (GPT-4o's; Phi-4-mini's) ---------------------------- */

/* tiktoken's o200k_base splits by
 *   [^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?
 *  |[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?
 *  |\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+
 * Words split where the case goes from lower to upper ("camelCase" is "camel", "Case"). */

static int upper_ish(int k) { return k == CASE_UPPER || k == CASE_BOTH; }
static int lower_ish(int k) { return k == CASE_LOWER || k == CASE_BOTH; }

/* A character's case in a word: Unicode's; or, as llama.cpp splits a GGUF's "gpt-4o" (ascii),
 * A-Z upper, a-z lower, every other letter both and the marks not letters at all (its
 * pattern: ((?=[\p{L}])([^a-z]))* ((?=[\p{L}])([^A-Z]))+). */
static int word_case(const Char *c, int ascii) {
    if (!ascii) return char_case(c->cp);
    if (c->cp >= 'a' && c->cp <= 'z') return CASE_LOWER;
    if (c->cp >= 'A' && c->cp <= 'Z') return CASE_UPPER;
    return c->cls == CLASS_LETTER ? CASE_BOTH : CASE_NONE;
}

/* The first word alternative from i: the end of its match, or 0. [upper-ish]* takes its
 * longest run; [lower-ish]+ then takes the run after it, or, when none follows, the regex
 * backtracks into the run to its last character that is lower-ish too (Lm, Lo, a mark). */
static size_t o200k_word_first(const uint8_t *s, size_t n, size_t i, int ascii) {
    size_t last_both = 0;
    while (i < n) {
        Char c = char_at(s, n, i);
        int k = word_case(&c, ascii);
        if (!upper_ish(k)) break;
        i += c.len;
        if (k == CASE_BOTH) last_both = i;
    }
    size_t end = i;
    while (end < n) {
        Char c = char_at(s, n, end);
        if (!lower_ish(word_case(&c, ascii))) break;
        end += c.len;
    }
    return end > i ? end : last_both;
}

/* The second: [upper-ish]+ then [lower-ish]*; the end, or 0. */
static size_t o200k_word_second(const uint8_t *s, size_t n, size_t i, int ascii) {
    size_t start = i;
    while (i < n) {
        Char c = char_at(s, n, i);
        if (!upper_ish(word_case(&c, ascii))) break;
        i += c.len;
    }
    if (i == start) return 0;
    while (i < n) {
        Char c = char_at(s, n, i);
        if (!lower_ish(word_case(&c, ascii))) break;
        i += c.len;
    }
    return i;
}

static size_t o200k_piece(const uint8_t *s, size_t n, int ascii) {
    Char c = char_at(s, n, 0);
    /* [^\r\n\p{L}\p{N}]? before a word: taken when the word then matches, else left out */
    size_t prefix = !is_newline(s[0]) && c.cls != CLASS_LETTER && c.cls != CLASS_NUMBER ? c.len : 0;
    for (int alternative = 0; alternative < 2; alternative++) {
        size_t (*word)(const uint8_t *, size_t, size_t, int) = alternative ? o200k_word_second : o200k_word_first;
        size_t end = prefix ? word(s, n, prefix, ascii) : 0;
        if (!end) end = word(s, n, 0, ascii);
        if (end) { /* (?i:'s|'t|'re|'ve|'m|'ll|'d)? (llama.cpp's: '[sS]|'[tT]|..., ASCII only) */
            size_t k = end < n && s[end] == '\'' ? contraction_ci(s + end + 1, n - end - 1) : 0;
            if (ascii && k && s[end + 1] >= 0x80) k = 0;
            return k ? end + 1 + k : end;
        }
    }
    return split_rest(s, n, c, 3, 1);
}

/* ---- Unicode Normalization Form C (Qwen2's normalizer) -------------------------------- */

/* Room for n bytes of normalized text. */
static int normalized_room(Tokenizer *t, size_t n) {
    if (n <= t->normalized_cap) return 0;
    size_t cap = 2 * n + 64;
    uint8_t *grown = realloc(t->normalized, cap);
    if (!grown) return -1;
    t->normalized = grown;
    t->normalized_cap = cap;
    return 0;
}


/* A byte that is not valid UTF-8 passes through NFC untouched, as this code "point". */
#define RAW_BYTE 0x110000

static int nfc_class(uint32_t cp) {
    size_t lo = 0, hi = sizeof nfc_classes / sizeof nfc_classes[0];
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (cp < nfc_classes[mid].first) hi = mid;
        else if (cp > nfc_classes[mid].last) lo = mid + 1;
        else return nfc_classes[mid].ccc;
    }
    return 0;
}

/* Hangul syllables decompose and compose by arithmetic (Unicode Standard, section 3.12). */
enum { S_BASE = 0xAC00, L_BASE = 0x1100, V_BASE = 0x1161, T_BASE = 0x11A7, L_COUNT = 19, V_COUNT = 21,
       T_COUNT = 28, N_COUNT = V_COUNT * T_COUNT, S_COUNT = L_COUNT * N_COUNT };

/* cp's full canonical decomposition into out (at most 4 code points); returns its length. */
static int nfc_decompose(uint32_t cp, uint32_t *out) {
    if (cp >= S_BASE && cp < S_BASE + S_COUNT) {
        uint32_t s = cp - S_BASE, t = s % T_COUNT;
        out[0] = L_BASE + s / N_COUNT;
        out[1] = V_BASE + s % N_COUNT / T_COUNT;
        if (t) out[2] = T_BASE + t;
        return t ? 3 : 2;
    }
    size_t lo = 0, hi = sizeof nfc_decompositions / sizeof nfc_decompositions[0];
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (cp < nfc_decompositions[mid].cp) hi = mid;
        else if (cp > nfc_decompositions[mid].cp) lo = mid + 1;
        else {
            for (int i = 0; i < nfc_decompositions[mid].length; i++) out[i] = nfc_decomposed[nfc_decompositions[mid].start + i];
            return nfc_decompositions[mid].length;
        }
    }
    out[0] = cp;
    return 1;
}

/* The primary composite of (first, second), or 0. */
static uint32_t nfc_compose(uint32_t first, uint32_t second) {
    if (first >= L_BASE && first < L_BASE + L_COUNT && second >= V_BASE && second < V_BASE + V_COUNT)
        return S_BASE + ((first - L_BASE) * V_COUNT + (second - V_BASE)) * T_COUNT;
    if (first >= S_BASE && first < S_BASE + S_COUNT && (first - S_BASE) % T_COUNT == 0 && second > T_BASE &&
        second < T_BASE + T_COUNT)
        return first + (second - T_BASE);
    size_t lo = 0, hi = sizeof nfc_compositions / sizeof nfc_compositions[0];
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        uint32_t a = nfc_compositions[mid].first, b = nfc_compositions[mid].second;
        if (first < a || (first == a && second < b)) hi = mid;
        else if (first > a || second > b) lo = mid + 1;
        else return nfc_compositions[mid].composite;
    }
    return 0;
}

/* A code point as UTF-8; a raw byte (RAW_BYTE + b, an invalid byte kept) as itself. */
static size_t utf8_encode(uint32_t cp, uint8_t *out) {
    if (cp >= RAW_BYTE) { out[0] = (uint8_t)(cp - RAW_BYTE); return 1; }
    return utf8_put(out, cp);
}

/* s[0..n) in Normalization Form C (UAX #15: full canonical decomposition, canonical ordering of
 * combining marks by class, canonical composition), into t->normalized; returns its length, or
 * -1 when memory runs out. A text of ASCII alone is already in NFC. */
static long nfc_normalize(Tokenizer *t, const uint8_t *s, size_t n) {
    size_t ascii = 0;
    while (ascii < n && s[ascii] < 0x80) ascii++;
    /* code points: each byte gives at most 4 (a decomposition), re-encoded in at most 4 bytes each */
    if (normalized_room(t, 4 * n + 16 * n + 16)) return -1;
    if (ascii == n) { memcpy(t->normalized, s, n); return (long)n; }
    uint32_t *cps = (uint32_t *)(void *)(t->normalized + ((4 * n + 3) & ~(size_t)3));
    size_t m = 0;
    for (size_t i = 0; i < n;) { /* decompose */
        long cp;
        size_t len = utf8_decode(s + i, n - i, &cp);
        if (cp < 0) cps[m++] = RAW_BYTE + s[i];
        else m += (size_t)nfc_decompose((uint32_t)cp, cps + m);
        i += len;
    }
    for (size_t i = 1; i < m; i++) { /* canonical ordering: a stable sort of each run of marks */
        int c = cps[i] >= RAW_BYTE ? 0 : nfc_class(cps[i]);
        for (size_t j = i; c && j > 0; j--) {
            int before = cps[j - 1] >= RAW_BYTE ? 0 : nfc_class(cps[j - 1]);
            if (before <= c) break;
            uint32_t x = cps[j]; cps[j] = cps[j - 1]; cps[j - 1] = x;
        }
    }
    /* composition: each character after the last starter joins it when nothing between blocks */
    size_t kept = m ? 1 : 0, starter = 0;
    int last_class = m && cps[0] < RAW_BYTE && nfc_class(cps[0]) ? 256 : 0;
    for (size_t i = 1; i < m; i++) {
        uint32_t cp = cps[i];
        int c = cp >= RAW_BYTE ? 0 : nfc_class(cp);
        uint32_t composite = cps[starter] >= RAW_BYTE || cp >= RAW_BYTE ? 0 : nfc_compose(cps[starter], cp);
        if (composite && (last_class < c || last_class == 0)) { cps[starter] = composite; continue; }
        if (c == 0) starter = kept;
        last_class = c;
        cps[kept++] = cp;
    }
    size_t written = 0;
    for (size_t i = 0; i < kept; i++) written += utf8_encode(cps[i], t->normalized + written);
    return (long)written;
}

/* ---- SmolLM2's pre-tokenizer: numbers alone, GPT-2's split between them ---------------- */

/* Rust's char::is_numeric, which Hugging Face's Digits asks: any number (Nd, Nl, No: Arabic-
 * Indic digits, Roman numerals, fractions, superscripts), by the Unicode of the Rust that built
 * the library, not the regexes' (unicode_tables.h). */
static int is_rust_numeric(long cp) {
    if (cp < 128) return cp >= '0' && cp <= '9'; /* also an invalid byte (-1): never a number */
    return range_value(rust_numeric_ranges, sizeof rust_numeric_ranges / sizeof rust_numeric_ranges[0], cp);
}

/* Hugging Face's Digits(individual_digits) isolates each numeric character; GPT-2's pattern
 * then splits each stretch between them as a text of its own (its \s+(?!\S) sees the
 * stretch's end as the text's end). The length of the stretch at s[0]: one numeric character,
 * or all up to the next one. */
static size_t digits_stretch(const uint8_t *s, size_t n) {
    long cp;
    size_t len = utf8_decode(s, n, &cp);
    if (is_rust_numeric(cp)) return len;
    size_t stretch = len;
    while (stretch < n) {
        len = utf8_decode(s + stretch, n - stretch, &cp);
        if (is_rust_numeric(cp)) break;
        stretch += len;
    }
    return stretch;
}

/* ---- normalizers -------------------------------------------------------------------- */

#define SP_SPACE "\xE2\x96\x81" /* U+2581 LOWER ONE EIGHTH BLOCK: SentencePiece's escaped space */

/* SentencePiece's Normalizer::Normalize with escape_whitespaces (sentencepiece's
 * normalizer.cc): at each position the longest rule whose key starts there gives its value,
 * else one UTF-8 character passes as it is (a byte that starts none becomes U+FFFD); with
 * TOK_REMOVE_EXTRA_SPACES leading spaces are dropped, a value's leading spaces too when the
 * text so far ends with one, and trailing spaces at the end; TOK_DUMMY_PREFIX puts a space
 * first; every space becomes U+2581. Then, for merging, every U+2581 becomes a space again:
 * the vocabulary's bytes spell SentencePiece's pieces with spaces (model.h), and U+2581 in the
 * text is a space to SentencePiece too. Returns the length written to t->normalized, or -1. */
static long sentencepiece_normalize(Tokenizer *t, const uint8_t *s, size_t n, unsigned how) {
    int remove_extra = (t->flags & TOK_REMOVE_EXTRA_SPACES) != 0;
    /* each consumed byte gives at most max_rule_value bytes, each of which 3 (a space as U+2581);
     * a character passes whole, a byte that starts none gives 3 (U+FFFD) */
    size_t most = 3 * (t->max_rule_value > 3 ? t->max_rule_value : 3);
    if (normalized_room(t, (n + 1) * most + 3)) return -1;
    uint8_t *out = t->normalized;
    size_t at = 0, written = 0;
    int leading = remove_extra, prev_space = remove_extra, dummy = (t->flags & TOK_DUMMY_PREFIX) != 0;
    if (how & ENCODE_SPACE_FIRST) dummy = 1;
    if (how & ENCODE_NO_SPACE_FIRST) dummy = 0;
    while (at < n) {
        /* the prefix at `at`: a rule's value, or one character */
        const uint8_t *value = NULL;
        size_t value_len = 0, consumed = 0;
        for (int len = 64; len >= 1 && t->n_rules; len--) {
            if (!(t->rule_lengths >> (len - 1) & 1) || (size_t)len > n - at) continue;
            uint32_t r = rule_of(t, s + at, (size_t)len);
            if (r != RANK_NONE) { value = rule_part(t, r, 1, &value_len); consumed = (size_t)len; break; }
        }
        if (!value) {
            long cp;
            consumed = utf8_decode(s + at, n - at, &cp);
            if (cp < 0) { value = (const uint8_t *)"\xEF\xBF\xBD"; value_len = 3; }
            else if (cp == 0xFFFD) { value = s + at; value_len = consumed; }
            else { value = s + at; value_len = consumed; }
        }
        at += consumed;
        if (leading) { /* drop the text's leading spaces (a value that is exactly " ") */
            if (value_len == 1 && value[0] == ' ') continue;
            leading = 0;
        }
        if (dummy) { memcpy(out + written, SP_SPACE, 3); written += 3; dummy = 0; }
        size_t i = 0;
        while (prev_space && i < value_len && value[i] == ' ') i++;
        if (i < value_len) {
            for (; i < value_len; i++) {
                if (value[i] == ' ') { memcpy(out + written, SP_SPACE, 3); written += 3; }
                else out[written++] = value[i];
            }
            prev_space = value[value_len - 1] == ' ';
        }
        if (!remove_extra) prev_space = 0;
    }
    if (remove_extra)
        while (written >= 3 && memcmp(out + written - 3, SP_SPACE, 3) == 0) written -= 3;
    /* U+2581 back to a space, in place (3 bytes become 1) */
    size_t j = 0;
    for (size_t i = 0; i < written;) {
        if (i + 3 <= written && memcmp(out + i, SP_SPACE, 3) == 0) { out[j++] = ' '; i += 3; }
        else out[j++] = out[i++];
    }
    return (long)j;
}

/* ---- merging ------------------------------------------------------------------------ */

/* Part i of a piece starts at byte i; dead parts have been merged into their left neighbour. */
struct BpePart {
    uint32_t next;  /* start of the next live part (the piece's length for the last one) */
    uint32_t prev;  /* start of the previous live part */
    uint32_t rank;  /* rank of merging this part with the next, RANK_NONE if impossible */
    uint32_t alive;
    uint32_t id;    /* TOK_MERGE_PAIRS: the part's token */
};

static uint32_t pair_rank(const Tokenizer *t, const uint8_t *piece, const struct BpePart *parts,
                          uint32_t len, uint32_t i) {
    uint32_t j = parts[i].next;
    if (j >= len) return RANK_NONE;
    if (t->flags & TOK_MERGE_PAIRS) return pair_merge(t, parts[i].id, parts[j].id);
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

/* SentencePiece: a merged part no token spells, as byte pieces of its bytes (with its spaces
 * as U+2581 again, as SentencePiece holds them) or, without byte fallback, the unknown token,
 * once for a run of unknown parts (*prev_unknown). */
static int emit_unknown(Tokenizer *t, const uint8_t *s, size_t n, int *prev_unknown, uint32_t **ids, size_t *cap,
                        size_t *count) {
    if (!(t->flags & TOK_BYTE_FALLBACK)) {
        int err = *prev_unknown ? 0 : push_id(ids, cap, count, (uint32_t)t->unk_id);
        *prev_unknown = 1;
        return err;
    }
    for (size_t i = 0; i < n; i++) {
        if (s[i] == ' ') {
            for (int k = 0; k < 3; k++)
                if (push_id(ids, cap, count, t->byte_piece[(uint8_t)SP_SPACE[k]])) return -1;
        } else if (push_id(ids, cap, count, t->byte_piece[s[i]])) {
            return -1;
        }
    }
    return 0;
}

/* Encode one pre-token piece: merge it and append its ids. */
static int bpe_piece(Tokenizer *t, const uint8_t *piece, size_t size, uint32_t **ids, size_t *cap,
                     size_t *count, const char **err) {
    int sentencepiece = (t->flags & TOK_SENTENCEPIECE) != 0, pairs = (t->flags & TOK_MERGE_PAIRS) != 0;
    if (t->flags & TOK_WHOLE_PIECES) {
        uint32_t whole = size <= t->max_token_len ? lookup(t, piece, size) : RANK_NONE;
        if (whole != RANK_NONE && (pairs || t->ranks[whole] != RANK_NONE)) return push_id(ids, cap, count, whole);
    }
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
    /* the first parts: single bytes, or (SentencePiece) UTF-8 characters, by their lead byte as
     * SentencePiece splits them (the normalized text is valid UTF-8) */
    uint32_t prev = 0;
    for (uint32_t i = 0; i < len;) {
        uint32_t step = 1;
        if (sentencepiece) {
            static const uint8_t length_of_lead[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};
            step = length_of_lead[piece[i] >> 4];
            if (step > len - i) step = len - i;
        }
        parts[i] = (struct BpePart){i + step, prev, RANK_NONE, 1, pairs ? t->byte_token[piece[i]] : 0};
        if (pairs && parts[i].id == RANK_NONE) { *err = "the text has a byte the vocabulary has no token for"; return -1; }
        prev = i;
        i += step;
    }
    for (uint32_t i = 0; i < len; i = parts[i].next) {
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
        if (pairs) parts[i].id = t->merges[3 * (size_t)rank + 2];
        if (parts[i].next < len) parts[parts[i].next].prev = i;
        parts[i].rank = pair_rank(t, piece, parts, len, i);
        if (parts[i].rank != RANK_NONE) heap_push(heap, &n_heap, (uint64_t)parts[i].rank << 32 | i);
        if (i > 0) {
            uint32_t p = parts[i].prev;
            parts[p].rank = pair_rank(t, piece, parts, len, p);
            if (parts[p].rank != RANK_NONE) heap_push(heap, &n_heap, (uint64_t)parts[p].rank << 32 | p);
        }
    }
    int prev_unknown = 0;
    for (uint32_t i = 0; i < len; i = parts[i].next) {
        uint32_t id = pairs ? parts[i].id : lookup(t, piece + i, parts[i].next - i);
        if (id == RANK_NONE && sentencepiece) {
            if (emit_unknown(t, piece + i, parts[i].next - i, &prev_unknown, ids, cap, count)) goto out_of_memory;
            continue;
        }
        if (id == RANK_NONE) { *err = "the text has a byte the vocabulary has no token for"; return -1; }
        prev_unknown = 0;
        if (push_id(ids, cap, count, id)) goto out_of_memory;
    }
    return 0;
out_of_memory:
    *err = "out of memory while encoding";
    return -1;
}

/* ---- encoding ----------------------------------------------------------------------- */

/* Length of the next piece of text[at..len) by the vocabulary's pre-tokenizer. *stretch_end:
 * digits_gpt2's end of the stretch being split, found once per stretch, not once per piece
 * (which is quadratic in a long text without numbers). */
static size_t next_piece(const Tokenizer *t, const uint8_t *text, size_t len, size_t at, size_t *stretch_end) {
    switch (t->pretokenizer) {
    case PRETOK_GPT2: return gpt2_piece(text + at, len - at);
    case PRETOK_CL100K: return cl100k_piece(text + at, len - at, 3);
    case PRETOK_QWEN2: return cl100k_piece(text + at, len - at, 1);
    case PRETOK_O200K: return o200k_piece(text + at, len - at, 0);
    case PRETOK_O200K_ASCII: return o200k_piece(text + at, len - at, 1);
    case PRETOK_DIGITS_GPT2:
        if (at >= *stretch_end) *stretch_end = at + digits_stretch(text + at, len - at);
        return gpt2_piece(text + at, *stretch_end - at);
    default: return len - at; /* PRETOK_WHOLE */
    }
}

/* Encode a text with no special tokens in it: normalize, pre-tokenize, merge. */
static int encode_text(Tokenizer *t, const uint8_t *text, size_t len, unsigned how, uint32_t **ids, size_t *cap,
                       size_t *count, const char **err) {
    if (t->flags & TOK_SENTENCEPIECE) {
        long n = sentencepiece_normalize(t, text, len, how);
        if (n < 0) { *err = "out of memory while encoding"; return -1; }
        text = t->normalized;
        len = (size_t)n;
    } else if (t->flags & TOK_NFC) {
        long n = nfc_normalize(t, text, len);
        if (n < 0) { *err = "out of memory while encoding"; return -1; }
        text = t->normalized;
        len = (size_t)n;
    }
    size_t stretch_end = 0;
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
            if (push_id(ids, cap, count, id)) { *err = "out of memory while encoding"; return -1; }
        } else {
            n = next_piece(t, text, len, i, &stretch_end);
            if (n == 0) break; /* the whole-text pre-tokenizer on an empty text */
            if (bpe_piece(t, text + i, n, ids, cap, count, err)) {
                if (!*err) *err = "out of memory while encoding";
                return -1;
            }
        }
        i += n;
    }
    return 0;
}

/* The special token whose text starts text[0..len), the longest one, or RANK_NONE. */
static uint32_t special_at(const Tokenizer *t, const uint8_t *text, size_t len) {
    for (uint32_t k = 0; k < t->n_specials; k++) {
        size_t n = 0;
        const uint8_t *s = tokenizer_token(t, t->specials[k], &n);
        if (n <= len && memcmp(s, text, n) == 0) return t->specials[k];
    }
    return RANK_NONE;
}

long tokenizer_encode(Tokenizer *t, const uint8_t *text, size_t len, unsigned how, uint32_t **ids, size_t *cap,
                      const char **err) {
    size_t count = 0;
    *err = NULL;
    if ((how & ENCODE_BOS) && t->bos_id >= 0 && push_id(ids, cap, &count, (uint32_t)t->bos_id)) {
        *err = "out of memory while encoding";
        return -1;
    }
    size_t start = 0;
    for (size_t i = 0; (how & ENCODE_SPECIAL) && i < len; i++) {
        uint32_t special = special_at(t, text + i, len - i);
        if (special == RANK_NONE) continue;
        if (i > start && encode_text(t, text + start, i - start, how, ids, cap, &count, err)) return -1;
        if (push_id(ids, cap, &count, special)) { *err = "out of memory while encoding"; return -1; }
        size_t n = 0;
        tokenizer_token(t, special, &n);
        start = i + n;
        i = start - 1;
    }
    if (start < len && encode_text(t, text + start, len - start, how, ids, cap, &count, err)) return -1;
    return (long)count;
}

/* ---- decoding ------------------------------------------------------------------------- */

/* SentencePiece's decoding drops the space its dummy prefix put before a text: a generation
 * with no prompt prints its first words as SentencePiece's decode() would (sentencepiece_
 * processor.cc): while nothing is printed, a normal token (not a byte or unknown piece) that
 * starts with a space loses it, only the first such token unless extra spaces are removed. */
TokenDecoder tokenizer_decoder(const Tokenizer *t, int after_prompt) {
    int drops = (t->flags & TOK_SENTENCEPIECE) && (t->flags & (TOK_DUMMY_PREFIX | TOK_REMOVE_EXTRA_SPACES));
    return (TokenDecoder){.at_start = !after_prompt && drops};
}

const uint8_t *tokenizer_decode(const Tokenizer *t, TokenDecoder *d, uint32_t id, size_t *len) {
    const uint8_t *bytes = tokenizer_token(t, id, len);
    if (!bytes) return NULL;
    if (kind_of(t, id) == TOKEN_CONTROL) *len = 0;
    if (!d->at_start) return bytes;
    if (t->kinds && t->kinds[id] == TOKEN_NORMAL && !d->space_dropped && *len > 0 && bytes[0] == ' ') {
        bytes++;
        (*len)--;
        d->space_dropped = !(t->flags & TOK_REMOVE_EXTRA_SPACES);
    }
    if (*len > 0) d->at_start = 0;
    return bytes;
}
