/*
 * cuda_exec.cu — runs the compiled steps for n rows (row i at position *d_pos + i).
 *
 * One row (decode): runs of linear and attention steps go to the persistent kernel (stream.cu);
 * otherwise every linear group is one matvec launch with its fusions (the q, k, v group also
 * rotates q and k and stores k and v into the cache), a gate/up group with the down
 * projection after it one MLP kernel, and at short and middle contexts the attention with the
 * o-projection after it one attention + o kernel, which where it fits also takes the q, k, v step
 * before it (the attention block kernel). The whole step list plus the argmax is
 * captured once into a CUDA graph, with the copies of (position, token) in and of the argmax
 * out, so each token is one graph launch. Several rows (prefill): linears run as tensor-core GEMMs
 * (BF16 and FP8 weights; F32/F16 weights run the matvec row by row to stay exact), the other ops
 * as their batched kernels.
 */
#include "cuda_session.cuh"

static inline uint32_t ld_of(const cuda_session *s, int b) { return (uint32_t)s->p->buf_sizes[b]; }
static inline float *row_of(const cuda_session *s, int b, uint32_t r) {
    return s->buf[b] + (size_t)r * ld_of(s, b);
}

/* What the rope kernels need of ROPE op `op` (-1: none): its frequencies on the device (NULL: no
 * rotation), the factor on cos and sin (1 without one) and the rotated dims of a head. */
static void rope_of(const cuda_session *s, int op, const double **freq, float *m, uint32_t *rot) {
    *freq = op >= 0 ? s->op_freq[op] : NULL;
    *m = op >= 0 ? plan_rope_scale(&s->p->ops[op]) : 1.0f;
    *rot = op >= 0 ? plan_rot_dim(&s->p->ops[op]) : 0;
}

/* What the rope kernel needs of HEAD_RMSNORM op `op` (-1: none): its weights (NULL: no norm),
 * their dtype and the epsilon. */
static void head_norm_of(const cuda_session *s, int op, const void **w, int *dt, float *eps) {
    const dmat *m = op >= 0 ? &s->w[s->op_w[op]] : NULL;
    *w = m ? m->data : NULL;
    *dt = m ? m->dtype : 0;
    *eps = op >= 0 ? s->p->ops[op].eps : 0.0f;
}

/* The rope and KV-store epilogue of a q, k, v group (step attn_step's rope ops and caches). */
static void rope_epilogue(const cuda_session *s, const step *st, mv_args *a) {
    const step *at = &s->steps[st->attn_step];
    const plan_op *o = &s->p->ops[at->op];
    a->rope = 1;
    a->head_dim = o->head_dim;
    a->kv_dtype = s->p->kv_dtype;
    a->pos = s->d_pos;
    uint32_t rot; /* whole heads: qkv_fusable leaves partial rotations to the rope kernel */
    rope_of(s, at->rope_q, &a->seg[0].freq, &a->seg[0].rope_m, &rot);
    rope_of(s, at->rope_k, &a->seg[1].freq, &a->seg[1].rope_m, &rot);
    a->seg[1].cache = s->op_kc[at->op];
    a->seg[2].cache = s->op_vc[at->op];
}

/* The gate/up dtype of the last MLP kernel before step st, or -1 when none runs before it. */
static int mlp_dtype_before(const cuda_session *s, const step *st) {
    for (const step *b = st - 1; b >= s->steps; b--)
        if (b->mlp) return (int)s->w[s->op_w[b->lin[0]]].dtype;
    return -1;
}

/* Warps per block of the q/k/v matvec at step st: 8 after an MLP kernel with FP8 gate/up (one
 * block of 24 warps per SM), 12 otherwise (H200, SmolLM3-3B: see matvec.cu's launch_dt). */
static int qkv_warps(const cuda_session *s, const step *st) {
    return mlp_dtype_before(s, st) == THIN_DTYPE_F8_E4M3 ? 8 : 12;
}

