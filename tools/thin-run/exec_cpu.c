/*
 * exec_cpu.c — the CPU backend (exec_cpu.h, backend.h): the tape interpreted op by op.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "exec_cpu.h"
#include "ops.h"
#include "pool.h"

/* Below this many weights a matrix-vector product runs on the calling thread alone. */
#define PARALLEL_MIN_WEIGHTS ((uint64_t)1 << 16)

struct cpu_session {
    const plan *p;
    uint32_t max_ctx;
    float **buf;       /* n_bufs activation buffers, buf[i] holds p->buf_sizes[i] floats */
    void **kcache;     /* n_layers caches, (max_ctx, n_kv_heads * head_dim) of kv_dtype */
    void **vcache;     /* same shape as kcache */
    uint64_t *kv_dim;  /* per layer: n_kv_heads * head_dim of its attention op */
    float *scratch;    /* (max_ctx) attention scores */
    pool *pool;
};

typedef struct matvec_job {
    float *y;
    const thin_wmat *w;
    const float *x;
} matvec_job;

static void matvec_part(void *arg, unsigned part, unsigned n_parts) {
    const matvec_job *j = arg;
    uint64_t rows = j->w->rows;
    uint64_t r0 = rows * part / n_parts, r1 = rows * (part + 1) / n_parts;
    op_matvec(j->y, j->w, j->x, r0, r1);
}

static void linear(cpu_session *s, float *y, const thin_wmat *w, const float *x) {
    matvec_job j = {y, w, x};
    if (w->rows * w->cols < PARALLEL_MIN_WEIGHTS || pool_size(s->pool) == 1)
        op_matvec(y, w, x, 0, w->rows);
    else
        pool_run(s->pool, matvec_part, &j);
}

static void attention(cpu_session *s, const plan_op *op, uint32_t pos) {
    float **b = s->buf;
    int32_t l = op->layer;
    op_kv_store(s->kcache[l], s->vcache[l], s->p->kv_dtype, b[op->k], b[op->v], s->kv_dim[l], pos);
    op_attention(b[op->out], b[op->q], s->kcache[l], s->vcache[l], s->p->kv_dtype, op->n_heads,
                 op->n_kv_heads, op->head_dim, (uint64_t)pos + 1, s->scratch);
}

/* Runs the whole tape for one token at position pos. */
static void step(cpu_session *s, int32_t token, uint32_t pos) {
    const plan *p = s->p;
    float **b = s->buf;
    for (uint32_t i = 0; i < p->n_ops; i++) {
        const plan_op *op = &p->ops[i];
        switch (op->kind) {
        case PLAN_EMBED: op_embed(b[op->out], &op->w, (uint64_t)token); break;
        case PLAN_RMSNORM:
            op_rmsnorm(b[op->out], b[op->in], &op->w, p->buf_sizes[op->in], op->eps);
            break;
        case PLAN_LINEAR: linear(s, b[op->out], &op->w, b[op->in]); break;
        case PLAN_HEAD_RMSNORM:
            op_head_rmsnorm(b[op->in], &op->w, op->n_heads, op->head_dim, op->eps);
            break;
        case PLAN_ROPE:
            op_rope(b[op->in], op->n_heads, op->head_dim, pos, op->theta, op->inv_freq);
            break;
        case PLAN_ATTENTION: attention(s, op, pos); break;
        case PLAN_ADD: op_add(b[op->out], b[op->in], p->buf_sizes[op->in]); break;
        case PLAN_SILU_MUL: op_silu_mul(b[op->out], b[op->in], p->buf_sizes[op->in]); break;
        }
    }
}

int cpu_session_forward(cpu_session *s, const int32_t *tokens, uint32_t n, uint32_t pos,
                        float *logits, int32_t *argmax) {
    uint32_t vocab = s->p->hp.vocab_size;
    if (pos > s->max_ctx || n > s->max_ctx - pos) return -1;
    for (uint32_t i = 0; i < n; i++)
        if (tokens[i] < 0 || (uint32_t)tokens[i] >= vocab) return -1;
    const float *out = s->buf[s->p->logits_buf];
    for (uint32_t i = 0; i < n; i++) {
        step(s, tokens[i], pos + i);
        if (logits) memcpy(logits + (size_t)i * vocab, out, (size_t)vocab * sizeof(float));
        if (argmax) argmax[i] = (int32_t)op_argmax(out, vocab);
    }
    return 0;
}

