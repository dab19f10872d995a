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
 *     shared memory (THIN_CUDA_MLP_MMA: on tensor cores instead, "gate/up on tensor cores" below).
 *  2. The down projection is stored transposed (compile_steps transposes it on the device): row j
 *     of the transpose is the column of down that h[j] multiplies, so the block's share of down is
 *     `units` contiguous rows, streamed in the same 16-byte, row-contiguous pattern as gate and
 *     up. Each thread owns a few output columns (one 16-byte vector of each row, or two for
 *     hidden sizes over 256 vectors) of a group of the block's units, and sums h[j] × downᵀ[j].
 *     Its first loads are issued before the barrier that publishes h. (THIN_CUDA_MLP_MMA & 8: FP8
 *     down on tensor cores, "FP8 down on E4M3 tensor cores" below.)
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

#define MLP_MMA_PF 4    /* MMA path: steps (32 bytes a lane) in flight (2 in a slim block: 64 registers) */
#define MLP_MMA_ITEMS 4 /* MMA path: items a warp at most (their sums in shared memory) */

int thin_cuda_mlp = 1, thin_cuda_mlp_bps = 0, thin_cuda_mlp_units = 0, thin_cuda_mlp_warps = 0;
int thin_cuda_mlp_slim = -1, thin_cuda_mlp_mma = 0;

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

/* ---- gate/up on tensor cores (THIN_CUDA_MLP_MMA: 1 FP8, 2 BF16, 4 FP8 on E4M3 MMAs) ----
 * A warp multiplies a tile of 8 units (their gate rows as the MMA's rows 0-7, their up rows as rows
 * 8-15) by x with mma.m16n8k16 (F32 accumulation), 64 bytes of each row a step: lane (g, c) (g =
 * lane / 4, c = lane % 4) loads 16 bytes of gate row g and of up row g at byte 64 kb + 16 c. The
 * MMA's k index is a permutation of those columns, the same for A and B.
 * FP8: the 16 bytes feed four F16 MMAs (E4M3 pairs widened to F16 exactly in registers); k = 2c + e
 * and 2c + 8 + e of MMA m are columns 64 kb + 16 c + 4 m + e and + 2 + e. x enters as two F16
 * terms in B's columns 0 and 1, x s = hi + lo (s a power of two putting max |x| s in
 * [2^13, 2^14)), which keeps about 22 bits of x where F16 alone would keep 11; lane (g, 0) ends
 * with gate(g) = (D[g][0] + D[g][1]) / s and up(g) in D[g + 8].
 * BF16: the 16 bytes (8 columns from 32 kb + 8 c) feed two BF16 MMAs as loaded; x enters as three
 * BF16 terms (24 bits) in columns 0-2, the third summed from lane (g, 1).
 * FP8 on E4M3 MMAs (4): the 16 bytes feed two mma.m16n8k32 as loaded (no widening); x enters as
 * eight E4M3 terms, one in each of B's columns (x s = sum of t_i 16^-i, about 32 bits), and each
 * lane weighs its two columns and adds its quad's.
 * B's other columns are zero. Each unit's columns are split into `mma_seg` segments, the (tile,
 * segment) items dealt to the warps in turn, and the items' partial sums meet in shared memory in a
 * fixed order (the same h every run). Weights go from global memory to registers, PF steps in
 * flight a lane, and no weight is widened to F32 or meets x in an FMA of its own. */
__device__ __forceinline__ uint32_t e4m3x2_h2(uint32_t v) {
    const __half2_raw h = __nv_cvt_fp8x2_to_halfraw2((__nv_fp8x2_storage_t)(v & 0xffffu), __NV_E4M3);
    return (uint32_t)h.x | (uint32_t)h.y << 16;
}

/* d += A B, mma.m16n8k16 with F32 accumulation: A and B F16 (BF = false) or BF16 (BF = true). */
template <bool BF>
__device__ __forceinline__ void mma_16816(float (&d)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                                          uint32_t b0, uint32_t b1) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
#define MMA_16816(T)                                                                                 \
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32." T "." T ".f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, " \
                 "{%8,%9}, {%0,%1,%2,%3};"                                                           \
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])                                    \
                 : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1))
    if constexpr (BF) MMA_16816("bf16");
    else MMA_16816("f16");
#undef MMA_16816
#else
    (void)d, (void)a0, (void)a1, (void)a2, (void)a3, (void)b0, (void)b1;
#endif
}

/* d += A B, mma.m16n8k32 with E4M3 A and B (four elements a register) and F32 accumulation. */
__device__ __forceinline__ void mma_e4m3(float (&d)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                                         uint32_t b0, uint32_t b1) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
    asm volatile("mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
                 "{%8,%9}, {%0,%1,%2,%3};"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
#else
    (void)d, (void)a0, (void)a1, (void)a2, (void)a3, (void)b0, (void)b1;
#endif
}

/* Shared memory of the MMA path (floats, from the block's start): x as staged (pitch), then x's
 * terms (FP8: two F16 terms of 64 nkb columns; BF16: three BF16 terms of 32 nkb; nkb * 64 floats
 * either way at most; FP8 on E4M3 MMAs (MMA = 2): eight E4M3 terms of 64 nkb, nkb * 128 floats),
 * then the items' partial sums (16 each). */
