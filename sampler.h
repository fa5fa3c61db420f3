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
 *   otherwise, in double precision, with z = logits / temperature over the real vocabulary:
 *     1. candidates ordered by z descending, ties by lower id;
 *     2. top-k (k > 0): keep the first k;
 *     3. each kept candidate's weight w_i = exp(z_i - max z), and their mass: the sum of the
 *        k weights in that order with top-k, else of every weight in id order;
 *     4. top-p (p < 1): keep the shortest prefix whose running sum of weights reaches
 *        p * mass;
 *     5. the kept candidates are put back in id order; r = uniform() * (sum of their weights,
 *        in id order); the chosen token is the first whose running sum exceeds r (the last one
 *        if rounding leaves none). Walking in id order, not weight order, keeps the choice
 *        stable when near-equal weights would sort differently after rounding noise.
 *   The weights are softmax's numerators: a draw in proportion to them is a draw from the
 *   softmax of the kept logits (Hugging Face's top-k and top-p warpers, then a multinomial
 *   draw), without the division; with top-k, only k exponentials are taken, not one per id
 *   of the vocabulary.
 *   Exactly one uniform() is drawn per sampled token.
 */
#ifndef SAMPLER_H
#define SAMPLER_H

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/ops.h"
#include "kernels/simd.h"

/* A token that may be sampled: its scaled logit z and, once it is kept, its weight. */
typedef struct {
    double z, w;
    int id;
} Candidate;

