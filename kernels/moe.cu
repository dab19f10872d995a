/*
 * moe.cu — a mixture of experts (the tape's moe op) on the GPU, for a batch of n rows (a decode
 * step is n = 1, in the decode graph: every choice is made on the device).
 *
 *  1. router: each row's E scores (one warp a row of the router, x staged once a block; a block of
 *     its own for the shared expert's gate, score E).
 *  2. route: each row's choice (a warp a row), as exec_cpu.c's moe_rows makes it: the softmax of
 *     the scores and their top k, or DeepSeek-V3's sigmoid scores chosen on score + bias within the
 *     best groups; the weights (renormalized where norm_topk, times routed_scale), and a last
 *     slot for the shared expert (weight sigmoid(gate score), or 1) where there is one. One row
 *     through the kernels below (mixed expert dtypes, or THIN_CUDA_MOE1=0): the same warp also
 *     places the entries as step 3 does.
 *  3. bucket (several rows): the (row, slot) entries grouped by expert, in row order, and the list
 *     of experts with entries (one block).
 *  4. gate/up: a block of units of one expert (grid.y: the y-th expert with entries, so a decode
 *     step launches blocks for its chosen experts only), two units a warp, the four gate and up
 *     rows in flight at once, for every entry that chose it: h = silu(g) * u. x is staged in
 *     shared memory once per entry in the matvecs' float4 planes; each expert's weights are read
 *     once for the batch (later entries reread them from L1/L2), the experts no row chose not at all.
 *  5. down: the same for the down rows, four output rows a warp (an expert's down rows are short:
 *     768 elements in Qwen3-30B-A3B, three 16-byte vectors a lane in BF16, all requested at
 *     once); its first weights are requested before the dependency wait (the gate/up kernel lets
 *     it launch only once the expert list is complete).
 *  6. combine: each row's output, its experts' outputs times their weights summed in expert order
 *     (as the CPU's), then the shared expert's.
 * A decode step (one row) whose experts' gate/up share one dtype and downs one runs 4 and 5-6 as
 * the one-row kernels instead (moe_one, below): four kernels a layer, no bucket and no per-expert
 * outputs.
 * Weights of any dtype the matvecs take (F32, F16, BF16, FP8 E4M3 with per-row scales), 16-byte
 * loads, F32 accumulation; the device table holds one dmat per expert matrix (stacked experts are
 * uploaded as the plan's row views of the stack).
 * A split over devices would keep this shape: each device a slice of every expert's inner dims
 * (gate and up rows, down columns), the combined outputs all-reduced, as for the dense MLP.
 * CPU twin: moe_rows in tools/thin-run/exec_cpu.c.
 */
#include "matvec_dev.cuh"

int thin_cuda_moe1 = 1; /* env THIN_CUDA_MOE1=0: one-row steps through the batch kernels (for measurements) */

/* x's first cols floats into shared memory in dot16's plane layout for weights of dtype DT whose
 * rows hold pitch elements (16-byte vectors), zero from cols to pitch (the rows' padding is zero,
 * x's is not). The whole block. */
#define MOE_XPRE 8 /* x loads in flight a thread while staging */
template <int DT>
__device__ __forceinline__ void moe_stage(float *xs, const float *x, uint32_t cols, uint32_t pitch) {
    const uint32_t ps = pitch / vec_of<DT>::epv * 4;
    for (uint32_t b = threadIdx.x; b < pitch; b += MOE_XPRE * blockDim.x) {
        float v[MOE_XPRE];
#pragma unroll
        for (int u = 0; u < MOE_XPRE; u++) {
            const uint32_t i = b + u * blockDim.x;
            v[u] = i < cols ? __ldcg(x + i) : 0.0f;
        }
#pragma unroll
        for (int u = 0; u < MOE_XPRE; u++) {
            const uint32_t i = b + u * blockDim.x;
            if (i < pitch) xs[x_index<DT>(i, ps)] = v[u];
        }
    }
}

/* NR weight rows for the dot products of moe_dots: row r has nv[r] 16-byte vectors and is taken
 * against x staged by moe_stage at xr[r] (its planes nv[r] · 4 floats apart). */
template <int NR>
struct moe_rowset {
    const uint4 *row[NR];
    const float *xr[NR];
    uint32_t nv[NR];
};

/* Batch b (vectors b .. b + 32 U - 1 of each row, a lane's every 32nd) of the rows into w; zeros
 * past a row's end. */