/* Whether the q/k/v matvec at step st copies its rows into shared memory as its blocks start
 * (matvec_smem_kernel, where they fit): THIN_CUDA_MV_SMEM=1 always, =0 never, by default after
 * an MLP kernel with FP8 gate/up, which then runs in its slim block so that these blocks start
 * beside it (run_mlp). After a BF16 MLP the rows' bytes, streamed during the MLP, lengthen it by
 * as much as they shorten the q/k/v step (an H100 with SmolLM3-3B BF16: 407.7 against 412.4
 * tokens/s; quality FP8, with the slim MLP block: 594.8 and 594.6 against 583.1 and 582.5;
 * bench/decode-variants.sh, bench/results/decode-notes.md's twenty-second round). */
static int qkv_smem(const cuda_session *s, const step *st) {
    if (thin_cuda_mv_smem >= 0) return thin_cuda_mv_smem > 0;
    return mlp_dtype_before(s, st) == THIN_DTYPE_F8_E4M3;
}

void linear_args(const cuda_session *s, const step *st, uint32_t r, int fuse, mv_args *a) {
    const plan *p = s->p;
    memset(a, 0, sizeof *a);
    a->nseg = st->nseg;
    a->pair = st->pair;
    for (int k = 0; k < st->nseg; k++) {
        const plan_op *o = &p->ops[st->lin[k]];
        a->seg[k].w = s->w[s->op_w[st->lin[k]]];
        a->seg[k].out = row_of(s, o->out, r);
        if (st->bias[k] >= 0) {
            const dmat *b = &s->w[s->op_w[st->bias[k]]];
            a->bias[k] = b->data;
            a->bias_dtype[k] = b->dtype;
        }
    }
    const plan_op *o0 = &p->ops[st->lin[0]];
    if (st->norm_op >= 0) {
        const plan_op *nm = &p->ops[st->norm_op];
        const dmat *nw = &s->w[s->op_w[st->norm_op]];
        a->x = row_of(s, nm->in, r);
        a->norm_w = nw->data;
        a->norm_dtype = nw->dtype;
        a->eps = nm->eps;
    } else {
        a->x = row_of(s, o0->in, r);
    }
    if (st->add_op >= 0) a->resid = row_of(s, p->ops[st->add_op].out, r);
    if (fuse && st->attn_step >= 0) {
        rope_epilogue(s, st, a);
        a->warps = qkv_warps(s, st);
        a->smem = qkv_smem(s, st);
    }
}

/* The matvec of a linear group for one row r; fuse: the decode's rope epilogue when planned. */
static int linear_row(cuda_session *s, const step *st, uint32_t r, int fuse) {
    mv_args a;
    linear_args(s, st, r, fuse, &a);
    CK(s, launch_matvec(&a, s->n_sm, s->st));
    return 0;
}

/* A prefill linear over n rows: cuBLASLt where it takes the shape (by default only from
 * LT_AUTO_ROWS rows), else gemm.cu's kernel (a transposed weight as stored with thin_cuda_gemm_t,
 * else the caller transposes it back for it). 1: not taken by either here. */
static int use_lt(const cuda_session *s, uint32_t n) {
    return s->lt && (thin_cuda_gemm_lt == THIN_CUDA_GEMM_LT || n >= LT_AUTO_ROWS);
}

static int gemm(cuda_session *s, const dmat *w, const float *x, uint32_t ldx, float *out, uint32_t ldo,
                float *resid, uint32_t ldr, uint32_t n) {
    if (use_lt(s, n)) {
        const cudaError_t e = launch_gemm_lt(s->lt, w, x, ldx, out, ldo, resid, ldr, n, s->st);
        if (e == cudaSuccess) return 0;
        if (e == cudaErrorUnknown) return cuda_failf(s, "cuBLASLt: %s", gemm_lt_status(s->lt));
        if (e != cudaErrorNotSupported) return cuda_fail(s, __FILE__, __LINE__, "launch_gemm_lt", e);
    }
    if (w->trans && !thin_cuda_gemm_t) return 1;
    CK(s, launch_gemm(w, x, ldx, out, ldo, resid, ldr, n, s->n_sm, s->st));
    return 0;
}

static int gemmable(const dmat *w) {
    return w->dtype == THIN_DTYPE_BF16 || w->dtype == THIN_DTYPE_F8_E4M3;
}

