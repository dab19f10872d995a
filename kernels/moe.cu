/*
 * moe.cu — a mixture of experts (the tape's moe op) on the GPU, for a batch of n rows (a decode
 * step is n = 1, in the decode graph: every choice is made on the device).
 *
 *  1. router: each row's E scores (one warp a row of the router; row E the shared expert's gate).
 *  2. route: each row's choice (a warp a row), as exec_cpu.c's moe_rows makes it: the softmax of
 *     the scores and their top k, or DeepSeek-V3's sigmoid scores chosen on score + bias within the
 *     best groups; the weights (renormalized where norm_topk, times routed_scale), and a last
 *     slot for the shared expert (weight sigmoid(gate score), or 1) where there is one.
 *  3. bucket: the (row, slot) entries grouped by expert, in row order, and the list of experts
 *     with entries (one block).
 *  4. gate/up: a block of rows of one expert's gate and up (grid.y: the y-th expert with entries,
 *     so a decode step launches blocks for its chosen experts only) for every entry that chose
 *     it, h = silu(g) * u: each expert's weights are read once for the batch (the entries reread
 *     them from L1/L2), the experts no row chose not at all.
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

/* acc += vector w (vector index v of a row) times x's matching floats (x ends at cols: the weights'
 * padding is zero, x's is not). */
template <int DT>
__device__ __forceinline__ void moe_fma(uint4 w, uint32_t v, const float *x, uint32_t cols, float &acc) {
    constexpr uint32_t EPV = vec_of<DT>::epv;
    float f[EPV];
    unpack16<DT>(w, f);
    const uint32_t c0 = v * EPV;
    if (c0 + EPV <= cols) {
#pragma unroll
        for (uint32_t i = 0; i < EPV; i++) acc = fmaf(f[i], x[c0 + i], acc);
    } else {
        for (uint32_t i = 0; c0 + i < cols; i++) acc = fmaf(f[i], x[c0 + i], acc);
    }
}

/* The warp's dot products of NR padded weight rows (16-byte vectors, the same length) with x's
 * first `cols` floats into d (every lane); MOE_UNROLL vectors of each row in flight per lane. */
#define MOE_UNROLL 4
template <int DT, int NR>
__device__ __forceinline__ void moe_wdot(const uint4 *const (&row)[NR], const float *x, uint32_t cols, uint32_t lane,
                                         float (&d)[NR]) {
    constexpr uint32_t EPV = vec_of<DT>::epv;
    const uint32_t nvec = (cols + EPV - 1) / EPV;
    float acc[NR];
#pragma unroll
    for (int r = 0; r < NR; r++) acc[r] = 0.0f;
    uint32_t v = lane;
    for (; v + 32 * (MOE_UNROLL - 1) < nvec; v += 32 * MOE_UNROLL) {
        uint4 w[NR][MOE_UNROLL];
#pragma unroll
        for (int r = 0; r < NR; r++)
#pragma unroll
            for (int u = 0; u < MOE_UNROLL; u++) w[r][u] = __ldg(row[r] + v + 32 * u);
#pragma unroll
        for (int r = 0; r < NR; r++)
#pragma unroll
            for (int u = 0; u < MOE_UNROLL; u++) moe_fma<DT>(w[r][u], v + 32 * u, x, cols, acc[r]);
    }
    for (; v < nvec; v += 32)
#pragma unroll
        for (int r = 0; r < NR; r++) moe_fma<DT>(__ldg(row[r] + v), v, x, cols, acc[r]);
#pragma unroll
    for (int r = 0; r < NR; r++) d[r] = warp_sum(acc[r]);
}

__device__ __forceinline__ const uint4 *moe_row(const dmat &w, uint32_t r) {
    const size_t esz = w.dtype == THIN_DTYPE_F32 ? 4 : w.dtype == THIN_DTYPE_F8_E4M3 ? 1 : 2;
    return (const uint4 *)((const uint8_t *)w.data + (size_t)r * w.pitch * esz);
}