__host__ __device__ __forceinline__ uint32_t mma_nkb(uint32_t pitch_b) { return (pitch_b + 63) / 64; }
__host__ __device__ __forceinline__ uint32_t mma_terms_floats(int mma, uint32_t nkb) {
    return nkb * (mma == 2 ? 128 : 64);
}
__host__ __device__ __forceinline__ uint32_t mma_smem_floats(int mma, uint32_t pitch, uint32_t pitch_b,
                                                              uint32_t units, uint32_t seg) {
    return pitch + mma_terms_floats(mma, mma_nkb(pitch_b)) + (units + 7) / 8 * seg * 16;
}

/* One step's cursor: item q of this warp (item w + NW q), column block kb of it. */
struct mma_cur {
    uint32_t q, off, kb0, kbn, tile;
    bool ok;
};

template <int NW>
__device__ __forceinline__ void mma_cur_item(mma_cur &c, uint32_t items, uint32_t seg, uint32_t kps,
                                             uint32_t nkb) {
    const uint32_t it = (threadIdx.x >> 5) + NW * c.q;
    c.ok = it < items;
    c.tile = it / seg;
    c.kb0 = (it % seg) * kps;
    c.kbn = min(kps, nkb - c.kb0); /* mma_segments leaves no segment empty: kb0 < nkb */
    c.off = 0;
}

template <int NW>
__device__ __forceinline__ void mma_cur_next(mma_cur &c, uint32_t items, uint32_t seg, uint32_t kps,
                                             uint32_t nkb) {
    if (++c.off >= c.kbn) {
        c.q++;
        mma_cur_item<NW>(c, items, seg, kps, nkb);
    }
}

/* The 16 bytes of gate and up row g of the cursor's step (zeros past the units or the pitch). */
__device__ __forceinline__ void mma_load(const mv_args &m, uint32_t u0, uint32_t nu, const mma_cur &c,
                                         uint32_t pitch_b, uint4 &wg, uint4 &wu) {
    const int lane = threadIdx.x & 31;
    const uint32_t j = c.tile * 8 + (lane >> 2), col = (c.kb0 + c.off) * 64 + 16 * (lane & 3);
    if (c.ok && j < nu && col < pitch_b) {
        wg = ld_stream((const uint4 *)((const uint8_t *)m.seg[0].w.data + (size_t)(u0 + j) * pitch_b + col));
        wu = ld_stream((const uint4 *)((const uint8_t *)m.seg[1].w.data + (size_t)(u0 + j) * pitch_b + col));
    } else {
        wg = make_uint4(0, 0, 0, 0);
        wu = wg;
    }
}

/* One step's MMAs: gate and up words of this lane, x's terms from xh. FP8: four MMAs, the terms
 * in lanes 0-7 (B's columns 0 and 1); BF16: two MMAs on the words as loaded, the terms in lanes
 * 0-11 (columns 0-2). */
template <int DTG, int MMA>
__device__ __forceinline__ void mma_step(float (&d)[4], const uint4 &wg, const uint4 &wu,
                                         const uint4 *xh, uint32_t kb, uint32_t nkb) {
    const int lane = threadIdx.x & 31;
    if constexpr (MMA == 2) { /* E4M3: words 0-1 of the 16 bytes in one MMA, 2-3 in the other; k =
                                 4c + e and 16 + 4c + e are bytes 16c + 8i + e and + 4 + e; x's
                                 term lane / 4 (of eight) in B's column lane / 4 */
        const uint4 x = xh[(size_t)(lane >> 2) * nkb * 4 + kb * 4 + (lane & 3)];
        mma_e4m3(d, wg.x, wu.x, wg.y, wu.y, x.x, x.y);
        mma_e4m3(d, wg.z, wu.z, wg.w, wu.w, x.z, x.w);
        return;
    }
    if constexpr (DTG == THIN_DTYPE_BF16) { /* k = 32 columns from 32 kb + 8 c: one vector */
        uint4 x = make_uint4(0, 0, 0, 0);
        if (lane < 12) x = xh[(size_t)(lane >> 2) * nkb * 4 + kb * 4 + (lane & 3)];
        mma_16816<true>(d, wg.x, wu.x, wg.y, wu.y, x.x, x.y);
        mma_16816<true>(d, wg.z, wu.z, wg.w, wu.w, x.z, x.w);
        return;
    }
    uint4 x0 = make_uint4(0, 0, 0, 0), x1 = x0;
    if (lane < 8) { /* B's column lane / 4: hi (0) or lo (1); k = 16 columns from 64 kb + 16 c */
        const uint4 *p = xh + (size_t)(lane >> 2) * nkb * 8 + kb * 8 + (lane & 3) * 2;
        x0 = p[0];
        x1 = p[1];
    }
    const uint32_t g[4] = {wg.x, wg.y, wg.z, wg.w}, u[4] = {wu.x, wu.y, wu.z, wu.w};
    const uint32_t b[8] = {x0.x, x0.y, x0.z, x0.w, x1.x, x1.y, x1.z, x1.w};
#pragma unroll
    for (int k = 0; k < 4; k++)
        mma_16816<false>(d, e4m3x2_h2(g[k]), e4m3x2_h2(u[k]), e4m3x2_h2(g[k] >> 16), e4m3x2_h2(u[k] >> 16),
                b[2 * k], b[2 * k + 1]);
}

