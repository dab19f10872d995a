/*
 * gemm.cu — batched linear for the prompt (prefill): out[i][r] = sum_c W[r][c] x[i][c], i < n.
 *
 * Tensor cores through mma.sync m16n8k16 (BF16 × BF16 → F32, inline PTX). A block of 8 warps
 * computes 128 weight rows × BN tokens (BN = 128, 64, 32 or 16, picked from n and the row count
 * so that the grid fills the SMs), walking the columns in stages of SUB·32 (SUB = 2 for tiles of
 * up to 32 tokens, 1 for 64 and 128; THIN_CUDA_GEMM_SUB=N sets N for every tile size up to 64),
 * so that each weight row is read in longer runs however few the tokens:
 *  - a cp.async pipeline (as many stages as fit, up to 8; 5 for 128-token tiles) brings each
 *    stage's weights (raw BF16 or FP8 bytes, zero-filled past the last row) and activations (raw
 *    F32, zero-filled past n and cols) into shared memory, the weights laid out as SUB sub-stages
 *    of 32 columns; the weights of the first stages are requested before the PDL wait;
 *  - one stage ahead of the math, the block rounds the F32 activations to BF16 and widens FP8
 *    weights to BF16 (exact; the per-row scale is applied in the epilogue) into a double-buffered
 *    BF16 copy; BF16 weights are used from the cp.async stage as they are;
 *  - fragments are 128-bit shared loads: lane (g, q) takes columns 8q..8q+7 of its rows, which
 *    for two k16 steps is a fixed permutation of k applied alike to both operands (a dot product
 *    does not care), so no ldmatrix and no padding: 64-byte rows are read without bank conflicts;
 *  - the epilogue stages the F32 tile in shared memory (rows contiguous, padded) and writes out
 *    (and resid +=) coalesced, bounds-checked on n and rows.
 * The grid runs the token tiles of one row tile next to each other, so that a weight tile comes
 * from DRAM about once and the (smaller) activations stay in L2. One launch may cover up to three
 * weights of the same shape and dtype applied to the same activations (q, k, v; gate, up), their
 * row tiles one after the other along the grid's y.
 * When the tiles leave block slots idle (few rows or tokens), the columns are split over a thread
 * block cluster of 2..8 blocks (sm_90), sized by a model of waves of blocks; the partial tiles are
 * summed through distributed shared memory, in rank order (deterministic), each rank writing a
 * slice of tokens.
 * A transposed weight (the MLP kernel's down projection, dmat.trans) is read as stored: its stage
 * holds 32 rows of the transpose (32 columns of the matrix) × 128 of its columns in rows padded by
 * 16 bytes (FP8: widened into such rows), and the A fragments come through ldmatrix.trans.
 * F32/F16 weights are not rounded: the backend runs them through the matvec per row instead.
 * CPU twin: op_matvec row by row.
 */
#include <string.h>

#include <cooperative_groups.h>

#include "cuda_common.cuh"

namespace cg = cooperative_groups;

#define GM_BM 128    /* weight rows per block */
#define GM_BK 32     /* columns of a sub-stage (the fragments' unit) */
#define GM_THREADS 256
#define GM_MAX_SPLIT 8 /* blocks of a split-column cluster (portable cluster size) */

int thin_cuda_gemm_t = 0;
int thin_cuda_gemm_sub = 0;

/* Shape and shared-memory layout (bytes) of one configuration; TR: the weights stored transposed
 * (dmat.trans: the MLP kernel's down projection), made row-major by the conversion pass; SUB:
 * sub-stages of GM_BK columns per pipeline stage, so that a stage reads SUB·GM_BK contiguous
 * columns of each weight row (long runs of a row at once are what the memory serves fastest; a
 * few tokens do too little arithmetic per byte to hide short scattered ones). */
