/*
 * ops.h — the forward-pass ops with their CPU reference implementations (kernels/ops_cpu.c).
 *
 * Every GPU op in kernels/<family>.cu has the same contract as its CPU twin here, and a parity test
 * compares the two (tests/cuda/). The CPU versions are the reference, the tests and the fallback:
 * short flat loops, F32 accumulation, weights read in place (from the mmap) and converted on the fly.
 *
 * Weight matrices are row-major [rows = out_features][cols = in_features] as in torch.nn.Linear.
 * FP8 E4M3 matrices carry one F32 scale per row: W[r][c] = e4m3(W8[r][c]) * scale[r].
 */
#ifndef THIN_OPS_H
#define THIN_OPS_H

#include <stddef.h>
#include <stdint.h>

#include "thin.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A weight matrix (or vector, rows = 1) as it lies in memory. */
typedef struct thin_wmat {
    const void *data;    /* rows × cols elements of dtype */
    thin_dtype dtype;    /* F32, F16, BF16 or F8_E4M3 */
    const float *scale;  /* F8_E4M3: rows per-row scales; NULL otherwise */
    uint64_t rows;       /* out features */
    uint64_t cols;       /* in features */
} thin_wmat;

/* Element (r, c) of W as float (scale applied). */
float thin_wmat_get(const thin_wmat *w, uint64_t r, uint64_t c);

/* out[0..cols) = E[token][:] (embedding gather). */
void op_embed(float *out, const thin_wmat *E, uint64_t token);

/* out[i] = x[i] / sqrt(mean(x^2) + eps) * (offset + w[i]), i < n; w is a vector of dtype
 * w->dtype (rows = 1); offset 0, or Gemma's 1 (its weights count from 1; offset + w in F32, as
 * transformers computes it). */
void op_rmsnorm(float *out, const float *x, const thin_wmat *w, uint64_t n, float eps, float offset);

/* Fused residual add + RMSNorm: x[i] += h[i]; out = rmsnorm(x) * w. */
void op_add_rmsnorm(float *x, const float *h, float *out, const thin_wmat *w, uint64_t n, float eps,
                    float offset);

/* Per-head RMSNorm (Qwen3 q_norm/k_norm): each of n_heads slices of head_dim is normalised in
 * place and multiplied by offset + w[0..head_dim). */
void op_head_rmsnorm(float *x, const thin_wmat *w, uint64_t n_heads, uint64_t head_dim, float eps,
                     float offset);

/* y[r] = sum_c W[r][c] * x[c] for r in [r0, r1) (F32 accumulation). Threads split rows. */
void op_matvec(float *y, const thin_wmat *W, const float *x, uint64_t r0, uint64_t r1);

/* op_matvec for nb vectors at once, x_i = x + i * ldx into y_i = y + i * ldy, each weight row read
 * once for all of them: every y_i[r] is computed exactly as op_matvec computes it (the same
 * operations in the same order), so the results are identical bit for bit. */
void op_matmat(float *y, uint64_t ldy, const thin_wmat *W, const float *x, uint64_t ldx, uint32_t nb,
               uint64_t r0, uint64_t r1);

/* op_matmat over columns [c0, c1) of W and of every x_i: the partial products that a device
 * holding those columns of a row-split linear computes (FP8 rows scaled as op_matmat scales). */
void op_matmat_cols(float *y, uint64_t ldy, const thin_wmat *W, uint64_t c0, uint64_t c1,
                    const float *x, uint64_t ldx, uint32_t nb, uint64_t r0, uint64_t r1);

/* 1 when op_matmat runs its AVX-512 form for two or more vectors (a CPU with AVX-512 F/BW/DQ/VL,
 * unless the environment sets THIN_CPU_AVX512=0), else 0. Both forms give the same bits. force 0 or 1
 * selects a form for the process (1 only where the CPU has it) and returns the form now in use;
 * -1 only asks. */
int op_cpu_avx512(int force);

/* RoPE, rotate-half ("neox") pairing as in Hugging Face Llama: within the first rot_dim dims of
 * each head of head_dim (rot_dim = head_dim, or 0 for that, unless the rotation is partial, as
 * Phi-4-mini's), dims i and i + rot_dim/2 rotate by angle pos * theta^(-2i/rot_dim),
 * i < rot_dim/2; the rest pass unchanged. `inv_freq` (rot_dim/2 floats) may be given precomputed
 * (rope scaling), else NULL. cos and sin are multiplied by `scale` (1, or LongRoPE's attention
 * factor). */
