/*
 * exec_cpu.c — the CPU backend (exec_cpu.h, backend.h): the tape interpreted op by op, a prompt's
 * tokens in batches whose linears read each weight once for the whole batch.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "exec_cpu.h"
#include "ops.h"
#include "pool.h"

/* Below this many multiply-adds (a linear's weights; an attention's positions × heads × head_dim)
 * the work runs on the calling thread alone. */
#define PARALLEL_MIN_WEIGHTS ((uint64_t)1 << 16)
/* Below this many elements (a batch's rows × a buffer's size) an op that works row by row runs on
 * the calling thread alone. */
#define ROWS_PARALLEL_MIN ((uint64_t)1 << 15)
/* Rows of a batch: a prompt runs CPU_BATCH tokens at a time, each linear reading its weights once
 * for all of them (op_matmat). Every row's arithmetic is that of one token run alone, so the
 * results are identical bit for bit to token-by-token runs. (A 128-id prompt on a Llama-shaped
 * 0.85 GB model, AVX-512, one / two threads: 8 rows 57-70 / 89-98 tokens/s, 12 76 / 106-116, 24
 * 86 / 126, 32 89 / 129, 48 93 / 128-130.) */
#define CPU_BATCH 32
_Static_assert(CPU_BATCH >= OP_ATTN_HEADS, "a thread's scratch holds op_attention_rows' vectors");

struct cpu_session {
    const plan *p;
    uint32_t max_ctx;
    float **buf;       /* n_bufs activation buffers, buf[i] holds CPU_BATCH rows of
                          p->buf_sizes[i] floats (row j of a batch at buf[i] + j * buf_sizes[i]) */
    void **kcache;     /* n_layers caches, (max_ctx or a ring's 2R rows, n_kv_heads * head_dim)
                          of kv_dtype */
    void **vcache;     /* same shape as kcache */
    uint64_t *kv_dim;  /* per layer: n_kv_heads * head_dim of its attention op */
    uint32_t *ring;    /* per layer: 0, or the period R of a sliding window's ring of rows
                          (window + CPU_BATCH): position p in rows p % R and p % R + R of
                          2R, so that any R consecutive positions lie in consecutive rows */
    float *scratch;    /* (CPU_BATCH × max_ctx) attention scores per thread */
    float *part;       /* a device's partial products of a row split (p->shards > 1), or NULL */
    /* a mixture of experts' scratch, CPU_BATCH rows each (moe_rows): router scores and the chosen
     * experts with their weights, an expert's input rows, gate and up products, down products and
     * the rows' sums */
    float *moe_r, *moe_w, *moe_x, *moe_g, *moe_u, *moe_d, *moe_acc;
    uint32_t *moe_sel, *moe_rows;
    uint32_t last;     /* row of the last batch's last token (its logits: cpu_session_logits) */
    int nonfinite;     /* the last forward failed: a row whose argmax was asked held NaN or inf */
    pool *pool;
};

typedef struct matmat_job {
    float *y;
    uint64_t ldy, ldx;
    const thin_wmat *w;
    const float *x;
    uint32_t nb;
    uint64_t c0, c1; /* columns, all of them unless a device's share of a row split */
} matmat_job;

/* fn over the pool's parts, or as one part on the calling thread when work is below min. */
static void run_parts(cpu_session *s, pool_fn fn, void *arg, uint64_t work, uint64_t min) {
    if (work < min || pool_size(s->pool) == 1)
        fn(arg, 0, 1);
    else
        pool_run(s->pool, fn, arg);
}

static void matmat_part(void *arg, unsigned part, unsigned n_parts) {
    const matmat_job *j = arg;
    uint64_t rows = j->w->rows;
    uint64_t r0 = rows * part / n_parts, r1 = rows * (part + 1) / n_parts;
    op_matmat_cols(j->y, j->ldy, j->w, j->c0, j->c1, j->x, j->ldx, j->nb, r0, r1);
}

static void run_matmat(cpu_session *s, matmat_job *j) {
    run_parts(s, matmat_part, j, j->w->rows * (j->c1 - j->c0), PARALLEL_MIN_WEIGHTS);
}

