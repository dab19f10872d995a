/*
 * cuda_backend.cu — the CUDA backend's C API (tools/thin-run/backend.h, kernels/cuda_backend.h):
 * session creation (weights, buffers, KV caches, compiled steps), forward, sampling and teardown.
 * Every CUDA call is checked; a failure leaves "file:line: call: error" in the session's message
 * and returns -1. Nothing here exits or aborts.
 */
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_session.cuh"
#include "matvec_dev.cuh"

#define MAX_BATCH 512u

int thin_cuda_pdl = 1;
int thin_cuda_fuse = 1;
int thin_cuda_cluster = 1;
int thin_cuda_attn_o = ATTN_O_DEFAULT;
int thin_cuda_qao = 0;
int thin_cuda_carveout = -1;
int thin_cuda_mv_minb = 0, thin_cuda_mv_bps = 0, thin_cuda_mv_small_bps = 0, thin_cuda_mv_small_mb = 0;
int thin_cuda_mv_pipe = 0, thin_cuda_mv_pipe_bps = 0;
int thin_cuda_mv_x4 = 4096;
int thin_cuda_mv_single = 3;
int thin_cuda_mv_dual = 1, thin_cuda_mv_warps = 0, thin_cuda_mv_slim = 0;
int thin_cuda_mv_smem = -1, thin_cuda_mv_smem_ns = 0;
unsigned long long thin_cuda_launches = 0;

int cuda_fail(cuda_session *s, const char *file, int line, const char *what, cudaError_t e) {
    if (s) snprintf(s->err, sizeof s->err, "%s:%d: %s: %s", file, line, what, cudaGetErrorString(e));
    return -1;
}

int cuda_failf(cuda_session *s, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(s->err, sizeof s->err, fmt, ap);
    va_end(ap);
    return -1;
}

int cuda_alloc(cuda_session *s, void **ptr, size_t bytes) {
    *ptr = NULL;
    if (s->n_allocs == s->cap_allocs) {
        uint32_t cap = s->cap_allocs ? 2 * s->cap_allocs : 64;
        void **a = (void **)realloc(s->allocs, cap * sizeof *a);
        if (!a) return cuda_failf(s, "out of memory");
        s->allocs = a;
        s->cap_allocs = cap;
    }
    CK(s, cudaMalloc(ptr, bytes ? bytes : 16));
    s->allocs[s->n_allocs++] = *ptr;
    return 0;
}

void cuda_free_one(cuda_session *s, void *ptr) {
    for (uint32_t i = 0; i < s->n_allocs; i++) {
        if (s->allocs[i] != ptr) continue;
        cudaFree(ptr);
        s->allocs[i] = s->allocs[--s->n_allocs];
        return;
    }
}

extern "C" int cuda_backend_available(void) {
    int n = 0;
    return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}

extern "C" const char *cuda_session_error(const cuda_session *s) { return s ? s->err : ""; }

extern "C" uint64_t cuda_session_weight_bytes(const cuda_session *s) {
    uint64_t t = 0;
    for (uint32_t i = 0; s && i < s->n_w; i++)
        t += (uint64_t)s->w[i].rows * s->w[i].pitch * thin_dtype_size((thin_dtype)s->w[i].dtype);
    return t;
}

extern "C" int cuda_device_describe(char *buf, size_t len) {
    cudaDeviceProp pr;
    if (!cuda_backend_available() || cudaGetDeviceProperties(&pr, 0) != cudaSuccess) return -1;
    snprintf(buf, len, "%s, %d SMs, %.1f GiB", pr.name, pr.multiProcessorCount,
             (double)pr.totalGlobalMem / (1u << 30));
    return 0;
}

/* Shared memory the decode attention kernel may take (the H200 allows 227 KiB per block). */
#define ATTN_DEC_SMEM (200u * 1024u)

/* Attention splits: `want` splits, fewer when the context is short (each at least ATTN_MIN_CHUNK
 * positions), more when one split's scores would not fit in shared memory. */
static void split_plan(const cuda_session *s, uint32_t want, uint32_t group, uint32_t head_dim,
                       uint32_t *n_splits, uint32_t *chunk_max) {
    uint32_t most = (s->max_ctx + ATTN_MIN_CHUNK - 1) / ATTN_MIN_CHUNK;
    uint32_t ns = want < most ? want : most;
    if (ns < 1) ns = 1;
    uint32_t cm = (s->max_ctx + ns - 1) / ns;
    while (attn_smem_floats(head_dim, group, cm < ATTN_MIN_CHUNK ? ATTN_MIN_CHUNK : cm, ns) * 4 > 200 * 1024 &&
           cm > ATTN_MIN_CHUNK) {
        ns *= 2;
        cm = (s->max_ctx + ns - 1) / ns;
    }
    *n_splits = ns;
    *chunk_max = cm < ATTN_MIN_CHUNK ? ATTN_MIN_CHUNK : cm;
}

/* A byte count for a message: "1.5 GiB", "12.0 MiB", "312.5 KiB". */
static const char *mem_size(char *buf, size_t n, size_t bytes) {
    const double b = (double)bytes;
    if (b >= 1024.0 * 1024 * 1024) snprintf(buf, n, "%.1f GiB", b / (1024.0 * 1024 * 1024));
    else if (b >= 1024.0 * 1024) snprintf(buf, n, "%.1f MiB", b / (1024.0 * 1024));
    else snprintf(buf, n, "%.1f KiB", b / 1024.0);
    return buf;
}