template <int DT, int BN, bool TR, int SUB> struct gm_cfg {
    static constexpr int ESZ = DT == THIN_DTYPE_BF16 ? 2 : 1;
    static constexpr int BK = GM_BK * SUB;                       /* columns per stage */
    static constexpr int WW = BN == 128 ? 2 : BN == 64 ? 4 : 8; /* warps along weight rows */
    static constexpr int WT = 8 / WW;                            /* warps along tokens */
    static constexpr int MI = GM_BM / WW / 16;                   /* m16 tiles (rows) per warp */
    static constexpr int NI = BN / WT / 8;                       /* n8 tiles (tokens) per warp */
    /* a transposed stage, [GM_BK][TRP] BF16 as ldmatrix reads it (rows 16 bytes longer than
     * GM_BM, so that its eight rows of a matrix fall on different banks) */
    static constexpr int TRP = GM_BM + 8;
    static constexpr int W_RAW = TR && DT == THIN_DTYPE_BF16 ? GM_BK * TRP * 2
                                                             : GM_BM * BK * ESZ; /* stage: weights as stored */
    static constexpr int X_RAW = BN * BK * 4;                    /* stage: activations, F32 */
    static constexpr int STAGE = W_RAW + X_RAW;
    static constexpr int XH = BN * BK * 2;                       /* BF16 activations (×2) */
    static constexpr int WH = DT == THIN_DTYPE_BF16 ? 0 : TR ? GM_BK * TRP * 2 : GM_BM * BK * 2; /* FP8 widened (×2) */
    static constexpr int FIXED = 2 * (XH + WH);
    /* blocks per SM: two where five stages fit beside each other (1 KiB reserved a block) */
    static constexpr int MINB = BN < 128 && (5 * STAGE + FIXED + 1024) * 2 <= 228 * 1024 ? 2 : 1;
    /* cp.async stages (STAGES - 2 ahead of the conversion): as many as fit, up to 8 (a few
     * tokens do little arithmetic per stage, so more weight bytes stay in flight) */
    static constexpr int FIT = ((228 * 1024) / MINB - 1024 - FIXED) / STAGE;
    static constexpr int STAGES = BN >= 128 ? 5 : FIT < 8 ? FIT : 8;
    static constexpr int LDC = GM_BM + 4;                        /* epilogue tile row (floats) */
    static constexpr int SMEM = STAGES * STAGE + FIXED;
    static_assert(MI >= 1 && NI >= 1 && WW * WT == GM_THREADS / 32, "warp layout");
    static_assert(STAGES >= 3 && (!TR || SUB == 1), "stages; transposed weights one sub-stage a stage");
    static_assert((SMEM + 1024) * MINB <= 228 * 1024, "MINB blocks an SM (1 KiB reserved each)");
    static_assert(BN * LDC * 4 <= STAGES * STAGE, "the epilogue tile reuses the pipeline");
};

/* A launch's arguments: up to GM_SEGS weights of the same dtype, layout and columns applied to the
 * same activations (a q, k, v group; gate and up), their row tiles one after the other along the
 * grid's y (segment k's first at tile0[k]). */
#define GM_SEGS 3
struct gm_args {
    dmat w[GM_SEGS];
    float *out[GM_SEGS];
    uint32_t ldo[GM_SEGS];
    uint32_t tile0[GM_SEGS];
    int nseg;
    const float *x;
    uint32_t ldx;
    float *resid; /* with one segment only */
    uint32_t ldr;
    uint32_t n;
    int xvec; /* 16-byte activation copies */
};

__device__ __forceinline__ void ldsm_x4_t(uint32_t (&r)[4], const __nv_bfloat16 *p) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"((uint32_t)__cvta_generic_to_shared(p))
                 : "memory");
}

/* ---- the kernel ---- */

