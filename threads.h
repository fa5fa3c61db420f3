/* threads.h: how many threads run a forward pass. Besides the count OpenMP reports and the
 * count --threads sets, generation on a shared machine chooses its team size as it goes.
 *
 * Threads on a shared machine. A decode step is about 50 short matrix products, and each
 * ends when its slowest thread does: when another program keeps a core busy, the thread that
 * shares that core is now and then descheduled for a whole time slice and the team waits (on
 * 2 cores with one busy program, 2 threads decode at half the speed of 1). So decode, unless
 * --threads was given, measures itself as it goes. It keeps a smoothed time per token for the
 * team size in use (the mean of about the last 16 tokens, so that the rare long waits count)
 * and now and then tries another size for TRIAL_TOKENS tokens: the first, which warms up after
 * the change, is not counted, and a trial that is clearly slower ends early. A smaller team
 * that was faster takes over; a larger one only when it was 10% faster (a margin against a
 * lucky trial: fewer threads leave more of the machine to the others). The first trial comes
 * at the 4th token, the next 16 tokens later, then 4 times further apart each time the choice
 * holds (at most 256), and 16 apart again after a change. Team sizes are all threads, half, a
 * quarter ... one. Only the speed depends on the team size, never the numbers (kernels/simd.h). */
#ifndef THREADS_H
#define THREADS_H

#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#define TEAM_SIZES 8
#define TRIAL_TOKENS 3
#define FIRST_TRIAL 4
#define FIRST_INTERVAL 16
#define LAST_INTERVAL 256
typedef struct {
    int size[TEAM_SIZES], n_sizes; /* candidate team sizes, largest first */
    int current;                   /* index of the size in use */
    double seconds;                /* its smoothed seconds per token; 0 = not measured yet */
    int trying;                    /* index of the size on trial, or -1 */
    double trial_seconds;          /* the trial's tokens so far: their seconds, their count */
    int trial_tokens;
    int next_try;                  /* the trials go round the other sizes */
    int interval, countdown;       /* tokens between trials, and until the next one */
} ThreadChoice;

static void thread_choice_init(ThreadChoice *tc, int threads) {
    memset(tc, 0, sizeof *tc);
    for (int n = threads; n >= 1 && tc->n_sizes < TEAM_SIZES; n /= 2) tc->size[tc->n_sizes++] = n;
    tc->size[tc->n_sizes - 1] = 1;
    tc->trying = -1;
    tc->interval = FIRST_INTERVAL;
    tc->countdown = FIRST_TRIAL;
}

/* The team size for the next token. */
static int thread_choice_next(ThreadChoice *tc) {
    if (tc->trying < 0 && tc->n_sizes > 1 && --tc->countdown <= 0) {
        tc->next_try = (tc->next_try + 1) % tc->n_sizes;
        if (tc->next_try == tc->current) tc->next_try = (tc->next_try + 1) % tc->n_sizes;
        tc->trying = tc->next_try;
        tc->trial_seconds = 0;
        tc->trial_tokens = 0;
    }
    return tc->size[tc->trying >= 0 ? tc->trying : tc->current];
}

/* How long that token took. */
static void thread_choice_record(ThreadChoice *tc, double seconds) {
    if (tc->trying < 0) {
        tc->seconds = tc->seconds > 0 ? (15 * tc->seconds + seconds) / 16 : seconds;
        return;
    }
    if (++tc->trial_tokens == 1) return; /* the first token after a change warms up: not counted */
    tc->trial_seconds += seconds;
    double trial = tc->trial_seconds / (tc->trial_tokens - 1);
    int clearly_slower = trial > 1.25 * tc->seconds; /* no need to go on */
    if (tc->trial_tokens < TRIAL_TOKENS && !clearly_slower) return;
    int smaller = tc->size[tc->trying] < tc->size[tc->current];
    if (trial < (smaller ? 1.0 : 0.9) * tc->seconds) {
        tc->current = tc->trying;
        tc->seconds = trial;
        tc->interval = FIRST_INTERVAL;
    } else if (tc->interval < LAST_INTERVAL) {
        tc->interval *= 4;
    }
    tc->trying = -1;
    tc->countdown = tc->interval;
}

static int thread_count(void) {
#ifdef _OPENMP
    return omp_get_max_threads();
#else
    return 1;
#endif
}

static void set_team_size(int n) {
#ifdef _OPENMP
    omp_set_num_threads(n);
#else
    (void)n;
#endif
}

#endif