/* Buffers, KV caches and scratch. */
static int alloc_state(cuda_session *s) {
    const plan *p = s->p;
    for (uint32_t i = 0; i < p->n_bufs; i++) {
        if (p->buf_sizes[i] > UINT32_MAX / MAX_BATCH) return cuda_failf(s, "buffer %s too large", p->buf_names[i]);
        if (cuda_alloc(s, (void **)&s->buf[i], (size_t)s->max_batch * p->buf_sizes[i] * sizeof(float)))
            return -1;
        CK(s, cudaMemset(s->buf[i], 0, (size_t)s->max_batch * p->buf_sizes[i] * sizeof(float)));
    }
    size_t kvsz = thin_dtype_size(p->kv_dtype);
    /* The KV caches at once: where they cannot fit what the device has free (a tenth of it kept
     * for the rest of the state; THIN_CUDA_KV_MEM=BYTES caps them further, to share a GPU), take
     * as many positions as fit where the caller allows fewer, down to min_ctx, else say how many
     * would fit (the context defaults to the model's limit, which may be far more). */
    size_t per_pos = 0, free_b = 0, total_b = 0;
    for (uint32_t i = 0; i < p->n_ops; i++)
        if (p->ops[i].kind == PLAN_ATTENTION)
            per_pos += 2 * (size_t)p->ops[i].n_kv_heads * p->ops[i].head_dim * kvsz;
    if (per_pos && cudaMemGetInfo(&free_b, &total_b) == cudaSuccess) {
        const char *cap = getenv("THIN_CUDA_KV_MEM");
        const size_t capb = cap && *cap ? (size_t)strtoull(cap, NULL, 10) : SIZE_MAX;
        const size_t limit = capb < free_b ? capb : free_b, room = free_b / 10 * 9;
        const size_t fit = (limit < room ? limit : room) / per_pos;
        if (fit < s->max_ctx && fit >= s->min_ctx) {
            s->max_ctx = (uint32_t)fit;
        } else if (per_pos * s->max_ctx > limit) {
            char hint[64] = "", need[32], have[32];
            if (fit) snprintf(hint, sizeof hint, ": pass --ctx %zu or less", fit);
            return cuda_failf(s, "the KV cache of %u positions needs %s and %s %s%s", s->max_ctx,
                              mem_size(need, sizeof need, per_pos * s->max_ctx),
                              capb < free_b ? "THIN_CUDA_KV_MEM allows" : "the GPU has free",
                              mem_size(have, sizeof have, limit), hint);
        }
    }
    uint32_t maxh = 1, maxhd = 1, maxg = 1, min_kv = UINT32_MAX;
    for (uint32_t i = 0; i < p->n_ops; i++) {
        const plan_op *o = &p->ops[i];
        if (o->kind != PLAN_ATTENTION) continue;
        if (!o->n_kv_heads || !o->head_dim || o->n_heads % o->n_kv_heads || o->head_dim % 2)
            return cuda_failf(s, "attention op %u: bad head counts", i);
        if (o->head_dim > 1024)
            return cuda_failf(s, "attention op %u: head_dim %u is above the 1024 the GPU kernels take", i, o->head_dim);
        size_t bytes = (size_t)s->max_ctx * o->n_kv_heads * o->head_dim * kvsz;
        if (cuda_alloc(s, &s->op_kc[i], bytes) || cuda_alloc(s, &s->op_vc[i], bytes)) return -1;
        CK(s, cudaMemset(s->op_kc[i], 0, bytes));
        CK(s, cudaMemset(s->op_vc[i], 0, bytes));
        maxh = o->n_heads > maxh ? o->n_heads : maxh;
        maxhd = o->head_dim > maxhd ? o->head_dim : maxhd;
        maxg = o->n_heads / o->n_kv_heads > maxg ? o->n_heads / o->n_kv_heads : maxg;
        min_kv = o->n_kv_heads < min_kv ? o->n_kv_heads : min_kv;
    }
    s->attn_max_heads = maxh, s->attn_max_head_dim = maxhd;
    s->attn_min_kv = min_kv == UINT32_MAX ? 0 : min_kv;
    if (min_kv == UINT32_MAX) min_kv = 1;
    /* Several rows: about two blocks per SM over the query heads. One row: about two blocks per SM
     * over the KV heads (the grouped kernel), each split at least ATTN_MIN_CHUNK positions. */
    split_plan(s, (2u * (uint32_t)s->n_sm + maxh - 1) / maxh, maxg, maxhd, &s->n_splits, &s->chunk_max);
    if (thin_cuda_fuse && thin_cuda_cluster) {
        /* The cluster kernel: whole clusters of 8 splits, about two blocks per SM over the KV
         * heads for long contexts (short ones use the first cluster only). */
        uint32_t ns = (2u * (uint32_t)s->n_sm + min_kv * 8 - 1) / (min_kv * 8) * 8;
        const char *ds = getenv("THIN_CUDA_DEC_SPLITS"); /* for measurements */
        const char *mc = getenv("THIN_CUDA_ATTN_CHUNK");     /* fewest positions per split */
        /* 32 positions per block: more blocks fetch the K and V rows sooner, which pays for the
         * cluster combine (measured on the H200 against 64 and 256, bench/decode-variants.sh). */
        uint32_t mcw = mc && atoi(mc) > 0 ? ((uint32_t)atoi(mc) + 31) / 32 * 32 : 32;
        while (mcw > 32 && attn_decode_smem(maxhd, maxg, mcw, p->kv_dtype) > ATTN_DEC_SMEM) mcw -= 32;
        s->dec_min_chunk = mcw;
        if (ds && atoi(ds) > 0) ns = ((uint32_t)atoi(ds) + 7) / 8 * 8;
        if (ns < 8) ns = 8;
        for (;;) { /* the K and V rows of a split are staged in shared memory */
            s->dec_chunk = attn_decode_chunk_max(s->max_ctx, ns, s->dec_min_chunk);
            if (attn_decode_smem(maxhd, maxg, s->dec_chunk, p->kv_dtype) <= ATTN_DEC_SMEM || ns >= 4096) break;
            ns *= 2;
        }
        s->dec_splits = ns;
        if (attn_smem_floats(maxhd, maxg, s->dec_chunk, ns) * 4 > 200 * 1024)
            return cuda_failf(s, "context %u too long for the attention kernels", s->max_ctx);
    } else if (thin_cuda_fuse) {
        split_plan(s, (2u * (uint32_t)s->n_sm + min_kv - 1) / min_kv, maxg, maxhd, &s->dec_splits, &s->dec_chunk);
    } else {
        s->dec_splits = s->n_splits, s->dec_chunk = s->chunk_max;
    }
    size_t part = (size_t)s->max_batch * maxh * s->n_splits * (maxhd + 2) * sizeof(float);
    size_t part1 = (size_t)maxh * s->dec_splits * (maxhd + 2) * sizeof(float);
    if (part1 > part) part = part1;
    size_t ncnt = (size_t)s->max_batch * maxh;
    uint32_t vocab = (uint32_t)p->buf_sizes[p->logits_buf];
    if (cuda_alloc(s, (void **)&s->d_attnpart, part) ||
        cuda_alloc(s, (void **)&s->d_attncnt, ncnt * sizeof(unsigned int)) ||
        cuda_alloc(s, (void **)&s->d_io, (s->max_batch + 1) * sizeof(int32_t)) ||
        cuda_alloc(s, (void **)&s->d_argmax, s->max_batch * sizeof(int32_t)) ||
        cuda_alloc(s, (void **)&s->d_argpart, (size_t)s->max_batch * ARGMAX_PARTS * sizeof(float2)) ||
        cuda_alloc(s, (void **)&s->d_samp, sample_scratch_bytes()) ||
        cuda_alloc(s, (void **)&s->d_prob, (size_t)vocab * sizeof(float)))
        return -1;
    s->d_pos = s->d_io;
    s->d_tokens = s->d_io + 1;
    CK(s, cudaMemset(s->d_attncnt, 0, ncnt * sizeof(unsigned int)));
    CK(s, cudaMemset(s->d_io, 0, (s->max_batch + 1) * sizeof(int32_t)));
    CK(s, cudaHostAlloc((void **)&s->h_io, (2 * (size_t)s->max_batch + 1) * sizeof(int32_t),
                        cudaHostAllocDefault));
    s->h_am = s->h_io + 1 + s->max_batch;
    if (cuda_alloc(s, (void **)&s->d_next, 2 * sizeof(int32_t))) return -1;
    CK(s, cudaHostAlloc((void **)&s->h_ring, DECODE_RING * sizeof(int32_t), cudaHostAllocMapped));
    CK(s, cudaHostGetDevicePointer((void **)&s->d_ring, s->h_ring, 0));
    for (int k = 0; k < 2; k++) CK(s, cudaEventCreateWithFlags(&s->ev_step[k], cudaEventDisableTiming));
    return 0;
}

/* Zeroes the first `rows` positions of every layer's K and V caches (what a warm-up wrote). */
static int clear_kv_rows(cuda_session *s, uint32_t rows) {
    const plan *p = s->p;
    for (uint32_t i = 0; i < p->n_ops; i++) {
        if (p->ops[i].kind != PLAN_ATTENTION) continue;
        size_t bytes = (size_t)rows * p->ops[i].n_kv_heads * p->ops[i].head_dim * thin_dtype_size(p->kv_dtype);
        CK(s, cudaMemsetAsync(s->op_kc[i], 0, bytes, s->st));
        CK(s, cudaMemsetAsync(s->op_vc[i], 0, bytes, s->st));
    }
    CK(s, cudaStreamSynchronize(s->st));
    return 0;
}

/* One eager decode step at creation: sets kernel attributes outside graph capture and surfaces
 * launch errors early; then the caches it touched are cleared and the decode graphs captured. */
static int warm_up(cuda_session *s) {
    /* each attention form the decode can reach, at position 0 */
    const int first = s->attn_short ? 1 : 0, last = first && !two_decode_forms(s) ? 1 : 0;
    for (int k = first; k >= last; k--) {
        s->short_now = k;
        if (exec_steps(s, 1, 0)) return -1;
    }
    if (clear_kv_rows(s, 1)) return -1;
    return exec_capture_decode(s);
}

/* Every op runs on the GPU (tests/cuda/run_families.sh and test_cuda_backend check each family's
 * on the GPU machine), mixtures of experts (moe.cu) of at most MOE_MAX_E experts whose rows fit moe_fits. */
extern "C" int cuda_backend_runs(const plan *p, char *why, size_t len) {
    for (uint32_t i = 0; i < p->n_ops; i++) {
        const plan_op *o = &p->ops[i];
        if (o->kind != PLAN_MOE) continue;
        if (o->n_experts > MOE_MAX_E) {
            snprintf(why, len, "the CUDA backend runs mixtures of at most %u experts (tape op %u has %u)",
                     MOE_MAX_E, i, o->n_experts);
            return 0;
        }
        const uint32_t inter = o->moe_inter > o->shared_inter ? o->moe_inter : o->shared_inter;
        if (o->n_experts && !moe_fits((uint32_t)o->experts[0].cols, inter)) {
            snprintf(why, len, "tape op %u: experts of %u inputs and %u inner units are too wide for the CUDA backend",
                     i, (unsigned)o->experts[0].cols, inter);
            return 0;
        }
    }
    return 1;
}

static int check_plan(cuda_session *s, uint32_t max_ctx) {
    const plan *p = s->p;
    if (max_ctx == 0 || (p->hp.max_pos && max_ctx > plan_ctx_limit(p)))
        return cuda_failf(s, "context %u outside 1..%u", max_ctx, plan_ctx_limit(p));
    char why[256];
    if (!cuda_backend_runs(p, why, sizeof why)) return cuda_failf(s, "%s", why);
    if (p->kv_dtype != THIN_DTYPE_BF16 && p->kv_dtype != THIN_DTYPE_F32)
        return cuda_failf(s, "KV cache dtype %s is not supported on the GPU", thin_dtype_name(p->kv_dtype));
    if (p->logits_buf < 0 || (uint32_t)p->logits_buf >= p->n_bufs) return cuda_failf(s, "plan has no logits buffer");
    int dev = 0;
    if (cudaGetDeviceCount(&dev) != cudaSuccess || dev == 0) return cuda_failf(s, "no CUDA device found");
    return 0;
}

/* Whether the prefill's linears should go through cuBLASLt (thin_cuda_gemm_lt; AUTO: the model's
 * weights read per token reach LT_AUTO_BYTES); only sessions with a prefill (several rows) use it. */
static int wants_lt(const cuda_session *s) {
    if (s->max_batch < 2 || thin_cuda_gemm_lt == THIN_CUDA_GEMM_OWN) return 0;
    return thin_cuda_gemm_lt == THIN_CUDA_GEMM_LT || s->p->weight_bytes >= LT_AUTO_BYTES;
}

/* The helper thread: cuBLASLt's library load and start-up (about 0.6 s on the GPU machine) while
 * the calling thread uploads the weights. */
static void *lt_start_thread(void *arg) {
    cuda_session *s = (cuda_session *)arg;
    s->lt_why = NULL;
    if (cudaSetDevice(0) != cudaSuccess || gemm_lt_start(&s->lt_new, &s->lt_why) != cudaSuccess) {
        s->lt_new = NULL;
        if (!s->lt_why) s->lt_why = "cannot select the device";
    }
    return NULL;
}

