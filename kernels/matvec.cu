/*
 * matvec.cu — y = W x for one token, the decode step's bandwidth-bound core.
 *
 * One warp per output row (two rows for the fused gate/up pair, rows i and i + head_dim/2 of a
 * head for the q, k, v group with the rope and KV-store epilogue, or rows i and i + rows/2 of a
 * small single-row matrix such as the o-projection, so that its blocks, one per SM with both rows
 * requested before the wait, leave room beside them for the next kernel's), 16-byte loads with up to
 * MV_UNROLL of them in flight per lane before the first use, F32 accumulation, streaming cache hint
 * (weights are read once per token). The input vector is staged once per block in shared memory as
 * F32, optionally through a fused RMSNorm; epilogues add the residual or apply the SiLU gate.
 * CPU twin: op_matvec (+ op_rmsnorm, op_add, op_silu_mul) in ops_cpu.c.
 */
#include "matvec_dev.cuh"

/* Persistent warps: each takes units (rows, or row pairs) r, r + all warps, ...: loads HB vectors
 * per lane and row, uses them, loads the next; the first batch of the next unit is loaded before
 * the current unit's reduction, and the first unit's before waiting for the previous kernel
 * (weights do not depend on it; the position, read by the rope rotation, is set before the step's
 * first kernel). */
template <int DT, int NR, int HB, int NW = MV_WARPS, bool BIAS = false>
__device__ void matvec_body(const mv_args &a, uint32_t total, float *xs, float *red) {
    ktrace kt;
    kt.start();
    const dmat &w0 = a.seg[0].w;
    const uint32_t nvec = w0.pitch / vec_of<DT>::epv;
    const int lane = threadIdx.x & 31;
    const uint32_t stride = gridDim.x * NW;
    const bool rope = NR == 2 && a.rope;
    uint32_t r = blockIdx.x * NW + (threadIdx.x >> 5);
    uint4 w[NR][HB];
    const uint4 *rows[NR];
    int seg = 0;
    uint32_t rr = 0;
    float2 rot = make_float2(1.0f, 0.0f);
    mv_epi<NR> e;
    if (r < total) {
        rows_of<NR>(a, r, rows, &seg, &rr);
        load_batch<NR, HB>(w, rows, lane, nvec);
        if (lane == 0) {
            if (rope) rot = rope_rot(a, seg, rr);
            epi_weights<DT, NR>(a, seg, rr, e);
        }
    }
    kt.mark(0); /* the prologue's end: weights requested, the rotation computed */
    wait_and_stage<DT>(xs, a, red, kt);
    if (r < total && lane == 0) epi_resid<NR>(a, rr, e);
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
        const mv_epi<NR> cur_e = e;
        if (r + stride < total) {
            rows_of<NR>(a, r + stride, rows, &seg, &rr);
            load_batch<NR, HB>(w, rows, lane, nvec);
            if (lane == 0) {
                if (rope) rot = rope_rot(a, seg, rr);
                epi_weights<DT, NR>(a, seg, rr, e);
                epi_resid<NR>(a, rr, e);
            }
        }
#pragma unroll
        for (int i = 0; i < NR; i++) acc[i] = warp_sum(acc[i]);
        if (lane == 0) store_row<DT, NR, BIAS>(a, cur_seg, cur_rr, acc, cur_rot, cur_e);
    }
    if (lane == 0) kt.end(TRACE_MV | total << 8, 2); /* one record per warp */
}

/* Single rows of several batches each (the down projection: long rows, one or two per warp):
 * two batches in flight per warp. The warp's batches, over its units r, r + all warps, ..., form
 * one sequence k = 0, 1, ...; batches k and k + 1 are requested before k is used, and k + 2
 * right after it is used, into the registers it leaves (the first two before the dependency
 * wait). matvec_body instead requests a row's next batch only once the current one is used. */
template <int DT, int HB>
__device__ void matvec_pipe(const mv_args &a, uint32_t total, float *xs, float *red) {
    ktrace kt;
    kt.start();
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
            if (lane == 0) {
                mv_epi<1> e;
                epi_weights<DT, 1>(a, sg, rr, e);
                epi_resid<1>(a, rr, e);
                store_row<DT, 1>(a, sg, rr, &acc, make_float2(1.0f, 0.0f), e);
            }
            acc = 0.0f;
        }
    };
    issue(0, wa);
    issue(1, wb);
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