/* Each sampler owns all its state, so that samplers of several samples can run at once. */
typedef struct {
    uint64_t rng_state;
    double temperature;
    int top_k;
    double top_p;
    double *weights; /* (vocab_size) every id's weight, without top-k */
    float *scratch;  /* (vocab_size) the heap for finding the k-th largest logit (top_k) */
    Candidate *candidates; /* (vocab_size) sorted by z, then by id */
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

/* The bytes a sampler's buffers take for a vocabulary of vocab_size (build_sampler's). */
static size_t sampler_bytes(int vocab_size) {
    return (size_t)vocab_size * (sizeof(double) + sizeof(float) + sizeof(Candidate) + 1);
}

/* Returns 0 when memory runs out. */
static int build_sampler(Sampler *s, int vocab_size, double temperature, int top_k, double top_p,
                         uint64_t seed) {
    s->rng_state = seed + 0x9E3779B97F4A7C15ull;
    if (s->rng_state == 0) s->rng_state = 1;
    s->temperature = temperature;
    s->top_k = top_k;
    s->top_p = top_p;
    s->weights = malloc((size_t)vocab_size * sizeof(double));
    s->scratch = malloc((size_t)vocab_size * sizeof(float));
    s->candidates = malloc((size_t)vocab_size * sizeof(Candidate));
    s->seen = calloc((size_t)vocab_size, 1);
    return s->weights && s->scratch && s->candidates && s->seen;
}

static void free_sampler(Sampler *s) {
    free(s->weights);
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

/* The passes over the whole vocabulary below (50,257 logits for GPT-2) look at VW logits at
 * once and step in only where a lane qualifies, since as scalar loops they weighed on many
 * samples (docs/speed.md). Each finds what its scalar loop finds. */

/* The first index i >= from of x[0..n) with x[i] >= t, or n. */
static int first_at_least(const float *x, int from, int n, float t) {
    int i = from;
    for (; i + VW <= n; i += VW) {
        unsigned lanes = vf_lanes_at_least(vf_load(x + i), t);
        if (lanes) return i + __builtin_ctz(lanes);
    }
    for (; i < n; i++) if (x[i] >= t) return i;
    return n;
}

/* The index `best = 0; best = i if x[i] > x[best]` finds: the first that holds the largest
 * value (max_of(): a NaN after x[0] is passed over; x[0] NaN gives 0). A value equal to the
 * largest one is one >= it, for every x[i] that is not NaN is <= it. */
static int argmax(const float *x, int n) {
    float max = max_of(x, n);
    return max != max ? 0 : first_at_least(x, 0, n, max);
}

/* The k-th largest of x[0..n) (1 <= k <= n), counting repeats: the smallest of the k largest
 * seen so far, kept in a min-heap of k floats (heap). Most values need one comparison with
 * the heap's smallest, where a quickselect over a copy spent its time in branches. */
static float kth_largest(const float *x, int n, int k, float *heap) {
    for (int i = 0; i < k; i++) { /* the first k, each sifted up to its place */
        int c = i;
        for (; c > 0 && heap[(c - 1) / 2] > x[i]; c = (c - 1) / 2) heap[c] = heap[(c - 1) / 2];
        heap[c] = x[i];
    }
    for (int i = k; i < n; i++) {
        /* VW values none of which beats the smallest kept are passed over together (the
         * smallest kept only grows, so none of them would have entered) */
        while (i + VW <= n && !vf_lanes_above(vf_load(x + i), heap[0])) i += VW;
        if (i == n) break;
        if (!(x[i] > heap[0])) continue;
        int c = 0; /* x[i] replaces the smallest and sifts down */
        for (;;) {
            int smallest = c, left = 2 * c + 1, right = left + 1;
            float least = x[i]; /* the least of x[i] and c's children */
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

/* z descending, then id ascending: a total order, so the result never depends on the sort
 * algorithm. */
static int by_z(const void *a, const void *b) {
    const Candidate *x = a, *y = b;
    if (x->z != y->z) return x->z > y->z ? -1 : 1;
    return (x->id > y->id) - (x->id < y->id);
}

static int by_id(const void *a, const void *b) {
    const Candidate *x = a, *y = b;
    return (x->id > y->id) - (x->id < y->id);
}

/* The next token from logits (n = the real vocabulary), by the procedure above. */
static int sample(Sampler *s, const float *logits, int n) {
    if (s->temperature == 0.0) return argmax(logits, n);
    double temperature = s->temperature, max = max_of(logits, n) / temperature, mass = 0.0;
    Candidate *cand = s->candidates;
    double *w = s->weights;
    int n_cand = 0, top_k = s->top_k > 0 && s->top_k < n;
    if (top_k) {
        /* The k largest z are the k largest logits: a float divided by the same positive double
         * keeps its order in double precision (distinct floats differ by at least 2^-24 of their
         * size, far more than a double's rounding), so the cutoff is taken on the logits. */
        float cutoff = kth_largest(logits, n, s->top_k, s->scratch);
        for (int i = first_at_least(logits, 0, n, cutoff); i < n; i = first_at_least(logits, i + 1, n, cutoff))
            cand[n_cand++] = (Candidate){.z = logits[i] / temperature, .id = i};
    } else {
        for (int i = 0; i < n; i++) {
            w[i] = exp(logits[i] / temperature - max);
            mass += w[i];
        }
        /* With top-p, candidates that can survive truncation: ids whose weight is below
         * (1 - top_p) / (n - 1) of the mass together hold less than 1 - top_p of it, so the
         * nucleus never reaches them; dropping them before the sort changes nothing. */
        double cutoff = s->top_p < 1.0 && n > 1 ? (1.0 - s->top_p) / (n - 1) * mass : 0.0;
        for (int i = 0; i < n; i++)
            if (w[i] >= cutoff) cand[n_cand++] = (Candidate){.z = logits[i] / temperature, .w = w[i], .id = i};
    }
    if (n_cand == 0) /* rounding, or logits that are not numbers (a file's NaN weights): every id */
        for (int i = 0; i < n; i++) cand[n_cand++] = (Candidate){.z = logits[i] / temperature, .w = top_k ? 0.0 : w[i], .id = i};
    if (top_k || s->top_p < 1.0) qsort(cand, (size_t)n_cand, sizeof(Candidate), by_z);
    if (top_k) { /* the first k, and their weights */
        if (n_cand > s->top_k) n_cand = s->top_k;
        for (int i = 0; i < n_cand; i++) {
            cand[i].w = exp(cand[i].z - max);
            mass += cand[i].w;
        }
    }

    if (s->top_p < 1.0) {
        double running = 0.0;
        for (int i = 0; i < n_cand; i++) {
            running += cand[i].w;
            if (running >= s->top_p * mass) { n_cand = i + 1; break; }
        }
    }
    if (top_k || s->top_p < 1.0) qsort(cand, (size_t)n_cand, sizeof(Candidate), by_id);
    double kept = 0.0, running = 0.0;
    for (int i = 0; i < n_cand; i++) kept += cand[i].w;
    double r = rng_uniform(&s->rng_state) * kept;
    for (int i = 0; i < n_cand; i++) {
        running += cand[i].w;
        if (running > r) return cand[i].id;
    }
    return cand[n_cand - 1].id;
}

#endif
