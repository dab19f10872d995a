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
#include <string.h>

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
    float nw[MV_XPRE];
    preload_norm(a, w0.cols, nw);
    const unsigned long long tr0 = d_trace ? gtimer() : 0;
    pdl_wait();
    const unsigned long long tr1 = d_trace ? gtimer() : 0;
    stage_x<DT>(xs, a, w0.cols, w0.pitch, red, nw);
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
    if (lane == 0) trace_block(TRACE_MV | total << 8, tr0, tr1); /* one record per warp */
}

/* MINB: blocks of MV_WARPS warps per SM the registers must allow (__launch_bounds__); with 3 or
 * more, batches of MV_UNROLL / 2 vectors per lane and row keep the registers down. */
template <int DT, int MINB>
__global__ void __launch_bounds__(MV_WARPS * 32, MINB) matvec_kernel(const mv_args a, uint32_t total) {
    extern __shared__ float xs[];
    __shared__ float red[32];
    pdl_trigger();
    constexpr int HB = MINB >= 3 ? MV_UNROLL / 2 : MV_UNROLL;
    if (a.pair || a.rope) matvec_body<DT, 2, HB>(a, total, xs, red);
    else matvec_body<DT, 1, HB>(a, total, xs, red);
}

template <int DT, int MINB>
static cudaError_t launch_v(const mv_args *a, int n_sm, cudaStream_t st) {
    uint32_t total = 0;
    for (int s = 0; s < (a->pair ? 1 : a->nseg); s++) total += a->seg[s].w.rows / (a->rope ? 2 : 1);
    size_t smem = (size_t)a->seg[0].w.pitch * sizeof(float);
    if (smem > 48 * 1024) {
        cudaError_t e = cudaFuncSetAttribute(matvec_kernel<DT, MINB>,
                                             cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
        if (e != cudaSuccess) return e;
    }
    int per_sm = 0;
    cudaError_t e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, matvec_kernel<DT, MINB>,
                                                                  MV_WARPS * 32, smem);
    if (e != cudaSuccess) return e;
    if (thin_cuda_mv_bps > 0 && thin_cuda_mv_bps < per_sm) per_sm = thin_cuda_mv_bps;
    /* All blocks resident at once; each warp gets the same number of units (the fewest blocks
     * that give that count), so that no warp runs on alone at the end. (Dealing units round the
     * blocks instead, to even out the SMs, measured slower.) */
    const uint32_t cap = (uint32_t)n_sm * (uint32_t)(per_sm > 0 ? per_sm : 1);
    const uint32_t per_warp = (total + cap * MV_WARPS - 1) / (cap * MV_WARPS);
    uint32_t blocks = (total + per_warp * MV_WARPS - 1) / (per_warp * MV_WARPS);
    if (blocks < 1) blocks = 1;
    return launch_k(matvec_kernel<DT, MINB>, dim3(blocks), dim3(MV_WARPS * 32), smem, st, *a, total);
}

/* Bandwidth follows the bytes in flight per SM: BF16/F16/F32 rows do best with two blocks of long
 * batches, FP8 rows (half the bytes per element, more work per byte) with three blocks of half
 * batches (measured on the H200; env THIN_CUDA_MV overrides). */
template <int DT>
static cudaError_t launch_dt(const mv_args *a, int n_sm, cudaStream_t st) {
    int minb = thin_cuda_mv_minb > 0 ? thin_cuda_mv_minb : DT == THIN_DTYPE_F8_E4M3 ? 3 : 1;
    if (minb >= 3) return launch_v<DT, 3>(a, n_sm, st);
    return launch_v<DT, 1>(a, n_sm, st);
}

/* ---- streamed matvec (sm_90): weight rows through shared memory by bulk copies ----
 *
 * One block per SM takes a contiguous range of units (rows, gate/up row pairs, or rope row pairs
 * a, a + head_dim/2) and streams their weights through a ring of shared-memory stages, each a few
 * units' rows brought by one or two cp.async.bulk copies completing on the stage's mbarrier. The
 * whole ring is requested before the block waits for the previous kernel, so the weights of the
 * next matrix flow while the previous kernel drains; its bytes in flight (tens of KiB per SM) do
 * not depend on registers. The input vector (normalised when the norm is fused) lives in
 * registers: thread t of a row group of P threads always reads the same vectors v = t % P + P m of
 * a row, so a stage costs only its weight bytes of shared memory. Rows of a stage are reduced
 * across the group (shuffles, then shared memory), and the epilogue's inputs (FP8 scales, the
 * residual, the rope rotation) are fetched one stage ahead so that no load waits in the loop. */