/* MINB: blocks of MV_WARPS warps per SM the registers must allow (__launch_bounds__; at least
 * two, which caps the registers at 128 a thread); with 3 or more, batches of MV_UNROLL / 2 vectors
 * per lane and row keep the registers down. MODE 1: single rows through matvec_pipe (two blocks
 * per SM, full batches; the launcher picks it for rows of several batches when asked). MODE 2:
 * single rows only, full batches within 80 registers (three blocks per SM): without the pair and
 * rope paths a single row's loop fits there, so FP8 rows get full batches at three blocks per SM. */
template <int DT, int MINB, int MODE, int NW = MV_WARPS, bool BIAS = false>
__global__ void __launch_bounds__(NW * 32, MODE == 2 ? 3 : MODE == 1 || MINB < 2 ? 16 / NW : MINB)
    matvec_kernel(const mv_args a, uint32_t total) {
    extern __shared__ float xs[];
    __shared__ float red[32];
    pdl_trigger();
    constexpr int HB = MINB >= 3 && MODE == 0 ? MV_UNROLL / 2 : MV_UNROLL;
    if constexpr (MODE == 1) matvec_pipe<DT, MV_UNROLL>(a, total, xs, red);
    else if constexpr (MODE == 2) matvec_body<DT, 1, HB>(a, total, xs, red);
    else if (a.pair || a.rope || a.dual) matvec_body<DT, 2, HB, NW, BIAS>(a, total, xs, red);
    else matvec_body<DT, 1, HB, NW, BIAS>(a, total, xs, red);
}

/* Slim blocks (THIN_CUDA_MV_SLIM=1; launched for the q/k/v rope pairs only): at most 64 registers
 * a thread with quarter batches, so that a block of 8 warps (16 K registers) fits on an SM beside a
 * slim MLP block (mlp.cu) and starts, requesting its first rows, while that kernel runs. */
template <int DT, int NW, bool BIAS>
__global__ void THIN_MAXNREG(NW * 32, 64) matvec_slim_kernel(const mv_args a, uint32_t total) {
    extern __shared__ float xs[];
    __shared__ float red[32];
    pdl_trigger();
    matvec_body<DT, 2, MV_UNROLL / 4, NW, BIAS>(a, total, xs, red);
}

/* q/k/v from shared memory (launched for the rope pairs only: by default after an MLP kernel with
 * FP8 gate/up, see cuda_exec.cu's qkv_smem; THIN_CUDA_MV_SMEM=1[,NS] after every one): one block
 * of 8 warps per SM within 64 registers (it fits beside a slim MLP block, whose kernel runs
 * before it) takes a contiguous range of `upb` units and copies all their rows into shared memory
 * with bulk asynchronous copies (one mbarrier per warp) as it starts, NS ns after its start when
 * NS is given, long before its wait for the previous kernel returns. After the wait only x is
 * read from global memory; the dot products run from shared memory in the per-op kernel's order
 * of vectors per lane, so the sums are those of matvec_body. Dynamic shared memory: the rows
 * (upb x 2 rows), x (pitch floats), each unit's mvs_unit. */
struct mvs_unit { /* a unit's segment and row (rows_of), rotation and epilogue operands */
    int seg;
    uint32_t rr;
    float2 rot;
    mv_epi<2> e;
};

