/*
 * moe.cu — a mixture of experts (the tape's moe op) on the GPU, for a batch of n rows (a decode
 * step is n = 1, in the decode graph: every choice is made on the device).
 *
 *  1. router: each row's E scores (one warp a row of the router; row E the shared expert's gate).
 *  2. route: each row's choice, as exec_cpu.c's moe_rows makes it: the softmax of the scores and
 *     their top k, or DeepSeek-V3's sigmoid scores chosen on score + bias within the best groups;
 *     the weights (renormalized where norm_topk, times routed_scale), and a last slot for the
 *     shared expert (weight sigmoid(gate score), or 1) where there is one.
 *  3. bucket: the (row, slot) entries grouped by expert, in row order (one block).
 *  4. gate/up: a block of rows of one expert's gate and up (grid.y: the expert) for every entry
 *     that chose it, h = silu(g) * u: each expert's weights are read once for the batch (the
 *     entries reread them from L1/L2), the experts no row chose not at all.
 *  5. down: the same for the down rows, one output row a warp: each entry's expert output.
 *  6. combine: each row's output, its experts' outputs times their weights summed in expert order
 *     (as the CPU's), then the shared expert's.
 * Weights of any dtype the matvecs take (F32, F16, BF16, FP8 E4M3 with per-row scales), 16-byte
 * loads, F32 accumulation; the device table holds one dmat per expert matrix (stacked experts are
 * uploaded as the plan's row views of the stack).
 * A split over devices would keep this shape: each device a slice of every expert's inner dims
 * (gate and up rows, down columns), the combined outputs all-reduced, as for the dense MLP.
 * CPU twin: moe_rows in tools/thin-run/exec_cpu.c.
 */
#include "matvec_dev.cuh"

/* The 16-byte vector w of dtype DT as floats. */
template <int DT>
__device__ __forceinline__ void moe_unpack(uint4 w, float (&f)[vec_of<DT>::epv]) {
    const uint32_t u[4] = {w.x, w.y, w.z, w.w};
#pragma unroll
    for (int j = 0; j < 4; j++) {
        if constexpr (DT == THIN_DTYPE_F32) {
            f[j] = __uint_as_float(u[j]);
        } else if constexpr (DT == THIN_DTYPE_BF16) {
            f[2 * j] = __uint_as_float(u[j] << 16);
            f[2 * j + 1] = __uint_as_float(u[j] & 0xffff0000u);
        } else if constexpr (DT == THIN_DTYPE_F16) {
            __half2_raw h;
            h.x = (unsigned short)(u[j] & 0xffffu);
            h.y = (unsigned short)(u[j] >> 16);
            const float2 v = __half22float2(*(__half2 *)&h);
            f[2 * j] = v.x;
            f[2 * j + 1] = v.y;
        } else {
            __half2_raw lo = __nv_cvt_fp8x2_to_halfraw2((__nv_fp8x2_storage_t)(u[j] & 0xffffu), __NV_E4M3);
            __half2_raw hi = __nv_cvt_fp8x2_to_halfraw2((__nv_fp8x2_storage_t)(u[j] >> 16), __NV_E4M3);
            const float2 fl = __half22float2(*(__half2 *)&lo), fh = __half22float2(*(__half2 *)&hi);
            f[4 * j] = fl.x;
            f[4 * j + 1] = fl.y;
            f[4 * j + 2] = fh.x;
            f[4 * j + 3] = fh.y;
        }
    }
}