#define SM_THREADS 256
#define SM_RED 256    /* partial sums per reduction buffer */
#define SM_MAXNS 16   /* stages in the ring at most */
#define SM_XMAX 48    /* x floats per thread at most (more would spill registers) */
#define SM_RING_MAX (200 * 1024) /* ring bytes at most */

int thin_cuda_tma = 1, thin_cuda_tma_ring_kb = 0, thin_cuda_tma_stage_kb = 0, thin_cuda_tma_bps = 0,
    thin_cuda_tma_mode = 0;

struct sm_plan {
    uint32_t nvec;        /* 16-byte vectors per row */
    uint32_t rowbytes;    /* nvec * 16 */
    uint32_t P, G;        /* threads per row group (a power of two, at most 256); groups */
    uint32_t R;           /* units per stage at most */
    uint32_t ns;          /* stages in the ring */
    uint32_t stage_bytes; /* R units' rows */
    uint32_t total;       /* units */
    uint32_t mode;        /* 0: cp.async by every thread; 1: bulk copies, try_wait; 2: bulk, test_wait */
};

/* Rows per thread and stage at most for M vectors of x per thread (their weights in registers:
 * JM * M vectors of 16 bytes). */
__host__ __device__ constexpr int sm_jm(int M) { return M >= 8 ? 1 : 8 / M; }

/* Warp sums of N (1, 2, 4 or 8) values per lane with 5 + N - 1 - log2 N shuffles instead of 5 N:
 * each round trades half of the values with the partner lane and keeps the other half, so that
 * at the end lane l holds the whole sum of value *j (from l's top bits); lanes that differ only in
 * their low 5 - log2 N bits hold the same. */
template <int N>
__device__ __forceinline__ float warp_sum_rows(float (&a)[N], uint32_t lane, uint32_t *j) {
    constexpr int LOG = N >= 8 ? 3 : N >= 4 ? 2 : N >= 2 ? 1 : 0;
    uint32_t r = 0;
#pragma unroll
    for (int k = 0; k < LOG; k++) {
        const int h = N >> (k + 1);
        const uint32_t o = 16u >> k;
        const bool up = (lane & o) != 0;
#pragma unroll
        for (int i = 0; i < h; i++) {
            const float send = up ? a[i] : a[i + h];
            const float keep = up ? a[i + h] : a[i];
            a[i] = keep + __shfl_xor_sync(0xffffffffu, send, o);
        }
        if (up) r += (uint32_t)h;
    }
    float v = a[0];
#pragma unroll
    for (int k = LOG; k < 5; k++) v += __shfl_xor_sync(0xffffffffu, v, 16u >> k);
    *j = r;
    return v;
}

struct sm_stage {
    int seg;       /* segment */
    uint32_t u;    /* first unit in the segment */
    uint32_t cnt;  /* units */
};

__device__ __forceinline__ uint32_t smem_u32(const void *p) { return (uint32_t)__cvta_generic_to_shared(p); }

__device__ __forceinline__ void mbar_init(uint64_t *b, uint32_t n) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(smem_u32(b)), "r"(n) : "memory");
#endif
}

__device__ __forceinline__ void mbar_fence_init() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
#endif
}

__device__ __forceinline__ void fence_proxy_async() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
#endif
}

__device__ __forceinline__ void mbar_expect_tx(uint64_t *b, uint32_t bytes) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smem_u32(b)), "r"(bytes)
                 : "memory");
#endif
}

/* bytes (a multiple of 16, both addresses 16-byte aligned) from global src to shared dst,
 * completing as transactions on mbarrier b. */
__device__ __forceinline__ void bulk_g2s(void *dst, const void *src, uint32_t bytes, uint64_t *b) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(
                     smem_u32(dst)),
                 "l"(src), "r"(bytes), "r"(smem_u32(b))
                 : "memory");
