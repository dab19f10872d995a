/*
 * mlp.cu — the decode step's whole MLP for one token in one kernel: RMSNorm, gate and up, the SiLU
 * gate, the down projection and the residual add, with no kernel boundary between gate/up and down.
 *
 * Each block takes a contiguous range of `units` intermediate units j (FP8 gate/up: one block of
 * 24 warps per SM within 80 registers, or within 64 when the q/k/v launch after it starts beside
 * it; BF16: one of 24 warps within 64 registers, which fits beside an attention + o block; see
 * launch_dd).
 *  1. Its warps compute the units' gate and up rows as the pair matvec does (x staged once per
 *     block through the fused RMSNorm, a row pair per warp and unit, 16-byte loads, the next
 *     unit's loads issued before the current one's reduction) and keep h[j] = silu(g) * u in
 *     shared memory.
 *  2. The down projection is stored transposed (compile_steps transposes it on the device): row j
 *     of the transpose is the column of down that h[j] multiplies, so the block's share of down is
 *     `units` contiguous rows, streamed in the same 16-byte, row-contiguous pattern as gate and
 *     up. Each thread owns a few output columns (one 16-byte vector of each row, or two for
 *     hidden sizes over 256 vectors) of a group of the block's units, and sums h[j] × downᵀ[j].
 *     Its first loads are issued before the barrier that publishes h.
 *  3. The groups' sums meet in shared memory, are scaled (FP8 down: per output column) and added
 *     into the residual with float atomics, one per four columns.
 * The residual is also what the norm reads, so no block adds into it before every block has
 * staged it (a 64-bit counter per step that only grows; the grid never exceeds the blocks that
 * are resident at once, and the next kernel starts only once every block has started). The
 * blocks' sums land in the residual in the order they finish, so the last bits of a float may
 * differ between runs.
 * A split over devices keeps this shape: each device holds a range of intermediate units (gate and
 * up rows, down columns) and its partial residual sums are all-reduced.
 * CPU twin: op_rmsnorm, op_matvec (gate, up), op_silu_mul, op_matvec (down), op_add in ops_cpu.c.
 */
#include "matvec_dev.cuh"

int thin_cuda_mlp = 1, thin_cuda_mlp_bps = 0, thin_cuda_mlp_units = 0, thin_cuda_mlp_warps = 0;
int thin_cuda_mlp_slim = -1;
int thin_cuda_mlp_split = 1;