void lt_join(cuda_session *s) {
    if (!s->lt_started) return;
    pthread_join(s->lt_thread, NULL);
    s->lt_started = 0;
}

/* cuda_session_greedy queues a step ahead (env THIN_CUDA_AHEAD=0: it runs each step as forward
 * does). */
static int thin_cuda_ahead = 1;
/* cuda_session_sample draws on the device, sample.cu (env THIN_CUDA_SAMPLE=host: the row goes to
 * the host and the CPU sampler draws). */
static int thin_cuda_device_sample = 1;

static int session_init(cuda_session *s, uint32_t max_ctx) {
    const plan *p = s->p;
    if (check_plan(s, max_ctx)) return -1;
    const char *pdl = getenv("THIN_CUDA_PDL");
    thin_cuda_pdl = !(pdl && strcmp(pdl, "0") == 0);
    const char *fuse = getenv("THIN_CUDA_FUSE");
    thin_cuda_fuse = !(fuse && strcmp(fuse, "0") == 0);
    const char *clu = getenv("THIN_CUDA_CLUSTER");
    thin_cuda_cluster = !(clu && strcmp(clu, "0") == 0);
    const char *co = getenv("THIN_CUDA_CARVEOUT");
    thin_cuda_carveout = co && *co ? atoi(co) : -1;
    if (thin_cuda_carveout > 100) thin_cuda_carveout = 100;
    const char *mv = getenv("THIN_CUDA_MV");
    thin_cuda_mv_minb = 0, thin_cuda_mv_bps = 0, thin_cuda_mv_small_bps = 0, thin_cuda_mv_small_mb = 0;
    if (mv)
        sscanf(mv, "%d,%d,%d,%d", &thin_cuda_mv_minb, &thin_cuda_mv_bps, &thin_cuda_mv_small_bps,
               &thin_cuda_mv_small_mb);
    const char *pipe = getenv("THIN_CUDA_MV_PIPE");
    thin_cuda_mv_pipe = 0, thin_cuda_mv_pipe_bps = 0;
    if (pipe) sscanf(pipe, "%d,%d", &thin_cuda_mv_pipe, &thin_cuda_mv_pipe_bps);
    const char *x4 = getenv("THIN_CUDA_MV_X4");
    thin_cuda_mv_x4 = x4 && *x4 ? atoi(x4) : 4096;
    if (thin_cuda_mv_x4 < 0) thin_cuda_mv_x4 = 0;
    const char *sgl = getenv("THIN_CUDA_MV_SINGLE");
    thin_cuda_mv_single = sgl && *sgl ? atoi(sgl) : 3;
    if (thin_cuda_mv_single < 0) thin_cuda_mv_single = 0;
    const char *dual = getenv("THIN_CUDA_MV_DUAL");
    thin_cuda_mv_dual = dual && *dual ? atoi(dual) : 1;
    if (thin_cuda_mv_dual < 0) thin_cuda_mv_dual = 0;
    const char *mvw = getenv("THIN_CUDA_MV_WARPS"); /* 8 or 12: q/k/v and o in blocks of that many warps */
    thin_cuda_mv_warps = mvw && *mvw ? atoi(mvw) : 0;
    const char *mvs = getenv("THIN_CUDA_MV_SLIM"); /* 1: q/k/v in slim blocks, see matvec.cu */
    thin_cuda_mv_slim = mvs && *mvs ? atoi(mvs) : 0;
    const char *mvm = getenv("THIN_CUDA_MV_SMEM"); /* 1[,NS] or 0: q/k/v rows in shared memory, see matvec.cu */
    thin_cuda_mv_smem = -1, thin_cuda_mv_smem_ns = 0;
    if (mvm && *mvm) sscanf(mvm, "%d,%d", &thin_cuda_mv_smem, &thin_cuda_mv_smem_ns);
    if (thin_cuda_mv_smem < 0) thin_cuda_mv_smem = -1;
    if (thin_cuda_mv_smem_ns < 0) thin_cuda_mv_smem_ns = 0;
    const char *mw = getenv("THIN_CUDA_MLP_WARPS"); /* 8 or 16: MLP blocks of that many warps; 24: the default */
    thin_cuda_mlp_warps = mw && *mw ? atoi(mw) : 0;
    const char *ms = getenv("THIN_CUDA_MLP_SLIM"); /* 24, 16 or 0: slim MLP blocks, see mlp.cu */
    thin_cuda_mlp_slim = ms && *ms ? atoi(ms) : -1;
    const char *msp = getenv("THIN_CUDA_MLP_SPLIT"); /* 0: no left-over units in halves, see mlp.cu */
    thin_cuda_mlp_split = msp && *msp ? atoi(msp) != 0 : 1;
    const char *mlp = getenv("THIN_CUDA_MLP");
    thin_cuda_mlp = 1, thin_cuda_mlp_bps = 0, thin_cuda_mlp_units = 0;
    if (mlp) sscanf(mlp, "%d,%d,%d", &thin_cuda_mlp, &thin_cuda_mlp_bps, &thin_cuda_mlp_units);
    const char *stm = getenv("THIN_CUDA_STREAM");
    const int stream = stm && strcmp(stm, "1") == 0; /* the persistent kernel reads down as stored
                                                        and runs the o-projection itself */
    if (stream || !thin_cuda_fuse) thin_cuda_mlp = 0;
    const char *ao = getenv("THIN_CUDA_ATTN_O");
    thin_cuda_attn_o = ao && *ao ? atoi(ao) : ATTN_O_DEFAULT;
    if (stream || !thin_cuda_fuse || !thin_cuda_cluster || thin_cuda_attn_o < 0) thin_cuda_attn_o = 0;
    const char *aos = getenv("THIN_CUDA_AO_SOLO"); /* N: tokens of at most N positions solo, see attn_o.cu */
    thin_cuda_ao_solo = aos && *aos ? atoi(aos) : ATTN_O_SOLO_DEFAULT;
    if (thin_cuda_ao_solo < 0) thin_cuda_ao_solo = 0;
    const char *mpf = getenv("THIN_CUDA_MLP_PF"); /* AHEAD[,AT]: see l2_ahead */
    thin_cuda_mlp_pf[0] = MLP_PF_DEFAULT, thin_cuda_mlp_pf[1] = 1;
    if (mpf && *mpf) sscanf(mpf, "%d,%d", &thin_cuda_mlp_pf[0], &thin_cuda_mlp_pf[1]);
    if (thin_cuda_mlp_pf[0] < 0 || thin_cuda_mlp_pf[1] < 1 || thin_cuda_mlp_pf[1] > 3) thin_cuda_mlp_pf[0] = 0;
    const char *aol = getenv("THIN_CUDA_AO_OLATE"); /* 1: the o rows after the wait, see attn_o.cu */
    thin_cuda_ao_olate = aol && strcmp(aol, "1") == 0;
    const char *aop = getenv("THIN_CUDA_AO_PUSH");
    thin_cuda_ao_push = !(aop && strcmp(aop, "0") == 0);
    const char *m1 = getenv("THIN_CUDA_MOE1");
    thin_cuda_moe1 = !(m1 && strcmp(m1, "0") == 0);
    const char *aog = getenv("THIN_CUDA_AO_GEN"); /* 1: the attention + o kernel's general instance always */
    thin_cuda_ao_gen = aog && strcmp(aog, "1") == 0;
    const char *aor = getenv("THIN_CUDA_AO_ROPE"); /* 0: a rope kernel before the attention + o kernel */
    thin_cuda_ao_rope = !(aor && strcmp(aor, "0") == 0);
    const char *qao = getenv("THIN_CUDA_QAO"); /* 1: the attention block kernel (opt-in) */
    thin_cuda_qao = qao && strcmp(qao, "1") == 0;
    const char *atc = getenv("THIN_CUDA_ATTN_TC"); /* N: the prefill's attention on tensor cores
                                                       from N rows (0: never) */
    thin_cuda_attn_tc = atc && *atc ? atoi(atc) : ATTN_TC_DEFAULT;
    const char *gm = getenv("THIN_CUDA_GEMM"); /* "lt" or "own": the prefill GEMMs (default: by size) */
    thin_cuda_gemm_lt = !gm || !*gm ? THIN_CUDA_GEMM_AUTO
                        : strcmp(gm, "lt") == 0 ? THIN_CUDA_GEMM_LT
                        : strcmp(gm, "own") == 0 ? THIN_CUDA_GEMM_OWN : THIN_CUDA_GEMM_AUTO;
    const char *gt = getenv("THIN_CUDA_GEMM_T"); /* 1: transposed down projections read as stored */
    thin_cuda_gemm_t = gt && strcmp(gt, "1") == 0;
    const char *ah = getenv("THIN_CUDA_AHEAD"); /* 0: no greedy step queued ahead of the host */
    thin_cuda_ahead = !(ah && strcmp(ah, "0") == 0);
    const char *sa = getenv("THIN_CUDA_SAMPLE"); /* host: the draw on the host */
    thin_cuda_device_sample = !(sa && strcmp(sa, "host") == 0);
    const char *gs = getenv("THIN_CUDA_GEMM_SUB"); /* sub-stages a GEMM stage (small tiles) */
    thin_cuda_gemm_sub = gs && *gs ? atoi(gs) : 0;
    const char *gw = getenv("THIN_CUDA_GEMM_WIDEN");
    thin_cuda_gemm_widen = gw && *gw ? atol(gw) : 64l << 20;
    if (thin_cuda_gemm_widen < 1) thin_cuda_gemm_widen = 1;
    const char *trc = getenv("THIN_CUDA_TRACE");
    s->trace_at = trc ? (uint32_t)strtoul(trc, NULL, 10) : 0;
    if (s->trace_at && !THIN_CUDA_TRACE) {
        fprintf(stderr, "thin-run: THIN_CUDA_TRACE needs a build with the kernel timeline "
                        "(make CUDA_TRACE=1); ignored\n");
        s->trace_at = 0;
    }
    s->max_ctx = max_ctx;
    s->max_batch = max_ctx < MAX_BATCH ? max_ctx : MAX_BATCH;
    CK(s, cudaSetDevice(0));
    CK(s, cudaDeviceGetAttribute(&s->n_sm, cudaDevAttrMultiProcessorCount, 0));
    int has_cluster = 0;
    if (cudaDeviceGetAttribute(&has_cluster, cudaDevAttrClusterLaunch, 0) != cudaSuccess) has_cluster = 0;
    if (!has_cluster) thin_cuda_cluster = 0, thin_cuda_attn_o = 0;
    CK(s, cudaStreamCreateWithFlags(&s->st, cudaStreamNonBlocking));
    uint32_t n = p->n_ops ? p->n_ops : 1;
    s->op_w = (int *)malloc(n * sizeof(int));
    s->op_freq = (double **)calloc(n, sizeof(double *));
    s->op_kc = (void **)calloc(n, sizeof(void *));
    s->op_vc = (void **)calloc(n, sizeof(void *));
    s->buf = (float **)calloc(p->n_bufs ? p->n_bufs : 1, sizeof(float *));
    if (!s->op_w || !s->op_freq || !s->op_kc || !s->op_vc || !s->buf) return cuda_failf(s, "out of memory");
    for (uint32_t i = 0; i < n; i++) s->op_w[i] = -1;
    if (wants_lt(s) && pthread_create(&s->lt_thread, NULL, lt_start_thread, s) == 0) s->lt_started = 1;
    if (upload_weights(s) || upload_rope_tables(s) || alloc_state(s) || compile_steps(s) || stream_build(s))
        return -1;
    if (prof_init(s)) return -1;
    return warm_up(s);
}