/* The linear for rows [i0, nb) of the batch. A row split in a run standing for several devices
 * (p->shards) is summed from each device's partial products over its columns, in device order. */
static void linear(cpu_session *s, const plan_op *op, uint32_t i0, uint32_t nb) {
    const uint64_t *sz = s->p->buf_sizes;
    float *y = s->buf[op->out] + (size_t)i0 * sz[op->out];
    matmat_job j = {y, sz[op->out], sz[op->in], &op->w, s->buf[op->in] + (size_t)i0 * sz[op->in],
                    nb - i0, 0, op->w.cols};
    const uint32_t n = s->p->shards;
    if (op->split != PLAN_SPLIT_ROW || n <= 1) {
        run_matmat(s, &j);
        return;
    }
    j.y = s->part;
    for (uint32_t d = 0; d < n; d++) {
        j.c0 = op->w.cols * d / n, j.c1 = op->w.cols * (d + 1) / n;
        run_matmat(s, &j);
        for (uint32_t i = 0; i < nb - i0; i++)
            for (uint64_t r = 0; r < op->w.rows; r++)
                y[i * sz[op->out] + r] = d ? y[i * sz[op->out] + r] + j.y[i * sz[op->out] + r]
                                           : j.y[i * sz[op->out] + r];
    }
}

/* Row i of buffer b. */
static inline float *row(const cpu_session *s, int32_t b, uint32_t i) {
    return s->buf[b] + (size_t)i * s->p->buf_sizes[b];
}

typedef struct attn_rows_job {
    cpu_session *s;
    const plan_op *op;
    uint32_t nb, pos;
} attn_rows_job;

/* Query heads [n_heads part / n, n_heads (part + 1) / n) of every row of the batch. */
static void attn_rows_part(void *arg, unsigned part, unsigned n) {
    const attn_rows_job *j = arg;
    const cpu_session *s = j->s;
    const plan_op *op = j->op;
    const int32_t l = op->layer;
    const uint64_t *sz = s->p->buf_sizes;
    /* a ring's rows from the first position the batch sees: its first row's window start */
    const uint64_t first = s->ring[l] ? op_window_start((uint64_t)j->pos + 1, op->window) : 0;
    const size_t off = (size_t)(s->ring[l] ? first % s->ring[l] : 0) * s->kv_dim[l] * thin_dtype_size(s->p->kv_dtype);
    op_attention_rows(row(s, op->out, 0), sz[op->out], row(s, op->q, 0), sz[op->q],
                      (const uint8_t *)s->kcache[l] + off, (const uint8_t *)s->vcache[l] + off,
                      s->p->kv_dtype, op->n_heads, op->n_kv_heads, op->head_dim, j->pos, j->nb,
                      op->n_heads * part / n, op->n_heads * (part + 1) / n, plan_attn_scale(op),
                      op->window, op->softcap, first, s->scratch + (size_t)part * CPU_BATCH * s->max_ctx);
}

/* A batch's attention: every row's K/V stored first (row i attends positions up to its own, so
 * the later rows' do not change its result), then the heads split over the threads, each head's
 * cached rows read once for all the rows, or for a token for all the query heads of its KV head
 * (op_attention_rows: each row's arithmetic is that of the token alone). */
static void attention_rows(cpu_session *s, const plan_op *op, uint32_t nb, uint32_t pos) {
    const int32_t l = op->layer;
    const uint32_t r = s->ring[l];
    for (uint32_t i = 0; i < nb; i++) {
        const uint64_t at = r ? (pos + i) % r : pos + i;
        op_kv_store(s->kcache[l], s->vcache[l], s->p->kv_dtype, row(s, op->k, i), row(s, op->v, i),
                    s->kv_dim[l], at);
        if (r) /* the ring's second copy */
            op_kv_store(s->kcache[l], s->vcache[l], s->p->kv_dtype, row(s, op->k, i), row(s, op->v, i),
                        s->kv_dim[l], at + r);
    }
    attn_rows_job j = {s, op, nb, pos};
    run_parts(s, attn_rows_part, &j, (uint64_t)(pos + nb) * nb * op->n_heads * op->head_dim,
              PARALLEL_MIN_WEIGHTS);
}