template <int NR, int U>
__device__ __forceinline__ void moe_load(uint4 (&w)[NR][U], const moe_rowset<NR> &m, uint32_t b, uint32_t lane) {
#pragma unroll
    for (int u = 0; u < U; u++) {
        const uint32_t v = b + 32 * u + lane;
#pragma unroll
        for (int r = 0; r < NR; r++) w[r][u] = v < m.nv[r] ? __ldg(m.row[r] + v) : make_uint4(0, 0, 0, 0);
    }
}

/* The warp's dot products of the rows (batch 0 already in w: moe_load) into d (every lane); nmax:
 * the longest row's vectors. All U vectors of a batch are requested before any is used, so that
 * short rows (an expert's down rows of 768 elements: three vectors a lane in BF16) arrive in one
 * memory round trip; every lane runs the same batches. */
template <int DT, int NR, int U>
__device__ __forceinline__ void moe_dots(uint4 (&w)[NR][U], const moe_rowset<NR> &m, uint32_t nmax, uint32_t lane,
                                         float (&d)[NR]) {
    float acc[NR];
#pragma unroll
    for (int r = 0; r < NR; r++) acc[r] = 0.0f;
    for (uint32_t b = 0;;) {
#pragma unroll
        for (int u = 0; u < U; u++) {
            const uint32_t v = b + 32 * u + lane;
#pragma unroll
            for (int r = 0; r < NR; r++)
                if (v < m.nv[r]) acc[r] += dot16<DT>(w[r][u], m.xr[r] + 4 * v, m.nv[r] * 4);
        }
        b += 32 * U;
        if (b >= nmax) break;
        moe_load<NR, U>(w, m, b, lane);
    }
#pragma unroll
    for (int r = 0; r < NR; r++) d[r] = warp_sum(acc[r]);
}

__device__ __forceinline__ const uint4 *moe_row(const dmat &w, uint32_t r) {
    const size_t esz = w.dtype == THIN_DTYPE_F32 ? 4 : w.dtype == THIN_DTYPE_F8_E4M3 ? 1 : 2;
    return (const uint4 *)((const uint8_t *)w.data + (size_t)r * w.pitch * esz);
}

/* Row r's FP8 scale (1 for other dtypes). */
__device__ __forceinline__ float moe_scale(const dmat &w, uint32_t r) {
    return w.dtype == THIN_DTYPE_F8_E4M3 && w.scale ? w.scale[r] : 1.0f;
}

#define MOE_WARPS 8u   /* warps a block of the router, gate/up and down kernels */
#define MOE_GU_RU 4    /* gate/up: vectors of each of a warp's four rows (two units) in flight a lane */
#define MOE_DN_ROWS 4  /* down: output rows a warp */
#define MOE_DN_RU 4    /* down: vectors of each in flight a lane */

/* Router rows of block b < ceil(E / 8): 8b .. 8b + 7, a warp each; the block after them (with a
 * shared expert gate): that row, in its first warp. Each block stages x in the layout of its own
 * weights' dtype. */
template <int DT>
__device__ __forceinline__ void moe_router_rows(const moe_args &a, const dmat &w, uint32_t r, uint32_t col,
                                                float *xs) {
    constexpr uint32_t EPV = vec_of<DT>::epv;
    const uint32_t lane = threadIdx.x & 31, t = blockIdx.y, nvec = w.pitch / EPV;
    const bool mine = r < w.rows;
    const moe_rowset<1> m = {{moe_row(w, mine ? r : 0)}, {xs}, {nvec}};
    uint4 wb[1][8];
    if (mine) moe_load<1, 8>(wb, m, 0, lane); /* weights: before the wait */
    pdl_wait();
    moe_stage<DT>(xs, a.x + (size_t)t * a.ldx, w.cols, w.pitch);
    __syncthreads();
    if (!mine) return;
    float d[1];
    moe_dots<DT, 1, 8>(wb, m, nvec, lane, d);
    if (lane == 0) a.scores[(size_t)t * (a.E + 1) + col] = d[0] * moe_scale(w, r);
}