extern "C" int cuda_session_create(cuda_session **out, const plan *p, uint32_t max_ctx, char *err,
                                   size_t errlen) {
    return cuda_session_create_fit(out, p, max_ctx, max_ctx, err, errlen);
}

extern "C" uint32_t cuda_session_ctx(const cuda_session *s) { return s ? s->max_ctx : 0; }

extern "C" int cuda_session_create_fit(cuda_session **out, const plan *p, uint32_t max_ctx, uint32_t min_ctx,
                                       char *err, size_t errlen) {
    *out = NULL;
    if (p->shards > 1) { /* a split run stands for several devices: the CPU backend's */
        if (err && errlen)
            snprintf(err, errlen, "a run split over %u devices is the CPU backend's (--device cpu)",
                     p->shards);
        return -1;
    }
    cuda_session *s = (cuda_session *)calloc(1, sizeof *s);
    if (!s) {
        if (err && errlen) snprintf(err, errlen, "out of memory");
        return -1;
    }
    s->p = p;
    s->min_ctx = min_ctx;
    if (session_init(s, max_ctx)) {
        if (err && errlen) snprintf(err, errlen, "%s", s->err);
        cuda_session_free(s);
        return -1;
    }
    *out = s;
    return 0;
}

extern "C" void cuda_session_free(cuda_session *s) {
    if (!s) return;
    if (s->st) cudaStreamSynchronize(s->st);
    lt_join(s);
    gemm_lt_destroy(s->lt_new);
    prof_report(s);
    prof_free(s);
    for (int k = 0; k < 2; k++)
        if (s->graph_ready[k]) cudaGraphExecDestroy(s->graph[k]);
    gemm_lt_destroy(s->lt);
    for (uint32_t i = 0; i < s->n_allocs; i++) cudaFree(s->allocs[i]);
    if (s->h_io) cudaFreeHost(s->h_io);
    sampler_free(&s->h_smp); /* no candidates (NULL) unless the host draw set it up */
    free(s->h_row);
    if (s->h_ring) cudaFreeHost(s->h_ring);
    for (int k = 0; k < 2; k++)
        if (s->ev_step[k]) cudaEventDestroy(s->ev_step[k]);
    if (s->st) cudaStreamDestroy(s->st);
    free(s->allocs);
    free(s->op_w);
    free(s->op_freq);
    free(s->op_kc);
    free(s->op_vc);
    free(s->op_moe);
    free(s->w);
    free(s->buf);
    free(s->steps);
    free(s->sk_runs);
    free(s);
}

#define TRACE_CAP (1u << 20)

/* Env THIN_CUDA_TRACE=N (a build with CUDA_TRACE=1): the N-th decode token (from 1) runs
 * through the graph with the kernel timeline armed; its records go to THIN_CUDA_TRACE_FILE
 * (default thin-trace.csv; removed again if it cannot be written whole) as
 * "grid,kind,units,sm,block,t0,t1,t2,m0..m3" lines, times in ns from the token's first start
 * (m: phases within a kernel, 0 when it marks none; the decode attention marks scores, softmax,
 * weighted V sum and the cluster barrier). */
static int trace_token(cuda_session *s) {
    trace_rec *recs = NULL;
    unsigned int *n = NULL;
    if (cuda_alloc(s, (void **)&recs, (size_t)TRACE_CAP * sizeof *recs) ||
        cuda_alloc(s, (void **)&n, sizeof *n))
        return -1;
    CK(s, cudaStreamSynchronize(s->st));
    CK(s, cudaMemset(n, 0, sizeof *n));
    CK(s, matvec_trace_arm(recs, n, TRACE_CAP));
    CK(s, mlp_trace_arm(recs, n, TRACE_CAP));
    CK(s, attention_trace_arm(recs, n, TRACE_CAP));
    CK(s, attn_o_trace_arm(recs, n, TRACE_CAP));
    CK(s, stream_trace_arm(recs, n, TRACE_CAP));
    if (exec_decode_graph(s)) return -1;
    CK(s, cudaStreamSynchronize(s->st));
    CK(s, matvec_trace_arm(NULL, NULL, 0));
    CK(s, mlp_trace_arm(NULL, NULL, 0));
    CK(s, attention_trace_arm(NULL, NULL, 0));
    CK(s, attn_o_trace_arm(NULL, NULL, 0));
    CK(s, stream_trace_arm(NULL, NULL, 0));
    unsigned int cnt = 0;
    CK(s, cudaMemcpy(&cnt, n, sizeof cnt, cudaMemcpyDeviceToHost));
    if (cnt > TRACE_CAP) cnt = TRACE_CAP;
    trace_rec *h = (trace_rec *)malloc((size_t)cnt * sizeof *h + 1);
    if (!h) return cuda_failf(s, "out of memory");
    if (cudaMemcpy(h, recs, (size_t)cnt * sizeof *h, cudaMemcpyDeviceToHost) != cudaSuccess) {
        free(h);
        return cuda_failf(s, "trace: copy failed");
    }
    const char *fn = getenv("THIN_CUDA_TRACE_FILE");
    if (!fn || !*fn) fn = "thin-trace.csv";
    FILE *f = fopen(fn, "w");
    if (!f) {
        free(h);
        return cuda_failf(s, "%s: cannot write the trace", fn);
    }
    unsigned long long tmin = ~0ull;
    for (unsigned int i = 0; i < cnt; i++)
        if (h[i].t0 < tmin) tmin = h[i].t0;
    fprintf(f, "grid,kind,units,sm,block,t0,t1,t2,m0,m1,m2,m3\n");
    for (unsigned int i = 0; i < cnt; i++) {
        fprintf(f, "%llu,%u,%u,%u,%u,%llu,%llu,%llu", h[i].grid, h[i].kind & 0xff, h[i].kind >> 8, h[i].sm,
                h[i].block, h[i].t0 - tmin, h[i].t1 - tmin, h[i].t2 - tmin);
        for (int k = 0; k < 4; k++) fprintf(f, ",%llu", h[i].mark[k] ? h[i].mark[k] - tmin : 0ull);
        fputc('\n', f);
    }
    free(h);
    const int bad = ferror(f);
    if (fclose(f) != 0 || bad) {
        remove(fn);
        return cuda_failf(s, "%s: cannot write the trace", fn);
    }
    fprintf(stderr, "thin-run: kernel timeline of one decode token in %s (%u records)\n", fn, cnt);
    return 0;
}

/* One decode token through the graph; with the profile, timed (graph events, host clock) and
 * then run again eagerly step by step. */
