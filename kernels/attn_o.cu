/*
 * attn_o.cu — the decode step's attention and output projection in one kernel, for contexts whose
 * K and V rows fit in a block's shared memory: resid += W_o · attention(q, K, V) for one token.
 *
 * Grid (KV head, row slice of W_o). Block (kh, r) computes the attention of the kh-th group of
 * query heads over every position, then multiplies it by its slice of W_o: rows
 * [r · rows_per, (r + 1) · rows_per), the group's columns, and adds the products into the residual
 * (one float atomic per row and group: the groups' sums meet there). Before waiting for the
 * previous kernel (the q, k, v matvec, which also stores the new K and V rows), a block requests its
 * W_o slice and the K and V rows of the earlier positions into shared memory (cp.async), so that the
 * weights stream in during the q, k, v step; after the wait it adds the newest K/V row and q and
 * works from shared memory only (scores, softmax and the weighted V sum as in the cluster kernel of
 * attention.cu). Each block repeats its group's attention (one per W_o slice): a few microseconds
 * of arithmetic on rows that L2 serves, in exchange for no kernel boundary, no split combine and
 * no separate o-projection launch. Longer contexts take the split attention and the matvec.
 *
 * The W_o slices split the rows of o, the way a tensor-parallel split over GPUs splits them: each
 * GPU would run this kernel on its rows (and its KV heads' columns) and all-reduce the residual.
 * CPU twin: op_attention followed by op_linear and op_add in ops_cpu.c.
 */
#include "attn_dev.cuh"
#include "matvec_dev.cuh"

/* Bytes of shared memory of a launch: the W_o slice, K and V rows for ctx positions, q (then the
 * attention output, in dot16's plane layout), the scores and the V sum's slices. */
static size_t ao_smem(uint32_t rows_per, uint32_t wrow, uint32_t ctx, uint32_t hd, uint32_t G, int kv_dtype) {
    return (size_t)rows_per * wrow + 2 * (size_t)ctx * ad_row_bytes(hd, kv_dtype) +
           (size_t)G * (hd + ctx + (size_t)ad_slices(hd) * hd) * sizeof(float);
}

