/*
 * attention.cu — GQA attention of n rows split over the sequence (flash-decoding), row i attending
 * positions 0..*pos+i. The split count is fixed per launch (so a CUDA graph can replay it); the
 * positions per split follow *pos (at least ATTN_MIN_CHUNK), and splits past the end do nothing.
 *
 * Grouped kernel (BF16/F32 caches, head_dim/EPV lanes per position a power of two <= 32, at most 8
 * query heads per KV head): block (KV head, split, row) loads each K and V row of its positions
 * once with 16-byte loads and uses it for every query head of the group; scores and softmax stay
 * in shared memory. With one active split it writes the output; else each split writes its
 * unnormalised sum with (max, sum of exp), and the last split to finish (atomic counter per row and
 * KV head, reset by that block) combines them.
 * Generic kernels (any other shape): block (head, split, row) per query head, then a combine launch.
 * Query head h reads KV head h / (n_heads / n_kv). CPU twin: op_attention in ops_cpu.c.
 */
#include "attn_dev.cuh"

#include <cooperative_groups.h>

#define ATTN_THREADS 128

__device__ __forceinline__ float kv_load(const void *c, int dt, size_t i) {
    return dt == THIN_DTYPE_BF16 ? bf16_bits_to_f32(((const uint16_t *)c)[i]) : ((const float *)c)[i];
}

__global__ void __launch_bounds__(ATTN_THREADS) attn_partial_kernel(const attn_args a) {
    pdl_trigger();
    pdl_wait();
    extern __shared__ float sm[]; /* q: head_dim, scores: chunk_max, acc: ATTN_THREADS */
    __shared__ float red[32];
    const uint32_t h = blockIdx.x, split = blockIdx.y, row = blockIdx.z, hd = a.head_dim;
    const uint32_t npos = (uint32_t)(*a.pos) + row + 1, first = attn_first(npos, a.window);
    uint32_t chunk = (npos - first + a.n_splits - 1) / a.n_splits;
    if (chunk < ATTN_MIN_CHUNK) chunk = ATTN_MIN_CHUNK;
    const uint32_t start = min(npos, first + split * chunk), end = min(npos, start + chunk);
    float *part = a.partial + (((size_t)row * a.n_heads + h) * a.n_splits + split) * (hd + 2);
    if (start >= end) {
        if (threadIdx.x == 0) {
            part[hd] = -INFINITY;
            part[hd + 1] = 0.0f;
        }
        return;
    }
    float *qs = sm, *sc = sm + hd, *acc = sc + a.chunk_max;
    const float scale = attn_scale_of(a);
    const float *q = a.q + (size_t)row * a.ldq + (size_t)h * hd;
    for (uint32_t d = threadIdx.x; d < hd; d += blockDim.x) qs[d] = q[d];
    __syncthreads();
    const size_t kv_dim = (size_t)a.n_kv * hd, kvo = (size_t)(h / (a.n_heads / a.n_kv)) * hd;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    for (uint32_t p = start + warp; p < end; p += nw) {
        size_t b = (size_t)p * kv_dim + kvo;
        float s = 0.0f;
        for (uint32_t d = lane; d < hd; d += 32) s += qs[d] * kv_load(a.kcache, a.kv_dtype, b + d);
        s = warp_sum(s);
        if (lane == 0) sc[p - start] = attn_cap(s * scale, a.softcap);
    }
    __syncthreads();
    float m = -INFINITY;
    for (uint32_t i = threadIdx.x; i < end - start; i += blockDim.x) m = fmaxf(m, sc[i]);
    m = block_max(m, red);
    float l = 0.0f;
    for (uint32_t i = threadIdx.x; i < end - start; i += blockDim.x) {
        float e = expf(sc[i] - m);
        sc[i] = e;
        l += e;
    }
    l = block_sum(l, red); /* its barriers also publish sc */
    /* Weighted sum of V: groups of hd threads take interleaved positions (hd < threads), or each
     * thread takes dimensions d, d + threads, ... (hd >= threads). */
    const uint32_t groups = hd >= blockDim.x ? 1 : blockDim.x / hd;
    const uint32_t g = threadIdx.x / (hd >= blockDim.x ? blockDim.x : hd);
    for (uint32_t d0 = 0; d0 < hd; d0 += blockDim.x) {
        uint32_t d = d0 + (hd >= blockDim.x ? threadIdx.x : threadIdx.x % hd);
        float o = 0.0f;
        if (g < groups && d < hd)
            for (uint32_t p = start + g; p < end; p += groups)
                o += sc[p - start] * kv_load(a.vcache, a.kv_dtype, (size_t)p * kv_dim + kvo + d);
        acc[threadIdx.x] = o;
        __syncthreads();
        if (threadIdx.x < hd - d0 && threadIdx.x < (hd >= blockDim.x ? blockDim.x : hd)) {
            float t = 0.0f;
            for (uint32_t j = 0; j < groups; j++) t += acc[j * (hd >= blockDim.x ? blockDim.x : hd) + threadIdx.x];
            part[d0 + threadIdx.x] = t;
        }
        __syncthreads();
    }
    if (threadIdx.x == 0) {
        part[hd] = m;
        part[hd + 1] = l;
    }
}