/* The top k of n probabilities into sel (ties: the lower index first). */
static void top_k(const float *p, uint32_t n, uint32_t k, uint32_t *sel) {
    for (uint32_t j = 0; j < k; j++) {
        uint32_t best = UINT32_MAX;
        for (uint32_t e = 0; e < n; e++) {
            int taken = 0;
            for (uint32_t i = 0; i < j && !taken; i++) taken = sel[i] == e;
            if (!taken && (best == UINT32_MAX || p[e] > p[best])) best = e;
        }
        sel[j] = best;
    }
}

/* Rows x (m of them, leading dimension d) through one expert's gate, up and down (w[0..2], inner
 * size I) into s->moe_d; split over devices (p->shards), each device's share of the inner dims,
 * the down products summed in device order. Uses moe_g and moe_u. */
static void expert_rows(cpu_session *s, const thin_wmat *w, const float *x, uint64_t d, uint32_t m,
                        uint64_t I, uint64_t dout) {
    matmat_job g = {s->moe_g, I, d, &w[0], x, m, 0, w[0].cols};
    matmat_job u = {s->moe_u, I, d, &w[1], x, m, 0, w[1].cols};
    run_matmat(s, &g);
    run_matmat(s, &u);
    for (uint32_t i = 0; i < m; i++) op_silu_mul(s->moe_g + (size_t)i * I, s->moe_u + (size_t)i * I, I);
    matmat_job dn = {s->moe_d, dout, I, &w[2], s->moe_g, m, 0, w[2].cols};
    const uint32_t n = s->p->shards;
    if (n <= 1) {
        run_matmat(s, &dn);
        return;
    }
    dn.y = s->part;
    for (uint32_t dv = 0; dv < n; dv++) {
        dn.c0 = I * dv / n, dn.c1 = I * (dv + 1) / n;
        run_matmat(s, &dn);
        for (size_t k = 0; k < (size_t)m * dout; k++) s->moe_d[k] = dv ? s->moe_d[k] + s->part[k] : s->part[k];
    }
}

/* DeepSeek-V3's choice of experts (GLM-4.5's): r becomes sigmoid(r), the choice is made on
 * r + score_bias, only among the topk_group groups (of n_group, contiguous) whose two best choice
 * scores sum highest, the others' choice scores taken as 0 as transformers masks them. */
static void route_sigmoid(cpu_session *s, const plan_op *op, float *r, uint32_t *sel) {
    const uint32_t E = op->n_experts, G = op->n_group, per = E / G;
    float *c = s->moe_r + (size_t)CPU_BATCH * E; /* the choice scores, after the batch's rows */
    float gs[256];
    uint32_t gsel[256];
    for (uint32_t e = 0; e < E; e++) {
        r[e] = 1.0f / (1.0f + expf(-r[e]));
        c[e] = r[e] + (op->score_bias.data ? thin_wmat_get(&op->score_bias, 0, e) : 0.0f);
    }
    if (G > 1) {
        for (uint32_t g = 0; g < G; g++) { /* a group's worth: its two best choice scores */
            uint32_t two[2];
            top_k(c + (size_t)g * per, per, 2, two);
            gs[g] = c[g * per + two[0]] + c[g * per + two[1]];
        }
        top_k(gs, G, op->topk_group, gsel);
        for (uint32_t g = 0; g < G; g++) {
            int keep = 0;
            for (uint32_t j = 0; j < op->topk_group; j++) keep |= gsel[j] == g;
            for (uint32_t e = 0; !keep && e < per; e++) c[g * per + e] = 0.0f;
        }
    }
    top_k(c, E, op->top_k, sel);
}

