/*
 * attn_o.cu — the decode step's attention and output projection in one kernel, for contexts whose
 * K and V rows fit in the shared memory of a cluster: resid += W_o · attention(q, K, V) for one
 * token.
 *
 * Grid (KV head, row slice of W_o), clusters of C consecutive slices of one KV head (C = 1, 2, 4, 8).
 * Block (kh, r) owns rows [r · rows_per, (r + 1) · rows_per) of W_o, restricted to the columns of
 * the kh-th group of query heads, and one C-th of the positions. Before waiting for the
 * previous kernel (the q, k, v matvec, which also stores the new K and V rows) it requests its W_o
 * slice and the K and V rows of its earlier positions into shared memory (cp.async), so that they
 * stream in during the q, k, v step; after the wait it adds the newest row and q, scores its
 * positions against the group's heads, takes their softmax and weighted V sum (as the cluster
 * kernel of attention.cu does), and the cluster combines the blocks' partial results through
 * distributed shared memory, every block for the whole group. Then each warp multiplies rows of
 * the block's W_o slice by that output and adds them into the residual (a float atomic per row and
 * group: the groups' sums meet there). Each cluster repeats its group's attention: a few
 * microseconds of arithmetic, in exchange for no kernel boundary, no combine through global memory
 * and no separate o-projection launch. Longer contexts take the split attention and the matvec.
 *
 * The W_o slices split the rows of o, the way a tensor-parallel split over GPUs splits them: each
 * GPU would run this kernel on its rows (and its KV heads' columns) and all-reduce the residual.
 * CPU twin: op_attention followed by op_linear and op_add in ops_cpu.c.
 */
#include "attn_dev.cuh"
#include "matvec_dev.cuh"

#include <cooperative_groups.h>

namespace cg = cooperative_groups;

/* Positions per block of a cluster of c blocks for contexts up to ctx (a multiple of c × 32). */
__host__ __device__ __forceinline__ uint32_t ao_chunk_cap(uint32_t ctx, uint32_t c) { return ctx / c; }

/* Bytes of shared memory of a launch: the W_o slice, K and V rows for chunk positions, q (then the
 * attention output, in dot16's plane layout), the scores and the V sum's slices. */
static size_t ao_smem(uint32_t rows_per, uint32_t wrow, uint32_t chunk, uint32_t hd, uint32_t G, int kv_dtype) {
    return (size_t)rows_per * wrow + 2 * (size_t)chunk * ad_row_bytes(hd, kv_dtype) +
           (size_t)G * (hd + chunk + (size_t)ad_slices(hd) * hd) * sizeof(float);
}

/* Rows of W_o a warp takes at once (their dot products and reductions interleave). */
#define AO_ROWS 4

