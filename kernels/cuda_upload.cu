/*
 * cuda_upload.cu — the plan's weights onto the device: each distinct weight (tied ones once)
 * becomes a dmat with rows padded to a multiple of 32 elements (zeros), copied through NSTAGE
 * pinned staging buffers so the host copy of one piece overlaps the DMA of the previous ones; the
 * host copy of a piece is split over a thread pool (the page faults and memory bandwidth of one
 * core would otherwise bound the load).
 * A dmat is a (row range, column range) block of the full matrix, so a split over devices uploads
 * each device's block with the same code.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cuda_session.cuh"

extern "C" {
#include "../tools/thin-run/pool.h"
}

static size_t esize(int dt) { return thin_dtype_size((thin_dtype)dt); }

/* k rows of rb bytes, src_stride apart, to rows of pb bytes (zero padded). */
struct stage_job {
    uint8_t *dst;
    const uint8_t *src;
    size_t k, rb, pb, src_stride;
};

/* Rows [k part / n, k (part + 1) / n) of the job (a pool_fn). */
static void job_part(void *arg, unsigned part, unsigned n) {
    const stage_job *j = (const stage_job *)arg;
    const size_t a = j->k * part / n, b = j->k * (part + 1) / n;
    if (j->pb == j->rb && j->src_stride == j->rb) {
        memcpy(j->dst + a * j->pb, j->src + a * j->rb, (b - a) * j->rb);
        return;
    }
    for (size_t i = a; i < b; i++) {
        memcpy(j->dst + i * j->pb, j->src + i * j->src_stride, j->rb);
        memset(j->dst + i * j->pb + j->rb, 0, j->pb - j->rb);
    }
}

/* The copy pool's threads: env THIN_CUDA_UPLOAD_THREADS (1: the caller alone), by default one
 * per two online CPUs, at most STAGE_THREADS. Without a pool the caller copies alone. */
static pool *stage_pool(void) {
    const char *e = getenv("THIN_CUDA_UPLOAD_THREADS");
    long n = e && *e ? atol(e) : sysconf(_SC_NPROCESSORS_ONLN) / 2;
    if (n > STAGE_THREADS) n = STAGE_THREADS;
    return n >= 2 ? pool_new((unsigned)n) : NULL;
}

static int stager_init(cuda_session *s, stager *g) {
    memset(g, 0, sizeof *g);
    CK(s, cudaStreamCreateWithFlags(&g->st, cudaStreamNonBlocking));
    for (int i = 0; i < NSTAGE; i++) {
        CK(s, cudaHostAlloc(&g->buf[i], STAGE_BYTES, cudaHostAllocDefault));
        CK(s, cudaEventCreateWithFlags(&g->ev[i], cudaEventDisableTiming));
    }
    g->cp = stage_pool();
    return 0;
}

static void stager_free(stager *g) {
    pool_free(g->cp);
    if (g->st) cudaStreamSynchronize(g->st);
    for (int i = 0; i < NSTAGE; i++) {
        if (g->buf[i]) cudaFreeHost(g->buf[i]);
        if (g->ev[i]) cudaEventDestroy(g->ev[i]);
    }
    if (g->st) cudaStreamDestroy(g->st);
}

/* Copies rows [r0, r0 + nr) × cols [c0, c0 + nc) of a host matrix (row stride src_cols elements)
 * to dev with a row pitch of `pitch` elements, zero padded. */
static int stage_rows(cuda_session *s, stager *g, void *dev, const void *src, uint64_t src_cols,
                      size_t esz, uint64_t r0, uint64_t nr, uint64_t c0, uint64_t nc,
                      uint64_t pitch) {
    const size_t pb = (size_t)pitch * esz, rb = (size_t)nc * esz;
    if (pb > STAGE_BYTES) return cuda_failf(s, "a weight row of %zu bytes exceeds the staging buffer", pb);
    const uint64_t per = STAGE_BYTES / pb;
    for (uint64_t r = 0; r < nr; r += per) {
        uint64_t k = nr - r < per ? nr - r : per;
        int b = g->next;
        g->next = (g->next + 1) % NSTAGE;
        CK(s, cudaEventSynchronize(g->ev[b])); /* the DMA that last read this buffer is done */
        uint8_t *dst = (uint8_t *)g->buf[b];
        const stage_job j = {dst, (const uint8_t *)src + ((r0 + r) * src_cols + c0) * esz, (size_t)k,
                             rb, pb, (size_t)src_cols * esz};
        if (g->cp && j.k * j.pb >= ((size_t)1 << 20)) pool_run(g->cp, job_part, (void *)&j);
        else job_part((void *)&j, 0, 1);
        CK(s, cudaMemcpyAsync((uint8_t *)dev + r * pb, dst, (size_t)k * pb, cudaMemcpyHostToDevice,
                              g->st));
        CK(s, cudaEventRecord(g->ev[b], g->st));
    }
    return 0;
}

