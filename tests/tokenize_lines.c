/* Many texts through tokenizer.c in one process, for the exactness tests against the reference
 * tokenizers (tests/test_tokenizer_kinds.py), which compare thousands of texts per vocabulary.
 * The engine (engine.h) and generation (generate.h) are included whole.
 *
 * usage: tokenize_lines MODEL.bin [--special] [--decode] < RECORDS
 *   RECORDS: texts, each as a little-endian uint32 byte count then the bytes (any bytes).
 *   stdout: one line per text, its token ids separated by spaces, or "error: WHY" when the
 *   tokenizer refuses the text. With --decode, then a tab and the bytes run prints for those
 *   ids when it generates them with no prompt (generate.h's take_token), in hexadecimal. */
#include "../engine.h"

int main(int argc, char **argv) {
    int special = 0, decode = 0;
    for (int i = 2; i < argc; i++) {
        if (strcmp(argv[i], "--special") == 0) special = 1;
        else if (strcmp(argv[i], "--decode") == 0) decode = 1;
        else die("usage: tokenize_lines MODEL.bin [--special] [--decode] < RECORDS");
    }
    if (argc < 2) die("usage: tokenize_lines MODEL.bin [--special] [--decode] < RECORDS");
    Transformer t;
    Error e;
    if (!build_transformer(&t, argv[1], 1, 0, CACHE_F16, &e)) die("%s", e.message);
    unsigned how = ENCODE_BOS | (special ? ENCODE_SPECIAL : 0);
    uint8_t *text = NULL;
    uint32_t *ids = NULL;
    size_t cap = 0;
    uint8_t head[4];
    while (fread(head, 1, 4, stdin) == 4) {
        uint32_t len = (uint32_t)head[0] | (uint32_t)head[1] << 8 | (uint32_t)head[2] << 16 | (uint32_t)head[3] << 24;
        text = realloc(text, len + 1);
        if (!text || fread(text, 1, len, stdin) != len) die("a record is cut short");
        const char *err;
        long n = tokenizer_encode(&t.tokenizer, text, len, how, &ids, &cap, &err);
        if (n < 0) printf("error: %s\n", err);
        for (long i = 0; i < n; i++) printf(i ? " %u" : "%u", ids[i]);
        if (decode && n >= 0) {
            putchar('\t');
            TokenDecoder decoder = tokenizer_decoder(&t.tokenizer, 0); /* as a generation with no prompt */
            for (long i = 0; i < n; i++) {
                size_t out_len;
                const uint8_t *bytes = tokenizer_decode(&t.tokenizer, &decoder, ids[i], &out_len);
                for (size_t j = 0; j < out_len; j++) printf("%02x", bytes[j]);
            }
        }
        if (n >= 0) putchar('\n');
    }
    free(text);
    free(ids);
    free_transformer(&t);
    return 0;
}