/* Elements of one 16-byte vector of DT (BF16 or FP8 E4M3) as floats. */
template <int DT>
__device__ __forceinline__ void unpack16(uint4 w, float (&f)[vec_of<DT>::epv]) {
    const uint32_t u[4] = {w.x, w.y, w.z, w.w};
#pragma unroll
    for (int j = 0; j < 4; j++) {
        if constexpr (DT == THIN_DTYPE_BF16) {
            f[2 * j] = __uint_as_float(u[j] << 16);
            f[2 * j + 1] = __uint_as_float(u[j] & 0xffff0000u);
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

/* DTG: gate/up dtype, DTD: down dtype; NW warps per block; HB: 16-byte vectors per lane and row
 * in a gate/up load batch; NB: down rows per thread in each of the two batches in flight; VPT:
 * 16-byte vectors of a down row per thread (1 or 2). The kernels below choose HB and NB for
 * their register bounds. */
template <int DTG, int DTD, int NW, int HB, int NB, int VPT>
__device__ __forceinline__ void mlp_body(const mlp_args &a) {
    extern __shared__ __align__(16) float sm[];
    __shared__ float red[32];
    pdl_trigger();
    ktrace kt;
    kt.start();
    constexpr uint32_t EPD = vec_of<DTD>::epv;
    const mv_args &m = a.mv;
    const uint32_t inter = m.seg[0].w.rows;
    const uint32_t u0 = blockIdx.x * a.units;
    const uint32_t nu = min(a.units, inter - u0);
    float *xs = sm, *hs = sm + a.h_off;
    const int lane = threadIdx.x & 31;
    const uint32_t nvec = m.seg[0].w.pitch / vec_of<DTG>::epv;

    /* 1. gate and up: warp w takes units w, w + NW, ... of the block's range, below full. With
     * a.split (THIN_CUDA_MLP_SPLIT, BF16 gate/up) the units left over, at most half as many as
     * the warps, are cut in halves of whole load batches, half k of left-over unit i to warp
     * 2i + k, so that every warp streams to the phase's end instead of half of them idling
     * through the others' last unit (SmolLM3-3B: 84 units a block, 12 left over after three
     * rounds of 24 warps); the halves' sums meet in shared memory after it. On one H100 with
     * SmolLM3-3B, BF16 421.4 and 421.3 tokens/s against 419.3 and 419.2; quality FP8 601.9 and
     * 601.6 against 600.2 and 599.3 and against 602.0 and 602.3 for the kernels without the
     * code, whose FP8 slim instances it made spill 12-20 bytes: so BF16 gate/up only. */
    const uint32_t wid = threadIdx.x >> 5, half = nvec / 2;
    const bool split = DTG == THIN_DTYPE_BF16 && a.split && nu % NW && 2 * (nu % NW) <= NW && half % (32 * HB) == 0;
    const uint32_t full = split ? nu - nu % NW : nu;
    /* whether this warp has a half (item wid of the left-over units' halves) */
    const bool seg = wid < 2 * (nu - full);
    uint32_t j = wid, vb = 0;
    if (j >= full) j = seg ? full + wid / 2 : nu, vb = wid % 2 * half;
    uint4 w[2][HB];
    const uint4 *rows[2];
    mv_epi<2> e;
    if (j < nu) {
        rows[0] = row_ptr(m.seg[0].w, u0 + j);
        rows[1] = row_ptr(m.seg[1].w, u0 + j);
        load_batch<2, HB>(w, rows, vb + lane, nvec);
        if (lane == 0) epi_weights<DTG, 2>(m, 0, u0 + j, e);
    }
    wait_and_stage<DTG>(xs, m, red, kt);
    /* This block has read the residual (through x). The counter only grows, by gridDim.x a launch
     * (the same grid every launch of a step), so the count this launch's blocks wait for follows
     * from the value before this block's increment; no block resets it, so no block waits for a
     * returning atomic at its end. */
    unsigned long long target = 0;
    if (threadIdx.x == 0) {
        __threadfence();
        const unsigned long long prev = atomicAdd(a.count, 1ull);
        target = (prev / gridDim.x + 1) * gridDim.x;
    }
    while (j < nu) {
        float acc[2] = {0.0f, 0.0f};
        use_batch<DTG, 2, HB>(w, vb + lane, nvec, xs, acc);
        const uint32_t ve = j < full ? nvec : vb + half;
        for (uint32_t base = vb + lane + 32 * HB; base < ve; base += 32 * HB) {
            load_batch<2, HB>(w, rows, base, nvec);
            use_batch<DTG, 2, HB>(w, base, nvec, xs, acc);
        }
        const mv_epi<2> ce = e;
        const uint32_t jc = j;
        if (j + NW < full) j += NW; /* the next item: a whole unit, the warp's half, or none */
        else if (j < full && seg) j = full + wid / 2, vb = wid % 2 * half;
        else j = nu;
        if (j < nu) {
            rows[0] = row_ptr(m.seg[0].w, u0 + j);
            rows[1] = row_ptr(m.seg[1].w, u0 + j);
            load_batch<2, HB>(w, rows, vb + lane, nvec);
            if (lane == 0) epi_weights<DTG, 2>(m, 0, u0 + j, e);
        }
        acc[0] = warp_sum(acc[0]);
        acc[1] = warp_sum(acc[1]);
        if (lane == 0) {
            if (jc < full) {
                hs[jc] = silu_f(acc[0] * ce.sc[0]) * (acc[1] * ce.sc[1]);
            } else { /* the half's scaled sums (two floats a warp past h) */
                hs[a.units + 2 * wid] = acc[0] * ce.sc[0];
                hs[a.units + 2 * wid + 1] = acc[1] * ce.sc[1];
            }
        }
    }
    if (threadIdx.x == 0) kt.mark(0);

    /* 2. down: thread (group gi, t) takes vectors t (+ tpr) of rows gi, gi + G, ... */
    const uint32_t tpr = a.tpr, G = blockDim.x / tpr;
    const uint32_t gi = threadIdx.x / tpr, t = threadIdx.x % tpr;
    const uint32_t nvd = a.down.pitch / EPD;
    const uint32_t dpitch_b = a.down.pitch * (DTD == THIN_DTYPE_F8_E4M3 ? 1 : 2);
    const uint8_t *dbase = (const uint8_t *)a.down.data + (size_t)u0 * dpitch_b;
    float acc[VPT][EPD];
#pragma unroll
    for (int v = 0; v < VPT; v++)
#pragma unroll
        for (int i = 0; i < (int)EPD; i++) acc[v][i] = 0.0f;
    uint4 da[NB][VPT], db[NB][VPT];
    auto load_d = [&](uint32_t k0, uint4 (&d)[NB][VPT]) {
#pragma unroll
        for (int k = 0; k < NB; k++) {
            const uint32_t jj = gi + G * (k0 + k);
#pragma unroll
            for (int v = 0; v < VPT; v++) {
                const uint32_t vi = t + v * tpr;
                if (jj < nu && vi < nvd) d[k][v] = ld_stream((const uint4 *)(dbase + (size_t)jj * dpitch_b) + vi);
            }
        }
    };
    auto use_d = [&](uint32_t k0, const uint4 (&d)[NB][VPT]) {
#pragma unroll
        for (int k = 0; k < NB; k++) {
            const uint32_t jj = gi + G * (k0 + k);
            if (jj >= nu) break;
            const float h = hs[jj];
#pragma unroll
            for (int v = 0; v < VPT; v++) {
                if (t + v * tpr < nvd) {
                    float f[EPD];
                    unpack16<DTD>(d[k][v], f);
#pragma unroll
                    for (int i = 0; i < (int)EPD; i++) acc[v][i] = fmaf(h, f[i], acc[v][i]);
                }
            }
        }
    };
    /* two batches in flight: each is refilled as soon as it is used */
    load_d(0, da);
    load_d(NB, db);
    __syncthreads(); /* h complete but for the halved units; x no longer needed */
    if (full < nu) { /* their halves' sums */
        if (threadIdx.x < nu - full) {
            const float *ps = hs + a.units + 4 * threadIdx.x; /* gate, up of half 0, then of half 1 */
            hs[full + threadIdx.x] = silu_f(ps[0] + ps[2]) * (ps[1] + ps[3]);
        }
        __syncthreads();
    }
    if (threadIdx.x == 0) kt.mark(1);
    for (uint32_t k0 = 0; gi + G * k0 < nu; k0 += 2 * NB) {
        use_d(k0, da);
        load_d(k0 + 2 * NB, da);
        use_d(k0 + NB, db);
        load_d(k0 + 3 * NB, db);
    }

    /* 3. the groups' sums through shared memory (over x), scaled, into the residual */
    float *part = sm;
    const uint32_t hp = a.down.pitch;
#pragma unroll
    for (int v = 0; v < VPT; v++) {
        const uint32_t vi = t + v * tpr;
        if (vi < nvd) {
#pragma unroll
            for (int i = 0; i < (int)EPD; i += 4)
                *(float4 *)&part[gi * hp + vi * EPD + i] =
                    make_float4(acc[v][i], acc[v][i + 1], acc[v][i + 2], acc[v][i + 3]);
        }
    }
    if (threadIdx.x == 0) { /* every block has read the residual: ours may now be added */
        kt.mark(2);
        while (ld_acquire64(a.count) < target) __nanosleep(64);
    }
    __syncthreads();
    if (threadIdx.x == 0) kt.mark(3);
    const uint32_t hidden = a.down.rows, n4 = (hidden + 3) / 4;
    const bool vec = ((uintptr_t)a.resid & 15) == 0;
    /* each block starts at another column, so that the blocks' atomics spread over L2's lines
     * instead of queueing on the same ones */
    const uint32_t rot = (uint32_t)(((uint64_t)blockIdx.x * 97u) % n4);
    for (uint32_t i = threadIdx.x; i < n4; i += blockDim.x) {
        const uint32_t c = 4 * (i + rot < n4 ? i + rot : i + rot - n4);
        float4 s = *(const float4 *)&part[c];
        for (uint32_t g = 1; g < G; g++) {
            const float4 q = *(const float4 *)&part[g * hp + c];
            s.x += q.x, s.y += q.y, s.z += q.z, s.w += q.w;
        }
        if (DTD == THIN_DTYPE_F8_E4M3 && a.down.scale) {
            const float *sc = a.down.scale + c;
            s.x *= sc[0];
            if (c + 1 < hidden) s.y *= sc[1];
            if (c + 2 < hidden) s.z *= sc[2];
            if (c + 3 < hidden) s.w *= sc[3];
        }
        if (c + 3 < hidden) {
            atomic_add4(a.resid + c, s, vec);
        } else {
            atomicAdd(a.resid + c, s.x);
            if (c + 1 < hidden) atomicAdd(a.resid + c + 1, s.y);
            if (c + 2 < hidden) atomicAdd(a.resid + c + 2, s.z);
        }
    }
    if (threadIdx.x == 0) kt.end(TRACE_MLP | inter << 8, 4);
}

/* The registers' bound by MINB, the blocks per SM they must allow (FP8 gate/up: 24 warps per SM,
 * at most 85 registers a thread, with half load batches, as the pair matvec): half batches below
 * 100 registers a thread. */
template <int DTG, int DTD, int NW, int MINB, int VPT>
__global__ void __launch_bounds__(NW * 32, MINB) mlp_kernel(const mlp_args a) {
    constexpr bool HALF = 65536 / (NW * 32 * MINB) < 100; /* registers a thread */
    mlp_body<DTG, DTD, NW, HALF ? MV_UNROLL / 2 : MV_UNROLL, (HALF ? 4 : 8) / VPT, VPT>(a);
}

/* Slim blocks (BF16 gate/up by default; THIN_CUDA_MLP_SLIM): at most MAXR registers a thread, so
 * that a block of NW warps fits on an SM beside an attention + o block (16 K registers) and
 * starts, requesting its first rows, while that kernel runs: 24 warps at 64 registers with
 * quarter batches, 16 at 96 with half batches. */
template <int DTG, int DTD, int NW, int MAXR, int VPT>
__global__ void THIN_MAXNREG(NW * 32, MAXR) mlp_slim_kernel(const mlp_args a) {
    constexpr int HB = MAXR <= 64 ? MV_UNROLL / 4 : MV_UNROLL / 2;
    constexpr int NB = (MAXR <= 64 ? 2 : 4) / VPT; /* VPT: 1 or 2 */
    mlp_body<DTG, DTD, NW, HB, NB, VPT>(a);
}

cudaError_t mlp_trace_arm(trace_rec *recs, unsigned int *n, unsigned int cap) {
    return trace_arm_here(recs, n, cap);
}

/* Vectors of a transposed down row (hidden elements, padded to 32) the kernel takes: at most two
 * per thread for BF16, one for FP8 (so FP8 rows of up to 4096 elements). */
static uint32_t down_vpt(int down_dtype, uint32_t hidden) {
    const uint32_t nvd = dmat_pitch(hidden) / dtype_vec_elems(down_dtype);
    if (nvd <= 256) return 1;
    if (nvd <= 512 && down_dtype == THIN_DTYPE_BF16) return 2;
    return 0;
}

int mlp_supported(int gate_dtype, int down_dtype, uint32_t hidden, uint32_t inter) {
    const int ok_g = gate_dtype == THIN_DTYPE_BF16 || gate_dtype == THIN_DTYPE_F8_E4M3;
    const int ok_d = down_dtype == THIN_DTYPE_BF16 || down_dtype == THIN_DTYPE_F8_E4M3;
    return ok_g && ok_d && hidden > 0 && inter > 0 && down_vpt(down_dtype, hidden) > 0 &&
           (size_t)dmat_pitch(hidden) * 4 <= 200 * 1024;
}

template <int DTG, int DTD, int NW, int MINB, int VPT, int MAXR = 0>
static cudaError_t launch_m(const mlp_args *in, int n_sm, cudaStream_t st) {
    static_assert(NW * 32 % 256 == 0, "a down row's threads (a power of two up to 256) must tile the block");
    mlp_args a = *in;
    void (*k)(const mlp_args);
    if constexpr (MAXR > 0) k = mlp_slim_kernel<DTG, DTD, NW, MAXR, VPT>;
    else k = mlp_kernel<DTG, DTD, NW, MINB, VPT>;
    const uint32_t inter = a.mv.seg[0].w.rows, dpitch = a.down.pitch;
    const uint32_t nvd = dpitch / vec_of<DTD>::epv;
    const uint32_t per = (nvd + VPT - 1) / VPT;
    uint32_t tpr = 1;
    while (tpr < per) tpr *= 2;
    const uint32_t G = NW * 32 / tpr;
    /* shared memory: x (then the groups' partial sums), then h of the block's units, then the
     * halves' sums (two floats a warp) */
    const uint32_t xfl = a.mv.seg[0].w.pitch > G * dpitch ? a.mv.seg[0].w.pitch : G * dpitch;
    a.tpr = tpr;
    a.h_off = (xfl + 3) / 4 * 4;
    int per_sm = 0;
    /* the occupancy for the largest units per block this launch may use, then the units */
    size_t smem = ((size_t)a.h_off + inter + 2 * NW) * sizeof(float);
    if (smem > 48 * 1024 - 256) {
        cudaError_t e = cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                             (int)(smem < 200 * 1024 ? smem : 200 * 1024));
        if (e != cudaSuccess) return e;
    }
    size_t smem_min = ((size_t)a.h_off + 3 * NW) * sizeof(float);
    cudaError_t e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, k, NW * 32, smem_min);
    if (e != cudaSuccess) return e;
    if (per_sm < 1) return cudaErrorInvalidConfiguration;
    if (thin_cuda_mlp_bps > 0 && thin_cuda_mlp_bps < per_sm) per_sm = thin_cuda_mlp_bps;
    /* All blocks resident at once (the counter wait needs it). BF16 gate/up: as many blocks as
     * fit, so that every SM streams its share (units rounded up to whole warps left SMs idle,
     * measured slower). FP8 gate/up in blocks of 8 warps (three per SM): units for seven of every
     * nine of those slots, fewer blocks with more units each (on the H200 with SmolLM3's 11008
     * units, 36 a block against 28 for every slot: 619.9-622.1 against 606.8-611.9 tokens/s; 32
     * and 40 between, 48 slower, bench/decode-variants.sh). One block per SM: every SM's share. */
    uint32_t cap = (uint32_t)n_sm * (uint32_t)per_sm, units;
    for (;;) {
        const uint32_t use = MINB >= 3 && cap >= 9 ? cap * 7 / 9 : cap;
        units = (inter + use - 1) / use;
        if (thin_cuda_mlp_units > 0) units = (uint32_t)thin_cuda_mlp_units;
        if ((inter + units - 1) / units > cap) units = (inter + cap - 1) / cap;
        smem = ((size_t)a.h_off + units + 2 * NW) * sizeof(float);
        int fit = 0;
        e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&fit, k, NW * 32, smem);
        if (e != cudaSuccess) return e;
        if (fit >= per_sm) break;
        if (fit < 1) return cudaErrorInvalidConfiguration;
        per_sm = fit;
        cap = (uint32_t)n_sm * (uint32_t)per_sm;
    }
    a.units = units; /* smem fits the attribute set above, or no block would have fit */
    if (a.units_only) {
        *a.units_only = units;
        return cudaSuccess;
    }
    const uint32_t blocks = (inter + units - 1) / units;
    return launch_k(k, dim3(blocks), dim3(NW * 32), smem, st, a);
}