__global__ void attn_combine_kernel(const attn_args a) {
    pdl_trigger();
    pdl_wait();
    const uint32_t h = blockIdx.x, row = blockIdx.y, hd = a.head_dim;
    const float *part = a.partial + ((size_t)row * a.n_heads + h) * a.n_splits * (hd + 2);
    float M = -INFINITY;
    for (uint32_t s = 0; s < a.n_splits; s++)
        if (part[s * (hd + 2) + hd + 1] > 0.0f) M = fmaxf(M, part[s * (hd + 2) + hd]);
    float L = 0.0f;
    for (uint32_t s = 0; s < a.n_splits; s++) {
        const float *ps = part + s * (hd + 2);
        if (ps[hd + 1] > 0.0f) L += ps[hd + 1] * expf(ps[hd] - M);
    }
    float *out = a.out + (size_t)row * a.ldo + (size_t)h * hd;
    for (uint32_t d = threadIdx.x; d < hd; d += blockDim.x) {
        float o = 0.0f;
        for (uint32_t s = 0; s < a.n_splits; s++) {
            const float *ps = part + s * (hd + 2);
            if (ps[hd + 1] > 0.0f) o += ps[d] * expf(ps[hd] - M);
        }
        out[d] = o / L;
    }
}

static cudaError_t launch_generic(const attn_args *a, uint32_t n, cudaStream_t st) {
    size_t smem = ((size_t)a->head_dim + a->chunk_max + ATTN_THREADS) * sizeof(float);
    cudaError_t e = smem_attr(attn_partial_kernel, smem, 0);
    if (e != cudaSuccess) return e;
    dim3 g1(a->n_heads, a->n_splits, n);
    e = launch_k(attn_partial_kernel, dim3(g1), dim3(ATTN_THREADS), smem, st, *a);
    if (e != cudaSuccess) return e;
    dim3 g2(a->n_heads, n);
    return launch_k(attn_combine_kernel, dim3(g2), dim3(128), 0, st, *a);
}

/* ---- grouped kernel (attn_dev.cuh) ---- */

#define AG_THREADS 128
#define AG_WARPS (AG_THREADS / 32)

template <int KDT, int GM>
__global__ void __launch_bounds__(AG_THREADS) attn_group_kernel(const attn_args a) {
    pdl_trigger();
    pdl_wait();
    extern __shared__ float sm[];
    __shared__ int last;
    ag_unit<KDT, GM>(a, blockIdx.x, blockIdx.y, blockIdx.z, sm, &last);
}