template <int DT, int NW, bool BIAS>
__global__ void THIN_MAXNREG(NW * 32, 64)
    matvec_smem_kernel(const mv_args a, uint32_t total, uint32_t upb, uint32_t delay_ns) {
    extern __shared__ __align__(16) uint8_t smb[];
    __shared__ float red[32];
    __shared__ uint64_t bar[NW];
    pdl_trigger();
    ktrace kt;
    kt.start();
    const uint32_t nvec = a.seg[0].w.pitch / vec_of<DT>::epv, rowb = nvec * 16;
    const int lane = threadIdx.x & 31, wi = threadIdx.x >> 5;
    const uint32_t u0 = blockIdx.x * upb;
    const uint32_t nu = u0 < total ? min(upb, total - u0) : 0;
    uint8_t *wrows = smb;
    float *xs = (float *)(smb + (size_t)upb * 2 * rowb);
    mvs_unit *units = (mvs_unit *)(xs + a.seg[0].w.pitch);
    const bool has = (uint32_t)wi < nu;
    if (lane == 0 && has) {
        mbar_init(&bar[wi], 1);
        mbar_init_fence();
        uint32_t bytes = 0;
        for (uint32_t j = wi; j < nu; j += NW) bytes += 2 * rowb;
        if (delay_ns) {
            const unsigned long long t0 = gtimer();
            while (gtimer() - t0 < delay_ns) __nanosleep(200);
        }
        const uint64_t pol = evict_first_policy();
        mbar_expect_tx(&bar[wi], bytes);
        for (uint32_t j = wi; j < nu; j += NW) {
            const uint4 *rows[2];
            rows_of<2>(a, u0 + j, rows, &units[j].seg, &units[j].rr);
            bulk_load(wrows + (size_t)j * 2 * rowb, rows[0], rowb, &bar[wi], pol);
            bulk_load(wrows + (size_t)j * 2 * rowb + rowb, rows[1], rowb, &bar[wi], pol);
        }
        /* the rotations' sincos once every copy is on its way */
        for (uint32_t j = wi; j < nu; j += NW) {
            mvs_unit &u = units[j];
            u.rot = rope_rot(a, u.seg, u.rr);
            epi_weights<DT, 2>(a, u.seg, u.rr, u.e);
        }
    }
    kt.mark(0); /* the prologue's end: rows requested, the rotations computed */
    wait_and_stage<DT>(xs, a, red, kt);
    if (has) mbar_wait(&bar[wi], 0);
    const uint32_t ps = nvec * 4;
    for (uint32_t j = wi; j < nu; j += NW) {
        const uint4 *r0 = (const uint4 *)(wrows + (size_t)j * 2 * rowb), *r1 = r0 + nvec;
        float acc[2] = {0.0f, 0.0f};
#pragma unroll 4
        for (uint32_t v = lane; v < nvec; v += 32) {
            acc[0] += dot16<DT>(r0[v], xs + 4 * v, ps);
            acc[1] += dot16<DT>(r1[v], xs + 4 * v, ps);
        }
        acc[0] = warp_sum(acc[0]);
        acc[1] = warp_sum(acc[1]);
        if (lane == 0) store_row<DT, 2, BIAS>(a, units[j].seg, units[j].rr, acc, units[j].rot, units[j].e);
    }
    if (lane == 0) kt.end(TRACE_MV | total << 8, 2);
}

/* The launch's units: rows, row pairs (gate/up pairs, rope pairs) or dual units. */
static uint32_t mv_units(const mv_args *a) {
    if (a->dual) return dual_half(*a);
    uint32_t total = 0;
    for (int s = 0; s < (a->pair ? 1 : a->nseg); s++) total += a->seg[s].w.rows / (a->rope ? 2 : 1);
    return total;
}

/* matvec_smem_kernel's geometry for rope pairs a: units per block and the shared memory of a
 * block; cudaErrorNotSupported when they do not fit the device's opt-in shared memory. */
static cudaError_t smem_geometry(const mv_args *a, int n_sm, uint32_t *upb, size_t *smem) {
    const uint32_t total = mv_units(a);
    if (!a->rope || total == 0 || n_sm < 1) return cudaErrorNotSupported;
    *upb = (total + (uint32_t)n_sm - 1) / (uint32_t)n_sm;
    const size_t rowb = (size_t)a->seg[0].w.pitch * thin_dtype_size((thin_dtype)a->seg[0].w.dtype);
    *smem = (size_t)*upb * 2 * rowb + (size_t)a->seg[0].w.pitch * sizeof(float) +
            (size_t)*upb * sizeof(mvs_unit);
    int dev = 0, optin = 0;
    cudaError_t e = cudaGetDevice(&dev);
    if (e == cudaSuccess) e = cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev);
    if (e != cudaSuccess) return e;
    return *smem + 1024 > (size_t)optin ? cudaErrorNotSupported : cudaSuccess;
}

int matvec_smem_taken(const mv_args *a, int n_sm) {
    uint32_t upb;
    size_t smem;
    return a->smem && smem_geometry(a, n_sm, &upb, &smem) == cudaSuccess;
}

/* Launches matvec_smem_kernel for rope pairs, or returns cudaErrorNotSupported when a block's
 * rows do not fit in shared memory (the caller then takes the per-op kernel). */
