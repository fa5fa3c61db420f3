/* libFuzzer target for the tokenizer. The first input byte picks a vocabulary (GPT-2, cl100k, a
 * character vocabulary, a SentencePiece one with a normalization rule and byte fallback, a
 * tokenizer.json one with merges by pairs and NFC, one with SmolLM2's numbers-alone split,
 * o200k_base;
 * tokenizer-only files in $FUZZ_VOCAB_DIR, which `make fuzz` writes) and what to do with the rest:
 *   high bit clear: encode the bytes, then check that the ids are in range and, where the
 *                   tokenizer keeps the text as it is (byte-level BPE without NFC), that
 *                   decoding the ids gives the bytes back;
 *   high bit set:   read the bytes as little-endian 32-bit ids, out-of-range ones included,
 *                   and decode them.
 * A broken round trip aborts, which libFuzzer reports with the input. */
#include "../../engine.h"

#define N_VOCABS 7
static Transformer vocabs[N_VOCABS];

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc; (void)argv;
    const char *dir = getenv("FUZZ_VOCAB_DIR");
    static const char *names[N_VOCABS] = {"gpt2.bin", "cl100k.bin", "char.bin", "sentencepiece.bin",
                                          "tokenizer_json.bin", "digits.bin", "o200k.bin"};
    for (int i = 0; i < N_VOCABS; i++) {
        char path[4096];
        snprintf(path, sizeof path, "%s/%s", dir ? dir : ".", names[i]);
        Error e;
        if (!build_transformer(&vocabs[i], path, 1, 0, CACHE_F16, &e)) {
            fprintf(stderr, "fuzz_tokenizer: %s\n", e.message);
            abort();
        }
    }
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    Tokenizer *tok = &vocabs[(data[0] & 0x7f) % N_VOCABS].tokenizer;
    const uint8_t *text = data + 1;
    size_t len = size - 1;
    if ((data[0] & 0x80) == 0) {
        uint32_t *ids = NULL;
        size_t cap = 0;
        const char *err;
        long n = tokenizer_encode(tok, text, len, ENCODE_BOS, &ids, &cap, &err);
        int keeps_text = !(tok->flags & (TOK_SENTENCEPIECE | TOK_NFC));
        for (long i = 0; i < n; i++)
            if (ids[i] >= tok->n_tokens) abort();
        if (n >= 0 && keeps_text) {
            size_t at = 0;
            for (long i = 0; i < n; i++) {
                size_t tok_len;
                const uint8_t *bytes = tokenizer_token(tok, ids[i], &tok_len);
                if (!bytes || at + tok_len > len || memcmp(bytes, text + at, tok_len) != 0) abort();
                at += tok_len;
            }
            if (at != len) abort();
        } else if (n < 0 && tok->pretokenizer != PRETOK_CHAR) {
            abort(); /* byte-level and byte-fallback vocabularies encode every byte string */
        }
        free(ids);
    } else {
        size_t total = 0;
        for (size_t i = 0; i + 4 <= len; i += 4) {
            uint32_t id;
            memcpy(&id, text + i, 4);
            size_t tok_len;
            const uint8_t *bytes = tokenizer_token(tok, id, &tok_len);
            if ((bytes != NULL) != (id < tok->n_tokens)) abort();
            if (bytes) total += tok_len;
        }
        (void)total;
    }
    return 0;
}
