/*
 * cuda_upload.cu — the plan's weights onto the device: each distinct weight (tied ones once)
 * becomes a dmat with rows padded to a multiple of 32 elements (zeros), copied through NSTAGE
 * pinned staging buffers so the host copy of one piece overlaps the DMA of the previous ones; the
 * host copy of a piece is split over helper threads (page faults and memory bandwidth of one core
 * would otherwise bound the load).
 * A dmat is a (row range, column range) block of the full matrix, so a split over devices uploads
 * each device's block with the same code.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cuda_session.cuh"

static size_t esize(int dt) { return thin_dtype_size((thin_dtype)dt); }

/* Rows [k t / parts, k (t + 1) / parts) of the job: part t of `parts`. */
static void job_part(const stage_job *j, int t, int parts) {
    const size_t a = j->k * (size_t)t / (size_t)parts, b = j->k * (size_t)(t + 1) / (size_t)parts;
    if (j->pb == j->rb && j->src_stride == j->rb) {
        memcpy(j->dst + a * j->pb, j->src + a * j->rb, (b - a) * j->rb);
        return;
    }
    for (size_t i = a; i < b; i++) {
        memcpy(j->dst + i * j->pb, j->src + i * j->src_stride, j->rb);
        memset(j->dst + i * j->pb + j->rb, 0, j->pb - j->rb);
    }
}

struct stage_worker {
    stager *g;
    int t;
};

static void *stage_thread(void *arg) {
    stager *g = ((stage_worker *)arg)->g;
    const int t = ((stage_worker *)arg)->t;
    free(arg);
    unsigned seen = 0;
    pthread_mutex_lock(&g->mu);
    for (;;) {
        while (!g->quit && g->gen == seen) pthread_cond_wait(&g->go, &g->mu);
        if (g->quit) break;
        seen = g->gen;
        const stage_job j = g->job;
        pthread_mutex_unlock(&g->mu);
        job_part(&j, t + 1, g->n_th + 1);
        pthread_mutex_lock(&g->mu);
        if (--g->pending == 0) pthread_cond_signal(&g->done);
    }
    pthread_mutex_unlock(&g->mu);
    return NULL;
}

/* The job's rows, split over the caller and the helpers (the caller alone for small jobs). */
static void stage_copy(stager *g, const stage_job *j) {
    if (!g->n_th || j->k * j->pb < ((size_t)1 << 20)) {
        job_part(j, 0, 1);
        return;
    }
    pthread_mutex_lock(&g->mu);
    g->job = *j;
    g->pending = g->n_th;
    g->gen++;
    pthread_cond_broadcast(&g->go);
    pthread_mutex_unlock(&g->mu);
    job_part(j, 0, g->n_th + 1);
    pthread_mutex_lock(&g->mu);
    while (g->pending) pthread_cond_wait(&g->done, &g->mu);
    pthread_mutex_unlock(&g->mu);
}

/* Helper threads for the host copies: env THIN_CUDA_UPLOAD_THREADS (1: the caller alone), by
 * default one per two online CPUs, at most STAGE_THREADS in all. A helper that cannot start
 * leaves fewer. */
static void stager_threads(stager *g) {
    const char *e = getenv("THIN_CUDA_UPLOAD_THREADS");
    long n = e && *e ? atol(e) : sysconf(_SC_NPROCESSORS_ONLN) / 2;
    if (n > STAGE_THREADS) n = STAGE_THREADS;
    if (n < 2) return;
    if (pthread_mutex_init(&g->mu, NULL)) return;
    if (pthread_cond_init(&g->go, NULL)) {
        pthread_mutex_destroy(&g->mu);
        return;
    }
    if (pthread_cond_init(&g->done, NULL)) {
        pthread_cond_destroy(&g->go);
        pthread_mutex_destroy(&g->mu);
        return;
    }
    g->sync_ok = 1;
    for (int i = 0; i < n - 1; i++) {
        stage_worker *w = (stage_worker *)malloc(sizeof *w);
        if (!w) break;
        w->g = g, w->t = i;
        if (pthread_create(&g->th[i], NULL, stage_thread, w)) {
            free(w);
            break;
        }
        g->n_th = i + 1; /* a helper reads n_th only once a job has set gen, after this */
    }
}