/* Row r of w against x (all lanes of the warp; the sum in every lane), its FP8 scale applied. */
__device__ __forceinline__ float moe_dot(const dmat &w, uint32_t r, const float *x, uint32_t lane) {
    const uint4 *const row[1] = {moe_row(w, r)};
    float d[1];
    switch (w.dtype) {
    case THIN_DTYPE_F32: moe_wdot<THIN_DTYPE_F32, 1>(row, x, w.cols, lane, d); return d[0];
    case THIN_DTYPE_F16: moe_wdot<THIN_DTYPE_F16, 1>(row, x, w.cols, lane, d); return d[0];
    case THIN_DTYPE_BF16: moe_wdot<THIN_DTYPE_BF16, 1>(row, x, w.cols, lane, d); return d[0];
    default: moe_wdot<THIN_DTYPE_F8_E4M3, 1>(row, x, w.cols, lane, d); return w.scale ? d[0] * w.scale[r] : d[0];
    }
}

/* Row r of g and of u (the same dtype and length) against x at once, their FP8 scales applied. */
__device__ __forceinline__ void moe_dot2(const dmat &g, const dmat &u, uint32_t r, const float *x, uint32_t lane,
                                         float &gv, float &uv) {
    if (g.dtype != u.dtype || g.cols != u.cols) {
        gv = moe_dot(g, r, x, lane), uv = moe_dot(u, r, x, lane);
        return;
    }
    const uint4 *const row[2] = {moe_row(g, r), moe_row(u, r)};
    float d[2];
    switch (g.dtype) {
    case THIN_DTYPE_F32: moe_wdot<THIN_DTYPE_F32, 2>(row, x, g.cols, lane, d); break;
    case THIN_DTYPE_F16: moe_wdot<THIN_DTYPE_F16, 2>(row, x, g.cols, lane, d); break;
    case THIN_DTYPE_BF16: moe_wdot<THIN_DTYPE_BF16, 2>(row, x, g.cols, lane, d); break;
    default:
        moe_wdot<THIN_DTYPE_F8_E4M3, 2>(row, x, g.cols, lane, d);
        if (g.scale) d[0] *= g.scale[r];
        if (u.scale) d[1] *= u.scale[r];
    }
    gv = d[0], uv = d[1];
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

/* The warp's best value of c[0..n) (ties: the lower index), as exec_cpu.c's top_k picks. */
__device__ __forceinline__ int32_t moe_warp_best(const float *c, uint32_t n, uint32_t lane) {
    float bv = -INFINITY;
    int32_t be = -1;
    for (uint32_t e = lane; e < n; e += 32)
        if (be < 0 || c[e] > bv) bv = c[e], be = (int32_t)e;
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        const float ov = __shfl_xor_sync(0xffffffffu, bv, o);
        const int32_t oe = __shfl_xor_sync(0xffffffffu, be, o);
        if (oe >= 0 && (be < 0 || ov > bv || (ov == bv && oe < be))) bv = ov, be = oe;
    }
    return be;
}

/* One warp a row: its choice and weights (exec_cpu.c's moe_rows and route_sigmoid), the choice
 * scores in shared memory, the top k by K rounds of the warp's best (a chosen score then -inf). */