/* The warp's dot product of a padded weight row (16-byte vectors) with x's first `cols` floats. */
template <int DT>
__device__ __forceinline__ float moe_wdot(const uint4 *row, const float *x, uint32_t cols, uint32_t lane) {
    constexpr uint32_t EPV = vec_of<DT>::epv;
    const uint32_t nvec = (cols + EPV - 1) / EPV;
    float acc = 0.0f;
    for (uint32_t v = lane; v < nvec; v += 32) {
        float f[EPV];
        moe_unpack<DT>(__ldg(row + v), f);
        const uint32_t c0 = v * EPV;
        if (c0 + EPV <= cols) {
#pragma unroll
            for (uint32_t i = 0; i < EPV; i++) acc = fmaf(f[i], x[c0 + i], acc);
        } else { /* the row's last vector: x ends at cols (the weights' padding is zero, x's is not) */
            for (uint32_t i = 0; c0 + i < cols; i++) acc = fmaf(f[i], x[c0 + i], acc);
        }
    }
    return warp_sum(acc);
}

/* Row r of w against x (all lanes of the warp; the sum in every lane), its FP8 scale applied. */
__device__ __forceinline__ float moe_dot(const dmat &w, uint32_t r, const float *x, uint32_t lane) {
    const size_t esz = w.dtype == THIN_DTYPE_F32 ? 4 : w.dtype == THIN_DTYPE_F8_E4M3 ? 1 : 2;
    const uint4 *row = (const uint4 *)((const uint8_t *)w.data + (size_t)r * w.pitch * esz);
    switch (w.dtype) {
    case THIN_DTYPE_F32: return moe_wdot<THIN_DTYPE_F32>(row, x, w.cols, lane);
    case THIN_DTYPE_F16: return moe_wdot<THIN_DTYPE_F16>(row, x, w.cols, lane);
    case THIN_DTYPE_BF16: return moe_wdot<THIN_DTYPE_BF16>(row, x, w.cols, lane);
    default: {
        const float d = moe_wdot<THIN_DTYPE_F8_E4M3>(row, x, w.cols, lane);
        return w.scale ? d * w.scale[r] : d;
    }
    }
}

__global__ void moe_router_kernel(const moe_args a) {
    pdl_trigger();
    pdl_wait();
    const uint32_t lane = threadIdx.x & 31, e = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
    const uint32_t t = blockIdx.y;
    const float *x = a.x + (size_t)t * a.ldx;
    float v;
    if (e < a.E) v = moe_dot(a.router, e, x, lane);
    else if (e == a.E && a.sgate.data) v = moe_dot(a.sgate, 0, x, lane);
    else return;
    if (lane == 0) a.scores[(size_t)t * (a.E + 1) + e] = v;
}

/* The top k of n values into sel (ties: the lower index first), as exec_cpu.c's top_k. */
__device__ void moe_top_k(const float *p, uint32_t n, uint32_t k, int32_t *sel) {
    for (uint32_t j = 0; j < k; j++) {
        int32_t best = -1;
        for (uint32_t e = 0; e < n; e++) {
            bool taken = false;
            for (uint32_t i = 0; i < j && !taken; i++) taken = sel[i] == (int32_t)e;
            if (!taken && (best < 0 || p[e] > p[best])) best = (int32_t)e;
        }
        sel[j] = best;
    }
}