#endif
}

/* Waits for phase `parity` of mbarrier b: try_wait (the thread may be suspended until it
 * completes) or, with spin, test_wait polling. */
__device__ __forceinline__ void mbar_wait(uint64_t *b, uint32_t parity, int spin) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    uint32_t done;
    if (spin) {
        do {
            asm volatile("{\n\t.reg .pred p;\n\t"
                         "mbarrier.test_wait.parity.shared::cta.b64 p, [%1], %2;\n\t"
                         "selp.u32 %0, 1, 0, p;\n\t}"
                         : "=r"(done)
                         : "r"(smem_u32(b)), "r"(parity)
                         : "memory");
        } while (!done);
        return;
    }
    do {
        asm volatile("{\n\t.reg .pred p;\n\t"
                     "mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n\t"
                     "selp.u32 %0, 1, 0, p;\n\t}"
                     : "=r"(done)
                     : "r"(smem_u32(b)), "r"(parity)
                     : "memory");
    } while (!done);
#endif
}

/* cp.async: 16 bytes global -> shared per call, committed in groups (one per stage). */
__device__ __forceinline__ void cp16(void *dst, const void *src) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(smem_u32(dst)), "l"(src) : "memory");
#endif
}
__device__ __forceinline__ void cp_commit() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    asm volatile("cp.async.commit_group;" ::: "memory");
#endif
}
/* Waits until at most n (< 16) of this thread's committed groups are pending. */
__device__ __forceinline__ void cp_wait(uint32_t n) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
#define CPW(k) case k: asm volatile("cp.async.wait_group " #k ";" ::: "memory"); break;
    switch (n) {
        CPW(0) CPW(1) CPW(2) CPW(3) CPW(4) CPW(5) CPW(6) CPW(7)
        CPW(8) CPW(9) CPW(10) CPW(11) CPW(12) CPW(13) CPW(14)
        default: asm volatile("cp.async.wait_group 15;" ::: "memory");
    }
#undef CPW
#endif
}

/* Dot product of 16 bytes of weights with the EPV floats of x held in registers. */
template <int DT>
__device__ __forceinline__ float dot16r(uint4 w, const float (&x)[vec_of<DT>::epv]) {
    float s = 0.0f, r = 0.0f; /* two chains */
    const uint32_t u[4] = {w.x, w.y, w.z, w.w};
    if (DT == THIN_DTYPE_BF16) {
#pragma unroll
        for (int j = 0; j < 4; j++) {
            s = fmaf(__uint_as_float(u[j] << 16), x[2 * j], s);
            r = fmaf(__uint_as_float(u[j] & 0xffff0000u), x[2 * j + 1], r);
        }
    } else if (DT == THIN_DTYPE_F16) {
#pragma unroll
        for (int j = 0; j < 4; j++) {
            float2 f = __half22float2(*(const __half2 *)&u[j]);
            s = fmaf(f.x, x[2 * j], s);
            r = fmaf(f.y, x[2 * j + 1], r);
        }
    } else if (DT == THIN_DTYPE_F8_E4M3) {
#pragma unroll
        for (int j = 0; j < 4; j++) {
            __half2_raw lo = __nv_cvt_fp8x2_to_halfraw2((__nv_fp8x2_storage_t)(u[j] & 0xffffu), __NV_E4M3);
            __half2_raw hi = __nv_cvt_fp8x2_to_halfraw2((__nv_fp8x2_storage_t)(u[j] >> 16), __NV_E4M3);
            float2 fl = __half22float2(*(__half2 *)&lo), fh = __half22float2(*(__half2 *)&hi);
            s = fmaf(fl.x, x[4 * j], s);
            r = fmaf(fl.y, x[4 * j + 1], r);
            s = fmaf(fh.x, x[4 * j + 2], s);
            r = fmaf(fh.y, x[4 * j + 3], r);
        }
    } else {
#pragma unroll
        for (int j = 0; j < 4; j += 2) {
            s = fmaf(__uint_as_float(u[j]), x[j], s);
            r = fmaf(__uint_as_float(u[j + 1]), x[j + 1], r);
        }
    }
    return s + r;
}

