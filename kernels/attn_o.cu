/*
 * attn_o.cu — the decode step's attention and output projection as one kernel, for contexts up to
 * ATTN_O_CLUSTER × attn_args.chunk_max positions (longer ones take the cluster attention kernel
 * of attention.cu and the o-projection's matvec). CPU twins: op_attention, op_linear and op_add
 * (ops_cpu.c).
 *
 * Grid (ATTN_O_CLUSTER, n_heads): a thread block cluster per query head h; block r of it takes
 * positions [r·chunk, (r + 1)·chunk), chunk = ceil((*pos + 1) / ATTN_O_CLUSTER), and rows
 * [r·rows_per, (r + 1)·rows_per) of the o-projection.
 *  - Before the dependency wait (read-only data only) it requests with cp.async the K and V rows of
 *    its positions before *pos (KV head h / group, written by earlier tokens) and its o rows
 *    restricted to head h's head_dim columns: the o-projection's bytes arrive while the q/k/v
 *    step still runs, instead of in a kernel of their own after the attention.
 *  - After the wait: the newest K/V row (the q/k/v step stored it) and q. Lane l of warp w scores
 *    position 32w + l of the block's span, the warp takes the softmax of its 32 positions with
 *    shuffles and sums their weighted V rows (head_dim / 32 dims a lane), and the block combines
 *    its warps into (max, sum of exp, unnormalised output).
 *  - One cluster barrier; each block combines the cluster's partials, read through distributed
 *    shared memory, into the head's output (block 0 also writes it to the attention output).
 *  - Its o rows times that output (a thread a row), added into the residual with float4 atomics:
 *    every head adds into every row, in no fixed order.
 * A split over devices keeps this shape: a device's heads are its columns of o, and its sums go
 * into a partial residual that the all-reduce adds up.
 */
#include <cooperative_groups.h>

#include "attn_dev.cuh"
#include "matvec_dev.cuh"

namespace cg = cooperative_groups;

#define AO_WARPS 8u
#define AO_THREADS (AO_WARPS * 32u)
#define AO_CHUNK_MAX (32u * AO_WARPS) /* positions per block: a warp per 32 */

__device__ __forceinline__ void cluster_arrive() {
    asm volatile("barrier.cluster.arrive.release.aligned;" ::: "memory");
}
__device__ __forceinline__ void cluster_wait() {
    asm volatile("barrier.cluster.wait.acquire.aligned;" ::: "memory");
}

/* o rows per block: the rows over the cluster, rounded up to whole float4s. */
static __host__ __device__ inline uint32_t ao_rows_per(uint32_t rows) {
    return ((rows + ATTN_O_CLUSTER - 1) / ATTN_O_CLUSTER + 3) / 4 * 4;
}

/* Byte offsets of the dynamic shared memory: o rows, K rows, V rows (chunk of each), q, the warps'
 * sums, the head's output (in the matvec's float4 planes), the block's partial (head_dim sums,
 * max, sum of exp), the o products. The o rows lie 16 bytes longer than their head_dim columns,
 * so that the 16-byte reads of consecutive rows by the lanes of a warp fall in distinct banks. */
struct ao_layout {
    uint32_t w, k, v, q, red, oh, part, ys, total;
};
static __host__ __device__ inline ao_layout ao_layout_of(uint32_t hd, int kv_dtype, int o_dtype, uint32_t rows_per,
                                                         uint32_t chunk) {
    ao_layout l;
    const uint32_t wrb = hd * (o_dtype == THIN_DTYPE_F8_E4M3 ? 1u : 2u) + 16; /* padded: see below */
    l.w = 0;
    l.k = rows_per * wrb;
    l.v = l.k + chunk * ah_krow(hd, kv_dtype);
    l.q = l.v + chunk * hd * (kv_dtype == THIN_DTYPE_BF16 ? 2u : 4u);
    l.red = l.q + hd * 4;
    l.oh = l.red + AO_WARPS * hd * 4;
    l.part = l.oh + hd * 4;
    l.ys = l.part + (hd + 4) * 4;
    l.total = l.ys + rows_per * 4;
    return l;
}

/* At most 64 registers a thread (four blocks' worth per SM), so that a block fits beside a q/k/v
 * matvec block (12 warps of up to 128 registers) and starts, and requests its rows, while that
 * step still runs. */