/* Warps per block NW, and blocks per SM for the registers: 24 warps per SM for FP8 gate/up, 16 for
 * BF16, in blocks of 8 warps or in one block; with MAXR, one slim block of NW warps within MAXR
 * registers. (NW * 32 must be a multiple of every power of two up to 256, the threads of a down
 * row.) */
template <int DTG, int DTD, int NW, int MAXR = 0>
static cudaError_t launch_dw(const mlp_args *a, int n_sm, cudaStream_t st) {
    constexpr int MINB = MAXR > 0 ? 1 : (DTG == THIN_DTYPE_F8_E4M3 ? 24 : 16) / NW;
    if (down_vpt(DTD, a->down.rows) == 1) return launch_m<DTG, DTD, NW, MINB, 1, MAXR>(a, n_sm, st);
    if constexpr (DTD == THIN_DTYPE_BF16) return launch_m<DTG, DTD, NW, MINB, 2, MAXR>(a, n_sm, st);
    return cudaErrorInvalidValue;
}

template <int DTG, int DTD>
static cudaError_t launch_dd(const mlp_args *a, int n_sm, cudaStream_t st) {
    /* FP8 gate/up: one block of 24 warps per SM. The hardware puts blocks where they fit first,
     * so blocks of 8 warps pile three to an SM on the SMs that the previous kernel left free while
     * others get one or none; one block per SM gives every SM the same share (on the H200 with
     * SmolLM3-3B quality FP8: 642.8 and 639.7 against 620.3 and 619.9 tokens/s in two calls; with
     * the attention + o kernel before it, 627.9 and 628.2 against 661.4 and 663.4). FP8 in 16 warps
     * (full load batches at 128 registers): 615.3 against 641.2.
     * BF16 gate/up: one slim block of 24 warps per SM within 64 registers (mlp_slim_kernel). One
     * block of 16 warps per SM was faster than two of 8 while the o-projection ran before it
     * (511.0 and 511.3 against 505.7 and 508.1 tokens/s); after the attention + o kernel, whose
     * blocks hold 16 K registers of an SM, only a block of 8 warps fit beside one and started,
     * requesting its first rows, while it ran (525.7 and 526.2 against 521.5-522.2 and 520.6-520.9
     * in two calls on the H200). The slim block does both: one a SM, and it fits beside (on an H100
     * with SmolLM3-3B BF16: 420.3, 420.4 and 420.3 against 415.6, 416.1 and 415.9 for the blocks
     * of 8 warps in one call; slim blocks of 16 warps within 96 registers 416.0-416.2; FP8 gate/up
     * slim blocks measured slower, 578.3-579.0 against 582.9-583.3; bench/decode-variants.sh).
     * FP8 gate/up takes the slim block when the q/k/v launch after it takes its rows from shared
     * memory (next_smem): that launch's blocks then start beside it, and the two together gain
     * (an H100 with SmolLM3-3B quality FP8: 594.8 and 594.6 against 583.1 and 582.5 tokens/s,
     * where either alone lost: 565.8 and 578.3-579.0).
     * THIN_CUDA_MLP_WARPS=8: FP8 in blocks of 8 warps, BF16 in the blocks of 8 warps of before;
     * =16: either in 16; =24 (or unset): the 24 warps above for both. THIN_CUDA_MLP_SLIM=24 or 16:
     * either in one slim block of that many warps within 64 or 96 registers; =0: no slim block. */
    const bool warps24 = thin_cuda_mlp_warps == 0 || thin_cuda_mlp_warps == 24;
    const int slim = thin_cuda_mlp_slim >= 0 ? thin_cuda_mlp_slim
                     : warps24 && (DTG == THIN_DTYPE_BF16 || a->next_smem) ? 24 : 0;
    if (slim == 24) return launch_dw<DTG, DTD, 24, 64>(a, n_sm, st);
    if (slim == 16) return launch_dw<DTG, DTD, 16, 96>(a, n_sm, st);
    if constexpr (DTG == THIN_DTYPE_F8_E4M3) {
        if (thin_cuda_mlp_warps == 16) return launch_dw<DTG, DTD, 16>(a, n_sm, st);
        if (thin_cuda_mlp_warps != MV_WARPS) return launch_dw<DTG, DTD, 24>(a, n_sm, st);
    } else {
        if (thin_cuda_mlp_warps == 16) return launch_dw<DTG, DTD, 16>(a, n_sm, st);
    }
    return launch_dw<DTG, DTD, MV_WARPS>(a, n_sm, st);
}