#define MOE_ROUTE_WARPS 4
__global__ void moe_route_kernel(const moe_args a, uint32_t n) {
    pdl_trigger();
    pdl_wait();
    __shared__ float cs[MOE_ROUTE_WARPS][MOE_MAX_E];
    const uint32_t lane = threadIdx.x & 31, t = blockIdx.x * MOE_ROUTE_WARPS + (threadIdx.x >> 5);
    if (t >= n) return;
    const uint32_t E = a.E, K = a.K;
    float *r = a.scores + (size_t)t * (E + 1), *c = cs[threadIdx.x >> 5];
    int32_t *sel = a.sel + (size_t)t * a.KS;
    float *w = a.wts + (size_t)t * a.KS;
    if (a.sigmoid) {
        for (uint32_t e = lane; e < E; e += 32) {
            r[e] = 1.0f / (1.0f + expf(-r[e]));
            c[e] = r[e] + (a.bias ? a.bias[e] : 0.0f);
        }
        __syncwarp();
        const uint32_t G = a.n_group, per = E / G;
        if (G > 1 && lane == 0) { /* a group's worth: its two best choice scores */
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
    } else {
        float mx = -INFINITY, sum = 0.0f;
        for (uint32_t e = lane; e < E; e += 32) mx = fmaxf(mx, r[e]);
        mx = warp_max(mx);
        for (uint32_t e = lane; e < E; e += 32) sum += r[e] = expf(r[e] - mx);
        sum = warp_sum(sum);
        for (uint32_t e = lane; e < E; e += 32) c[e] = r[e] /= sum;
    }
    __syncwarp();
    for (uint32_t k = 0; k < K; k++) {
        const int32_t be = moe_warp_best(c, E, lane);
        __syncwarp();
        if (lane == 0) sel[k] = be, c[be] = -INFINITY;
        __syncwarp();
    }
    if (lane) return;
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
 * list[cnt[E + 1 + e]]; cnt[2 (E + 1)] experts with entries, their ids from cnt[2 (E + 1) + 1] up. */
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
    if (threadIdx.x == 0) { /* in row order, so that every run places them alike */
        for (uint32_t i = 0; i < tot; i++) a.list[o[a.sel[i]]++] = i;
        uint32_t na = 0;
        for (uint32_t e = 0; e < ne; e++)
            if (c[e]) a.cnt[2 * ne + 1 + na++] = e;
        a.cnt[2 * ne] = na;
    }
}

/* The expert block y of the gate/up and down kernels takes: the y-th with entries (grid.y is
 * min(E + 1, entries), so a decode step launches blocks for its chosen experts only), or -1. */
__device__ __forceinline__ int32_t moe_block_expert(const moe_args &a) {
    const uint32_t ne = a.E + 1;
    return blockIdx.y < a.cnt[2 * ne] ? (int32_t)a.cnt[2 * ne + 1 + blockIdx.y] : -1;
}

/* Block (x, y): rows [MOE_ROWS x, MOE_ROWS (x + 1)) of its expert's gate and up, MOE_ROWS / warps
 * rows a warp, for every entry that chose the expert: h = silu(gate · x) * (up · x). */
__global__ void moe_gateup_kernel(const moe_args a) {
    pdl_trigger();
    pdl_wait();
    const int32_t e = moe_block_expert(a);
    if (e < 0) return;
    const uint32_t ne = a.E + 1, cnt = a.cnt[e], off = a.cnt[ne + e], lane = threadIdx.x & 31, nw = blockDim.x >> 5;
    const dmat g = a.tab[3 * e], u = a.tab[3 * e + 1];
    for (uint32_t j = blockIdx.x * MOE_ROWS + (threadIdx.x >> 5); j < g.rows && j < (blockIdx.x + 1) * MOE_ROWS;
         j += nw) {
        for (uint32_t q = 0; q < cnt; q++) {
            const uint32_t ent = a.list[off + q];
            const float *x = a.x + (size_t)(ent / a.KS) * a.ldx;
            float gv, uv;
            moe_dot2(g, u, j, x, lane, gv, uv);
            if (lane == 0) a.hb[(size_t)ent * a.imax + j] = silu_f(gv) * uv;
        }
    }
}

/* Block (x, y): output rows [MOE_ROWS x, MOE_ROWS (x + 1)) of its expert's down projection for
 * every entry that chose the expert. */
__global__ void moe_down_kernel(const moe_args a) {
    pdl_trigger();
    pdl_wait();
    const int32_t e = moe_block_expert(a);
    if (e < 0) return;
    const uint32_t ne = a.E + 1, cnt = a.cnt[e], off = a.cnt[ne + e], lane = threadIdx.x & 31, nw = blockDim.x >> 5;
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
    const uint32_t ny = n * a->KS < a->E + 1 ? n * a->KS : a->E + 1; /* experts that can have entries */
    cudaError_t e = launch_k(moe_router_kernel, dim3((a->E + 1 + 7) / 8, n), dim3(256), 0, st, *a);
    if (e == cudaSuccess)
        e = launch_k(moe_route_kernel, dim3((n + MOE_ROUTE_WARPS - 1) / MOE_ROUTE_WARPS), dim3(32 * MOE_ROUTE_WARPS),
                     0, st, *a, n);
    if (e == cudaSuccess) e = launch_k(moe_bucket_kernel, dim3(1), dim3(256), 0, st, *a, n);
    if (e == cudaSuccess)
        e = launch_k(moe_gateup_kernel, dim3((a->imax + MOE_ROWS - 1) / MOE_ROWS, ny), dim3(256), 0, st, *a);
    if (e == cudaSuccess)
        e = launch_k(moe_down_kernel, dim3((a->hout + MOE_ROWS - 1) / MOE_ROWS, ny), dim3(256), 0, st, *a);
    if (e == cudaSuccess) e = launch_k(moe_combine_kernel, dim3((a->hout + 255) / 256, n), dim3(256), 0, st, *a);
    return e;
}