template <int DT, bool BIAS>
static cudaError_t launch_smem(const mv_args *a, int n_sm, cudaStream_t st) {
    constexpr int NW = MV_WARPS;
    uint32_t upb;
    size_t smem;
    cudaError_t e = smem_geometry(a, n_sm, &upb, &smem);
    if (e != cudaSuccess) return e;
    const uint32_t total = mv_units(a);
    const uint32_t blocks = (total + upb - 1) / upb;
    void (*kern)(const mv_args, uint32_t, uint32_t, uint32_t) = matvec_smem_kernel<DT, NW, BIAS>;
    e = smem_attr(kern, smem, 1024);
    if (e != cudaSuccess) return e;
    return launch_k(kern, dim3(blocks), dim3(NW * 32), smem, st, *a, total, upb,
                    (uint32_t)thin_cuda_mv_smem_ns);
}

template <int DT, int MINB, int MODE, int NW = MV_WARPS, bool BIAS = false, bool SLIM = false>
static cudaError_t launch_v(const mv_args *a, int n_sm, cudaStream_t st) {
    const uint32_t total = mv_units(a);
    size_t smem = (size_t)a->seg[0].w.pitch * sizeof(float);
    void (*kern)(const mv_args, uint32_t);
    if constexpr (SLIM) kern = matvec_slim_kernel<DT, NW, BIAS>;
    else kern = matvec_kernel<DT, MINB, MODE, NW, BIAS>;
    cudaError_t e = smem_attr(kern, smem, 256); /* + its static memory */
    if (e != cudaSuccess) return e;
    int per_sm = 0;
    e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kern, NW * 32, smem);
    if (e != cudaSuccess) return e;
    if (thin_cuda_mv_bps > 0 && thin_cuda_mv_bps < per_sm) per_sm = thin_cuda_mv_bps;
    if (MODE == 2 && thin_cuda_mv_single < per_sm) per_sm = thin_cuda_mv_single;
    if (a->dual && thin_cuda_mv_dual < per_sm) per_sm = thin_cuda_mv_dual;
    if (MODE == 1 && thin_cuda_mv_pipe_bps > 0 && thin_cuda_mv_pipe_bps < per_sm)
        per_sm = thin_cuda_mv_pipe_bps;
    if (thin_cuda_mv_small_bps > 0 && thin_cuda_mv_small_bps < per_sm) {
        /* a small matrix may leave room on every SM for the next kernel's blocks to start */
        const size_t bytes = (size_t)total * (a->pair || a->rope || a->dual ? 2 : 1) *
                             a->seg[0].w.pitch * thin_dtype_size((thin_dtype)a->seg[0].w.dtype);
        const size_t lim = (size_t)(thin_cuda_mv_small_mb > 0 ? thin_cuda_mv_small_mb : 16) << 20;
        if (bytes <= lim) per_sm = thin_cuda_mv_small_bps;
    }
    /* All blocks resident at once; each warp gets the same number of units (the fewest blocks
     * that give that count), so that no warp runs on alone at the end. (Dealing units round the
     * blocks instead, to even out the SMs, measured slower.) */
    const uint32_t cap = (uint32_t)n_sm * (uint32_t)(per_sm > 0 ? per_sm : 1);
    const uint32_t per_warp = (total + cap * NW - 1) / (cap * NW);
    uint32_t blocks = (total + per_warp * NW - 1) / (per_warp * NW);
    if (blocks < 1) blocks = 1;
    return launch_k(kern, dim3(blocks), dim3(NW * 32), smem, st, *a, total);
}

/* Bandwidth follows the bytes in flight per SM: BF16/F16/F32 pairs do best with two blocks of long
 * batches, FP8 pairs (half the bytes per element, more work per byte) with three blocks of half
 * batches; single rows in their own kernel at up to three blocks of full batches, which halves
 * the chain of dependent loads of an FP8 down row (measured on the H200; env THIN_CUDA_MV and
 * THIN_CUDA_MV_SINGLE override). BIAS: rows with biases (see mv_args), in kernels of their own of
 * the same block shapes; the single-row kernels (MODE 1 and 2) take none, so such rows run as
 * MODE 0. */
