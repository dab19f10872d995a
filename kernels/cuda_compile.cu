/*
 * cuda_compile.cu — turns the plan's op list into fused steps.
 *
 * Patterns recognised (each falls back to one step per op when its conditions fail, so any valid
 * tape runs):
 *   rmsnorm(x → h); linear(h → q); linear(h → k); linear(h → v)   one launch over the rows of all
 *       three, the norm recomputed per block (when h is not read afterwards)
 *   linear(a → h); add(h → x)                                      residual added in the epilogue
 *       (not a scaled add, Granite's: that runs as an add step of its own)
 *   linears as above; bias(q); bias(k); bias(v)                      biases added in the epilogue
 *   [rmsnorm(x → h);] linear(h → g); linear(h → u); silu_mul(u → g)  gate and up rows side by side
 *   [head_rmsnorm(q); head_rmsnorm(k);] rope(q); rope(k); attention(q, k, v)
 *                                                                   one (head norm +) rope + KV store launch
 *   linear q, k, v (as above) followed by that attention step        for one row (decode), rope and
 *       KV store in the matvec's epilogue (rows i and i + head_dim/2 of a head in one warp)
 *   the gate/up pair (as above) followed by linear(g → d); add(d → x)   for one row (decode), the
 *       MLP kernel (mlp.cu), with down stored transposed
 *   attention(q, k, v → a); linear(a → h); add(h → x)               for one row (decode) at short
 *       and middle contexts, the attention + o kernel (attn_o.cu)
 *   the q, k, v step (with its rope and KV store) followed by that attention + o pair   for one row
 *       at the same contexts, the attention block kernel (attn_o.cu's qao_kernel), when it fits
 */
#include <string.h>

#include "cuda_session.cuh"

/* Whether op reads / fully overwrites buffer b. */
static int op_reads(const plan_op *o, int b) {
    switch (o->kind) {
    case PLAN_RMSNORM:
    case PLAN_LINEAR:
    case PLAN_HEAD_RMSNORM:
    case PLAN_ROPE: return o->in == b;
    case PLAN_ATTENTION: return o->q == b || o->k == b || o->v == b;
    case PLAN_ADD:
    case PLAN_SILU_MUL:
    case PLAN_GELU_TANH_MUL: return o->in == b || o->out == b;
    case PLAN_BIAS: return o->out == b;
    case PLAN_SOFTCAP:
    case PLAN_SCALE:
    case PLAN_MOE: return o->in == b;
    default: return 0;
    }
}

static int op_writes(const plan_op *o, int b) {
    switch (o->kind) {
    case PLAN_EMBED:
    case PLAN_RMSNORM:
    case PLAN_LINEAR:
    case PLAN_ATTENTION:
    case PLAN_MOE: return o->out == b;
    default: return 0;
    }
}

/* Whether buffer b is read by ops from index `from` on before something overwrites it. The logits
 * buffer always counts as read (the caller reads it after the tape). */
static int read_later(const plan *p, uint32_t from, int b) {
    if (b == p->logits_buf) return 1;
    for (uint32_t i = from; i < p->n_ops; i++) {
        if (op_reads(&p->ops[i], b)) return 1;
        if (op_writes(&p->ops[i], b)) return 0;
    }
    return 0;
}

static int same_shape(const cuda_session *s, int a, int b) {
    const dmat *x = &s->w[s->op_w[a]], *y = &s->w[s->op_w[b]];
    return x->dtype == y->dtype && x->cols == y->cols && x->pitch == y->pitch;
}

/* Whether a linear already in the group writes buffer b. */
static int writes_any(const plan *p, const step *st, int b) {
    for (int k = 0; k < st->nseg; k++)
        if (p->ops[st->lin[k]].out == b) return 1;
    return 0;
}

/* Absorbs the bias ops from op j on that add a vector of a segment's rows to its whole output
 * (one per segment, in any order) into linear group st; returns the ops consumed. */
static uint32_t group_bias(const cuda_session *s, uint32_t j, step *st) {
    const plan *p = s->p;
    uint32_t used = 0;
    for (; j + used < p->n_ops && p->ops[j + used].kind == PLAN_BIAS; used++) {
        const plan_op *b = &p->ops[j + used];
        int k = 0;
        while (k < st->nseg && (p->ops[st->lin[k]].out != b->out || st->bias[k] >= 0)) k++;
        if (k == st->nseg || s->op_w[j + used] < 0) break;
        const uint64_t rows = s->w[s->op_w[st->lin[k]]].rows;
        if (b->w.rows * b->w.cols != rows || (uint64_t)p->buf_sizes[b->out] != rows) break;
        st->bias[k] = (int)(j + used);
    }
    return used;
}

