/* Read bandwidth of this machine: OpenMP threads each sum their share of a 1 GiB buffer,
 * streaming through it several times; prints the best GB/s over the repetitions.
 * usage: bandwidth THREADS */
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#if defined(__AVX512F__)
#include <immintrin.h>
#endif

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

int main(int argc, char **argv) {
    int threads = argc > 1 ? atoi(argv[1]) : 1;
    size_t n = (size_t)1 << 28; /* floats: 1 GiB */
    float *buf = aligned_alloc(64, n * sizeof(float));
    if (!buf || threads < 1) return 1;
    omp_set_num_threads(threads);
    long i;
#pragma omp parallel for schedule(static)
    for (i = 0; i < (long)n; i++) buf[i] = (float)(i & 1023); /* touch every page first */
    double best = 0, sink = 0;
    for (int rep = 0; rep < 6; rep++) {
        double t0 = now(), total = 0;
#pragma omp parallel for schedule(static) reduction(+ : total)
        for (i = 0; i < (long)(n / 64); i++) {
            const float *p = buf + (size_t)i * 64;
#if defined(__AVX512F__)
            __m512 s = _mm512_add_ps(_mm512_add_ps(_mm512_load_ps(p), _mm512_load_ps(p + 16)),
                                     _mm512_add_ps(_mm512_load_ps(p + 32), _mm512_load_ps(p + 48)));
            total += _mm512_reduce_add_ps(s);
#else
            float s = 0;
            for (int k = 0; k < 64; k++) s += p[k];
            total += s;
#endif
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
