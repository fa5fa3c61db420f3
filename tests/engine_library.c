/* The engine held as a library, as a server would hold it: one process loads a model, keeps two
 * conversations side by side in caches of their own, and is fed what a stranger sends (a
 * truncated model file, hostile messages files, a turn that is not UTF-8, one too long for the
 * context). Every one of those is an error returned, with a message, and the engine goes on; a
 * build with AddressSanitizer and LeakSanitizer (tests/build/engine_library-asan) shows that
 * nothing leaks across ROUNDS of them. tests/test_engine.py drives it and checks the replies
 * against `run --chat --messages`.
 *
 * usage: engine_library CHAT_MODEL.bin TRUNCATED.bin ROUNDS
 *   stdout: one line per refusal kind ("refused KIND: MESSAGE", the first round's), then each
 *   reply of the two conversations, interleaved, as "REPLY CONVERSATION TURN HEX" (its bytes in
 *   hexadecimal), greedy, 12 tokens at most. */
#include "../chat.h"
#include "../engine.h"
#include "../generate.h"
#include "../json.h"

/* A sink that keeps the reply's bytes. */
typedef struct {
    uint8_t bytes[4096];
    size_t n;
} Kept;

static int keep_text(Sink *sink, int seq, const uint8_t *bytes, size_t n) {
    (void)seq;
    Kept *k = sink->context;
    if (k->n + n > sizeof k->bytes) return 0;
    memcpy(k->bytes + k->n, bytes, n);
    k->n += n;
    return 1;
}
static void keep_finish(Sink *sink, int seq, Finish why) { (void)sink, (void)seq, (void)why; }

static void refused(const char *kind, int ok, const Error *e, int round) {
    if (ok) {
        fprintf(stderr, "engine_library: %s was accepted\n", kind);
        exit(1);
    }
    if (!e->message[0]) {
        fprintf(stderr, "engine_library: %s failed without a message\n", kind);
        exit(1);
    }
    if (round == 0) printf("refused %s: %s\n", kind, e->message);
}

/* The turn's reply, printed and kept in the conversation. */
static void reply(Conversation *c, const char *name, int turn, const char *text) {
    Error e = {{0}};
    Kept kept = {.n = 0};
    Sink sink = {.text = keep_text, .finish = keep_finish, .context = &kept};
    if (!conversation_add(c, ROLE_USER, (const uint8_t *)text, strlen(text), &e) || !chat_reply(c, &sink, &e)) {
        fprintf(stderr, "engine_library: %s\n", e.message);
        exit(1);
    }
    printf("REPLY %s %d ", name, turn);
    for (size_t i = 0; i < kept.n; i++) printf("%02x", kept.bytes[i]);
    printf("\n");
}

int main(int argc, char **argv) {
    if (argc != 4) {
        fprintf(stderr, "usage: engine_library CHAT_MODEL.bin TRUNCATED.bin ROUNDS\n");
        return 2;
    }
    int rounds = atoi(argv[3]);
    Error e = {{0}};
    Transformer t;
    if (!build_transformer(&t, argv[1], 2, 0, CACHE_F16, &e)) {
        fprintf(stderr, "engine_library: %s\n", e.message);
        return 1;
    }
    Decoder d = decoder_of(&t);
    ChatTable table;
    if (!chat_table(&table, &t.file, &t.tokenizer, &e) || !table.present) {
        fprintf(stderr, "engine_library: no chat table: %s\n", e.message);
        return 1;
    }
    GenerateOptions g = {.max_new = 12, .samples = 1, .temperature = 0.0, .top_p = 1.0, .seed = 1, .keep = -1,
                         .repeat_penalty = 1.0, .repeat_last = 64};
    static const char *const hostile[] = {
        "[{\"role\": \"user\", \"content\": \"hi\"},]",          /* a trailing comma */
        "[{\"role\": \"tool\", \"content\": \"x\"}]",             /* a role run does not know */
        "{\"role\": \"user\"}",                                   /* not an array */
        "[{\"role\": \"user\", \"content\": \"\\ud800\"}]",       /* a lone surrogate */
        "[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[", /* nested, cut short */
    };
    char *long_turn = calloc_or_die(6000, "a long turn");
    memset(long_turn, 'a', 5999);
    for (int round = 0; round < rounds; round++) {
        Transformer broken;
        refused("truncated model", build_transformer(&broken, argv[2], 1, 0, CACHE_F16, &e), &e, round);
        for (size_t i = 0; i < sizeof hostile / sizeof *hostile; i++) {
            ChatMessage *m;
            size_t n;
            char err[400];
            const char *problem = json_messages((const uint8_t *)hostile[i], strlen(hostile[i]), &m, &n, err, sizeof err);
            if (problem) fail(&e, "%s", problem);
            refused("messages file", problem == NULL, &e, round);
            if (!problem) free_messages(m, n);
        }
        Conversation c;
        conversation_init(&c, &d, &g, &table, 0);
        refused("invalid UTF-8 turn", conversation_add(&c, ROLE_USER, (const uint8_t *)"\xff\xfe", 2, &e), &e, round);
        Kept kept = {.n = 0};
        Sink sink = {.text = keep_text, .finish = keep_finish, .context = &kept};
        int ok = conversation_add(&c, ROLE_USER, (const uint8_t *)long_turn, strlen(long_turn), &e);
        refused("turn longer than the context", ok && chat_reply(&c, &sink, &e), &e, round);
        refused("conversation of no messages", chat_check(&table, c.m, 0, &e), &e, round);
        conversation_free(&c);
    }
    free(long_turn);
    Conversation a, b;
    conversation_init(&a, &d, &g, &table, 0);
    conversation_init(&b, &d, &g, &table, 1);
    reply(&a, "A", 1, "Hello");
    reply(&b, "B", 1, "What is this?");
    reply(&a, "A", 2, "More, please");
    reply(&b, "B", 2, "Again");
    reply(&a, "A", 3, "And then?");
    conversation_free(&a);
    conversation_free(&b);
    free_chat_table(&table);
    free_transformer(&t);
    return 0;
}
