/*
 * backend.h — the interface through which thin-run drives a backend (CPU or CUDA).
 *
 * A backend turns a plan (plan.h) into a session holding activations and the KV caches, then runs
 * the tape for one or more consecutive positions. thin-run talks to every backend through
 * `backend_ops`; the CPU one lives in exec_cpu.c, the CUDA one in kernels/cuda_backend.cu.
 *
 * Contract of the CUDA side (implemented in kernels/cuda_backend.cu, C linkage). All functions
 * return 0 on success and -1 on failure; create writes a one-line message into err.
 *
 *   int  cuda_backend_available(void);   1 when a usable GPU is present, else 0
 *   int  cuda_backend_runs(const plan *p, char *why, size_t len);
 *          1 when the CUDA kernels run every op of the plan, else
 *          0 with the first op they lack in why (no GPU needed; create refuses such a plan too)
 *   int  cuda_session_create(cuda_session **s, const plan *p, uint32_t max_ctx,
 *                            char *err, size_t errlen);
 *          uploads the plan's weights, allocates buffers and KV caches (p->kv_dtype) for
 *          max_ctx positions (max_ctx <= plan_ctx_limit(p)); fails with a --ctx hint where the KV
 *          caches would not fit the GPU's free memory.
 *   int  cuda_session_create_fit(cuda_session **s, const plan *p, uint32_t max_ctx,
 *                                uint32_t min_ctx, char *err, size_t errlen);
 *          the same, with as many positions as fit (keeping a tenth of the free memory for the
 *          rest of the state) where max_ctx would not, but at least min_ctx;
 *          cuda_session_ctx(s) tells how many it took.
 *   int  cuda_session_forward(cuda_session *s, const int32_t *tokens, uint32_t n, uint32_t pos,
 *                             float *logits, int32_t *argmax);
 *          runs tokens[0..n) at positions pos..pos+n-1 (pos + n <= max_ctx; n > 1 is a batched
 *          prefill). logits: n × vocab floats on the host, or NULL (then only the last row is
 *          kept on the device for cuda_session_sample). argmax: n ids (lowest index wins ties),
 *          or NULL.
 *   int  cuda_session_prefill(cuda_session *s, const int32_t *tokens, uint32_t n, uint32_t pos,
 *                             float *logits, int32_t *argmax);
 *          the same for a prompt, whose last row alone gives logits (vocab floats, or NULL) and
 *          argmax (one id, or NULL): every row runs in the batched form (tensor-core GEMMs,
 *          activations rounded to BF16) and the LM head for the last row only.
 *   int  cuda_session_sample(cuda_session *s, float temperature, uint32_t top_k, float top_p,
 *                            float coin, int32_t *token);
 *          samples from the last row of logits left by forward or prefill, with the semantics of
 *          sampler.h (temperature 0 = argmax): on the device (sample.cu), only the id coming
 *          back, or with THIN_CUDA_SAMPLE=host from the row copied to the host. coin is a
 *          uniform number in [0, 1) drawn by the caller's PRNG, so the CPU and
 *          GPU draw the same stream and, from the same logits, the same token (the masses are
 *          summed exactly in fixed point on the device, in double on the CPU: they can part only
 *          where the two sums straddle a boundary in their last bits).
 *   int  cuda_session_greedy(cuda_session *s, int32_t token, uint32_t pos, int ahead,
 *                            int32_t *next);
 *          one greedy decode step (token at pos) with its argmax in *next, as forward with
 *          argmax; with ahead (unless THIN_CUDA_AHEAD=0, with which each step runs as forward
 *          does), the step for *next at pos + 1 is queued too before the call waits,
 *          its input taken on the device from this step's argmax, so that the GPU runs from one
 *          token into the next while the host handles the id; the call for (that id, pos + 1)
 *          then only waits for it. Any other forward, prefill or greedy call discards it (it has
 *          run, in stream order, before them). No logits row is left for cuda_session_sample.
 *   int  cuda_session_prepare(cuda_session *s, uint32_t n);
 *          runs the chunks that a prompt of n ids will run once, on token 0 from position 0, so
 *          that their one-time costs (kernels loaded at their first launch, cuBLASLt's algorithm
 *          for each shape and batch size) are paid before it; the KV rows it wrote are cleared.
 *          Returns 1 when it ran, 0 when there was nothing to run (one row, or not switched on:
 *          env THIN_CUDA_PREPARE=1, opt-in until timed on the GPU machine).
 *   void cuda_session_free(cuda_session *s);   NULL allowed
 */
#ifndef THIN_BACKEND_H
#define THIN_BACKEND_H

#include <stddef.h>
#include <stdint.h>