/* Groups the linears starting at op i (after an optional rmsnorm op nm) into st; returns the number
 * of ops consumed from i. */
static uint32_t group_linear(const cuda_session *s, uint32_t i, int nm, step *st) {
    const plan *p = s->p;
    const plan_op *first = &p->ops[i];
    int avoid = nm >= 0 ? p->ops[nm].in : first->in;
    memset(st, 0, sizeof *st);
    st->kind = STEP_LINEAR;
    st->op = (int)i;
    st->norm_op = -1;
    st->add_op = -1;
    st->rope_q = st->rope_k = -1;
    st->hnorm_q = st->hnorm_k = -1;
    st->attn_step = -1;
    st->bias[0] = st->bias[1] = st->bias[2] = -1;
    st->lin[0] = (int)i;
    st->nseg = 1;
    uint32_t j = i + 1;
    while (st->nseg < 3 && j < p->n_ops && p->ops[j].kind == PLAN_LINEAR &&
           p->ops[j].in == first->in && same_shape(s, (int)i, (int)j) && p->ops[j].out != first->in &&
           p->ops[j].out != avoid && !writes_any(p, st, p->ops[j].out))
        st->lin[st->nseg++] = (int)j++;
    const plan_op *nx = j < p->n_ops ? &p->ops[j] : NULL;
    if (st->nseg >= 2 && i + 2 < p->n_ops && p->ops[i + 2].kind == PLAN_SILU_MUL &&
        p->ops[i + 2].out == first->out && p->ops[i + 2].in == p->ops[i + 1].out &&
        p->ops[i].w.rows == p->ops[i + 1].w.rows && first->out != p->ops[i + 1].out) {
        st->nseg = 2;
        st->pair = 1;
        j = i + 3;
    } else if (st->nseg == 1 && nx && nx->kind == PLAN_ADD && !plan_add_scaled(nx) && nx->in == first->out &&
               nx->out != first->in && nx->out != avoid && nx->out != first->out) {
        st->add_op = (int)j++;
    } else {
        j += group_bias(s, j, st);
    }
    if (first->out == first->in || first->out == avoid) st->nseg = 0; /* refused below */
    if (nm >= 0 && !read_later(p, j, p->ops[nm].out)) st->norm_op = nm;
    return j - i;
}

static int norm_fits(const cuda_session *s, int nm, int lin) {
    const plan_op *n = &s->p->ops[nm];
    const dmat *w = &s->w[s->op_w[lin]];
    return s->op_w[nm] >= 0 && n->w.rows * n->w.cols == w->cols &&
           (size_t)w->pitch * 4 <= 200 * 1024;
}

static void plain_step(step *st, step_kind k, int op) {
    memset(st, 0, sizeof *st);
    st->kind = k;
    st->op = op;
    st->norm_op = st->add_op = st->rope_q = st->rope_k = st->attn_step = -1;
    st->hnorm_q = st->hnorm_k = -1;
    st->bias[0] = st->bias[1] = st->bias[2] = -1;
}

/* Absorbs the head RMSNorm ops (q, k) and then the rope ops from op i into the attention op that
 * follows them; returns ops consumed or 0. */
static uint32_t group_attention(const cuda_session *s, uint32_t i, step *st) {
    const plan *p = s->p;
    int rq = -1, rk = -1, nq = -1, nk = -1;
    uint32_t j = i, jn;
    while (j < p->n_ops && p->ops[j].kind == PLAN_HEAD_RMSNORM) j++;
    jn = j;
    while (j < p->n_ops && p->ops[j].kind == PLAN_ROPE) j++;
    if (j >= p->n_ops || p->ops[j].kind != PLAN_ATTENTION || jn - i > 2 || j - jn > 2) return 0;
    const plan_op *a = &p->ops[j];
    for (uint32_t r = i; r < j; r++) {
        const plan_op *o = &p->ops[r];
        const int norm = r < jn, q = o->in == a->q, k = o->in == a->k;
        const uint32_t heads = q ? a->n_heads : a->n_kv_heads;
        int *slot = norm ? (q ? &nq : &nk) : (q ? &rq : &rk);
        if (o->head_dim != a->head_dim || !(q || k) || *slot >= 0) return 0;
        const uint32_t oh = norm && !o->n_heads ? (uint32_t)(p->buf_sizes[o->in] / o->head_dim) : o->n_heads;
        if (oh != heads || (norm && s->op_w[r] < 0)) return 0;
        *slot = (int)r;
    }
    plain_step(st, STEP_ATTN, (int)j);
    st->rope_q = rq;
    st->rope_k = rk;
    st->hnorm_q = nq;
    st->hnorm_k = nk;
    return j - i + 1;
}