/* v (|v| < 2^8) as eight E4M3 terms t_i, v = sum of t_i 16^-i: each the rest times 16, rounded; the
 * rest of a rounding is at most 1/16 of the largest term, so no term passes 448. Term i goes to
 * dst[i * stride]. */
__device__ __forceinline__ void e4m3_terms(float v, uint8_t *dst, uint32_t stride) {
#pragma unroll
    for (int t = 0; t < 8; t++) {
        const __nv_fp8_storage_t q = __nv_cvt_float_to_fp8(v, __NV_NOSAT, __NV_E4M3);
        const __half_raw hq = __nv_cvt_fp8_to_halfraw(q, __NV_E4M3);
        dst[t * stride] = q;
        v = (v - __half2float(__half(hq))) * 16.0f;
    }
}

/* x's terms from x as staged (DTG's planes), zero past cols: FP8, two F16 terms of 64 nkb
 * columns, returning 1 / s; BF16, three BF16 terms (hi, the rest's hi, what is left) of 32 nkb
 * columns, returning 1. */
template <int DTG, int MMA>
__device__ __forceinline__ float mma_stage_x(const float *xs, uint32_t cols, uint32_t pitch, uint32_t nkb,
                                             void *xt, float *red) {
    const uint32_t ps = pitch / vec_of<DTG>::epv * 4;
    if constexpr (MMA == 2) { /* eight E4M3 terms: x s = sum of t_i 16^-i, s a power of two putting
                                 max |x| s in [2^7, 2^8); each term the rest times 16, rounded (the
                                 rest of a rounding is at most 1/16 of the largest term: no term
                                 passes 448), so about 32 bits of x */
        const uint32_t n = nkb * 64;
        uint8_t *xb = (uint8_t *)xt;
        float mx = 0.0f;
        for (uint32_t i = threadIdx.x; i < cols; i += blockDim.x)
            mx = fmaxf(mx, fabsf(xs[x_index<DTG>(i, ps)]));
        mx = block_max(mx, red);
        int e = 0;
        if (mx > 0.0f && isfinite(mx)) e = min(max(7 - ilogbf(mx), -120), 120);
        const float sc = ldexpf(1.0f, e);
        for (uint32_t i = threadIdx.x; i < n; i += blockDim.x)
            e4m3_terms(i < cols ? xs[x_index<DTG>(i, ps)] * sc : 0.0f, xb + i, n);
        __syncthreads();
        return ldexpf(1.0f, -e);
    }
    if constexpr (DTG == THIN_DTYPE_BF16) {
        const uint32_t n = nkb * 32;
        __nv_bfloat16 *xb = (__nv_bfloat16 *)xt;
        for (uint32_t i = threadIdx.x; i < n; i += blockDim.x) {
            const float v = i < cols ? xs[x_index<DTG>(i, ps)] : 0.0f;
            const __nv_bfloat16 hi = __float2bfloat16_rn(v);
            const float r = v - __bfloat162float(hi);
            const __nv_bfloat16 mid = __float2bfloat16_rn(r);
            xb[i] = hi;
            xb[n + i] = mid;
            xb[2 * n + i] = __float2bfloat16_rn(r - __bfloat162float(mid));
        }
        __syncthreads();
        return 1.0f;
    }
    const uint32_t n = nkb * 64;
    __half *xh = (__half *)xt;
    float mx = 0.0f;
    for (uint32_t i = threadIdx.x; i < cols; i += blockDim.x)
        mx = fmaxf(mx, fabsf(xs[x_index<DTG>(i, ps)]));
    mx = block_max(mx, red);
    int e = 0;
    if (mx > 0.0f && isfinite(mx)) e = min(max(13 - ilogbf(mx), -120), 120);
    const float sc = ldexpf(1.0f, e);
    for (uint32_t i = threadIdx.x; i < n; i += blockDim.x) {
        const float v = i < cols ? xs[x_index<DTG>(i, ps)] * sc : 0.0f;
        const __half hi = __float2half_rn(v);
        xh[i] = hi;
        xh[n + i] = __float2half_rn(v - __half2float(hi));
    }
    __syncthreads();
    return ldexpf(1.0f, -e);
}

/* ---- FP8 down on E4M3 tensor cores (THIN_CUDA_MLP_MMA & 8) ----
 * The block's share of down is its units' rows of the transpose (u, the MMA's k) by the hidden
 * columns (j, the MMA's rows): D[j][t] += A[j][u] B[u][t], A the weights, B h as eight E4M3 terms
 * (as x above, by the block's max |h|). An item is a slab of 32 units by a chunk of 64 columns:
 * lane (g, c) loads 8 bytes (columns 64 ch + 8 g + e) of rows 4c + r and 16 + 4c + r (r = 0..3),
 * and byte permutes turn each 4 x 4 block (four rows of four columns) into four words of four
 * rows a column, the A operand of mma.m16n8k32 as it is laid out (row g: column 8g + 2i, row g + 8:
 * 8g + 2i + 1, in the i-th of four MMAs). Each lane weighs its two terms; a quad's sums are
 * reduced and scattered in two shuffles (lane c ends with MMA c's two columns) and stored as
 * the slab's partial sums, which the block adds in slab order. */