/* Uploads block (rows [r0, r0+nr), cols [c0, c0+nc)) of a plan weight into *d. */
static int upload_block(cuda_session *s, stager *g, const thin_wmat *hw, uint64_t r0, uint64_t nr,
                        uint64_t c0, uint64_t nc, dmat *d) {
    const size_t esz = esize(hw->dtype);
    if (!dtype_vec_elems(hw->dtype) || !hw->data)
        return cuda_failf(s, "weight dtype %s is not supported on the GPU", thin_dtype_name(hw->dtype));
    if (nr > UINT32_MAX || nc > UINT32_MAX - 32) return cuda_failf(s, "weight too large for the GPU");
    memset(d, 0, sizeof *d);
    d->dtype = hw->dtype;
    d->rows = (uint32_t)nr;
    d->cols = (uint32_t)nc;
    d->pitch = dmat_pitch(nc);
    d->row0 = r0;
    d->col0 = c0;
    void *dev;
    if (cuda_alloc(s, &dev, (size_t)nr * d->pitch * esz)) return -1;
    if (stage_rows(s, g, dev, hw->data, hw->cols, esz, r0, nr, c0, nc, d->pitch)) return -1;
    d->data = dev;
    if (hw->dtype == THIN_DTYPE_F8_E4M3 && hw->scale) {
        void *sc;
        if (cuda_alloc(s, &sc, (size_t)nr * sizeof(float))) return -1;
        if (stage_rows(s, g, sc, hw->scale + r0, 1, sizeof(float), 0, nr, 0, 1, 1)) return -1;
        d->scale = (const float *)sc;
    }
    return 0;
}

int transpose_weight(cuda_session *s, dmat *w) {
    const size_t esz = esize(w->dtype);
    const uint32_t tp = dmat_pitch(w->rows); /* the transpose's rows hold the matrix's columns */
    const size_t bytes = (size_t)w->cols * tp * esz;
    void *dev;
    if (cuda_alloc(s, &dev, bytes)) return -1;
    CK(s, launch_transpose(dev, tp, w->data, w->pitch, w->rows, w->cols, esz, s->st));
    CK(s, cudaStreamSynchronize(s->st));
    cuda_free_one(s, (void *)w->data);
    w->data = dev;
    w->pitch = tp;
    w->trans = 1;
    return 0;
}

/* Whether op n is the head norm of attention op a's q (same layer). */
static int is_q_head_norm(const plan_op *n, const plan_op *a) {
    return n->kind == PLAN_HEAD_RMSNORM && a->kind == PLAN_ATTENTION && n->layer == a->layer && n->in == a->q;
}

float norm_fold_factor(const plan *p, uint32_t i) {
    if (p->ops[i].kind != PLAN_HEAD_RMSNORM) return 1.0f;
    for (uint32_t j = 0; j < p->n_ops; j++) {
        const plan_op *a = &p->ops[j];
        if (is_q_head_norm(&p->ops[i], a) && !plan_attn_scale_default(a))
            return a->attn_scale * sqrtf((float)a->head_dim);
    }
    return 1.0f;
}

float attn_scale_arg(const plan *p, const plan_op *a) {
    if (plan_attn_scale_default(a)) return 0.0f;
    for (uint32_t j = 0; j < p->n_ops; j++)
        if (is_q_head_norm(&p->ops[j], a)) return 0.0f; /* its norm_fold_factor carries the scale */
    return a->attn_scale;
}

/* Whether op i's weights go up folded (offset + w) × norm_fold_factor, as F32. */
static int folded(const plan *p, uint32_t i) {
    const plan_op *o = &p->ops[i];
    return (o->kind == PLAN_RMSNORM || o->kind == PLAN_HEAD_RMSNORM) &&
           (o->norm_offset != 0.0f || norm_fold_factor(p, i) != 1.0f);
}

/* Uploads a vector weight (its rows × cols elements, any dtype) as one F32 row, each element
 * (offset + w) × f. */