/* ---- decode kernel: one row, a cluster of AD_CLUSTER blocks per group of positions ----
 *
 * Grid (KV head, split); clusters of AD_CLUSTER consecutive splits. Each block takes `chunk`
 * positions (a multiple of 32, at least min_chunk, growing with the context so that the splits
 * cover it); clusters past the context exit at once, the others always run whole. Before waiting
 * for the previous kernel a block copies the K and V rows of its positions before *pos (written by
 * earlier steps) into shared memory (cp.async); after the wait it adds the newest row and q. Then
 * the whole block works on every query head of the group at once, so that no thread runs a long
 * serial chain: four lanes per position score it against every head (each K piece read once),
 * one warp per head takes the softmax, and each thread sums the weighted V rows of a slice of the
 * positions for two dims of every head, the slices added up through shared memory. A single
 * active block writes the output; else the cluster combines its blocks' partial results through
 * distributed shared memory, each block finishing a slice of the output. With more than one
 * active cluster (long contexts), each writes its combined partial to global memory and the last
 * one to finish (atomic counter) combines those.
 * Short contexts, where the o-projection follows, take the attention + o kernel (attn_o.cu). */

#define AD_THREADS 256
#define AD_CLUSTER 8
#define AD_WIN 32u       /* positions per split come in multiples of this */
#define AD_GMAX 8u       /* query heads per KV head (one softmax warp each) */
#define AD_DMAX 256u     /* head_dim */
#define AD_LPS 4u        /* lanes per position in the scores */

namespace cg = cooperative_groups;

/* Bytes of one staged K or V row: head_dim elements, padded so that consecutive rows start half
 * of the 32 banks apart (the scores' 16-byte reads of two rows by four lanes each never collide). */
__host__ __device__ __forceinline__ uint32_t ad_row_bytes(uint32_t head_dim, int kv_dtype) {
    const uint32_t b = head_dim * (kv_dtype == THIN_DTYPE_BF16 ? 2u : 4u);
    return b + (192u - b % 128u) % 128u;
}

/* Slices of the positions in the weighted V sum (threads of head_dim / 2 take two dims each). */
__host__ __device__ __forceinline__ uint32_t ad_slices(uint32_t head_dim, uint32_t threads) {
    return threads / (head_dim / 2);
}

