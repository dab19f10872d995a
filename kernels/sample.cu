/*
 * sample.cu — choosing the next token on the device: row-wise argmax (lowest index wins ties) in
 * two passes, and the statistics and candidate list that sampling with temperature, top-k and
 * top-p needs, so that no full row of logits crosses to the host. CPU twin: op_argmax.
 */
#include "cuda_common.cuh"

/* Order of (value, index) pairs: the larger value, then the lower index. */
__device__ __forceinline__ bool better(float v, int i, float bv, int bi) {
    return v > bv || (v == bv && i < bi);
}

__device__ __forceinline__ void warp_best(float &v, int &i) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        float ov = __shfl_xor_sync(0xffffffffu, v, o);
        int oi = __shfl_xor_sync(0xffffffffu, i, o);
        if (oi >= 0 && (i < 0 || better(ov, oi, v, i))) {
            v = ov;
            i = oi;
        }
    }
}

/* Best of the block's (v, i); thread 0 gets it. */
__device__ void block_best(float &v, int &i) {
    __shared__ float sv[32];
    __shared__ int si[32];
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    warp_best(v, i);
    if (lane == 0) {
        sv[warp] = v;
        si[warp] = i;
    }
    __syncthreads();
    if (warp == 0) {
        v = lane < nw ? sv[lane] : -INFINITY;
        i = lane < nw ? si[lane] : -1;
        warp_best(v, i);
    }
}

__global__ void argmax_partial_kernel(const float *x, uint32_t ld, uint32_t cols, float2 *partial) {
    pdl_trigger();
    pdl_wait();
    const uint32_t row = blockIdx.y;
    const float *xr = x + (size_t)row * ld;
    float bv = -INFINITY;
    int bi = -1;
    for (uint32_t c = blockIdx.x * blockDim.x + threadIdx.x; c < cols; c += gridDim.x * blockDim.x) {
        float v = xr[c];
        if (bi < 0 || v > bv) { /* ascending c: the first of equal values stays */
            bv = v;
            bi = (int)c;
        }
    }
    block_best(bv, bi);
    if (threadIdx.x == 0)
        partial[(size_t)row * gridDim.x + blockIdx.x] = make_float2(bv, __int_as_float(bi));
}

__global__ void argmax_final_kernel(int32_t *out, const float2 *partial, uint32_t parts) {
    pdl_trigger();
    pdl_wait();
    const uint32_t row = blockIdx.x;
    float bv = -INFINITY;
    int bi = -1;
    for (uint32_t j = threadIdx.x; j < parts; j += blockDim.x) {
        float2 p = partial[(size_t)row * parts + j];
        int pi = __float_as_int(p.y);
        if (pi >= 0 && (bi < 0 || better(p.x, pi, bv, bi))) {
            bv = p.x;
            bi = pi;
        }
    }
    block_best(bv, bi);
    if (threadIdx.x == 0) out[row] = bi < 0 ? 0 : bi;
}

cudaError_t launch_argmax(int32_t *out, const float *x, uint32_t ld, uint32_t cols, uint32_t n,
                          float2 *partial, cudaStream_t st) {
    dim3 grid(ARGMAX_PARTS, n);
    cudaError_t e = launch_k(argmax_partial_kernel, dim3(grid), dim3(256), 0, st, x, ld, cols, partial);
    if (e != cudaSuccess) return e;
    return launch_k(argmax_final_kernel, dim3(n), dim3(128), 0, st, out, partial, ARGMAX_PARTS);
}

/* One block: max and sum of exp((x - max) / t), then every probability >= cutoff to cand. */
__global__ void sample_kernel(const float *x, uint32_t cols, float t, float cutoff, float *stats,
                              float2 *cand, uint32_t cap, unsigned int *count) {
    pdl_trigger();
    pdl_wait();
    __shared__ float red[32];
    float m = -INFINITY;
    for (uint32_t c = threadIdx.x; c < cols; c += blockDim.x) m = fmaxf(m, x[c]);
    m = block_max(m, red);
    float z = 0.0f;
    for (uint32_t c = threadIdx.x; c < cols; c += blockDim.x) z += expf((x[c] - m) / t);
    z = block_sum(z, red);
    if (threadIdx.x == 0) {
        stats[0] = m;
        stats[1] = z;
        *count = 0;
    }
    __syncthreads();
    for (uint32_t c = threadIdx.x; c < cols; c += blockDim.x) {
        float p = expf((x[c] - m) / t) / z;
        if (p >= cutoff) {
            unsigned int k = atomicAdd(count, 1u);
            if (k < cap) cand[k] = make_float2(p, __int_as_float((int)c));
        }
    }
}

cudaError_t launch_sample_candidates(const float *x, uint32_t cols, float temperature, float cutoff,
                                     float *stats, float2 *cand, uint32_t cap,
                                     unsigned int *count, cudaStream_t st) {
    return launch_k(sample_kernel, dim3(1), dim3(1024), 0, st, x, cols, temperature, cutoff, stats, cand, cap, count);
}