__device__ __forceinline__ uint32_t sm_seg_units(const mv_args &a, int s) {
    return a.pair ? a.seg[0].w.rows : a.rope ? a.seg[s].w.rows / 2 : a.seg[s].w.rows;
}

/* The stage starting at unit gu of the concatenated segments (the block's units end at end): at
 * most R units, within one segment and, with rope, within one head. */
__device__ __forceinline__ sm_stage sm_stage_at(const mv_args &a, uint32_t R, uint32_t gu, uint32_t end) {
    sm_stage st;
    const int nsu = a.pair ? 1 : a.nseg;
    int s = 0;
    uint32_t u = gu;
    while (s + 1 < nsu && u >= sm_seg_units(a, s)) u -= sm_seg_units(a, s++);
    uint32_t cnt = min(R, end - gu);
    cnt = min(cnt, sm_seg_units(a, s) - u);
    if (a.rope) {
        const uint32_t half = a.head_dim / 2;
        cnt = min(cnt, half - u % half);
    }
    st.seg = s;
    st.u = u;
    st.cnt = cnt;
    return st;
}

/* First row in its segment of unit u (rope: row a of the pair a, a + half). */
__device__ __forceinline__ uint32_t sm_row(const mv_args &a, uint32_t u) {
    if (!a.rope) return u;
    const uint32_t half = a.head_dim / 2;
    return (u / half) * a.head_dim + u % half;
}

/* Requests stage st into dst: its units' first rows, then (pairs) their second rows. */
__device__ __forceinline__ void sm_issue(const mv_args &a, const sm_plan &p, const sm_stage &st,
                                         uint8_t *dst, uint64_t *bar) {
    const uint32_t bytes = st.cnt * p.rowbytes;
    const int two = a.pair || a.rope;
    mbar_expect_tx(bar, two ? 2 * bytes : bytes);
    if (a.pair) {
        bulk_g2s(dst, row_ptr(a.seg[0].w, st.u), bytes, bar);
        bulk_g2s(dst + bytes, row_ptr(a.seg[1].w, st.u), bytes, bar);
    } else {
        const uint32_t r = sm_row(a, st.u);
        bulk_g2s(dst, row_ptr(a.seg[st.seg].w, r), bytes, bar);
        if (two) bulk_g2s(dst + bytes, row_ptr(a.seg[st.seg].w, r + a.head_dim / 2), bytes, bar);
    }
}

/* sm_issue with cp.async by every thread of the block (16 bytes each in turn); not committed. */
__device__ __forceinline__ void sm_issue_cp(const mv_args &a, const sm_plan &p, const sm_stage &st,
                                            uint8_t *dst) {
    const uint32_t bytes = st.cnt * p.rowbytes;
    const uint8_t *src0, *src1 = NULL;
    if (a.pair) {
        src0 = (const uint8_t *)row_ptr(a.seg[0].w, st.u);
        src1 = (const uint8_t *)row_ptr(a.seg[1].w, st.u);
    } else {
        const uint32_t r = sm_row(a, st.u);
        src0 = (const uint8_t *)row_ptr(a.seg[st.seg].w, r);
        if (a.rope) src1 = (const uint8_t *)row_ptr(a.seg[st.seg].w, r + a.head_dim / 2);
    }
    for (uint32_t o = threadIdx.x * 16; o < bytes; o += SM_THREADS * 16) cp16(dst + o, src0 + o);
    if (src1)
        for (uint32_t o = threadIdx.x * 16; o < bytes; o += SM_THREADS * 16) cp16(dst + bytes + o, src1 + o);
}

/* What a unit's epilogue reads besides its sums, fetched a stage ahead. */
struct sm_epi {
    float s0, s1;   /* FP8 row scales (1 otherwise) */
    float r;        /* residual */
    float2 rot;     /* rope rotation */
};

