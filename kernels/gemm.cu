/*
 * gemm.cu — batched linear for the prompt (prefill): out[i][r] = sum_c W[r][c] x[i][c], i < n.
 *
 * Tensor cores through mma.sync m16n8k16 (BF16 × BF16 → F32, inline PTX). A block of 8 warps
 * computes 128 weight rows × BN tokens (BN = 128, 64, 32 or 16, picked from n and the row count
 * so that the grid fills the SMs), walking the columns in 32-wide stages:
 *  - a cp.async pipeline (5 stages; 7 and 8 for 32- and 16-token tiles) brings each stage's
 *    weights (raw BF16 or FP8 bytes, zero-filled past the last row) and activations (raw F32,
 *    zero-filled past n and cols) into shared memory; the weights of the first stages are
 *    requested before the PDL wait;
 *  - one stage ahead of the math, the block rounds the F32 activations to BF16 (as before) and
 *    widens FP8 weights to BF16 (exact; the per-row scale is applied in the epilogue) into a
 *    double-buffered BF16 copy; BF16 weights are used from the cp.async stage as they are;
 *  - fragments are 128-bit shared loads: lane (g, q) takes columns 8q..8q+7 of its rows, which
 *    for two k16 steps is a fixed permutation of k applied alike to both operands (a dot product
 *    does not care), so no ldmatrix and no padding: 64-byte rows are read without bank conflicts;
 *  - the epilogue stages the F32 tile in shared memory (rows contiguous, padded) and writes out
 *    (and resid +=) coalesced, bounds-checked on n and rows.
 * The grid runs the token tiles of one row tile next to each other, so that a weight tile comes
 * from DRAM about once and the (smaller) activations stay in L2.
 * When even the smallest sensible tiles leave most SMs idle (few rows or tokens), the columns are
 * split over a thread block cluster of 2..8 blocks (sm_90); the partial tiles are summed through
 * distributed shared memory, in rank order (deterministic), each rank writing a slice of tokens.
 * A transposed weight (the MLP kernel's down projection, dmat.trans) is read as stored: its stage
 * holds 32 rows of the transpose (32 columns of the matrix) × 128 of its columns, and the
 * conversion pass writes it row-major into the BF16 copy (widening FP8), so the math is the same.
 * F32/F16 weights are not rounded: the backend runs them through the matvec per row instead.
 * CPU twin: op_matvec row by row.
 */
#include <cooperative_groups.h>

#include "cuda_common.cuh"

namespace cg = cooperative_groups;

#define GM_BM 128    /* weight rows per block */
#define GM_BK 32     /* columns per pipeline stage */
#define GM_THREADS 256
#define GM_MAX_SPLIT 8 /* blocks of a split-column cluster (portable cluster size) */

/* Blocks per SM that a configuration of bn tokens a tile is sized for (its launch bounds and
 * shared memory), and so the block slots its grid has to fill. */
__host__ __device__ constexpr int gm_minb(int bn) { return bn >= 128 ? 1 : 2; }

int thin_cuda_gemm_t = 0;

/* Shape and shared-memory layout (bytes) of one configuration; TR: the weights stored transposed
 * (dmat.trans: the MLP kernel's down projection), made row-major by the conversion pass. */
