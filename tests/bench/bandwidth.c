/* Read bandwidth of this machine: OpenMP threads each sum their share of a buffer of BYTES
 * (default 1 GiB), streaming through it several times; prints the best GB/s over the
 * repetitions. Given a model's bytes read per token, this is the ceiling of its decode: a
 * buffer of the same size sits in the last-level cache exactly when the model would.
 * usage: bandwidth THREADS [BYTES]
 * The sum keeps eight independent 32-byte vectors of partial sums (GCC's vector extension,
 * which the compiler maps onto AVX-512, AVX2 or NEON registers), so that memory and not a
 * chain of dependent additions sets the pace. */
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

#define CHUNK 64 /* floats per step: 256 bytes, four cache lines */
typedef float v8 __attribute__((vector_size(32)));

int main(int argc, char **argv) {
    int threads = argc > 1 ? atoi(argv[1]) : 1;
    double bytes = argc > 2 ? atof(argv[2]) : (double)(1 << 30);
    size_t n = (size_t)(bytes / sizeof(float)) / CHUNK * CHUNK;
    if (threads < 1 || n == 0) {
        fprintf(stderr, "usage: bandwidth THREADS [BYTES]\n");
        return 1;
    }
    float *buf = aligned_alloc(64, n * sizeof(float));
    if (!buf) return 1;
    omp_set_num_threads(threads);
    long i;
#pragma omp parallel for schedule(static)
    for (i = 0; i < (long)n; i++) buf[i] = (float)(i & 1023); /* touch every page first */
    /* at least 4 GB read in all, and 6 passes, so that small buffers are timed long enough */
    int reps = (int)(4e9 / (n * sizeof(float))) + 1;
    if (reps < 6) reps = 6;
    double best = 0, sink = 0;
    for (int rep = 0; rep < reps; rep++) {
        double t0 = now(), total = 0;
#pragma omp parallel reduction(+ : total)
        {
            v8 acc[8] = {{0}};
#pragma omp for schedule(static)
            for (i = 0; i < (long)(n / CHUNK); i++) {
                const v8 *p = (const v8 *)(buf + (size_t)i * CHUNK); /* 64-byte aligned */
                for (int k = 0; k < 8; k++) acc[k] += p[k];
            }
            for (int k = 0; k < 8; k++)
                for (int lane = 0; lane < 8; lane++) total += acc[k][lane];
        }
        double gbs = n * sizeof(float) / (now() - t0) / 1e9;
        if (gbs > best) best = gbs;
        sink += total;
    }
    printf("%.2f\n", best);
    fprintf(stderr, "(checksum %g)\n", sink);
    free(buf);
    return 0;
}