template <int DT, int BN, bool TR, int SUB>
__global__ void __launch_bounds__(GM_THREADS, gm_cfg<DT, BN, TR, SUB>::MINB)
gemm_kernel(const gm_args ga) {
    using C = gm_cfg<DT, BN, TR, SUB>;
    /* this block's segment (selects, not an indexed parameter: no local copy) */
    const uint32_t y = blockIdx.y;
    const int sg = (ga.nseg > 1 && y >= ga.tile0[1]) + (ga.nseg > 2 && y >= ga.tile0[2]);
    const dmat w = sg == 0 ? ga.w[0] : sg == 1 ? ga.w[1] : ga.w[2];
    float *const out = sg == 0 ? ga.out[0] : sg == 1 ? ga.out[1] : ga.out[2];
    const uint32_t ldo = sg == 0 ? ga.ldo[0] : sg == 1 ? ga.ldo[1] : ga.ldo[2];
    const uint32_t tile = y - (sg == 0 ? 0u : sg == 1 ? ga.tile0[1] : ga.tile0[2]);
    const float *const x = ga.x;
    const uint32_t ldx = ga.ldx, ldr = ga.ldr, n = ga.n;
    float *const resid = ga.resid;
    const int xvec = ga.xvec;
    extern __shared__ __align__(16) uint8_t gm_smem[];
    /* [STAGES] × {W raw [SUB][GM_BM][GM_BK] (TR: [GM_BK][GM_BM]), X F32 [BN][BK]}, X BF16
     * [2][SUB][BN][GM_BK], FP8 or TR only: W BF16 [2][SUB][GM_BM][GM_BK]; the epilogue's F32 tile
     * [BN][LDC] over the stages. */
    uint8_t *pipe = gm_smem;
    __nv_bfloat16 *xh = (__nv_bfloat16 *)(gm_smem + C::STAGES * C::STAGE);
    __nv_bfloat16 *wh = (__nv_bfloat16 *)(gm_smem + C::STAGES * C::STAGE + 2 * C::XH);

    const uint32_t tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const uint32_t g = lane >> 2, q = lane & 3; /* mma fragment row group, column pair */
    const uint32_t t0 = blockIdx.x * BN, r0 = tile * GM_BM; /* token tiles of a row tile adjacent */
    const uint32_t wr0 = (warp % C::WW) * (GM_BM / C::WW), wt0 = (warp / C::WW) * (BN / C::WT);
    /* this block's column stages: [kb, kb + cnt) of nk (its share of a split cluster) */
    const uint32_t nk = (TR ? w.cols + GM_BK - 1 : w.pitch) / C::BK, ks = gridDim.z;
    const uint32_t kb = (uint32_t)((uint64_t)blockIdx.z * nk / ks);
    const uint32_t cnt = (uint32_t)((uint64_t)(blockIdx.z + 1) * nk / ks) - kb;

    auto load_w = [&](uint32_t slot, uint32_t kc) { /* weights of stage kc into slot */
        uint8_t *dst = pipe + slot * C::STAGE;
        if constexpr (TR) { /* columns kc·GM_BK.. of the matrix are rows of the stored transpose */
            constexpr uint32_t CPK = GM_BM * C::ESZ / 16, EPP = 16 / C::ESZ; /* pieces a row, elements a piece */
            for (uint32_t i = tid; i < GM_BK * CPK; i += GM_THREADS) {
                const uint32_t kr = i / CPK, k = kc * GM_BK + kr, r = r0 + (i % CPK) * EPP;
                const bool ok = k < w.cols && r < w.pitch; /* rows past w.rows up to pitch are zeros */
                const uint8_t *src = (const uint8_t *)w.data;
                if (ok) src += ((size_t)k * w.pitch + r) * C::ESZ;
                /* BF16: straight into the padded rows; FP8: packed, widened into them later */
                const uint32_t d = DT == THIN_DTYPE_BF16 ? kr * C::TRP * 2 + (i % CPK) * 16 : i * 16;
                gm_cp16(dst + d, src, ok ? 16 : 0);
            }
            return;
        }
        /* 16-byte pieces per row of a stage and of a sub-stage; consecutive threads take
         * consecutive pieces of a row, each put in its sub-stage */
        constexpr uint32_t CPR = C::BK * C::ESZ / 16, CPS = GM_BK * C::ESZ / 16;
        for (uint32_t i = tid; i < GM_BM * CPR; i += GM_THREADS) {
            const uint32_t rr = i / CPR, pc = i % CPR, r = r0 + rr;
            const bool ok = r < w.rows;
            const uint8_t *src = (const uint8_t *)w.data;
            if (ok) src += ((size_t)r * w.pitch + (size_t)kc * C::BK) * C::ESZ + pc * 16;
            gm_cp16(dst + (((pc / CPS) * GM_BM + rr) * CPS + pc % CPS) * 16, src, ok ? 16 : 0);
        }
    };
    auto load_x = [&](uint32_t slot, uint32_t kc) { /* activations of stage kc into slot */
        float *dst = (float *)(pipe + slot * C::STAGE + C::W_RAW);
        for (uint32_t i = tid; i < BN * C::BK / 4; i += GM_THREADS) {
            const uint32_t t = t0 + i / (C::BK / 4), c = kc * C::BK + (i % (C::BK / 4)) * 4;
            const uint32_t left = t < n && c < w.cols ? min(w.cols - c, 4u) : 0; /* valid floats */
            const float *src = left ? x + (size_t)t * ldx + c : x;
            if (xvec) {
                gm_cp16(dst + i * 4, src, left * 4);
            } else {
#pragma unroll
                for (uint32_t j = 0; j < 4; j++) gm_cp4(dst + i * 4 + j, j < left ? src + j : x, j < left ? 4 : 0);
            }
        }
    };
    auto convert = [&](uint32_t slot, uint32_t buf) { /* stage in slot → BF16 buffer buf */
        const float4 *xs = (const float4 *)(pipe + slot * C::STAGE + C::W_RAW);
        uint2 *xd = (uint2 *)(xh + buf * BN * C::BK);
        for (uint32_t i = tid; i < BN * C::BK / 4; i += GM_THREADS) { /* [BN][BK] → [SUB][BN][GM_BK] */
            const float4 v = xs[i];
            const uint32_t t = i / (C::BK / 4), c4 = i % (C::BK / 4);
            xd[((c4 / (GM_BK / 4)) * BN + t) * (GM_BK / 4) + c4 % (GM_BK / 4)] =
                make_uint2(bf16x2(v.x, v.y), bf16x2(v.z, v.w));
        }
        if constexpr (TR && DT == THIN_DTYPE_F8_E4M3) { /* [k][r] FP8 → [k][TRP] BF16 */
            const uint2 *ws = (const uint2 *)(pipe + slot * C::STAGE);
            __nv_bfloat16 *wd = wh + buf * GM_BK * C::TRP;
            for (uint32_t i = tid; i < GM_BK * GM_BM / 8; i += GM_THREADS) {
                const uint2 v = ws[i];
                *(uint4 *)(wd + (i / (GM_BM / 8)) * C::TRP + (i % (GM_BM / 8)) * 8) =
                    make_uint4(fp8x2_bf16x2(v.x), fp8x2_bf16x2(v.x >> 16), fp8x2_bf16x2(v.y), fp8x2_bf16x2(v.y >> 16));
            }
        } else if constexpr (DT == THIN_DTYPE_F8_E4M3) {
            const uint2 *ws = (const uint2 *)(pipe + slot * C::STAGE); /* the same [SUB][GM_BM][GM_BK] order */
            uint4 *wd = (uint4 *)(wh + buf * GM_BM * C::BK);
            for (uint32_t i = tid; i < GM_BM * C::BK / 8; i += GM_THREADS) {
                const uint2 v = ws[i];
                wd[i] = make_uint4(fp8x2_bf16x2(v.x), fp8x2_bf16x2(v.x >> 16), fp8x2_bf16x2(v.y),
                                   fp8x2_bf16x2(v.y >> 16));
            }
        }
    };

    float acc[C::MI][C::NI][4];
#pragma unroll
    for (int mi = 0; mi < C::MI; mi++)
#pragma unroll
        for (int ni = 0; ni < C::NI; ni++)
#pragma unroll
            for (int j = 0; j < 4; j++) acc[mi][ni][j] = 0.0f;

    pdl_trigger();
    for (uint32_t s = 0; s < C::STAGES - 1; s++) /* weights only: before the wait */
        if (s < cnt) load_w(s, kb + s);
    pdl_wait();
    for (uint32_t s = 0; s < C::STAGES - 1; s++) { /* group s: stage s (group 0: all weights) */
        if (s < cnt) load_x(s, kb + s);
        gm_commit();
    }
    if (cnt) {
        gm_wait<C::STAGES - 2>(); /* group 0 */
        __syncthreads();
        convert(0, 0);
    }

    for (uint32_t it = 0; it < cnt; it++) {
        /* groups 0..it+1 done (stage it+1 landed); after the barrier every warp is past
         * iteration it - 1, so its stage slot and BF16 buffer may be refilled */
        gm_wait<C::STAGES - 3>();
        __syncthreads();
        const uint32_t nx = it + C::STAGES - 1;
        if (nx < cnt) {
            load_w(nx % C::STAGES, kb + nx);
            load_x(nx % C::STAGES, kb + nx);
        }
        gm_commit();
        if (it + 1 < cnt) convert((it + 1) % C::STAGES, (it + 1) & 1);

        const uint32_t buf = it & 1;
        if constexpr (TR) { /* the stage is [k][TRP]: A through ldmatrix.trans, k in mma order */
            const __nv_bfloat16 *ts = DT == THIN_DTYPE_BF16
                                          ? (const __nv_bfloat16 *)(pipe + (it % C::STAGES) * C::STAGE)
                                          : wh + buf * GM_BK * C::TRP;
            const __nv_bfloat16 *xs = xh + buf * BN * GM_BK;
#pragma unroll
            for (int kk = 0; kk < GM_BK; kk += 16) {
                /* lane l addresses row l % 8 of matrix l / 8: (k, m) offsets (0, 0), (0, 8), (8, 0), (8, 8) */
                uint32_t a[C::MI][4], b[C::NI][2];
#pragma unroll
                for (int mi = 0; mi < C::MI; mi++)
                    ldsm_x4_t(a[mi], ts + (kk + (lane & 7) + ((lane >> 4) & 1) * 8) * C::TRP + wr0 + mi * 16 +
                                         ((lane >> 3) & 1) * 8);
#pragma unroll
                for (int ni = 0; ni < C::NI; ni++) {
                    const __nv_bfloat16 *xr = xs + (wt0 + ni * 8 + g) * GM_BK + kk + 2 * q;
                    b[ni][0] = *(const uint32_t *)xr;
                    b[ni][1] = *(const uint32_t *)(xr + 8);
                }
#pragma unroll
                for (int mi = 0; mi < C::MI; mi++)
#pragma unroll
                    for (int ni = 0; ni < C::NI; ni++)
                        gm_mma(acc[mi][ni], a[mi][0], a[mi][1], a[mi][2], a[mi][3], b[ni][0], b[ni][1]);
            }
        } else {
#pragma unroll
        for (int sb = 0; sb < SUB; sb++) {
        const __nv_bfloat16 *ws = (DT == THIN_DTYPE_BF16
                                       ? (const __nv_bfloat16 *)(pipe + (it % C::STAGES) * C::STAGE)
                                       : wh + buf * GM_BM * C::BK) + sb * GM_BM * GM_BK;
        const __nv_bfloat16 *xs = xh + buf * BN * C::BK + sb * BN * GM_BK;
        /* lane (g, q): columns 8q..8q+7 of rows g (and g + 8); k16 step 0 takes 8q..8q+3,
         * step 1 8q+4..8q+7, in the mma's column pairs (2q, 2q+1) and (2q+8, 2q+9) */
        uint4 a[C::MI][2], b[C::NI];
#pragma unroll
        for (int mi = 0; mi < C::MI; mi++)
#pragma unroll
            for (int h = 0; h < 2; h++)
                a[mi][h] = *(const uint4 *)(ws + (wr0 + mi * 16 + h * 8 + g) * GM_BK + q * 8);
#pragma unroll
        for (int ni = 0; ni < C::NI; ni++) b[ni] = *(const uint4 *)(xs + (wt0 + ni * 8 + g) * GM_BK + q * 8);
#pragma unroll
        for (int mi = 0; mi < C::MI; mi++)
#pragma unroll
            for (int ni = 0; ni < C::NI; ni++) {
                gm_mma(acc[mi][ni], a[mi][0].x, a[mi][1].x, a[mi][0].y, a[mi][1].y, b[ni].x, b[ni].y);
                gm_mma(acc[mi][ni], a[mi][0].z, a[mi][1].z, a[mi][0].w, a[mi][1].w, b[ni].z, b[ni].w);
            }
        }
        }
    }

    /* epilogue: the tile as F32 [token][row] over the pipeline (all of it drained) */
    gm_wait<0>();
    __syncthreads();
    float *cs = (float *)gm_smem;
#pragma unroll
    for (int mi = 0; mi < C::MI; mi++)
#pragma unroll
        for (int ni = 0; ni < C::NI; ni++) {
            const uint32_t r = wr0 + mi * 16 + g, t = wt0 + ni * 8 + 2 * q;
            cs[t * C::LDC + r] = acc[mi][ni][0];
            cs[(t + 1) * C::LDC + r] = acc[mi][ni][1];
            cs[t * C::LDC + r + 8] = acc[mi][ni][2];
            cs[(t + 1) * C::LDC + r + 8] = acc[mi][ni][3];
        }
    uint32_t tb = 0, te = BN; /* tokens of the tile this block writes */
    if (ks > 1) {
        cg::cluster_group cl = cg::this_cluster();
        cl.sync();
        const uint32_t rank = cl.block_rank();
        tb = rank * BN / ks;
        te = (rank + 1) * BN / ks;
    } else {
        __syncthreads();
    }
    for (uint32_t e = tid; e < (te - tb) * GM_BM; e += GM_THREADS) {
        const uint32_t t = tb + e / GM_BM, r = e % GM_BM;
        const uint32_t i = t0 + t, row = r0 + r;
        if (i >= n || row >= w.rows) continue;
        float v;
        if (ks > 1) {
            cg::cluster_group cl = cg::this_cluster();
            v = 0.0f;
            for (uint32_t k = 0; k < ks; k++) v += cl.map_shared_rank(cs, k)[t * C::LDC + r];
        } else {
            v = cs[t * C::LDC + r];
        }
        if (DT == THIN_DTYPE_F8_E4M3 && w.scale) v *= w.scale[row];
        out[(size_t)i * ldo + row] = v;
        if (resid) resid[(size_t)i * ldr + row] += v;
    }
    if (ks > 1) cg::this_cluster().sync(); /* the others' tiles are read until here */
}