__device__ __forceinline__ uint2 ld_stream2(const uint2 *p) {
    uint2 v;
    asm volatile("ld.global.nc.L1::no_allocate.v2.u32 {%0,%1}, [%2];" : "=r"(v.x), "=r"(v.y) : "l"(p));
    return v;
}

/* Item it (slab it / nch, chunk it % nch) of a block's down rows: this lane's eight 8-byte loads,
 * zero past the units, the pitch or the items. */
__device__ __forceinline__ void mdn_load(const uint8_t *dbase, uint32_t dpitch_b, uint32_t nu, uint32_t it,
                                         uint32_t nch, uint32_t items, uint2 (&w)[8]) {
    const int lane = threadIdx.x & 31, c = lane & 3;
    const uint32_t sl = it / nch, col = (it % nch) * 64 + 8 * (lane >> 2);
#pragma unroll
    for (int r = 0; r < 8; r++) {
        const uint32_t u = sl * 32 + (r < 4 ? 4 * c + r : 12 + 4 * c + r);
        if (it < items && u < nu && col < dpitch_b)
            w[r] = ld_stream2((const uint2 *)(dbase + (size_t)u * dpitch_b + col));
        else
            w[r] = make_uint2(0, 0);
    }
}

/* Four words of four rows' bytes (a, b, c, d: columns 0-3) as four words of one column's four rows. */
__device__ __forceinline__ void bytes_4x4(uint32_t a, uint32_t b, uint32_t c, uint32_t d, uint32_t (&o)[4]) {
    const uint32_t t0 = __byte_perm(a, b, 0x5140), t1 = __byte_perm(c, d, 0x5140);
    const uint32_t t2 = __byte_perm(a, b, 0x7362), t3 = __byte_perm(c, d, 0x7362);
    o[0] = __byte_perm(t0, t1, 0x5410);
    o[1] = __byte_perm(t0, t1, 0x7632);
    o[2] = __byte_perm(t2, t3, 0x5410);
    o[3] = __byte_perm(t2, t3, 0x7632);
}

/* One item's MMAs and its partial sums into row `slab` of part (pitch hp floats). hb: h's terms,
 * term t of unit u at hb[t * hu + u]. */
__device__ __forceinline__ void mdn_item(const uint2 (&w)[8], const uint8_t *hb, uint32_t hu, uint32_t it,
                                         uint32_t nch, uint32_t dpitch_b, float *part, uint32_t hp) {
    const int lane = threadIdx.x & 31, g = lane >> 2, c = lane & 3;
    const uint32_t sl = it / nch, col = (it % nch) * 64 + 8 * g;
    const uint8_t *hq = hb + (size_t)g * hu + sl * 32 + 4 * c;
    const uint32_t b0 = *(const uint32_t *)hq, b1 = *(const uint32_t *)(hq + 16);
    float d[4][4];
#pragma unroll
    for (int h = 0; h < 2; h++) { /* columns 4h..4h+3 of the lane's 8 */
        uint32_t p[4], q[4];
        bytes_4x4(h ? w[0].y : w[0].x, h ? w[1].y : w[1].x, h ? w[2].y : w[2].x, h ? w[3].y : w[3].x, p);
        bytes_4x4(h ? w[4].y : w[4].x, h ? w[5].y : w[5].x, h ? w[6].y : w[6].x, h ? w[7].y : w[7].x, q);
#pragma unroll
        for (int i = 0; i < 2; i++) {
            float(&di)[4] = d[2 * h + i];
            di[0] = di[1] = di[2] = di[3] = 0.0f;
            mma_e4m3(di, p[2 * i], p[2 * i + 1], q[2 * i], q[2 * i + 1], b0, b1);
        }
    }
    const float w0 = __int_as_float((127 - 8 * c) << 23), w1 = w0 * 0.0625f;
    float v[4][2];
#pragma unroll
    for (int i = 0; i < 4; i++) {
        v[i][0] = d[i][0] * w0 + d[i][1] * w1;
        v[i][1] = d[i][2] * w0 + d[i][3] * w1;
    }
    const bool ha = c & 2, hb1 = c & 1;
    float k[2][2], f[2];
#pragma unroll
    for (int i = 0; i < 2; i++)
#pragma unroll
        for (int e = 0; e < 2; e++)
            k[i][e] = (ha ? v[2 + i][e] : v[i][e]) + __shfl_xor_sync(0xffffffffu, ha ? v[i][e] : v[2 + i][e], 2);
#pragma unroll
    for (int e = 0; e < 2; e++)
        f[e] = (hb1 ? k[1][e] : k[0][e]) + __shfl_xor_sync(0xffffffffu, hb1 ? k[0][e] : k[1][e], 1);
    if (col < dpitch_b) *(float2 *)&part[(size_t)sl * hp + col + 2 * c] = make_float2(f[0], f[1]);
}

