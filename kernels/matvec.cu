/*
 * matvec.cu — y = W x for one token, the decode step's bandwidth-bound core.
 *
 * One warp per output row (two rows for the fused gate/up pair, or rows i and i + head_dim/2 of a
 * head for the q, k, v group with the rope and KV-store epilogue), 16-byte weight loads with up to
 * MV_UNROLL of them in flight per lane before the first use, F32 accumulation, streaming cache hint
 * (weights are read once per token). The input vector is staged once per block in shared memory as
 * F32, optionally through a fused RMSNorm; epilogues add the residual or apply the SiLU gate.
 * CPU twin: op_matvec (+ op_rmsnorm, op_add, op_silu_mul) in ops_cpu.c.
 */
#include "cuda_common.cuh"

#define MV_WARPS 8
#define MV_UNROLL 8

/* x is staged in shared memory in planes of float4 (see stage_x): the j-th float4 of vector v
 * lies at xs[j * ps + 4 * v], so the lanes of a warp, which take consecutive vectors, read
 * consecutive 16-byte words of a plane (no bank conflicts whatever the dtype's width). */
template <int DT>
struct vec_of {
    static constexpr uint32_t epv = 16 / (DT == THIN_DTYPE_F32 ? 4 : DT == THIN_DTYPE_F8_E4M3 ? 1 : 2);
};

/* Shared-memory index of element i of x (vectors of EPV elements, planes ps floats apart). */
template <int DT>
__device__ __forceinline__ uint32_t x_index(uint32_t i, uint32_t ps) {
    constexpr uint32_t EPV = vec_of<DT>::epv;
    return ((i % EPV) >> 2) * ps + (i / EPV) * 4 + (i & 3);
}

/* Dot product of 16 bytes of weights (EPV elements of DT) with the EPV floats of x of that vector
 * (xs: its first float4; the others follow ps floats apart). */
