/*
 * plan.h — a model ready to run: hyperparameters from the manifest, and the execution tape compiled
 * into a flat list of ops whose weights are resolved to pointers into the mapped file.
 *
 * The plan is backend-independent: the CPU backend (exec_cpu.c) and the CUDA backend
 * (kernels/cuda_backend.cu) both execute it. Multi-GPU splitting follows each linear op's `split`.
 */
#ifndef THIN_PLAN_H
#define THIN_PLAN_H

#include <math.h>
#include <stdint.h>

#include "ops.h"
#include "thin.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum plan_op_kind {
    PLAN_EMBED = 1,        /* buf[out] = w[token] */
    PLAN_RMSNORM = 2,      /* buf[out] = rmsnorm(buf[in]) * w */
    PLAN_LINEAR = 3,       /* buf[out] = W buf[in] */
    PLAN_HEAD_RMSNORM = 4, /* per-head rmsnorm of buf[in] in place */
    PLAN_ROPE = 5,         /* rope of buf[in] in place at the current position */
    PLAN_ATTENTION = 6,    /* store buf[k], buf[v] in layer's cache; buf[out] = attn(buf[q]) */
    PLAN_ADD = 7,          /* buf[out] += buf[in] (times factor where set: Granite's residual_multiplier) */
    PLAN_SILU_MUL = 8,     /* buf[out] = silu(buf[out]) * buf[in] */
    PLAN_BIAS = 9,         /* buf[out] += w (a vector of buf[out]'s size; Qwen2's q/k/v biases) */
    PLAN_GELU_TANH_MUL = 10, /* buf[out] = gelu_tanh(buf[out]) * buf[in] (Gemma's MLP) */
    PLAN_SOFTCAP = 11,     /* buf[in] = cap * tanh(buf[in] / cap) in place (Gemma 2's logits) */
    PLAN_SCALE = 12,       /* buf[in] *= factor in place (Granite's logits / logits_scaling) */
    PLAN_MOE = 13,         /* buf[out] = the mixture of experts of buf[in] (w: the router; experts) */
} plan_op_kind;

typedef enum plan_split {
    PLAN_SPLIT_NONE = 0,
    PLAN_SPLIT_COL = 1, /* output rows divide across devices */
    PLAN_SPLIT_ROW = 2, /* input columns divide across devices; all-reduce of the output follows */
} plan_split;

typedef struct plan_op {
    plan_op_kind kind;
    int32_t layer;        /* -1 for global ops */
    int32_t in, out;      /* buffer indices (-1 when unused) */
    int32_t q, k, v;      /* ATTENTION: buffer indices */
    thin_wmat w;          /* weight (EMBED, RMSNORM, LINEAR, HEAD_RMSNORM); data NULL otherwise */
    const char *w_name;   /* tensor name, for messages */
    thin_role w_role;
    plan_split split;
    float eps;            /* RMSNORM, HEAD_RMSNORM */
    float norm_offset;    /* RMSNORM, HEAD_RMSNORM: the norm multiplies by offset + w (Gemma's 1) */
    float embed_scale;    /* EMBED: factor on the gathered row (Gemma's sqrt(hidden)); 0: none */
    float attn_scale;     /* ATTENTION: factor on the scores; 0: 1/sqrt(head_dim) */
    uint32_t window;      /* ATTENTION: positions a query sees, its own included (a sliding
                             window); 0: all before it */
    float softcap;        /* ATTENTION: scores capped as softcap * tanh(s / softcap) (Gemma 2),
                             SOFTCAP: its cap; 0: none */
    float factor;         /* ADD: factor on buf[in] (0: 1); SCALE: its factor */
    float theta;          /* ROPE */
    const float *inv_freq;/* ROPE: rot_dim/2 precomputed frequencies (rope scaling), or NULL */
    float rope_scale;     /* ROPE: factor on cos and sin (LongRoPE's attention factor); 0 or 1: none */
    uint32_t rot_dim;     /* ROPE: the leading dims of each head that rotate (partial rotary; the
                             tables then hold rot_dim/2 frequencies); 0 or head_dim: all */
    const float *longrope[2]; /* ROPE with LongRoPE: its short and long tables, of which inv_freq
                             is the one for the session's context (plan_set_ctx) */
    uint32_t longrope_ctx;/* LongRoPE: contexts above this many positions take the long table */
    uint32_t n_heads, n_kv_heads, head_dim; /* ROPE (n_heads = heads in the buffer), ATTENTION */
    /* MOE: w is the router ([n_experts, in]); experts[3 e + 0, 1, 2] expert e's gate and up
     * ([moe_inter, in]) and down ([out, moe_inter]); each token takes the top_k experts by the
     * softmax of the router's scores, weighted by their probabilities (renormalized to sum 1
     * where norm_topk) */
    const thin_wmat *experts;
    uint32_t n_experts, top_k, moe_inter;
    int norm_topk;
    /* MOE with a shared expert (Qwen2-MoE; shared_inter 0: none): its gate, up ([shared_inter,
     * in]) and down, every token's, added after the routed experts' sum, scaled by
     * sigmoid(shared_gate · in) where shared_gate ([1, in]) has data */
    thin_wmat shared[3], shared_gate;
    uint32_t shared_inter;
    /* MOE routing as DeepSeek-V3 and GLM-4.5 have it (moe_sigmoid): each expert's score
     * sigmoid(router · in), the choice made on score + score_bias (a [n_experts] vector, where
     * score_bias has data) within the best topk_group of n_group groups of experts (a group's
     * worth: its two best choice scores), the weights the chosen scores (renormalized where
     * norm_topk) times routed_scale (0: 1) */
    int moe_sigmoid;
    thin_wmat score_bias;
    uint32_t n_group, topk_group;
    float routed_scale;
} plan_op;