static int upload_f32(cuda_session *s, stager *g, const thin_wmat *hw, float offset, float f, dmat *d) {
    const uint64_t n = hw->rows * hw->cols;
    float *v = (float *)malloc((n ? n : 1) * sizeof(float));
    if (!v) return cuda_failf(s, "out of memory");
    for (uint64_t k = 0; k < n; k++) v[k] = (offset + thin_wmat_get(hw, 0, k)) * f;
    const thin_wmat t = {v, THIN_DTYPE_F32, NULL, 1, n};
    int rc = upload_block(s, g, &t, 0, 1, 0, n, d);
    /* the staging copies run before upload_block returns; the DMA reads the pinned buffer */
    free(v);
    return rc;
}

/* Uploads norm op i's weights folded (see folded). */
static int upload_folded(cuda_session *s, stager *g, uint32_t i, dmat *d) {
    const plan_op *o = &s->p->ops[i];
    return upload_f32(s, g, &o->w, o->norm_offset, norm_fold_factor(s->p, i), d);
}

/* Index of an already uploaded weight with the same host data, or -1 (fold: the ops whose
 * weights went up folded, which nothing shares). */
static int find_same(const cuda_session *s, const thin_wmat *hw, const int *owner,
                     const unsigned char *fold) {
    const plan *p = s->p;
    for (uint32_t j = 0; j < p->n_ops; j++) {
        if (s->op_w[j] < 0 || fold[j]) continue;
        const thin_wmat *o = &p->ops[j].w;
        if (o->data == hw->data && o->dtype == hw->dtype && o->rows == hw->rows &&
            o->cols == hw->cols && o->scale == hw->scale)
            return owner[j];
    }
    return -1;
}

/* Moe op i's experts (and shared expert) into a device table of dmats, its shared gate and its
 * choice bias (the router is the op's weight, uploaded as any other); then the scratch of the
 * largest moe op for max_batch rows. */
static int upload_moe(cuda_session *s, stager *g) {
    const plan *p = s->p;
    size_t n_sc = 0, n_slot = 0, n_h = 0, n_d = 0, n_cnt = 0;
    for (uint32_t i = 0; i < p->n_ops; i++) {
        const plan_op *o = &p->ops[i];
        if (o->kind != PLAN_MOE) continue;
        if (!s->op_moe) {
            s->op_moe = (moe_dev *)calloc(p->n_ops, sizeof(moe_dev));
            if (!s->op_moe) return cuda_failf(s, "out of memory");
        }
        moe_dev *m = &s->op_moe[i];
        const uint32_t E = o->n_experts, KS = moe_slots(o);
        const size_t nt = 3 * ((size_t)E + 1); /* table entries: every expert's three, the shared one's */
        dmat *h = (dmat *)calloc(nt, sizeof(dmat));
        if (!h) return cuda_failf(s, "out of memory");
        int rc = 0;
        for (uint32_t k = 0; rc == 0 && k < 3 * E; k++) {
            const thin_wmat *w = &o->experts[k];
            rc = upload_block(s, g, w, 0, w->rows, 0, w->cols, &h[k]);
        }
        for (uint32_t k = 0; rc == 0 && o->shared_inter && k < 3; k++)
            rc = upload_block(s, g, &o->shared[k], 0, o->shared[k].rows, 0, o->shared[k].cols, &h[3 * E + k]);
        /* one dtype for all gate and up rows, one for all down rows: the one-row kernels' case */
        const uint32_t nm = 3 * E + (o->shared_inter ? 3 : 0);
        m->gu_dtype = h[0].dtype, m->dn_dtype = h[2].dtype;
        for (uint32_t k = 0; rc == 0 && k < nm; k++) {
            const dmat *x = &h[k];
            int *dt = k % 3 == 2 ? &m->dn_dtype : &m->gu_dtype;
            if (x->dtype != *dt || (k % 3 != 2 && x->pitch != h[0].pitch)) *dt = -1;
        }
        void *tab = NULL;
        if (rc == 0 && (rc = cuda_alloc(s, &tab, nt * sizeof(dmat))) == 0 &&
            cudaMemcpy(tab, h, nt * sizeof(dmat), cudaMemcpyHostToDevice) != cudaSuccess)
            rc = cuda_failf(s, "expert table upload failed");
        free(h);
        if (rc) return rc;
        m->tab = (dmat *)tab;
        if (o->shared_gate.data &&
            upload_block(s, g, &o->shared_gate, 0, 1, 0, o->shared_gate.cols, &m->sgate))
            return -1;
        if (o->score_bias.data) {
            dmat b;
            if (upload_f32(s, g, &o->score_bias, 0.0f, 1.0f, &b)) return -1;
            m->bias = (float *)b.data;
        }
        m->imax = o->moe_inter > o->shared_inter ? o->moe_inter : o->shared_inter;
        const size_t b = s->max_batch;
        const size_t sc = b * (E + 1), sl = b * KS, hh = sl * m->imax, dd = sl * p->buf_sizes[o->out];
        n_sc = sc > n_sc ? sc : n_sc;
        n_slot = sl > n_slot ? sl : n_slot;
        n_h = hh > n_h ? hh : n_h;
        n_d = dd > n_d ? dd : n_d;
        n_cnt = nt + 1 > n_cnt ? nt + 1 : n_cnt;
    }
    if (!n_sc) return 0;
    void *v[7];
    const size_t bytes[7] = {n_sc * 4, n_slot * 4, n_h * 4, n_d * 4, n_slot * 4, n_cnt * 4, n_slot * 4};
    for (int k = 0; k < 7; k++)
        if (cuda_alloc(s, &v[k], bytes[k])) return -1;
    s->d_moe_scores = (float *)v[0];
    s->d_moe_wts = (float *)v[1];
    s->d_moe_hb = (float *)v[2];
    s->d_moe_db = (float *)v[3];
    s->d_moe_sel = (int32_t *)v[4];
    s->d_moe_cnt = (uint32_t *)v[5];
    s->d_moe_list = (uint32_t *)v[6];
    return 0;
}