static int forward_one(cuda_session *s, int32_t token, uint32_t pos) {
    double t0 = s->prof ? prof_now_us() : 0.0;
    s->h_io[0] = (int32_t)pos;
    s->h_io[1] = token;
    CK(s, cudaMemcpyAsync(s->d_io, s->h_io, 2 * sizeof(int32_t), cudaMemcpyHostToDevice, s->st));
    s->short_now = pos < s->attn_short; /* positions 0..pos fit the attention + o kernel */
    if (s->prof) CK(s, cudaEventRecord(prof_graph_event(s, 0), s->st));
    s->n_decoded++;
    if (s->trace_at && s->n_decoded == s->trace_at) {
        if (trace_token(s)) return -1;
    } else if (exec_decode_graph(s)) {
        return -1;
    }
    if (s->prof) CK(s, cudaEventRecord(prof_graph_event(s, 1), s->st));
    if (!s->prof) return 0;
    CK(s, cudaStreamSynchronize(s->st));
    double wall = prof_now_us() - t0;
    float ms = 0.0f;
    CK(s, cudaEventElapsedTime(&ms, prof_graph_event(s, 0), prof_graph_event(s, 1)));
    return prof_decode(s, 1e3 * ms, wall);
}

/* One chunk of at most max_batch rows starting at position pos; last: logits and argmax of its last
 * row only (several rows: the LM head runs for that row alone). */
static int forward_chunk(cuda_session *s, const int32_t *tokens, uint32_t n, uint32_t pos,
                         float *logits, int32_t *argmax, int last) {
    const plan *p = s->p;
    const int lb = p->logits_buf;
    const uint32_t vocab = (uint32_t)p->buf_sizes[lb];
    s->cur_pos = pos;
    s->ahead_valid = 0; /* a step queued ahead (cuda_session_greedy) no longer follows */
    if (n == 1) {
        if (forward_one(s, tokens[0], pos)) return -1;
    } else {
        s->h_io[0] = (int32_t)pos;
        memcpy(s->h_io + 1, tokens, n * sizeof(int32_t));
        CK(s, cudaMemcpyAsync(s->d_io, s->h_io, (n + 1) * sizeof(int32_t), cudaMemcpyHostToDevice, s->st));
        if (exec_steps(s, n, last || (!logits && !argmax))) return -1;
        if (argmax) {
            const uint32_t r0 = last ? n - 1 : 0;
            CK(s, launch_argmax(s->d_argmax, s->buf[lb] + (size_t)r0 * vocab, vocab, vocab, n - r0, s->d_argpart,
                                s->st));
            CK(s, cudaMemcpyAsync(s->h_am, s->d_argmax, (n - r0) * sizeof(int32_t), cudaMemcpyDeviceToHost,
                                  s->st));
        }
    }
    const uint32_t r0 = last ? n - 1 : 0; /* first row copied out */
    if (logits)
        CK(s, cudaMemcpyAsync(logits, s->buf[lb] + (size_t)r0 * vocab, (size_t)(n - r0) * vocab * sizeof(float),
                              cudaMemcpyDeviceToHost, s->st));
    CK(s, cudaStreamSynchronize(s->st));
    s->last_row = n - 1;
    if (argmax) {
        memcpy(argmax, s->h_am, (n - r0) * sizeof(int32_t));
        for (uint32_t i = 0; i < n - r0; i++)
            if (argmax[i] < 0) return cuda_failf(s, "%s", NONFINITE_LOGITS);
    }
    return 0;
}

/* Checks a forward's positions and tokens. */
static int check_run(cuda_session *s, const int32_t *tokens, uint32_t n, uint32_t pos) {
    if (!tokens || n == 0 || pos > s->max_ctx || n > s->max_ctx - pos)
        return cuda_failf(s, "positions %u..%u outside the context of %u", pos, pos + n, s->max_ctx);
    for (uint32_t i = 0; i < n; i++)
        if (tokens[i] < 0 || (uint32_t)tokens[i] >= s->p->hp.vocab_size)
            return cuda_failf(s, "token %d outside the vocabulary", tokens[i]);
    return 0;
}

extern "C" int cuda_session_forward(cuda_session *s, const int32_t *tokens, uint32_t n, uint32_t pos,
                                    float *logits, int32_t *argmax) {
    if (!s || check_run(s, tokens, n, pos)) return -1;
    const uint32_t vocab = (uint32_t)s->p->buf_sizes[s->p->logits_buf];
    for (uint32_t c = 0; c < n; c += s->max_batch) {
        uint32_t k = n - c < s->max_batch ? n - c : s->max_batch;
        if (forward_chunk(s, tokens + c, k, pos + c, logits ? logits + (size_t)c * vocab : NULL,
                          argmax ? argmax + c : NULL, 0))
            return -1;
    }
    return 0;
}

extern "C" int cuda_session_prefill(cuda_session *s, const int32_t *tokens, uint32_t n, uint32_t pos,
                                    float *logits, int32_t *argmax) {
    if (!s || check_run(s, tokens, n, pos)) return -1;
    for (uint32_t c = 0; c < n; c += s->max_batch) {
        const uint32_t k = n - c < s->max_batch ? n - c : s->max_batch;
        const int end = c + k == n;
        if (forward_chunk(s, tokens + c, k, pos + c, end ? logits : NULL, end ? argmax : NULL, 1)) return -1;
    }
    return 0;
}

/* A prompt's one-time costs ahead of it: the kernels a prefill of n rows runs are loaded on their
 * first launch, and cuBLASLt picks an algorithm for each new shape and batch size (about 10 ms
 * for SmolLM3-3B's linears at 512 rows on the H200, and about 24 ms in all for a process's first
 * 512-row prefill, bench/thin-bench-prefill). So the chunks such a prompt runs (max_batch rows,
 * and the rest) run here once on token 0 from position 0, where the prompt's own chunks will
 * write the same KV rows; those rows are cleared afterwards, so the session is left as created.
 * Opt-in (env THIN_CUDA_PREPARE=1) until it has been timed on the GPU machine. */
extern "C" int cuda_session_prepare(cuda_session *s, uint32_t n) {
    if (!s) return -1;
    const char *on = getenv("THIN_CUDA_PREPARE"); /* opt-in until timed on the GPU machine */
    if (!on || strcmp(on, "1") != 0) return 0;
    if (n > s->max_ctx) n = s->max_ctx;
    if (n < 2 || s->max_batch < 2) return 0; /* one row is a decode step, warmed at creation */
    const uint32_t full = n > s->max_batch ? s->max_batch : n, rest = n > s->max_batch ? n % s->max_batch : 0;
    int32_t *zeros = (int32_t *)calloc(full, sizeof(int32_t));
    if (!zeros) return cuda_failf(s, "out of memory");
    int32_t am = -1;
    int rc = forward_chunk(s, zeros, full, 0, NULL, &am, 1);
    if (rc == 0 && rest >= 2) rc = forward_chunk(s, zeros, rest, 0, NULL, &am, 1);
    free(zeros);
    if (rc || clear_kv_rows(s, full)) return -1;
    s->cur_pos = 0;
    s->last_row = 0;
    return 1;
}

extern "C" int cuda_session_greedy(cuda_session *s, int32_t token, uint32_t pos, int ahead, int32_t *next) {
    if (!s || !next || check_run(s, &token, 1, pos)) return -1;
    if (s->prof || s->trace_at || !thin_cuda_ahead) /* the profile and the trace time one step at a time */
        return cuda_session_forward(s, &token, 1, pos, NULL, next);
    const int queued = s->ahead_valid && s->ahead_pos == pos && s->last_next == token;
    s->ahead_valid = 0;
    s->cur_pos = pos;
    s->last_row = 0;
    if (!queued) {
        if (forward_one(s, token, pos)) return -1;
        CK(s, cudaEventRecord(s->ev_step[pos & 1], s->st));
    }
    if (ahead && thin_cuda_ahead && pos + 1 < s->max_ctx) { /* the next step, its input left by this one's argmax */
        CK(s, cudaMemcpyAsync(s->d_io, s->d_next, 2 * sizeof(int32_t), cudaMemcpyDeviceToDevice, s->st));
        s->short_now = pos + 1 < s->attn_short;
        s->n_decoded++;
        if (exec_decode_graph(s)) return -1;
        CK(s, cudaEventRecord(s->ev_step[(pos + 1) & 1], s->st));
        s->ahead_valid = 1;
        s->ahead_pos = pos + 1;
    }
    CK(s, cudaEventSynchronize(s->ev_step[pos & 1]));
    const int32_t id = ((volatile int32_t *)s->h_ring)[pos % DECODE_RING];
    if (id < 0 || (uint32_t)id >= s->p->hp.vocab_size) {
        s->ahead_valid = 0;
        if (id == -1) return cuda_failf(s, "%s", NONFINITE_LOGITS);
        return cuda_failf(s, "internal: the decode step at position %u gave id %d", pos, id);
    }
    *next = s->last_next = id;
    return 0;
}

