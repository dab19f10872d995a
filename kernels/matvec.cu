/*
 * matvec.cu — y = W x for one token, the decode step's bandwidth-bound core.
 *
 * One warp per output row (two rows for the fused gate/up pair), 16-byte weight loads with up to
 * MV_UNROLL of them in flight per lane before the first use, F32 accumulation, streaming cache hint
 * (weights are read once per token). The input vector is staged once per block in shared memory as
 * F32, optionally through a fused RMSNorm; epilogues add the residual or apply the SiLU gate.
 * CPU twin: op_matvec (+ op_rmsnorm, op_add, op_silu_mul) in ops_cpu.c.
 */
#include "cuda_common.cuh"

#define MV_WARPS 8
#define MV_UNROLL 8

/* Dot product of 16 bytes of weights (EPV elements of DT) with EPV floats of x in shared memory. */
template <int DT>
__device__ __forceinline__ float dot16(uint4 w, const float *xs) {
    float s = 0.0f;
    const uint32_t u[4] = {w.x, w.y, w.z, w.w};
    if (DT == THIN_DTYPE_BF16) {
        const float4 a = *(const float4 *)xs, b = *(const float4 *)(xs + 4);
        s = fmaf(__uint_as_float(u[0] << 16), a.x, s);
        s = fmaf(__uint_as_float(u[0] & 0xffff0000u), a.y, s);
        s = fmaf(__uint_as_float(u[1] << 16), a.z, s);
        s = fmaf(__uint_as_float(u[1] & 0xffff0000u), a.w, s);
        s = fmaf(__uint_as_float(u[2] << 16), b.x, s);
        s = fmaf(__uint_as_float(u[2] & 0xffff0000u), b.y, s);
        s = fmaf(__uint_as_float(u[3] << 16), b.z, s);
        s = fmaf(__uint_as_float(u[3] & 0xffff0000u), b.w, s);
    } else if (DT == THIN_DTYPE_F16) {
#pragma unroll
        for (int j = 0; j < 4; j++) {
            __half2 h = *(const __half2 *)&u[j];
            float2 f = __half22float2(h);
            s = fmaf(f.x, xs[2 * j], s);
            s = fmaf(f.y, xs[2 * j + 1], s);
        }
    } else if (DT == THIN_DTYPE_F8_E4M3) {
#pragma unroll
        for (int j = 0; j < 4; j++) {
            const float4 a = *(const float4 *)(xs + 4 * j);
            __half2_raw lo = __nv_cvt_fp8x2_to_halfraw2((__nv_fp8x2_storage_t)(u[j] & 0xffffu), __NV_E4M3);
            __half2_raw hi = __nv_cvt_fp8x2_to_halfraw2((__nv_fp8x2_storage_t)(u[j] >> 16), __NV_E4M3);
            float2 fl = __half22float2(*(__half2 *)&lo), fh = __half22float2(*(__half2 *)&hi);
            s = fmaf(fl.x, a.x, s);
            s = fmaf(fl.y, a.y, s);
            s = fmaf(fh.x, a.z, s);
            s = fmaf(fh.y, a.w, s);
        }
    } else { /* F32 */
        const float4 a = *(const float4 *)xs;
        s = fmaf(__uint_as_float(u[0]), a.x, s);
        s = fmaf(__uint_as_float(u[1]), a.y, s);
        s = fmaf(__uint_as_float(u[2]), a.z, s);
        s = fmaf(__uint_as_float(u[3]), a.w, s);
    }
    return s;
}

__device__ __forceinline__ uint4 ld_stream(const uint4 *p) {
    uint4 v;
    asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                 : "l"(p));
    return v;
}

/* Partial dots of NR rows (same pitch) with xs, for this lane; rows are 16-byte vectors. */
template <int DT, int NR>
__device__ __forceinline__ void dot_rows(const uint4 *const *rows, uint32_t nvec, const float *xs,
                                         int lane, float *acc) {
    const uint32_t epv = 16 / (DT == THIN_DTYPE_F32 ? 4 : DT == THIN_DTYPE_F8_E4M3 ? 1 : 2);
    for (uint32_t base = lane; base < nvec; base += 32 * MV_UNROLL) {
        uint4 w[NR][MV_UNROLL];
#pragma unroll
        for (int k = 0; k < MV_UNROLL; k++) {
            uint32_t v = base + 32 * k;
#pragma unroll
            for (int r = 0; r < NR; r++)
                if (v < nvec) w[r][k] = ld_stream(rows[r] + v);
        }
#pragma unroll
        for (int k = 0; k < MV_UNROLL; k++) {
            uint32_t v = base + 32 * k;
            if (v < nvec) {
#pragma unroll
                for (int r = 0; r < NR; r++) acc[r] += dot16<DT>(w[r][k], xs + (size_t)v * epv);
            }
        }
    }
}