/* h's eight E4M3 terms (by the block's max |h|, as x's) for units [0, hu), zero from nu; returns
 * 1 / the scale. */
__device__ __forceinline__ float mdn_stage_h(const float *hs, uint32_t nu, uint32_t hu, uint8_t *hb, float *red) {
    float mx = 0.0f;
    for (uint32_t u = threadIdx.x; u < nu; u += blockDim.x) mx = fmaxf(mx, fabsf(hs[u]));
    mx = block_max(mx, red);
    int e = 0;
    if (mx > 0.0f && isfinite(mx)) e = min(max(7 - ilogbf(mx), -120), 120);
    const float sc = ldexpf(1.0f, e);
    for (uint32_t u = threadIdx.x; u < hu; u += blockDim.x) e4m3_terms(u < nu ? hs[u] * sc : 0.0f, hb + u, hu);
    __syncthreads();
    return ldexpf(1.0f, -e);
}

/* Floats of shared memory after h_off: h of `units` units, and with MD (down on E4M3 MMAs) h's
 * terms, 8 bytes a unit in slabs of 32. */
__host__ __device__ __forceinline__ uint32_t mlp_h_floats(bool md, uint32_t units) {
    return md ? (units + 3) / 4 * 4 + (units + 31) / 32 * 64 : units;
}

/* DTG: gate/up dtype, DTD: down dtype; NW warps per block; HB: 16-byte vectors per lane and row
 * in a gate/up load batch; NB: down rows per thread in each of the two batches in flight; VPT:
 * 16-byte vectors of a down row per thread (1 or 2). The kernels below choose HB and NB for
 * their register bounds. */