template <int DT>
__device__ __forceinline__ void sm_epi_load(const mv_args &a, const sm_stage &st, uint32_t k, sm_epi *e) {
    const uint32_t u = st.u + k, rr = sm_row(a, u);
    const mv_seg &g = a.seg[st.seg];
    e->s0 = e->s1 = 1.0f;
    e->r = 0.0f;
    e->rot = make_float2(1.0f, 0.0f);
    if (a.rope) {
        if (DT == THIN_DTYPE_F8_E4M3 && g.w.scale) {
            e->s0 = __ldg(g.w.scale + rr);
            e->s1 = __ldg(g.w.scale + rr + a.head_dim / 2);
        }
        e->rot = rope_rot(a, st.seg, rr);
    } else if (a.pair) {
        if (DT == THIN_DTYPE_F8_E4M3) {
            if (a.seg[0].w.scale) e->s0 = __ldg(a.seg[0].w.scale + rr);
            if (a.seg[1].w.scale) e->s1 = __ldg(a.seg[1].w.scale + rr);
        }
    } else {
        if (DT == THIN_DTYPE_F8_E4M3 && g.w.scale) e->s0 = __ldg(g.w.scale + rr);
        if (a.resid) e->r = a.resid[rr];
    }
}

/* The epilogue of unit k of stage st (sums y0, and y1 for pairs), as store_rope / store_row. */
__device__ __forceinline__ void sm_epi_store(const mv_args &a, const sm_stage &st, uint32_t k, float y0,
                                             float y1, const sm_epi &e, int32_t pos) {
    const uint32_t u = st.u + k, rr = sm_row(a, u);
    const mv_seg &g = a.seg[st.seg];
    y0 *= e.s0;
    y1 *= e.s1;
    if (a.rope) {
        const uint32_t half = a.head_dim / 2;
        float o0 = y0, o1 = y1;
        if (g.freq) {
            o0 = y0 * e.rot.x - y1 * e.rot.y;
            o1 = y0 * e.rot.y + y1 * e.rot.x;
        }
        g.out[rr] = o0;
        g.out[rr + half] = o1;
        if (g.cache) {
            const size_t o = (size_t)pos * g.w.rows + rr;
            store_kv(g.cache, a.kv_dtype, o, o0);
            store_kv(g.cache, a.kv_dtype, o + half, o1);
        }
    } else if (a.pair) {
        a.seg[1].out[rr] = y1;
        a.seg[0].out[rr] = silu_f(y0) * y1;
    } else {
        g.out[rr] = y0;
        if (a.resid) a.resid[rr] = e.r + y0;
    }
}