template <int KDT, int GM>
__global__ void __launch_bounds__(AD_THREADS) attn_decode_kernel(const attn_args a) {
    pdl_trigger();
    ktrace kt;
    kt.start();
    if (a.pf.at) l2_ask_ahead(a.pf); /* the MLP's first rows, for after the o matvec */
    constexpr int EPV = kv_epv<KDT>::n;
    constexpr uint32_t ESZ = KDT == THIN_DTYPE_BF16 ? 2 : 4;
    extern __shared__ __align__(16) uint8_t smb[];
    __shared__ float ml[2 * AD_GMAX];
    __shared__ int last;
    cg::cluster_group cl = cg::this_cluster();
    const uint32_t kh = blockIdx.x, split = blockIdx.y, hd = a.head_dim, G = a.n_heads / a.n_kv;
    const uint32_t pos0 = (uint32_t)*a.pos, npos = pos0 + 1, first = attn_first(npos, a.window);
    uint32_t chunk = (npos - first + gridDim.y - 1) / gridDim.y;
    chunk = max(a.min_chunk, (chunk + AD_WIN - 1) / AD_WIN * AD_WIN);
    const uint32_t n_act = (npos - first + chunk - 1) / chunk, n_cl = (n_act + AD_CLUSTER - 1) / AD_CLUSTER;
    const uint32_t cidx = split / AD_CLUSTER, rank = split % AD_CLUSTER;
    if (cidx >= n_cl) return; /* the whole cluster is past the context */
    if (chunk > a.chunk_max) return; /* never, by the launch's sizes (same for the whole grid) */
    const uint32_t start = min(npos, first + split * chunk), end = min(npos, start + chunk);
    const uint32_t len = start < end ? end - start : 0;
    if (n_act == 1 && !len) return; /* the single active block needs no partner */
    const uint32_t rb = ad_row_bytes(hd, KDT), vpr = hd * ESZ / 16; /* 16-byte pieces per row */
    uint8_t *ks = smb, *vs = smb + (size_t)a.chunk_max * rb;
    float *qs = (float *)(vs + (size_t)a.chunk_max * rb); /* G × hd */
    float *sc = qs + (size_t)G * hd;                        /* G × chunk_max: scores, then weights */
    float *red = sc + (size_t)G * a.chunk_max;              /* slices × G × hd; then this block's sums */
    const size_t pstride = (size_t)a.n_kv * hd * ESZ;       /* cache bytes per position */
    const uint8_t *kc = (const uint8_t *)a.kcache + (size_t)kh * hd * ESZ;
    const uint8_t *vc = (const uint8_t *)a.vcache + (size_t)kh * hd * ESZ;
    const uint32_t pre = min(end, pos0) > start ? min(end, pos0) - start : 0; /* rows before *pos */
    ad_stage_rows(ks, rb, vs, rb, kc, vc, pstride, start, pre, vpr, AD_THREADS);
    pdl_wait();
    kt.waited();
    /* the current position's K and V and the group's q (the previous kernel wrote them) */
    if (pos0 >= start && pos0 < end)
        ad_load_row(ks + (pos0 - start) * rb, vs + (pos0 - start) * rb, kc + (size_t)pos0 * pstride,
                    vc + (size_t)pos0 * pstride, vpr, AD_THREADS);
    const float4 *q4 = (const float4 *)(a.q + (size_t)kh * G * hd);
    for (uint32_t i = threadIdx.x; i < G * hd / 4; i += blockDim.x) ((float4 *)qs)[i] = __ldcg(q4 + i);
    cp_async_wait_all();
    __syncthreads();
    kt.mark(0);
    /* scores: lanes j of AD_LPS per position take pieces j, j + AD_LPS, ... of its K row */
    {
        const float scale = attn_scale_of(a);
        const uint32_t j = threadIdx.x % AD_LPS, per = AD_THREADS / AD_LPS;
        for (uint32_t base = 0; base < len; base += per) { /* the same trip count for every lane */
            const uint32_t p = base + threadIdx.x / AD_LPS;
            float s[GM];
#pragma unroll
            for (int g = 0; g < GM; g++) s[g] = 0.0f;
            if (p < len) {
                const uint8_t *kr = ks + p * rb;
#pragma unroll 2
                for (uint32_t c = j; c < vpr; c += AD_LPS) {
                    float f[EPV];
                    kv_unpack<KDT>(*(const uint4 *)(kr + c * 16), f);
#pragma unroll
                    for (int g = 0; g < GM; g++) {
                        if ((uint32_t)g >= G) break;
                        const float4 *qq = (const float4 *)(qs + (size_t)g * hd + c * EPV);
#pragma unroll
                        for (int e = 0; e < EPV; e += 4) {
                            const float4 q = qq[e / 4];
                            s[g] = fmaf(q.x, f[e], s[g]);
                            s[g] = fmaf(q.y, f[e + 1], s[g]);
                            s[g] = fmaf(q.z, f[e + 2], s[g]);
                            s[g] = fmaf(q.w, f[e + 3], s[g]);
                        }
                    }
                }
            }
#pragma unroll
            for (int g = 0; g < GM; g++) {
#pragma unroll
                for (uint32_t o = 1; o < AD_LPS; o <<= 1) s[g] += __shfl_xor_sync(0xffffffffu, s[g], o);
                if (p < len && (uint32_t)g < G && (uint32_t)g % AD_LPS == j) sc[g * a.chunk_max + p] = s[g] * scale;
            }
        }
    }
    __syncthreads();
    ag_softmax(a, len, G, sc, ml); /* the weights replace the scores (soft-capped first) */
    __syncthreads();
    /* weighted V sum: thread (slice sl, dims d0, d0 + 1) over positions sl, sl + slices, ... */
    {
        const uint32_t tr = hd / 2, ns = ad_slices(hd, AD_THREADS), sl = threadIdx.x / tr, d0 = 2 * (threadIdx.x % tr);
        if (sl < ns) {
            float acc[GM][2];
#pragma unroll
            for (int g = 0; g < GM; g++) acc[g][0] = acc[g][1] = 0.0f;
#pragma unroll 4
            for (uint32_t p = sl; p < len; p += ns) {
                float v0, v1;
                if (KDT == THIN_DTYPE_BF16) {
                    const uint32_t u = *(const uint32_t *)(vs + p * rb + d0 * 2);
                    v0 = __uint_as_float(u << 16);
                    v1 = __uint_as_float(u & 0xffff0000u);
                } else {
                    const float2 f = *(const float2 *)(vs + p * rb + d0 * 4);
                    v0 = f.x, v1 = f.y;
                }
#pragma unroll
                for (int g = 0; g < GM; g++) {
                    if ((uint32_t)g >= G) break;
                    const float w = sc[g * a.chunk_max + p];
                    acc[g][0] = fmaf(w, v0, acc[g][0]);
                    acc[g][1] = fmaf(w, v1, acc[g][1]);
                }
            }
#pragma unroll
            for (int g = 0; g < GM; g++) {
                if ((uint32_t)g >= G) break;
                *(float2 *)(red + ((size_t)sl * G + g) * hd + d0) = make_float2(acc[g][0], acc[g][1]);
            }
        }
        __syncthreads();
        for (uint32_t i = threadIdx.x; i < G * hd; i += blockDim.x) {
            float t = red[i];
            for (uint32_t k = 1; k < ns; k++) t += red[(size_t)k * G * hd + i];
            if (n_act == 1) a.out[(size_t)kh * G * hd + i] = t / ml[2 * (i / hd) + 1];
            else red[i] = t; /* each i is read and written by one thread only */
        }
    }
    kt.mark(1);
    if (n_act == 1) { /* the same for every block of the cluster: no cluster barrier */
        if (threadIdx.x == 0) kt.end(TRACE_ATTN, 2);
        return;
    }
    cl.sync(); /* every block's red and ml are ready */
    kt.mark(2);
    /* this block's slice of the G * hd outputs, combined over the cluster's active blocks (the
     * loads stay here: a function that also loaded them for attn_o.cu built this kernel at 64
     * registers instead of 80 and measured 3% slower on the H200; bench/results/decode-notes.md,
     * the fourteenth round) */
    const uint32_t in_cl = min((uint32_t)AD_CLUSTER, n_act - cidx * AD_CLUSTER);
    const uint32_t per = (G * hd + AD_CLUSTER - 1) / AD_CLUSTER;
    const size_t stride = hd + 2;
    float *part = a.partial + (size_t)kh * G * a.n_splits * stride; /* [g][cluster][hd + 2] */
    for (uint32_t i = rank * per + threadIdx.x; i < min(G * hd, (rank + 1) * per); i += blockDim.x) {
        const uint32_t g = i / hd;
        /* every block's (m, sum) and sums at once: one round trip of distributed shared memory */
        float mb[AD_CLUSTER], lb[AD_CLUSTER], rbv[AD_CLUSTER];
#pragma unroll
        for (uint32_t b = 0; b < AD_CLUSTER; b++) {
            mb[b] = -INFINITY, lb[b] = 0.0f, rbv[b] = 0.0f;
            if (b < in_cl) {
                const float *mlb = cl.map_shared_rank(ml, b);
                mb[b] = mlb[2 * g];
                lb[b] = mlb[2 * g + 1];
                rbv[b] = cl.map_shared_rank(red, b)[i];
            }
        }
        const float3 r = softmax_merge<AD_CLUSTER>(mb, lb, rbv);
        const float o = r.x, L = r.y, M = r.z;
        if (n_cl == 1) {
            a.out[(size_t)kh * G * hd + i] = o / L;
        } else {
            float *pg = part + ((size_t)g * a.n_splits + cidx) * stride;
            pg[i % hd] = o;
            if (i % hd == 0) {
                pg[hd] = M;
                pg[hd + 1] = L;
            }
        }
    }
    if (n_cl > 1) __threadfence(); /* the partials, before the cluster's count below */
    cl.sync(); /* no block leaves while others still read its shared memory */
    kt.mark(3);
    if (threadIdx.x == 0 && len) kt.end(TRACE_ATTN, 4);
    if (n_cl == 1 || rank != 0) return;
    /* several clusters: the last to finish combines their partials (rank 0 block) */
    if (threadIdx.x == 0) {
        unsigned int *cnt = a.counter + kh;
        last = atomicAdd(cnt, 1u) == n_cl - 1;
        if (last) *cnt = 0;
    }
    __syncthreads();
    if (!last) return;
    __threadfence();
    for (uint32_t i = threadIdx.x; i < G * hd; i += blockDim.x) {
        const uint32_t g = i / hd, d = i % hd;
        const float *pg = part + (size_t)g * a.n_splits * stride;
        float M = -INFINITY;
        for (uint32_t c = 0; c < n_cl; c++) M = fmaxf(M, __ldcg(pg + c * stride + hd));
        float L = 0.0f, o = 0.0f;
        for (uint32_t c = 0; c < n_cl; c++) {
            const float f = expf(__ldcg(pg + c * stride + hd) - M);
            L += __ldcg(pg + c * stride + hd + 1) * f;
            o += __ldcg(pg + c * stride + d) * f;
        }
        a.out[(size_t)kh * G * hd + i] = o / L;
    }
}