/* The SiLU gate after a gate/up pair's products over n rows (nothing for other groups). */
static int silu_pair(cuda_session *s, const step *st, uint32_t n) {
    if (!st->pair) return 0;
    const plan *p = s->p;
    int g = p->ops[st->lin[0]].out, u = p->ops[st->lin[1]].out;
    CK(s, launch_silu_mul(s->buf[g], ld_of(s, g), s->buf[u], ld_of(s, u), s->w[s->op_w[st->lin[0]]].rows, n, s->st));
    return 0;
}

/* The SiLU gate after a gate/up pair's products, or the biases a q, k, v group took, over n rows
 * (after the GEMMs, which have no bias epilogue). */
static int gemm_tail(cuda_session *s, const step *st, uint32_t n) {
    for (int k = 0; k < st->nseg; k++) {
        if (st->bias[k] < 0) continue;
        const int b = s->p->ops[st->lin[k]].out;
        CK(s, launch_bias(s->buf[b], ld_of(s, b), &s->w[s->op_w[st->bias[k]]], ld_of(s, b), n, s->st));
    }
    return silu_pair(s, st, n);
}

/* A linear group over rows [0, n): GEMMs when the weights allow, else matvec row by row. */
static int run_linear(cuda_session *s, const step *st, uint32_t n, int lm_last) {
    const plan *p = s->p;
    uint32_t r0 = 0;
    for (int k = 0; k < st->nseg; k++)
        if (lm_last && p->ops[st->lin[k]].out == p->logits_buf) r0 = n - 1;
    if (n - r0 == 1 || !gemmable(&s->w[s->op_w[st->lin[0]]])) {
        for (uint32_t r = r0; r < n; r++)
            if (linear_row(s, st, r, n == 1)) return -1;
        return 0;
    }
    int in = p->ops[st->lin[0]].in;
    if (st->norm_op >= 0) {
        const plan_op *nm = &p->ops[st->norm_op];
        const dmat *nw = &s->w[s->op_w[st->norm_op]];
        CK(s, launch_rmsnorm(s->buf[nm->out], ld_of(s, nm->out), s->buf[nm->in], ld_of(s, nm->in), nw,
                             nw->rows * nw->cols, nm->eps, n, s->st));
    }
    if (st->nseg > 1 && st->add_op < 0 && !use_lt(s, n)) { /* one launch for the group */
        const dmat *ws[3];
        float *outs[3];
        uint32_t lds[3];
        const int ns = st->nseg <= 3 ? st->nseg : 0;
        for (int k = 0; k < ns; k++) {
            const plan_op *o = &p->ops[st->lin[k]];
            ws[k] = &s->w[s->op_w[st->lin[k]]];
            outs[k] = s->buf[o->out];
            lds[k] = ld_of(s, o->out);
        }
        if (ns && !ws[0]->trans && gemm_segs_fit(ws, ns)) {
            CK(s, launch_gemm_segs(ws, outs, lds, st->nseg, s->buf[in], ld_of(s, in), NULL, 0, n, s->n_sm, s->st));
            return gemm_tail(s, st, n);
        }
    }
    for (int k = 0; k < st->nseg; k++) {
        const plan_op *o = &p->ops[st->lin[k]];
        float *resid = NULL;
        uint32_t ldr = 0;
        if (st->add_op >= 0) {
            resid = s->buf[p->ops[st->add_op].out];
            ldr = ld_of(s, p->ops[st->add_op].out);
        }
        if (gemm(s, &s->w[s->op_w[st->lin[k]]], s->buf[in], ld_of(s, in), s->buf[o->out], ld_of(s, o->out),
                 resid, ldr, n))
            return -1;
    }
    return gemm_tail(s, st, n);
}

void qao_args_of(const cuda_session *s, const step *st, qao_args *q) {
    const step *at = &s->steps[st->attn_step], *ol = at + 1;
    memset(q, 0, sizeof *q);
    linear_args(s, st, 0, 1, &q->mv);
    attn_common(s, at, &q->ao.a);
    q->ao.a.chunk_max = s->attn_o_chunk;
    q->ao.o = s->w[s->op_w[ol->lin[0]]];
    q->ao.resid = row_of(s, s->p->ops[ol->add_op].out, 0);
    if (s->d_qaocnt) q->count = s->d_qaocnt + (size_t)(st - s->steps) * s->qao_stride;
    q->part = s->d_qaopart;
    q->smem_min = s->qao_smem_min;
}