/* Whether linear step l (q, k, v) can do the rope and KV store of attention step a for one row:
 * its outputs are the attention's q, k, v, whole heads on each side, a supported KV dtype, and
 * its rope ops rotate whole heads (the epilogue pairs row r with r + head_dim/2). */
static int qkv_fusable(const cuda_session *s, const step *l, const step *a) {
    const plan *p = s->p;
    if (l->kind != STEP_LINEAR || a->kind != STEP_ATTN || l->nseg != 3 || l->pair || l->add_op >= 0 ||
        a->hnorm_q >= 0 || a->hnorm_k >= 0) /* head norms need whole heads: the rope kernel's */
        return 0;
    const plan_op *at = &p->ops[a->op];
    const int bufs[3] = {at->q, at->k, at->v};
    const uint32_t heads[3] = {at->n_heads, at->n_kv_heads, at->n_kv_heads};
    if (at->head_dim < 2 || at->head_dim % 2) return 0;
    const int ropes[2] = {a->rope_q, a->rope_k};
    for (int r = 0; r < 2; r++)
        if (ropes[r] >= 0 && plan_rot_dim(&p->ops[ropes[r]]) != at->head_dim)
            return 0;
    if (p->kv_dtype != THIN_DTYPE_BF16 && p->kv_dtype != THIN_DTYPE_F32) return 0;
    for (int k = 0; k < 3; k++) {
        const dmat *w = &s->w[s->op_w[l->lin[k]]];
        if (p->ops[l->lin[k]].out != bufs[k] || w->rows != (uint64_t)heads[k] * at->head_dim ||
            w->row0 % at->head_dim)
            return 0;
    }
    return 1;
}

/* Marks every (q, k, v linear, attention) pair of steps for the fused decode epilogue. */
static void fuse_qkv_rope(cuda_session *s) {
    for (uint32_t i = 0; i + 1 < s->n_steps; i++) {
        if (!qkv_fusable(s, &s->steps[i], &s->steps[i + 1])) continue;
        s->steps[i].attn_step = (int)i + 1;
        s->steps[i + 1].kv_fused = 1;
    }
}

/* Whether pair step l1 (gate, up, SiLU gate) and step l2 (down and the residual add) can run as
 * the MLP kernel for one row: l2 takes l1's gated output, and nothing reads that, the up output
 * or down's own output later; weights the kernel takes; down used by no other op. */
static int mlp_fusable(const cuda_session *s, const step *l1, const step *l2) {
    const plan *p = s->p;
    if (l1->kind != STEP_LINEAR || !l1->pair || l1->attn_step >= 0 || l2->kind != STEP_LINEAR ||
        l2->nseg != 1 || l2->pair || l2->add_op < 0 || l2->norm_op >= 0 || l2->attn_step >= 0)
        return 0;
    const plan_op *d = &p->ops[l2->lin[0]], *ad = &p->ops[l2->add_op];
    const int g = p->ops[l1->lin[0]].out, u = p->ops[l1->lin[1]].out;
    const uint32_t end = (uint32_t)(l2->add_op > l2->lin[0] ? l2->add_op : l2->lin[0]) + 1;
    if (d->in != g || ad->out == g || ad->out == u || read_later(p, end, g) ||
        read_later(p, (uint32_t)l2->lin[0], u) || read_later(p, end, d->out))
        return 0;
    const int wi = s->op_w[l2->lin[0]];
    for (uint32_t i = 0; i < p->n_ops; i++)
        if (s->op_w[i] == wi && (int)i != l2->lin[0]) return 0;
    const dmat *gw = &s->w[s->op_w[l1->lin[0]]], *dw = &s->w[wi];
    return !dw->trans && dw->cols == gw->rows && dw->rows == gw->cols &&
           mlp_supported(gw->dtype, dw->dtype, dw->rows, gw->rows);
}