/* One thread a row: its choice and weights (exec_cpu.c's moe_rows and route_sigmoid). */
__global__ void moe_route_kernel(const moe_args a, uint32_t n) {
    pdl_trigger();
    pdl_wait();
    const uint32_t t = blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= n) return;
    const uint32_t E = a.E, K = a.K;
    float *r = a.scores + (size_t)t * (E + 1);
    int32_t *sel = a.sel + (size_t)t * a.KS;
    float *w = a.wts + (size_t)t * a.KS;
    float c[MOE_MAX_E];
    if (a.sigmoid) {
        for (uint32_t e = 0; e < E; e++) {
            r[e] = 1.0f / (1.0f + expf(-r[e]));
            c[e] = r[e] + (a.bias ? a.bias[e] : 0.0f);
        }
        const uint32_t G = a.n_group, per = E / G;
        if (G > 1) { /* a group's worth: its two best choice scores */
            float gs[MOE_MAX_E];
            int32_t two[2], gsel[MOE_MAX_E];
            for (uint32_t g = 0; g < G; g++) {
                moe_top_k(c + g * per, per, 2, two);
                gs[g] = c[g * per + two[0]] + c[g * per + two[1]];
            }
            moe_top_k(gs, G, a.topk_group, gsel);
            for (uint32_t g = 0; g < G; g++) {
                bool keep = false;
                for (uint32_t j = 0; j < a.topk_group; j++) keep |= gsel[j] == (int32_t)g;
                for (uint32_t e = 0; !keep && e < per; e++) c[g * per + e] = 0.0f;
            }
        }
        moe_top_k(c, E, K, sel);
    } else {
        float mx = r[0], sum = 0.0f;
        for (uint32_t e = 1; e < E; e++) mx = r[e] > mx ? r[e] : mx;
        for (uint32_t e = 0; e < E; e++) sum += r[e] = expf(r[e] - mx);
        for (uint32_t e = 0; e < E; e++) r[e] /= sum;
        moe_top_k(r, E, K, sel);
    }
    float ksum = 0.0f;
    for (uint32_t k = 0; k < K; k++) ksum += r[sel[k]];
    if (a.sigmoid) ksum += 1e-20f; /* as DeepSeek-V3 divides */
    const float scale = a.routed_scale > 0 ? a.routed_scale : 1.0f;
    for (uint32_t k = 0; k < K; k++) w[k] = (a.norm_topk ? r[sel[k]] / ksum : r[sel[k]]) * scale;
    if (a.KS > K) { /* the shared expert, table entry E */
        sel[K] = (int32_t)E;
        w[K] = a.sgate.data ? 1.0f / (1.0f + expf(-r[E])) : 1.0f;
    }
}

/* The n × KS entries (row × KS + slot) grouped by expert in row order: cnt[e] entries from
 * list[cnt[E + 1 + e]]. */
__global__ void moe_bucket_kernel(const moe_args a, uint32_t n) {
    pdl_trigger();
    pdl_wait();
    __shared__ uint32_t c[MOE_MAX_E + 1], o[MOE_MAX_E + 1];
    const uint32_t ne = a.E + 1, tot = n * a.KS;
    for (uint32_t i = threadIdx.x; i < ne; i += blockDim.x) c[i] = 0;
    __syncthreads();
    for (uint32_t i = threadIdx.x; i < tot; i += blockDim.x) atomicAdd(&c[a.sel[i]], 1u);
    __syncthreads();
    if (threadIdx.x == 0) {
        uint32_t acc = 0;
        for (uint32_t e = 0; e < ne; e++) o[e] = acc, acc += c[e];
    }
    __syncthreads();
    for (uint32_t i = threadIdx.x; i < ne; i += blockDim.x) a.cnt[i] = c[i], a.cnt[ne + i] = o[i];
    __syncthreads();
    if (threadIdx.x == 0) /* in row order, so that every run places them alike */
        for (uint32_t i = 0; i < tot; i++) a.list[o[a.sel[i]]++] = i;
}

/* Block (x, e): rows [MOE_ROWS x, MOE_ROWS (x + 1)) of expert e's gate and up, MOE_ROWS / warps
 * rows a warp, for every entry that chose e: h = silu(gate · x) * (up · x). */
__global__ void moe_gateup_kernel(const moe_args a) {
    pdl_trigger();
    pdl_wait();
    const uint32_t e = blockIdx.y, ne = a.E + 1, cnt = a.cnt[e];
    if (!cnt) return;
    const uint32_t off = a.cnt[ne + e], lane = threadIdx.x & 31, nw = blockDim.x >> 5;
    const dmat g = a.tab[3 * e], u = a.tab[3 * e + 1];
    for (uint32_t j = blockIdx.x * MOE_ROWS + (threadIdx.x >> 5); j < g.rows && j < (blockIdx.x + 1) * MOE_ROWS;
         j += nw) {
        for (uint32_t q = 0; q < cnt; q++) {
            const uint32_t ent = a.list[off + q];
            const float *x = a.x + (size_t)(ent / a.KS) * a.ldx;
            const float gv = moe_dot(g, j, x, lane), uv = moe_dot(u, j, x, lane);
            if (lane == 0) a.hb[(size_t)ent * a.imax + j] = silu_f(gv) * uv;
        }
    }
}