/* The attention block kernel for one row: q, k, v step st, the attention step after it and that
 * one's o-projection step. */
static int run_qao(cuda_session *s, const step *st) {
    qao_args q;
    qao_args_of(s, st, &q);
    CK(s, launch_qao(&q, s->st));
    return 0;
}

/* The MLP kernel's arguments for one row: pair step st with the down + add step dn after it. */
static void mlp_args_of(const cuda_session *s, const step *st, const step *dn, mlp_args *mp) {
    mlp_args &m = *mp;
    memset(&m, 0, sizeof m);
    linear_args(s, st, 0, 0, &m.mv);
    m.down = s->w[s->op_w[dn->lin[0]]];
    m.resid = row_of(s, s->p->ops[dn->add_op].out, 0);
    m.count = s->d_mlpcnt + (st - s->steps);
    for (const step *q = dn + 1; q < s->steps + s->n_steps; q++)
        if (q->attn_step >= 0 || q->mlp) { /* the next layer's q/k/v, as the decode runs it */
            if (q->attn_step >= 0 && !(q->qao && s->short_now)) {
                mv_args a;
                linear_args(s, q, 0, 1, &a);
                m.next_smem = matvec_smem_taken(&a, s->n_sm);
            }
            break;
        }
}

/* The MLP kernel for one row: pair step st with the down + add step dn after it. */
static int run_mlp(cuda_session *s, const step *st, const step *dn) {
    mlp_args m;
    mlp_args_of(s, st, dn, &m);
    CK(s, launch_mlp(&m, s->n_sm, s->st));
    return 0;
}

/* The first rows of the MLP kernel's blocks after attention step st (before the next attention) for
 * the decode attention kernel (the attention + o kernel, or the cluster kernel of longer contexts)
 * to ask L2 for (l2_ahead), or pf->at 0: none, or no MLP kernel there. */
static void mlp_ahead_of(const cuda_session *s, const step *st, l2_ahead *pf) {
    memset(pf, 0, sizeof *pf);
    if (thin_cuda_mlp_pf[0] <= 0) return;
    for (const step *q = st + 1; q + 1 < s->steps + s->n_steps; q++) {
        if (q->kind == STEP_ATTN || q->attn_step >= 0) return; /* the next layer's attention */
        if (!q->mlp) continue;
        mlp_args m;
        mlp_args_of(s, q, q + 1, &m);
        uint32_t units = 0;
        m.units_only = &units;
        if (launch_mlp(&m, s->n_sm, s->st) != cudaSuccess || units == 0) {
            (void)cudaGetLastError(); /* the MLP's own launch reports it */
            return;
        }
        const dmat *g = &m.mv.seg[0].w, *u = &m.mv.seg[1].w;
        pf->gate = (const uint8_t *)g->data;
        pf->up = (const uint8_t *)u->data;
        pf->row_bytes = (uint64_t)g->pitch * thin_dtype_size((thin_dtype)g->dtype);
        pf->units = units;
        pf->ahead = (uint32_t)thin_cuda_mlp_pf[0] < units ? (uint32_t)thin_cuda_mlp_pf[0] : units;
        pf->rows = g->rows;
        pf->at = (uint32_t)thin_cuda_mlp_pf[1];
        return;
    }
}

/* A down + add step whose weights are stored transposed, for several rows: cuBLASLt takes them
 * as stored, and so does gemm.cu's kernel with thin_cuda_gemm_t; else they are transposed back
 * into the scratch first. */
static int run_down_t(cuda_session *s, const step *st, uint32_t n) {
    const plan *p = s->p;
    const plan_op *o = &p->ops[st->lin[0]], *ad = &p->ops[st->add_op];
    const dmat *wt = &s->w[s->op_w[st->lin[0]]];
    const int r = gemm(s, wt, s->buf[o->in], ld_of(s, o->in), s->buf[o->out], ld_of(s, o->out), s->buf[ad->out],
                       ld_of(s, ad->out), n);
    if (r <= 0) return r; /* cuBLASLt took it as stored, or failed */
    dmat w = *wt;
    w.data = s->d_mlpt;
    w.pitch = dmat_pitch(w.cols);
    w.trans = 0;
    CK(s, launch_transpose(s->d_mlpt, w.pitch, wt->data, wt->pitch, wt->cols, wt->rows,
                           thin_dtype_size((thin_dtype)w.dtype), s->st));
    CK(s, launch_gemm(&w, s->buf[o->in], ld_of(s, o->in), s->buf[o->out], ld_of(s, o->out),
                      s->buf[ad->out], ld_of(s, ad->out), n, s->n_sm, s->st));
    return 0;
}