cudaError_t launch_mlp(const mlp_args *in, int n_sm, cudaStream_t st) {
    mlp_args b = *in;
    b.mv.x4 = thin_cuda_mv_x4;
    b.split = thin_cuda_mlp_split;
    const mv_args &m = b.mv;
    if (!b.down.trans || m.seg[0].w.dtype != m.seg[1].w.dtype ||
        !mlp_supported(m.seg[0].w.dtype, b.down.dtype, b.down.rows, m.seg[0].w.rows) ||
        b.down.cols != m.seg[0].w.rows || b.down.rows != m.seg[0].w.cols)
        return cudaErrorInvalidValue;
    const bool g8 = m.seg[0].w.dtype == THIN_DTYPE_F8_E4M3, d8 = b.down.dtype == THIN_DTYPE_F8_E4M3;
    if (g8 && d8) return launch_dd<THIN_DTYPE_F8_E4M3, THIN_DTYPE_F8_E4M3>(&b, n_sm, st);
    if (g8) return launch_dd<THIN_DTYPE_F8_E4M3, THIN_DTYPE_BF16>(&b, n_sm, st);
    if (d8) return launch_dd<THIN_DTYPE_BF16, THIN_DTYPE_F8_E4M3>(&b, n_sm, st);
    return launch_dd<THIN_DTYPE_BF16, THIN_DTYPE_BF16>(&b, n_sm, st);
}