/* A ROPE op's factor on cos and sin and its rotated dims of a head, with their zero defaults
 * (plans built by hand leave them 0) resolved: 1, and the whole head. */
static inline float plan_rope_scale(const plan_op *o) { return o->rope_scale > 0 ? o->rope_scale : 1.0f; }
static inline uint32_t plan_rot_dim(const plan_op *o) { return o->rot_dim ? o->rot_dim : o->head_dim; }
/* Whether an ADD op scales what it adds (factor set and not 1: Granite's residual_multiplier). */
static inline int plan_add_scaled(const plan_op *o) { return o->factor > 0 && o->factor != 1.0f; }

/* An ATTENTION op's factor on the scores, its default resolved. */
static inline float plan_attn_scale(const plan_op *o) {
    return o->attn_scale > 0 ? o->attn_scale : 1.0f / sqrtf((float)o->head_dim);
}
/* Whether that factor is the default 1/sqrt(head_dim) (given or not). */
static inline int plan_attn_scale_default(const plan_op *o) {
    return plan_attn_scale(o) == 1.0f / sqrtf((float)o->head_dim);
}

typedef struct plan_hparams {
    uint32_t vocab_size, hidden_size, intermediate_size;
    uint32_t n_layers, n_heads, n_kv_heads, head_dim;
    uint32_t max_pos;     /* context limit: max_position_embeddings */
    float rms_norm_eps, rope_theta;
    int32_t bos_id;       /* -1 if none */
    int32_t eos_ids[8];   /* -1 terminated */
} plan_hparams;

typedef struct plan {
    plan_hparams hp;
    uint32_t n_bufs;
    char **buf_names;     /* n_bufs names */
    uint64_t *buf_sizes;  /* floats per buffer */
    int32_t logits_buf;   /* index of "logits" */
    uint32_t n_ops;
    plan_op *ops;
    thin_dtype kv_dtype;  /* KV cache dtype (runtime default from the manifest, or --kv-dtype) */
    uint64_t weight_bytes;/* bytes of distinct weights read per token */
    uint32_t ctx_limit;   /* positions a session may hold past max_pos: YaRN's factor × original
                             context where that is more (0: none; see plan_ctx_limit) */
    uint32_t shards;      /* 1 (plan_build), or the devices a split run stands for (thin-run
                             --shards: the CPU backend sums each row split from that many
                             partial products, as the devices' all-reduce would) */
    void *owned_;         /* private: converted/decompressed copies, inv_freq tables */
} plan;

/* Builds a plan from an opened file: reads model.hparams and the tape, resolves every tensor (role,
 * dtype, shape against the op), follows tied_to and scale links. Weights stay in the mapping when
 * uncompressed; compressed ones are decompressed once into memory owned by the plan.
 * On error returns a thin_status and writes a one-line message into err. */
thin_status plan_build(plan *p, thin_file *f, thin_dtype kv_dtype, char *err, size_t errlen);
void plan_free(plan *p);
/* Fits the plan to a session of ctx positions (0: the model's limit, which plan_build assumes):
 * LongRoPE ops take their long table where ctx exceeds the original context, else the short one. */
void plan_set_ctx(plan *p, uint32_t ctx);
/* The most positions a session may hold: max_position_embeddings, or YaRN's reach (factor ×
 * original_max_position_embeddings) where that is more, as its model cards extend a context. */
static inline uint32_t plan_ctx_limit(const plan *p) {
    return p->ctx_limit > p->hp.max_pos ? p->ctx_limit : p->hp.max_pos;
}
/* The context of a session that asks for none: the model's limit, or for a LongRoPE model its
 * original context (the reach of its short factors, which transformers also takes for sequences
 * that fit there; the long factors and the longer context need asking for). */
uint32_t plan_default_ctx(const plan *p);
/* Whether the tape runs split over n devices as its linears' split marks say (tensor parallel):
 * a "col" linear divides its output rows, which stay divided through the ops that work per head
 * or per element (rope, head_rmsnorm, attention with whole query and KV heads per device, a KV
 * head held by several devices where there are fewer KV heads than devices, silu_mul) until a
 * "row" linear takes them as its divided input and an all-reduce makes its
 * output whole again; norms, embeddings and unsplit linears need whole inputs. THIN_OK, or an
 * error with a one-line reason naming the op. n = 1 always fits. */
thin_status plan_check_split(const plan *p, uint32_t n, char *err, size_t errlen);
/* Index of a buffer by name, or -1. */
int32_t plan_buf(const plan *p, const char *name);

#ifdef __cplusplus
}
#endif
#endif /* THIN_PLAN_H */
