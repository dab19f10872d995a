/*
 * matvec_dev.cuh — device pieces of the one-token matrix-vector product shared by the per-op
 * matvec kernel (matvec.cu) and the persistent decode kernel (stream.cu): the shared-memory layout
 * of the input vector and its staging (optionally through a fused RMSNorm), the 16-byte dot
 * products of every weight dtype, and the rope / KV-store epilogue of the q, k, v rows.
 */
#ifndef THIN_MATVEC_DEV_CUH
#define THIN_MATVEC_DEV_CUH

#include "cuda_common.cuh"

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
 * in the plane layout of dot16 (planes pitch / EPV * 4 floats apart). x comes through L2 (other
 * blocks wrote it), MV_XPRE loads in flight per thread; with V4, N4 loads of 16 bytes when
 * aligned (the persistent kernel, whose x loads wait behind the weight stream, and the per-op
 * matvec for long rows, where they save rounds of latency; for 2048-element rows they measured no
 * faster, bench/decode-variants.sh). */
template <int DT, bool V4 = false, int N4 = MV_XPRE>
__device__ __forceinline__ void stage_x(float *xs, const mv_args &a, uint32_t cols, uint32_t pitch,
                                        float *red, const float (&nw)[MV_XPRE]) {
    const uint32_t ps = pitch / vec_of<DT>::epv * 4;
    float ss = 0.0f;
    if (V4 && (cols & 3) == 0 && (pitch & 3) == 0 && ((uintptr_t)a.x & 15) == 0) {
        const uint32_t n4 = pitch / 4, c4 = cols / 4;
        for (uint32_t i0 = threadIdx.x; i0 < n4; i0 += N4 * blockDim.x) {
            float4 v[N4];
#pragma unroll
            for (int k = 0; k < N4; k++) {
                const uint32_t i = i0 + k * blockDim.x;
                v[k] = i < c4 ? __ldcg((const float4 *)a.x + i) : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
            }
#pragma unroll
            for (int k = 0; k < N4; k++) {
                const uint32_t i = i0 + k * blockDim.x;
                if (i < n4) { /* four consecutive elements: one float4 of a plane */
                    *(float4 *)&xs[x_index<DT>(4 * i, ps)] = v[k];
                    ss += v[k].x * v[k].x + v[k].y * v[k].y + v[k].z * v[k].z + v[k].w * v[k].w;
                }
            }
        }
    } else {
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
    }
    if (a.norm_w) { /* block_sum's barriers also order the staging writes before the rewrite */
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

/* The rotation (cos, sin) of rows (rr, rr + half) of segment s at *pos, or (1, 0) when the
 * segment has no frequency table. Computed as soon as the rows are known, so that its double
 * precision sincos runs while the row's weights are in flight. */
__device__ __forceinline__ float2 rope_rot(const mv_args &a, int s, uint32_t rr) {
    const mv_seg &g = a.seg[s];
    if (!g.freq) return make_float2(1.0f, 0.0f);
    const uint32_t i = (uint32_t)((g.w.row0 + rr) % a.head_dim);
    double sn, cs;
    sincos((double)*a.pos * g.freq[i], &sn, &cs);
    return make_float2((float)cs * g.rope_m, (float)sn * g.rope_m);
}

/* A dual unit r's second row: r + dual_half(a) (when below the rows); dual units: dual_half(a). */
__host__ __device__ __forceinline__ uint32_t dual_half(const mv_args &a) {
    return (a.seg[0].w.rows + 1) / 2;
}

/* The epilogue's operands of one unit, fetched by lane 0 while the unit's weights are in flight
 * rather than after its reduction: the FP8 row scales (1 when none), the residual rows (single
 * rows with a residual add; only after the dependency wait) and the position (rope). */
template <int NR>
struct mv_epi {
    float sc[NR];
    float res[NR];
    int32_t pos;
};

template <int DT, int NR>
__device__ __forceinline__ void epi_weights(const mv_args &a, int s, uint32_t rr, mv_epi<NR> &e) {
#pragma unroll
    for (int i = 0; i < NR; i++) e.sc[i] = 1.0f, e.res[i] = 0.0f;
    e.pos = 0;
    if (NR == 2 && a.rope) e.pos = *a.pos;
    if (DT != THIN_DTYPE_F8_E4M3) return;
    if (NR == 2 && a.dual) {
        const uint32_t half = dual_half(a);
        if (a.seg[0].w.scale) {
            e.sc[0] = a.seg[0].w.scale[rr];
            if (rr + half < a.seg[0].w.rows) e.sc[1] = a.seg[0].w.scale[rr + half];
        }
    } else if (NR == 2 && a.rope) {
        const float *sc = a.seg[s].w.scale;
        if (sc) e.sc[0] = sc[rr], e.sc[1] = sc[rr + a.head_dim / 2];
    } else if (NR == 2) { /* gate/up pairs */
        if (a.seg[0].w.scale) e.sc[0] = a.seg[0].w.scale[rr];
        if (a.seg[1].w.scale) e.sc[1] = a.seg[1].w.scale[rr];
    } else if (a.seg[s].w.scale) {
        e.sc[0] = a.seg[s].w.scale[rr];
    }
}

/* The residual row of a single-row unit; written by earlier kernels, so read after the wait. */
template <int NR>
__device__ __forceinline__ void epi_resid(const mv_args &a, uint32_t rr, mv_epi<NR> &e) {
    if (!a.resid) return;
    if constexpr (NR == 1) {
        e.res[0] = __ldcg(a.resid + rr);
    } else if (a.dual) {
        const uint32_t half = dual_half(a);
        e.res[0] = __ldcg(a.resid + rr);
        if (rr + half < a.seg[0].w.rows) e.res[1] = __ldcg(a.resid + rr + half);
    }
}

/* Row r of segment s's bias (0 without one). */
__device__ __forceinline__ float bias_of(const mv_args &a, int s, uint32_t r) {
    return a.bias[s] ? load_elem(a.bias[s], a.bias_dtype[s], r) : 0.0f;
}

/* Rope epilogue: rows (rr, rr + half) of segment s (scaled by e; with BIAS, plus the segment's
 * bias), rotated by rot (as op_rope), written out and into the segment's cache row e.pos. */
template <int DT, bool BIAS = false>
__device__ __forceinline__ void store_rope(const mv_args &a, int s, uint32_t rr, float x0, float x1,
                                           float2 rot, const mv_epi<2> &e) {
    const mv_seg &g = a.seg[s];
    const uint32_t half = a.head_dim / 2;
    x0 *= e.sc[0];
    x1 *= e.sc[1];
    if constexpr (BIAS) {
        x0 += bias_of(a, s, rr);
        x1 += bias_of(a, s, rr + half);
    }
    float y0 = x0, y1 = x1;
    if (g.freq) {
        y0 = x0 * rot.x - x1 * rot.y;
        y1 = x0 * rot.y + x1 * rot.x;
    }
    g.out[rr] = y0;
    g.out[rr + half] = y1;
    if (g.cache) {
        const size_t o = (size_t)e.pos * g.w.rows + rr;
        store_kv(g.cache, a.kv_dtype, o, y0);
        store_kv(g.cache, a.kv_dtype, o + half, y1);
    }
}

/* Row pointers of logical row (unit) r: the pair's gate and up rows; with rope, rows a and
 * a + head_dim/2 of one head of segment *seg; else the segment's row. *rr: row a in the segment. */
template <int NR>
__device__ __forceinline__ void rows_of(const mv_args &a, uint32_t r, const uint4 **rows, int *seg,
                                        uint32_t *rr) {
    int s = 0;
    if constexpr (NR == 2) {
        uint32_t row = r, off = 0;
        if (a.dual) { /* rows r and r + half (past the end, the second pointer repeats the first) */
            const uint32_t half = dual_half(a);
            rows[0] = row_ptr(a.seg[0].w, r);
            rows[1] = row_ptr(a.seg[0].w, r + half < a.seg[0].w.rows ? r + half : r);
            *seg = 0;
            *rr = r;
            return;
        }
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

/* One single row's result y (scaled; with BIAS, its bias added here) into row r of segment s's
 * output, and res + y into the residual when it has one. */
template <bool BIAS = false>
__device__ __forceinline__ void store_single(const mv_args &a, int s, uint32_t r, float y,
                                             float res) {
    if constexpr (BIAS) y += bias_of(a, s, r);
    a.seg[s].out[r] = y;
    if (a.resid) a.resid[r] = res + y;
}

/* The unit's results acc (NR sums) through its epilogue into the outputs (BIAS: see mv_args). */
template <int DT, int NR, bool BIAS = false>
__device__ __forceinline__ void store_row(const mv_args &a, int s, uint32_t rr, const float *acc,
                                          float2 rot, const mv_epi<NR> &e) {
    if constexpr (NR == 2) {
        if (a.dual) {
            const uint32_t half = dual_half(a);
            store_single<BIAS>(a, 0, rr, acc[0] * e.sc[0], e.res[0]);
            if (rr + half < a.seg[0].w.rows)
                store_single<BIAS>(a, 0, rr + half, acc[1] * e.sc[1], e.res[1]);
        } else if (a.rope) {
            store_rope<DT, BIAS>(a, s, rr, acc[0], acc[1], rot, e);
        } else {
            const float g = acc[0] * e.sc[0], u = acc[1] * e.sc[1];
            a.seg[1].out[rr] = u;
            a.seg[0].out[rr] = silu_f(g) * u;
        }
        return;
    }
    store_single<BIAS>(a, s, rr, acc[0] * e.sc[0], e.res[0]);
}

#define MV_WARPS 8  /* warps per block of the per-op matvec and the MLP kernel */
#define MV_UNROLL 8 /* 16-byte loads per lane and row in one batch */

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

/* The norm weights preloaded, the wait for the previous kernel (timed by kt, which the kernel
 * started as it began), then x staged (16-byte loads for x longer than a.x4 elements: fewer
 * rounds of L2 latency for long rows). */
template <int DT>
__device__ __forceinline__ void wait_and_stage(float *xs, const mv_args &a, float *red, ktrace &kt) {
    float nw[MV_XPRE];
    preload_norm(a, a.seg[0].w.cols, nw);
    kt.mark(1); /* matvecs: the norm weights asked (the MLP kernel's later marks overwrite it) */
    pdl_wait();
    kt.waited();
    const uint32_t cols = a.seg[0].w.cols, pitch = a.seg[0].w.pitch;
    if (a.x4 && cols > a.x4) stage_x<DT, true, MV_XPRE / 2>(xs, a, cols, pitch, red, nw);
    else stage_x<DT>(xs, a, cols, pitch, red, nw);
}

#endif /* THIN_MATVEC_DEV_CUH */
