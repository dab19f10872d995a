/*
 * exec_cpu.h — the CPU backend: runs a plan's tape one position at a time with the reference ops
 * (kernels/ops.h), matrix rows split across a small persistent thread pool.
 */
#ifndef THIN_EXEC_CPU_H
#define THIN_EXEC_CPU_H

#include <stddef.h>
#include <stdint.h>

#include "plan.h"

typedef struct cpu_session cpu_session;

/* Allocates the buffers and the per-layer KV caches (p->kv_dtype) for max_ctx positions
 * (1 <= max_ctx <= plan_ctx_limit(p)) and starts `threads` threads (0 = all cores). The plan must
 * outlive the session. Returns 0, or -1 with a message in err. */
int cpu_session_create(cpu_session **s, const plan *p, uint32_t max_ctx, unsigned threads,
                       char *err, size_t errlen);

/* Runs tokens[0..n) at positions pos..pos+n-1 (each token in [0, vocab), pos + n <= max_ctx).
 * logits: n × vocab floats or NULL; argmax: n ids (lowest index wins ties; -1 for a row holding
 * NaN or infinity) or NULL.
 * Returns 0, or -1 on a bad token or position, or when argmax was asked and a row's logits hold
 * NaN or infinity (the rows are still run and written). */
int cpu_session_forward(cpu_session *s, const int32_t *tokens, uint32_t n, uint32_t pos,
                        float *logits, int32_t *argmax);

/* The logits of the last position run (vocab floats, owned by the session). */
const float *cpu_session_logits(const cpu_session *s);

void cpu_session_free(cpu_session *s);

#endif /* THIN_EXEC_CPU_H */