template <int DT>
__device__ __forceinline__ float dot16(uint4 w, const float *xs, uint32_t ps) {
    float s = 0.0f;
    const uint32_t u[4] = {w.x, w.y, w.z, w.w};
    if (DT == THIN_DTYPE_BF16) {
        const float4 a = *(const float4 *)xs, b = *(const float4 *)(xs + ps);
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
        for (int j = 0; j < 2; j++) {
            const float4 a = *(const float4 *)(xs + j * ps);
            float2 f0 = __half22float2(*(const __half2 *)&u[2 * j]);
            float2 f1 = __half22float2(*(const __half2 *)&u[2 * j + 1]);
            s = fmaf(f0.x, a.x, s);
            s = fmaf(f0.y, a.y, s);
            s = fmaf(f1.x, a.z, s);
            s = fmaf(f1.y, a.w, s);
        }
    } else if (DT == THIN_DTYPE_F8_E4M3) {
#pragma unroll
        for (int j = 0; j < 4; j++) {
            const float4 a = *(const float4 *)(xs + j * ps);
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

/* A batch: HB vectors per lane (32 apart, from vector `base`) of each of NR rows. */
template <int NR, int HB>
__device__ __forceinline__ void load_batch(uint4 (&w)[NR][HB], const uint4 *const *rows,
                                           uint32_t base, uint32_t nvec) {
#pragma unroll
    for (int k = 0; k < HB; k++) {
        uint32_t v = base + 32 * k;
#pragma unroll
        for (int r = 0; r < NR; r++)
            if (v < nvec) w[r][k] = ld_stream(rows[r] + v);
    }
}

template <int DT, int NR, int HB>
__device__ __forceinline__ void use_batch(const uint4 (&w)[NR][HB], uint32_t base,
                                          uint32_t nvec, const float *xs, float *acc) {
    const uint32_t ps = nvec * 4;
#pragma unroll
    for (int k = 0; k < HB; k++) {
        uint32_t v = base + 32 * k;
        if (v < nvec) {
#pragma unroll
            for (int r = 0; r < NR; r++) acc[r] += dot16<DT>(w[r][k], xs + 4 * v, ps);
        }
    }
}

#define MV_XPRE 8 /* x elements per thread loaded at once; norm weights preloaded per thread */

/* This thread's first MV_XPRE norm weights (elements tid + k * blockDim), loaded before waiting
 * for the previous kernel since weights do not depend on it. */
__device__ __forceinline__ void preload_norm(const mv_args &a, uint32_t cols, float (&nw)[MV_XPRE]) {
#pragma unroll
    for (int k = 0; k < MV_XPRE; k++) {
        const uint32_t i = threadIdx.x + k * blockDim.x;
        nw[k] = a.norm_w && i < cols ? load_elem(a.norm_w, a.norm_dtype, i) : 0.0f;
    }
}

/* Stages x (optionally RMS-normalised and weighted) into shared memory, zero-padded to pitch,
 * in the plane layout of dot16 (planes pitch / EPV * 4 floats apart). */
template <int DT>
__device__ __forceinline__ void stage_x(float *xs, const mv_args &a, uint32_t cols, uint32_t pitch,
                                        float *red, const float (&nw)[MV_XPRE]) {
    const uint32_t ps = pitch / vec_of<DT>::epv * 4;
    float ss = 0.0f;
    for (uint32_t i0 = threadIdx.x; i0 < pitch; i0 += MV_XPRE * blockDim.x) {
        float v[MV_XPRE];
#pragma unroll
        for (int k = 0; k < MV_XPRE; k++) {
            const uint32_t i = i0 + k * blockDim.x;
            v[k] = i < cols ? __ldcg(a.x + i) : 0.0f;
        }
#pragma unroll
        for (int k = 0; k < MV_XPRE; k++) {
            const uint32_t i = i0 + k * blockDim.x;
            if (i < pitch) xs[x_index<DT>(i, ps)] = v[k];
            ss += v[k] * v[k];
        }
    }
    if (a.norm_w) {
        float tot = block_sum(ss, red);
        float inv = 1.0f / sqrtf(tot / (float)cols + a.eps);
#pragma unroll
        for (int k = 0; k < MV_XPRE; k++) {
            const uint32_t i = threadIdx.x + k * blockDim.x;
            if (i < cols) xs[x_index<DT>(i, ps)] = nw[k] * (inv * xs[x_index<DT>(i, ps)]);
        }
        for (uint32_t i = threadIdx.x + MV_XPRE * blockDim.x; i < cols; i += blockDim.x)
            xs[x_index<DT>(i, ps)] = load_elem(a.norm_w, a.norm_dtype, i) * (inv * xs[x_index<DT>(i, ps)]);
    }
    __syncthreads();
}

/* The norm weights preloaded, the wait for the previous kernel (timed by kt), then x staged. */
template <int DT>
__device__ __forceinline__ void wait_and_stage(float *xs, const mv_args &a, float *red, ktrace &kt) {
    float nw[MV_XPRE];
    preload_norm(a, a.seg[0].w.cols, nw);
    kt.start();
    pdl_wait();
    kt.waited();
    stage_x<DT>(xs, a, a.seg[0].w.cols, a.seg[0].w.pitch, red, nw);
}

__device__ __forceinline__ const uint4 *row_ptr(const dmat &w, uint32_t r) {
    size_t esz = w.dtype == THIN_DTYPE_F32 ? 4 : w.dtype == THIN_DTYPE_F8_E4M3 ? 1 : 2;
    return (const uint4 *)((const uint8_t *)w.data + (size_t)r * w.pitch * esz);
}

/* Row pointers of logical row (unit) r: the pair's gate and up rows; with rope, rows a and
 * a + head_dim/2 of one head of segment *seg; else the segment's row. *rr: row a in the segment. */
template <int NR>
__device__ __forceinline__ void rows_of(const mv_args &a, uint32_t r, const uint4 **rows, int *seg,
                                        uint32_t *rr) {
    int s = 0;
    if constexpr (NR == 2) {
        uint32_t row = r, off = 0;
        if (a.rope) {
            const uint32_t half = a.head_dim / 2;
            while (s + 1 < a.nseg && r >= a.seg[s].w.rows / 2) r -= a.seg[s++].w.rows / 2;
            row = (r / half) * a.head_dim + r % half;
            off = half;
        }
        rows[0] = row_ptr(a.seg[s].w, row);
        rows[1] = a.rope ? row_ptr(a.seg[s].w, row + off) : row_ptr(a.seg[1].w, row);
        *seg = s;
        *rr = row;
    } else {
        while (s + 1 < a.nseg && r >= a.seg[s].w.rows) r -= a.seg[s++].w.rows;
        rows[0] = row_ptr(a.seg[s].w, r);
        *seg = s;
        *rr = r;
    }
}

/* The rotation (cos, sin) of rows (rr, rr + half) of segment s at *pos, or (1, 0) when the
 * segment has no frequency table. Computed as soon as the rows are known, so that its double
 * precision sincos runs while the row's weights are in flight. */
__device__ __forceinline__ float2 rope_rot(const mv_args &a, int s, uint32_t rr) {
    const mv_seg &g = a.seg[s];
    if (!g.freq) return make_float2(1.0f, 0.0f);
    const uint32_t i = (uint32_t)((g.w.row0 + rr) % a.head_dim);
    double sn, cs;
    sincos((double)*a.pos * g.freq[i], &sn, &cs);
    return make_float2((float)cs, (float)sn);
}

/* Rope epilogue: rows (rr, rr + half) of segment s, rotated by rot (as op_rope), written out and
 * into the segment's cache row *pos. */
template <int DT>
__device__ __forceinline__ void store_rope(const mv_args &a, int s, uint32_t rr, float x0, float x1,
                                           float2 rot) {
    const mv_seg &g = a.seg[s];
    const uint32_t half = a.head_dim / 2;
    if (DT == THIN_DTYPE_F8_E4M3 && g.w.scale) {
        x0 *= g.w.scale[rr];
        x1 *= g.w.scale[rr + half];
    }
    const int32_t pos = *a.pos;
    float y0 = x0, y1 = x1;
    if (g.freq) {
        y0 = x0 * rot.x - x1 * rot.y;
        y1 = x0 * rot.y + x1 * rot.x;
    }
    g.out[rr] = y0;
    g.out[rr + half] = y1;
    if (g.cache) {
        const size_t o = (size_t)pos * g.w.rows + rr;
        store_kv(g.cache, a.kv_dtype, o, y0);
        store_kv(g.cache, a.kv_dtype, o + half, y1);
    }
}

template <int DT, int NR>
__device__ __forceinline__ void store_row(const mv_args &a, int s, uint32_t rr, const float *acc,
                                          float2 rot) {
    if (NR == 2 && a.rope) {
        store_rope<DT>(a, s, rr, acc[0], acc[1], rot);
        return;
    }
    if (NR == 2) {
        float g = acc[0], u = acc[1];
        if (DT == THIN_DTYPE_F8_E4M3) {
            if (a.seg[0].w.scale) g *= a.seg[0].w.scale[rr];
            if (a.seg[1].w.scale) u *= a.seg[1].w.scale[rr];
        }
        a.seg[1].out[rr] = u;
        a.seg[0].out[rr] = silu_f(g) * u;
        return;
    }
    float y = acc[0];
    if (DT == THIN_DTYPE_F8_E4M3 && a.seg[s].w.scale) y *= a.seg[s].w.scale[rr];
    a.seg[s].out[rr] = y;
    if (a.resid) a.resid[rr] += y;
}

/* Persistent warps: each takes units (rows, or row pairs) r, r + all warps, ...: loads HB vectors
 * per lane and row, uses them, loads the next; the first batch of the next unit is loaded before
 * the current unit's reduction, and the first unit's before waiting for the previous kernel
 * (weights do not depend on it; the position, read by the rope rotation, is set before the step's
 * first kernel). */
template <int DT, int NR, int HB>
__device__ void matvec_body(const mv_args &a, uint32_t total, float *xs, float *red) {
    const dmat &w0 = a.seg[0].w;
    const uint32_t nvec = w0.pitch / vec_of<DT>::epv;
    const int lane = threadIdx.x & 31;
    const uint32_t stride = gridDim.x * MV_WARPS;
    const bool rope = NR == 2 && a.rope;
    uint32_t r = blockIdx.x * MV_WARPS + (threadIdx.x >> 5);
    uint4 w[NR][HB];
    const uint4 *rows[NR];
    int seg = 0;
    uint32_t rr = 0;
    float2 rot = make_float2(1.0f, 0.0f);
    if (r < total) {
        rows_of<NR>(a, r, rows, &seg, &rr);
        load_batch<NR, HB>(w, rows, lane, nvec);
        if (rope && lane == 0) rot = rope_rot(a, seg, rr);
    }
    ktrace kt;
    wait_and_stage<DT>(xs, a, red, kt);
    for (; r < total; r += stride) {
        float acc[NR];
#pragma unroll
        for (int i = 0; i < NR; i++) acc[i] = 0.0f;
        use_batch<DT, NR, HB>(w, lane, nvec, xs, acc);
        for (uint32_t base = lane + 32 * HB; base < nvec; base += 32 * HB) {
            load_batch<NR, HB>(w, rows, base, nvec);
            use_batch<DT, NR, HB>(w, base, nvec, xs, acc);
        }
        const int cur_seg = seg;
        const uint32_t cur_rr = rr;
        const float2 cur_rot = rot;
        if (r + stride < total) {
            rows_of<NR>(a, r + stride, rows, &seg, &rr);
            load_batch<NR, HB>(w, rows, lane, nvec);
            if (rope && lane == 0) rot = rope_rot(a, seg, rr);
        }
#pragma unroll
        for (int i = 0; i < NR; i++) acc[i] = warp_sum(acc[i]);
        if (lane == 0) store_row<DT, NR>(a, cur_seg, cur_rr, acc, cur_rot);
    }
    if (lane == 0) kt.end(TRACE_MV | total << 8, 0); /* one record per warp */
}

/* Single rows of several batches each (the down projection: long rows, one or two per warp):
 * two batches in flight per warp. The warp's batches, over its units r, r + all warps, ..., form
 * one sequence k = 0, 1, ...; batches k and k + 1 are requested before k is used, and k + 2
 * right after it is used, into the registers it leaves (the first two before the dependency
 * wait). matvec_body instead requests a row's next batch only once the current one is used. */
template <int DT, int HB>
__device__ void matvec_pipe(const mv_args &a, uint32_t total, float *xs, float *red) {
    const dmat &w0 = a.seg[0].w;
    const uint32_t nvec = w0.pitch / vec_of<DT>::epv;
    const int lane = threadIdx.x & 31;
    const uint32_t stride = gridDim.x * MV_WARPS;
    const uint32_t r0 = blockIdx.x * MV_WARPS + (threadIdx.x >> 5);
    const uint32_t nb = (nvec + 32 * HB - 1) / (32 * HB); /* batches per row */
    const uint32_t nk = (r0 < total ? (total - r0 + stride - 1) / stride : 0) * nb;
    uint4 wa[1][HB], wb[1][HB];
    auto issue = [&](uint32_t k, uint4 (&w)[1][HB]) {
        if (k >= nk) return;
        const uint32_t j = k / nb, b = k - j * nb;
        const uint4 *rows[1];
        int sg;
        uint32_t rr;
        rows_of<1>(a, r0 + j * stride, rows, &sg, &rr);
        load_batch<1, HB>(w, rows, lane + b * 32 * HB, nvec);
    };
    float acc = 0.0f;
    auto consume = [&](uint32_t k, const uint4 (&w)[1][HB]) {
        const uint32_t j = k / nb, b = k - j * nb;
        use_batch<DT, 1, HB>(w, lane + b * 32 * HB, nvec, xs, &acc);
        if (b == nb - 1) {
            const uint4 *rows[1];
            int sg;
            uint32_t rr;
            rows_of<1>(a, r0 + j * stride, rows, &sg, &rr);
            acc = warp_sum(acc);
            if (lane == 0) store_row<DT, 1>(a, sg, rr, &acc, make_float2(1.0f, 0.0f));
            acc = 0.0f;
        }
    };
    issue(0, wa);
    issue(1, wb);
    ktrace kt;
    wait_and_stage<DT>(xs, a, red, kt);
    for (uint32_t k = 0; k < nk; k += 2) {
        consume(k, wa);
        issue(k + 2, wa);
        if (k + 1 < nk) {
            consume(k + 1, wb);
            issue(k + 3, wb);
        }
    }
    if (lane == 0) kt.end(TRACE_MV | total << 8, 0);
}

/* MINB: blocks of MV_WARPS warps per SM the registers must allow (__launch_bounds__); with 3 or
 * more, batches of MV_UNROLL / 2 vectors per lane and row keep the registers down. PIPE: single
 * rows through matvec_pipe (two blocks per SM, full batches; the launcher picks it for rows of
 * several batches). */
template <int DT, int MINB, int PIPE>
__global__ void __launch_bounds__(MV_WARPS * 32, PIPE ? 2 : MINB) matvec_kernel(const mv_args a, uint32_t total) {
    extern __shared__ float xs[];
    __shared__ float red[32];
    pdl_trigger();
    constexpr int HB = MINB >= 3 ? MV_UNROLL / 2 : MV_UNROLL;
    if constexpr (PIPE) matvec_pipe<DT, MV_UNROLL>(a, total, xs, red);
    else if (a.pair || a.rope) matvec_body<DT, 2, HB>(a, total, xs, red);
    else matvec_body<DT, 1, HB>(a, total, xs, red);
}

template <int DT, int MINB, int PIPE>
static cudaError_t launch_v(const mv_args *a, int n_sm, cudaStream_t st) {
    uint32_t total = 0;
    for (int s = 0; s < (a->pair ? 1 : a->nseg); s++) total += a->seg[s].w.rows / (a->rope ? 2 : 1);
    size_t smem = (size_t)a->seg[0].w.pitch * sizeof(float);
    if (smem > 48 * 1024 - 256) { /* with the static shared memory, over the default */
        cudaError_t e = cudaFuncSetAttribute(matvec_kernel<DT, MINB, PIPE>,
                                             cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
        if (e != cudaSuccess) return e;
    }
    int per_sm = 0;
    cudaError_t e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, matvec_kernel<DT, MINB, PIPE>,
                                                                  MV_WARPS * 32, smem);
    if (e != cudaSuccess) return e;
    if (thin_cuda_mv_bps > 0 && thin_cuda_mv_bps < per_sm) per_sm = thin_cuda_mv_bps;
    if (PIPE && thin_cuda_mv_pipe_bps > 0 && thin_cuda_mv_pipe_bps < per_sm) per_sm = thin_cuda_mv_pipe_bps;
    if (thin_cuda_mv_small_bps > 0 && thin_cuda_mv_small_bps < per_sm) {
        /* a small matrix may leave room on every SM for the next kernel's blocks to start */
        const size_t bytes = (size_t)total * (a->pair || a->rope ? 2 : 1) * a->seg[0].w.pitch *
                             thin_dtype_size((thin_dtype)a->seg[0].w.dtype);
        const size_t lim = (size_t)(thin_cuda_mv_small_mb > 0 ? thin_cuda_mv_small_mb : 16) << 20;
        if (bytes <= lim) per_sm = thin_cuda_mv_small_bps;
    }
    /* All blocks resident at once; each warp gets the same number of units (the fewest blocks
     * that give that count), so that no warp runs on alone at the end. (Dealing units round the
     * blocks instead, to even out the SMs, measured slower.) */
    const uint32_t cap = (uint32_t)n_sm * (uint32_t)(per_sm > 0 ? per_sm : 1);
    const uint32_t per_warp = (total + cap * MV_WARPS - 1) / (cap * MV_WARPS);
    uint32_t blocks = (total + per_warp * MV_WARPS - 1) / (per_warp * MV_WARPS);
    if (blocks < 1) blocks = 1;
    return launch_k(matvec_kernel<DT, MINB, PIPE>, dim3(blocks), dim3(MV_WARPS * 32), smem, st, *a, total);
}

/* Bandwidth follows the bytes in flight per SM: BF16/F16/F32 rows do best with two blocks of long
 * batches, FP8 rows (half the bytes per element, more work per byte) with three blocks of half
 * batches (measured on the H200; env THIN_CUDA_MV overrides). */
template <int DT>
static cudaError_t launch_dt(const mv_args *a, int n_sm, cudaStream_t st) {
    if (thin_cuda_mv_pipe && !a->pair && !a->rope && a->seg[0].w.pitch / vec_of<DT>::epv > 32 * MV_UNROLL)
        return launch_v<DT, 1, 1>(a, n_sm, st);
    int minb = thin_cuda_mv_minb > 0 ? thin_cuda_mv_minb : DT == THIN_DTYPE_F8_E4M3 ? 3 : 1;
    if (minb >= 3) return launch_v<DT, 3, 0>(a, n_sm, st);
    return launch_v<DT, 1, 0>(a, n_sm, st);
}

cudaError_t matvec_trace_arm(trace_rec *recs, unsigned int *n, unsigned int cap) {
    return trace_arm_here(recs, n, cap);
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
