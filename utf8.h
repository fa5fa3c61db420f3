/* UTF-8, one definition for the tokenizer, the output stream, the JSON reader and chat: a
 * character's length from its lead byte, decoding with validation, and encoding. */
#ifndef UTF8_H
#define UTF8_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* Length a UTF-8 sequence starting with lead byte b should have (1 for anything invalid). */
static inline size_t utf8_length(uint8_t b) {
    if (b >= 0xC2 && b <= 0xDF) return 2;
    if (b >= 0xE0 && b <= 0xEF) return 3;
    if (b >= 0xF0 && b <= 0xF4) return 4;
    return 1;
}

/* Decode one UTF-8 character at s[0..n). Returns its length; *cp is the code point, or -1 for
 * a byte that does not start a valid sequence (it then stands alone, length 1). Overlong forms,
 * surrogates and code points past U+10FFFF are invalid. */
static inline size_t utf8_decode(const uint8_t *s, size_t n, long *cp) {
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

/* Length of the valid UTF-8 character at s[0..n), or 0. */
static inline size_t utf8_valid(const uint8_t *s, size_t n) {
    long cp;
    size_t len = utf8_decode(s, n, &cp);
    return cp < 0 ? 0 : len;
}

/* A stream of bytes passed on in whole characters: an incomplete UTF-8 sequence at the end of
 * what came so far waits for its continuation bytes (a character split across tokens is passed
 * on whole); a sequence broken by a byte that cannot continue it is passed on as it is. */
typedef struct {
    uint8_t pending[4]; /* at most 3 bytes of an incomplete character are ever held */
    size_t n;
} Utf8Hold;

/* in[0..n) after what h holds: the bytes to pass on now into out (room for n + 3), their count
 * returned; an incomplete tail stays in h. */
static inline size_t utf8_whole(Utf8Hold *h, const uint8_t *in, size_t n, uint8_t *out) {
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        uint8_t b = in[i];
        if (h->n > 0 && (b & 0xC0) != 0x80) { /* sequence broken: passed on as it is */
            memcpy(out + k, h->pending, h->n);
            k += h->n;
            h->n = 0;
        }
        if (h->n == 0 && utf8_length(b) == 1) { out[k++] = b; continue; }
        h->pending[h->n++] = b;
        if (h->n == utf8_length(h->pending[0])) {
            memcpy(out + k, h->pending, h->n);
            k += h->n;
            h->n = 0;
        }
    }
    return k;
}

/* At the end of the stream: what h still holds into out (room for 3), as it is. */
static inline size_t utf8_rest(Utf8Hold *h, uint8_t *out) {
    size_t k = h->n;
    memcpy(out, h->pending, k);
    h->n = 0;
    return k;
}

/* Writes code point cp (at most U+10FFFF) as UTF-8 to out, which has room for 4 bytes; returns
 * the bytes written. */
static inline size_t utf8_put(uint8_t *out, uint32_t cp) {
    if (cp < 0x80) { out[0] = (uint8_t)cp; return 1; }
    if (cp < 0x800) { out[0] = (uint8_t)(0xC0 | cp >> 6); out[1] = (uint8_t)(0x80 | (cp & 0x3F)); return 2; }
    if (cp < 0x10000) {
        out[0] = (uint8_t)(0xE0 | cp >> 12); out[1] = (uint8_t)(0x80 | (cp >> 6 & 0x3F)); out[2] = (uint8_t)(0x80 | (cp & 0x3F));
        return 3;
    }
    out[0] = (uint8_t)(0xF0 | cp >> 18); out[1] = (uint8_t)(0x80 | (cp >> 12 & 0x3F));
    out[2] = (uint8_t)(0x80 | (cp >> 6 & 0x3F)); out[3] = (uint8_t)(0x80 | (cp & 0x3F));
    return 4;
}

#endif