template <int DT, int M>
__global__ void __launch_bounds__(SM_THREADS, 2) matvec_stream_kernel(const mv_args a, const sm_plan p) {
    constexpr uint32_t EPV = vec_of<DT>::epv;
    constexpr int JM = sm_jm(M);
    extern __shared__ __align__(128) uint8_t ring[];
    __shared__ uint64_t bars[SM_MAXNS];
    __shared__ float red[2][SM_RED];
    __shared__ float redn[32];
    pdl_trigger();
    const unsigned long long tr0 = d_trace ? gtimer() : 0;
    const uint32_t t = threadIdx.x;
    const uint32_t beg = (uint32_t)((uint64_t)blockIdx.x * p.total / gridDim.x);
    const uint32_t end = (uint32_t)((uint64_t)(blockIdx.x + 1) * p.total / gridDim.x);
    const int two = a.pair || a.rope;
    const int bulk = p.mode != 0;
    if (bulk && t == 0) {
        for (uint32_t k = 0; k < p.ns; k++) mbar_init(&bars[k], 1);
        mbar_fence_init();
    }
    if (bulk) __syncthreads();
    /* the ring's first stages: weights only, before the wait */
    uint32_t pgu = beg; /* the first unit not yet requested (bulk: thread 0's) */
    if (!bulk) {
        for (uint32_t k = 0; k < p.ns; k++) {
            if (pgu < end) {
                const sm_stage st = sm_stage_at(a, p.R, pgu, end);
                sm_issue_cp(a, p, st, ring + (size_t)k * p.stage_bytes);
                pgu += st.cnt;
            }
            cp_commit();
        }
    } else if (t == 0) {
        for (uint32_t k = 0; k < p.ns && pgu < end; k++) {
            const sm_stage st = sm_stage_at(a, p.R, pgu, end);
            sm_issue(a, p, st, ring + (size_t)k * p.stage_bytes, &bars[k]);
            pgu += st.cnt;
        }
    }
    /* x in registers: vectors v0 + P m of a row (norm weights first, before the wait) */
    const uint32_t P = p.P, G = p.G, grp = t / P, v0 = t % P;
    const uint32_t cols = a.seg[0].w.cols;
    float xr[M][EPV];
#pragma unroll
    for (int m = 0; m < M; m++)
#pragma unroll
        for (uint32_t e = 0; e < EPV; e++) {
            const uint32_t i = (v0 + P * m) * EPV + e;
            xr[m][e] = a.norm_w && i < cols ? load_elem(a.norm_w, a.norm_dtype, i) : 1.0f;
        }
    pdl_wait();
    const unsigned long long tr1 = d_trace ? gtimer() : 0;
    float ss = 0.0f;
#pragma unroll
    for (int m = 0; m < M; m++)
#pragma unroll
        for (uint32_t e = 0; e < EPV; e++) {
            const uint32_t i = (v0 + P * m) * EPV + e;
            const float xv = i < cols ? __ldcg(a.x + i) : 0.0f;
            if (grp == 0) ss += xv * xv;
            xr[m][e] *= xv;
        }
    if (a.norm_w) {
        const float inv = 1.0f / sqrtf(block_sum(ss, redn) / (float)cols + a.eps);
#pragma unroll
        for (int m = 0; m < M; m++)
#pragma unroll
            for (uint32_t e = 0; e < EPV; e++) xr[m][e] *= inv;
    }
    const int32_t pos = a.rope ? *a.pos : 0;
    const uint32_t W = P < 32 ? P : 32, nsl = P > 32 ? P / 32 : 1, sl = P > 32 ? v0 / 32 : 0;
    uint32_t gu = beg, it = 0;
    sm_stage cur = sm_stage_at(a, p.R, gu, end);
    sm_epi ep;
    if (gu < end && t < cur.cnt) sm_epi_load<DT>(a, cur, t, &ep);
    if (!bulk) { /* stage 0 in place and visible to every thread */
        cp_wait(p.ns - 1);
        __syncthreads();
    }
    while (gu < end) {
        const uint32_t slot = it % p.ns;
        if (bulk) mbar_wait(&bars[slot], (it / p.ns) & 1, p.mode == 2);
        const uint8_t *sb = ring + (size_t)slot * p.stage_bytes;
        const uint32_t rows = cur.cnt * (two ? 2 : 1), jn = (rows + G - 1) / G;
        float *rb = red[it & 1];
        /* every load of the stage first, then the products: no load waits behind arithmetic */
        uint4 wv[JM][M];
#pragma unroll
        for (int j = 0; j < JM; j++) {
            const uint32_t row = grp + (uint32_t)j * G;
            const bool okr = (uint32_t)j < jn && row < rows;
            const uint4 *wr = (const uint4 *)(sb + (size_t)(okr ? row : 0) * p.rowbytes);
#pragma unroll
            for (int m = 0; m < M; m++) {
                const uint32_t v = v0 + P * m;
                wv[j][m] = okr && v < p.nvec ? wr[v] : make_uint4(0, 0, 0, 0);
            }
        }
        float acc[JM];
#pragma unroll
        for (int j = 0; j < JM; j++) {
            acc[j] = 0.0f;
#pragma unroll
            for (int m = 0; m < M; m++) acc[j] += dot16r<DT>(wv[j][m], xr[m]);
        }
        if (W == 32) { /* the JM rows' warp sums at once, one row per group of 32 / JM lanes */
            uint32_t j;
            const float v = warp_sum_rows<JM>(acc, t & 31, &j);
            const uint32_t row = grp + j * G;
            if ((t & (32 / JM - 1)) == 0 && j < jn && row < rows) rb[row * nsl + sl] = v;
        } else {
            for (uint32_t o = W / 2; o > 0; o >>= 1)
#pragma unroll
                for (int j = 0; j < JM; j++) acc[j] += __shfl_xor_sync(0xffffffffu, acc[j], o);
            if (t % W == 0)
#pragma unroll
                for (int j = 0; j < JM; j++) {
                    const uint32_t row = grp + (uint32_t)j * G;
                    if ((uint32_t)j < jn && row < rows) rb[row * nsl + sl] = acc[j];
                }
        }
        if (!bulk) cp_wait(p.ns - 2); /* this thread's part of the next stage */
        __syncthreads(); /* sums visible, next stage visible, this slot free */
        /* every thread is done with this slot: refill it */
        if (!bulk) {
            if (pgu < end) {
                const sm_stage st = sm_stage_at(a, p.R, pgu, end);
                sm_issue_cp(a, p, st, ring + (size_t)slot * p.stage_bytes);
                pgu += st.cnt;
            }
            cp_commit();
        } else if (t == 0 && pgu < end) {
            const sm_stage st = sm_stage_at(a, p.R, pgu, end);
            fence_proxy_async();
            sm_issue(a, p, st, ring + (size_t)slot * p.stage_bytes, &bars[slot]);
            pgu += st.cnt;
        }
        const uint32_t ngu = gu + cur.cnt;
        const sm_stage nxt = sm_stage_at(a, p.R, ngu, end);
        if (t < cur.cnt) {
            float y0 = 0.0f, y1 = 0.0f;
            for (uint32_t q = 0; q < nsl; q++) y0 += rb[t * nsl + q];
            if (two)
                for (uint32_t q = 0; q < nsl; q++) y1 += rb[(t + cur.cnt) * nsl + q];
            sm_epi_store(a, cur, t, y0, y1, ep, pos);
        }
        if (ngu < end && t < nxt.cnt) sm_epi_load<DT>(a, nxt, t, &ep);
        cur = nxt;
        gu = ngu;
        it++;
    }
    if (t == 0) trace_block(TRACE_MV_STREAM | p.total << 8, tr0, tr1);
}

