/* util.h: errors, memory and the clock, for run.c and the files beside it (load.h, kv_cache.h,
 * cli.h).
 *
 * Errors: one line on stderr, "error: <what>", exit status 1. Fuzz builds (tests/fuzz/) unwind
 * to the harness instead of exiting, since libFuzzer counts an exit as a failure. */
#ifndef UTIL_H
#define UTIL_H

#define _POSIX_C_SOURCE 200809L
#ifndef _DEFAULT_SOURCE /* MADV_HUGEPAGE */
#define _DEFAULT_SOURCE
#endif
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#ifdef FUZZING
#include <setjmp.h>
static jmp_buf fuzz_escape;
#endif

__attribute__((noreturn, format(printf, 1, 2)))
static void die(const char *fmt, ...) {
#ifdef FUZZING
    (void)fmt;
    longjmp(fuzz_escape, 1);
#else
    va_list ap;
    va_start(ap, fmt);
    fflush(stdout);
    fputs("error: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    exit(1);
#endif
}

/* Memory whose pages are mapped now, so that the first forward pass does not stop at a page
 * fault for every 4 KB of the key/value cache and buffers it writes. Large buffers ask for 2 MB
 * pages (Linux transparent huge pages), which also spares the TLB. zeroed = 0 leaves the
 * contents undefined: the caller writes every byte. Small buffers come from calloc, each page
 * touched by a volatile write (a memset of calloc'd memory is dropped by the compiler). */
#define HUGE_PAGE ((size_t)2 << 20)
static void *alloc_pages(size_t n, const char *what, int zeroed) {
    void *p = NULL;
#ifdef MADV_HUGEPAGE
    if (n >= 2 * HUGE_PAGE && posix_memalign(&p, HUGE_PAGE, n) == 0) {
        madvise(p, n, MADV_HUGEPAGE); /* advice only: 4 KB pages if refused */
        if (zeroed) memset(p, 0, n); /* else the caller's writes touch every page */
        return p;
    }
#endif
    p = calloc(1, n ? n : 1);
    if (!p) die("out of memory allocating %zu bytes for %s", n, what);
    for (size_t i = 0; i < n; i += 4096) ((volatile char *)p)[i] = 0;
    return p;
}

/* n zeroed bytes for `what` (named in the error when memory runs out). */
static void *calloc_or_die(size_t n, const char *what) { return alloc_pages(n, what, 1); }

/* n bytes whose contents the caller writes in full before reading them. */
static void *malloc_or_die(size_t n, const char *what) { return alloc_pages(n, what, 0); }

/* The pages wholly inside [at, at + n) of a read-only file mapping given back (their bytes are
 * read from the file again should anything touch them). */
static void release_mapped(const void *at, size_t n) {
    size_t page = 4096, first = ((size_t)at + page - 1) & ~(page - 1), end = ((size_t)at + n) & ~(page - 1);
    if (end > first) madvise((void *)first, end - first, MADV_DONTNEED);
}

static double now_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

#endif
