/*
 * gemm.cu — batched linear for the prompt (prefill): out[i][r] = sum_c W[r][c] x[i][c], i < n.
 *
 * Tensor cores through WMMA (BF16 × BF16 → F32): a block computes a 64-token × 64-row tile; the
 * F32 activations are rounded to BF16 and BF16/FP8 weights are widened to BF16 (exact for FP8;
 * the per-row FP8 scale is applied in the epilogue) as each 32-column slice is staged in shared
 * memory. The epilogue optionally adds the result into a residual buffer too.
 * F32/F16 weights are not rounded: the backend runs them through the matvec per row instead.
 * CPU twin: op_matvec row by row.
 */
#include <mma.h>

#include "cuda_common.cuh"

using namespace nvcuda;

#define GM_BM 64 /* tokens per tile */
#define GM_BN 64 /* weight rows per tile */
#define GM_BK 32
#define GM_LDS (GM_BK + 8) /* shared row stride (bf16), a multiple of 8 */
#define GM_LDC (GM_BN + 4)

struct gemm_smem {
    __nv_bfloat16 a[GM_BM * GM_LDS];
    __nv_bfloat16 b[GM_BN * GM_LDS];
    float c[GM_BM * GM_LDC];
};

/* Widens one 16-byte vector of weights to bf16 into dst (EPV elements). */
template <int DT>
__device__ __forceinline__ void widen16(uint4 w, __nv_bfloat16 *dst) {
    if (DT == THIN_DTYPE_BF16) {
        *(uint4 *)dst = w;
    } else { /* F8_E4M3 */
        const uint32_t u[4] = {w.x, w.y, w.z, w.w};
#pragma unroll
        for (int j = 0; j < 4; j++) {
            __half2_raw lo = __nv_cvt_fp8x2_to_halfraw2((__nv_fp8x2_storage_t)(u[j] & 0xffffu), __NV_E4M3);
            __half2_raw hi = __nv_cvt_fp8x2_to_halfraw2((__nv_fp8x2_storage_t)(u[j] >> 16), __NV_E4M3);
            float2 fl = __half22float2(*(__half2 *)&lo), fh = __half22float2(*(__half2 *)&hi);
            dst[4 * j + 0] = __float2bfloat16_rn(fl.x);
            dst[4 * j + 1] = __float2bfloat16_rn(fl.y);
            dst[4 * j + 2] = __float2bfloat16_rn(fh.x);
            dst[4 * j + 3] = __float2bfloat16_rn(fh.y);
        }
    }
}

template <int DT>
__device__ void stage_tiles(gemm_smem &s, const dmat &w, const float *x, uint32_t ldx, uint32_t n,
                            uint32_t m0, uint32_t n0, uint32_t k0) {
    for (uint32_t i = threadIdx.x; i < GM_BM * GM_BK; i += blockDim.x) {
        uint32_t m = i / GM_BK, k = i % GM_BK;
        float v = (m0 + m < n && k0 + k < w.cols) ? x[(size_t)(m0 + m) * ldx + k0 + k] : 0.0f;
        s.a[m * GM_LDS + k] = __float2bfloat16_rn(v);
    }
    const uint32_t epv = DT == THIN_DTYPE_BF16 ? 8 : 16, vpr = GM_BK / epv;
    const size_t esz = DT == THIN_DTYPE_BF16 ? 2 : 1;
    for (uint32_t i = threadIdx.x; i < GM_BN * vpr; i += blockDim.x) {
        uint32_t r = i / vpr, k = (i % vpr) * epv;
        __nv_bfloat16 *dst = s.b + r * GM_LDS + k;
        if (n0 + r < w.rows && k0 + k < w.pitch) {
            const uint8_t *src = (const uint8_t *)w.data + ((size_t)(n0 + r) * w.pitch + k0 + k) * esz;
            widen16<DT>(__ldg((const uint4 *)src), dst);
        } else {
            for (uint32_t j = 0; j < epv; j++) dst[j] = __float2bfloat16_rn(0.0f);
        }
    }
}