cudaError_t attention_trace_arm(trace_rec *recs, unsigned int *n, unsigned int cap) {
    return trace_arm_here(recs, n, cap);
}

size_t attn_smem_floats(uint32_t head_dim, uint32_t group, uint32_t chunk_max, uint32_t n_splits) {
    size_t grouped = ag_smem_floats(head_dim, group, chunk_max, n_splits, AG_WARPS);
    size_t generic = (size_t)head_dim + chunk_max + ATTN_THREADS;
    return grouped > generic ? grouped : generic;
}

/* The kernel instance's query heads per KV head for g of them: 1, 2, 4, 8, or 0 past 8. */
static int group_bucket(uint32_t g) { return g <= 1 ? 1 : g <= 2 ? 2 : g <= 4 ? 4 : g <= 8 ? 8 : 0; }

/* Max query heads per KV head of the grouped kernel instance, or 0 when the shape is unsupported. */
int attn_group_max(const attn_args *a) {
    if (a->kv_dtype != THIN_DTYPE_BF16 && a->kv_dtype != THIN_DTYPE_F32) return 0;
    if (!a->counter || !a->n_kv || a->n_heads % a->n_kv || a->ldq % 4) return 0; /* float4 q loads */
    const uint32_t epv = a->kv_dtype == THIN_DTYPE_BF16 ? 8 : 4;
    if (a->head_dim % epv || a->head_dim / epv > 32) return 0;
    const uint32_t lp = a->head_dim / epv;
    if (lp & (lp - 1)) return 0;
    return group_bucket(a->n_heads / a->n_kv);
}

