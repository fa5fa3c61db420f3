/* libFuzzer target for the messages reader (json.h): any bytes are read as a conversation.
 * A refusal must say what is wrong in one line; a conversation read must hold only known roles
 * and valid UTF-8 (content and reasoning), and written back as JSON (every byte escaped as \u00XX
 * or plain) it must read back the same. A broken invariant aborts, which libFuzzer reports with
 * the input. */
#include "../../json.h"

static size_t put_json_string(uint8_t *out, const uint8_t *s, size_t n) {
    size_t k = 0;
    out[k++] = '"';
    for (size_t i = 0; i < n; i++) {
        if (s[i] < 0x20 || s[i] == '"' || s[i] == '\\') k += (size_t)sprintf((char *)out + k, "\\u%04x", s[i]);
        else out[k++] = s[i];
    }
    out[k++] = '"';
    return k;
}

static void check_utf8(const uint8_t *s, size_t n) {
    for (size_t j = 0; j < n;) {
        size_t len = utf8_valid(s + j, n - j);
        if (len == 0) abort();
        j += len;
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    ChatMessage *m;
    size_t n;
    char err[400];
    if (json_messages(data, size, &m, &n, err, sizeof err)) {
        if (!err[0] || strchr(err, '\n')) abort();
        return 0;
    }
    size_t cap = 16;
    for (size_t i = 0; i < n; i++) cap += 6 * (m[i].len + m[i].reasoning_len) + 96;
    uint8_t *back = malloc(cap), *p = back;
    *p++ = '[';
    for (size_t i = 0; i < n; i++) {
        if (m[i].role < 0 || m[i].role >= ROLES) abort();
        check_utf8(m[i].content, m[i].len);
        if (m[i].reasoning) check_utf8(m[i].reasoning, m[i].reasoning_len);
        p += sprintf((char *)p, "%s{\"role\": \"%s\", \"content\": ", i ? ", " : "", role_names[m[i].role]);
        p += put_json_string(p, m[i].content, m[i].len);
        if (m[i].reasoning) {
            p += sprintf((char *)p, ", \"reasoning_content\": ");
            p += put_json_string(p, m[i].reasoning, m[i].reasoning_len);
        }
        *p++ = '}';
    }
    *p++ = ']';
    ChatMessage *again;
    size_t n_again;
    if (json_messages(back, (size_t)(p - back), &again, &n_again, err, sizeof err) || n_again != n) abort();
    for (size_t i = 0; i < n; i++)
        if (again[i].role != m[i].role || again[i].len != m[i].len || memcmp(again[i].content, m[i].content, m[i].len) ||
            !again[i].reasoning != !m[i].reasoning || again[i].reasoning_len != m[i].reasoning_len ||
            (m[i].reasoning && memcmp(again[i].reasoning, m[i].reasoning, m[i].reasoning_len)))
            abort();
    free_messages(again, n_again);
    free_messages(m, n);
    free(back);
    return 0;
}