template <int KDT, int WDT, int DPL>
__global__ void __launch_bounds__(AO_THREADS, 4) attn_o_kernel(const attn_o_args p) {
    pdl_trigger();
    ktrace kt;
    kt.start();
    constexpr uint32_t HD = 32 * DPL, EPV = kv_epv<KDT>::n, ESZ = KDT == THIN_DTYPE_BF16 ? 2 : 4;
    constexpr uint32_t WSZ = WDT == THIN_DTYPE_F8_E4M3 ? 1 : 2, WRB = HD * WSZ, VPR = WRB / 16, WRP = WRB + 16;
    constexpr uint32_t PS = HD / vec_of<WDT>::epv * 4; /* plane stride of the head's output */
    extern __shared__ __align__(16) uint8_t smb[];
    __shared__ float mlw[2 * AO_WARPS];
    const attn_args &a = p.a;
    cg::cluster_group cl = cg::this_cluster();
    const uint32_t rank = blockIdx.x, h = blockIdx.y, kh = h / (a.n_heads / a.n_kv);
    const uint32_t tid = threadIdx.x, lane = tid & 31, w = tid >> 5;
    const uint32_t pos0 = (uint32_t)*a.pos, npos = pos0 + 1;
    const uint32_t chunk = (npos + ATTN_O_CLUSTER - 1) / ATTN_O_CLUSTER;
    if (chunk > a.chunk_max) return; /* never, by the caller's limit (the same for the whole grid) */
    const uint32_t start = min(npos, rank * chunk), end = min(npos, start + chunk), len = end - start;
    const uint32_t r0 = min(p.o.rows, rank * p.rows_per), nr = min(p.o.rows - r0, p.rows_per);
    const ao_layout L = ao_layout_of(HD, KDT, WDT, p.rows_per, a.chunk_max);
    uint8_t *ws = smb + L.w, *ks = smb + L.k, *vs = smb + L.v;
    float *qs = (float *)(smb + L.q), *red = (float *)(smb + L.red), *oh = (float *)(smb + L.oh);
    float *part = (float *)(smb + L.part), *ys = (float *)(smb + L.ys);
    /* K/V rows before *pos (one commit group), then the o rows (another) */
    const uint32_t krb = ah_krow(HD, KDT), vrb = HD * ESZ, vpr = vrb / 16;
    const size_t pstride = (size_t)a.n_kv * HD * ESZ; /* cache bytes per position */
    const uint8_t *kc = (const uint8_t *)a.kcache + (size_t)kh * HD * ESZ;
    const uint8_t *vc = (const uint8_t *)a.vcache + (size_t)kh * HD * ESZ;
    const uint32_t pre = min(end, pos0) > start ? min(end, pos0) - start : 0;
    ad_stage_rows(ks, krb, vs, vrb, kc, vc, pstride, start, pre, vpr, AO_THREADS);
    {
        const size_t pb = (size_t)p.o.pitch * WSZ;
        const uint8_t *src = (const uint8_t *)p.o.data + (size_t)r0 * pb + (size_t)h * WRB;
        for (uint32_t i = tid; i < nr * VPR; i += AO_THREADS) {
            const uint32_t r = i / VPR, c = i - r * VPR;
            cp_async16(ws + r * WRP + c * 16, src + r * pb + c * 16);
        }
        asm volatile("cp.async.commit_group;" ::: "memory");
    }
    /* this thread's four rows of the residual add (nr <= 4 * AO_THREADS): their FP8 scales */
    float4 sc4 = make_float4(1.0f, 1.0f, 1.0f, 1.0f);
    if (WDT == THIN_DTYPE_F8_E4M3 && 4 * tid < nr) {
        const float *sp = p.o.scale + r0 + 4 * tid;
        sc4 = make_float4(__ldg(sp), __ldg(sp + 1), __ldg(sp + 2), __ldg(sp + 3));
    }
    pdl_wait();
    kt.waited();
    if (pos0 >= start && pos0 < end)
        ad_load_row(ks + (pos0 - start) * krb, vs + (pos0 - start) * vrb, kc + (size_t)pos0 * pstride,
                    vc + (size_t)pos0 * pstride, vpr, AO_THREADS);
    const float4 *q4 = (const float4 *)(a.q + (size_t)h * HD);
    for (uint32_t i = tid; i < HD / 4; i += AO_THREADS) ((float4 *)qs)[i] = __ldcg(q4 + i);
    asm volatile("cp.async.wait_group 1;" ::: "memory"); /* the K/V rows; the o rows may still come */
    __syncthreads();
    kt.mark(0);
    /* the block's positions: warp w scores 32w .. 32w + 31 of its span, one lane each */
    const uint32_t nact = (len + 31) / 32;
    if (w < nact) {
        const uint32_t pp = 32 * w + lane, here = min(32u, len - 32 * w);
        float s = -INFINITY;
        if (pp < len) {
            float s0 = 0.0f, s1 = 0.0f;
            const uint8_t *kr = ks + pp * krb;
#pragma unroll 4
            for (uint32_t c = 0; c < vpr; c++) {
                float f[EPV];
                kv_unpack<KDT>(*(const uint4 *)(kr + c * 16), f);
                const float4 *qq = (const float4 *)(qs + c * EPV);
#pragma unroll
                for (int e = 0; e < (int)EPV; e += 4) {
                    const float4 q = qq[e / 4];
                    s0 = fmaf(q.x, f[e], s0);
                    s1 = fmaf(q.y, f[e + 1], s1);
                    s0 = fmaf(q.z, f[e + 2], s0);
                    s1 = fmaf(q.w, f[e + 3], s1);
                }
            }
            s = (s0 + s1) * rsqrtf((float)HD);
        }
        const float m = warp_max(s);
        const float e = pp < len ? expf(s - m) : 0.0f;
        const float l = warp_sum(e);
        float acc[DPL];
#pragma unroll
        for (int i = 0; i < DPL; i++) acc[i] = 0.0f;
        const uint8_t *vr = vs + (size_t)32 * w * vrb;
#pragma unroll 4
        for (uint32_t j = 0; j < here; j++) {
            const float wj = __shfl_sync(0xffffffffu, e, j);
            float v[DPL];
            ah_vload<KDT, DPL>(vr + j * vrb, lane, v);
#pragma unroll
            for (int i = 0; i < DPL; i++) acc[i] = fmaf(wj, v[i], acc[i]);
        }
#pragma unroll
        for (int i = 0; i < DPL; i++) red[w * HD + lane * DPL + i] = acc[i];
        if (lane == 0) mlw[2 * w] = m, mlw[2 * w + 1] = l;
    }
    __syncthreads();
    /* the block's partial: its sums against its own max (an empty span: max -inf, sum 0) */
    for (uint32_t d = tid; d < HD; d += AO_THREADS) {
        float M = -INFINITY;
        for (uint32_t k = 0; k < nact; k++) M = fmaxf(M, mlw[2 * k]);
        float Ls = 0.0f, o = 0.0f;
        for (uint32_t k = 0; k < nact; k++) {
            const float f = expf(mlw[2 * k] - M);
            Ls += mlw[2 * k + 1] * f;
            o += red[k * HD + d] * f;
        }
        part[d] = o;
        if (d == 0) part[HD] = M, part[HD + 1] = Ls;
    }
    kt.mark(1);
    cluster_arrive();
    cluster_wait(); /* every block's partial is ready */
    /* the head's output from the cluster's blocks that have positions */
    const uint32_t n_act = (npos + chunk - 1) / chunk;
    for (uint32_t d = tid; d < HD; d += AO_THREADS) {
        float mb[ATTN_O_CLUSTER], lb[ATTN_O_CLUSTER], ob[ATTN_O_CLUSTER];
#pragma unroll
        for (uint32_t b = 0; b < ATTN_O_CLUSTER; b++) {
            mb[b] = -INFINITY, lb[b] = 0.0f, ob[b] = 0.0f;
            if (b < n_act) {
                const float *pb = cl.map_shared_rank(part, b);
                mb[b] = pb[HD];
                lb[b] = pb[HD + 1];
                ob[b] = pb[d];
            }
        }
        const float3 r = softmax_merge<ATTN_O_CLUSTER>(mb, lb, ob);
        const float v = r.x / r.y;
        oh[x_index<WDT>(d, PS)] = v;
        if (rank == 0) a.out[(size_t)h * HD + d] = v;
    }
    cluster_arrive(); /* this block reads no other block's shared memory from here on */
    asm volatile("cp.async.wait_group 0;" ::: "memory");
    __syncthreads();
    kt.mark(2);
    /* o rows · the head's output: a row a thread (the head's output read by all at once), so that
     * no thread runs a chain of shuffles */
    for (uint32_t rr = tid; rr < nr; rr += AO_THREADS) {
        const uint8_t *wr = ws + rr * WRP;
        float s0 = 0.0f, s1 = 0.0f;
#pragma unroll
        for (uint32_t c = 0; c < VPR; c += 2) {
            s0 += dot16<WDT>(*(const uint4 *)(wr + c * 16), oh + 4 * c, PS);
            if (c + 1 < VPR) s1 += dot16<WDT>(*(const uint4 *)(wr + (c + 1) * 16), oh + 4 * (c + 1), PS);
        }
        ys[rr] = s0 + s1;
    }
    __syncthreads();
    kt.mark(3);
    if (4 * tid < nr) { /* nr is a multiple of 4 */
        float4 y = ((const float4 *)ys)[tid];
        y.x *= sc4.x, y.y *= sc4.y, y.z *= sc4.z, y.w *= sc4.w;
        atomic_add4(p.resid + r0 + 4 * tid, y);
    }
    if (tid == 0) kt.end(TRACE_ATTN_O, 4);
    cluster_wait(); /* no block leaves while another still reads its partial */
}