template <int DT, int BN, bool TR> struct gm_cfg {
    static constexpr int ESZ = DT == THIN_DTYPE_BF16 ? 2 : 1;
    static constexpr int WW = BN == 128 ? 2 : BN == 64 ? 4 : 8; /* warps along weight rows */
    static constexpr int WT = 8 / WW;                            /* warps along tokens */
    static constexpr int MI = GM_BM / WW / 16;                   /* m16 tiles (rows) per warp */
    static constexpr int NI = BN / WT / 8;                       /* n8 tiles (tokens) per warp */
    static constexpr int W_RAW = GM_BM * GM_BK * ESZ;            /* stage: weights as stored */
    static constexpr int X_RAW = BN * GM_BK * 4;                 /* stage: activations, F32 */
    static constexpr int STAGE = W_RAW + X_RAW;
    /* cp.async stages (STAGES - 2 ahead of the conversion): a few tokens do little arithmetic per
     * stage, so a block keeps more weight bytes in flight (two blocks an SM still fit) */
    static constexpr int STAGES = BN == 16 ? 8 : BN == 32 ? 7 : 5;
    static constexpr int XH = BN * GM_BK * 2;                    /* BF16 activations (×2) */
    static constexpr int WH = DT == THIN_DTYPE_BF16 && !TR ? 0 : GM_BM * GM_BK * 2; /* BF16 W (×2) */
    static constexpr int LDC = GM_BM + 4;                        /* epilogue tile row (floats) */
    static constexpr int SMEM = STAGES * STAGE + 2 * (XH + WH);
    static constexpr int MINB = gm_minb(BN);                     /* blocks per SM to allow for */
    static_assert(MI >= 1 && NI >= 1 && WW * WT == GM_THREADS / 32, "warp layout");
    static_assert((SMEM + 1024) * MINB <= 228 * 1024, "MINB blocks an SM (1 KiB reserved each)");
    static_assert(BN * LDC * 4 <= STAGES * STAGE, "the epilogue tile reuses the pipeline");
};

/* ---- the kernel ---- */