template <int KDT, int GM, int WDT>
__global__ void __launch_bounds__(AD_THREADS, 1) attn_o_kernel(const ao_args a) {
    pdl_trigger();
    ktrace kt;
    kt.start();
    constexpr uint32_t ESZ = KDT == THIN_DTYPE_BF16 ? 2 : 4;
    constexpr uint32_t WSZ = WDT == THIN_DTYPE_F8_E4M3 ? 1 : 2, WEPV = vec_of<WDT>::epv;
    extern __shared__ __align__(16) uint8_t smb[];
    __shared__ float ml[2 * AD_GMAX];
    cg::cluster_group cl = cg::this_cluster();
    const attn_args &t = a.at;
    const uint32_t kh = blockIdx.x, hd = t.head_dim, G = t.n_heads / t.n_kv, gw = G * hd;
    const uint32_t C = a.csize, cap = ao_chunk_cap(a.ctx, C), rank = blockIdx.y % C;
    const uint32_t pos0 = (uint32_t)*t.pos, npos = pos0 + 1; /* the graph keeps npos <= ctx */
    const uint32_t chunk = (npos + C - 1) / C;
    const uint32_t start = rank * chunk, end = min(npos, start + chunk), len = start < end ? end - start : 0;
    const uint32_t r0 = blockIdx.y * a.rows_per, nr = r0 < a.wo.rows ? min(a.rows_per, a.wo.rows - r0) : 0;
    const uint32_t wrow = gw * WSZ, wpr = wrow / 16; /* bytes and 16-byte pieces of a slice row */
    const uint32_t rb = ad_row_bytes(hd, KDT), vpr = hd * ESZ / 16;
    uint8_t *ws = smb, *ks = ws + (size_t)a.rows_per * wrow, *vs = ks + (size_t)cap * rb;
    float *qs = (float *)(vs + (size_t)cap * rb); /* G × hd: q, then the attention output */
    float *sc = qs + gw;                           /* G × cap: scores, then weights */
    float *red = sc + (size_t)G * cap;             /* slices × G × hd; then this block's sums */
    const uint8_t *wsrc = (const uint8_t *)a.wo.data + (size_t)r0 * a.wo.pitch * WSZ + (size_t)kh * wrow;
    for (uint32_t i = threadIdx.x; i < nr * wpr; i += blockDim.x) {
        const uint32_t r = i / wpr, c = i - r * wpr;
        cp_async16(ws + (size_t)r * wrow + c * 16, wsrc + (size_t)r * a.wo.pitch * WSZ + c * 16);
    }
    const size_t pstride = (size_t)t.n_kv * hd * ESZ; /* cache bytes per position */
    const uint8_t *kc = (const uint8_t *)t.kcache + (size_t)kh * hd * ESZ;
    const uint8_t *vc = (const uint8_t *)t.vcache + (size_t)kh * hd * ESZ;
    const uint32_t pre = min(end, pos0) > start ? min(end, pos0) - start : 0; /* rows before *pos */
    for (uint32_t i = threadIdx.x; i < pre * vpr; i += blockDim.x) {
        const uint32_t p = i / vpr, c = i - p * vpr;
        cp_async16(ks + (size_t)p * rb + c * 16, kc + (size_t)(start + p) * pstride + c * 16);
        cp_async16(vs + (size_t)p * rb + c * 16, vc + (size_t)(start + p) * pstride + c * 16);
    }
    asm volatile("cp.async.commit_group;" ::: "memory");
    pdl_wait();
    kt.waited();
    if (pos0 >= start && pos0 < end) { /* the newest K and V rows (the previous kernel wrote them) */
        const uint32_t p = pos0 - start;
        for (uint32_t c = threadIdx.x; c < vpr; c += blockDim.x) {
            *(uint4 *)(ks + (size_t)p * rb + c * 16) = __ldcg((const uint4 *)(kc + (size_t)pos0 * pstride) + c);
            *(uint4 *)(vs + (size_t)p * rb + c * 16) = __ldcg((const uint4 *)(vc + (size_t)pos0 * pstride) + c);
        }
    }
    const float4 *q4 = (const float4 *)(t.q + (size_t)kh * gw);
    if (len)
        for (uint32_t i = threadIdx.x; i < gw / 4; i += blockDim.x) ((float4 *)qs)[i] = __ldcg(q4 + i);
    cp_async_wait_all();
    __syncthreads();
    kt.mark(0);
    /* this block's positions: scores, softmax (ml: max and sum, (-inf, 0) when empty), V sums */
    ad_scores<KDT, GM>(ks, rb, vpr, qs, hd, G, len, sc, cap);
    __syncthreads();
    ag_softmax(t, len, G, sc, ml); /* t.chunk_max = cap: the weights replace the scores */
    __syncthreads();
    ad_vsum<KDT, GM>(vs, rb, sc, cap, hd, G, len, red);
    const uint32_t ns = ad_slices(hd), ps = gw / WEPV * 4;
    for (uint32_t i = threadIdx.x; i < gw; i += blockDim.x) {
        float s = red[i];
        for (uint32_t k = 1; k < ns; k++) s += red[(size_t)k * gw + i];
        red[i] = s; /* each i is read and written by one thread only */
    }
    cl.sync(); /* every block's sums and (max, sum) are ready */
    /* the whole group's output, combined over the cluster's blocks, into qs in dot16's planes */
    for (uint32_t i = threadIdx.x; i < gw; i += blockDim.x) {
        const uint32_t g = i / hd;
        float mb[AD_CLUSTER], lb[AD_CLUSTER], rv[AD_CLUSTER];
#pragma unroll
        for (uint32_t b = 0; b < AD_CLUSTER; b++) {
            mb[b] = -INFINITY, lb[b] = 0.0f, rv[b] = 0.0f;
            if (b < C) {
                const float *mlb = cl.map_shared_rank(ml, b);
                mb[b] = mlb[2 * g];
                lb[b] = mlb[2 * g + 1];
                rv[b] = cl.map_shared_rank(red, b)[i];
            }
        }
        float M = -INFINITY;
#pragma unroll
        for (uint32_t b = 0; b < AD_CLUSTER; b++) M = fmaxf(M, mb[b]);
        float L = 0.0f, o = 0.0f;
#pragma unroll
        for (uint32_t b = 0; b < AD_CLUSTER; b++) {
            if (lb[b] == 0.0f) continue; /* a block without positions */
            const float f = expf(mb[b] - M);
            L += lb[b] * f;
            o += rv[b] * f;
        }
        qs[x_index<WDT>(i, ps)] = o / L;
    }
    cl.sync(); /* no block reads another's shared memory after this; qs complete */
    kt.mark(1);
    /* the W_o slice: warp w takes rows w, w + warps, ..., AO_ROWS at a time; lane l its pieces
     * l, l + 32, ... of each */
    const uint32_t lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    for (uint32_t rw = warp; rw < nr; rw += AO_ROWS * AD_WARPS) {
        float s[AO_ROWS];
#pragma unroll
        for (int k = 0; k < AO_ROWS; k++) {
            const uint32_t r = rw + k * AD_WARPS;
            const uint4 *wr = (const uint4 *)(ws + (size_t)r * wrow);
            s[k] = 0.0f;
            if (r < nr)
                for (uint32_t c = lane; c < wpr; c += 32) s[k] += dot16<WDT>(wr[c], qs + 4 * c, ps);
        }
#pragma unroll
        for (int o = 16; o > 0; o >>= 1)
#pragma unroll
            for (int k = 0; k < AO_ROWS; k++) s[k] += __shfl_xor_sync(0xffffffffu, s[k], o);
        if (lane < AO_ROWS) {
            float y = s[0];
#pragma unroll
            for (int k = 1; k < AO_ROWS; k++) y = lane == (uint32_t)k ? s[k] : y;
            const uint32_t r = rw + lane * AD_WARPS;
            if (r < nr) atomicAdd(a.resid + r0 + r, WDT == THIN_DTYPE_F8_E4M3 ? y * a.wo.scale[r0 + r] : y);
        }
    }
    if (threadIdx.x == 0) kt.end(TRACE_AO, 2);
}

