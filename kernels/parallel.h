/* kernels/parallel.h: loops split between OpenMP's threads, and the team that runs a whole
 * forward pass.
 *
 *   SPLIT_FOR(worth, clauses, (header), body)
 *       `for header body`, its iterations shared between threads when the loop is worth
 *       splitting (worth: e.g. more than one token) and there is more than one thread:
 *       - inside a team (IN_TEAM below): `#pragma omp for clauses nowait`, then the team's
 *         barrier; a loop not worth splitting runs on the team's first thread, then the
 *         barrier. Either way every thread leaves with the loop's results in place.
 *       - outside one: `#pragma omp parallel for clauses` (a team for this loop alone), or a
 *         plain loop on this thread, no team.
 *   ONE_THREAD(body)
 *       body once: inside a team on its first thread, then the barrier; outside, here.
 *   IN_TEAM(call)
 *       call on every thread of one team of omp_get_max_threads() threads (or plainly, with
 *       one): forward() runs so, each thread through the same steps, the splits sharing the
 *       work and every other write to memory inside ONE_THREAD.
 *   TEAM_REGION(body)
 *       body on every thread: the threads already there inside a team, else a new team
 *       (`#pragma omp parallel`); for kernels with per-thread set-up (AMX's tiles) around an
 *       `omp for` of their own.
 *
 * Why a team per forward pass: a `#pragma omp parallel` region starts and ends a team (libgomp
 * wakes it and ends it with a futex system call whether or not a thread waits), and a decode
 * step of a small model has five or six such loops a layer. Inside one team a split loop ends
 * at a barrier of two C11 atomics instead, several times cheaper (docs/speed.md).
 *
 * Why not `#pragma omp parallel for if (split)` outside a team: with split false that still
 * starts and ends a team of one thread, with the same futex call (and on a guest with
 * page-table isolation and no PCID every system call also empties the TLB). */
#ifndef KERNELS_PARALLEL_H
#define KERNELS_PARALLEL_H

#include <sched.h>
#include <stdatomic.h>

#ifdef _OPENMP
#include <omp.h>
static inline int threads_to_split(void) { return omp_get_max_threads() > 1; }
static inline int team_thread(void) { return omp_get_thread_num(); }
static inline int team_threads(void) { return omp_get_num_threads(); }
#else
static inline int threads_to_split(void) { return 0; }
static inline int team_thread(void) { return 0; }
static inline int team_threads(void) { return 1; }
#endif

/* The team running now, if any: set by IN_TEAM before its threads start, cleared after they
 * end (a team runs one forward pass at a time). */
static struct {
    int active;              /* inside IN_TEAM */
    atomic_uint arrived;     /* threads at the barrier */
    atomic_uint phase;       /* barriers passed */
} team;

static inline void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}

/* Every thread of the team waits here until all have arrived. The phase is read before
 * arriving, so it cannot move on before this thread has; the last to arrive resets the count
 * and moves the phase on, releasing the others (acquire/release: each thread then sees every
 * write made before the barrier). A wait longer than BARRIER_SPINS pauses (tens of
 * microseconds: longer than a decode step's serial parts) gives the CPU away at every look,
 * so that a team larger than the free CPUs still moves at the pace of the scheduler. */
#define BARRIER_SPINS 2000
static inline void team_barrier(void) {
    unsigned phase = atomic_load_explicit(&team.phase, memory_order_acquire);
    if (atomic_fetch_add_explicit(&team.arrived, 1, memory_order_acq_rel) == (unsigned)team_threads() - 1) {
        atomic_store_explicit(&team.arrived, 0, memory_order_relaxed);
        atomic_store_explicit(&team.phase, phase + 1, memory_order_release);
        return;
    }
    for (long spins = 0; atomic_load_explicit(&team.phase, memory_order_acquire) == phase; spins++)
        if (spins < BARRIER_SPINS) cpu_relax();
        else sched_yield();
}

#define OMP_PRAGMA_(text) _Pragma(#text)
#define SPLIT_FOR(worth, clauses, header, ...)                                  \
    do {                                                                        \
        if (team.active) {                                                      \
            if (worth) {                                                        \
                OMP_PRAGMA_(omp for clauses nowait)                             \
                for header __VA_ARGS__                                          \
            } else if (team_thread() == 0) {                                    \
                for header __VA_ARGS__                                          \
            }                                                                   \
            team_barrier();                                                     \
        } else if ((worth) && threads_to_split()) {                             \
            OMP_PRAGMA_(omp parallel for clauses)                               \
            for header __VA_ARGS__                                              \
        } else {                                                                \
            for header __VA_ARGS__                                              \
        }                                                                       \
    } while (0)

#define ONE_THREAD(...)                                                         \
    do {                                                                        \
        if (!team.active || team_thread() == 0) { __VA_ARGS__; }                \
        if (team.active) team_barrier();                                        \
    } while (0)

#define IN_TEAM(...)                                                            \
    do {                                                                        \
        if (threads_to_split() && !team.active) {                               \
            team.active = 1;                                                    \
            OMP_PRAGMA_(omp parallel)                                           \
            { __VA_ARGS__; }                                                    \
            team.active = 0;                                                    \
        } else {                                                                \
            __VA_ARGS__;                                                        \
        }                                                                       \
    } while (0)

#define TEAM_REGION(...)                                                        \
    do {                                                                        \
        if (team.active) {                                                      \
            __VA_ARGS__                                                         \
        } else {                                                                \
            OMP_PRAGMA_(omp parallel)                                           \
            { __VA_ARGS__ }                                                     \
        }                                                                       \
    } while (0)

#endif
