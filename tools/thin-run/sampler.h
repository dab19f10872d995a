/*
 * sampler.h — choosing the next token from a row of logits.
 *
 * Greedy (temperature 0) takes the largest logit, the lowest index winning ties. Otherwise the
 * logits are divided by the temperature and turned into probabilities (softmax); top-k keeps the
 * k most likely tokens, then top-p keeps the smallest most-likely prefix whose mass reaches p (both
 * renormalise), and a uniform draw picks a token. The draws come from the sampler's own PRNG
 * (splitmix64 seeded by `seed`), so a seed gives the same tokens on every machine.
 */
#ifndef THIN_SAMPLER_H
#define THIN_SAMPLER_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct sampler_cand {
    float p;    /* probability */
    int32_t id; /* token id */
} sampler_cand;

typedef struct sampler {
    uint32_t vocab;
    float temperature; /* 0 = greedy */
    uint32_t top_k;    /* 0 = off */
    float top_p;       /* 1 = off */
    uint64_t rng;      /* PRNG state */
    sampler_cand *cand;/* vocab candidates (scratch) */
} sampler;

/* Sets up a sampler; returns 0, or -1 when out of memory or a parameter is out of range
 * (temperature < 0, top_p not in (0, 1]). */
int sampler_init(sampler *s, uint32_t vocab, float temperature, uint32_t top_k, float top_p,
                 uint64_t seed);
void sampler_free(sampler *s);

/* Next uniform float in [0, 1) from the sampler's PRNG (24 random bits). */
float sampler_coin(sampler *s);

/* Draws from n candidates. With trimming (top_k > 0 or top_p < 1) they are reordered in place by
 * descending probability, equal probabilities by ascending id; then the top_k most likely are kept
 * (0 = all) and the smallest prefix whose mass reaches top_p. Without trimming they are used in the
 * order given, which must be ascending id for the same draw everywhere. `coin` in [0, 1) picks
 * over the cumulative mass of what is left; -1 when there is none to pick (n = 0, or a mass that
 * is not a positive finite number). The CPU sampler and the CUDA backend both end here. */
int32_t sampler_draw(sampler_cand *c, uint32_t n, uint32_t top_k, float top_p, float coin);

/* Picks a token from logits (vocab floats; not modified) using `coin` in [0, 1) as the draw;
 * -1 when sampling finds no candidate, which logits that hold a NaN or +infinity (or are all
 * -infinity) give. Greedy takes the largest logit as it is. */
int32_t sampler_pick(sampler *s, const float *logits, float coin);

/* Picks a token, drawing the coin from the PRNG (greedy draws none); -1 as sampler_pick. */
int32_t sampler_sample(sampler *s, const float *logits);

#ifdef __cplusplus
}
#endif
#endif /* THIN_SAMPLER_H */
