/* sampler.h: the next token from the logits, and the random generator behind it. Included by
 * run.c. export/model.py's sample() and generate() reproduce it exactly, so the same seed gives
 * the same tokens in C and in PyTorch:
 *
 *   random generator: xorshift64* (Vigna, "An experimental exploration of Marsaglia's
 *     xorshift generators", 2016): state ^= state >> 12; state ^= state << 25;
 *     state ^= state >> 27; output = state * 0x2545F4914F6CDD1D (mod 2^64).
 *     Seeding: state = seed + 0x9E3779B97F4A7C15 (mod 2^64), or 1 if that is 0.
 *     uniform() = (output >> 11) * 2^-53, in [0, 1).
 *   repetition penalty R (R = 1: off), as Hugging Face's RepetitionPenaltyLogitsProcessor
 *     defines it, before anything else: every distinct id among the last N tokens of the
 *     sequence (prompt and generated) gets its logit, in float32, divided by R when positive
 *     and multiplied by R otherwise (with R rounded to float32 first).
 *   temperature 0: the argmax (lowest id on ties); no random number is drawn.
 *   otherwise, in double precision:
 *     1. p_i = exp(z_i - max z) / sum_j exp(z_j - max z), z = logits / temperature, for the
 *        real vocabulary only, sums taken in id order;
 *     2. candidates ordered by p descending, ties by lower id;
 *     3. top-k (k > 0): keep the first k candidates;
 *     4. top-p (p < 1): keep the shortest prefix whose running sum reaches p * mass, where
 *        mass = 1 without top-k, else the sum of the k kept p (in order);
 *     5. the kept candidates are put back in id order; r = uniform() * (sum of their p, in id
 *        order); the chosen token is the first whose running sum exceeds r (the last one if
 *        rounding leaves none). Walking in id order, not probability order, keeps the choice
 *        stable when near-equal probabilities would sort differently after rounding noise.
 *   Exactly one uniform() is drawn per sampled token.
 */
#ifndef SAMPLER_H
#define SAMPLER_H

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* A token that may be sampled, with its probability. */
typedef struct {
    double p;
    int id;
} Candidate;

/* Each sampler owns all its state, so that samplers of several samples can run at once. */
typedef struct {
    uint64_t rng_state;
    double temperature;
    int top_k;
    double top_p;
    double *probs;   /* (vocab_size) */
    double *scratch; /* (vocab_size) the heap for finding the k-th largest probability (top_k) */
    Candidate *candidates; /* (vocab_size) sorted by probability, then by id */
    uint8_t *seen;   /* (vocab_size) ids the repetition penalty has already met, all 0 between calls */
} Sampler;

static uint64_t rng_next(uint64_t *state) {
    *state ^= *state >> 12;
    *state ^= *state << 25;
    *state ^= *state >> 27;
    return *state * 0x2545F4914F6CDD1Dull;
}

static double rng_uniform(uint64_t *state) {
    return (double)(rng_next(state) >> 11) * (1.0 / 9007199254740992.0);
}

/* Returns 0 when memory runs out. */
static int build_sampler(Sampler *s, int vocab_size, double temperature, int top_k, double top_p,
                         uint64_t seed) {
    s->rng_state = seed + 0x9E3779B97F4A7C15ull;
    if (s->rng_state == 0) s->rng_state = 1;
    s->temperature = temperature;
    s->top_k = top_k;
    s->top_p = top_p;
    s->probs = malloc((size_t)vocab_size * sizeof(double));
    s->scratch = malloc((size_t)vocab_size * sizeof(double));
    s->candidates = malloc((size_t)vocab_size * sizeof(Candidate));
    s->seen = calloc((size_t)vocab_size, 1);
    return s->probs && s->scratch && s->candidates && s->seen;
}

static void free_sampler(Sampler *s) {
    free(s->probs);
    free(s->scratch);
    free(s->candidates);
    free(s->seen);
}

/* The repetition penalty on logits (n = the real vocabulary) for the n_recent tokens before
 * the one being sampled; each distinct id once. */
static void repeat_penalty(Sampler *s, float *logits, int n, const uint32_t *recent, long n_recent,
                           double penalty) {
    float r = (float)penalty;
    for (long i = 0; i < n_recent; i++) {
        uint32_t id = recent[i];
        if (id >= (uint32_t)n || s->seen[id]) continue;
        s->seen[id] = 1;
        logits[id] = logits[id] > 0.0f ? logits[id] / r : logits[id] * r;
    }
    for (long i = 0; i < n_recent; i++) if (recent[i] < (uint32_t)n) s->seen[recent[i]] = 0;
}