/* The stream kernel's plan for a, or 0 when it does not apply (rows too long for two stages,
 * more than 8 vectors of x per thread). *smem: its dynamic shared memory. */
static int stream_plan(const mv_args *a, int n_sm, sm_plan *p, uint32_t *blocks, size_t *smem) {
    const dmat &w = a->seg[0].w;
    const uint32_t epv = dtype_vec_elems(w.dtype);
    if (!epv || w.pitch % epv) return 0;
    memset(p, 0, sizeof *p);
    p->nvec = w.pitch / epv;
    p->rowbytes = p->nvec * 16;
    p->P = 1;
    while (p->P < p->nvec && p->P < SM_THREADS) p->P <<= 1;
    p->G = SM_THREADS / p->P;
    const uint32_t m = (p->nvec + p->P - 1) / p->P;
    const uint32_t m_inst = m <= 4 ? m : m <= 6 ? 6 : 8; /* the instance launch_stream picks */
    if (m > 8 || m_inst * epv > SM_XMAX) return 0;
    const uint32_t two = a->pair || a->rope ? 2 : 1;
    p->total = 0;
    for (int s = 0; s < (a->pair ? 1 : a->nseg); s++) p->total += a->seg[s].w.rows / (a->rope ? 2 : 1);
    if (p->total == 0) return 0;
    const uint32_t stage_target = (thin_cuda_tma_stage_kb > 0 ? (uint32_t)thin_cuda_tma_stage_kb : 32) << 10;
    const uint32_t ring_cap = (thin_cuda_tma_ring_kb > 0 ? (uint32_t)thin_cuda_tma_ring_kb : 96) << 10;
    const uint32_t unit_bytes = two * p->rowbytes;
    const uint32_t nsl = p->P > 32 ? p->P / 32 : 1;
    const uint32_t jm = (uint32_t)sm_jm((int)m_inst);
    uint32_t R = stage_target / unit_bytes;
    if (R < 1) R = 1;
    if (R * two > jm * p->G) R = jm * p->G / two;
    if (R * two * nsl > SM_RED) R = SM_RED / (two * nsl);
    if (a->rope && R > a->head_dim / 2) R = a->head_dim / 2;
    if (R < 1) return 0;
    p->R = R;
    p->stage_bytes = R * unit_bytes;
    const int bps = thin_cuda_tma_bps > 0 ? thin_cuda_tma_bps : 1;
    uint32_t nb = (uint32_t)n_sm * (uint32_t)bps;
    if (nb > p->total) nb = p->total;
    const uint32_t per_block = (p->total + nb - 1) / nb;
    uint32_t ns = ring_cap / p->stage_bytes;
    const uint32_t need = (per_block + R - 1) / R + (a->rope ? per_block / (a->head_dim / 2) + 1 : 0) + 2;
    if (ns > need) ns = need;
    if (ns > SM_MAXNS) ns = SM_MAXNS;
    if (ns < 2) ns = 2;
    if ((size_t)ns * p->stage_bytes > SM_RING_MAX) return 0;
    p->ns = ns;
    p->mode = thin_cuda_tma_mode >= 0 && thin_cuda_tma_mode <= 2 ? (uint32_t)thin_cuda_tma_mode : 0;
    *blocks = nb;
    *smem = (size_t)ns * p->stage_bytes;
    return 1;
}