template <int KDT, int GM>
static cudaError_t launch_group(const attn_args *a, uint32_t n, cudaStream_t st) {
    const uint32_t g = a->n_heads / a->n_kv;
    size_t smem = ag_smem_floats(a->head_dim, g, a->chunk_max, a->n_splits, AG_WARPS) * sizeof(float);
    cudaError_t e = smem_attr(attn_group_kernel<KDT, GM>, smem, 0);
    if (e != cudaSuccess) return e;
    return launch_k(attn_group_kernel<KDT, GM>, dim3(a->n_kv, a->n_splits, n), dim3(AG_THREADS), smem,
                    st, *a);
}

template <int KDT>
static cudaError_t launch_group_dt(const attn_args *a, int gm, uint32_t n, cudaStream_t st) {
    switch (gm) {
    case 1: return launch_group<KDT, 1>(a, n, st);
    case 2: return launch_group<KDT, 2>(a, n, st);
    case 4: return launch_group<KDT, 4>(a, n, st);
    default: return launch_group<KDT, 8>(a, n, st);
    }
}

uint32_t attn_decode_chunk_max(uint32_t max_ctx, uint32_t n_splits, uint32_t min_chunk) {
    const uint32_t c = (max_ctx + n_splits - 1) / n_splits, m = min_chunk < AD_WIN ? AD_WIN : min_chunk;
    return c < m ? m : (c + AD_WIN - 1) / AD_WIN * AD_WIN;
}

