/*
 * attn_dev.cuh — the attention's device pieces shared between kernels: the K/V staging of the
 * decode kernels (attention.cu, attn_o.cu), and the grouped attention (attention.cu, and the
 * persistent decode kernel in stream.cu), where a block scores, normalises and sums one split of
 * the positions for every query head of one KV head, and the last split to finish combines them.
 */
#ifndef THIN_ATTN_DEV_CUH
#define THIN_ATTN_DEV_CUH

#include "cuda_common.cuh"

/* ---- the decode kernels' cluster combine (attention.cu, attn_o.cu) ----
 * The softmax pieces of NB blocks, each its max m, its sum of exp l against that max (0 for an
 * empty span) and its weighted sum v, merged against the overall max: returns (sum, sum of exp,
 * max). The kernels load the pieces themselves (their layouts differ). */
template <int NB>
__device__ __forceinline__ float3 softmax_merge(const float (&m)[NB], const float (&l)[NB], const float (&v)[NB]) {
    float M = -INFINITY;
#pragma unroll
    for (int b = 0; b < NB; b++) M = fmaxf(M, m[b]);
    float L = 0.0f, o = 0.0f;
#pragma unroll
    for (int b = 0; b < NB; b++) {
        if (l[b] == 0.0f) continue; /* an empty span (or no block) */
        const float f = expf(m[b] - M);
        L += l[b] * f;
        o += v[b] * f;
    }
    return make_float3(o, L, M);
}

/* The halves of a cluster barrier, apart: every thread of every block of the cluster arrives, then
 * waits; an arrival as a block starts, waited on later, tells that every block of the cluster runs
 * (so that its shared memory may be written). */
__device__ __forceinline__ void cluster_arrive() {
    asm volatile("barrier.cluster.arrive.release.aligned;" ::: "memory");
}
__device__ __forceinline__ void cluster_arrive_relaxed() {
    asm volatile("barrier.cluster.arrive.relaxed.aligned;" ::: "memory");
}
__device__ __forceinline__ void cluster_wait() {
    asm volatile("barrier.cluster.wait.acquire.aligned;" ::: "memory");
}

/* ---- staging of K/V rows in shared memory (the decode kernels: attention.cu, attn_o.cu) ---- */

__device__ __forceinline__ void cp_async_wait_all() { asm volatile("cp.async.wait_all;" ::: "memory"); }

/* The decode kernels' K/V staging, nt threads a block, rows of vpr 16-byte pieces, cache rows
 * pstride bytes apart. ad_stage_rows requests cache rows [from, from + n) into shared-memory rows
 * 0..n-1 (K rows krb bytes apart, V rows vrb) with cp.async and commits them; ad_load_row copies
 * one cache row (kc, vc) into kd and vd through L2 (written by the previous kernel). */
__device__ __forceinline__ void ad_stage_rows(uint8_t *ks, uint32_t krb, uint8_t *vs, uint32_t vrb,
                                              const uint8_t *kc, const uint8_t *vc, size_t pstride,
                                              uint32_t from, uint32_t n, uint32_t vpr, uint32_t nt) {
    for (uint32_t i = threadIdx.x; i < n * vpr; i += nt) {
        const uint32_t p = i / vpr, c = i - p * vpr;
        gm_cp16(ks + p * krb + c * 16, kc + (size_t)(from + p) * pstride + c * 16);
        gm_cp16(vs + p * vrb + c * 16, vc + (size_t)(from + p) * pstride + c * 16);
    }
    gm_commit();
}
__device__ __forceinline__ void ad_load_row(uint8_t *kd, uint8_t *vd, const uint8_t *kc, const uint8_t *vc,
                                            uint32_t vpr, uint32_t nt) {
    for (uint32_t c = threadIdx.x; c < vpr; c += nt) {
        *(uint4 *)(kd + c * 16) = __ldcg((const uint4 *)kc + c);
        *(uint4 *)(vd + c * 16) = __ldcg((const uint4 *)vc + c);
    }
}


/* ---- grouped kernel ---- */


/* 16 bytes of a KV row at element i, raw. */
template <int KDT>
__device__ __forceinline__ uint4 kv_raw(const void *c, size_t i) {
    return __ldcg((const uint4 *)((const uint8_t *)c + i * (KDT == THIN_DTYPE_BF16 ? 2 : 4)));
}

