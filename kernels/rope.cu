/*
 * rope.cu — rotate-half RoPE of q and k at each row's position, fused with the store of k and v
 * into the layer's KV cache and, before the rotation, the per-head RMSNorm of q and k where the
 * model has one (Qwen3: CPU twin op_head_rmsnorm). A layer without rope ops passes NULL frequency
 * tables and only stores. A partial rotation (the first rot dims of each head, i paired with
 * i + rot/2) leaves the other dims as they are.
 * Angles are computed in double as the CPU twin does (op_rope, op_kv_store in ops_cpu.c).
 */
#include "cuda_common.cuh"

/* Block (h, row): head h of q (h < n_heads) or KV head h - n_heads (its k, then its v into the
 * cache), a thread per dim. Before the dependency wait, which only the activations need, each
 * thread computes its rotation (the position is set before the step's first kernel) and loads its
 * norm weight; after it: the head's RMSNorm (a block sum), the rotation (dim i < rot/2 paired with
 * i + rot/2 through shared memory, dims from rot on unrotated), the row written back and, for a
 * KV head, k and v stored into the caches. */
__global__ void rope_store_kernel(const rope_args a) {
    extern __shared__ float xs[];
    __shared__ float red[32];
    pdl_trigger();
    const uint32_t hd = a.head_dim, i = threadIdx.x, row = blockIdx.y;
    const bool isq = blockIdx.x < a.n_heads;
    const uint32_t h = isq ? blockIdx.x : blockIdx.x - a.n_heads;
    const int32_t pos = *a.pos + (int32_t)row;
    const rope_dim d = rope_dim_of(a, !isq, i, pos);
    pdl_wait();
    float *x = (isq ? a.q + (size_t)row * a.ldq : a.k + (size_t)row * a.ldk) + (size_t)h * hd;
    float v = i < hd ? x[i] : 0.0f;
    if (isq ? a.q_norm : a.k_norm) {
        float ss = warp_sum(v * v);
        if ((i & 31) == 0) red[i >> 5] = ss;
        __syncthreads();
        ss = 0.0f;
        for (uint32_t w = 0; w < (blockDim.x >> 5); w++) ss += red[w];
        v = rope_dim_norm(a, !isq, d, v, ss);
    }
    if (isq ? a.q_freq : a.k_freq) {
        if (i < hd) xs[i] = v;
        __syncthreads();
        v = rope_dim_rotate(a, !isq, d, i, v, xs);
    }
    if (i >= hd) return;
    x[i] = v;
    if (isq) return;
    const size_t c = (size_t)pos * a.n_kv * hd + (size_t)h * hd + i;
    if (a.kcache) store_kv(a.kcache, a.kv_dtype, c, v);
    if (a.vcache && a.v) store_kv(a.vcache, a.kv_dtype, c, a.v[(size_t)row * a.ldv + (size_t)h * hd + i]);
}

cudaError_t launch_rope_store(const rope_args *a, uint32_t n, cudaStream_t st) {
    if (a->head_dim > 1024 || !n) return cudaErrorInvalidValue;
    const uint32_t heads = a->n_heads + (a->k ? a->n_kv : 0);
    return launch_k(rope_store_kernel, dim3(heads, n), dim3((a->head_dim + 31) / 32 * 32),
                    a->head_dim * sizeof(float), st, *a);
}