cudaError_t attn_o_trace_arm(trace_rec *recs, unsigned int *n, unsigned int cap) {
    return trace_arm_here(recs, n, cap);
}

int attn_o_supported(uint32_t n_heads, uint32_t n_kv, uint32_t head_dim, int kv_dtype, const dmat *o) {
    if (head_dim != 32 && head_dim != 64 && head_dim != 128 && head_dim != 256) return 0;
    if (kv_dtype != THIN_DTYPE_BF16 && kv_dtype != THIN_DTYPE_F32) return 0;
    if (o->dtype != THIN_DTYPE_BF16 && o->dtype != THIN_DTYPE_F8_E4M3) return 0;
    if (!n_kv || n_heads % n_kv || o->trans || o->rows % 4 || !o->rows) return 0;
    if (o->cols != (uint64_t)n_heads * head_dim || (o->dtype == THIN_DTYPE_F8_E4M3 && !o->scale)) return 0;
    return ao_rows_per(o->rows) <= 4 * AO_THREADS; /* one float4 of the residual a thread */
}

size_t attn_o_smem(uint32_t head_dim, int kv_dtype, const dmat *o, uint32_t chunk) {
    if (chunk > AO_CHUNK_MAX) return SIZE_MAX;
    return ao_layout_of(head_dim, kv_dtype, o->dtype, ao_rows_per(o->rows), chunk).total;
}

