/*
 * sampler.c — greedy, temperature, top-k and top-p sampling with a portable PRNG (sampler.h).
 */
#include <math.h>
#include <stdlib.h>

#include "sampler.h"

int sampler_init(sampler *s, uint32_t vocab, float temperature, uint32_t top_k, float top_p,
                 uint64_t seed) {
    s->cand = NULL;
    if (vocab == 0 || !(temperature >= 0.0f) || !(top_p > 0.0f && top_p <= 1.0f)) return -1;
    s->vocab = vocab;
    s->temperature = temperature;
    s->top_k = top_k;
    s->top_p = top_p;
    s->rng = seed;
    s->cand = malloc((size_t)vocab * sizeof *s->cand);
    return s->cand ? 0 : -1;
}

void sampler_free(sampler *s) {
    free(s->cand);
    s->cand = NULL;
}

static uint64_t splitmix64(uint64_t *state) {
    uint64_t z = (*state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

float sampler_coin(sampler *s) { return (float)(splitmix64(&s->rng) >> 40) * 0x1p-24f; }

static int32_t argmax(const float *x, uint32_t n) {
    uint32_t best = 0;
    for (uint32_t i = 1; i < n; i++)
        if (x[i] > x[best]) best = i;
    return (int32_t)best;
}

/* Descending probability; equal probabilities keep the lower id first. */
static int cand_cmp(const void *a, const void *b) {
    const sampler_cand *x = a, *y = b;
    if (x->p != y->p) return x->p > y->p ? -1 : 1;
    return (x->id > y->id) - (x->id < y->id);
}

/* Fills s->cand with the softmax of logits / temperature; returns the count kept. Without top-k,
 * tokens that cannot be in the top-p nucleus (p < (1 - top_p) / (n - 1)) are dropped early. */
static uint32_t softmax_cands(sampler *s, const float *logits) {
    float mx = logits[argmax(logits, s->vocab)];
    double sum = 0.0;
    for (uint32_t i = 0; i < s->vocab; i++) sum += exp((double)(logits[i] - mx) / s->temperature);
    double cutoff = 0.0;
    if (s->top_k == 0 && s->top_p < 1.0f && s->vocab > 1)
        cutoff = (1.0 - s->top_p) / (double)(s->vocab - 1);
    uint32_t n = 0;
    for (uint32_t i = 0; i < s->vocab; i++) {
        double p = exp((double)(logits[i] - mx) / s->temperature) / sum;
        if (p >= cutoff) s->cand[n++] = (sampler_cand){(float)p, (int32_t)i};
    }
    return n;
}

int32_t sampler_draw(sampler_cand *c, uint32_t n, uint32_t top_k, float top_p, float coin) {
    if (n == 0) return -1;
    if (top_k > 0 || top_p < 1.0f) qsort(c, n, sizeof *c, cand_cmp);
    if (top_k > 0 && top_k < n) n = top_k;
    double mass = 0.0;
    for (uint32_t i = 0; i < n; i++) mass += c[i].p;
    if (top_p < 1.0f) {
        double cum = 0.0, goal = top_p * mass;
        uint32_t keep = n;
        for (uint32_t i = 0; i < n; i++) {
            cum += c[i].p;
            if (cum >= goal) {
                keep = i + 1;
                break;
            }
        }
        n = keep;
        mass = cum;
    }
    if (!(mass > 0.0) || !isfinite(mass)) return -1;
    double r = (double)coin * mass, cum = 0.0;
    for (uint32_t i = 0; i < n; i++) {
        cum += c[i].p;
        if (r < cum) return c[i].id;
    }
    return c[n - 1].id; /* rounding: the draw fell past the last sum */
}

int32_t sampler_pick(sampler *s, const float *logits, float coin) {
    if (s->temperature == 0.0f) return argmax(logits, s->vocab);
    uint32_t n = softmax_cands(s, logits);
    return sampler_draw(s->cand, n, s->top_k, s->top_p, coin);
}

int32_t sampler_sample(sampler *s, const float *logits) {
    if (s->temperature == 0.0f) return argmax(logits, s->vocab);
    return sampler_pick(s, logits, sampler_coin(s));
}