/* Stages x (optionally RMS-normalised and weighted) into shared memory, zero-padded to pitch. */
__device__ void stage_x(float *xs, const mv_args &a, uint32_t cols, uint32_t pitch, float *red) {
    float ss = 0.0f;
    for (uint32_t i = threadIdx.x; i < pitch; i += blockDim.x) {
        float v = i < cols ? a.x[i] : 0.0f;
        xs[i] = v;
        ss += v * v;
    }
    if (a.norm_w) {
        float tot = block_sum(ss, red);
        float inv = 1.0f / sqrtf(tot / (float)cols + a.eps);
        for (uint32_t i = threadIdx.x; i < cols; i += blockDim.x)
            xs[i] = load_elem(a.norm_w, a.norm_dtype, i) * (inv * xs[i]);
    }
    __syncthreads();
}

__device__ __forceinline__ const uint4 *row_ptr(const dmat &w, uint32_t r) {
    size_t esz = w.dtype == THIN_DTYPE_F32 ? 4 : w.dtype == THIN_DTYPE_F8_E4M3 ? 1 : 2;
    return (const uint4 *)((const uint8_t *)w.data + (size_t)r * w.pitch * esz);
}

template <int DT>
__global__ void __launch_bounds__(MV_WARPS * 32) matvec_kernel(const mv_args a, uint32_t total) {
    extern __shared__ float xs[];
    __shared__ float red[32];
    const dmat &w0 = a.seg[0].w;
    const uint32_t cols = w0.cols, pitch = w0.pitch;
    stage_x(xs, a, cols, pitch, red);
    const uint32_t nvec = pitch / (16 / (DT == THIN_DTYPE_F32 ? 4 : DT == THIN_DTYPE_F8_E4M3 ? 1 : 2));
    const int lane = threadIdx.x & 31;
    for (uint32_t r = blockIdx.x * MV_WARPS + (threadIdx.x >> 5); r < total;
         r += gridDim.x * MV_WARPS) {
        if (a.pair) {
            const uint4 *rows[2] = {row_ptr(a.seg[0].w, r), row_ptr(a.seg[1].w, r)};
            float acc[2] = {0.0f, 0.0f};
            dot_rows<DT, 2>(rows, nvec, xs, lane, acc);
            float g = warp_sum(acc[0]), u = warp_sum(acc[1]);
            if (lane == 0) {
                if (DT == THIN_DTYPE_F8_E4M3) {
                    if (a.seg[0].w.scale) g *= a.seg[0].w.scale[r];
                    if (a.seg[1].w.scale) u *= a.seg[1].w.scale[r];
                }
                a.seg[1].out[r] = u;
                a.seg[0].out[r] = silu_f(g) * u;
            }
            continue;
        }
        int s = 0;
        uint32_t rr = r;
        while (s + 1 < a.nseg && rr >= a.seg[s].w.rows) rr -= a.seg[s++].w.rows;
        const dmat &w = a.seg[s].w;
        const uint4 *rows[1] = {row_ptr(w, rr)};
        float acc[1] = {0.0f};
        dot_rows<DT, 1>(rows, nvec, xs, lane, acc);
        float y = warp_sum(acc[0]);
        if (lane == 0) {
            if (DT == THIN_DTYPE_F8_E4M3 && w.scale) y *= w.scale[rr];
            a.seg[s].out[rr] = y;
            if (a.resid) a.resid[rr] += y;
        }
    }
}

template <int DT>
static cudaError_t launch_dt(const mv_args *a, int n_sm, cudaStream_t st) {
    uint32_t total = 0;
    for (int s = 0; s < (a->pair ? 1 : a->nseg); s++) total += a->seg[s].w.rows;
    size_t smem = (size_t)a->seg[0].w.pitch * sizeof(float);
    if (smem > 48 * 1024) {
        cudaError_t e = cudaFuncSetAttribute(matvec_kernel<DT>,
                                             cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
        if (e != cudaSuccess) return e;
    }
    uint32_t blocks = (total + MV_WARPS - 1) / MV_WARPS;
    uint32_t cap = (uint32_t)n_sm * 8; /* resident blocks: beyond that warps loop over rows */
    if (blocks > cap) blocks = cap;
    matvec_kernel<DT><<<blocks, MV_WARPS * 32, smem, st>>>(*a, total);
    return cudaGetLastError();
}

cudaError_t launch_matvec(const mv_args *a, int n_sm, cudaStream_t st) {
    switch (a->seg[0].w.dtype) {
    case THIN_DTYPE_BF16: return launch_dt<THIN_DTYPE_BF16>(a, n_sm, st);
    case THIN_DTYPE_F16: return launch_dt<THIN_DTYPE_F16>(a, n_sm, st);
    case THIN_DTYPE_F8_E4M3: return launch_dt<THIN_DTYPE_F8_E4M3>(a, n_sm, st);
    case THIN_DTYPE_F32: return launch_dt<THIN_DTYPE_F32>(a, n_sm, st);
    default: return cudaErrorInvalidValue;
    }
}