/* ---- transposition of a weight matrix (setup, and the prefill's down projection) ---- */

/* dst (cols rows of pitch dp >= rows) = src (rows x cols, pitch sp) transposed; each dst row's
 * padding [rows, dp) is written as zeros, so a buffer that held another matrix (the prefill's
 * scratch, shared by down projections of different dtypes) leaves nothing in it for the GEMMs,
 * which read whole pitches, to multiply. */
template <typename T>
__global__ void transpose_kernel(T *dst, uint32_t dp, const T *src, uint32_t sp, uint32_t rows,
                                 uint32_t cols) {
    __shared__ T tile[32][33];
    const uint32_t c0 = blockIdx.x * 32, r0 = blockIdx.y * 32;
    for (uint32_t i = threadIdx.y; i < 32; i += 8) {
        const uint32_t r = r0 + i, c = c0 + threadIdx.x;
        if (r < rows && c < cols) tile[i][threadIdx.x] = src[(size_t)r * sp + c];
    }
    __syncthreads();
    for (uint32_t i = threadIdx.y; i < 32; i += 8) {
        const uint32_t c = c0 + i, r = r0 + threadIdx.x;
        if (c < cols && r < dp) dst[(size_t)c * dp + r] = r < rows ? tile[threadIdx.x][i] : T(0);
    }
}

cudaError_t launch_transpose(void *dst, uint32_t dst_pitch, const void *src, uint32_t src_pitch,
                             uint32_t rows, uint32_t cols, size_t esz, cudaStream_t st) {
    if (rows == 0 || cols == 0) return cudaSuccess;
    if (dst_pitch < rows || (dst_pitch + 31) / 32 > 65535) return cudaErrorInvalidValue;
    const dim3 g((cols + 31) / 32, (dst_pitch + 31) / 32), b(32, 8);
    if (esz == 1)
        transpose_kernel<uint8_t><<<g, b, 0, st>>>((uint8_t *)dst, dst_pitch, (const uint8_t *)src,
                                                   src_pitch, rows, cols);
    else if (esz == 2)
        transpose_kernel<uint16_t><<<g, b, 0, st>>>((uint16_t *)dst, dst_pitch, (const uint16_t *)src,
                                                    src_pitch, rows, cols);
    else
        return cudaErrorInvalidValue;
    return cudaGetLastError();
}