const float *cpu_session_logits(const cpu_session *s) { return s->buf[s->p->logits_buf]; }

static int alloc_caches(cpu_session *s, char *err, size_t errlen) {
    const plan *p = s->p;
    uint32_t nl = p->hp.n_layers;
    s->kcache = calloc(nl, sizeof *s->kcache);
    s->vcache = calloc(nl, sizeof *s->vcache);
    s->kv_dim = calloc(nl, sizeof *s->kv_dim);
    if (!s->kcache || !s->vcache || !s->kv_dim) return -1;
    for (uint32_t i = 0; i < p->n_ops; i++)
        if (p->ops[i].kind == PLAN_ATTENTION)
            s->kv_dim[p->ops[i].layer] = (uint64_t)p->ops[i].n_kv_heads * p->ops[i].head_dim;
    size_t esz = p->kv_dtype == THIN_DTYPE_F32 ? 4 : 2;
    for (uint32_t l = 0; l < nl; l++) {
        uint64_t n = s->kv_dim[l] * s->max_ctx; /* each < 2^32, so no overflow */
        if (n > SIZE_MAX / esz) {
            snprintf(err, errlen, "KV cache of %u positions is too large", s->max_ctx);
            return -1;
        }
        s->kcache[l] = calloc(n ? n : 1, esz);
        s->vcache[l] = calloc(n ? n : 1, esz);
        if (!s->kcache[l] || !s->vcache[l]) return -1;
    }
    return 0;
}

static int alloc_session(cpu_session *s, unsigned threads, char *err, size_t errlen) {
    const plan *p = s->p;
    s->buf = calloc(p->n_bufs, sizeof *s->buf);
    if (!s->buf) return -1;
    for (uint32_t i = 0; i < p->n_bufs; i++)
        if (!(s->buf[i] = calloc(p->buf_sizes[i], sizeof(float)))) return -1;
    if (!(s->scratch = calloc(s->max_ctx, sizeof(float)))) return -1;
    if (alloc_caches(s, err, errlen)) return -1;
    if (!(s->pool = pool_new(threads ? threads : thin_cpu_count()))) {
        snprintf(err, errlen, "cannot start %u threads", threads);
        return -1;
    }
    return 0;
}

int cpu_session_create(cpu_session **out, const plan *p, uint32_t max_ctx, unsigned threads,
                       char *err, size_t errlen) {
    *out = NULL;
    if (errlen) err[0] = '\0';
    if (max_ctx == 0 || max_ctx > p->hp.max_pos) {
        snprintf(err, errlen, "context of %u positions is outside 1..%u", max_ctx, p->hp.max_pos);
        return -1;
    }
    cpu_session *s = calloc(1, sizeof *s);
    if (!s) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    s->p = p;
    s->max_ctx = max_ctx;
    if (alloc_session(s, threads, err, errlen)) {
        if (errlen && !err[0])
            snprintf(err, errlen, "out of memory for buffers and KV caches of %u positions",
                     max_ctx);
        cpu_session_free(s);
        return -1;
    }
    *out = s;
    return 0;
}

void cpu_session_free(cpu_session *s) {
    if (!s) return;
    pool_free(s->pool);
    for (uint32_t i = 0; s->buf && i < s->p->n_bufs; i++) free(s->buf[i]);
    for (uint32_t l = 0; s->kcache && l < s->p->hp.n_layers; l++) {
        free(s->kcache[l]);
        free(s->vcache[l]);
    }
    free(s->buf);
    free(s->kcache);
    free(s->vcache);
    free(s->kv_dim);
    free(s->scratch);
    free(s);
}

/* ---- backend_ops wrapper ---- */

static int be_create(void **sess, const plan *p, uint32_t max_ctx, unsigned threads, char *err,
                     size_t errlen) {
    return cpu_session_create((cpu_session **)sess, p, max_ctx, threads, err, errlen);
}

static int be_forward(void *sess, const int32_t *tokens, uint32_t n, uint32_t pos, float *logits,
                      int32_t *argmax) {
    return cpu_session_forward(sess, tokens, n, pos, logits, argmax);
}

static void be_free(void *sess) { cpu_session_free(sess); }

/* The CPU session fails only on positions past its context or ids outside the vocabulary. */
static const char *be_error(void *sess) {
    (void)sess;
    return "positions past the context or a token id outside the vocabulary";
}

const backend_ops backend_cpu = {"cpu", be_create, be_forward, be_free, be_error};