/* A batch's mixture of experts: the router's scores for every row, each row's top_k experts by
 * the softmax of its scores (their probabilities as weights, renormalized to sum 1 where
 * norm_topk), then expert by expert in index order the rows that chose it as one batch through
 * its gate, up and down, each row's output the sum of its experts' in that order (so a row's
 * result is that of its token run alone). Split over devices (p->shards), each holds a slice of
 * every expert's inner dims (gate and up rows, down columns) and the down products are the sum of
 * the devices' partial ones, as for the dense MLP. A shared expert (Qwen2-MoE's) runs on
 * every row after them, scaled by the sigmoid of its gate's score. */
static void moe_rows(cpu_session *s, const plan_op *op, uint32_t nb) {
    const uint64_t *sz = s->p->buf_sizes;
    const uint64_t d = sz[op->in], dout = sz[op->out], I = op->moe_inter;
    const uint32_t E = op->n_experts, K = op->top_k;
    matmat_job j = {s->moe_r, E, d, &op->w, s->buf[op->in], nb, 0, op->w.cols};
    run_matmat(s, &j);
    for (uint32_t i = 0; i < nb; i++) {
        float *r = s->moe_r + (size_t)i * E, mx = r[0], sum = 0.0f, ksum = 0.0f;
        uint32_t *sel = s->moe_sel + (size_t)i * K;
        if (op->moe_sigmoid) {
            route_sigmoid(s, op, r, sel);
        } else {
            for (uint32_t e = 1; e < E; e++) mx = r[e] > mx ? r[e] : mx;
            for (uint32_t e = 0; e < E; e++) sum += r[e] = expf(r[e] - mx);
            for (uint32_t e = 0; e < E; e++) r[e] /= sum;
            top_k(r, E, K, sel);
        }
        for (uint32_t k = 0; k < K; k++) ksum += r[sel[k]];
        if (op->moe_sigmoid) ksum += 1e-20f; /* as DeepSeek-V3 divides */
        const float scale = op->routed_scale > 0 ? op->routed_scale : 1.0f;
        for (uint32_t k = 0; k < K; k++)
            s->moe_w[(size_t)i * K + k] = (op->norm_topk ? r[sel[k]] / ksum : r[sel[k]]) * scale;
    }
    memset(s->moe_acc, 0, (size_t)nb * dout * sizeof(float));
    for (uint32_t e = 0; e < E; e++) {
        uint32_t m = 0;
        for (uint32_t i = 0; i < nb; i++)
            for (uint32_t k = 0; k < K; k++)
                if (s->moe_sel[(size_t)i * K + k] == e) {
                    s->moe_rows[m] = i * K + k;
                    memcpy(s->moe_x + (size_t)m++ * d, row(s, op->in, i), d * sizeof(float));
                }
        if (!m) continue;
        expert_rows(s, op->experts + 3 * (size_t)e, s->moe_x, d, m, I, dout);
        for (uint32_t i = 0; i < m; i++) {
            const uint32_t at = s->moe_rows[i];
            op_add_scaled(s->moe_acc + (size_t)(at / K) * dout, s->moe_d + (size_t)i * dout, s->moe_w[at], dout);
        }
    }
    if (op->shared_inter) { /* the shared expert, every row's, after the routed ones */
        expert_rows(s, op->shared, row(s, op->in, 0), d, nb, op->shared_inter, dout);
        if (op->shared_gate.data) {
            matmat_job g = {s->moe_r, 1, d, &op->shared_gate, row(s, op->in, 0), nb, 0, d};
            run_matmat(s, &g);
        }
        for (uint32_t i = 0; i < nb; i++)
            op_add_scaled(s->moe_acc + (size_t)i * dout, s->moe_d + (size_t)i * dout,
                          op->shared_gate.data ? 1.0f / (1.0f + expf(-s->moe_r[i])) : 1.0f, dout);
    }
    for (uint32_t i = 0; i < nb; i++) memcpy(row(s, op->out, i), s->moe_acc + (size_t)i * dout, dout * sizeof(float));
}

typedef struct rows_job {
    cpu_session *s;
    const plan_op *op;
    const int32_t *tokens;
    uint32_t nb, pos;
    uint32_t lm0; /* the first row with logits */
} rows_job;

