/* util.h: errors, memory and the clock, for run.c and the files beside it (load.h, kv_cache.h,
 * cli.h).
 *
 * Errors: below the command line, a function that can fail returns 0 (or NULL) and leaves one
 * line in an Error naming the problem (fail()); the caller passes it up or handles it, and has
 * given back what it built. Only the command line's edge prints it, "error: <what>", and exits
 * with status 1 (die()). */
#ifndef UTIL_H
#define UTIL_H

#define _POSIX_C_SOURCE 200809L
#ifndef _DEFAULT_SOURCE /* MADV_HUGEPAGE */
#define _DEFAULT_SOURCE
#endif
#include <errno.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>

__attribute__((noreturn, format(printf, 1, 2)))
static void die(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fflush(stdout);
    fputs("error: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    exit(1);
}

/* The first problem of a call, as one line. */
typedef struct {
    char message[512];
} Error;

/* Records the problem in *e and returns 0: a failing check reads `return fail(e, "...")`. */
__attribute__((format(printf, 2, 3)))
static inline int fail(Error *e, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->message, sizeof e->message, fmt, ap);
    va_end(ap);
    return 0;
}

/* A call that can fail, inside a function that fails with it (its Error already says why). */
#define TRY(call) do { if (!(call)) return 0; } while (0)

/* Memory whose pages are mapped now, so that the first forward pass does not stop at a page
 * fault for every 4 KB of the key/value cache and buffers it writes. Large buffers ask for 2 MB
 * pages (Linux transparent huge pages), which also spares the TLB. zeroed = 0 leaves the
 * contents undefined: the caller writes every byte. Small buffers come from calloc, each page
 * touched by a volatile write (a memset of calloc'd memory is dropped by the compiler). */
#define HUGE_PAGE ((size_t)2 << 20)
static void *alloc_pages(size_t n, const char *what, int zeroed, Error *e) {
    void *p = NULL;
#ifdef MADV_HUGEPAGE
    if (n >= 2 * HUGE_PAGE && posix_memalign(&p, HUGE_PAGE, n) == 0) {
        madvise(p, n, MADV_HUGEPAGE); /* advice only: 4 KB pages if refused */
        if (zeroed) memset(p, 0, n); /* else the caller's writes touch every page */
        return p;
    }
#endif
    p = calloc(1, n ? n : 1);
    if (!p) {
        fail(e, "out of memory allocating %zu bytes for %s", n, what);
        return NULL;
    }
    for (size_t i = 0; i < n; i += 4096) ((volatile char *)p)[i] = 0;
    return p;
}

/* n zeroed bytes for `what`, or NULL with the error naming it. */
static inline void *alloc_zeroed(size_t n, const char *what, Error *e) { return alloc_pages(n, what, 1, e); }

/* n bytes whose contents the caller writes in full before reading them, or NULL. */
static inline void *alloc_uninit(size_t n, const char *what, Error *e) { return alloc_pages(n, what, 0, e); }

/* The command line's: n zeroed bytes, or the error and exit. */
static inline void *calloc_or_die(size_t n, const char *what) {
    Error e;
    void *p = alloc_zeroed(n, what, &e);
    if (!p) die("%s", e.message);
    return p;
}

/* n bytes whose contents the caller writes in full before reading them, or the error and exit. */
static inline void *malloc_or_die(size_t n, const char *what) {
    Error e;
    void *p = alloc_uninit(n, what, &e);
    if (!p) die("%s", e.message);
    return p;
}

/* Grows *p (an array of *cap items of `size` bytes) to hold at least `need`, doubling; 0 with
 * the error when memory runs out (*p is then as it was). */
static inline int grow(void **p, size_t *cap, size_t need, size_t size, const char *what, Error *e) {
    if (need <= *cap) return 1;
    size_t more = *cap * 2 > need ? *cap * 2 : need + 8;
    void *bigger = realloc(*p, more * size);
    if (!bigger) return fail(e, "out of memory for %s", what);
    *p = bigger;
    *cap = more;
    return 1;
}

/* The pages wholly inside [at, at + n) of a read-only file mapping given back (their bytes are
 * read from the file again should anything touch them). */
static void release_mapped(const void *at, size_t n) {
    size_t page = 4096, first = ((size_t)at + page - 1) & ~(page - 1), end = ((size_t)at + n) & ~(page - 1);
    if (end > first) madvise((void *)first, end - first, MADV_DONTNEED);
}

/* The whole of a file, or of stdin for "-" (its length in *len); NULL with the error. */
static inline uint8_t *read_file(const char *path, size_t *len, Error *e) {
    int is_stdin = strcmp(path, "-") == 0;
    const char *name = is_stdin ? "standard input" : path;
    FILE *f = is_stdin ? stdin : fopen(path, "rb");
    if (!f) {
        fail(e, "cannot open file '%s': %s", path, strerror(errno));
        return NULL;
    }
    struct stat st;
    size_t cap = 4096, n = 0;
    uint8_t *buf = NULL;
    if (fstat(fileno(f), &st) == 0 && S_ISDIR(st.st_mode)) {
        fail(e, "'%s' is a directory, not a file", name);
    } else if ((buf = alloc_zeroed(cap, "a file's bytes", e))) {
        for (;;) {
            n += fread(buf + n, 1, cap - n, f);
            if (ferror(f)) {
                fail(e, "cannot read '%s': %s", name, strerror(errno));
                break;
            }
            if (n < cap) {
                if (!is_stdin) fclose(f);
                *len = n;
                return buf;
            }
            uint8_t *bigger = realloc(buf, cap *= 2);
            if (!bigger) {
                fail(e, "out of memory reading '%s'", name);
                break;
            }
            buf = bigger;
        }
    }
    free(buf);
    if (!is_stdin) fclose(f);
    return NULL;
}

/* The command line's: the whole of a file, or the error and exit. */
static inline uint8_t *read_file_or_die(const char *path, size_t *len) {
    Error e;
    uint8_t *bytes = read_file(path, len, &e);
    if (!bytes) die("%s", e.message);
    return bytes;
}

static double now_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

#endif