__global__ void __launch_bounds__(MOE_WARPS * 32) moe_router_kernel(const moe_args a) {
    pdl_trigger();
    extern __shared__ __align__(16) float xs[];
    const uint32_t nrb = (a.E + MOE_WARPS - 1) / MOE_WARPS;
    const bool gate = blockIdx.x == nrb;
    const dmat &w = gate ? a.sgate : a.router;
    /* the shared expert's gate is one row: warp 0 takes it, the others only stage x */
    const uint32_t warp = threadIdx.x >> 5;
    const uint32_t r = gate ? (warp ? w.rows : 0) : blockIdx.x * MOE_WARPS + warp, col = gate ? a.E : r;
    switch (w.dtype) {
    case THIN_DTYPE_F32: moe_router_rows<THIN_DTYPE_F32>(a, w, r, col, xs); break;
    case THIN_DTYPE_F16: moe_router_rows<THIN_DTYPE_F16>(a, w, r, col, xs); break;
    case THIN_DTYPE_BF16: moe_router_rows<THIN_DTYPE_BF16>(a, w, r, col, xs); break;
    default: moe_router_rows<THIN_DTYPE_F8_E4M3>(a, w, r, col, xs);
    }
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

/* The bucket kernel's output for one row's KS entries (sel), by one warp: entry i of expert e goes
 * to list[the entries of lower experts + those of e before i]; the experts with entries ascending. */
__device__ __forceinline__ void moe_bucket_row(const moe_args &a, const int32_t *sel, uint32_t lane) {
    const uint32_t ne = a.E + 1, KS = a.KS;
    for (uint32_t e = lane; e < ne; e += 32) {
        uint32_t c = 0, below = 0;
        for (uint32_t i = 0; i < KS; i++) c += sel[i] == (int32_t)e, below += sel[i] < (int32_t)e;
        a.cnt[e] = c, a.cnt[ne + e] = below;
    }
    uint32_t na = 0;
    for (uint32_t i = 0; i < KS; i++) {
        bool first = true;
        for (uint32_t k = 0; k < i && first; k++) first = sel[k] != sel[i];
        na += first;
    }
    for (uint32_t i = lane; i < KS; i += 32) {
        const int32_t e = sel[i];
        uint32_t pos = 0, lower = 0; /* pos: entries placed before i; lower: experts below e */
        bool first = true;
        for (uint32_t k = 0; k < KS; k++) {
            pos += sel[k] < e || (sel[k] == e && k < i);
            first &= !(sel[k] == e && k < i);
            bool fk = true; /* entry k is the first of its expert */
            for (uint32_t m = 0; m < k && fk; m++) fk = sel[m] != sel[k];
            lower += fk && sel[k] < e;
        }
        a.list[pos] = i;
        if (first) a.cnt[2 * ne + 1 + lower] = (uint32_t)e;
    }
    if (lane == 0) a.cnt[2 * ne] = na;
}

/* One warp a row: its choice and weights (exec_cpu.c's moe_rows and route_sigmoid), the choice
 * scores in shared memory, the top k by K rounds of the warp's best (a chosen score then -inf).
 * (A form that also kept the scores and the chosen ids in shared memory instead of global memory
 * measured slower in the decode graph on an H100: 1,721.8 against 1,876.9 tokens/s, Qwen3-30B-A3B's
 * layer shape, BF16.) */
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
    if (lane == 0) {
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
    if (n == 1 && !a.one) { /* one row through the batch kernels: the bucket kernel's work, here */
        __syncwarp();
        moe_bucket_row(a, sel, lane);
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
 * min(E + 1, entries), so a decode step launches blocks for its chosen experts only), or -1.
 * The list is read through L2 (__ldcg): the down kernel reads it before its dependency wait. */
__device__ __forceinline__ int32_t moe_block_expert(const moe_args &a) {
    const uint32_t ne = a.E + 1;
    return blockIdx.y < __ldcg(a.cnt + 2 * ne) ? (int32_t)__ldcg(a.cnt + 2 * ne + 1 + blockIdx.y) : -1;
}

/* Unit K of a warp's two from its rows' dots d (times their scales sc) into *h, as MODE says. */
template <int MODE, int K, int NR>
__device__ __forceinline__ void moe_unit(float *h, const float (&d)[NR], const float (&sc)[NR]) {
    if (MODE == 0) *h = silu_f(d[2 * K] * sc[2 * K]) * (d[2 * K + 1] * sc[2 * K + 1]);
    else if (MODE == 1) *h = d[K] * sc[K];
    else *h = silu_f(*h) * (d[K] * sc[K]);
}

/* Gate/up rows of block x: units [2 MOE_WARPS x, 2 MOE_WARPS (x + 1)) of expert e, two a warp, for
 * every entry that chose the expert, h = silu(gate · x) * (up · x). MODE 0: gate and up of one
 * dtype, the four rows of a warp's two units in flight at once; where their dtypes differ, MODE 1
 * (h = gate · x) then MODE 2 (h = silu(h) * (up · x)), x staged for each. x is staged per entry;
 * each entry's first batch of weights is requested before its staging. */
template <int DT, int MODE>
__device__ __forceinline__ void moe_gateup_rows(const moe_args &a, const dmat &g, const dmat &u, uint32_t cnt,
                                                uint32_t off, float *xs) {
    constexpr uint32_t EPV = vec_of<DT>::epv;
    constexpr int NR = MODE == 0 ? 4 : 2;
    const dmat &m = MODE == 2 ? u : g;
    const uint32_t lane = threadIdx.x & 31, nvec = m.pitch / EPV;
    const uint32_t j = (blockIdx.x * MOE_WARPS + (threadIdx.x >> 5)) * 2;
    const bool mine = j < m.rows, two = j + 1 < m.rows;
    const uint32_t j0 = mine ? j : 0, j1 = two ? j + 1 : j0;
    moe_rowset<NR> rs;
    float sc[NR];
    if (MODE == 0) {
        rs.row[0] = moe_row(g, j0), rs.row[1] = moe_row(u, j0), rs.row[2] = moe_row(g, j1), rs.row[3] = moe_row(u, j1);
        if (mine) sc[0] = moe_scale(g, j0), sc[1] = moe_scale(u, j0), sc[2] = moe_scale(g, j1), sc[3] = moe_scale(u, j1);
    } else {
        rs.row[0] = moe_row(m, j0), rs.row[1] = moe_row(m, j1);
        if (mine) sc[0] = moe_scale(m, j0), sc[1] = moe_scale(m, j1);
    }
#pragma unroll
    for (int r = 0; r < NR; r++) rs.xr[r] = xs, rs.nv[r] = nvec;
    uint4 w[NR][MOE_GU_RU];
    for (uint32_t q = 0; q < cnt; q++) {
        if (mine) moe_load<NR, MOE_GU_RU>(w, rs, 0, lane);
        const uint32_t ent = __ldcg(a.list + off + q);
        if (q) __syncthreads(); /* every warp is done with the previous entry's x */
        moe_stage<DT>(xs, a.x + (size_t)(ent / a.KS) * a.ldx, m.cols, m.pitch);
        __syncthreads();
        if (!mine) continue;
        float d[NR];
        moe_dots<DT, NR, MOE_GU_RU>(w, rs, nvec, lane, d);
        float *h = a.hb + (size_t)ent * a.imax;
        /* lane 0 unit j, lane 1 unit j + 1 (the same lanes in both passes of MODE 1 and 2) */
        if (lane == 0) moe_unit<MODE, 0>(h + j, d, sc);
        if (lane == 1 && two) moe_unit<MODE, 1>(h + j + 1, d, sc);
    }
}

template <int MODE>
__device__ __forceinline__ void moe_gateup_by(int dtype, const moe_args &a, const dmat &g, const dmat &u, uint32_t cnt,
                                              uint32_t off, float *xs) {
    switch (dtype) {
    case THIN_DTYPE_F32: moe_gateup_rows<THIN_DTYPE_F32, MODE>(a, g, u, cnt, off, xs); break;
    case THIN_DTYPE_F16: moe_gateup_rows<THIN_DTYPE_F16, MODE>(a, g, u, cnt, off, xs); break;
    case THIN_DTYPE_BF16: moe_gateup_rows<THIN_DTYPE_BF16, MODE>(a, g, u, cnt, off, xs); break;
    default: moe_gateup_rows<THIN_DTYPE_F8_E4M3, MODE>(a, g, u, cnt, off, xs);
    }
}

__global__ void __launch_bounds__(MOE_WARPS * 32) moe_gateup_kernel(const moe_args a) {
    extern __shared__ __align__(16) float xs[];
    pdl_wait();
    pdl_trigger(); /* after the wait: the down kernel reads the expert list before its own */
    const int32_t e = moe_block_expert(a);
    if (e < 0) return;
    const dmat g = a.tab[3 * e], u = a.tab[3 * e + 1];
    if (blockIdx.x * MOE_WARPS * 2 >= g.rows) return;
    const uint32_t ne = a.E + 1, cnt = __ldcg(a.cnt + e), off = __ldcg(a.cnt + ne + e);
    if (g.dtype == u.dtype && g.pitch == u.pitch) {
        moe_gateup_by<0>(g.dtype, a, g, u, cnt, off, xs);
    } else {
        moe_gateup_by<1>(g.dtype, a, g, u, cnt, off, xs);
        __syncthreads();
        moe_gateup_by<2>(u.dtype, a, g, u, cnt, off, xs);
    }
}

/* Down rows of block x: output rows [MOE_DN_ROWS MOE_WARPS x, ...) of expert e's down projection,
 * MOE_DN_ROWS a warp, for every entry that chose the expert. The first batch of weights is
 * requested before the dependency wait (the expert list is the bucket kernel's, which completed
 * before the gate/up kernel let this one launch). */
template <int DT>
__device__ __forceinline__ void moe_down_rows(const moe_args &a, const dmat &d, uint32_t e, float *xs) {
    constexpr uint32_t EPV = vec_of<DT>::epv, NR = MOE_DN_ROWS;
    const uint32_t lane = threadIdx.x & 31, nvec = d.pitch / EPV;
    const uint32_t c = (blockIdx.x * MOE_WARPS + (threadIdx.x >> 5)) * NR;
    const bool mine = c < d.rows;
    moe_rowset<NR> rs;
#pragma unroll
    for (uint32_t r = 0; r < NR; r++) rs.row[r] = moe_row(d, c + r < d.rows ? c + r : 0), rs.xr[r] = xs, rs.nv[r] = nvec;
    uint4 w[NR][MOE_DN_RU];
    if (mine) moe_load<NR, MOE_DN_RU>(w, rs, 0, lane);
    pdl_wait();
    const uint32_t ne = a.E + 1, cnt = __ldcg(a.cnt + e), off = __ldcg(a.cnt + ne + e);
    for (uint32_t q = 0; q < cnt; q++) {
        if (mine && q) moe_load<NR, MOE_DN_RU>(w, rs, 0, lane);
        const uint32_t ent = __ldcg(a.list + off + q);
        if (q) __syncthreads();
        moe_stage<DT>(xs, a.hb + (size_t)ent * a.imax, d.cols, d.pitch);
        __syncthreads();
        if (!mine) continue;
        float v[NR];
        moe_dots<DT, NR, MOE_DN_RU>(w, rs, nvec, lane, v);
        if (lane < NR && c + lane < d.rows) {
            float y = v[0];
#pragma unroll
            for (uint32_t r = 1; r < NR; r++)
                if (lane == r) y = v[r];
            a.db[(size_t)ent * a.hout + c + lane] = y * moe_scale(d, c + lane);
        }
    }
}

__global__ void __launch_bounds__(MOE_WARPS * 32) moe_down_kernel(const moe_args a) {
    extern __shared__ __align__(16) float xs[];
    pdl_trigger();
    const int32_t e = moe_block_expert(a);
    const dmat d = e >= 0 ? a.tab[3 * e + 2] : dmat{};
    if (e < 0 || blockIdx.x * MOE_WARPS * MOE_DN_ROWS >= d.rows) {
        pdl_wait(); /* the grid still completes after its predecessors */
        return;
    }
    switch (d.dtype) {
    case THIN_DTYPE_F32: moe_down_rows<THIN_DTYPE_F32>(a, d, (uint32_t)e, xs); break;
    case THIN_DTYPE_F16: moe_down_rows<THIN_DTYPE_F16>(a, d, (uint32_t)e, xs); break;
    case THIN_DTYPE_BF16: moe_down_rows<THIN_DTYPE_BF16>(a, d, (uint32_t)e, xs); break;
    default: moe_down_rows<THIN_DTYPE_F8_E4M3>(a, d, (uint32_t)e, xs);
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

/* ---- one row (a decode step), every gate/up of one dtype and every down of one: moe_one ----
 * The row's KS slots are its entries (slot k: expert sel[k], its h at hb + k · imax), so no
 * bucket is needed, and x is the same for every expert: each block stages it once.
 *  - gate/up: a grid of the blocks that fit at once; warp w takes units w, w + W, ... of all the
 *    slots' units in a row (one to three units a warp for Qwen3-30B-A3B's 6,144 on an H100),
 *    each unit's gate and up rows in flight together.
 *  - down and combine in one kernel: a warp takes output row c and every slot's down row c,
 *    MOE_D1_NR slots' rows in flight at once, and adds their products times the slots' weights in
 *    the combine kernel's order (ascending expert, so the shared expert last): no per-expert
 *    outputs and no combine kernel. Its first rows are requested before the dependency wait. */
#define MOE_MAX_KS 32 /* slots a row may have on the one-row path */
#define MOE_D1_NR 4   /* slots whose down rows a warp has in flight at once */

template <int DT>
__device__ __forceinline__ void moe_gateup1(const moe_args &a, float *xs) {
    constexpr uint32_t EPV = vec_of<DT>::epv;
    __shared__ dmat sg[MOE_MAX_KS], su[MOE_MAX_KS];
    const uint32_t lane = threadIdx.x & 31, KS = a.KS;
    pdl_wait();
    pdl_trigger(); /* after the wait: the down kernel reads the choice before its own */
    if (threadIdx.x < KS) {
        const int32_t e = __ldcg(a.sel + threadIdx.x);
        sg[threadIdx.x] = a.tab[3 * e], su[threadIdx.x] = a.tab[3 * e + 1];
    }
    __syncthreads();
    const dmat &g0 = a.tab[0];
    const uint32_t nvec = g0.pitch / EPV, W = gridDim.x * MOE_WARPS;
    /* task t: unit t - base of slot k, the slots' units in a row */
    uint32_t t = blockIdx.x * MOE_WARPS + (threadIdx.x >> 5), k = 0, base = 0;
    auto seek = [&]() {
        while (k < KS && t >= base + sg[k].rows) base += sg[k].rows, k++;
        return k < KS;
    };
    moe_rowset<2> rs = {{nullptr, nullptr}, {xs, xs}, {nvec, nvec}};
    uint4 w[2][MOE_GU_RU];
    bool have = seek();
    if (have) { /* the first unit's first batch, before x is staged */
        rs.row[0] = moe_row(sg[k], t - base), rs.row[1] = moe_row(su[k], t - base);
        moe_load<2, MOE_GU_RU>(w, rs, 0, lane);
    }
    moe_stage<DT>(xs, a.x, g0.cols, g0.pitch);
    __syncthreads();
    for (bool fresh = false; have; t += W, have = seek(), fresh = true) {
        const uint32_t j = t - base;
        if (fresh) {
            rs.row[0] = moe_row(sg[k], j), rs.row[1] = moe_row(su[k], j);
            moe_load<2, MOE_GU_RU>(w, rs, 0, lane);
        }
        float d[2];
        moe_dots<DT, 2, MOE_GU_RU>(w, rs, nvec, lane, d);
        if (lane == 0) a.hb[(size_t)k * a.imax + j] = silu_f(d[0] * moe_scale(sg[k], j)) * (d[1] * moe_scale(su[k], j));
    }
}

__global__ void __launch_bounds__(MOE_WARPS * 32, 3) moe_gateup1_kernel(const moe_args a) {
    extern __shared__ __align__(16) float xs[];
    switch (a.gu_dtype) {
    case THIN_DTYPE_F32: moe_gateup1<THIN_DTYPE_F32>(a, xs); break;
    case THIN_DTYPE_F16: moe_gateup1<THIN_DTYPE_F16>(a, xs); break;
    case THIN_DTYPE_BF16: moe_gateup1<THIN_DTYPE_BF16>(a, xs); break;
    default: moe_gateup1<THIN_DTYPE_F8_E4M3>(a, xs);
    }
}

/* Slot k's h is staged at xs + k · sp (sp: the rows' pitch for the largest inner size) in the
 * layout of the down rows' dtype DT. */
template <int DT>
__device__ __forceinline__ void moe_down1(const moe_args &a, float *xs) {
    constexpr uint32_t EPV = vec_of<DT>::epv, NR = MOE_D1_NR;
    __shared__ dmat sd[MOE_MAX_KS];
    __shared__ float sw[MOE_MAX_KS];
    __shared__ uint32_t ord[MOE_MAX_KS]; /* the slots in the combine's order */
    const uint32_t lane = threadIdx.x & 31, KS = a.KS, sp = dmat_pitch(a.imax);
    if (threadIdx.x < KS) { /* the choice is complete: see moe_gateup1's trigger */
        const uint32_t k = threadIdx.x;
        const int32_t e = __ldcg(a.sel + k);
        uint32_t rank = 0;
        for (uint32_t i = 0; i < KS; i++) {
            const int32_t o = __ldcg(a.sel + i);
            rank += o < e || (o == e && i < k);
        }
        ord[rank] = k;
        sd[k] = a.tab[3 * e + 2];
    }
    __syncthreads();
    const uint32_t rows = sd[0].rows, W = gridDim.x * MOE_WARPS;
    const uint32_t c0 = blockIdx.x * MOE_WARPS + (threadIdx.x >> 5);
    /* group g's rows of output row c: slots ord[g .. g + NR) (past KS: a repeat, not used) */
    moe_rowset<NR> rs;
    uint32_t nmax = 0;
    auto rows_of = [&](uint32_t c, uint32_t g) {
        nmax = 0;
#pragma unroll
        for (uint32_t i = 0; i < NR; i++) {
            const uint32_t k = ord[g + i < KS ? g + i : g];
            rs.row[i] = moe_row(sd[k], c);
            rs.xr[i] = xs + (size_t)k * sp;
            rs.nv[i] = g + i < KS ? sd[k].pitch / EPV : 0;
            nmax = max(nmax, rs.nv[i]);
        }
    };
    uint4 w[NR][MOE_DN_RU];
    if (c0 < rows) { /* weights only, before the wait */
        rows_of(c0, 0);
        moe_load<NR, MOE_DN_RU>(w, rs, 0, lane);
    }
    pdl_wait();
    if (threadIdx.x < KS) sw[threadIdx.x] = __ldcg(a.wts + threadIdx.x);
    for (uint32_t b = threadIdx.x; b < KS * sp; b += MOE_XPRE * blockDim.x) { /* every slot's h, batched */
        float v[MOE_XPRE];
#pragma unroll
        for (int u = 0; u < MOE_XPRE; u++) {
            const uint32_t f = b + u * blockDim.x, k = f / sp, i = f - k * sp;
            v[u] = f < KS * sp && i < sd[k].cols ? __ldcg(a.hb + (size_t)k * a.imax + i) : 0.0f;
        }
#pragma unroll
        for (int u = 0; u < MOE_XPRE; u++) {
            const uint32_t f = b + u * blockDim.x, k = f / sp, i = f - k * sp;
            if (f < KS * sp && i < sd[k].pitch) xs[k * sp + x_index<DT>(i, sd[k].pitch / EPV * 4)] = v[u];
        }
    }
    __syncthreads();
    for (uint32_t c = c0; c < rows; c += W) {
        float acc = 0.0f;
        for (uint32_t g = 0; g < KS; g += NR) {
            if (c != c0 || g) {
                rows_of(c, g);
                moe_load<NR, MOE_DN_RU>(w, rs, 0, lane);
            }
            float v[NR];
            moe_dots<DT, NR, MOE_DN_RU>(w, rs, nmax, lane, v);
#pragma unroll
            for (uint32_t i = 0; i < NR; i++)
                if (g + i < KS) {
                    const uint32_t k = ord[g + i];
                    acc += sw[k] * (v[i] * moe_scale(sd[k], c)); /* as the combine kernel adds */
                }
        }
        if (lane == 0) a.out[c] = acc;
    }
}

__global__ void __launch_bounds__(MOE_WARPS * 32, 2) moe_down1_kernel(const moe_args a) {
    extern __shared__ __align__(16) float xs[];
    pdl_trigger();
    switch (a.dn_dtype) {
    case THIN_DTYPE_F32: moe_down1<THIN_DTYPE_F32>(a, xs); break;
    case THIN_DTYPE_F16: moe_down1<THIN_DTYPE_F16>(a, xs); break;
    case THIN_DTYPE_BF16: moe_down1<THIN_DTYPE_BF16>(a, xs); break;
    default: moe_down1<THIN_DTYPE_F8_E4M3>(a, xs);
    }
}

/* Shared memory of the one-row down kernel: every slot's h, as staged. */
static size_t moe_down1_smem(const moe_args *a) { return a->KS * (size_t)dmat_pitch(a->imax) * sizeof(float); }

/* The one-row kernels' case: one row, every gate/up of one dtype and every down of one, at most
 * MOE_MAX_KS slots, and the slots' h staged together fit. */
static bool moe_one(const moe_args *a, uint32_t n) {
    return n == 1 && a->gu_dtype >= 0 && a->dn_dtype >= 0 && a->KS <= MOE_MAX_KS &&
           moe_down1_smem(a) <= MOE_SMEM_MAX;
}

/* Blocks of kernel k (smem bytes of dynamic shared memory) that fit on the device at once. */
template <typename K>
static cudaError_t moe_resident(K k, size_t smem, int n_sm, uint32_t *blocks) {
    int per = 0;
    const cudaError_t e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per, k, MOE_WARPS * 32, smem);
    if (e != cudaSuccess) return e;
    *blocks = (uint32_t)(per > 0 ? per : 1) * (uint32_t)(n_sm > 0 ? n_sm : 1);
    return cudaSuccess;
}

/* Shared memory of the router, gate/up and down kernels: x (or h) of one entry, as staged (every
 * row of a weight holds dmat_pitch(cols) elements). */
static size_t moe_smem(uint32_t hidden, uint32_t inter) {
    return (size_t)dmat_pitch(hidden > inter ? hidden : inter) * sizeof(float);
}

int moe_fits(uint32_t hidden, uint32_t inter) { return moe_smem(hidden, inter) <= MOE_SMEM_MAX; }

cudaError_t launch_moe(const moe_args *in, uint32_t n, int n_sm, cudaStream_t st) {
    if (in->E == 0 || in->E > MOE_MAX_E || n == 0 || n > 65535 || !moe_fits(in->router.cols, in->imax))
        return cudaErrorInvalidValue;
    moe_args a = *in;
    a.one = thin_cuda_moe1 && moe_one(&a, n);
    const size_t sm = moe_smem(a.router.cols, a.imax);
    const uint32_t rb = (a.E + MOE_WARPS - 1) / MOE_WARPS + (a.sgate.data ? 1 : 0);
    cudaError_t e = smem_attr(moe_router_kernel, sm, 0);
    if (e == cudaSuccess) e = launch_k(moe_router_kernel, dim3(rb, n), dim3(MOE_WARPS * 32), sm, st, a);
    if (e == cudaSuccess)
        e = launch_k(moe_route_kernel, dim3((n + MOE_ROUTE_WARPS - 1) / MOE_ROUTE_WARPS), dim3(32 * MOE_ROUTE_WARPS),
                     0, st, a, n);
    if (e != cudaSuccess) return e;
    if (a.one) {
        const size_t sd = moe_down1_smem(&a);
        uint32_t bg = 0, bd = 0;
        e = smem_attr(moe_gateup1_kernel, sm, 0);
        if (e == cudaSuccess) e = smem_attr(moe_down1_kernel, sd, 0);
        if (e == cudaSuccess) e = moe_resident(moe_gateup1_kernel, sm, n_sm, &bg);
        if (e == cudaSuccess) e = moe_resident(moe_down1_kernel, sd, n_sm, &bd);
        if (e == cudaSuccess) e = launch_k(moe_gateup1_kernel, dim3(bg), dim3(MOE_WARPS * 32), sm, st, a);
        if (e == cudaSuccess) e = launch_k(moe_down1_kernel, dim3(bd), dim3(MOE_WARPS * 32), sd, st, a);
        return e;
    }
    const uint32_t ny = n * a.KS < a.E + 1 ? n * a.KS : a.E + 1; /* experts that can have entries */
    const uint32_t gb = (a.imax + 2 * MOE_WARPS - 1) / (2 * MOE_WARPS);
    const uint32_t db = (a.hout + MOE_DN_ROWS * MOE_WARPS - 1) / (MOE_DN_ROWS * MOE_WARPS);
    e = smem_attr(moe_gateup_kernel, sm, 0);
    if (e == cudaSuccess) e = smem_attr(moe_down_kernel, sm, 0);
    if (e == cudaSuccess && n > 1) e = launch_k(moe_bucket_kernel, dim3(1), dim3(256), 0, st, a, n);
    if (e == cudaSuccess) e = launch_k(moe_gateup_kernel, dim3(gb, ny), dim3(MOE_WARPS * 32), sm, st, a);
    if (e == cudaSuccess) e = launch_k(moe_down_kernel, dim3(db, ny), dim3(MOE_WARPS * 32), sm, st, a);
    if (e == cudaSuccess) e = launch_k(moe_combine_kernel, dim3((a.hout + 255) / 256, n), dim3(256), 0, st, a);
    return e;
}