extern "C" int cuda_session_sample(cuda_session *s, float temperature, uint32_t top_k, float top_p,
                                   float coin, int32_t *token) {
    if (!s || !token) return -1;
    const plan *p = s->p;
    const int lb = p->logits_buf;
    const uint32_t vocab = (uint32_t)p->buf_sizes[lb];
    const float *row = s->buf[lb] + (size_t)s->last_row * vocab;
    if (!(temperature >= 0.0f) || !(top_p > 0.0f && top_p <= 1.0f))
        return cuda_failf(s, "sampling parameters out of range");
    if (temperature == 0.0f) {
        CK(s, launch_argmax(s->d_argmax, row, vocab, vocab, 1, s->d_argpart, s->st));
        CK(s, cudaMemcpyAsync(s->h_am, s->d_argmax, sizeof(int32_t), cudaMemcpyDeviceToHost, s->st));
        CK(s, cudaStreamSynchronize(s->st));
        if (s->h_am[0] < 0) return cuda_failf(s, "%s", NONFINITE_LOGITS);
        *token = s->h_am[0];
        return 0;
    }
    if (!thin_cuda_device_sample) { /* the row to the host and the CPU sampler there */
        if (!s->h_row) { /* once: the row and the sampler's candidates (the draw is `coin`) */
            if (!(s->h_row = (float *)malloc((size_t)vocab * sizeof(float))) ||
                sampler_init(&s->h_smp, vocab, temperature, top_k, top_p, 0)) {
                free(s->h_row);
                s->h_row = NULL;
                return cuda_failf(s, "out of memory");
            }
        }
        s->h_smp.temperature = temperature, s->h_smp.top_k = top_k, s->h_smp.top_p = top_p;
        CK(s, cudaMemcpyAsync(s->h_row, row, (size_t)vocab * sizeof(float), cudaMemcpyDeviceToHost, s->st));
        CK(s, cudaStreamSynchronize(s->st));
        *token = sampler_pick(&s->h_smp, s->h_row, coin);
        if (*token < 0) return cuda_failf(s, "sampling found no candidate: %s", NONFINITE_LOGITS);
        return 0;
    }
    CK(s, launch_sample(row, vocab, temperature, top_k, top_p, coin, s->d_samp, s->d_prob, s->d_argmax, s->st));
    CK(s, cudaMemcpyAsync(s->h_am, s->d_argmax, sizeof(int32_t), cudaMemcpyDeviceToHost, s->st));
    CK(s, cudaStreamSynchronize(s->st));
    if (s->h_am[0] < 0 || (uint32_t)s->h_am[0] >= vocab)
        return cuda_failf(s, "sampling found no candidate: %s", NONFINITE_LOGITS);
    *token = s->h_am[0];
    return 0;
}

extern "C" int cuda_sample_row(const float *logits, uint32_t n, float temperature, uint32_t top_k, float top_p,
                               float coin, int32_t *token, char *err, size_t errlen) {
    float *x = NULL, *pf = NULL;
    void *sc = NULL;
    int32_t *out = NULL;
    cudaStream_t st = NULL;
    cudaError_t e = cudaMalloc((void **)&x, (size_t)n * sizeof(float));
    if (e == cudaSuccess) e = cudaMalloc((void **)&pf, (size_t)n * sizeof(float));
    if (e == cudaSuccess) e = cudaMalloc(&sc, sample_scratch_bytes());
    if (e == cudaSuccess) e = cudaMalloc((void **)&out, sizeof(int32_t));
    if (e == cudaSuccess) e = cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking);
    if (e == cudaSuccess) e = cudaMemcpy(x, logits, (size_t)n * sizeof(float), cudaMemcpyHostToDevice);
    if (e == cudaSuccess) e = launch_sample(x, n, temperature, top_k, top_p, coin, sc, pf, out, st);
    if (e == cudaSuccess) e = cudaStreamSynchronize(st);
    if (e == cudaSuccess) e = cudaMemcpy(token, out, sizeof(int32_t), cudaMemcpyDeviceToHost);
    if (st) cudaStreamDestroy(st);
    cudaFree(x);
    cudaFree(pf);
    cudaFree(sc);
    cudaFree(out);
    if (e != cudaSuccess) {
        if (err && errlen) snprintf(err, errlen, "sample: %s", cudaGetErrorString(e));
        (void)cudaGetLastError();
        return -1;
    }
    return 0;
}

extern "C" int cuda_copy_bandwidth(size_t bytes, double *bytes_per_s, char *err, size_t errlen) {
    void *a = NULL, *b = NULL;
    cudaEvent_t e0 = NULL, e1 = NULL;
    float best = 0.0f;
    cudaError_t e = cudaMalloc(&a, bytes);
    if (e == cudaSuccess) e = cudaMalloc(&b, bytes);
    if (e == cudaSuccess) e = cudaMemset(a, 1, bytes);
    if (e == cudaSuccess) e = cudaEventCreate(&e0);
    if (e == cudaSuccess) e = cudaEventCreate(&e1);
    for (int i = 0; e == cudaSuccess && i < 12; i++) {
        float ms = 0.0f;
        e = cudaEventRecord(e0);
        if (e == cudaSuccess) e = cudaMemcpy(b, a, bytes, cudaMemcpyDeviceToDevice);
        if (e == cudaSuccess) e = cudaEventRecord(e1);
        if (e == cudaSuccess) e = cudaEventSynchronize(e1);
        if (e == cudaSuccess) e = cudaEventElapsedTime(&ms, e0, e1);
        if (e == cudaSuccess && i >= 2 && (best == 0.0f || ms < best)) best = ms;
    }
    if (e0) cudaEventDestroy(e0);
    if (e1) cudaEventDestroy(e1);
    cudaFree(a);
    cudaFree(b);
    if (e != cudaSuccess || best <= 0.0f) {
        if (err && errlen) snprintf(err, errlen, "copy bandwidth: %s", cudaGetErrorString(e));
        return -1;
    }
    *bytes_per_s = 2.0 * (double)bytes / (best * 1e-3);
    return 0;
}

/* The decode matvec's weight stream without its arithmetic (cuda_read_bandwidth,
 * cuda_read_sequence): each warp XORs its rows' words; a word is written only in the unlikely case
 * that the XOR hits `never`, which keeps the loads. As the matvec, it lets the next kernel launch
 * at once and waits for the previous one (programmatic dependent launch) after its first loads. */
__global__ void __launch_bounds__(256) read_probe_kernel(const uint4 *p, uint32_t rows, uint32_t vpr,
                                                          uint32_t never, uint32_t *out) {
    pdl_trigger();
    const uint32_t lane = threadIdx.x & 31, warps = gridDim.x * (blockDim.x >> 5);
    uint32_t acc = 0;
    bool waited = false;
    for (uint32_t r = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5); r < rows; r += warps) {
        const uint4 *row = p + (size_t)r * vpr;
        for (uint32_t b = lane; b < vpr; b += 32 * 8) {
            uint4 w[8];
#pragma unroll
            for (int k = 0; k < 8; k++)
                w[k] = b + 32 * k < vpr ? ld_stream(row + b + 32 * k) : make_uint4(0, 0, 0, 0);
            if (!waited) {
                pdl_wait();
                waited = true;
            }
#pragma unroll
            for (int k = 0; k < 8; k++) acc ^= w[k].x ^ w[k].y ^ w[k].z ^ w[k].w;
        }
    }
    if (!waited) pdl_wait();
    if (acc == never) out[blockIdx.x] = acc;
}

/* Bytes a probe matrix of `bytes` in rows of row_bytes takes: its whole rows, rounded up to 256. */
static uint64_t probe_span(uint64_t bytes, uint32_t row_bytes) {
    return (bytes / row_bytes * row_bytes + 255) / 256 * 256;
}

/* One probe launch over the whole rows of `bytes` at p on stream st (pdl: with programmatic
 * dependent launch). */
static cudaError_t probe_launch(const uint8_t *p, uint64_t bytes, uint32_t row_bytes, dim3 grid, cudaStream_t st,
                                int pdl, uint32_t *out) {
    return launch_kcp(read_probe_kernel, grid, dim3(256), 0, st, dim3(0, 0, 0), pdl, (const uint4 *)p,
                      (uint32_t)(bytes / row_bytes), row_bytes / 16, 0x9e3779b9u, out);
}