template <int DT, bool BIAS>
static cudaError_t launch_dt(const mv_args *a, int n_sm, cudaStream_t st) {
    if constexpr (!BIAS) {
        /* dual single rows are units of two rows: the row-pair kernel's (launch_v caps its blocks) */
        const bool single = !a->pair && !a->rope && !a->dual;
        if (thin_cuda_mv_pipe && single && a->seg[0].w.pitch / vec_of<DT>::epv > 32 * MV_UNROLL)
            return launch_v<DT, 1, 1>(a, n_sm, st);
        if (thin_cuda_mv_single > 0 && single) return launch_v<DT, 3, 2>(a, n_sm, st);
    }
    if (a->smem && a->rope) {
        const cudaError_t e = launch_smem<DT, BIAS>(a, n_sm, st);
        if (e != cudaErrorNotSupported) return e;
    }
    if (thin_cuda_mv_slim && a->rope) return launch_v<DT, 1, 0, MV_WARPS, BIAS, true>(a, n_sm, st);
    int minb = thin_cuda_mv_minb > 0 ? thin_cuda_mv_minb : DT == THIN_DTYPE_F8_E4M3 ? 3 : 1;
    if (minb >= 3) return launch_v<DT, 3, 0, MV_WARPS, BIAS>(a, n_sm, st);
    /* q/k/v (rope pairs) and the dual o-projection in blocks of 12 warps, one per SM by registers
     * (128 blocks for SmolLM3-3B's q/k/v, 86 for o), after an MLP kernel that also runs one block
     * per SM (H200, SmolLM3-3B: quality FP8 651.4, 649.9 and 651.9 against 640.7, 638.7 and 641.2
     * tokens/s in two calls; BF16 with the 16-warp MLP blocks 518.6 against 508.9, but with 8-warp
     * MLP blocks 503.3 against 506.8; bench/decode-variants.sh). Since the attention + o kernel
     * (attn_o.cu) follows q/k/v, q/k/v after an MLP kernel with FP8 gate/up measures faster in
     * blocks of 8 warps (a->warps, set by the caller: quality FP8 676.9 against 663.6, 671.5 and
     * 671.4 against 661.0 in two calls), while BF16 stays at 12 (in blocks of 8: 514.4 against
     * 524.3). THIN_CUDA_MV_WARPS=8 or 12: that for all. */
    const int nw = thin_cuda_mv_warps == 8 || thin_cuda_mv_warps == 12 ? thin_cuda_mv_warps : a->warps;
    if (nw != MV_WARPS && (a->rope || a->dual)) return launch_v<DT, 1, 0, 12, BIAS>(a, n_sm, st);
    return launch_v<DT, 1, 0, MV_WARPS, BIAS>(a, n_sm, st);
}

template <bool BIAS>
static cudaError_t launch_dtype(const mv_args *a, int n_sm, cudaStream_t st) {
    switch (a->seg[0].w.dtype) {
    case THIN_DTYPE_BF16: return launch_dt<THIN_DTYPE_BF16, BIAS>(a, n_sm, st);
    case THIN_DTYPE_F16: return launch_dt<THIN_DTYPE_F16, BIAS>(a, n_sm, st);
    case THIN_DTYPE_F8_E4M3: return launch_dt<THIN_DTYPE_F8_E4M3, BIAS>(a, n_sm, st);
    case THIN_DTYPE_F32: return launch_dt<THIN_DTYPE_F32, BIAS>(a, n_sm, st);
    default: return cudaErrorInvalidValue;
    }
}

cudaError_t matvec_trace_arm(trace_rec *recs, unsigned int *n, unsigned int cap) {
    return trace_arm_here(recs, n, cap);
}

cudaError_t launch_matvec(const mv_args *in, int n_sm, cudaStream_t st) {
    mv_args b = *in;
    const mv_args *a = &b;
    b.x4 = thin_cuda_mv_x4;
    for (int k = 0; k < a->nseg; k++)
        if (a->seg[k].w.trans) return cudaErrorInvalidValue;
    const dmat &w0 = a->seg[0].w;
    if (thin_cuda_mv_dual > 0 && a->nseg == 1 && !a->pair && !a->rope && w0.rows > 1 &&
        (size_t)w0.rows * w0.pitch * thin_dtype_size((thin_dtype)w0.dtype) <= (size_t)16 << 20)
        b.dual = 1;
    return a->bias[0] || a->bias[1] || a->bias[2] ? launch_dtype<true>(a, n_sm, st)
                                                  : launch_dtype<false>(a, n_sm, st);
}