void attn_common(const cuda_session *s, const step *st, attn_args *t) {
    const plan *p = s->p;
    const plan_op *a = &p->ops[st->op];
    memset(t, 0, sizeof *t);
    t->q = s->buf[a->q];
    t->ldq = ld_of(s, a->q);
    t->kcache = s->op_kc[st->op];
    t->vcache = s->op_vc[st->op];
    t->kv_dtype = p->kv_dtype;
    t->out = s->buf[a->out];
    t->ldo = ld_of(s, a->out);
    t->n_heads = a->n_heads;
    t->n_kv = a->n_kv_heads;
    t->head_dim = a->head_dim;
    t->pos = s->d_pos;
    t->window = a->window;
    t->softcap = a->softcap;
    t->scale = attn_scale_arg(p, a);
}

static int run_attention(cuda_session *s, const step *st, uint32_t n) {
    if (n == 1 && s->short_now && st->qao_fused) return 0; /* run by the q, k, v step before it */
    const plan *p = s->p;
    const plan_op *a = &p->ops[st->op];
    rope_args r;
    memset(&r, 0, sizeof r);
    r.q = s->buf[a->q];
    r.ldq = ld_of(s, a->q);
    r.n_heads = a->n_heads;
    rope_of(s, st->rope_q, &r.q_freq, &r.q_m, &r.q_rot);
    r.k = s->buf[a->k];
    r.ldk = ld_of(s, a->k);
    r.n_kv = a->n_kv_heads;
    rope_of(s, st->rope_k, &r.k_freq, &r.k_m, &r.k_rot);
    r.v = s->buf[a->v];
    r.ldv = ld_of(s, a->v);
    r.kcache = s->op_kc[st->op];
    r.vcache = s->op_vc[st->op];
    r.kv_dtype = p->kv_dtype;
    r.head_dim = a->head_dim;
    r.pos = s->d_pos;
    head_norm_of(s, st->hnorm_q, &r.q_norm, &r.q_norm_dt, &r.q_eps);
    head_norm_of(s, st->hnorm_k, &r.k_norm, &r.k_norm_dt, &r.k_eps);
    /* one row through the attention + o kernel: it takes the rope and KV store that the q/k/v
     * step's epilogue did not (attn_o_args.r) where it can */
    const int ao = n == 1 && s->short_now && st->attn_o;
    const int ao_rope = ao && !st->kv_fused && attn_o_rope_supported(a->head_dim);
    if (!(st->kv_fused && n == 1) && !ao_rope) CK(s, launch_rope_store(&r, n, s->st));
    attn_args t;
    attn_common(s, st, &t);
    t.n_splits = n == 1 ? s->dec_splits : s->n_splits;
    t.chunk_max = n == 1 ? s->dec_chunk : s->chunk_max;
    t.min_chunk = s->dec_min_chunk;
    t.partial = s->d_attnpart;
    t.counter = thin_cuda_fuse ? s->d_attncnt : NULL; /* NULL: the per-head kernels */
    t.cluster = n == 1 && thin_cuda_fuse && thin_cuda_cluster;
    if (ao) { /* with the o-projection after it (attn_o.cu) */
        const step *ol = st + 1;
        attn_o_args aa;
        memset(&aa, 0, sizeof aa);
        aa.a = t;
        aa.a.chunk_max = s->attn_o_chunk;
        aa.solo = s->attn_o_solo;
        aa.o = s->w[s->op_w[ol->lin[0]]];
        aa.resid = row_of(s, p->ops[ol->add_op].out, 0);
        if (ao_rope) aa.r = r;
        mlp_ahead_of(s, st, &aa.a.pf);
        CK(s, launch_attn_o(&aa, s->st));
        return 0;
    }
    if (n == 1 && t.cluster) mlp_ahead_of(s, st, &t.pf); /* the cluster kernel asks as it starts */
    CK(s, launch_attention(&t, n, s->st));
    return 0;
}