extern "C" int cuda_read_bandwidth(size_t bytes, uint32_t row_bytes, int blocks_per_sm, double *single,
                                   double *stream, char *err, size_t errlen) {
    if (!row_bytes || row_bytes % 16 || bytes < row_bytes || blocks_per_sm < 1) {
        if (err && errlen) snprintf(err, errlen, "read bandwidth: bad arguments");
        return -1;
    }
    bytes = bytes / row_bytes * row_bytes; /* whole rows */
    /* copies that together exceed L2 several times over, so that no launch reads from L2 */
    const size_t n_copy = bytes >= ((size_t)256 << 20) ? 2 : ((size_t)256 << 20) / bytes + 1;
    uint8_t *buf = NULL;
    uint32_t *out = NULL;
    cudaEvent_t ev[4] = {};
    const int n_ev = 4, n_b2b = 16;
    int n_sm = 0;
    float best = 0.0f, b2b = 0.0f;
    cudaError_t e = cudaDeviceGetAttribute(&n_sm, cudaDevAttrMultiProcessorCount, 0);
    if (e == cudaSuccess) e = cudaMalloc((void **)&buf, n_copy * bytes);
    if (e == cudaSuccess) e = cudaMalloc((void **)&out, (size_t)n_sm * blocks_per_sm * sizeof(uint32_t));
    if (e == cudaSuccess) e = cudaMemset(buf, 0x5a, n_copy * bytes);
    for (int i = 0; e == cudaSuccess && i < n_ev; i++) e = cudaEventCreate(&ev[i]);
    const dim3 grid((unsigned)(n_sm * blocks_per_sm));
    size_t at = 0;
    /* alone: an event pair round each launch, the GPU idle between them */
    for (int i = 0; e == cudaSuccess && i < 16; i++, at = (at + 1) % n_copy) {
        float ms = 0.0f;
        e = cudaEventRecord(ev[0]);
        if (e == cudaSuccess) e = probe_launch(buf + at * bytes, bytes, row_bytes, grid, 0, 0, out);
        if (e == cudaSuccess) e = cudaEventRecord(ev[1]);
        if (e == cudaSuccess) e = cudaEventSynchronize(ev[1]);
        if (e == cudaSuccess) e = cudaEventElapsedTime(&ms, ev[0], ev[1]);
        if (e == cudaSuccess && i >= 2 && (best == 0.0f || ms < best)) best = ms;
    }
    /* back to back: n_b2b launches between one event pair */
    if (e == cudaSuccess) e = cudaEventRecord(ev[2]);
    for (int i = 0; e == cudaSuccess && i < n_b2b; i++, at = (at + 1) % n_copy)
        e = probe_launch(buf + at * bytes, bytes, row_bytes, grid, 0, 0, out);
    if (e == cudaSuccess) e = cudaEventRecord(ev[3]);
    if (e == cudaSuccess) e = cudaEventSynchronize(ev[3]);
    if (e == cudaSuccess) e = cudaEventElapsedTime(&b2b, ev[2], ev[3]);
    for (int i = 0; i < n_ev; i++)
        if (ev[i]) cudaEventDestroy(ev[i]);
    cudaFree(buf);
    cudaFree(out);
    if (e != cudaSuccess || best <= 0.0f || b2b <= 0.0f) {
        if (err && errlen) snprintf(err, errlen, "read bandwidth: %s", cudaGetErrorString(e));
        (void)cudaGetLastError();
        return -1;
    }
    *single = (double)bytes / (best * 1e-3);
    *stream = (double)bytes * n_b2b / (b2b * 1e-3);
    return 0;
}

/* cuda_load_latency's table: n links `stride` elements apart in one scrambled cycle (a multiplier
 * coprime to n, which is a power of two). */
__global__ void latency_chain_kernel(uint32_t *chain, uint32_t n, uint32_t stride) {
    const uint32_t i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) chain[(size_t)((i * 7919u) & (n - 1)) * stride] = ((i + 1) * 7919u & (n - 1)) * stride;
}

/* A dependent load of link `at` (4 bytes): through L2 with an evict-last policy (near) or plain
 * (far, the table larger than L2). */
template <bool FAR>
__device__ __forceinline__ uint32_t chase_hop(const uint32_t *chain, uint32_t at, uint64_t pol) {
    uint32_t v;
    if constexpr (FAR) asm volatile("ld.global.cg.u32 %0, [%1];" : "=r"(v) : "l"(chain + at));
    else asm volatile("ld.global.cg.L2::cache_hint.u32 %0, [%1], %2;" : "=r"(v) : "l"(chain + at), "l"(pol));
    return v;
}

/* cuda_load_latency's kernel: block 0's warp 0 chases `hops` links of chain once every streaming
 * block has started, then raises *stop; the streaming warps (mode bit 0: every other block's, bit
 * 1: block 0's other warps) read rows of 4 KiB of buf round the whole buffer, IF 16-byte loads per
 * lane in flight (BULK: lane 0 keeps IF bulk copies of a row each in flight into a ring of the
 * warp's in shared memory), until *stop, and add the bytes they read to *bytes. t[0], t[1]: the
 * chase's global-timer start and end. One block an SM (its dynamic shared memory sees to that). */
template <int IF, bool FAR, bool BULK = false>
__global__ void __launch_bounds__(768, 1) latency_probe_kernel(const uint32_t *chain, uint32_t at0, uint32_t hops,
                                                               const uint4 *buf,
                                                               uint64_t vecs, int mode, volatile uint32_t *stop,
                                                               unsigned int *started, unsigned long long *bytes,
                                                               unsigned long long *t, uint32_t *out) {
    const uint32_t lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    const bool streams = blockIdx.x == 0 ? warp > 0 && (mode & 2) : (mode & 1);
    const unsigned int n_stream_blocks = (mode & 1 ? gridDim.x - 1 : 0) + (mode & 2 ? 1 : 0);
    if (blockIdx.x == 0 && warp == 0) {
        if (lane) return;
        uint64_t pol;
        asm volatile("createpolicy.fractional.L2::evict_last.b64 %0, 1.0;" : "=l"(pol));
        uint32_t at = at0;
        if (!FAR)
            for (uint32_t i = 0; i < 64; i++) at = chase_hop<FAR>(chain, at, pol); /* warm */
        const unsigned long long t_wait = gtimer();
        while (*(volatile unsigned int *)started < n_stream_blocks && gtimer() - t_wait < 20000000ull) {
        }
        for (uint32_t i = 0; i < 64; i++) at = chase_hop<FAR>(chain, at, pol); /* the streams ramp up */
        const unsigned long long t0 = gtimer();
        for (uint32_t i = 0; i < hops; i++) at = chase_hop<FAR>(chain, at, pol);
        const unsigned long long t1 = gtimer();
        t[0] = t0;
        t[1] = t1;
        out[0] = at;
        __threadfence();
        *stop = 1u;
        return;
    }
    if (!streams) return;
    if (threadIdx.x == (blockIdx.x == 0 ? 32u : 0u)) {
        __threadfence();
        atomicAdd(started, 1u);
    }
    const uint32_t warps_all = gridDim.x * nw;
    const uint64_t rows = vecs / 256; /* 4 KiB rows */
    uint64_t r = (uint64_t)blockIdx.x * nw + warp, n = 0;
    uint32_t acc = 0;
    if constexpr (BULK) { /* lane 0 alone; the others add nothing */
        extern __shared__ __align__(128) uint8_t lat_ring[];
        __shared__ uint64_t lat_bar[24 * IF];
        if (lane) return;
        uint8_t *ring = lat_ring + (size_t)warp * IF * 4096;
        uint64_t *bar = lat_bar + warp * IF;
        for (int k = 0; k < IF; k++) mbar_init(&bar[k], 1);
        mbar_init_fence();
        const uint64_t pol = evict_first_policy();
        uint64_t issued = 0;
        for (;;) {
            const uint32_t s = *stop;
            const uint32_t slot = (uint32_t)(issued % IF);
            if (issued >= IF) { /* the copy issued IF ago into this slot */
                mbar_wait(&bar[slot], (uint32_t)((issued / IF - 1) & 1));
                n += 4096;
            }
            mbar_expect_tx(&bar[slot], 4096);
            bulk_load(ring + (size_t)slot * 4096, buf + (r % rows) * 256, 4096, &bar[slot], pol);
            issued++;
            r += warps_all;
            if (s) break;
        }
        for (uint64_t j = issued > IF ? issued - IF : 0; j < issued; j++) { /* the ring drained */
            mbar_wait(&bar[j % IF], (uint32_t)((j / IF) & 1));
            n += 4096;
        }
    } else {
        for (;;) {
            const uint32_t s = *stop; /* asked with the row, looked at after it */
            const uint4 *row = buf + (r % rows) * 256;
#pragma unroll 1
            for (uint32_t b = lane; b < 256; b += 32 * IF) {
                uint4 w[IF];
#pragma unroll
                for (int k = 0; k < IF; k++) w[k] = ld_stream(row + b + 32 * k);
#pragma unroll
                for (int k = 0; k < IF; k++) acc ^= w[k].x ^ w[k].y ^ w[k].z ^ w[k].w;
            }
            n += 4096 / 32; /* this lane's share of the row */
            r += warps_all;
            if (s) break;
        }
    }
    atomicAdd(bytes, (unsigned long long)n);
    if (acc == 0x9e3779b9u) out[1 + blockIdx.x] = acc;
}

