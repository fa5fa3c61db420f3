/* libFuzzer target for the server's readers (api.h): any bytes are an HTTP request, and a body
 * that arrives whole is read as a chat completion request and as a completion request. A
 * refusal must carry an HTTP error status and one line; a request read must hold what the
 * server relies on (known roles, UTF-8, stop strings of 1 to 256 bytes, values in range); and
 * every text written back as JSON must be valid UTF-8 without a raw control byte. A broken
 * invariant aborts, which libFuzzer reports with the input. */
#include "../../api.h"

static void check_error(const ApiError *e) {
    if (e->status < 400 || e->status > 599 || !e->message[0] || strchr(e->message, '\n')) abort();
}

static void check_json_text(const uint8_t *s, size_t n) {
    Buffer b = {0};
    buffer_json_string(&b, s, n);
    if (b.failed) abort();
    for (size_t i = 0; i < b.n;) {
        size_t len = utf8_valid(b.s + i, b.n - i);
        if (len == 0 || b.s[i] < 0x20) abort();
        i += len;
    }
    free(b.s);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    HttpRequest h;
    ApiError e = {0};
    int whole = http_request(data, size, 1 << 20, &h, &e);
    if (whole < 0) {
        check_error(&e);
        return 0;
    }
    const uint8_t *body = whole == HTTP_WHOLE ? data + h.head_len : data; /* else the bytes as a body */
    size_t len = whole == HTTP_WHOLE ? h.body_len : size;
    for (int chat = 0; chat < 2; chat++) {
        ApiRequest q;
        if (!api_read_request(body, len, chat, &q, &e)) {
            check_error(&e);
            continue;
        }
        if (q.n < 1 || q.n > 64 || !(q.temperature >= 0 && q.temperature <= 2) || !(q.top_p >= 0 && q.top_p <= 1) ||
            q.n_stop > API_STOPS || q.n_options > API_OPTIONS || (chat && q.prompt) || (!chat && q.m))
            abort();
        for (size_t i = 0; i < q.n_messages; i++) {
            if (q.m[i].role < 0 || q.m[i].role >= ROLES) abort();
            check_json_text(q.m[i].content, q.m[i].len);
        }
        for (int i = 0; i < q.n_stop; i++)
            if (q.stop_len[i] < 1 || q.stop_len[i] > API_STOP_BYTES) abort();
        if (q.prompt) check_json_text(q.prompt, q.prompt_len);
        api_request_free(&q);
    }
    check_json_text(data, size); /* any bytes, written as JSON text */
    return 0;
}