cudaError_t attn_o_trace_arm(trace_rec *recs, unsigned int *n, unsigned int cap) {
    return trace_arm_here(recs, n, cap);
}

/* The launch's geometry: rows of W_o per block (a multiple of the warps): want, or by default
 * about one block per SM over the KV heads; and the row slices, whole clusters of them (blocks
 * past the last row only take their share of the positions). */
static uint32_t ao_rows_per(uint32_t rows, uint32_t n_kv, uint32_t want, int n_sm) {
    uint32_t per = want;
    if (!per) {
        const uint32_t r = n_kv < (uint32_t)n_sm ? (uint32_t)n_sm / n_kv : 1;
        per = (rows + r - 1) / r;
    }
    if (per > rows) per = rows;
    return (per + AD_WARPS - 1) / AD_WARPS * AD_WARPS;
}
static uint32_t ao_slices(uint32_t rows, uint32_t rows_per, uint32_t c) {
    return ((rows + rows_per - 1) / rows_per + c - 1) / c * c;
}

uint32_t attn_o_max_ctx(const attn_args *t, const dmat *wo, uint32_t rows_per, uint32_t csize, int n_sm) {
    if (csize != 1 && csize != 2 && csize != 4 && csize != AD_CLUSTER) return 0;
    if (t->kv_dtype != THIN_DTYPE_BF16 && t->kv_dtype != THIN_DTYPE_F32) return 0;
    if (!t->n_kv || t->n_heads % t->n_kv || t->n_heads / t->n_kv > AD_GMAX) return 0;
    if (t->head_dim % 32 || t->head_dim > AD_DMAX) return 0;
    if (wo->dtype != THIN_DTYPE_BF16 && wo->dtype != THIN_DTYPE_F8_E4M3) return 0;
    if (wo->trans || wo->cols != t->n_heads * t->head_dim || !wo->rows) return 0;
    if (wo->dtype == THIN_DTYPE_F8_E4M3 && !wo->scale) return 0;
    int dev = 0, optin = 0, clu = 0;
    if (cudaGetDevice(&dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&clu, cudaDevAttrClusterLaunch, dev) != cudaSuccess || !clu)
        return 0;
    if (cudaGetDevice(&dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev) != cudaSuccess)
        return 0;
    const uint32_t G = t->n_heads / t->n_kv, wrow = G * t->head_dim * (wo->dtype == THIN_DTYPE_F8_E4M3 ? 1 : 2);
    const uint32_t per = ao_rows_per(wo->rows, t->n_kv, rows_per, n_sm);
    const size_t fixed = ao_smem(per, wrow, 0, t->head_dim, G, t->kv_dtype) + 2 * AD_GMAX * sizeof(float);
    const size_t one = ao_smem(0, 0, 1, t->head_dim, G, t->kv_dtype) - ao_smem(0, 0, 0, t->head_dim, G, t->kv_dtype);
    if ((size_t)optin <= fixed) return 0;
    const size_t chunk = ((size_t)optin - fixed) / one / 32 * 32; /* positions per block */
    return chunk > 0xfffe0u ? 0xfffe0u * csize : (uint32_t)chunk * csize;
}