static int run_rope(cuda_session *s, const step *st, uint32_t n) {
    const plan_op *o = &s->p->ops[st->op];
    rope_args r;
    memset(&r, 0, sizeof r);
    r.q = s->buf[o->in];
    r.ldq = ld_of(s, o->in);
    r.n_heads = o->n_heads;
    rope_of(s, st->op, &r.q_freq, &r.q_m, &r.q_rot);
    r.head_dim = o->head_dim;
    r.pos = s->d_pos;
    CK(s, launch_rope_store(&r, n, s->st));
    return 0;
}

static int run_step(cuda_session *s, const step *st, uint32_t n, int lm_last) {
    const plan *p = s->p;
    const plan_op *o = &p->ops[st->op];
    const dmat *w = s->op_w[st->op] >= 0 ? &s->w[s->op_w[st->op]] : NULL;
    switch (st->kind) {
    case STEP_EMBED:
        CK(s, launch_embed(s->buf[o->out], ld_of(s, o->out), w, s->d_tokens,
                           o->embed_scale > 0 ? o->embed_scale : 1.0f, n, s->st));
        return 0;
    case STEP_RMSNORM:
        CK(s, launch_rmsnorm(s->buf[o->out], ld_of(s, o->out), s->buf[o->in], ld_of(s, o->in), w,
                             w->rows * w->cols, o->eps, n, s->st));
        return 0;
    case STEP_LINEAR:
        if (st->qao && n == 1 && s->short_now) return run_qao(s, st);
        if (st->mlp && n == 1) return run_mlp(s, st, st + 1);
        if (st->mlp_fused) return n == 1 ? 0 : run_down_t(s, st, n);
        if (st->o_fused && n == 1 && s->short_now) return 0; /* run with the attention before it */
        return run_linear(s, st, n, lm_last);
    case STEP_HEAD_RMSNORM:
        CK(s, launch_head_rmsnorm(s->buf[o->in], ld_of(s, o->in), w,
                                  o->n_heads ? o->n_heads : ld_of(s, o->in) / o->head_dim,
                                  o->head_dim, o->eps, n, s->st));
        return 0;
    case STEP_ROPE: return run_rope(s, st, n);
    case STEP_ATTN: return run_attention(s, st, n);
    case STEP_ADD:
        CK(s, launch_add(s->buf[o->out], ld_of(s, o->out), s->buf[o->in], ld_of(s, o->in),
                         ld_of(s, o->out), plan_add_scaled(o) ? o->factor : 1.0f, n, s->st));
        return 0;
    case STEP_SILU_MUL:
        CK(s, launch_silu_mul(s->buf[o->out], ld_of(s, o->out), s->buf[o->in], ld_of(s, o->in),
                              ld_of(s, o->out), n, s->st));
        return 0;
    case STEP_BIAS:
        CK(s, launch_bias(s->buf[o->out], ld_of(s, o->out), w, ld_of(s, o->out), n, s->st));
        return 0;
    case STEP_GELU_MUL:
        CK(s, launch_gelu_tanh_mul(s->buf[o->out], ld_of(s, o->out), s->buf[o->in], ld_of(s, o->in),
                                   ld_of(s, o->out), n, s->st));
        return 0;
    case STEP_SOFTCAP:
    case STEP_SCALE: { /* in place, on the rows the LM head wrote where it is the logits */
        const uint32_t r0 = lm_last && o->in == s->p->logits_buf ? n - 1 : 0, ld = ld_of(s, o->in);
        float *x = s->buf[o->in] + (size_t)r0 * ld;
        if (st->kind == STEP_SOFTCAP) CK(s, launch_softcap(x, ld, ld, o->softcap, n - r0, s->st));
        else CK(s, launch_scale(x, ld, ld, o->factor, n - r0, s->st));
        return 0;
    }
    case STEP_MOE: {
        if (!w || !s->op_moe) return cuda_failf(s, "internal: moe op %d has no weights on the device", st->op);
        const moe_dev *m = &s->op_moe[st->op];
        moe_args a;
        memset(&a, 0, sizeof a);
        a.x = s->buf[o->in];
        a.out = s->buf[o->out];
        a.ldx = ld_of(s, o->in);
        a.ldo = ld_of(s, o->out);
        a.router = *w;
        a.sgate = m->sgate;
        a.tab = m->tab;
        a.bias = m->bias;
        a.E = o->n_experts;
        a.K = o->top_k;
        a.KS = moe_slots(o);
        a.n_group = o->n_group ? o->n_group : 1;
        a.topk_group = o->topk_group ? o->topk_group : 1;
        a.norm_topk = (uint32_t)o->norm_topk;
        a.sigmoid = (uint32_t)o->moe_sigmoid;
        a.routed_scale = o->routed_scale;
        a.imax = m->imax;
        a.hout = ld_of(s, o->out);
        a.scores = s->d_moe_scores;
        a.wts = s->d_moe_wts;
        a.hb = s->d_moe_hb;
        a.db = s->d_moe_db;
        a.sel = s->d_moe_sel;
        a.cnt = s->d_moe_cnt;
        a.list = s->d_moe_list;
        a.gu_dtype = m->gu_dtype;
        a.dn_dtype = m->dn_dtype;
        CK(s, launch_moe(&a, n, s->n_sm, s->st));
        return 0;
    }
    }
    return cuda_failf(s, "internal: unknown step kind %d", (int)st->kind);
}