/* Block (x, e): output rows [MOE_ROWS x, MOE_ROWS (x + 1)) of expert e's down projection for
 * every entry that chose e. */
__global__ void moe_down_kernel(const moe_args a) {
    pdl_trigger();
    pdl_wait();
    const uint32_t e = blockIdx.y, ne = a.E + 1, cnt = a.cnt[e];
    if (!cnt) return;
    const uint32_t off = a.cnt[ne + e], lane = threadIdx.x & 31, nw = blockDim.x >> 5;
    const dmat d = a.tab[3 * e + 2];
    for (uint32_t c = blockIdx.x * MOE_ROWS + (threadIdx.x >> 5); c < d.rows && c < (blockIdx.x + 1) * MOE_ROWS;
         c += nw) {
        for (uint32_t q = 0; q < cnt; q++) {
            const uint32_t ent = a.list[off + q];
            const float v = moe_dot(d, c, a.hb + (size_t)ent * a.imax, lane);
            if (lane == 0) a.db[(size_t)ent * a.hout + c] = v;
        }
    }
}

/* out = the row's experts' outputs times their weights, in expert order, then the shared one. */
__global__ void moe_combine_kernel(const moe_args a) {
    pdl_trigger();
    pdl_wait();
    const uint32_t c = blockIdx.x * blockDim.x + threadIdx.x, t = blockIdx.y;
    if (c >= a.hout) return;
    const int32_t *sel = a.sel + (size_t)t * a.KS;
    const float *w = a.wts + (size_t)t * a.KS;
    const float *db = a.db + (size_t)t * a.KS * a.hout + c;
    float acc = 0.0f;
    int32_t last = -1;
    for (uint32_t j = 0; j < a.K; j++) { /* the slot of the next expert id up */
        uint32_t k = a.K;
        for (uint32_t i = 0; i < a.K; i++)
            if (sel[i] > last && (k == a.K || sel[i] < sel[k])) k = i;
        last = sel[k];
        acc += w[k] * db[(size_t)k * a.hout];
    }
    if (a.KS > a.K) acc += w[a.K] * db[(size_t)a.K * a.hout];
    a.out[(size_t)t * a.ldo + c] = acc;
}

cudaError_t launch_moe(const moe_args *a, uint32_t n, cudaStream_t st) {
    if (a->E == 0 || a->E > MOE_MAX_E || n == 0 || n > 65535) return cudaErrorInvalidValue;
    cudaError_t e = launch_k(moe_router_kernel, dim3((a->E + 1 + 7) / 8, n), dim3(256), 0, st, *a);
    if (e == cudaSuccess) e = launch_k(moe_route_kernel, dim3((n + 63) / 64), dim3(64), 0, st, *a, n);
    if (e == cudaSuccess) e = launch_k(moe_bucket_kernel, dim3(1), dim3(256), 0, st, *a, n);
    if (e == cudaSuccess)
        e = launch_k(moe_gateup_kernel, dim3((a->imax + MOE_ROWS - 1) / MOE_ROWS, a->E + 1), dim3(256), 0, st, *a);
    if (e == cudaSuccess)
        e = launch_k(moe_down_kernel, dim3((a->hout + MOE_ROWS - 1) / MOE_ROWS, a->E + 1), dim3(256), 0, st, *a);
    if (e == cudaSuccess) e = launch_k(moe_combine_kernel, dim3((a->hout + 255) / 256, n), dim3(256), 0, st, *a);
    return e;
}