void op_rope(float *x, uint64_t n_heads, uint64_t head_dim, uint64_t rot_dim, uint64_t pos,
             float theta, const float *inv_freq, float scale);

/* Single-token grouped-query attention. q: n_heads × head_dim. Caches hold n_pos positions, each
 * n_kv_heads × head_dim elements of kv_dtype (F32 or BF16), position p at p * kv_dim.
 * Query head h uses KV head h / (n_heads / n_kv_heads). Scores scaled by 1/sqrt(head_dim),
 * softmax over positions 0..n_pos-1 (causal: the caller passes n_pos = pos + 1).
 * `scratch` holds at least n_pos floats. out: n_heads × head_dim. */
void op_attention(float *out, const float *q, const void *kcache, const void *vcache,
                  thin_dtype kv_dtype, uint64_t n_heads, uint64_t n_kv_heads, uint64_t head_dim,
                  uint64_t n_pos, float *scratch);
/* op_attention for query heads [h0, h1) only (threads split heads; each needs its own scratch). */
void op_attention_heads(float *out, const float *q, const void *kcache, const void *vcache,
                        thin_dtype kv_dtype, uint64_t n_heads, uint64_t n_kv_heads, uint64_t head_dim,
                        uint64_t n_pos, uint64_t h0, uint64_t h1, float *scratch);

/* op_attention_heads for nb consecutive rows of a prompt: row i (q + i * ldq, out + i * ldo) is
 * at position pos0 + i and attends positions 0..pos0 + i, whose K/V rows the caches already hold.
 * Each position's K and V rows are read once for all the rows (one row: for all the query heads
 * of a KV head, up to OP_ATTN_HEADS at a time); with scale 1/sqrtf(head_dim) and window 0 every
 * row's result is op_attention_heads' bit for bit. Scores are multiplied by `scale`; window > 0
 * (a sliding window) limits a row at position p to positions p - window + 1..p (the others get
 * probability 0); softcap > 0 caps each scaled score s as softcap * tanh(s / softcap) (Gemma 2),
 * 0 leaves it. The caches may start at position `first` (kcache and vcache point at that
 * position's row; no row attends a position before it, as with a window's ring of rows): 0 for
 * caches that start at position 0. scratch: max(nb, OP_ATTN_HEADS) * (pos0 + nb) floats. */
#define OP_ATTN_HEADS 8
/* The first position a query at position n - 1 sees under a sliding window (0: none). */
static inline uint64_t op_window_start(uint64_t n, uint64_t window) {
    return window && n > window ? n - window : 0;
}
void op_attention_rows(float *out, uint64_t ldo, const float *q, uint64_t ldq, const void *kcache,
                       const void *vcache, thin_dtype kv_dtype, uint64_t n_heads, uint64_t n_kv_heads,
                       uint64_t head_dim, uint64_t pos0, uint32_t nb, uint64_t h0, uint64_t h1,
                       float scale, uint64_t window, float softcap, uint64_t first, float *scratch);

/* Stores k and v (kv_dim floats each) at position pos of the caches, converting to kv_dtype. */
void op_kv_store(void *kcache, void *vcache, thin_dtype kv_dtype, const float *k, const float *v,
                 uint64_t kv_dim, uint64_t pos);

/* g[i] = silu(g[i]) * u[i]. */
void op_silu_mul(float *g, const float *u, uint64_t n);

/* g[i] = gelu_tanh(g[i]) * u[i]: 0.5 g (1 + tanh(sqrt(2/pi) (g + 0.044715 g^3))), transformers'
 * gelu_pytorch_tanh (computed in double, rounded once). */
void op_gelu_tanh_mul(float *g, const float *u, uint64_t n);

/* x[i] *= s. */
void op_scale(float *x, float s, uint64_t n);

/* x[i] = cap * tanh(x[i] / cap) (Gemma 2's soft cap of its logits). */
void op_softcap(float *x, float cap, uint64_t n);
/* x += s * h (a residual add with Granite's residual_multiplier). */
void op_add_scaled(float *x, const float *h, float s, uint64_t n);

/* x[i] += h[i]. */
void op_add(float *x, const float *h, uint64_t n);

/* x[i] += b[i], b a vector (1 × n) of any weight dtype but FP8: a projection's bias. */
void op_add_bias(float *x, const thin_wmat *b, uint64_t n);

/* Index of the largest value (lowest index wins ties); -1 when x holds NaN or an infinity (the
 * GPU's argmax kernels flag such a row alike). */
int64_t op_argmax(const float *x, uint64_t n);

#ifdef __cplusplus
}
#endif
#endif /* THIN_OPS_H */