/* Marks every (gate/up pair, down + add) pair of steps for the MLP kernel and stores their down
 * projections transposed (with scratch to transpose one back for a prefill's GEMM). */
static int fuse_mlp(cuda_session *s) {
    size_t scratch = 0;
    for (uint32_t i = 0; i + 1 < s->n_steps; i++) {
        step *l1 = &s->steps[i], *l2 = &s->steps[i + 1];
        if (!mlp_fusable(s, l1, l2)) continue;
        dmat *dw = &s->w[s->op_w[l2->lin[0]]];
        const size_t bytes = (size_t)dw->rows * dw->pitch * thin_dtype_size((thin_dtype)dw->dtype);
        if (transpose_weight(s, dw)) return -1;
        if (bytes > scratch) scratch = bytes;
        l1->mlp = 1;
        l2->mlp_fused = 1;
        i++;
    }
    if (!scratch) return 0;
    if (cuda_alloc(s, &s->d_mlpt, scratch) ||
        cuda_alloc(s, (void **)&s->d_mlpcnt, (size_t)s->n_steps * sizeof(unsigned long long)))
        return -1;
    CK(s, cudaMemset(s->d_mlpcnt, 0, (size_t)s->n_steps * sizeof(unsigned long long)));
    return 0;
}

/* Whether ATTN step a and the LINEAR step l after it (the o-projection of a's output with the
 * residual add) can run as the attention + o kernel for one row: nothing reads the projection's
 * own output later (the kernel adds straight into the residual), weights and shape it takes. */
static int attn_o_fusable(const cuda_session *s, const step *a, const step *l) {
    const plan *p = s->p;
    if (a->kind != STEP_ATTN || l->kind != STEP_LINEAR || l->nseg != 1 || l->pair || l->norm_op >= 0 ||
        l->add_op < 0 || l->attn_step >= 0 || l->mlp || l->mlp_fused)
        return 0;
    const plan_op *at = &p->ops[a->op], *o = &p->ops[l->lin[0]], *ad = &p->ops[l->add_op];
    const uint32_t end = (uint32_t)(l->add_op > l->lin[0] ? l->add_op : l->lin[0]) + 1;
    if (o->in != at->out || ad->out == at->out || ad->out == o->out || read_later(p, end, o->out))
        return 0;
    return attn_o_supported(at->n_heads, at->n_kv_heads, at->head_dim, p->kv_dtype, &s->w[s->op_w[l->lin[0]]]);
}

/* Dynamic shared memory a block may ask for: the device's opt-in limit less 1 KiB for the kernels'
 * static shared memory. */
static int smem_block_max(cuda_session *s, size_t *out) {
    int optin = 0;
    CK(s, cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, 0));
    *out = (size_t)optin > 1024 ? (size_t)optin - 1024 : 0;
    return 0;
}

/* Marks every (attention, o + add) pair of steps for the attention + o kernel and sets the short
 * decode form's limit: positions below ATTN_O_CLUSTER × attn_o_chunk, from thin_cuda_attn_o,
 * within the context and what shared memory holds. With thin_cuda_ao_solo the blocks hold that
 * many positions (or as many as fit) for its solo tokens, the limit unchanged. */
static int fuse_attn_o(cuda_session *s) {
    long want = thin_cuda_attn_o;
    if (want <= 0) return 0;
    if ((uint64_t)want > s->max_ctx) want = (long)s->max_ctx;
    size_t smem_max;
    if (smem_block_max(s, &smem_max)) return -1;
    const uint32_t per = (uint32_t)((want + ATTN_O_CLUSTER - 1) / ATTN_O_CLUSTER);
    uint32_t chunk = per;
    if (thin_cuda_ao_solo > 0 && (uint32_t)thin_cuda_ao_solo > chunk) chunk = (uint32_t)thin_cuda_ao_solo;
    int any = 0;
    for (uint32_t i = 0; i + 1 < s->n_steps; i++) {
        step *a = &s->steps[i], *l = &s->steps[i + 1];
        if (!attn_o_fusable(s, a, l)) continue;
        const plan_op *at = &s->p->ops[a->op];
        const dmat *o = &s->w[s->op_w[l->lin[0]]];
        uint32_t c = chunk;
        while (c && attn_o_smem(at->head_dim, s->p->kv_dtype, o, c) > smem_max) c--;
        if (!c) continue;
        chunk = c; /* every fused step runs with the smallest */
        a->attn_o = 1;
        l->o_fused = 1;
        any = 1;
        i++;
    }
    if (!any) return 0;
    s->attn_o_chunk = chunk;
    s->attn_short = ATTN_O_CLUSTER * (chunk < per ? chunk : per);
    s->attn_o_solo = thin_cuda_ao_solo > 0 ? ((uint32_t)thin_cuda_ao_solo < chunk ? (uint32_t)thin_cuda_ao_solo : chunk) : 0;
    return 0;
}