size_t attn_decode_smem(uint32_t head_dim, uint32_t group, uint32_t chunk_max, int kv_dtype) {
    return 2 * (size_t)chunk_max * ad_row_bytes(head_dim, kv_dtype) +
           (size_t)group * (head_dim + chunk_max + ad_slices(head_dim, AD_THREADS) * head_dim) * sizeof(float);
}

/* Whether the decode kernel takes this shape: whole 16-byte pieces per row, head_dim a multiple of
 * 32 up to AD_DMAX, at most AD_GMAX query heads per KV head, float4 q loads. */
static int decode_fits(const attn_args *a) {
    if (a->kv_dtype != THIN_DTYPE_BF16 && a->kv_dtype != THIN_DTYPE_F32) return 0;
    if (!a->n_kv || a->n_heads % a->n_kv || a->n_heads / a->n_kv > AD_GMAX) return 0;
    if (a->head_dim % 32 || a->head_dim > AD_DMAX || a->ldq % 4) return 0;
    return a->n_splits % AD_CLUSTER == 0 && a->chunk_max % AD_WIN == 0 && a->min_chunk >= AD_WIN &&
           a->min_chunk % AD_WIN == 0 && a->chunk_max >= a->min_chunk;
}

template <int KDT, int GM>
static cudaError_t launch_decode(const attn_args *a, cudaStream_t st) {
    const size_t smem = attn_decode_smem(a->head_dim, a->n_heads / a->n_kv, a->chunk_max, KDT);
    cudaError_t e = smem_attr(attn_decode_kernel<KDT, GM>, smem, 0);
    if (e != cudaSuccess) return e;
    return launch_kc(attn_decode_kernel<KDT, GM>, dim3(a->n_kv, a->n_splits), dim3(AD_THREADS), smem, st,
                     dim3(1, AD_CLUSTER, 1), *a);
}

template <int KDT>
static cudaError_t launch_decode_dt(const attn_args *a, cudaStream_t st) {
    switch (group_bucket(a->n_heads / a->n_kv)) { /* decode_fits: at most AD_GMAX = 8 */
    case 1: return launch_decode<KDT, 1>(a, st);
    case 2: return launch_decode<KDT, 2>(a, st);
    case 4: return launch_decode<KDT, 4>(a, st);
    default: return launch_decode<KDT, 8>(a, st);
    }
}

cudaError_t launch_attention(const attn_args *a, uint32_t n, cudaStream_t st) {
    if (n == 1 && a->cluster && decode_fits(a)) {
        if (a->kv_dtype == THIN_DTYPE_BF16) return launch_decode_dt<THIN_DTYPE_BF16>(a, st);
        return launch_decode_dt<THIN_DTYPE_F32>(a, st);
    }
    if (attn_prefill_fits(a, n)) return launch_attn_prefill(a, n, st);
    const int gm = attn_group_max(a);
    if (!gm) return launch_generic(a, n, st);
    if (a->kv_dtype == THIN_DTYPE_BF16) return launch_group_dt<THIN_DTYPE_BF16>(a, gm, n, st);
    return launch_group_dt<THIN_DTYPE_F32>(a, gm, n, st);
}