template <int KDT, int WDT, int DPL>
static cudaError_t launch_ao(const attn_o_args &a, size_t smem, cudaStream_t st) {
    cudaError_t e = smem_attr(attn_o_kernel<KDT, WDT, DPL>, smem, 2 * AO_WARPS * sizeof(float));
    if (e != cudaSuccess) return e;
    return launch_kc(attn_o_kernel<KDT, WDT, DPL>, dim3(ATTN_O_CLUSTER, a.a.n_heads), dim3(AO_THREADS), smem,
                     st, dim3(ATTN_O_CLUSTER, 1, 1), a);
}

template <int KDT, int WDT>
static cudaError_t launch_ao_hd(const attn_o_args &a, size_t smem, cudaStream_t st) {
    switch (a.a.head_dim) {
    case 32: return launch_ao<KDT, WDT, 1>(a, smem, st);
    case 64: return launch_ao<KDT, WDT, 2>(a, smem, st);
    case 128: return launch_ao<KDT, WDT, 4>(a, smem, st);
    default: return launch_ao<KDT, WDT, 8>(a, smem, st);
    }
}

template <int KDT>
static cudaError_t launch_ao_w(const attn_o_args &a, size_t smem, cudaStream_t st) {
    if (a.o.dtype == THIN_DTYPE_F8_E4M3) return launch_ao_hd<KDT, THIN_DTYPE_F8_E4M3>(a, smem, st);
    return launch_ao_hd<KDT, THIN_DTYPE_BF16>(a, smem, st);
}

cudaError_t launch_attn_o(const attn_o_args *p, cudaStream_t st) {
    if (!attn_o_supported(p->a.n_heads, p->a.n_kv, p->a.head_dim, p->a.kv_dtype, &p->o) ||
        p->a.chunk_max == 0 || p->a.chunk_max > AO_CHUNK_MAX)
        return cudaErrorInvalidValue;
    attn_o_args a = *p;
    a.rows_per = ao_rows_per(a.o.rows);
    const size_t smem = attn_o_smem(a.a.head_dim, a.a.kv_dtype, &a.o, a.a.chunk_max);
    if (a.a.kv_dtype == THIN_DTYPE_BF16) return launch_ao_w<THIN_DTYPE_BF16>(a, smem, st);
    return launch_ao_w<THIN_DTYPE_F32>(a, smem, st);
}