template <int KDT, int GM, int WDT>
__global__ void __launch_bounds__(AD_THREADS, 1) attn_o_kernel(const ao_args a) {
    pdl_trigger();
    ktrace kt;
    kt.start();
    constexpr uint32_t ESZ = KDT == THIN_DTYPE_BF16 ? 2 : 4;
    constexpr uint32_t WSZ = WDT == THIN_DTYPE_F8_E4M3 ? 1 : 2, WEPV = vec_of<WDT>::epv;
    extern __shared__ __align__(16) uint8_t smb[];
    __shared__ float ml[2 * AD_GMAX];
    const attn_args &t = a.at;
    const uint32_t kh = blockIdx.x, hd = t.head_dim, G = t.n_heads / t.n_kv, gw = G * hd;
    const uint32_t pos0 = (uint32_t)*t.pos, len = pos0 + 1; /* the launcher's graph keeps len <= ctx */
    const uint32_t r0 = blockIdx.y * a.rows_per, nr = min(a.rows_per, a.wo.rows - r0);
    const uint32_t wrow = gw * WSZ, wpr = wrow / 16; /* bytes and 16-byte pieces of a slice row */
    const uint32_t rb = ad_row_bytes(hd, KDT), vpr = hd * ESZ / 16;
    uint8_t *ws = smb, *ks = ws + (size_t)a.rows_per * wrow, *vs = ks + (size_t)a.ctx * rb;
    float *qs = (float *)(vs + (size_t)a.ctx * rb); /* G × hd */
    float *sc = qs + gw;                             /* G × ctx: scores, then weights */
    float *red = sc + (size_t)G * a.ctx;             /* slices × G × hd */
    const uint8_t *wsrc = (const uint8_t *)a.wo.data + (size_t)r0 * a.wo.pitch * WSZ + (size_t)kh * wrow;
    for (uint32_t i = threadIdx.x; i < nr * wpr; i += blockDim.x) {
        const uint32_t r = i / wpr, c = i - r * wpr;
        cp_async16(ws + (size_t)r * wrow + c * 16, wsrc + (size_t)r * a.wo.pitch * WSZ + c * 16);
    }
    const size_t pstride = (size_t)t.n_kv * hd * ESZ; /* cache bytes per position */
    const uint8_t *kc = (const uint8_t *)t.kcache + (size_t)kh * hd * ESZ;
    const uint8_t *vc = (const uint8_t *)t.vcache + (size_t)kh * hd * ESZ;
    for (uint32_t i = threadIdx.x; i < pos0 * vpr; i += blockDim.x) {
        const uint32_t p = i / vpr, c = i - p * vpr;
        cp_async16(ks + (size_t)p * rb + c * 16, kc + (size_t)p * pstride + c * 16);
        cp_async16(vs + (size_t)p * rb + c * 16, vc + (size_t)p * pstride + c * 16);
    }
    asm volatile("cp.async.commit_group;" ::: "memory");
    pdl_wait();
    kt.waited();
    for (uint32_t c = threadIdx.x; c < vpr; c += blockDim.x) {
        *(uint4 *)(ks + (size_t)pos0 * rb + c * 16) = __ldcg((const uint4 *)(kc + (size_t)pos0 * pstride) + c);
        *(uint4 *)(vs + (size_t)pos0 * rb + c * 16) = __ldcg((const uint4 *)(vc + (size_t)pos0 * pstride) + c);
    }
    const float4 *q4 = (const float4 *)(t.q + (size_t)kh * gw);
    for (uint32_t i = threadIdx.x; i < gw / 4; i += blockDim.x) ((float4 *)qs)[i] = __ldcg(q4 + i);
    cp_async_wait_all();
    __syncthreads();
    kt.mark(0);
    ad_scores<KDT, GM>(ks, rb, vpr, qs, hd, G, len, sc, a.ctx);
    __syncthreads();
    ag_softmax(t, len, G, sc, ml); /* t.chunk_max = ctx: the weights replace the scores */
    __syncthreads();
    ad_vsum<KDT, GM>(vs, rb, sc, a.ctx, hd, G, len, red);
    /* the group's attention output, normalised, into qs in dot16's planes (q is no longer read) */
    const uint32_t ns = ad_slices(hd), ps = gw / WEPV * 4;
    for (uint32_t i = threadIdx.x; i < gw; i += blockDim.x) {
        float s = red[i];
        for (uint32_t k = 1; k < ns; k++) s += red[(size_t)k * gw + i];
        qs[x_index<WDT>(i, ps)] = s / ml[2 * (i / hd) + 1];
    }
    __syncthreads();
    kt.mark(1);
    /* the W_o slice: warp w takes rows w, w + warps, ...; lane l its pieces l, l + 32, ... */
    const uint32_t lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    for (uint32_t r = warp; r < nr; r += AD_WARPS) {
        const uint4 *wr = (const uint4 *)(ws + (size_t)r * wrow);
        float s = 0.0f;
        for (uint32_t c = lane; c < wpr; c += 32) s += dot16<WDT>(wr[c], qs + 4 * c, ps);
        s = warp_sum(s);
        if (lane == 0) atomicAdd(a.resid + r0 + r, WDT == THIN_DTYPE_F8_E4M3 ? s * a.wo.scale[r0 + r] : s);
    }
    if (threadIdx.x == 0) kt.end(TRACE_AO, 2);
}

cudaError_t attn_o_trace_arm(trace_rec *recs, unsigned int *n, unsigned int cap) {
    return trace_arm_here(recs, n, cap);
}

/* The launch's geometry: rows of W_o per block (a multiple of the warps): want, or by default
 * about one block per SM over the KV heads. */
static uint32_t ao_rows_per(uint32_t rows, uint32_t n_kv, uint32_t want, int n_sm) {
    uint32_t per = want;
    if (!per) {
        const uint32_t r = n_kv < (uint32_t)n_sm ? (uint32_t)n_sm / n_kv : 1;
        per = (rows + r - 1) / r;
    }
    if (per > rows) per = rows;
    return (per + AD_WARPS - 1) / AD_WARPS * AD_WARPS;
}