template <int DTG, int DTD, int NW, int HB, int NB, int VPT, int MMA = 0, int PF = 4>
__device__ __forceinline__ void mlp_body(const mlp_args &a) {
    constexpr int MG = MMA & 3;                                 /* gate/up: 0 F32, 1 F16/BF16 terms, 2 E4M3 */
    constexpr bool MD = (MMA & 4) && DTD == THIN_DTYPE_F8_E4M3; /* down on E4M3 MMAs */
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

    /* 1. gate and up: warp w takes units w, w + NW, ... of the block's range (with MMA, the
     * items w, w + NW, ... of the block's tiles and segments) */
    uint32_t j = threadIdx.x >> 5;
    uint4 w[2][MG ? 1 : HB];
    const uint4 *rows[2];
    mv_epi<2> e;
    uint4 wg[MG ? PF : 1], wu[MG ? PF : 1];
    mma_cur cl, cu;
    const uint32_t pitch_b = m.seg[0].w.pitch / vec_of<DTG>::epv * 16, nkb = mma_nkb(pitch_b);
    const uint32_t nseg = MG ? a.mma_seg : 1, kps = (nkb + nseg - 1) / nseg, items = (nu + 7) / 8 * nseg;
    float *pb = xs + m.seg[0].w.pitch + mma_terms_floats(MG, nkb); /* MMA: the items' partial sums */
    if constexpr (MG) { /* the first PF steps' weights, before the wait */
        cl.q = 0;
        mma_cur_item<NW>(cl, items, nseg, kps, nkb);
#pragma unroll
        for (int k = 0; k < PF; k++) {
            mma_load(m, u0, nu, cl, pitch_b, wg[k], wu[k]);
            if (cl.ok) mma_cur_next<NW>(cl, items, nseg, kps, nkb);
        }
    } else if (j < nu) {
        rows[0] = row_ptr(m.seg[0].w, u0 + j);
        rows[1] = row_ptr(m.seg[1].w, u0 + j);
        load_batch<2, HB>(w, rows, lane, nvec);
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
    float inv_s = 1.0f;
    if constexpr (MG) {
        float *xh = xs + m.seg[0].w.pitch;
        inv_s = mma_stage_x<DTG, MG>(xs, m.seg[0].w.cols, m.seg[0].w.pitch, nkb, xh, red);
        float d[4] = {0.0f, 0.0f, 0.0f, 0.0f};
        cu.q = 0;
        mma_cur_item<NW>(cu, items, nseg, kps, nkb);
        while (cu.ok) {
#pragma unroll
            for (int k = 0; k < PF; k++) {
                if (!cu.ok) break;
                mma_step<DTG, MG>(d, wg[k], wu[k], (const uint4 *)xh, cu.kb0 + cu.off, nkb);
                mma_load(m, u0, nu, cl, pitch_b, wg[k], wu[k]);
                if (cl.ok) mma_cur_next<NW>(cl, items, nseg, kps, nkb);
                if (cu.off + 1 >= cu.kbn) { /* the item's last step: its sums out */
                    float sg = d[0] + d[1], su = d[2] + d[3];
                    if constexpr (MG == 2) { /* terms 2c and 2c + 1 in lane c, weighed 16^-t */
                        const float w0 = __int_as_float((127 - 8 * (lane & 3)) << 23), w1 = w0 * 0.0625f;
                        sg = d[0] * w0 + d[1] * w1;
                        su = d[2] * w0 + d[3] * w1;
                        sg += __shfl_xor_sync(0xffffffffu, sg, 1);
                        su += __shfl_xor_sync(0xffffffffu, su, 1);
                        sg += __shfl_xor_sync(0xffffffffu, sg, 2);
                        su += __shfl_xor_sync(0xffffffffu, su, 2);
                    } else if constexpr (DTG == THIN_DTYPE_BF16) { /* column 2 (the last term) in lane c = 1 */
                        sg += __shfl_down_sync(0xffffffffu, d[0], 1);
                        su += __shfl_down_sync(0xffffffffu, d[2], 1);
                    }
                    if ((lane & 3) == 0) {
                        float *q = pb + (size_t)((threadIdx.x >> 5) + NW * cu.q) * 16 + (lane >> 2);
                        q[0] = sg;
                        q[8] = su;
                    }
                    d[0] = d[1] = d[2] = d[3] = 0.0f;
                }
                mma_cur_next<NW>(cu, items, nseg, kps, nkb);
            }
        }
    } else {
        for (; j < nu; j += NW) {
            float acc[2] = {0.0f, 0.0f};
            use_batch<DTG, 2, HB>(w, lane, nvec, xs, acc);
            for (uint32_t base = lane + 32 * HB; base < nvec; base += 32 * HB) {
                load_batch<2, HB>(w, rows, base, nvec);
                use_batch<DTG, 2, HB>(w, base, nvec, xs, acc);
            }
            const mv_epi<2> ce = e;
            if (j + NW < nu) {
                rows[0] = row_ptr(m.seg[0].w, u0 + j + NW);
                rows[1] = row_ptr(m.seg[1].w, u0 + j + NW);
                load_batch<2, HB>(w, rows, lane, nvec);
                if (lane == 0) epi_weights<DTG, 2>(m, 0, u0 + j + NW, e);
            }
            acc[0] = warp_sum(acc[0]);
            acc[1] = warp_sum(acc[1]);
            if (lane == 0) hs[j] = silu_f(acc[0] * ce.sc[0]) * (acc[1] * ce.sc[1]);
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
    /* two batches in flight: each is refilled as soon as it is used (MD: DBUF items a warp) */
    const uint32_t nch = (dpitch_b + 63) / 64, nsl = (nu + 31) / 32, ditems = nch * nsl;
    const uint32_t dit = threadIdx.x >> 5;
    constexpr int DBUF = MD && PF >= 4 ? 2 : 1; /* MD: items in flight a warp (one in 64 registers) */
    uint2 dw[DBUF][8];
    if constexpr (MD) {
#pragma unroll
        for (int b = 0; b < DBUF; b++) mdn_load(dbase, dpitch_b, nu, dit + b * NW, nch, ditems, dw[b]);
    } else {
        load_d(0, da);
        load_d(NB, db);
    }
    if constexpr (MG) { /* the items' sums in a fixed order into h */
        __syncthreads();
        for (uint32_t jj = threadIdx.x; jj < nu; jj += blockDim.x) {
            const float *q = pb + (size_t)(jj / 8) * nseg * 16 + jj % 8;
            float g = 0.0f, u = 0.0f;
            for (uint32_t sg = 0; sg < nseg; sg++) g += q[sg * 16], u += q[sg * 16 + 8];
            mv_epi<2> ue;
            epi_weights<DTG, 2>(m, 0, u0 + jj, ue); /* the rows' FP8 scales (1 for BF16) */
            hs[jj] = silu_f(g * inv_s * ue.sc[0]) * (u * inv_s * ue.sc[1]);
        }
    }
    __syncthreads(); /* h complete; x no longer needed */
    if (threadIdx.x == 0) kt.mark(1);
    float *part = sm;
    const uint32_t hp = a.down.pitch;
    float inv_h = 1.0f;
    if constexpr (MD) { /* the items' sums go into part (over x) as they are done, a row a slab */
        const uint32_t hu = (a.units + 31) / 32 * 32;
        uint8_t *hb = (uint8_t *)(hs + (a.units + 3) / 4 * 4);
        inv_h = mdn_stage_h(hs, nu, hu, hb, red);
        for (uint32_t it = dit; it < ditems; it += DBUF * NW) {
#pragma unroll
            for (int b = 0; b < DBUF; b++) {
                const uint32_t ib = it + b * NW;
                if (ib >= ditems) break;
                mdn_item(dw[b], hb, hu, ib, nch, dpitch_b, part, hp);
                mdn_load(dbase, dpitch_b, nu, ib + DBUF * NW, nch, ditems, dw[b]);
            }
        }
    } else {
        for (uint32_t k0 = 0; gi + G * k0 < nu; k0 += 2 * NB) {
            use_d(k0, da);
            load_d(k0 + 2 * NB, da);
            use_d(k0 + NB, db);
            load_d(k0 + 3 * NB, db);
        }
    }

    /* 3. the groups' (MD: the slabs') sums through shared memory (over x), scaled, into the residual */
#pragma unroll
    for (int v = 0; v < (MD ? 0 : VPT); v++) {
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
        for (uint32_t g = 1; g < (MD ? nsl : G); g++) {
            const float4 q = *(const float4 *)&part[g * hp + c];
            s.x += q.x, s.y += q.y, s.z += q.z, s.w += q.w;
        }
        if constexpr (MD) s.x *= inv_h, s.y *= inv_h, s.z *= inv_h, s.w *= inv_h;
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
template <int DTG, int DTD, int NW, int MINB, int VPT, int MMA = 0>
__global__ void __launch_bounds__(NW * 32, MINB) mlp_kernel(const mlp_args a) {
    constexpr bool HALF = 65536 / (NW * 32 * MINB) < 100; /* registers a thread */
    mlp_body<DTG, DTD, NW, HALF ? MV_UNROLL / 2 : MV_UNROLL, (HALF ? 4 : 8) / VPT, VPT, MMA,
             HALF ? MLP_MMA_PF : 2 * MLP_MMA_PF>(a);
}

/* Slim blocks (BF16 gate/up by default; THIN_CUDA_MLP_SLIM): at most MAXR registers a thread, so
 * that a block of NW warps fits on an SM beside an attention + o block (16 K registers) and
 * starts, requesting its first rows, while that kernel runs: 24 warps at 64 registers with
 * quarter batches, 16 at 96 with half batches. */
template <int DTG, int DTD, int NW, int MAXR, int VPT, int MMA = 0>
__global__ void THIN_MAXNREG(NW * 32, MAXR) mlp_slim_kernel(const mlp_args a) {
    constexpr int HB = MAXR <= 64 ? MV_UNROLL / 4 : MV_UNROLL / 2;
    constexpr int NB = (MAXR <= 64 ? 2 : 4) / VPT; /* VPT: 1 or 2 */
    mlp_body<DTG, DTD, NW, HB, NB, VPT, MMA, MAXR <= 64 ? MLP_MMA_PF / 2 : MLP_MMA_PF>(a);
}

/* Segments per tile of the MMA path for blocks of `units` units and NW warps: the fewest that
 * give the warps the least steps each (items over warps, rounded up, times steps an item), with
 * no empty segment and at most MLP_MMA_ITEMS items a warp; 0 when none fits. */
static uint32_t mma_segments(uint32_t units, uint32_t pitch_b, uint32_t nw) {
    const uint32_t nkb = mma_nkb(pitch_b), tiles = (units + 7) / 8;
    uint32_t best = 0, best_cost = UINT32_MAX;
    for (uint32_t sg = 1; sg <= nkb && tiles * sg <= MLP_MMA_ITEMS * nw; sg++) {
        const uint32_t kps = (nkb + sg - 1) / sg;
        if ((sg - 1) * kps >= nkb) continue;
        const uint32_t cost = (tiles * sg + nw - 1) / nw * kps;
        if (cost < best_cost) best = sg, best_cost = cost;
    }
    return best;
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

template <int DTG, int DTD, int NW, int MINB, int VPT, int MAXR = 0, int MMA = 0>
static cudaError_t launch_m(const mlp_args *in, int n_sm, cudaStream_t st) {
    static_assert(NW * 32 % 256 == 0, "a down row's threads (a power of two up to 256) must tile the block");
    mlp_args a = *in;
    void (*k)(const mlp_args);
    if constexpr (MAXR > 0) k = mlp_slim_kernel<DTG, DTD, NW, MAXR, VPT, MMA>;
    else k = mlp_kernel<DTG, DTD, NW, MINB, VPT, MMA>;
    const uint32_t inter = a.mv.seg[0].w.rows, dpitch = a.down.pitch;
    const uint32_t nvd = dpitch / vec_of<DTD>::epv;
    const uint32_t per = (nvd + VPT - 1) / VPT;
    uint32_t tpr = 1;
    while (tpr < per) tpr *= 2;
    const uint32_t G = NW * 32 / tpr;
    /* shared memory: x (then the groups' partial sums), then h of the block's units */
    uint32_t xfl = a.mv.seg[0].w.pitch > G * dpitch ? a.mv.seg[0].w.pitch : G * dpitch;
    constexpr bool MD = (MMA & 4) && DTD == THIN_DTYPE_F8_E4M3;
    if constexpr ((MMA & 3) != 0) { /* and x's terms and the items' sums, at most MLP_MMA_ITEMS a warp */
        const uint32_t mf = mma_smem_floats(MMA & 3, a.mv.seg[0].w.pitch,
                                            a.mv.seg[0].w.pitch / vec_of<DTG>::epv * 16, 8, MLP_MMA_ITEMS * NW);
        if (mf > xfl) xfl = mf;
    }
    a.tpr = tpr;
    a.h_off = (xfl + 3) / 4 * 4;
    int per_sm = 0;
    /* the occupancy for the largest units per block this launch may use, then the units */
    size_t smem = ((size_t)a.h_off + mlp_h_floats(MD, inter)) * sizeof(float);
    if (smem > 48 * 1024 - 256) {
        cudaError_t e = cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                             (int)(smem < 200 * 1024 ? smem : 200 * 1024));
        if (e != cudaSuccess) return e;
    }
    size_t smem_min = ((size_t)a.h_off + NW) * sizeof(float);
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
        smem = ((size_t)a.h_off + mlp_h_floats(MD, units)) * sizeof(float);
        int fit = 0;
        e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&fit, k, NW * 32, smem);
        if (e != cudaSuccess) return e;
        if (fit >= per_sm) break;
        if (fit < 1) return cudaErrorInvalidConfiguration;
        per_sm = fit;
        cap = (uint32_t)n_sm * (uint32_t)per_sm;
    }
    a.units = units; /* smem fits the attribute set above, or no block would have fit */
    if constexpr (MD) /* the slabs' partial sums must fit over x (as the groups' do) */
        if ((size_t)(units + 31) / 32 * dpitch > a.h_off)
            return launch_m<DTG, DTD, NW, MINB, VPT, MAXR, MMA & 3>(in, n_sm, st);
    if constexpr ((MMA & 3) != 0) {
        a.mma_seg = mma_segments(units, a.mv.seg[0].w.pitch / vec_of<DTG>::epv * 16, NW);
        if (!a.mma_seg) /* more tiles a block than the items' shared memory holds: the FP32 path */
            return launch_m<DTG, DTD, NW, MINB, VPT, MAXR, MMA & 4>(in, n_sm, st);
    }
    const uint32_t blocks = (inter + units - 1) / units;
    return launch_k(k, dim3(blocks), dim3(NW * 32), smem, st, a);
}

/* Warps per block NW, and blocks per SM for the registers: 24 warps per SM for FP8 gate/up, 16 for
 * BF16, in blocks of 8 warps or in one block; with MAXR, one slim block of NW warps within MAXR
 * registers. (NW * 32 must be a multiple of every power of two up to 256, the threads of a down
 * row.) */
template <int DTG, int DTD, int NW, int MAXR = 0, int MMA = 0>
static cudaError_t launch_dw(const mlp_args *a, int n_sm, cudaStream_t st) {
    constexpr int MINB = MAXR > 0 ? 1 : (DTG == THIN_DTYPE_F8_E4M3 ? 24 : 16) / NW;
    if (down_vpt(DTD, a->down.rows) == 1) return launch_m<DTG, DTD, NW, MINB, 1, MAXR, MMA>(a, n_sm, st);
    if constexpr (DTD == THIN_DTYPE_BF16) return launch_m<DTG, DTD, NW, MINB, 2, MAXR, MMA>(a, n_sm, st);
    return cudaErrorInvalidValue;
}

template <int DTG, int DTD, int MD>
static cudaError_t launch_dd2(const mlp_args *a, int n_sm, cudaStream_t st) {
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
    if constexpr (DTG == THIN_DTYPE_F8_E4M3)
        if (thin_cuda_mlp_mma & 4) { /* FP8 gate/up on E4M3 tensor cores */
            if (slim == 24) return launch_dw<DTG, DTD, 24, 64, 2 + MD>(a, n_sm, st);
            if (slim == 16) return launch_dw<DTG, DTD, 16, 96, 2 + MD>(a, n_sm, st);
            if (slim == 0 && warps24) return launch_dw<DTG, DTD, 24, 0, 2 + MD>(a, n_sm, st);
        }
    if (thin_cuda_mlp_mma & (DTG == THIN_DTYPE_F8_E4M3 ? 1 : 2)) { /* gate/up on tensor cores */
        if (slim == 24) return launch_dw<DTG, DTD, 24, 64, 1 + MD>(a, n_sm, st);
        if (slim == 16) return launch_dw<DTG, DTD, 16, 96, 1 + MD>(a, n_sm, st);
        if constexpr (DTG == THIN_DTYPE_F8_E4M3)
            if (slim == 0 && warps24) return launch_dw<DTG, DTD, 24, 0, 1 + MD>(a, n_sm, st);
    }
    if (slim == 24) return launch_dw<DTG, DTD, 24, 64, MD>(a, n_sm, st);
    if (slim == 16) return launch_dw<DTG, DTD, 16, 96, MD>(a, n_sm, st);
    if constexpr (DTG == THIN_DTYPE_F8_E4M3) {
        if (thin_cuda_mlp_warps == 16) return launch_dw<DTG, DTD, 16, 0, MD>(a, n_sm, st);
        if (thin_cuda_mlp_warps != MV_WARPS) return launch_dw<DTG, DTD, 24, 0, MD>(a, n_sm, st);
    } else {
        if (thin_cuda_mlp_warps == 16) return launch_dw<DTG, DTD, 16, 0, MD>(a, n_sm, st);
    }
    return launch_dw<DTG, DTD, MV_WARPS, 0, MD>(a, n_sm, st);
}

/* THIN_CUDA_MLP_MMA & 8: FP8 down on E4M3 tensor cores (MD = 4 in the kernels' MMA) */
template <int DTG, int DTD>
static cudaError_t launch_dd(const mlp_args *a, int n_sm, cudaStream_t st) {
    if constexpr (DTD == THIN_DTYPE_F8_E4M3)
        if (thin_cuda_mlp_mma & 8) return launch_dd2<DTG, DTD, 4>(a, n_sm, st);
    return launch_dd2<DTG, DTD, 0>(a, n_sm, st);
}

cudaError_t launch_mlp(const mlp_args *in, int n_sm, cudaStream_t st) {
    mlp_args b = *in;
    b.mv.x4 = thin_cuda_mv_x4;
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
