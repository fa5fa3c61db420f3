/* sink.h: where generation's text and events go. Generation and chat write through a Sink; the
 * command line points one at stdout (output.h), a test at a buffer, a server at a connection.
 * Text arrives in whole UTF-8 characters (sequence.h holds back a character split across
 * tokens), each sequence's apart. */
#ifndef SINK_H
#define SINK_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* Why a sequence stopped. */
typedef enum {
    FINISH_STOP,     /* a stop token, or a stop string completed (printed with its token) */
    FINISH_LENGTH,   /* the tokens asked for (-n, max_tokens) */
    FINISH_CONTEXT,  /* no position left in the context, and the window does not move */
    FINISH_STOPPED,  /* stopped from outside (Ctrl-C, a reader gone) */
} Finish;

typedef struct Sink {
    /* sequence seq's next text: 0 when the reader will take no more (that sequence then stops) */
    int (*text)(struct Sink *sink, int seq, const uint8_t *bytes, size_t n);
    /* sequence seq ended, for that reason (after its last text) */
    void (*finish)(struct Sink *sink, int seq, Finish why);
    /* something the person running it may want to know ("the prompt's first 12 tokens were
     * dropped"), one line; NULL: not told */
    void (*note)(struct Sink *sink, const char *message);
    void *context;
} Sink;

/* A note to the sink's reader, formatted, when it takes notes. */
__attribute__((format(printf, 2, 3), unused))
static void sink_note(Sink *sink, const char *fmt, ...) {
    if (!sink->note) return;
    char message[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(message, sizeof message, fmt, ap);
    va_end(ap);
    sink->note(sink, message);
}

#endif