template <int DT, int BN, bool TR>
__global__ void __launch_bounds__(GM_THREADS, gm_cfg<DT, BN, TR>::MINB)
gemm_kernel(const dmat w, const float *x, uint32_t ldx, float *out, uint32_t ldo, float *resid,
            uint32_t ldr, uint32_t n, int xvec) {
    using C = gm_cfg<DT, BN, TR>;
    extern __shared__ __align__(16) uint8_t gm_smem[];
    /* [STAGES] × {W raw [GM_BM][GM_BK] (TR: [GM_BK][GM_BM]), X F32 [BN][GM_BK]}, X BF16
     * [2][BN][GM_BK], FP8 or TR only: W BF16 [2][GM_BM][GM_BK]; the epilogue's F32 tile [BN][LDC]
     * over the stages. */
    uint8_t *pipe = gm_smem;
    __nv_bfloat16 *xh = (__nv_bfloat16 *)(gm_smem + C::STAGES * C::STAGE);
    __nv_bfloat16 *wh = (__nv_bfloat16 *)(gm_smem + C::STAGES * C::STAGE + 2 * C::XH);

    const uint32_t tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const uint32_t g = lane >> 2, q = lane & 3; /* mma fragment row group, column pair */
    const uint32_t t0 = blockIdx.x * BN, r0 = blockIdx.y * GM_BM; /* token tiles of a row tile adjacent */
    const uint32_t wr0 = (warp % C::WW) * (GM_BM / C::WW), wt0 = (warp / C::WW) * (BN / C::WT);
    /* this block's column stages: [kb, kb + cnt) of nk (its share of a split cluster) */
    const uint32_t nk = (TR ? w.cols + GM_BK - 1 : w.pitch) / GM_BK, ks = gridDim.z;
    const uint32_t kb = (uint32_t)((uint64_t)blockIdx.z * nk / ks);
    const uint32_t cnt = (uint32_t)((uint64_t)(blockIdx.z + 1) * nk / ks) - kb;

    auto load_w = [&](uint32_t slot, uint32_t kc) { /* weights of stage kc into slot */
        uint8_t *dst = pipe + slot * C::STAGE;
        if constexpr (TR) { /* columns kc·GM_BK.. of the matrix are rows of the stored transpose */
            constexpr uint32_t CPK = GM_BM * C::ESZ / 16, EPP = 16 / C::ESZ; /* pieces a row, elements a piece */
            for (uint32_t i = tid; i < GM_BK * CPK; i += GM_THREADS) {
                const uint32_t k = kc * GM_BK + i / CPK, r = r0 + (i % CPK) * EPP;
                const bool ok = k < w.cols && r < w.pitch; /* rows past w.rows up to pitch are zeros */
                const uint8_t *src = (const uint8_t *)w.data;
                if (ok) src += ((size_t)k * w.pitch + r) * C::ESZ;
                gm_cp16(dst + i * 16, src, ok ? 16 : 0);
            }
            return;
        }
        constexpr uint32_t CPR = GM_BK * C::ESZ / 16; /* 16-byte pieces per row */
        for (uint32_t i = tid; i < GM_BM * CPR; i += GM_THREADS) {
            const uint32_t r = r0 + i / CPR;
            const bool ok = r < w.rows;
            const uint8_t *src = (const uint8_t *)w.data;
            if (ok) src += ((size_t)r * w.pitch + (size_t)kc * GM_BK) * C::ESZ + (i % CPR) * 16;
            gm_cp16(dst + i * 16, src, ok ? 16 : 0);
        }
    };
    auto load_x = [&](uint32_t slot, uint32_t kc) { /* activations of stage kc into slot */
        float *dst = (float *)(pipe + slot * C::STAGE + C::W_RAW);
        for (uint32_t i = tid; i < BN * GM_BK / 4; i += GM_THREADS) {
            const uint32_t t = t0 + i / (GM_BK / 4), c = kc * GM_BK + (i % (GM_BK / 4)) * 4;
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
        uint2 *xd = (uint2 *)(xh + buf * BN * GM_BK);
        for (uint32_t i = tid; i < BN * GM_BK / 4; i += GM_THREADS) {
            const float4 v = xs[i];
            xd[i] = make_uint2(bf16x2(v.x, v.y), bf16x2(v.z, v.w));
        }
        if constexpr (TR) { /* [k][r] → [r][k], FP8 widened: eight k of one row a store */
            const uint8_t *ws = pipe + slot * C::STAGE;
            uint4 *wd = (uint4 *)(wh + buf * GM_BM * GM_BK);
            for (uint32_t i = tid; i < GM_BM * GM_BK / 8; i += GM_THREADS) {
                const uint32_t r = i % GM_BM, k8 = i / GM_BM;
                uint32_t p[4];
#pragma unroll
                for (int j = 0; j < 4; j++) {
                    const uint32_t k = k8 * 8 + 2 * j;
                    if constexpr (DT == THIN_DTYPE_BF16) {
                        const uint16_t *e = (const uint16_t *)ws;
                        p[j] = (uint32_t)e[k * GM_BM + r] | (uint32_t)e[(k + 1) * GM_BM + r] << 16;
                    } else {
                        p[j] = fp8x2_bf16x2((uint32_t)ws[k * GM_BM + r] | (uint32_t)ws[(k + 1) * GM_BM + r] << 8);
                    }
                }
                wd[r * (GM_BK / 8) + k8] = make_uint4(p[0], p[1], p[2], p[3]);
            }
        } else if constexpr (DT == THIN_DTYPE_F8_E4M3) {
            const uint2 *ws = (const uint2 *)(pipe + slot * C::STAGE);
            uint4 *wd = (uint4 *)(wh + buf * GM_BM * GM_BK);
            for (uint32_t i = tid; i < GM_BM * GM_BK / 8; i += GM_THREADS) {
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
        const __nv_bfloat16 *ws = DT == THIN_DTYPE_BF16 && !TR
                                      ? (const __nv_bfloat16 *)(pipe + (it % C::STAGES) * C::STAGE)
                                      : wh + buf * GM_BM * GM_BK;
        const __nv_bfloat16 *xs = xh + buf * BN * GM_BK;
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

template <int DT, int BN, bool TR>
static cudaError_t launch_t(const dmat *w, const float *x, uint32_t ldx, float *out, uint32_t ldo,
                            float *resid, uint32_t ldr, uint32_t n, uint32_t ks, cudaStream_t st) {
    constexpr int smem = gm_cfg<DT, BN, TR>::SMEM;
    const cudaError_t ea = smem_attr(gemm_kernel<DT, BN, TR>, smem, 0);
    if (ea != cudaSuccess) return ea;
    const int xvec = (uintptr_t)x % 16 == 0 && ldx % 4 == 0; /* 16-byte activation copies */
    const dim3 grid((n + BN - 1) / BN, (w->rows + GM_BM - 1) / GM_BM, ks);
    if (ks > 1)
        return launch_kc(gemm_kernel<DT, BN, TR>, grid, dim3(GM_THREADS), smem, st, dim3(1, 1, ks), *w, x,
                         ldx, out, ldo, resid, ldr, n, xvec);
    return launch_k(gemm_kernel<DT, BN, TR>, grid, dim3(GM_THREADS), smem, st, *w, x, ldx, out, ldo, resid,
                    ldr, n, xvec);
}

template <int DT, bool TR>
static cudaError_t launch_dt(const dmat *w, const float *x, uint32_t ldx, float *out, uint32_t ldo,
                             float *resid, uint32_t ldr, uint32_t n, uint32_t bn, uint32_t ks, cudaStream_t st) {
    switch (bn) {
    case 128: return launch_t<DT, 128, TR>(w, x, ldx, out, ldo, resid, ldr, n, ks, st);
    case 64: return launch_t<DT, 64, TR>(w, x, ldx, out, ldo, resid, ldr, n, ks, st);
    case 32: return launch_t<DT, 32, TR>(w, x, ldx, out, ldo, resid, ldr, n, ks, st);
    default: return launch_t<DT, 16, TR>(w, x, ldx, out, ldo, resid, ldr, n, ks, st);
    }
}

cudaError_t launch_gemm(const dmat *w, const float *x, uint32_t ldx, float *out, uint32_t ldo,
                        float *resid, uint32_t ldr, uint32_t n, int n_sm, cudaStream_t st) {
    if (w->pitch % GM_BK != 0) return cudaErrorInvalidValue;
    if (w->dtype != THIN_DTYPE_BF16 && w->dtype != THIN_DTYPE_F8_E4M3) return cudaErrorInvalidValue;
    if (n == 0 || w->rows == 0) return cudaSuccess;
    if (n_sm < 1) n_sm = 1;
    /* tokens per tile: the fewest 16·2^k covering n up to 64; above, 128 when that still gives a
     * tile per SM, else 64 */
    const uint32_t row_tiles = (w->rows + GM_BM - 1) / GM_BM;
    uint32_t bn = 128;
    while (bn > 16 && (n <= bn / 2 || (bn > 64 && row_tiles * ((n + bn - 1) / bn) < (uint32_t)n_sm))) bn /= 2;
    /* a grid that leaves block slots empty (one an SM for 128-token tiles, two for the smaller):
     * split the columns over a cluster of up to 8 blocks, as many as fill the slots, keeping 8+
     * stages per block; weight streaming needs the bytes in flight of every slot */
    const uint32_t tiles = row_tiles * ((n + bn - 1) / bn);
    const uint32_t nk = (w->trans ? dmat_pitch(w->cols) : w->pitch) / GM_BK; /* column stages */
    const uint32_t slots = (uint32_t)n_sm * gm_minb((int)bn);
    uint32_t ks = 1;
    if (thin_cuda_cluster)
        while (ks < GM_MAX_SPLIT && tiles * (ks + 1) <= slots && nk / (ks + 1) >= 8) ks++;
    if (w->trans) {
        if (w->dtype == THIN_DTYPE_BF16)
            return launch_dt<THIN_DTYPE_BF16, true>(w, x, ldx, out, ldo, resid, ldr, n, bn, ks, st);
        return launch_dt<THIN_DTYPE_F8_E4M3, true>(w, x, ldx, out, ldo, resid, ldr, n, bn, ks, st);
    }
    if (w->dtype == THIN_DTYPE_BF16)
        return launch_dt<THIN_DTYPE_BF16, false>(w, x, ldx, out, ldo, resid, ldr, n, bn, ks, st);
    return launch_dt<THIN_DTYPE_F8_E4M3, false>(w, x, ldx, out, ldo, resid, ldr, n, bn, ks, st);
}
