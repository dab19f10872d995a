/*
 * rope.cu — rotate-half RoPE of q and k at each row's position, fused with the store of k and v
 * into the layer's KV cache. A layer without rope ops passes NULL frequency tables and only stores.
 * A partial rotation (the first rot dims of each head, i paired with i + rot/2) leaves the other
 * dims as they are.
 * Angles are computed in double as the CPU twin does (op_rope, op_kv_store in ops_cpu.c).
 */
#include "cuda_common.cuh"

__device__ __forceinline__ void rot(float *x, uint32_t i, uint32_t half, double f, double p,
                                    float m) {
    double s, c;
    sincos(p * f, &s, &c);
    float cf = (float)c * m, sf = (float)s * m;
    float x0 = x[i], x1 = x[i + half];
    x[i] = x0 * cf - x1 * sf;
    x[i + half] = x0 * sf + x1 * cf;
}

/* One block per row. */
__global__ void rope_store_kernel(const rope_args a) {
    pdl_trigger();
    pdl_wait();
    const uint32_t row = blockIdx.x, hd = a.head_dim;
    const int32_t pos = *a.pos + (int32_t)row;
    const double p = (double)pos;
    if (a.q_freq) {
        float *q = a.q + (size_t)row * a.ldq;
        const uint32_t half = a.q_rot / 2;
        for (uint32_t t = threadIdx.x; t < a.n_heads * half; t += blockDim.x) {
            uint32_t h = t / half, i = t % half;
            rot(q + (size_t)h * hd, i, half, a.q_freq[i], p, a.q_m);
        }
    }
    if (!a.k) return;
    float *k = a.k + (size_t)row * a.ldk;
    const size_t kv_dim = (size_t)a.n_kv * hd, base = (size_t)pos * kv_dim;
    if (a.k_freq) {
        const uint32_t half = a.k_rot / 2;
        for (uint32_t t = threadIdx.x; t < a.n_kv * half; t += blockDim.x) {
            uint32_t h = t / half, i = t % half;
            rot(k + (size_t)h * hd, i, half, a.k_freq[i], p, a.k_m);
        }
        __syncthreads(); /* the row's k is whole before it is stored */
    }
    if (a.kcache)
        for (uint32_t t = threadIdx.x; t < kv_dim; t += blockDim.x)
            store_kv(a.kcache, a.kv_dtype, base + t, k[t]);
    if (a.vcache && a.v) {
        const float *v = a.v + (size_t)row * a.ldv;
        for (uint32_t t = threadIdx.x; t < kv_dim; t += blockDim.x)
            store_kv(a.vcache, a.kv_dtype, base + t, v[t]);
    }
}

cudaError_t launch_rope_store(const rope_args *a, uint32_t n, cudaStream_t st) {
    return launch_k(rope_store_kernel, dim3(n), dim3(256), 0, st, *a);
}
