/*
 * attention.cu — single-token GQA attention split over the sequence (flash-decoding).
 *
 * Pass 1: block (head, split, row) scores its share of positions into shared memory, takes their
 * softmax maximum m and sum l, and writes the unnormalised weighted sum of V with (m, l).
 * Pass 2: block (head, row) combines the splits. The split count is fixed per session (so a CUDA
 * graph can replay it); the positions per split follow *pos, and empty splits write l = 0.
 * Query head h reads KV head h / (n_heads / n_kv). CPU twin: op_attention in ops_cpu.c.
 */
#include "cuda_common.cuh"

#define ATTN_THREADS 128

__device__ __forceinline__ float kv_load(const void *c, int dt, size_t i) {
    return dt == THIN_DTYPE_BF16 ? bf16_bits_to_f32(((const uint16_t *)c)[i]) : ((const float *)c)[i];
}

__global__ void __launch_bounds__(ATTN_THREADS) attn_partial_kernel(const attn_args a) {
    pdl_trigger();
    pdl_wait();
    extern __shared__ float sm[]; /* q: head_dim, scores: chunk_max, acc: ATTN_THREADS */
    __shared__ float red[32];
    const uint32_t h = blockIdx.x, split = blockIdx.y, row = blockIdx.z, hd = a.head_dim;
    const uint32_t npos = (uint32_t)(*a.pos) + row + 1;
    uint32_t chunk = (npos + a.n_splits - 1) / a.n_splits;
    if (chunk < ATTN_MIN_CHUNK) chunk = ATTN_MIN_CHUNK;
    const uint32_t start = split * chunk, end = min(npos, start + chunk);
    float *part = a.partial + (((size_t)row * a.n_heads + h) * a.n_splits + split) * (hd + 2);
    if (start >= end) {
        if (threadIdx.x == 0) {
            part[hd] = -INFINITY;
            part[hd + 1] = 0.0f;
        }
        return;
    }
    float *qs = sm, *sc = sm + hd, *acc = sc + a.chunk_max;
    const float scale = rsqrtf((float)hd);
    const float *q = a.q + (size_t)row * a.ldq + (size_t)h * hd;
    for (uint32_t d = threadIdx.x; d < hd; d += blockDim.x) qs[d] = q[d];
    __syncthreads();
    const size_t kv_dim = (size_t)a.n_kv * hd, kvo = (size_t)(h / (a.n_heads / a.n_kv)) * hd;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    for (uint32_t p = start + warp; p < end; p += nw) {
        size_t b = (size_t)p * kv_dim + kvo;
        float s = 0.0f;
        for (uint32_t d = lane; d < hd; d += 32) s += qs[d] * kv_load(a.kcache, a.kv_dtype, b + d);
        s = warp_sum(s);
        if (lane == 0) sc[p - start] = s * scale;
    }
    __syncthreads();
    float m = -INFINITY;
    for (uint32_t i = threadIdx.x; i < end - start; i += blockDim.x) m = fmaxf(m, sc[i]);
    m = block_max(m, red);
    float l = 0.0f;
    for (uint32_t i = threadIdx.x; i < end - start; i += blockDim.x) {
        float e = expf(sc[i] - m);
        sc[i] = e;
        l += e;
    }
    l = block_sum(l, red); /* its barriers also publish sc */
    /* Weighted sum of V: groups of hd threads take interleaved positions (hd < threads), or each
     * thread takes dimensions d, d + threads, ... (hd >= threads). */
    const uint32_t groups = hd >= blockDim.x ? 1 : blockDim.x / hd;
    const uint32_t g = threadIdx.x / (hd >= blockDim.x ? blockDim.x : hd);
    for (uint32_t d0 = 0; d0 < hd; d0 += blockDim.x) {
        uint32_t d = d0 + (hd >= blockDim.x ? threadIdx.x : threadIdx.x % hd);
        float o = 0.0f;
        if (g < groups && d < hd)
            for (uint32_t p = start + g; p < end; p += groups)
                o += sc[p - start] * kv_load(a.vcache, a.kv_dtype, (size_t)p * kv_dim + kvo + d);
        acc[threadIdx.x] = o;
        __syncthreads();
        if (threadIdx.x < hd - d0 && threadIdx.x < (hd >= blockDim.x ? blockDim.x : hd)) {
            float t = 0.0f;
            for (uint32_t j = 0; j < groups; j++) t += acc[j * (hd >= blockDim.x ? blockDim.x : hd) + threadIdx.x];
            part[d0 + threadIdx.x] = t;
        }
        __syncthreads();
    }
    if (threadIdx.x == 0) {
        part[hd] = m;
        part[hd + 1] = l;
    }
}

__global__ void attn_combine_kernel(const attn_args a) {
    pdl_trigger();
    pdl_wait();
    const uint32_t h = blockIdx.x, row = blockIdx.y, hd = a.head_dim;
    const float *part = a.partial + ((size_t)row * a.n_heads + h) * a.n_splits * (hd + 2);
    float M = -INFINITY;
    for (uint32_t s = 0; s < a.n_splits; s++)
        if (part[s * (hd + 2) + hd + 1] > 0.0f) M = fmaxf(M, part[s * (hd + 2) + hd]);
    float L = 0.0f;
    for (uint32_t s = 0; s < a.n_splits; s++) {
        const float *ps = part + s * (hd + 2);
        if (ps[hd + 1] > 0.0f) L += ps[hd + 1] * expf(ps[hd] - M);
    }
    float *out = a.out + (size_t)row * a.ldo + (size_t)h * hd;
    for (uint32_t d = threadIdx.x; d < hd; d += blockDim.x) {
        float o = 0.0f;
        for (uint32_t s = 0; s < a.n_splits; s++) {
            const float *ps = part + s * (hd + 2);
            if (ps[hd + 1] > 0.0f) o += ps[d] * expf(ps[hd] - M);
        }
        out[d] = o / L;
    }
}

cudaError_t launch_attention(const attn_args *a, uint32_t n, cudaStream_t st) {
    size_t smem = ((size_t)a->head_dim + a->chunk_max + ATTN_THREADS) * sizeof(float);
    if (smem > 48 * 1024) {
        cudaError_t e = cudaFuncSetAttribute(attn_partial_kernel,
                                             cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
        if (e != cudaSuccess) return e;
    }
    dim3 g1(a->n_heads, a->n_splits, n);
    cudaError_t e = launch_k(attn_partial_kernel, dim3(g1), dim3(ATTN_THREADS), smem, st, *a);
    if (e != cudaSuccess) return e;
    dim3 g2(a->n_heads, n);
    return launch_k(attn_combine_kernel, dim3(g2), dim3(128), 0, st, *a);
}