template <int DT>
__global__ void __launch_bounds__(128) gemm_kernel(const dmat w, const float *x, uint32_t ldx,
                                                   float *out, uint32_t ldo, float *resid,
                                                   uint32_t ldr, uint32_t n) {
    pdl_trigger();
    pdl_wait();
    __shared__ __align__(128) gemm_smem s;
    const uint32_t n0 = blockIdx.x * GM_BN, m0 = blockIdx.y * GM_BM;
    const int warp = threadIdx.x >> 5, wm = (warp >> 1) * 32, wn = (warp & 1) * 32;
    wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc[2][2];
#pragma unroll
    for (int i = 0; i < 2; i++)
#pragma unroll
        for (int j = 0; j < 2; j++) wmma::fill_fragment(acc[i][j], 0.0f);
    for (uint32_t k0 = 0; k0 < w.pitch; k0 += GM_BK) {
        stage_tiles<DT>(s, w, x, ldx, n, m0, n0, k0);
        __syncthreads();
#pragma unroll
        for (int kk = 0; kk < GM_BK; kk += 16) {
            wmma::fragment<wmma::matrix_a, 16, 16, 16, __nv_bfloat16, wmma::row_major> fa[2];
            wmma::fragment<wmma::matrix_b, 16, 16, 16, __nv_bfloat16, wmma::col_major> fb[2];
#pragma unroll
            for (int i = 0; i < 2; i++) wmma::load_matrix_sync(fa[i], s.a + (wm + 16 * i) * GM_LDS + kk, GM_LDS);
#pragma unroll
            for (int j = 0; j < 2; j++) wmma::load_matrix_sync(fb[j], s.b + (wn + 16 * j) * GM_LDS + kk, GM_LDS);
#pragma unroll
            for (int i = 0; i < 2; i++)
#pragma unroll
                for (int j = 0; j < 2; j++) wmma::mma_sync(acc[i][j], fa[i], fb[j], acc[i][j]);
        }
        __syncthreads();
    }
#pragma unroll
    for (int i = 0; i < 2; i++)
#pragma unroll
        for (int j = 0; j < 2; j++)
            wmma::store_matrix_sync(s.c + (wm + 16 * i) * GM_LDC + wn + 16 * j, acc[i][j], GM_LDC,
                                    wmma::mem_row_major);
    __syncthreads();
    for (uint32_t i = threadIdx.x; i < GM_BM * GM_BN; i += blockDim.x) {
        uint32_t m = i / GM_BN, r = i % GM_BN;
        if (m0 + m >= n || n0 + r >= w.rows) continue;
        float v = s.c[m * GM_LDC + r];
        if (DT == THIN_DTYPE_F8_E4M3 && w.scale) v *= w.scale[n0 + r];
        out[(size_t)(m0 + m) * ldo + n0 + r] = v;
        if (resid) resid[(size_t)(m0 + m) * ldr + n0 + r] += v;
    }
}

cudaError_t launch_gemm(const dmat *w, const float *x, uint32_t ldx, float *out, uint32_t ldo,
                        float *resid, uint32_t ldr, uint32_t n, cudaStream_t st) {
    if (w->pitch % GM_BK != 0) return cudaErrorInvalidValue;
    dim3 grid((w->rows + GM_BN - 1) / GM_BN, (n + GM_BM - 1) / GM_BM);
    if (w->dtype == THIN_DTYPE_BF16)
        return launch_k(gemm_kernel<THIN_DTYPE_BF16>, dim3(grid), dim3(128), 0, st, *w, x, ldx, out, ldo, resid, ldr, n);
    else if (w->dtype == THIN_DTYPE_F8_E4M3)
        return launch_k(gemm_kernel<THIN_DTYPE_F8_E4M3>, dim3(grid), dim3(128), 0, st, *w, x, ldx, out, ldo, resid, ldr, n);
    else
        return cudaErrorInvalidValue;
}