/* Op j->op (one that works row by row) on rows [nb part / n, nb (part + 1) / n) of the batch. */
static void rows_part(void *arg, unsigned part, unsigned n) {
    const rows_job *j = arg;
    const cpu_session *s = j->s;
    const plan_op *op = j->op;
    const uint64_t *sz = s->p->buf_sizes;
    for (uint32_t i = j->nb * part / n; i < j->nb * (part + 1) / n; i++) {
        switch (op->kind) {
        case PLAN_EMBED:
            op_embed(row(s, op->out, i), &op->w, (uint64_t)j->tokens[i]);
            if (op->embed_scale > 0) op_scale(row(s, op->out, i), op->embed_scale, sz[op->out]);
            break;
        case PLAN_RMSNORM:
            op_rmsnorm(row(s, op->out, i), row(s, op->in, i), &op->w, sz[op->in], op->eps, op->norm_offset);
            break;
        case PLAN_HEAD_RMSNORM:
            op_head_rmsnorm(row(s, op->in, i), &op->w, op->n_heads, op->head_dim, op->eps, op->norm_offset);
            break;
        case PLAN_ROPE:
            op_rope(row(s, op->in, i), op->n_heads, op->head_dim, plan_rot_dim(op), j->pos + i,
                    op->theta, op->inv_freq, plan_rope_scale(op));
            break;
        case PLAN_ADD:
            if (plan_add_scaled(op))
                op_add_scaled(row(s, op->out, i), row(s, op->in, i), op->factor, sz[op->in]);
            else
                op_add(row(s, op->out, i), row(s, op->in, i), sz[op->in]);
            break;
        case PLAN_SILU_MUL: op_silu_mul(row(s, op->out, i), row(s, op->in, i), sz[op->in]); break;
        case PLAN_GELU_TANH_MUL: op_gelu_tanh_mul(row(s, op->out, i), row(s, op->in, i), sz[op->in]); break;
        case PLAN_SOFTCAP:
            if (op->in != s->p->logits_buf || i >= j->lm0) op_softcap(row(s, op->in, i), op->softcap, sz[op->in]);
            break;
        case PLAN_SCALE:
            if (op->in != s->p->logits_buf || i >= j->lm0) op_scale(row(s, op->in, i), op->factor, sz[op->in]);
            break;
        case PLAN_BIAS: op_add_bias(row(s, op->out, i), &op->w, sz[op->out]); break;
        case PLAN_LINEAR:
        case PLAN_ATTENTION:
        case PLAN_MOE: break;
        }
    }
}

/* Runs the whole tape for nb tokens at positions pos.., op by op over the rows (row i attends
 * positions up to its own, rows 0..i of the batch, as a token-by-token run would).
 * The linear into the logits runs for rows lm0.. only (none when lm0 == nb): a prompt's other
 * rows need no logits, and each row's are the same whichever rows run beside it. The ops that work
 * row by row split a batch's rows over the threads (SiLU's exponentials, RoPE's angles, the norms
 * and sums of 32 rows are otherwise one thread's work between the linears). */
static void step(cpu_session *s, const int32_t *tokens, uint32_t nb, uint32_t pos, uint32_t lm0) {
    const plan *p = s->p;
    for (uint32_t k = 0; k < p->n_ops; k++) {
        const plan_op *op = &p->ops[k];
        if (op->kind == PLAN_LINEAR) {
            const uint32_t i0 = op->out == p->logits_buf ? lm0 : 0;
            if (i0 < nb) linear(s, op, i0, nb);
            continue;
        }
        if (op->kind == PLAN_ATTENTION) {
            attention_rows(s, op, nb, pos);
            continue;
        }
        if (op->kind == PLAN_MOE) {
            moe_rows(s, op, nb);
            continue;
        }
        rows_job j = {s, op, tokens, nb, pos, lm0};
        const int32_t b = op->in >= 0 ? op->in : op->out;
        run_parts(s, rows_part, &j, nb < 2 ? 0 : (uint64_t)nb * p->buf_sizes[b], ROWS_PARALLEL_MIN);
    }
}