#include "plan.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A backend: a session is an opaque pointer owned by the backend. */
typedef struct backend_ops {
    const char *name; /* "cpu", "cuda" */
    /* Creates a session for *ctx positions; threads is a hint (0 = all cores). Where the KV
     * caches of *ctx positions would not fit the device's free memory, a backend may take fewer,
     * as many as fit but at least min_ctx (min_ctx >= *ctx: exactly *ctx or fail), and writes
     * the count it took to *ctx. */
    int (*create)(void **sess, const plan *p, uint32_t *ctx, uint32_t min_ctx, unsigned threads,
                  char *err, size_t errlen);
    /* Runs tokens[0..n) at positions pos..pos+n-1; logits (n × vocab) and argmax (n) may be NULL. */
    int (*forward)(void *sess, const int32_t *tokens, uint32_t n, uint32_t pos, float *logits,
                   int32_t *argmax);
    void (*free)(void *sess);
    /* Message for the session's last failure ("" when none). */
    const char *(*error)(void *sess);
    /* Positions that scoring (thin-run --score) may run in one forward call with the results of
     * running them one at a time, bit for bit (1: one at a time; the CUDA prefill's GEMMs round
     * differently from its decode step, which scoring measures). */
    uint32_t score_batch;
    /* Runs a prompt tokens[0..n) at positions pos..pos+n-1 and gives the last row's logits (vocab
     * floats) and argmax (one id), each may be NULL; NULL when the backend has no such form (then
     * forward runs the first n - 1 rows and the last one apart). */
    int (*prefill)(void *sess, const int32_t *tokens, uint32_t n, uint32_t pos, float *logits,
                   int32_t *argmax);
    /* Samples the next token (temperature > 0) from the last row of logits that forward or
     * prefill left, with sampler.h's semantics and `coin` as the draw, where the logits are: no
     * row crosses to the host. NULL when the backend has no such form (the host samples from the
     * logits that forward gives). */
    int (*sample)(void *sess, float temperature, uint32_t top_k, float top_p, float coin,
                  int32_t *token);
    /* One greedy decode step: token at pos, its argmax in *next. With ahead set the backend may
     * also start the step after it (*next at pos + 1) before returning, so that the device does
     * not wait for the host between tokens; a call for that step then only waits for it, and any
     * other call simply runs after it. NULL: forward with argmax instead. */
    int (*greedy)(void *sess, int32_t token, uint32_t pos, int ahead, int32_t *next);
    /* Pays now what the first prompt of n ids would pay once (kernels loaded at their first
     * launch, algorithms chosen per batch size), leaving the session as created: 1 when it ran, 0
     * when there was nothing to pay, -1 on failure; NULL where there is no such cost. */
    int (*prepare)(void *sess, uint32_t n);
} backend_ops;

/* The CPU backend (exec_cpu.c). */
extern const backend_ops backend_cpu;

/* The CUDA side is linked when the build has nvcc (THIN_HAVE_CUDA) and the CUDA backend source
 * kernels/cuda_backend.cu is part of the tree; THIN_RUN_CUDA is then 1. */
#if defined(THIN_HAVE_CUDA) && defined(__has_include)
#if __has_include("cuda_backend.cu")
#define THIN_RUN_CUDA 1
#endif
#endif

typedef struct cuda_session cuda_session;

int cuda_backend_available(void);
int cuda_backend_runs(const plan *p, char *why, size_t len);
int cuda_session_create(cuda_session **s, const plan *p, uint32_t max_ctx, char *err,
                        size_t errlen);
int cuda_session_create_fit(cuda_session **s, const plan *p, uint32_t max_ctx, uint32_t min_ctx,
                            char *err, size_t errlen);
uint32_t cuda_session_ctx(const cuda_session *s);
int cuda_session_forward(cuda_session *s, const int32_t *tokens, uint32_t n, uint32_t pos,
                         float *logits, int32_t *argmax);
int cuda_session_prefill(cuda_session *s, const int32_t *tokens, uint32_t n, uint32_t pos,
                         float *logits, int32_t *argmax);
int cuda_session_sample(cuda_session *s, float temperature, uint32_t top_k, float top_p,
                        float coin, int32_t *token);
int cuda_session_greedy(cuda_session *s, int32_t token, uint32_t pos, int ahead, int32_t *next);
int cuda_session_prepare(cuda_session *s, uint32_t n);
void cuda_session_free(cuda_session *s);
/* cuda_session_sample's kernels on a row of n logits given on the host (for tests); 0, or -1 with
 * err filled. */
int cuda_sample_row(const float *logits, uint32_t n, float temperature, uint32_t top_k, float top_p,
                    float coin, int32_t *token, char *err, size_t errlen);

#ifdef THIN_RUN_CUDA
/* The CUDA backend wrapped as backend_ops (thin-run's main.c). */
extern const backend_ops backend_cuda;
#endif

#ifdef __cplusplus
}
#endif
#endif /* THIN_BACKEND_H */
