/* kernels/parallel.h: loops split between OpenMP's threads only when splitting pays.
 *
 *   SPLIT_FOR(worth, clauses, (header), body)
 *       `for header body` as `#pragma omp parallel for clauses` when the loop is worth
 *       splitting (worth: e.g. more than one token) and there is more than one thread to
 *       split it between (threads_to_split()); else a plain loop on this thread, no team
 *
 * Why not `#pragma omp parallel for if (split)`: with split false that still starts and ends
 * a team, of one thread, and libgomp ends every team with a futex system call that wakes any
 * waiting threads whether or not one waits. A system call is cheap on most machines, but on the
 * KVM guests this project is developed on (page-table isolation on and no PCID, so every system
 * call switches page tables and empties the TLB) it is not: a decode step of GPT-2 124M made 15
 * such calls a layer at one thread (`strace -f -c -e trace=futex ./run MODEL -i Hello -n 64 -t 0
 * --threads 1`: 184 a token), 10 of them for loops that ran on one thread anyway. */
#ifndef KERNELS_PARALLEL_H
#define KERNELS_PARALLEL_H

#ifdef _OPENMP
#include <omp.h>
static inline int threads_to_split(void) { return omp_get_max_threads() > 1; }
#else
static inline int threads_to_split(void) { return 0; }
#endif

#define OMP_PRAGMA_(text) _Pragma(#text)
#define SPLIT_FOR(worth, clauses, header, ...)                  \
    do {                                                        \
        if ((worth) && threads_to_split()) {                    \
            OMP_PRAGMA_(omp parallel for clauses)               \
            for header __VA_ARGS__                              \
        } else {                                                \
            for header __VA_ARGS__                              \
        }                                                       \
    } while (0)

#endif