int cpu_session_forward(cpu_session *s, const int32_t *tokens, uint32_t n, uint32_t pos,
                        float *logits, int32_t *argmax) {
    uint32_t vocab = s->p->hp.vocab_size;
    s->nonfinite = 0;
    if (pos > s->max_ctx || n > s->max_ctx - pos) return -1;
    for (uint32_t i = 0; i < n; i++)
        if (tokens[i] < 0 || (uint32_t)tokens[i] >= vocab) return -1;
    for (uint32_t i = 0; i < n; i += CPU_BATCH) {
        uint32_t nb = n - i < CPU_BATCH ? n - i : CPU_BATCH;
        /* every row's logits when asked for, else the last token's alone (cpu_session_logits) */
        const uint32_t lm0 = logits || argmax ? 0 : i + nb == n ? nb - 1 : nb;
        step(s, tokens + i, nb, pos + i, lm0);
        for (uint32_t j = 0; j < nb; j++) {
            const float *out = row(s, s->p->logits_buf, j);
            if (logits) memcpy(logits + (size_t)(i + j) * vocab, out, (size_t)vocab * sizeof(float));
            if (argmax && (argmax[i + j] = (int32_t)op_argmax(out, vocab)) < 0) s->nonfinite = 1;
        }
        s->last = nb - 1;
    }
    return s->nonfinite ? -1 : 0;
}

const float *cpu_session_logits(const cpu_session *s) { return row(s, s->p->logits_buf, s->last); }