template <int KDT, int GM, int WDT>
static cudaError_t launch_ao(const ao_args *a, uint32_t grid_r, cudaStream_t st) {
    const uint32_t G = a->at.n_heads / a->at.n_kv, wrow = G * a->at.head_dim * (WDT == THIN_DTYPE_F8_E4M3 ? 1 : 2);
    const size_t smem = ao_smem(a->rows_per, wrow, ao_chunk_cap(a->ctx, a->csize), a->at.head_dim, G, KDT);
    if (smem > 48 * 1024) {
        cudaError_t e = cudaFuncSetAttribute(attn_o_kernel<KDT, GM, WDT>,
                                             cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
        if (e != cudaSuccess) return e;
    }
    return launch_kc(attn_o_kernel<KDT, GM, WDT>, dim3(a->at.n_kv, grid_r), dim3(AD_THREADS), smem, st,
                     a->csize > 1 ? dim3(1, a->csize, 1) : dim3(0, 0, 0), *a);
}

template <int KDT, int WDT>
static cudaError_t launch_ao_g(const ao_args *a, uint32_t grid_r, cudaStream_t st) {
    const uint32_t g = a->at.n_heads / a->at.n_kv;
    if (g <= 1) return launch_ao<KDT, 1, WDT>(a, grid_r, st);
    if (g <= 2) return launch_ao<KDT, 2, WDT>(a, grid_r, st);
    if (g <= 4) return launch_ao<KDT, 4, WDT>(a, grid_r, st);
    return launch_ao<KDT, 8, WDT>(a, grid_r, st);
}

cudaError_t launch_attn_o(const attn_args *t, const dmat *wo, float *resid, uint32_t ctx,
                          uint32_t rows_per, uint32_t csize, int n_sm, cudaStream_t st) {
    ao_args a;
    ctx = (ctx + 32 * csize - 1) / (32 * csize) * (32 * csize); /* whole 32s a block */
    a.at = *t;
    a.at.chunk_max = ao_chunk_cap(ctx, csize); /* the softmax's row stride */
    a.csize = csize;
    a.wo = *wo;
    a.resid = resid;
    a.ctx = ctx;
    a.rows_per = ao_rows_per(wo->rows, t->n_kv, rows_per, n_sm);
    const uint32_t grid_r = ao_slices(wo->rows, a.rows_per, csize);
    const bool f8 = wo->dtype == THIN_DTYPE_F8_E4M3;
    if (t->kv_dtype == THIN_DTYPE_BF16)
        return f8 ? launch_ao_g<THIN_DTYPE_BF16, THIN_DTYPE_F8_E4M3>(&a, grid_r, st)
                  : launch_ao_g<THIN_DTYPE_BF16, THIN_DTYPE_BF16>(&a, grid_r, st);
    return f8 ? launch_ao_g<THIN_DTYPE_F32, THIN_DTYPE_F8_E4M3>(&a, grid_r, st)
              : launch_ao_g<THIN_DTYPE_F32, THIN_DTYPE_BF16>(&a, grid_r, st);
}