static int argmax(const float *x, int n) {
    int best = 0;
    for (int i = 1; i < n; i++) if (x[i] > x[best]) best = i;
    return best;
}

/* The k-th largest of x[0..n) (1 <= k <= n), counting repeats: the smallest of the k largest
 * seen so far, kept in a min-heap of k doubles (heap). Most values need one comparison with
 * the heap's smallest. It replaced a quickselect over a copy of the probabilities, most of whose
 * time went to its branches: `perf record -e cpu-clock` of GPT-2 124M q8_0 with --samples 8,
 * -k 40, 2 threads, on AMD Zen 4 counted 2229 samples in the sampler's own code with it and
 * 1006 with the heap. */
static double kth_largest(const double *x, int n, int k, double *heap) {
    for (int i = 0; i < k; i++) { /* the first k, each sifted up to its place */
        int c = i;
        for (; c > 0 && heap[(c - 1) / 2] > x[i]; c = (c - 1) / 2) heap[c] = heap[(c - 1) / 2];
        heap[c] = x[i];
    }
    for (int i = k; i < n; i++) {
        if (!(x[i] > heap[0])) continue;
        int c = 0; /* x[i] replaces the smallest and sifts down */
        for (;;) {
            int smallest = c, left = 2 * c + 1, right = left + 1;
            double least = x[i]; /* the least of x[i] and c's children */
            if (left < k && heap[left] < least) smallest = left, least = heap[left];
            if (right < k && heap[right] < least) smallest = right;
            if (smallest == c) break;
            heap[c] = heap[smallest];
            c = smallest;
        }
        heap[c] = x[i];
    }
    return heap[0];
}

/* Probability descending, then id ascending: a total order, so the result never depends on
 * the sort algorithm. */
static int by_probability(const void *a, const void *b) {
    const Candidate *x = a, *y = b;
    if (x->p != y->p) return x->p > y->p ? -1 : 1;
    return (x->id > y->id) - (x->id < y->id);
}

static int by_id(const void *a, const void *b) {
    const Candidate *x = a, *y = b;
    return (x->id > y->id) - (x->id < y->id);
}

/* The next token from logits (n = the real vocabulary), by the procedure above. */
static int sample(Sampler *s, const float *logits, int n) {
    if (s->temperature == 0.0) return argmax(logits, n);
    double *p = s->probs, max = logits[argmax(logits, n)] / s->temperature, sum = 0.0;
    for (int i = 0; i < n; i++) { p[i] = exp(logits[i] / s->temperature - max); sum += p[i]; }
    for (int i = 0; i < n; i++) p[i] /= sum;

    /* Candidates that can survive truncation. Dropping them before the sort changes nothing:
     * with top-k only tokens at least as likely as the k-th can be kept; with top-p alone,
     * tokens below (1 - top_p) / (n - 1) together hold less than 1 - top_p, so the nucleus
     * never reaches them. */
    int n_cand = 0;
    double cutoff = 0.0;
    if (s->top_k > 0 && s->top_k < n) {
        cutoff = kth_largest(p, n, s->top_k, s->scratch);
    } else if (s->top_p < 1.0 && n > 1) {
        cutoff = (1.0 - s->top_p) / (n - 1);
    }
    Candidate *cand = s->candidates;
    for (int i = 0; i < n; i++) if (p[i] >= cutoff) cand[n_cand++] = (Candidate){p[i], i};
    if (n_cand == 0) for (int i = 0; i < n; i++) cand[n_cand++] = (Candidate){p[i], i}; /* rounding */
    qsort(cand, (size_t)n_cand, sizeof(Candidate), by_probability);
    int top_k_applied = s->top_k > 0 && s->top_k < n;
    if (top_k_applied && s->top_k < n_cand) n_cand = s->top_k;

    if (s->top_p < 1.0) {
        double mass = top_k_applied ? 0.0 : 1.0, running = 0.0;
        if (top_k_applied) for (int i = 0; i < n_cand; i++) mass += cand[i].p;
        for (int i = 0; i < n_cand; i++) {
            running += cand[i].p;
            if (running >= s->top_p * mass) { n_cand = i + 1; break; }
        }
    }
    qsort(cand, (size_t)n_cand, sizeof(Candidate), by_id);
    double kept = 0.0, running = 0.0;
    for (int i = 0; i < n_cand; i++) kept += cand[i].p;
    double r = rng_uniform(&s->rng_state) * kept;
    for (int i = 0; i < n_cand; i++) {
        running += cand[i].p;
        if (running > r) return cand[i].id;
    }
    return cand[n_cand - 1].id;
}

#endif