/* Marks every q, k, v step whose attention step runs the attention + o kernel for the attention
 * block kernel, where it takes the shape, fits shared memory at the short form's positions a
 * block, and its grid fits the SMs at one block each, all resident at once (which its waits rely
 * on). */
static int fuse_qao(cuda_session *s) {
    if (!thin_cuda_qao || !s->attn_o_chunk) return 0;
    size_t smem_max;
    int per_sm_smem = 0;
    if (smem_block_max(s, &smem_max)) return -1;
    CK(s, cudaDeviceGetAttribute(&per_sm_smem, cudaDevAttrMaxSharedMemoryPerMultiprocessor, 0));
    s->qao_smem_min = (uint32_t)per_sm_smem / 2; /* two such blocks do not fit an SM */
    size_t part = 0;
    for (uint32_t i = 0; i + 2 < s->n_steps; i++) {
        step *l = &s->steps[i], *a = &s->steps[i + 1], *o = &s->steps[i + 2];
        if (l->attn_step != (int)i + 1 || !a->attn_o || !o->o_fused) continue;
        const plan_op *at = &s->p->ops[a->op];
        const dmat *q = &s->w[s->op_w[l->lin[0]]], *k = &s->w[s->op_w[l->lin[1]]];
        const dmat *v = &s->w[s->op_w[l->lin[2]]], *ow = &s->w[s->op_w[o->lin[0]]];
        if (!qao_supported(at->n_heads, at->n_kv_heads, at->head_dim, s->p->kv_dtype, q, k, v, ow) ||
            qao_smem(at->head_dim, s->p->kv_dtype, q, ow, s->attn_o_chunk) > smem_max ||
            (uint64_t)ATTN_O_CLUSTER * at->n_heads > (uint64_t)s->n_sm)
            continue;
        qao_args qa;
        qao_args_of(s, l, &qa);
        int per_sm = 0;
        if (qao_per_sm(&qa, &per_sm) != cudaSuccess) {
            cudaGetLastError();
            continue;
        }
        if (per_sm < 1) continue;
        const uint32_t stride = 1 + at->n_kv_heads + 2 * at->n_heads;
        if (stride > s->qao_stride) s->qao_stride = stride;
        const size_t pb = (size_t)at->n_heads * ATTN_O_CLUSTER * (at->head_dim + 4) * sizeof(float);
        if (pb > part) part = pb;
        l->qao = 1;
        a->qao_fused = 1;
    }
    if (!part) return 0;
    const size_t bytes = (size_t)s->n_steps * s->qao_stride * sizeof(unsigned long long);
    if (cuda_alloc(s, (void **)&s->d_qaocnt, bytes) || cuda_alloc(s, (void **)&s->d_qaopart, part)) return -1;
    CK(s, cudaMemset(s->d_qaocnt, 0, bytes));
    return 0;
}

/* cuBLASLt for the prefill's linears (started by session_init's helper thread, see lt_join), with
 * scratch for the widest activations (BF16) and the FP8 weights widened to BF16: a transposed one
 * whole, others in blocks of rows of at most thin_cuda_gemm_widen values (at least 128 rows).
 * Without it (the library missing, or cuBLASLt failing to start: one line on stderr when
 * THIN_CUDA_GEMM=lt asked for it), gemm.cu's kernel runs them all. */