template <int DT, int M>
static cudaError_t launch_stream_m(const mv_args *a, const sm_plan *p, uint32_t blocks, size_t smem,
                                   cudaStream_t st) {
    static int set; /* the ring's largest size allowed once (static shared memory comes on top) */
    if (!set) {
        cudaError_t e = cudaFuncSetAttribute(matvec_stream_kernel<DT, M>,
                                             cudaFuncAttributeMaxDynamicSharedMemorySize, SM_RING_MAX);
        if (e != cudaSuccess) return e;
        set = 1;
    }
    return launch_k(matvec_stream_kernel<DT, M>, dim3(blocks), dim3(SM_THREADS), smem, st, *a, *p);
}

template <int DT, int M>
static cudaError_t launch_stream_if(const mv_args *a, const sm_plan *p, uint32_t blocks, size_t smem,
                                    cudaStream_t st) {
    if constexpr (M * vec_of<DT>::epv <= SM_XMAX) return launch_stream_m<DT, M>(a, p, blocks, smem, st);
    else return cudaErrorInvalidValue; /* excluded by stream_plan */
}

template <int DT>
static cudaError_t launch_stream(const mv_args *a, const sm_plan *p, uint32_t blocks, size_t smem,
                                 cudaStream_t st) {
    const uint32_t m = (p->nvec + p->P - 1) / p->P;
    if (m <= 1) return launch_stream_if<DT, 1>(a, p, blocks, smem, st);
    if (m <= 2) return launch_stream_if<DT, 2>(a, p, blocks, smem, st);
    if (m <= 3) return launch_stream_if<DT, 3>(a, p, blocks, smem, st);
    if (m <= 4) return launch_stream_if<DT, 4>(a, p, blocks, smem, st);
    if (m <= 6) return launch_stream_if<DT, 6>(a, p, blocks, smem, st);
    return launch_stream_if<DT, 8>(a, p, blocks, smem, st);
}

cudaError_t matvec_trace_arm(trace_rec *recs, unsigned int *n, unsigned int cap) {
    return trace_arm_here(recs, n, cap);
}

cudaError_t launch_matvec(const mv_args *a, int n_sm, cudaStream_t st) {
    sm_plan p;
    uint32_t blocks = 0;
    size_t smem = 0;
    if (thin_cuda_tma && stream_plan(a, n_sm, &p, &blocks, &smem)) {
        switch (a->seg[0].w.dtype) {
        case THIN_DTYPE_BF16: return launch_stream<THIN_DTYPE_BF16>(a, &p, blocks, smem, st);
        case THIN_DTYPE_F16: return launch_stream<THIN_DTYPE_F16>(a, &p, blocks, smem, st);
        case THIN_DTYPE_F8_E4M3: return launch_stream<THIN_DTYPE_F8_E4M3>(a, &p, blocks, smem, st);
        case THIN_DTYPE_F32: return launch_stream<THIN_DTYPE_F32>(a, &p, blocks, smem, st);
        default: break;
        }
    }
    switch (a->seg[0].w.dtype) {
    case THIN_DTYPE_BF16: return launch_dt<THIN_DTYPE_BF16>(a, n_sm, st);
    case THIN_DTYPE_F16: return launch_dt<THIN_DTYPE_F16>(a, n_sm, st);
    case THIN_DTYPE_F8_E4M3: return launch_dt<THIN_DTYPE_F8_E4M3>(a, n_sm, st);
    case THIN_DTYPE_F32: return launch_dt<THIN_DTYPE_F32>(a, n_sm, st);
    default: return cudaErrorInvalidValue;
    }
}