int upload_weights(cuda_session *s) {
    const plan *p = s->p;
    stager g;
    int rc = stager_init(s, &g);
    int *owner = (int *)calloc(p->n_ops ? p->n_ops : 1, sizeof(int));
    unsigned char *fold = (unsigned char *)calloc(p->n_ops ? p->n_ops : 1, 1);
    s->w = (dmat *)calloc(p->n_ops ? p->n_ops : 1, sizeof(dmat));
    if (!owner || !fold || !s->w) rc = cuda_failf(s, "out of memory");
    for (uint32_t i = 0; rc == 0 && i < p->n_ops; i++) fold[i] = (unsigned char)folded(p, i);
    for (uint32_t i = 0; rc == 0 && i < p->n_ops; i++) {
        const thin_wmat *hw = &p->ops[i].w;
        if (!hw->data) continue;
        if (fold[i]) {
            if (upload_folded(s, &g, i, &s->w[s->n_w])) rc = -1;
            else s->op_w[i] = owner[i] = (int)s->n_w++;
            continue;
        }
        int same = find_same(s, hw, owner, fold);
        if (same >= 0) {
            s->op_w[i] = owner[i] = same;
            continue;
        }
        if (upload_block(s, &g, hw, 0, hw->rows, 0, hw->cols, &s->w[s->n_w])) rc = -1;
        else s->op_w[i] = owner[i] = (int)s->n_w++;
    }
    if (rc == 0 && upload_moe(s, &g)) rc = -1;
    if (rc == 0 && g.st && cudaStreamSynchronize(g.st) != cudaSuccess)
        rc = cuda_failf(s, "weight upload failed: %s", cudaGetErrorString(cudaGetLastError()));
    stager_free(&g);
    free(owner);
    free(fold);
    return rc;
}

/* Inverse frequencies (double) of every ROPE op: the plan's table, or theta^(-2i/rot_dim). */
int upload_rope_tables(cuda_session *s) {
    const plan *p = s->p;
    for (uint32_t i = 0; i < p->n_ops; i++) {
        const plan_op *op = &p->ops[i];
        if (op->kind != PLAN_ROPE) continue;
        const uint32_t rd = plan_rot_dim(op), half = rd / 2;
        double *h = (double *)malloc((half ? half : 1) * sizeof(double));
        if (!h) return cuda_failf(s, "out of memory");
        for (uint32_t j = 0; j < half; j++)
            h[j] = op->inv_freq ? (double)op->inv_freq[j]
                                : pow((double)op->theta, -2.0 * (double)j / (double)rd);
        void *d;
        int rc = cuda_alloc(s, &d, (half ? half : 1) * sizeof(double));
        if (rc == 0 && cudaMemcpy(d, h, half * sizeof(double), cudaMemcpyHostToDevice) != cudaSuccess)
            rc = cuda_failf(s, "rope table upload failed");
        free(h);
        if (rc) return rc;
        s->op_freq[i] = (double *)d;
    }
    return 0;
}