static void gemm_lt_setup(cuda_session *s) {
    lt_join(s);
    gemm_lt *g = s->lt_new;
    s->lt_new = NULL;
    const char *why = s->lt_why ? s->lt_why : "unknown";
    if (g) {
        const size_t cap = (size_t)thin_cuda_gemm_widen;
        size_t k_max = 0, w_elems = 0;
        for (uint32_t i = 0; i < s->n_w; i++) {
            const dmat *w = &s->w[i];
            if (w->dtype != THIN_DTYPE_BF16 && w->dtype != THIN_DTYPE_F8_E4M3) continue;
            const size_t k = ((size_t)w->cols + 7) / 8 * 8;
            if (k > k_max) k_max = k;
            if (w->dtype != THIN_DTYPE_F8_E4M3) continue;
            size_t need = (w->trans ? (size_t)w->cols : (size_t)w->rows) * w->pitch;
            if (!w->trans && need > cap) need = cap > (size_t)128 * w->pitch ? cap : (size_t)128 * w->pitch;
            if (need > w_elems) w_elems = need;
        }
        if (gemm_lt_scratch(g, (size_t)s->max_batch * k_max, w_elems, &why) == cudaSuccess) {
            s->lt = g;
            return;
        }
        gemm_lt_destroy(g);
    }
    cudaGetLastError(); /* clear it: the session goes on without cuBLASLt */
    if (thin_cuda_gemm_lt == THIN_CUDA_GEMM_LT)
        fprintf(stderr, "thin-run: THIN_CUDA_GEMM=lt: no cuBLASLt (%s); the prefill runs the own GEMM\n", why);
}

int compile_steps(cuda_session *s) {
    const plan *p = s->p;
    s->steps = (step *)calloc(p->n_ops ? p->n_ops : 1, sizeof(step));
    if (!s->steps) return cuda_failf(s, "out of memory");
    uint32_t i = 0;
    while (i < p->n_ops) {
        const plan_op *op = &p->ops[i];
        step *st = &s->steps[s->n_steps];
        uint32_t used = 1;
        switch (op->kind) {
        case PLAN_EMBED: plain_step(st, STEP_EMBED, (int)i); break;
        case PLAN_RMSNORM:
            plain_step(st, STEP_RMSNORM, (int)i);
            if (i + 1 < p->n_ops && p->ops[i + 1].kind == PLAN_LINEAR &&
                p->ops[i + 1].in == op->out && norm_fits(s, (int)i, (int)i + 1)) {
                step g;
                uint32_t k = group_linear(s, i + 1, (int)i, &g);
                if (g.nseg > 0 && g.norm_op >= 0) {
                    *st = g;
                    used = 1 + k;
                }
            }
            break;
        case PLAN_LINEAR:
            used = group_linear(s, i, -1, st);
            if (st->nseg == 0)
                return cuda_failf(s, "linear %s writes its own input", op->w_name ? op->w_name : "?");
            break;
        case PLAN_HEAD_RMSNORM:
        case PLAN_ROPE:
            used = group_attention(s, i, st);
            if (!used) {
                plain_step(st, op->kind == PLAN_ROPE ? STEP_ROPE : STEP_HEAD_RMSNORM, (int)i);
                used = 1;
            }
            break;
        case PLAN_ATTENTION: plain_step(st, STEP_ATTN, (int)i); break;
        case PLAN_ADD: plain_step(st, STEP_ADD, (int)i); break;
        case PLAN_SILU_MUL: plain_step(st, STEP_SILU_MUL, (int)i); break;
        case PLAN_BIAS: plain_step(st, STEP_BIAS, (int)i); break;
        case PLAN_GELU_TANH_MUL: plain_step(st, STEP_GELU_MUL, (int)i); break;
        case PLAN_SOFTCAP: plain_step(st, STEP_SOFTCAP, (int)i); break;
        case PLAN_SCALE: plain_step(st, STEP_SCALE, (int)i); break;
        case PLAN_MOE: plain_step(st, STEP_MOE, (int)i); break;
        default: return cuda_failf(s, "op %u: unknown kind %d", i, (int)op->kind);
        }
        s->n_steps++;
        i += used;
    }
    if (thin_cuda_fuse) fuse_qkv_rope(s);
    if (thin_cuda_mlp && fuse_mlp(s)) return -1;
    if (fuse_attn_o(s)) return -1;
    if (fuse_qao(s)) return -1;
    if (s->lt_started) gemm_lt_setup(s);
    return 0;
}