uint32_t attn_o_max_ctx(const attn_args *t, const dmat *wo, uint32_t rows_per, int n_sm) {
    if (t->kv_dtype != THIN_DTYPE_BF16 && t->kv_dtype != THIN_DTYPE_F32) return 0;
    if (!t->n_kv || t->n_heads % t->n_kv || t->n_heads / t->n_kv > AD_GMAX) return 0;
    if (t->head_dim % 32 || t->head_dim > AD_DMAX) return 0;
    if (wo->dtype != THIN_DTYPE_BF16 && wo->dtype != THIN_DTYPE_F8_E4M3) return 0;
    if (wo->trans || wo->cols != t->n_heads * t->head_dim || !wo->rows) return 0;
    if (wo->dtype == THIN_DTYPE_F8_E4M3 && !wo->scale) return 0;
    int dev = 0, optin = 0;
    if (cudaGetDevice(&dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev) != cudaSuccess)
        return 0;
    const uint32_t G = t->n_heads / t->n_kv, wrow = G * t->head_dim * (wo->dtype == THIN_DTYPE_F8_E4M3 ? 1 : 2);
    const uint32_t per = ao_rows_per(wo->rows, t->n_kv, rows_per, n_sm);
    const size_t fixed = ao_smem(per, wrow, 0, t->head_dim, G, t->kv_dtype) + 2 * AD_GMAX * sizeof(float);
    const size_t one = ao_smem(0, 0, 1, t->head_dim, G, t->kv_dtype) - ao_smem(0, 0, 0, t->head_dim, G, t->kv_dtype);
    if ((size_t)optin <= fixed) return 0;
    const size_t ctx = ((size_t)optin - fixed) / one / 32 * 32;
    return ctx > 0xffffe0u ? 0xffffe0u : (uint32_t)ctx;
}

template <int KDT, int GM, int WDT>
static cudaError_t launch_ao(const ao_args *a, uint32_t grid_r, cudaStream_t st) {
    const uint32_t G = a->at.n_heads / a->at.n_kv, wrow = G * a->at.head_dim * (WDT == THIN_DTYPE_F8_E4M3 ? 1 : 2);
    const size_t smem = ao_smem(a->rows_per, wrow, a->ctx, a->at.head_dim, G, KDT);
    if (smem > 48 * 1024) {
        cudaError_t e = cudaFuncSetAttribute(attn_o_kernel<KDT, GM, WDT>,
                                             cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
        if (e != cudaSuccess) return e;
    }
    return launch_k(attn_o_kernel<KDT, GM, WDT>, dim3(a->at.n_kv, grid_r), dim3(AD_THREADS), smem, st, *a);
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
                          uint32_t rows_per, int n_sm, cudaStream_t st) {
    ao_args a;
    ctx = (ctx + 31) / 32 * 32; /* float2 stores after the scores */
    a.at = *t;
    a.at.chunk_max = ctx; /* the softmax's row stride */
    a.wo = *wo;
    a.resid = resid;
    a.ctx = ctx;
    a.rows_per = ao_rows_per(wo->rows, t->n_kv, rows_per, n_sm);
    const uint32_t grid_r = (wo->rows + a.rows_per - 1) / a.rows_per;
    const bool f8 = wo->dtype == THIN_DTYPE_F8_E4M3;
    if (t->kv_dtype == THIN_DTYPE_BF16)
        return f8 ? launch_ao_g<THIN_DTYPE_BF16, THIN_DTYPE_F8_E4M3>(&a, grid_r, st)
                  : launch_ao_g<THIN_DTYPE_BF16, THIN_DTYPE_BF16>(&a, grid_r, st);
    return f8 ? launch_ao_g<THIN_DTYPE_F32, THIN_DTYPE_F8_E4M3>(&a, grid_r, st)
              : launch_ao_g<THIN_DTYPE_F32, THIN_DTYPE_BF16>(&a, grid_r, st);
}