static int stager_init(cuda_session *s, stager *g) {
    memset(g, 0, sizeof *g);
    CK(s, cudaStreamCreateWithFlags(&g->st, cudaStreamNonBlocking));
    for (int i = 0; i < NSTAGE; i++) {
        CK(s, cudaHostAlloc(&g->buf[i], STAGE_BYTES, cudaHostAllocDefault));
        CK(s, cudaEventCreateWithFlags(&g->ev[i], cudaEventDisableTiming));
    }
    stager_threads(g);
    return 0;
}

static void stager_free(stager *g) {
    if (g->sync_ok) {
        pthread_mutex_lock(&g->mu);
        g->quit = 1;
        pthread_cond_broadcast(&g->go);
        pthread_mutex_unlock(&g->mu);
        for (int i = 0; i < g->n_th; i++) pthread_join(g->th[i], NULL);
        pthread_cond_destroy(&g->done);
        pthread_cond_destroy(&g->go);
        pthread_mutex_destroy(&g->mu);
    }
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
        stage_copy(g, &j);
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
    CK(s, cudaMemsetAsync(dev, 0, bytes, s->st));
    CK(s, launch_transpose(dev, tp, w->data, w->pitch, w->rows, w->cols, esz, s->st));
    CK(s, cudaStreamSynchronize(s->st));
    cuda_free_one(s, (void *)w->data);
    w->data = dev;
    w->pitch = tp;
    w->trans = 1;
    return 0;
}

/* Index of an already uploaded weight with the same host data, or -1. */
static int find_same(const cuda_session *s, const thin_wmat *hw, const int *owner) {
    const plan *p = s->p;
    for (uint32_t j = 0; j < p->n_ops; j++) {
        if (s->op_w[j] < 0) continue;
        const thin_wmat *o = &p->ops[j].w;
        if (o->data == hw->data && o->dtype == hw->dtype && o->rows == hw->rows &&
            o->cols == hw->cols && o->scale == hw->scale)
            return owner[j];
    }
    return -1;
}

int upload_weights(cuda_session *s) {
    const plan *p = s->p;
    stager g;
    int rc = stager_init(s, &g);
    int *owner = (int *)calloc(p->n_ops ? p->n_ops : 1, sizeof(int));
    s->w = (dmat *)calloc(p->n_ops ? p->n_ops : 1, sizeof(dmat));
    if (!owner || !s->w) rc = cuda_failf(s, "out of memory");
    for (uint32_t i = 0; rc == 0 && i < p->n_ops; i++) {
        const thin_wmat *hw = &p->ops[i].w;
        if (!hw->data) continue;
        int same = find_same(s, hw, owner);
        if (same >= 0) {
            s->op_w[i] = owner[i] = same;
            continue;
        }
        if (upload_block(s, &g, hw, 0, hw->rows, 0, hw->cols, &s->w[s->n_w])) rc = -1;
        else s->op_w[i] = owner[i] = (int)s->n_w++;
    }
    if (rc == 0 && g.st && cudaStreamSynchronize(g.st) != cudaSuccess)
        rc = cuda_failf(s, "weight upload failed: %s", cudaGetErrorString(cudaGetLastError()));
    stager_free(&g);
    free(owner);
    return rc;
}

/* Inverse frequencies (double) of every ROPE op: the plan's table, or theta^(-2i/head_dim). */
int upload_rope_tables(cuda_session *s) {
    const plan *p = s->p;
    for (uint32_t i = 0; i < p->n_ops; i++) {
        const plan_op *op = &p->ops[i];
        if (op->kind != PLAN_ROPE) continue;
        uint32_t half = op->head_dim / 2;
        double *h = (double *)malloc((half ? half : 1) * sizeof(double));
        if (!h) return cuda_failf(s, "out of memory");
        for (uint32_t j = 0; j < half; j++)
            h[j] = op->inv_freq ? (double)op->inv_freq[j]
                                : pow((double)op->theta, -2.0 * (double)j / (double)op->head_dim);
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
