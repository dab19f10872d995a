/*
 * cuda_session.cuh — private state of the CUDA backend, shared by cuda_backend.cu (the C API),
 * cuda_upload.cu (weights to the device), cuda_compile.cu (plan → fused steps) and cuda_exec.cu
 * (running the steps, eagerly or as a CUDA graph).
 */
#ifndef THIN_CUDA_SESSION_CUH
#define THIN_CUDA_SESSION_CUH

#include <pthread.h>
#include <stdio.h>

#include "../tools/thin-run/backend.h"
#include "cuda_backend.h"
#include "cuda_common.cuh"
#include "../tools/thin-run/sampler.h"

/* Records a failed CUDA call (file:line, the call, the error string) into the session's message
 * and returns -1 from the calling function. */
#define CK(s, call)                                                                        \
    do {                                                                                   \
        cudaError_t ck_e_ = (call);                                                        \
        if (ck_e_ != cudaSuccess) return cuda_fail((s), __FILE__, __LINE__, #call, ck_e_); \
    } while (0)

typedef enum step_kind {
    STEP_EMBED = 1,
    STEP_RMSNORM,
    STEP_LINEAR, /* 1..3 linears sharing the input, optional fused rmsnorm, residual, SiLU pair */
    STEP_HEAD_RMSNORM,
    STEP_ROPE,   /* a rope op not absorbed into an attention step */
    STEP_ATTN,   /* [rope q] [rope k] KV store + attention */
    STEP_ADD,
    STEP_SILU_MUL,
    STEP_BIAS,   /* buf[out] += a bias vector, every row */
    STEP_GELU_MUL, /* buf[out] = gelu_tanh(buf[out]) * buf[in] (Gemma) */
    STEP_SOFTCAP,  /* buf[in] = cap * tanh(buf[in] / cap) (Gemma 2's logits) */
    STEP_SCALE,    /* buf[in] *= factor (Granite's logits) */
    STEP_MOE,      /* a mixture of experts (moe.cu) */
} step_kind;

/* A moe op's slots a row: its top k, and one more for a shared expert (moe_args.KS). */
static inline uint32_t moe_slots(const plan_op *o) { return o->top_k + (o->shared_inter ? 1u : 0u); }

/* A moe op's weights on the device (cuda_upload.cu's upload_moe). */
typedef struct moe_dev {
    dmat *tab;     /* device: 3 (E + 1) dmats (moe_args.tab) */
    dmat sgate;    /* the shared expert's gate, or data NULL */
    float *bias;   /* device: the choice bias (E floats), or NULL */
    uint32_t imax; /* the largest inner size, routed or shared */
    int gu_dtype;  /* the dtype of every expert's gate and up (shared expert's too), or -1 if mixed */
    int dn_dtype;  /* the same for the down projections */
} moe_dev;

typedef struct step {
    step_kind kind;
    int op;        /* the op (the first linear of a group) */
    int norm_op;   /* LINEAR: fused RMSNORM op, or -1 */
    int nseg;      /* LINEAR: linear ops in the group */
    int lin[3];    /* LINEAR: their op indices */
    int pair;      /* LINEAR: lin[0] = gate, lin[1] = up, then silu_mul into gate's output */
    int add_op;    /* LINEAR (nseg 1): fused ADD op, or -1 */
    int bias[3];   /* LINEAR (no pair, no add): the BIAS op on each segment's output (Qwen2's q, k
                      and v biases), added in the matvec's epilogue (before the rope) or after the
                      prefill's GEMM, or -1 */
    int rope_q, rope_k; /* ATTN: absorbed ROPE ops, or -1 */
    int hnorm_q, hnorm_k; /* ATTN: absorbed HEAD_RMSNORM ops on q and k (Qwen3), run by the rope
                             kernel before it rotates, or -1 */
    int attn_step;      /* LINEAR (q, k, v): decode runs that ATTN step's rope and KV store in
                           its epilogue; -1 when not fused */
    int kv_fused;       /* ATTN: decode gets rope and KV store from the preceding LINEAR step */
    int mlp;            /* LINEAR (gate/up pair): for one row, runs the MLP kernel with the next
                           step (down + residual add), whose weights are stored transposed */
    int mlp_fused;      /* LINEAR (down): run by the preceding step for one row */
    int attn_o;         /* ATTN: for one row in the short decode form, runs the attention + o
                           kernel (attn_o.cu) with the next step (the o-projection + residual add) */
    int o_fused;        /* LINEAR (o): run by the preceding ATTN step in the short decode form */
    int qao;            /* LINEAR (q, k, v with attn_step): for one row in the short decode form, runs
                           the attention block kernel (attn_o.cu's qao_kernel) for itself, that
                           ATTN step and its o step */
    int qao_fused;      /* ATTN: run by the q, k, v step before it in the short decode form */
} step;

typedef struct cuda_prof cuda_prof;
typedef struct stream_run stream_run;

/* Pinned staging for weight uploads: NSTAGE buffers cycled, each guarded by an event; the host
 * copy into a buffer is split over a thread pool (tools/thin-run/pool.h) of up to STAGE_THREADS. */
#define NSTAGE 3
#define STAGE_BYTES ((size_t)32 << 20)
#define STAGE_THREADS 8
typedef struct stager {
    void *buf[NSTAGE];
    cudaEvent_t ev[NSTAGE];
    int next;
    cudaStream_t st;
    struct pool *cp; /* NULL: the caller copies alone */
} stager;

struct cuda_session {
    const plan *p;
    uint32_t max_ctx, max_batch; /* positions; rows per forward chunk */
    uint32_t min_ctx;            /* the fewest positions the caller takes where max_ctx does not fit */
    int n_sm;
    cudaStream_t st;
    /* per op (p->n_ops entries) */
    int *op_w;              /* index into w, or -1 */
    double **op_freq;       /* ROPE: head_dim/2 inverse frequencies on the device */
    void **op_kc, **op_vc;  /* ATTENTION: [max_ctx][n_kv × head_dim] caches of p->kv_dtype */
    /* distinct weights on the device */
    dmat *w;
    uint32_t n_w;
    moe_dev *op_moe;        /* per op: a moe op's expert tables (zero for other ops) */
    /* the moe ops' scratch for max_batch rows of the largest (moe_args) */
    float *d_moe_scores, *d_moe_wts, *d_moe_hb, *d_moe_db;
    int32_t *d_moe_sel;
    uint32_t *d_moe_cnt, *d_moe_list;
    /* activations: buffer i holds max_batch rows of p->buf_sizes[i] floats */
    float **buf;
    step *steps;
    uint32_t n_steps;
    /* scratch */
    int32_t *d_io;          /* 1 + max_batch: the position, then the tokens */
    int32_t *d_tokens;      /* d_io + 1 */
    int32_t *d_pos;         /* d_io */
    int32_t *d_argmax;      /* max_batch */
    float2 *d_argpart;      /* max_batch × ARGMAX_PARTS */
    float *d_attnpart;      /* max_batch × n_heads × n_splits × (head_dim + 2), or the decode's
                               n_heads × dec_splits × (head_dim + 2) when larger */
    unsigned int *d_attncnt;/* max_batch × n_kv: attention split counters (kept at zero) */
    unsigned long long *d_mlpcnt; /* 1 per step: the MLP kernel's counters (only grow) */
    unsigned long long *d_qaocnt; /* qao_stride per step: the attention block kernel's counters
                                     (only grow) */
    uint32_t qao_stride;          /* 1 + the most KV heads + twice the most query heads */
    float *d_qaopart;             /* its partials: most query heads × 8 × (largest head_dim + 4) */
    uint32_t qao_smem_min;        /* its shared memory at least: one block an SM */
    void *d_mlpt;           /* the largest transposed down projection, transposed back for a
                               prefill's GEMM (gemm.cu's kernel) */
    gemm_lt *lt;            /* the prefill's linears through cuBLASLt, or NULL (gemm.cu's kernel) */
    /* cuBLASLt's start (gemm_lt_start) on a helper thread while the weights go to the device */
    pthread_t lt_thread;
    int lt_started;         /* the thread was started and is not yet joined */
    gemm_lt *lt_new;        /* its result, or NULL with lt_why */
    const char *lt_why;
    uint32_t n_splits, chunk_max;     /* attention splits for several rows (prefill) */
    uint32_t dec_splits, dec_chunk;   /* attention splits for one row (decode) */
    uint32_t dec_min_chunk;           /* fewest positions per decode split (env THIN_CUDA_ATTN_CHUNK) */
    /* decode positions below this (0: none) take the short form, a graph of its own, in which the
     * attention + o kernel (attn_o.cu) runs the attention steps it takes (ATTN_O_CLUSTER ×
     * attn_o_chunk) */
    uint32_t attn_short;
    uint32_t attn_o_chunk;            /* the attention + o kernel's positions per block, or 0: off */
    uint32_t attn_o_solo;             /* its attn_o_args.solo (at most attn_o_chunk) */
    int short_now;                    /* the decode step being run or captured is a short one */
    /* over the attention ops: most query heads, largest head_dim, fewest KV heads (0 when there
     * is no attention op) */
    uint32_t attn_max_heads, attn_max_head_dim, attn_min_kv;
    void *d_samp;           /* sample_scratch_bytes() */
    float *d_prob;          /* vocab: the probabilities of a sampled row */
    float *h_row;           /* vocab, THIN_CUDA_SAMPLE=host only: the row on the host, */
    sampler h_smp;          /* and the CPU sampler that draws from it (set up with h_row) */
    int32_t *h_io;          /* pinned: [0] pos, [1..max_batch] tokens, then max_batch argmax ids */
    int32_t *h_am;          /* h_io + 1 + max_batch */
    /* greedy steps queued ahead of the host (cuda_session_greedy): each decode graph's argmax
     * leaves the next step's (position, token) in d_next and its id in h_ring[pos % DECODE_RING]
     * (mapped pinned memory); the step at position p records ev_step[p & 1] */
    int32_t *d_next;        /* 2 */
    int32_t *h_ring;        /* DECODE_RING, mapped pinned memory */
    int32_t *d_ring;        /* its device address */
    cudaEvent_t ev_step[2];
    int ahead_valid;        /* a step for (ahead_pos, last_next) is queued */
    uint32_t ahead_pos;
    int32_t last_next;      /* the id the last greedy step gave */
    /* the decode step captured as a graph: [0] with the cluster attention, [1] the short form */
    cudaGraphExec_t graph[2];
    int graph_ready[2];
    uint32_t last_row;      /* row of the logits buffer that forward left last */
    uint32_t cur_pos;       /* position of the last forward's first row */
    cuda_prof *prof;        /* env THIN_CUDA_PROFILE=1: decode timings, or NULL */
    uint32_t trace_at;      /* env THIN_CUDA_TRACE: the decode token to trace (from 1), or 0 */
    uint32_t n_decoded;     /* decode tokens run so far */
    /* the persistent decode kernel (stream.cu): runs of steps it takes over for one row */
    stream_run *sk_runs;
    uint32_t n_sk_runs;
    float *d_skpart;        /* its attention partials: max heads × splits × (head_dim + 2) */
    unsigned int *d_skcnt;  /* its attention split counters (kept at zero) */
    /* device allocations to free */
    void **allocs;
    uint32_t n_allocs, cap_allocs;
    char err[320];
};

/* Whether the decode reaches both attention forms: the short one exists and ends before the
 * context does. */
static inline int two_decode_forms(const cuda_session *s) {
    return s->attn_short && s->attn_short < s->max_ctx;
}

/* The message of a greedy choice over logits holding NaN or an infinity (the CPU backend's). */
#define NONFINITE_LOGITS "the logits hold NaN or infinity"

int cuda_fail(cuda_session *s, const char *file, int line, const char *what, cudaError_t e);
int cuda_failf(cuda_session *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* cudaMalloc recorded for cuda_session_free. */
int cuda_alloc(cuda_session *s, void **ptr, size_t bytes);

/* cuda_backend.cu: waits for cuBLASLt's start when it was begun (its result in lt_new). */
void lt_join(cuda_session *s);

/* cuda_upload.cu */
int upload_weights(cuda_session *s);
/* The factor that a HEAD_RMSNORM op's uploaded weights carry for its layer's attention scale: for
 * the q norm of an attention whose scale is not 1/sqrt(head_dim) (Gemma's query_pre_attn_scalar),
 * scale × sqrt(head_dim), so that the kernels' 1/sqrt(head_dim) gives the op's scale; else 1.
 * Norm weights that count from an offset go up as offset + w, both as F32. */
float norm_fold_factor(const plan *p, uint32_t i);
/* The scale attention op a's kernels apply to its scores (attn_args.scale): 0 for 1/sqrt(head_dim),
 * which they take by default, also where a q head norm of its layer carries another (its weights
 * go up times norm_fold_factor); else the op's. */
float attn_scale_arg(const plan *p, const plan_op *a);
/* Stores weight w transposed (dmat.trans) in a new allocation and frees the old one. */
int transpose_weight(cuda_session *s, dmat *w);
/* Releases one allocation made by cuda_alloc. */
void cuda_free_one(cuda_session *s, void *ptr);
int upload_rope_tables(cuda_session *s);

/* cuda_compile.cu: the plan's ops as fused steps. */
int compile_steps(cuda_session *s);

/* stream.cu: finds the runs of decode steps the persistent kernel can take (only with env
 * THIN_CUDA_STREAM=1, not with THIN_CUDA_FUSE=0 or before sm_90) and uploads their phases. */
int stream_build(cuda_session *s);
/* The run that starts at step i, or NULL; the step after it; its launch for one row. */
const stream_run *stream_at(const cuda_session *s, uint32_t i);
uint32_t stream_end(const stream_run *r);
int stream_launch(cuda_session *s, const stream_run *r);

/* cuda_exec.cu: the matvec arguments of linear step st for row r (fuse: with the decode's rope
 * and KV-store epilogue when planned). */
void linear_args(const cuda_session *s, const step *st, uint32_t r, int fuse, mv_args *a);
/* The attention block kernel's arguments for q, k, v step st (its attention and o steps after it);
 * count and part stay NULL until compile_steps has allocated them. */
void qao_args_of(const cuda_session *s, const step *st, qao_args *q);
/* The attention arguments of attention step st that do not depend on the kernel or the row count
 * (q, caches, output, head counts, position); the rest zero. */
void attn_common(const cuda_session *s, const step *st, attn_args *t);
/* Runs every step for n rows (row 0 at *d_pos); lm_last: the linear into the logits
 * buffer runs for the last row only. */
int exec_steps(cuda_session *s, uint32_t n, int lm_last);
/* Runs steps [from, to) for n rows (no lm_last). */
int exec_steps_range(cuda_session *s, uint32_t from, uint32_t to, uint32_t n);
/* Runs the decode step (n = 1) through the captured graph (capturing it on first use): the graph
 * runs the steps for the position and token in d_io (copied there first by the caller), the
 * argmax (which also writes d_next and h_ring), and copies the argmax id to h_am[0]. */
int exec_decode_graph(cuda_session *s);
/* Captures the decode graph of every attention form the decode can reach, without running it (at
 * creation, so that neither the first token nor the decode pays for the capture). */
int exec_capture_decode(cuda_session *s);

/* cuda_profile.cu (env THIN_CUDA_PROFILE=1). prof_init: allocates the profile when the variable
 * is set. prof_decode: after a decode token, runs the same step again eagerly (the same position
 * and token, so the state does not change) with events between the steps and adds up the times;
 * graph_us and wall_us are the token's graph time (events) and host time of the forward.
 * prof_report: prints the table to stderr. prof_free: releases it. */
int prof_init(cuda_session *s);
int prof_decode(cuda_session *s, double graph_us, double wall_us);
void prof_report(const cuda_session *s);
void prof_free(cuda_session *s);
/* Host monotonic clock in microseconds. */
double prof_now_us(void);
/* The profile's graph events (NULL when not profiling). */
cudaEvent_t prof_graph_event(const cuda_session *s, int end);

#endif /* THIN_CUDA_SESSION_CUH */