/* ---- launch ---- */

/* Splits the columns of each row tile over a cluster of ks blocks (up to 8) when that spreads the
 * work better over the block slots (MINB an SM): weight streaming needs every slot's bytes in
 * flight. The time is taken as waves of blocks, ceil(tiles·ks / slots), each 1/ks of a tile's work;
 * a split must gain 5% over the next smaller one and leave each block 8+ sub-stages in 2+ stages. */
static uint32_t split_of(uint32_t tiles, uint32_t slots, uint32_t nk, uint32_t sub) {
    uint32_t best = 1;
    double best_t = (double)((tiles + slots - 1) / slots);
    for (uint32_t ks = 2; thin_cuda_cluster && ks <= GM_MAX_SPLIT; ks++) {
        if (nk / ks < 8 || nk / sub / ks < 2) break;
        const double t = (double)((tiles * ks + slots - 1) / slots) / ks;
        if (t < 0.95 * best_t) best = ks, best_t = t;
    }
    return best;
}

template <int DT, int BN, bool TR, int SUB>
static cudaError_t launch_t(const gm_args &a, uint32_t row_tiles, int n_sm, cudaStream_t st) {
    using C = gm_cfg<DT, BN, TR, SUB>;
    constexpr int smem = C::SMEM;
    const cudaError_t ea = smem_attr(gemm_kernel<DT, BN, TR, SUB>, smem, 0);
    if (ea != cudaSuccess) return ea;
    const uint32_t tiles = row_tiles * ((a.n + BN - 1) / BN);
    const uint32_t nk = (TR ? dmat_pitch(a.w[0].cols) : a.w[0].pitch) / GM_BK; /* sub-stages */
    const uint32_t ks = split_of(tiles, (uint32_t)n_sm * C::MINB, nk, SUB);
    const dim3 grid((a.n + BN - 1) / BN, row_tiles, ks);
    return launch_kc(gemm_kernel<DT, BN, TR, SUB>, grid, dim3(GM_THREADS), smem, st,
                     ks > 1 ? dim3(1, 1, ks) : dim3(0, 0, 0), a);
}