static int alloc_caches(cpu_session *s, char *err, size_t errlen) {
    const plan *p = s->p;
    uint32_t nl = p->hp.n_layers;
    s->kcache = calloc(nl, sizeof *s->kcache);
    s->vcache = calloc(nl, sizeof *s->vcache);
    s->kv_dim = calloc(nl, sizeof *s->kv_dim);
    s->ring = calloc(nl, sizeof *s->ring);
    if (!s->kcache || !s->vcache || !s->kv_dim || !s->ring) return -1;
    /* a sliding layer keeps a ring of 2 (window + CPU_BATCH) rows where that is fewer than the
     * context's (env THIN_CPU_RING=0: never; =force: wherever there is a window, to test it) */
    const char *re = getenv("THIN_CPU_RING");
    const int ring_off = re && strcmp(re, "0") == 0, ring_force = re && strcmp(re, "force") == 0;
    for (uint32_t i = 0; i < p->n_ops; i++)
        if (p->ops[i].kind == PLAN_ATTENTION) {
            const plan_op *o = &p->ops[i];
            const uint64_t r = (uint64_t)o->window + CPU_BATCH;
            s->kv_dim[o->layer] = (uint64_t)o->n_kv_heads * o->head_dim;
            if (o->window && o->window < s->max_ctx && !ring_off && (ring_force || 2 * r < s->max_ctx))
                s->ring[o->layer] = (uint32_t)r;
        }
    size_t esz = p->kv_dtype == THIN_DTYPE_F32 ? 4 : 2;
    for (uint32_t l = 0; l < nl; l++) {
        const uint64_t rows = s->ring[l] ? 2 * (uint64_t)s->ring[l] : s->max_ctx;
        uint64_t n = s->kv_dim[l] * rows; /* each < 2^33, so no overflow */
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
        if (!(s->buf[i] = calloc((size_t)CPU_BATCH * p->buf_sizes[i], sizeof(float)))) return -1;
    if (alloc_caches(s, err, errlen)) return -1;
    if (!(s->pool = pool_new(threads ? threads : thin_cpu_count()))) {
        snprintf(err, errlen, "cannot start %u threads", threads);
        return -1;
    }
    if (!(s->scratch = calloc((size_t)pool_size(s->pool) * CPU_BATCH * s->max_ctx, sizeof(float))))
        return -1;
    /* the mixtures' most experts, top k, width and inner size (a row takes an expert once, so an
     * expert's batch has at most CPU_BATCH rows) */
    uint64_t me = 0, mk = 0, md = 0, mi = 0;
    for (uint32_t i = 0; i < p->n_ops; i++) {
        const plan_op *o = &p->ops[i];
        if (o->kind != PLAN_MOE) continue;
        me = o->n_experts > me ? o->n_experts : me;
        mk = o->top_k > mk ? o->top_k : mk;
        md = p->buf_sizes[o->in] > md ? p->buf_sizes[o->in] : md;
        mi = o->moe_inter > mi ? o->moe_inter : mi;
        mi = o->shared_inter > mi ? o->shared_inter : mi;
    }
    if (me) {
        const size_t B = CPU_BATCH;
        if (!(s->moe_r = malloc((B + 1) * me * sizeof(float))) || !(s->moe_w = malloc(B * mk * sizeof(float))) ||
            !(s->moe_x = malloc(B * md * sizeof(float))) || !(s->moe_g = malloc(B * mi * sizeof(float))) ||
            !(s->moe_u = malloc(B * mi * sizeof(float))) || !(s->moe_d = malloc(B * md * sizeof(float))) ||
            !(s->moe_acc = malloc(B * md * sizeof(float))) || !(s->moe_sel = malloc(B * mk * sizeof(uint32_t))) ||
            !(s->moe_rows = malloc(B * sizeof(uint32_t))))
            return -1;
    }
    if (p->shards > 1) { /* as large as the largest buffer a row split or a mixture's down writes */
        uint64_t most = md;
        for (uint32_t i = 0; i < p->n_ops; i++)
            if (p->ops[i].kind == PLAN_LINEAR && p->ops[i].split == PLAN_SPLIT_ROW &&
                p->buf_sizes[p->ops[i].out] > most)
                most = p->buf_sizes[p->ops[i].out];
        if (!(s->part = calloc((size_t)CPU_BATCH * (most ? most : 1), sizeof(float)))) return -1;
    }
    return 0;
}

int cpu_session_create(cpu_session **out, const plan *p, uint32_t max_ctx, unsigned threads,
                       char *err, size_t errlen) {
    *out = NULL;
    if (errlen) err[0] = '\0';
    if (max_ctx == 0 || max_ctx > plan_ctx_limit(p)) {
        snprintf(err, errlen, "context of %u positions is outside 1..%u", max_ctx, plan_ctx_limit(p));
        return -1;
    }
    if (p->shards > 1 && plan_check_split(p, p->shards, err, errlen) != THIN_OK) return -1;
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
    free(s->ring);
    free(s->scratch);
    free(s->part);
    free(s->moe_r);
    free(s->moe_w);
    free(s->moe_x);
    free(s->moe_g);
    free(s->moe_u);
    free(s->moe_d);
    free(s->moe_acc);
    free(s->moe_sel);
    free(s->moe_rows);
    free(s);
}

/* ---- backend_ops wrapper ---- */

/* The CPU's KV caches take the context asked for (their pages are touched only as it fills). */
static int be_create(void **sess, const plan *p, uint32_t *ctx, uint32_t min_ctx, unsigned threads,
                     char *err, size_t errlen) {
    (void)min_ctx;
    return cpu_session_create((cpu_session **)sess, p, *ctx, threads, err, errlen);
}

static int be_forward(void *sess, const int32_t *tokens, uint32_t n, uint32_t pos, float *logits,
                      int32_t *argmax) {
    return cpu_session_forward(sess, tokens, n, pos, logits, argmax);
}

static void be_free(void *sess) { cpu_session_free(sess); }

/* The CPU session fails on positions past its context, ids outside the vocabulary, or logits
 * that are not finite where their argmax was asked (a greedy choice among NaNs). */
static const char *be_error(void *sess) {
    const cpu_session *s = sess;
    return s && s->nonfinite ? "the logits hold NaN or infinity"
                             : "positions past the context or a token id outside the vocabulary";
}

/* no prefill form: a batch's rows are already those of one token at a time, bit for bit */
const backend_ops backend_cpu = {"cpu", be_create, be_forward, be_free, be_error, 2 * CPU_BATCH, NULL, NULL, NULL,
                                  NULL};