/* Those 16 bytes as floats (8 BF16 or 4 F32 elements). */
template <int KDT>
__device__ __forceinline__ void kv_unpack(uint4 u, float *f) {
    const uint32_t w[4] = {u.x, u.y, u.z, u.w};
    if (KDT == THIN_DTYPE_BF16) {
#pragma unroll
        for (int j = 0; j < 4; j++) {
            f[2 * j] = __uint_as_float(w[j] << 16);
            f[2 * j + 1] = __uint_as_float(w[j] & 0xffff0000u);
        }
    } else {
#pragma unroll
        for (int j = 0; j < 4; j++) f[j] = __uint_as_float(w[j]);
    }
}

/* The EPV elements of 16 bytes of a KV row at element i, as floats (zeros when !ok). */
template <int KDT>
__device__ __forceinline__ void kv_vec(const void *c, size_t i, bool ok, float *f) {
    kv_unpack<KDT>(ok ? kv_raw<KDT>(c, i) : make_uint4(0, 0, 0, 0), f);
}

template <int KDT>
struct kv_epv {
    static constexpr int n = KDT == THIN_DTYPE_BF16 ? 8 : 4;
};

/* Where this block works: positions [start, end) of the row's [first, npos) (its window, or
 * all before it), `n_act` splits active. */
struct ag_span {
    uint32_t npos, chunk, n_act, start, end;
};

__device__ __forceinline__ ag_span ag_span_of(const attn_args &a, uint32_t row, uint32_t split) {
    ag_span p;
    p.npos = (uint32_t)(*a.pos) + row + 1;
    const uint32_t first = attn_first(p.npos, a.window), cnt = p.npos - first;
    p.chunk = (cnt + a.n_splits - 1) / a.n_splits;
    if (p.chunk < ATTN_MIN_CHUNK) p.chunk = ATTN_MIN_CHUNK;
    p.n_act = (cnt + p.chunk - 1) / p.chunk;
    p.start = min(p.npos, first + split * p.chunk);
    p.end = min(p.npos, p.start + p.chunk);
    return p;
}

/* qv[g] = the EPV floats at q + g * hd for the group's G query heads (q: this lane's first dim of
 * the group's first head; float4 loads through L2, the previous kernel having written them). */
template <int GM, int EPV>
__device__ __forceinline__ void load_q(const float *q, uint32_t G, uint32_t hd, float (&qv)[GM][EPV]) {
#pragma unroll
    for (int g = 0; g < GM; g++) {
        if ((uint32_t)g >= G) break;
#pragma unroll
        for (int e = 0; e < EPV; e += 4) {
            const float4 v = __ldcg((const float4 *)(q + (size_t)g * hd + e));
            qv[g][e] = v.x, qv[g][e + 1] = v.y, qv[g][e + 2] = v.z, qv[g][e + 3] = v.w;
        }
    }
}

/* Scores of the group's G query heads (q pre-loaded: qv[g] = this lane's EPV dims of head g) for
 * the span's positions into sc[g * chunk_max + p - start]. Lanes j of LP per position; every lane
 * of a warp runs the same trip count so the shuffles are full-warp. */