/* The configuration for bn tokens a tile and sub sub-stages a stage (1, 2 or 4; fewer for 64- and
 * 128-token tiles, whose stages would not fit). */
template <int DT, bool TR>
static cudaError_t launch_dt(const gm_args &a, uint32_t row_tiles, uint32_t bn, uint32_t sub, int n_sm,
                             cudaStream_t st) {
#define GM_L(BN, SUB) launch_t<DT, BN, TR, TR ? 1 : SUB>(a, row_tiles, n_sm, st)
    switch (bn) {
    case 128: return GM_L(128, 1);
    case 64: return sub >= 2 ? GM_L(64, 2) : GM_L(64, 1);
    case 32: return sub >= 4 ? GM_L(32, 4) : sub >= 2 ? GM_L(32, 2) : GM_L(32, 1);
    default: return sub >= 4 ? GM_L(16, 4) : sub >= 2 ? GM_L(16, 2) : GM_L(16, 1);
    }
#undef GM_L
}

int gemm_segs_fit(const dmat *const *w, int nseg) {
    if (nseg < 1 || nseg > GM_SEGS) return 0;
    for (int k = 0; k < nseg; k++) {
        const dmat *wk = w[k];
        if (wk->pitch % GM_BK != 0) return 0;
        if (wk->dtype != THIN_DTYPE_BF16 && wk->dtype != THIN_DTYPE_F8_E4M3) return 0;
        if (k > 0 && (wk->dtype != w[0]->dtype || wk->trans != w[0]->trans || wk->cols != w[0]->cols ||
                      wk->pitch != w[0]->pitch))
            return 0;
    }
    return 1;
}