int exec_steps_range(cuda_session *s, uint32_t from, uint32_t to, uint32_t n) {
    for (uint32_t i = from; i < to && i < s->n_steps; i++)
        if (run_step(s, &s->steps[i], n, 0)) return -1;
    return 0;
}

int exec_steps(cuda_session *s, uint32_t n, int lm_last) {
    for (uint32_t i = 0; i < s->n_steps;) {
        const stream_run *r = n == 1 ? stream_at(s, i) : NULL;
        if (r) { /* one row: the persistent kernel takes the run */
            if (stream_launch(s, r)) return -1;
            i = stream_end(r);
        } else {
            if (run_step(s, &s->steps[i], n, lm_last)) return -1;
            i++;
        }
    }
    return 0;
}

static int capture(cuda_session *s) {
    CK(s, cudaStreamBeginCapture(s->st, cudaStreamCaptureModeThreadLocal));
    cudaError_t e = cudaSuccess;
    int rc = exec_steps(s, 1, 0);
    if (rc == 0) {
        int lb = s->p->logits_buf;
        e = launch_argmax_next(s->d_argmax, s->buf[lb], ld_of(s, lb), s->d_argpart, s->d_pos, s->d_next,
                               s->d_ring, s->st);
        if (e == cudaSuccess)
            e = cudaMemcpyAsync(s->h_am, s->d_argmax, sizeof(int32_t), cudaMemcpyDeviceToHost, s->st);
        if (e != cudaSuccess) rc = cuda_fail(s, __FILE__, __LINE__, "launch_argmax", e);
    }
    cudaGraph_t g = NULL;
    e = cudaStreamEndCapture(s->st, &g);
    if (rc) {
        if (e == cudaSuccess && g) cudaGraphDestroy(g);
        return -1;
    }
    CK(s, e);
    const int k = s->short_now ? 1 : 0;
    e = cudaGraphInstantiate(&s->graph[k], g, 0);
    cudaGraphDestroy(g);
    CK(s, e);
    s->graph_ready[k] = 1;
    return 0;
}

int exec_capture_decode(cuda_session *s) {
    const int keep = s->short_now;
    const int first = s->attn_short ? 1 : 0, last = first && !two_decode_forms(s) ? 1 : 0;
    int rc = 0;
    for (int k = first; rc == 0 && k >= last; k--) {
        s->short_now = k;
        if (!s->graph_ready[k]) rc = capture(s);
    }
    s->short_now = keep;
    return rc;
}

int exec_decode_graph(cuda_session *s) {
    const int k = s->short_now ? 1 : 0;
    if (!s->graph_ready[k]) {
        if (capture(s)) return -1;
        /* with two attention forms that the context reaches, the other graph too, now rather
         * than as a stall when the decode first crosses between them */
        if (two_decode_forms(s) && !s->graph_ready[1 - k]) {
            s->short_now = !k;
            const int rc = capture(s);
            s->short_now = k;
            if (rc) return -1;
        }
    }
    CK(s, cudaGraphLaunch(s->graph[k], s->st));
    return 0;
}