template <int KDT, int GM>
__device__ void ag_scores(const attn_args &a, const ag_span &sp, const float (&qv)[GM][kv_epv<KDT>::n],
                          uint32_t G, size_t kvo, float *sc) {
    constexpr int EPV = kv_epv<KDT>::n;
    const uint32_t LP = a.head_dim / EPV, lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const uint32_t gpw = 32 / LP, ngrp = (blockDim.x >> 5) * gpw, j = lane % LP;
    const size_t kv_dim = (size_t)a.n_kv * a.head_dim;
    const float scale = attn_scale_of(a);
    for (uint32_t base = sp.start + warp * gpw; base < sp.end; base += 2 * ngrp) {
        uint32_t p[2] = {base + lane / LP, base + ngrp + lane / LP};
        float kf[2][EPV];
#pragma unroll
        for (int u = 0; u < 2; u++) kv_vec<KDT>(a.kcache, (size_t)p[u] * kv_dim + kvo, p[u] < sp.end, kf[u]);
#pragma unroll
        for (int u = 0; u < 2; u++) {
#pragma unroll
            for (int g = 0; g < GM; g++) {
                if ((uint32_t)g >= G) break;
                float s = 0.0f;
#pragma unroll
                for (int e = 0; e < EPV; e++) s = fmaf(qv[g][e], kf[u][e], s);
                for (uint32_t o = LP / 2; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
                if (j == 0 && p[u] < sp.end) sc[g * a.chunk_max + p[u] - sp.start] = s * scale;
            }
        }
    }
}

/* Softmax of each head's scores in place (exp(s - m)), one warp of the block per head at a time;
 * ml[2g] = m, ml[2g + 1] = sum ((-inf, 0) for an empty span). */
static __device__ void ag_softmax(const attn_args &a, uint32_t len, uint32_t G, float *sc, float *ml) {
    const uint32_t lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    for (uint32_t g = warp; g < G; g += blockDim.x >> 5) {
        float *x = sc + g * a.chunk_max;
        float m = -INFINITY;
        if (a.softcap > 0.0f) /* each lane caps the scores it then reads (out of the score loops,
                                 whose registers it would raise) */
            for (uint32_t i = lane; i < len; i += 32) x[i] = attn_cap(x[i], a.softcap);
        for (uint32_t i = lane; i < len; i += 32) m = fmaxf(m, x[i]);
        m = warp_max(m);
        float l = 0.0f;
        for (uint32_t i = lane; i < len; i += 32) {
            float e = expf(x[i] - m);
            x[i] = e;
            l += e;
        }
        l = warp_sum(l);
        if (lane == 0) {
            ml[2 * g] = m;
            ml[2 * g + 1] = l;
        }
    }
}

/* Sums each lane's acc[g][e] (dims j * EPV + e of head g, j = lane % LP) over the lanes that hold
 * the same dims and over the block's warps into red[g * hd + d] (red: warps × G × hd
 * floats; the first G × hd hold the sums). Ends with a barrier before the cross-warp sum; the
 * caller synchronises before reading red. */
template <int GM, int EPV>
__device__ __forceinline__ void group_sum(float (&acc)[GM][EPV], uint32_t G, uint32_t hd, uint32_t LP,
                                          float *red) {
    const uint32_t lane = threadIdx.x & 31, warp = threadIdx.x >> 5, j = lane % LP;
    for (uint32_t o = LP; o < 32; o <<= 1)
#pragma unroll
        for (int g = 0; g < GM; g++)
#pragma unroll
            for (int e = 0; e < EPV; e++) acc[g][e] += __shfl_xor_sync(0xffffffffu, acc[g][e], o);
    if (lane < LP)
#pragma unroll
        for (int g = 0; g < GM; g++) {
            if ((uint32_t)g >= G) break;
#pragma unroll
            for (int e = 0; e < EPV; e++) red[(warp * G + g) * hd + j * EPV + e] = acc[g][e];
        }
    __syncthreads();
    for (uint32_t i = threadIdx.x; i < G * hd; i += blockDim.x) {
        float t = red[i];
        for (uint32_t w = 1; w < (blockDim.x >> 5); w++) t += red[w * G * hd + i];
        red[i] = t; /* each i is read and written by one thread only */
    }
}

/* Weighted sum of V over the span for every head of the group, reduced over the block into
 * red[g * head_dim + d] (red: warps × G × head_dim floats; the first G × head_dim hold it). */
template <int KDT, int GM>
__device__ void ag_values(const attn_args &a, const ag_span &sp, uint32_t G, size_t kvo,
                          const float *sc, float *red) {
    constexpr int EPV = kv_epv<KDT>::n;
    const uint32_t LP = a.head_dim / EPV, lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const uint32_t gpw = 32 / LP, ngrp = (blockDim.x >> 5) * gpw, hd = a.head_dim;
    const size_t kv_dim = (size_t)a.n_kv * hd;
    float acc[GM][EPV];
#pragma unroll
    for (int g = 0; g < GM; g++)
#pragma unroll
        for (int e = 0; e < EPV; e++) acc[g][e] = 0.0f;
    for (uint32_t base = sp.start + warp * gpw; base < sp.end; base += 2 * ngrp) {
        uint32_t p[2] = {base + lane / LP, base + ngrp + lane / LP};
        float vf[2][EPV];
#pragma unroll
        for (int u = 0; u < 2; u++) kv_vec<KDT>(a.vcache, (size_t)p[u] * kv_dim + kvo, p[u] < sp.end, vf[u]);
#pragma unroll
        for (int u = 0; u < 2; u++) {
            if (p[u] >= sp.end) continue;
#pragma unroll
            for (int g = 0; g < GM; g++) {
                if ((uint32_t)g >= G) break;
                const float w = sc[g * a.chunk_max + p[u] - sp.start];
#pragma unroll
                for (int e = 0; e < EPV; e++) acc[g][e] = fmaf(w, vf[u][e], acc[g][e]);
            }
        }
    }
    group_sum<GM, EPV>(acc, G, hd, LP, red);
    __syncthreads();
}

/* The last split's block: combines the n_act partials of every head of the group into out. */
static __device__ void ag_combine(const attn_args &a, uint32_t row, uint32_t kh, uint32_t G, uint32_t n_act,
                           float *wts) {
    const uint32_t hd = a.head_dim, lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const size_t stride = hd + 2;
    const float *part0 = a.partial + ((size_t)row * a.n_heads + (size_t)kh * G) * a.n_splits * stride;
    for (uint32_t g = warp; g < G; g += blockDim.x >> 5) {
        const float *pg = part0 + (size_t)g * a.n_splits * stride;
        float M = -INFINITY;
        for (uint32_t s = lane; s < n_act; s += 32) M = fmaxf(M, __ldcg(pg + s * stride + hd));
        M = warp_max(M);
        float L = 0.0f;
        for (uint32_t s = lane; s < n_act; s += 32)
            L += __ldcg(pg + s * stride + hd + 1) * expf(__ldcg(pg + s * stride + hd) - M);
        L = warp_sum(L);
        for (uint32_t s = lane; s < n_act; s += 32)
            wts[g * a.n_splits + s] = expf(__ldcg(pg + s * stride + hd) - M) / L;
    }
    __syncthreads();
    float *out = a.out + (size_t)row * a.ldo + (size_t)kh * G * hd;
    for (uint32_t i = threadIdx.x; i < G * hd; i += blockDim.x) {
        const uint32_t g = i / hd, d = i % hd;
        const float *pg = part0 + (size_t)g * a.n_splits * stride + d;
        float o = 0.0f;
        for (uint32_t s = 0; s < n_act; s++) o = fmaf(wts[g * a.n_splits + s], __ldcg(pg + s * stride), o);
        out[i] = o;
    }
}

/* The work of one (KV head, split, row) of the grouped attention, by the whole block (any number
 * of warps; every barrier is reached by all its threads). sm: the shared memory of
 * ag_smem_floats; last: one shared int. Used by attn_group_kernel and the persistent decode
 * kernel (stream.cu). */
template <int KDT, int GM>
__device__ void ag_unit(const attn_args &a, uint32_t kh, uint32_t split, uint32_t row, float *sm, int *last) {
    constexpr int EPV = kv_epv<KDT>::n;
    const uint32_t hd = a.head_dim;
    const uint32_t G = a.n_heads / a.n_kv;
    const ag_span sp = ag_span_of(a, row, split);
    if (sp.start >= sp.end) return;
    float *sc = sm, *red = sc + (size_t)G * a.chunk_max, *ml = red + (size_t)(blockDim.x >> 5) * G * hd;
    float *wts = ml + 2 * G;
    const uint32_t j = (threadIdx.x & 31) % (hd / EPV);
    float qv[GM][EPV];
    load_q<GM, EPV>(a.q + (size_t)row * a.ldq + (size_t)kh * G * hd + j * EPV, G, hd, qv);
    const size_t kvo = (size_t)kh * hd + j * EPV;
    ag_scores<KDT, GM>(a, sp, qv, G, kvo, sc);
    __syncthreads();
    ag_softmax(a, sp.end - sp.start, G, sc, ml);
    __syncthreads();
    ag_values<KDT, GM>(a, sp, G, kvo, sc, red);
    if (sp.n_act == 1) {
        float *out = a.out + (size_t)row * a.ldo + (size_t)kh * G * hd;
        for (uint32_t i = threadIdx.x; i < G * hd; i += blockDim.x) out[i] = red[i] / ml[2 * (i / hd) + 1];
        return;
    }
    const size_t stride = hd + 2;
    float *part = a.partial + ((size_t)row * a.n_heads + (size_t)kh * G) * a.n_splits * stride +
                  (size_t)split * stride;
    for (uint32_t i = threadIdx.x; i < G * hd; i += blockDim.x)
        part[(size_t)(i / hd) * a.n_splits * stride + i % hd] = red[i];
    if (threadIdx.x < G) {
        part[(size_t)threadIdx.x * a.n_splits * stride + hd] = ml[2 * threadIdx.x];
        part[(size_t)threadIdx.x * a.n_splits * stride + hd + 1] = ml[2 * threadIdx.x + 1];
    }
    /* One thread publishes the block's writes (ordered before its fence by the barrier) and
     * counts the split; the last split's block reads the others' after the same thread's fence. */
    __syncthreads();
    if (threadIdx.x == 1 % blockDim.x) {
        unsigned int *cnt = a.counter + (size_t)row * a.n_kv + kh;
        __threadfence();
        *last = atomicAdd(cnt, 1u) == sp.n_act - 1;
        if (*last) *cnt = 0; /* every active split has counted: ready for the next launch */
        __threadfence();
    }
    __syncthreads();
    if (!*last) return;
    ag_combine(a, row, kh, G, sp.n_act, wts);
}

/* Shared-memory floats of ag_unit for blocks of nwarps warps. */
__host__ __device__ inline size_t ag_smem_floats(uint32_t head_dim, uint32_t group, uint32_t chunk_max,
                                                 uint32_t n_splits, uint32_t nwarps) {
    return (size_t)group * (chunk_max + nwarps * head_dim + 2 + n_splits);
}

/* ---- the short-context decode kernels' rows (attention.cu, attn_o.cu) ---- */

/* Bytes of a staged K row: an odd number of 16-byte pieces, so that eight lanes reading the
 * same piece of eight consecutive rows touch all 32 banks. V rows are read whole by a warp and
 * stay unpadded. */
__host__ __device__ __forceinline__ uint32_t ah_krow(uint32_t head_dim, int kv_dtype) {
    const uint32_t b = head_dim * (kv_dtype == THIN_DTYPE_BF16 ? 2u : 4u);
    return (b / 16u | 1u) * 16u;
}

/* v[i] = dims lane * DPL + i of a V row. */
template <int KDT, int DPL>
__device__ __forceinline__ void ah_vload(const uint8_t *row, uint32_t lane, float (&v)[DPL]) {
    if constexpr (KDT == THIN_DTYPE_BF16) {
        const uint16_t *r = (const uint16_t *)row + lane * DPL;
        if constexpr (DPL == 1) {
            v[0] = __uint_as_float((uint32_t)r[0] << 16);
        } else if constexpr (DPL == 2) {
            const uint32_t u = *(const uint32_t *)r;
            v[0] = __uint_as_float(u << 16), v[1] = __uint_as_float(u & 0xffff0000u);
        } else if constexpr (DPL == 4) {
            const uint2 u = *(const uint2 *)r;
            v[0] = __uint_as_float(u.x << 16), v[1] = __uint_as_float(u.x & 0xffff0000u);
            v[2] = __uint_as_float(u.y << 16), v[3] = __uint_as_float(u.y & 0xffff0000u);
        } else {
            kv_unpack<KDT>(*(const uint4 *)r, v);
        }
    } else {
        const float *r = (const float *)row + lane * DPL;
        if constexpr (DPL == 1) {
            v[0] = r[0];
        } else if constexpr (DPL == 2) {
            const float2 u = *(const float2 *)r;
            v[0] = u.x, v[1] = u.y;
        } else {
#pragma unroll
            for (int i = 0; i < DPL; i += 4) {
                const float4 u = *(const float4 *)(r + i);
                v[i] = u.x, v[i + 1] = u.y, v[i + 2] = u.z, v[i + 3] = u.w;
            }
        }
    }
}

#endif /* THIN_ATTN_DEV_CUH */