template <int IF, bool FAR, bool BULK = false>
static cudaError_t latency_launch(int n_sm, int warps, size_t smem, const uint32_t *chain, uint32_t at0, uint32_t hops,
                                  const uint4 *buf, uint64_t vecs, int mode, uint32_t *ctl,
                                  unsigned long long *stats, uint32_t *out) {
    cudaError_t e = cudaFuncSetAttribute(latency_probe_kernel<IF, FAR, BULK>,
                                         cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
    if (e != cudaSuccess) return e;
    latency_probe_kernel<IF, FAR, BULK><<<n_sm, 32 * warps, smem>>>(chain, at0, hops, buf, vecs, mode, ctl, ctl + 1,
                                                                    stats, stats + 1, out);
    return cudaGetLastError();
}

/* latency_launch of the instance for far and bulk. */
template <int IF, typename... A>
static cudaError_t latency_pick(bool far, bool bulk, A... args) {
    if (bulk) return far ? latency_launch<IF, true, true>(args...) : latency_launch<IF, false, true>(args...);
    return far ? latency_launch<IF, true>(args...) : latency_launch<IF, false>(args...);
}

extern "C" int cuda_load_latency(int mode, int inflight, int warps, int far, int bulk, double *ns, double *gbps,
                                 char *err, size_t errlen) {
    const size_t smem = CUDA_LOAD_LATENCY_SMEM; /* one block an SM; with bulk, the rings */
    if (mode < 0 || mode > 3 || !(inflight == 1 || inflight == 2 || inflight == 4 || inflight == 8) ||
        !(warps == 8 || warps == 24) || (bulk && (size_t)warps * inflight * 4096 > smem)) {
        if (err && errlen) snprintf(err, errlen, "load latency: bad arguments");
        return -1;
    }
    /* near: 64 links 256 bytes apart (16 KiB, kept in L2); far: 2^21 links 128 bytes apart (256
     * MiB, L2 then filled by the stream buffer's set-up; each launch chases links it has not
     * touched) */
    const uint32_t n_links = far ? 1u << 21 : 64, stride = far ? 32 : 64, hops = far ? 2000 : 4000;
    const size_t chain_bytes = (size_t)n_links * stride * sizeof(uint32_t);
    const size_t buf_bytes = (size_t)1 << 30;
    uint32_t *chain = NULL, *out = NULL, *ctl = NULL;
    uint4 *buf = NULL;
    unsigned long long *stats = NULL;
    int n_sm = 0;
    cudaEvent_t ev[2] = {};
    float ms = 0.0f;
    cudaError_t e = cudaDeviceGetAttribute(&n_sm, cudaDevAttrMultiProcessorCount, 0);
    if (e == cudaSuccess) e = cudaMalloc((void **)&chain, chain_bytes);
    if (e == cudaSuccess) e = cudaMalloc((void **)&buf, buf_bytes);
    if (e == cudaSuccess) e = cudaMalloc((void **)&out, (size_t)(n_sm + 1) * sizeof(uint32_t));
    if (e == cudaSuccess) e = cudaMalloc((void **)&ctl, 2 * sizeof(uint32_t));
    if (e == cudaSuccess) e = cudaMalloc((void **)&stats, 3 * sizeof(unsigned long long));
    if (e == cudaSuccess) e = cudaMemset(chain, 0, chain_bytes);
    if (e == cudaSuccess) {
        latency_chain_kernel<<<(n_links + 255) / 256, 256>>>(chain, n_links, stride);
        e = cudaGetLastError();
    }
    if (e == cudaSuccess) e = cudaMemset(buf, 0x5a, buf_bytes);
    for (int i = 0; e == cudaSuccess && i < 2; i++) e = cudaEventCreate(&ev[i]);
    unsigned long long h_stats[3] = {0, 0, 0};
    double best = 0.0, bw = 0.0;
    const uint64_t vecs = buf_bytes / 16;
    for (int rep = 0; e == cudaSuccess && rep < 3; rep++) {
        e = cudaMemset(ctl, 0, 2 * sizeof(uint32_t));
        if (e == cudaSuccess) e = cudaMemset(stats, 0, 3 * sizeof(unsigned long long));
        /* far: launch rep starts at link i = rep * 4096 of the cycle (position (i * 7919 mod n) * stride) */
        const uint32_t at0 = far ? ((uint32_t)rep * 4096u * 7919u & (n_links - 1)) * stride : 0;
        if (e == cudaSuccess) e = cudaEventRecord(ev[0]);
        if (e == cudaSuccess) {
            const bool f = far != 0, b = bulk != 0;
#define LAT_PICK(IF) latency_pick<IF>(f, b, n_sm, warps, smem, chain, at0, hops, buf, vecs, mode, ctl, stats, out)
            e = inflight == 1 ? LAT_PICK(1) : inflight == 2 ? LAT_PICK(2) : inflight == 4 ? LAT_PICK(4) : LAT_PICK(8);
#undef LAT_PICK
        }
        if (e == cudaSuccess) e = cudaEventRecord(ev[1]);
        if (e == cudaSuccess) e = cudaEventSynchronize(ev[1]);
        if (e == cudaSuccess) e = cudaEventElapsedTime(&ms, ev[0], ev[1]);
        if (e == cudaSuccess) e = cudaMemcpy(h_stats, stats, sizeof h_stats, cudaMemcpyDeviceToHost);
        if (e != cudaSuccess || h_stats[2] <= h_stats[1]) break;
        const double hop = (double)(h_stats[2] - h_stats[1]) / hops;
        if (best == 0.0 || hop < best) {
            best = hop;
            bw = ms > 0.0f ? (double)h_stats[0] / (ms * 1e-3) : 0.0;
        }
    }
    for (int i = 0; i < 2; i++)
        if (ev[i]) cudaEventDestroy(ev[i]);
    cudaFree(chain);
    cudaFree(buf);
    cudaFree(out);
    cudaFree(ctl);
    cudaFree(stats);
    if (e != cudaSuccess || best <= 0.0) {
        if (err && errlen)
            snprintf(err, errlen, "load latency: %s", e != cudaSuccess ? cudaGetErrorString(e) : "no time measured");
        (void)cudaGetLastError();
        return -1;
    }
    *ns = best;
    *gbps = bw / 1e9;
    return 0;
}

extern "C" int cuda_read_sequence(const uint64_t *bytes, const uint32_t *row_bytes, int n, int reps,
                                  int blocks_per_sm, int pdl, double *seconds, char *err, size_t errlen) {
    uint64_t total = 0;
    for (int i = 0; i < n; i++) {
        if (!row_bytes[i] || row_bytes[i] % 16 || bytes[i] < row_bytes[i] || bytes[i] / row_bytes[i] > UINT32_MAX) {
            if (err && errlen) snprintf(err, errlen, "read sequence: bad matrix %d", i);
            return -1;
        }
        total += probe_span(bytes[i], row_bytes[i]);
    }
    if (n < 1 || reps < 1 || blocks_per_sm < 1) {
        if (err && errlen) snprintf(err, errlen, "read sequence: bad arguments");
        return -1;
    }
    uint8_t *buf = NULL;
    uint32_t *out = NULL;
    cudaEvent_t e0 = NULL, e1 = NULL;
    cudaStream_t st = NULL;
    int n_sm = 0;
    float ms = 0.0f;
    cudaError_t e = cudaDeviceGetAttribute(&n_sm, cudaDevAttrMultiProcessorCount, 0);
    if (e == cudaSuccess) e = cudaMalloc((void **)&buf, total);
    if (e == cudaSuccess) e = cudaMalloc((void **)&out, (size_t)n_sm * blocks_per_sm * sizeof(uint32_t));
    if (e == cudaSuccess) e = cudaMemset(buf, 0x5a, total);
    if (e == cudaSuccess) e = cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking);
    if (e == cudaSuccess) e = cudaEventCreate(&e0);
    if (e == cudaSuccess) e = cudaEventCreate(&e1);
    const dim3 grid((unsigned)(n_sm * blocks_per_sm));
    for (int rep = -1; e == cudaSuccess && rep < reps; rep++) { /* rep -1: warm-up, untimed */
        if (rep == 0) e = cudaEventRecord(e0, st);
        uint64_t at = 0;
        for (int i = 0; e == cudaSuccess && i < n; i++) {
            e = probe_launch(buf + at, bytes[i], row_bytes[i], grid, st, pdl, out);
            at += probe_span(bytes[i], row_bytes[i]);
        }
    }
    if (e == cudaSuccess) e = cudaEventRecord(e1, st);
    if (e == cudaSuccess) e = cudaEventSynchronize(e1);
    if (e == cudaSuccess) e = cudaEventElapsedTime(&ms, e0, e1);
    if (e0) cudaEventDestroy(e0);
    if (e1) cudaEventDestroy(e1);
    if (st) cudaStreamDestroy(st);
    cudaFree(buf);
    cudaFree(out);
    if (e != cudaSuccess || ms <= 0.0f) {
        if (err && errlen) snprintf(err, errlen, "read sequence: %s", cudaGetErrorString(e));
        (void)cudaGetLastError();
        return -1;
    }
    *seconds = ms * 1e-3 / reps;
    return 0;
}

/* The backend_ops wrapper that thin-run selects with --device cuda. */
static int ops_create(void **sess, const plan *p, uint32_t *ctx, uint32_t min_ctx, unsigned threads,
                      char *err, size_t errlen) {
    (void)threads;
    if (cuda_session_create_fit((cuda_session **)sess, p, *ctx, min_ctx, err, errlen)) return -1;
    *ctx = cuda_session_ctx((const cuda_session *)*sess);
    return 0;
}
static int ops_forward(void *sess, const int32_t *tokens, uint32_t n, uint32_t pos, float *logits,
                       int32_t *argmax) {
    return cuda_session_forward((cuda_session *)sess, tokens, n, pos, logits, argmax);
}
static int ops_prefill(void *sess, const int32_t *tokens, uint32_t n, uint32_t pos, float *logits,
                       int32_t *argmax) {
    return cuda_session_prefill((cuda_session *)sess, tokens, n, pos, logits, argmax);
}
static int ops_greedy(void *sess, int32_t token, uint32_t pos, int ahead, int32_t *next) {
    return cuda_session_greedy((cuda_session *)sess, token, pos, ahead, next);
}
static int ops_sample(void *sess, float temperature, uint32_t top_k, float top_p, float coin, int32_t *token) {
    return cuda_session_sample((cuda_session *)sess, temperature, top_k, top_p, coin, token);
}
static int ops_prepare(void *sess, uint32_t n) { return cuda_session_prepare((cuda_session *)sess, n); }
static void ops_free(void *sess) { cuda_session_free((cuda_session *)sess); }
static const char *ops_error(void *sess) { return cuda_session_error((const cuda_session *)sess); }

extern "C" const backend_ops backend_cuda = {"cuda", ops_create, ops_forward, ops_free, ops_error, 1, ops_prefill,
                                              ops_sample, ops_greedy, ops_prepare};