cudaError_t launch_gemm_segs(const dmat *const *w, float *const *out, const uint32_t *ldo, int nseg,
                             const float *x, uint32_t ldx, float *resid, uint32_t ldr, uint32_t n, int n_sm,
                             cudaStream_t st) {
    if (!gemm_segs_fit(w, nseg) || (nseg > 1 && resid)) return cudaErrorInvalidValue;
    gm_args a;
    memset(&a, 0, sizeof a);
    uint32_t row_tiles = 0;
    for (int k = 0; k < nseg; k++) {
        const dmat *wk = w[k];
        a.w[k] = *wk;
        a.out[k] = out[k];
        a.ldo[k] = ldo[k];
        a.tile0[k] = row_tiles;
        row_tiles += (wk->rows + GM_BM - 1) / GM_BM;
    }
    a.nseg = nseg;
    a.x = x;
    a.ldx = ldx;
    a.resid = resid;
    a.ldr = ldr;
    a.n = n;
    a.xvec = (uintptr_t)x % 16 == 0 && ldx % 4 == 0;
    if (n == 0 || row_tiles == 0) return cudaSuccess;
    if (n_sm < 1) n_sm = 1;
    /* tokens per tile: the fewest 16·2^k covering n up to 64; above, 128 when that still gives a
     * tile per SM, else 64 */
    uint32_t bn = 128;
    while (bn > 16 && (n <= bn / 2 || (bn > 64 && row_tiles * ((n + bn - 1) / bn) < (uint32_t)n_sm))) bn /= 2;
    /* sub-stages a stage: thin_cuda_gemm_sub (by default 2 for tiles of up to 32 tokens, 1 above;
     * at 16 tokens 2 measured faster than 1 and 4, at 128 tokens in tiles of 64, 1 than 2 and 4),
     * halved until it divides the row */
    const dmat *w0 = w[0];
    const int gs = thin_cuda_gemm_sub > 0 ? thin_cuda_gemm_sub : bn <= 32 ? 2 : 1;
    uint32_t sub = gs >= 4 ? 4 : gs >= 2 ? 2 : 1;
    while (sub > 1 && (w0->trans || w0->pitch % (GM_BK * sub) != 0)) sub /= 2;
    if (w0->trans) {
        if (w0->dtype == THIN_DTYPE_BF16) return launch_dt<THIN_DTYPE_BF16, true>(a, row_tiles, bn, 1, n_sm, st);
        return launch_dt<THIN_DTYPE_F8_E4M3, true>(a, row_tiles, bn, 1, n_sm, st);
    }
    if (w0->dtype == THIN_DTYPE_BF16) return launch_dt<THIN_DTYPE_BF16, false>(a, row_tiles, bn, sub, n_sm, st);
    return launch_dt<THIN_DTYPE_F8_E4M3, false>(a, row_tiles, bn, sub, n_sm, st);
}

cudaError_t launch_gemm(const dmat *w, const float *x, uint32_t ldx, float *out, uint32_t ldo,
                        float *resid, uint32_t ldr, uint32_t n, int n_sm, cudaStream_t st) {
    return launch_gemm_segs(&w, &out, &ldo, 1, x, ldx, resid, ldr, n, n_sm, st);
}
