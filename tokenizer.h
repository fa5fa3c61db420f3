/* tokenizer.h: the tokenizer's API (tokenizer.c): text to token ids and back, from the
 * tokenizer section of a weight file (model.h's byte table describes the section; the constants
 * below are its fields' values). */
#ifndef TOKENIZER_H
#define TOKENIZER_H

#include <stddef.h>
#include <stdint.h>

enum { PRETOK_CHAR = 0, PRETOK_GPT2 = 1, PRETOK_CL100K = 2, PRETOK_WHOLE = 3, PRETOK_DIGITS_GPT2 = 4,
       PRETOK_QWEN2 = 5, PRETOK_O200K = 6,
       PRETOK_O200K_ASCII = 7, PRETOK_COUNT };
enum { TOK_MERGE_PAIRS = 1, TOK_WHOLE_PIECES = 2, TOK_SENTENCEPIECE = 4, TOK_BYTE_FALLBACK = 8,
       TOK_DUMMY_PREFIX = 16, TOK_REMOVE_EXTRA_SPACES = 32, TOK_NFC = 64, TOK_ALL = 127 };
enum { TOKEN_NORMAL = 0, TOKEN_CONTROL = 1, TOKEN_UNKNOWN = 2, TOKEN_BYTE = 3, TOKEN_SPECIAL = 4 };
#define RANK_NONE 0xFFFFFFFFu

typedef struct {
    uint32_t n_tokens;
    int pretokenizer;          /* PRETOK_* */
    int32_t eot_id;            /* -1: none */
    int32_t bos_id;            /* prepended to every encoded text, -1: none */
    int32_t unk_id;            /* SentencePiece's unknown piece, -1: none */
    uint32_t flags;            /* TOK_* */
    const uint32_t *ranks;     /* (n_tokens) merge rank, RANK_NONE = not mergeable */
    const uint32_t *offsets;   /* (n_tokens + 1) into blob */
    const uint8_t *blob;       /* token byte strings */
    const uint8_t *kinds;      /* (n_tokens) TOKEN_*, or NULL: all TOKEN_NORMAL (versions 1, 2) */
    const uint32_t *merges;    /* (n_merges, 3) left, right, merged (TOK_MERGE_PAIRS) */
    uint32_t n_merges;
    const uint32_t *rule_offsets; /* (2 n_rules + 1) into rules_blob: key, value, key, ... */
    const uint8_t *rules_blob;
    uint32_t n_rules;
    const uint32_t *stop;      /* (n_stop) generation ends at any of these (version 4's stop set;
                                  before it, end-of-text alone) */
    uint32_t n_stop;
    uint32_t eot_stop;         /* the stop set of a file before version 4 */
    /* indexes built at load */
    uint32_t byte_token[256];  /* the normal token of each single byte, RANK_NONE if absent */
    uint32_t byte_piece[256];  /* SentencePiece's <0xNN> byte-fallback token, RANK_NONE if absent */
    uint32_t *table;           /* hash of normal tokens' bytes -> id + 1 (0 = empty slot) */
    uint64_t table_mask;
    uint32_t *pair_table;      /* hash of (left, right) -> merge index + 1 (TOK_MERGE_PAIRS) */
    uint64_t pair_mask;
    uint32_t *rule_table;      /* hash of a rule's key -> rule index + 1 */
    uint64_t rule_mask;
    uint64_t rule_lengths;     /* bit k set: some rule's key is k + 1 bytes long (k < 64) */
    uint32_t max_rule_value;   /* the longest rule value in bytes */
    uint32_t *specials;        /* ids --special recognises, longest text first */
    uint32_t n_specials;
    uint32_t max_token_len;    /* longest normal token in bytes */
    /* scratch reused by every encode call, grown as needed (not touched while decoding) */
    struct BpePart *parts;
    uint64_t *heap;
    size_t parts_cap;
    uint8_t *normalized;       /* a text after its normalizer */
    size_t normalized_cap;
} Tokenizer;

/* Validate and index the tokenizer section [data, data+size) of a file of format version
 * `version` (model.h). Returns NULL on success, else a static message naming the problem (the
 * caller adds "error: "). */
const char *tokenizer_init(Tokenizer *t, const uint8_t *data, uint64_t size, uint32_t version);
void tokenizer_free(Tokenizer *t);

/* What tokenizer_encode() does besides splitting the text (bits of its `how`). */
enum {
    ENCODE_BOS = 1,     /* bos_id first, when the vocabulary has one */
    ENCODE_SPECIAL = 2, /* the text of an added or control token (<|im_start|>, <s>) is that token;
                           without it, such text is plain text (so a file cannot inject tokens) */
    ENCODE_SPACE_FIRST = 4,    /* SentencePiece: a space before the text (its dummy prefix) whatever
                                  the model says; chat's texts between special tokens (chat.h) */
    ENCODE_NO_SPACE_FIRST = 8, /* SentencePiece: no space before the text */
};

/* Encode text (any bytes) into *ids from index 0 (capacity *cap, grown with realloc), as `how`
 * says (ENCODE_* bits). Returns the number of ids, or -1 with *err set when the vocabulary cannot
 * represent the text (a character vocabulary missing a character). */
long tokenizer_encode(Tokenizer *t, const uint8_t *text, size_t len, unsigned how, uint32_t **ids, size_t *cap,
                      const char **err);

/* At most this many stop tokens in a file. */
#define TOKENIZER_MAX_STOP 64

/* Whether token id ends a generation (the file's stop set). */
int tokenizer_stops(const Tokenizer *t, uint32_t id);

/* Decoding generated tokens into the bytes to print: control tokens print nothing; after no
 * prompt, SentencePiece's decode drops the space its dummy prefix put before a text. */
typedef struct {
    int at_start;       /* nothing printed yet, after no prompt, by such a vocabulary */
    int space_dropped;  /* the leading space has been dropped */
} TokenDecoder;

/* A decoder for a generation that starts after a prompt (after_prompt) or from nothing. */
TokenDecoder tokenizer_decoder(const Tokenizer *t, int after_prompt);

/* The bytes generated token id prints (length in *len), or NULL for an id outside the vocabulary. */
const uint8_t *tokenizer_decode(const Tokenizer *t, TokenDecoder *d, uint32_t id, size_t *len);

/* The bytes of token id (length in *len), or NULL for an id outside the vocabulary: its text
 * as the vocabulary spells it (a control token's name, such as <s>). */
const uint8_t *tokenizer_token(const Tokenizer *t, uint32_t id, size_t *len);

#endif
