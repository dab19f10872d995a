/*
 * attn_o.cu — the decode step's attention and output projection as one kernel, for contexts up to
 * ATTN_O_CLUSTER × attn_args.chunk_max positions (longer ones take the cluster attention kernel
 * of attention.cu and the o-projection's matvec). CPU twins: op_attention, op_linear and op_add
 * (ops_cpu.c).
 *
 * Grid (ATTN_O_CLUSTER, n_heads): a thread block cluster per query head h; block r of it takes
 * positions [first + r·chunk, first + (r + 1)·chunk), chunk = ceil(cnt / ATTN_O_CLUSTER) for the
 * cnt positions from first to *pos (all, or a sliding window's last), and rows
 * [r·rows_per, (r + 1)·rows_per) of the o-projection.
 *  - Before the dependency wait (read-only data only) it requests with cp.async the K and V rows of
 *    its positions before *pos (KV head h / group, written by earlier tokens) and its o rows
 *    restricted to head h's head_dim columns: the o-projection's bytes arrive while the q/k/v
 *    step still runs, instead of in a kernel of their own after the attention.
 *  - After the wait: the newest K/V row (the q/k/v step stored it) and q. Lane l of warp w scores
 *    position 32w + l of the block's span, the warp takes the softmax of its 32 positions with
 *    shuffles and sums their weighted V rows (head_dim / 32 dims a lane), and the block combines
 *    its warps into (max, sum of exp, unnormalised output).
 *  - Each block stores its partial into every block of the cluster (distributed shared memory;
 *    the blocks arrive at a cluster barrier as they start and wait on it before these stores, so
 *    every block's shared memory is there), then one cluster barrier; each block combines the
 *    partials, now in its own shared memory, into the head's output (block 0 also writes it to
 *    the attention output), and no barrier is left before the blocks leave. On one H100 with
 *    SmolLM3-3B: 410.8 / 556.8 tokens/s (BF16 / quality FP8) against 408.0 / 551.4 when each
 *    block read the others' partials after the barrier instead (THIN_CUDA_AO_PUSH=0, which also
 *    needs a second barrier so that no block leaves while another reads it).
 *  - Its o rows times that output (a thread a row), added into the residual with float4 atomics:
 *    every head adds into every row, in no fixed order.
 *  - Where the q/k/v step's epilogue could not take the token's rope and KV store (Qwen3's per-head
 *    q and k norms need whole heads; a partial rotation), this kernel takes them instead of a rope
 *    kernel between the two (attn_o_args.r, ROPE): after the wait two threads a dim normalise and
 *    rotate q and the newest k, and the block of the group's first query head stores k and v. On
 *    one H100 with a random Qwen3-1.7B: 665.7 / 838.9 tokens/s (BF16 / quality FP8) against 656.3
 *    / 815.4 with the rope kernel (THIN_CUDA_AO_ROPE=0).
 * Solo tokens (attn_o_args.solo, THIN_CUDA_AO_SOLO; by default up to 64 positions): every block of
 * a head takes all the token's positions itself (its warps split them as above), so its partial is
 * the head's output and the cluster's blocks do not meet: the barrier's wait for the cluster's
 * slowest block and the combine leave the chain, for 8 copies of the K/V rows (read from L2 during
 * the q/k/v step). With up to 80 positions or more (BF16 K/V, head_dim 128: 42 KB of K/V rows a
 * block) the decode ran 4% (BF16) and 9% (quality FP8) slower on an H100, a cliff between 64 and
 * 80 that the larger blocks' fit beside the kernels before and after them would explain (not
 * traced).
 * The MLP's first rows ahead (attn_args.pf, THIN_CUDA_MLP_PF): as its blocks start, the kernel
 * asks L2 for the first gate and up rows of every block of the MLP kernel after it (8 a block by
 * default; one bulk prefetch each), which then arrive while the attention's latency-bound steps
 * leave the memory partly idle, and the MLP's first loads hit L2. More rows ahead than that queue
 * in front of the attention's own reads (decode-notes.md, the twenty-ninth round).
 * THIN_CUDA_AO_OLATE=1 (opt-in; the plain instance, OLATE): the o rows are asked for after the
 * wait instead, once q and the newest K/V row are in, so that their bytes stream during the
 * attention rather than beside the q/k/v step, whose own rows set its end (decode-notes.md, the
 * thirty-first and thirty-second rounds; not yet timed).
 * A split over devices keeps this shape: a device's heads are its columns of o, and its sums go
 * into a partial residual that the all-reduce adds up.
 *
 * The file also holds the attention block kernel (qao_kernel, opt-in THIN_CUDA_QAO=1), which does
 * the q/k/v step's work as well, in the same grid without clusters; both share the attention + o
 * tail (ao_tail). On the H200 it measured slower than the q/k/v matvec and this kernel (see its
 * comment and bench/results/decode-notes.md).
 */
#include <cooperative_groups.h>

#include "attn_dev.cuh"
#include "matvec_dev.cuh"

namespace cg = cooperative_groups;

int thin_cuda_ao_push = 1;
int thin_cuda_ao_gen = 0; /* env THIN_CUDA_AO_GEN=1: the general instance for every attention (for measurements) */
int thin_cuda_ao_rope = 1;
int thin_cuda_ao_solo = ATTN_O_SOLO_DEFAULT; /* env THIN_CUDA_AO_SOLO: see attn_o_args.solo */
int thin_cuda_ao_olate = 0; /* env THIN_CUDA_AO_OLATE: see launch_ao_k */
int thin_cuda_mlp_pf[2] = {MLP_PF_DEFAULT, 1}; /* env THIN_CUDA_MLP_PF: see l2_ahead */

#define AO_WARPS 8u
#define AO_THREADS (AO_WARPS * 32u)
#define AO_CHUNK_MAX (32u * AO_WARPS) /* positions per block: a warp per 32 */

/* o rows per block: the rows over the cluster, rounded up to whole float4s. */
static __host__ __device__ inline uint32_t ao_rows_per(uint32_t rows) {
    return ((rows + ATTN_O_CLUSTER - 1) / ATTN_O_CLUSTER + 3) / 4 * 4;
}

/* Byte offsets of the dynamic shared memory: the weight area (o rows; in the attention block
 * kernel first its q rows, at least w_min bytes), x (x_bytes; that kernel only), K rows, V rows
 * (chunk of each), q, the warps' sums, the head's output (in the matvec's float4 planes), the
 * block's partial (head_dim sums, max, sum of exp), the o products, the cluster's partials as
 * pushed by its blocks (pall floats; THIN_CUDA_AO_PUSH), n_bar mbarriers. The o rows
 * lie 16 bytes longer than their head_dim columns, so that the 16-byte reads of consecutive rows by
 * the lanes of a warp fall in distinct banks. */
struct ao_layout {
    uint32_t w, xs, k, v, q, red, oh, part, ys, pall, bar, total;
};
static __host__ __device__ inline ao_layout ao_layout_of(uint32_t hd, int kv_dtype, int o_dtype, uint32_t rows_per,
                                                         uint32_t chunk, uint32_t w_min = 0, uint32_t x_bytes = 0,
                                                         uint32_t n_bar = 0, uint32_t pall = 0) {
    ao_layout l;
    const uint32_t wrb = hd * (o_dtype == THIN_DTYPE_F8_E4M3 ? 1u : 2u) + 16; /* padded: see above */
    const uint32_t wb = rows_per * wrb > w_min ? rows_per * wrb : w_min;
    l.w = 0;
    l.xs = (wb + 15) / 16 * 16;
    l.k = l.xs + x_bytes;
    l.v = l.k + chunk * ah_krow(hd, kv_dtype);
    l.q = l.v + chunk * hd * (kv_dtype == THIN_DTYPE_BF16 ? 2u : 4u);
    l.red = l.q + hd * 4;
    l.oh = l.red + AO_WARPS * hd * 4;
    l.part = l.oh + hd * 4;
    l.ys = l.part + (hd + 4) * 4;
    l.pall = l.ys + rows_per * 4; /* rows_per is a multiple of 4 */
    l.bar = (l.pall + pall * 4 + 7) / 8 * 8;
    l.total = l.bar + n_bar * 8;
    return l;
}

/* How the blocks of a head meet in ao_tail: through the cluster (GL false), or (GL, the attention
 * block kernel, no clusters) through global memory: each block's partial at part + (h · 8 + rank) ·
 * (head_dim + 4), counted in pcnt[h] (each launch adds 8; epoch: the launch), and the residual add
 * only once count (the blocks that have read the residual) reaches target. */
struct ao_sync {
    float *part;
    unsigned long long *pcnt;
    const unsigned long long *count;
    unsigned long long epoch, target;
};

/* The attention + o tail of both kernels: the block's K/V rows of its span in shared memory, q in
 * qs, the o rows requested (cp.async, the newest commit group). Scores, softmax and V sum of the
 * span, the head's blocks' combine (GL: through global memory, see ao_sync), the o rows times the
 * head's output, added into the residual. */
template <int KDT, int WDT, int DPL, bool GL, bool PUSH = false, bool GEN = true>
__device__ __forceinline__ void ao_tail(const attn_o_args &p, const ao_layout &L, uint8_t *smb, float *mlw,
                                        uint32_t cnt, uint32_t chunk, uint32_t len, uint32_t r0, uint32_t nr,
                                        float4 sc4, const ao_sync &sy, ktrace &kt, unsigned int kind) {
    constexpr uint32_t HD = 32 * DPL, EPV = kv_epv<KDT>::n, ESZ = KDT == THIN_DTYPE_BF16 ? 2 : 4;
    constexpr uint32_t WSZ = WDT == THIN_DTYPE_F8_E4M3 ? 1 : 2, WRB = HD * WSZ, VPR = WRB / 16, WRP = WRB + 16;
    constexpr uint32_t PS = HD / vec_of<WDT>::epv * 4; /* plane stride of the head's output */
    const attn_args &a = p.a;
    const uint32_t rank = blockIdx.x, h = blockIdx.y;
    const uint32_t tid = threadIdx.x, lane = tid & 31, w = tid >> 5;
    const uint32_t krb = ah_krow(HD, KDT), vrb = HD * ESZ, vpr = vrb / 16;
    uint8_t *ws = smb + L.w, *ks = smb + L.k, *vs = smb + L.v;
    float *qs = (float *)(smb + L.q), *red = (float *)(smb + L.red), *oh = (float *)(smb + L.oh);
    float *part = (float *)(smb + L.part), *ys = (float *)(smb + L.ys);
    /* solo (attn_o_args.solo): the span is all cnt positions, so the block's partial is the head's
     * output and the cluster's blocks do not meet */
    const bool solo = !GL && cnt <= p.solo;
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
            if constexpr (GEN)
                s = attn_cap((s0 + s1) * attn_scale_of(a), a.softcap);
            else /* the default scale and no soft cap (ao_general) */
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
    constexpr uint32_t GPS = HD + 4; /* floats from one block's global (or pushed) partial to the next */
    float *pall = (float *)(smb + L.pall);
    /* PUSH: every block of the cluster has started (its arrival at the kernel's start), so its
     * shared memory may be written */
    if (PUSH && !solo) cluster_wait();
    /* the block's partial: its sums against its own max (an empty span: max -inf, sum 0); PUSH:
     * stored straight into every block's pall (an empty span's block stores nothing: the merge
     * reads the blocks with positions only) */
    for (uint32_t d = tid; d < HD; d += AO_THREADS) {
        float M = -INFINITY;
        for (uint32_t k = 0; k < nact; k++) M = fmaxf(M, mlw[2 * k]);
        float Ls = 0.0f, o = 0.0f;
        for (uint32_t k = 0; k < nact; k++) {
            const float f = expf(mlw[2 * k] - M);
            Ls += mlw[2 * k + 1] * f;
            o += red[k * HD + d] * f;
        }
        if (solo) {
            const float v = o / Ls;
            oh[x_index<WDT>(d, PS)] = v;
            if (rank == 0) a.out[(size_t)h * HD + d] = v;
        } else if constexpr (PUSH) {
            if (nact) {
#pragma unroll
                for (uint32_t b = 0; b < ATTN_O_CLUSTER; b++) {
                    float *pb = cg::this_cluster().map_shared_rank(pall, b) + rank * GPS;
                    pb[d] = o;
                    if (d == 0) pb[HD] = M, pb[HD + 1] = Ls;
                }
            }
        } else {
            part[d] = o;
            if (d == 0) part[HD] = M, part[HD + 1] = Ls;
        }
    }
    kt.mark(1);
    float *gpart = nullptr;
    if constexpr (GL) {
        gpart = sy.part + (size_t)h * ATTN_O_CLUSTER * GPS;
        __syncthreads(); /* part whole (its max and sum come from thread 0) */
        for (uint32_t d = tid; d < HD + 2; d += AO_THREADS) gpart[rank * GPS + d] = part[d];
        __syncthreads();
        if (tid == 0) { /* publish ours (ordered before the fence by the barrier), await the others' */
            __threadfence();
            atomicAdd(sy.pcnt + h, 1ull);
            const unsigned long long t = (sy.epoch + 1) * ATTN_O_CLUSTER;
            while (ld_acquire64(sy.pcnt + h) < t) __nanosleep(20);
        }
        __syncthreads();
    } else if (!solo) {
        cluster_arrive();
        cluster_wait(); /* every block's partial is ready */
    }
    /* the head's output from its blocks that have positions */
    const uint32_t n_act = (cnt + chunk - 1) / chunk;
    for (uint32_t d = tid; d < HD && !solo; d += AO_THREADS) {
        float mb[ATTN_O_CLUSTER], lb[ATTN_O_CLUSTER], ob[ATTN_O_CLUSTER];
#pragma unroll
        for (uint32_t b = 0; b < ATTN_O_CLUSTER; b++) {
            mb[b] = -INFINITY, lb[b] = 0.0f, ob[b] = 0.0f;
            if (b < n_act) {
                if constexpr (GL) {
                    const float *pb = gpart + b * GPS;
                    mb[b] = __ldcg(pb + HD);
                    lb[b] = __ldcg(pb + HD + 1);
                    ob[b] = __ldcg(pb + d);
                } else if constexpr (PUSH) {
                    const float *pb = pall + b * GPS;
                    mb[b] = pb[HD];
                    lb[b] = pb[HD + 1];
                    ob[b] = pb[d];
                } else {
                    const float *pb = cg::this_cluster().map_shared_rank(part, b);
                    mb[b] = pb[HD];
                    lb[b] = pb[HD + 1];
                    ob[b] = pb[d];
                }
            }
        }
        const float3 r = softmax_merge<ATTN_O_CLUSTER>(mb, lb, ob);
        const float v = r.x / r.y;
        oh[x_index<WDT>(d, PS)] = v;
        if (rank == 0) a.out[(size_t)h * HD + d] = v;
    }
    if (!GL && !PUSH && !solo) cluster_arrive(); /* this block reads no other block's shared memory from here on */
    gm_wait<0>();
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
    if (sy.count && tid == 0) /* every block has read the residual: this one's sums may now go in */
        while (ld_acquire64(sy.count) < sy.target) __nanosleep(32);
    __syncthreads();
    kt.mark(3);
    if (4 * tid < nr) { /* nr is a multiple of 4 */
        float4 y = ((const float4 *)ys)[tid];
        y.x *= sc4.x, y.y *= sc4.y, y.z *= sc4.z, y.w *= sc4.w;
        atomic_add4(p.resid + r0 + 4 * tid, y);
    }
    if (tid == 0) kt.end(kind, 4);
    if (!GL && !PUSH && !solo) cluster_wait(); /* no block leaves while another still reads its partial */
    if (PUSH && solo) cluster_wait(); /* pairs the arrival at the kernel's start (every block has long made it) */
}

/* Where a block of either kernel works: positions [start, end) of the token's cnt, which end at
 * npos (all of them, or a sliding window's; chunk a block; pos0 the token's), o rows
 * [r0, r0 + nr). */
struct ao_span {
    uint32_t pos0, npos, cnt, chunk, start, end, len, r0, nr;
    /* whether the span holds the token's own position, whose K/V row the token stores */
    __device__ __forceinline__ bool has_newest() const { return pos0 >= start && pos0 < end; }
};
template <bool GEN = true>
__device__ __forceinline__ ao_span ao_span_of(const attn_o_args &p, uint32_t rank) {
    ao_span s;
    s.pos0 = (uint32_t)*p.a.pos;
    s.npos = s.pos0 + 1;
    const uint32_t first = GEN ? attn_first(s.npos, p.a.window) : 0;
    s.cnt = s.npos - first;
    const bool solo = s.cnt <= p.solo; /* every block all of them */
    s.chunk = solo ? s.cnt : (s.cnt + ATTN_O_CLUSTER - 1) / ATTN_O_CLUSTER;
    s.start = min(s.npos, first + (solo ? 0 : rank) * s.chunk);
    s.end = min(s.npos, s.start + s.chunk);
    s.len = s.end - s.start;
    s.r0 = min(p.o.rows, rank * p.rows_per);
    s.nr = min(p.o.rows - s.r0, p.rows_per);
    return s;
}

/* KV head kh's cache rows: K and V of position 0, and the bytes from one position to the next. */
template <int KDT, int HD>
struct ao_cache {
    static constexpr uint32_t ESZ = KDT == THIN_DTYPE_BF16 ? 2 : 4, VPR = HD * ESZ / 16;
    const uint8_t *kc, *vc;
    size_t pstride;
    __device__ __forceinline__ ao_cache(const attn_args &a, uint32_t kh) {
        pstride = (size_t)a.n_kv * HD * ESZ;
        kc = (const uint8_t *)a.kcache + (size_t)kh * HD * ESZ;
        vc = (const uint8_t *)a.vcache + (size_t)kh * HD * ESZ;
    }
    /* the span's rows before *pos into ks / vs (cp.async, one commit group) */
    __device__ __forceinline__ void stage(const ao_span &s, uint8_t *ks, uint8_t *vs) const {
        const uint32_t pre = min(s.end, s.pos0) > s.start ? min(s.end, s.pos0) - s.start : 0;
        ad_stage_rows(ks, ah_krow(HD, KDT), vs, HD * ESZ, kc, vc, pstride, s.start, pre, VPR, AO_THREADS);
    }
    /* the newest row (*pos, written by another kernel or block) when the span holds it */
    __device__ __forceinline__ void newest(const ao_span &s, uint8_t *ks, uint8_t *vs) const {
        if (!s.has_newest()) return;
        const uint32_t i = s.pos0 - s.start;
        ad_load_row(ks + i * ah_krow(HD, KDT), vs + i * HD * ESZ, kc + (size_t)s.pos0 * pstride,
                    vc + (size_t)s.pos0 * pstride, VPR, AO_THREADS);
    }
};

/* The block's o rows restricted to head h's columns into ws (rows WRP bytes apart, cp.async, one
 * commit group), and the FP8 scales of this thread's four rows of the residual add. */
template <int WDT, int HD>
__device__ __forceinline__ float4 ao_request_o(const attn_o_args &p, const ao_span &s, uint32_t h, uint8_t *ws) {
    constexpr uint32_t WSZ = WDT == THIN_DTYPE_F8_E4M3 ? 1 : 2, WRB = HD * WSZ, VPR = WRB / 16, WRP = WRB + 16;
    const uint32_t tid = threadIdx.x;
    const size_t pb = (size_t)p.o.pitch * WSZ;
    const uint8_t *src = (const uint8_t *)p.o.data + (size_t)s.r0 * pb + (size_t)h * WRB;
    for (uint32_t i = tid; i < s.nr * VPR; i += AO_THREADS) {
        const uint32_t r = i / VPR, c = i - r * VPR;
        gm_cp16(ws + r * WRP + c * 16, src + r * pb + c * 16);
    }
    gm_commit();
    float4 sc4 = make_float4(1.0f, 1.0f, 1.0f, 1.0f);
    if (WDT == THIN_DTYPE_F8_E4M3 && 4 * tid < s.nr) { /* nr <= 4 * AO_THREADS */
        const float *sp = p.o.scale + s.r0 + 4 * tid;
        sc4 = make_float4(__ldg(sp), __ldg(sp + 1), __ldg(sp + 2), __ldg(sp + 3));
    }
    return sc4;
}

/* After the wait, with the rope in this kernel (attn_o_args.r): q of head h and the newest k of KV
 * head kh, each normalised (where the model has a head norm) and rotated by two threads a dim
 * (thread t < HD q's dim t, thread HD + t k's; d: its rope_dim_of, taken before the wait) through
 * rope_store_kernel's helpers, q into qs, and where the block's span holds the token's position its k
 * and v (rounded as the cache holds them) into that row of ks and vs; the block of the group's
 * first query head also stores them into the caches, which only later tokens read. tmp: 2 HD
 * floats, sums: AO_WARPS floats of shared memory. */
template <int KDT, uint32_t HD>
__device__ __forceinline__ void ao_rope_newest(const attn_o_args &p, const ao_span &s, uint32_t h, uint32_t kh,
                                               const rope_dim &d, float *qs, uint8_t *ks, uint8_t *vs, float *tmp,
                                               float *sums) {
    static_assert(2 * HD <= AO_THREADS, "two threads a dim");
    constexpr uint32_t ESZ = KDT == THIN_DTYPE_BF16 ? 2 : 4;
    const rope_args &r = p.r;
    const uint32_t t = threadIdx.x, isk = t >= HD, i = isk ? t - HD : t;
    const bool act = t < 2 * HD;
    float v = 0.0f;
    if (act) v = __ldcg(isk ? r.k + (size_t)kh * HD + i : r.q + (size_t)h * HD + i);
    if (r.q_norm || r.k_norm) {
        const float ss = warp_sum(v * v);
        if ((t & 31) == 0) sums[t >> 5] = ss;
        __syncthreads();
        if (act && (isk ? r.k_norm : r.q_norm)) {
            float sum = 0.0f;
            for (uint32_t w = isk * (HD / 32); w < (isk + 1) * (HD / 32); w++) sum += sums[w];
            v = rope_dim_norm(r, isk, d, v, sum);
        }
    }
    if (r.q_freq || r.k_freq) {
        if (act) tmp[t] = v;
        __syncthreads();
        if (act && (isk ? r.k_freq : r.q_freq)) v = rope_dim_rotate(r, isk, d, i, v, tmp + isk * HD);
    }
    if (!act) return;
    if (!isk) {
        qs[i] = v;
        return;
    }
    if (!s.has_newest()) return;
    const float vv = __ldcg(r.v + (size_t)kh * HD + i);
    const uint32_t slot = s.pos0 - s.start;
    store_kv(ks + slot * ah_krow(HD, KDT), KDT, i, v);
    store_kv(vs + slot * HD * ESZ, KDT, i, vv);
    if (h % (p.a.n_heads / p.a.n_kv) == 0) {
        const size_t c = (size_t)s.pos0 * p.a.n_kv * HD + (size_t)kh * HD + i;
        store_kv(r.kcache, KDT, c, v);
        store_kv(r.vcache, KDT, c, vv);
    }
}

/* At most 64 registers a thread (four blocks' worth per SM), so that a block fits beside a q/k/v
 * matvec block (12 warps of up to 128 registers) and starts, and requests its rows, while that
 * step still runs. ROPE: the token's rope and KV store too (attn_o_args.r). */
/* GEN: a sliding window, a soft cap or a scale other than 1/sqrt(head_dim) (ao_general); without
 * them the plain instance, whose score is one constant multiply. */
template <int KDT, int WDT, int DPL, bool PUSH, bool ROPE, bool GEN, bool OLATE = false>
__global__ void __launch_bounds__(AO_THREADS, 4) attn_o_kernel(const attn_o_args p) {
    pdl_trigger();
    if constexpr (PUSH) cluster_arrive_relaxed(); /* this block has started (ao_tail waits for all) */
    ktrace kt;
    kt.start();
    constexpr uint32_t HD = 32 * DPL;
    extern __shared__ __align__(16) uint8_t smb[];
    __shared__ float mlw[2 * AO_WARPS];
    const attn_args &a = p.a;
    const uint32_t rank = blockIdx.x, h = blockIdx.y, kh = h / (a.n_heads / a.n_kv);
    const ao_span s = ao_span_of<GEN>(p, rank);
    if (s.chunk > a.chunk_max) return; /* never, by the caller's limit (the same for the whole grid) */
    const ao_layout L = ao_layout_of(HD, KDT, WDT, p.rows_per, a.chunk_max, 0, 0, 0, PUSH ? ATTN_O_CLUSTER * (HD + 4) : 0);
    /* K/V rows before *pos (one commit group), then the o rows (another) */
    const ao_cache<KDT, HD> kv(a, kh);
    kv.stage(s, smb + L.k, smb + L.v);
    float4 sc4 = make_float4(1.0f, 1.0f, 1.0f, 1.0f);
    if constexpr (!OLATE) sc4 = ao_request_o<WDT, HD>(p, s, h, smb + L.w);
    if (a.pf.at == 1) l2_ask_ahead(a.pf);
    rope_dim rd = {1.0f, 0.0f, 1.0f};
    if constexpr (ROPE) /* thread t < HD: q's dim t; HD <= t < 2 HD: k's dim t - HD */
        if (threadIdx.x < 2 * HD) rd = rope_dim_of(p.r, threadIdx.x >= HD, threadIdx.x % HD, (int32_t)s.pos0);
    pdl_wait();
    kt.waited();
    if constexpr (ROPE) {
        ao_rope_newest<KDT, HD>(p, s, h, kh, rd, (float *)(smb + L.q), smb + L.k, smb + L.v, (float *)(smb + L.red),
                                mlw);
    } else {
        kv.newest(s, smb + L.k, smb + L.v);
        const float4 *q4 = (const float4 *)(a.q + (size_t)h * HD);
        for (uint32_t i = threadIdx.x; i < HD / 4; i += AO_THREADS) ((float4 *)(smb + L.q))[i] = __ldcg(q4 + i);
    }
    /* OLATE (THIN_CUDA_AO_OLATE): the o rows now, once every thread's q and newest K/V loads are
     * in (the barrier), so that they stream during the attention instead of beside the q/k/v
     * step; still the newest commit group */
    if constexpr (OLATE) {
        __syncthreads();
        sc4 = ao_request_o<WDT, HD>(p, s, h, smb + L.w);
    }
    gm_wait<1>(); /* the K/V rows; the o rows may still come */
    __syncthreads();
    if (a.pf.at == 2) l2_ask_ahead(a.pf);
    const ao_sync sy = {nullptr, nullptr, nullptr, 0, 0};
    ao_tail<KDT, WDT, DPL, false, PUSH, GEN>(p, L, smb, mlw, s.cnt, s.chunk, s.len, s.r0, s.nr, sc4, sy, kt,
                                             TRACE_ATTN_O);
    if (a.pf.at == 3) l2_ask_ahead(a.pf);
}

/* The attention block kernel: q, k and v of the token (the RMSNorm of the residual, the three
 * projections, rope, the KV store) and the attention + o kernel's work in one launch, so that the
 * q/k/v step's end and the attention's start are no longer a grid-wide wait. The attention + o
 * kernel's grid (block `rank` of query head h) without clusters: one block an SM (its shared
 * memory is padded to more than half an SM's), the whole grid resident at once (the host checks
 * that it is no larger than the SMs), which the waits below rely on. (In clusters of 8 the
 * scheduler put two blocks on an SM, on 71 of the 132 SMs, and the q/k/v rows streamed at half
 * speed there; at one block an SM, 15 clusters of 8 fit at once: bench/results/decode-notes.md.)
 * The head's blocks meet through global memory and grow-only counters, count[...]: [0] the blocks
 * that have staged x (each launch adds the grid; its value before a block's increment gives the
 * launch, `epoch`), [1 + kh] KV head kh's stored pairs, [1 + n_kv + h] head h's q pairs, [1 + n_kv
 * + n_heads + h] head h's partials.
 *  - q: the head's head_dim / 2 rope pairs (rows i, i + head_dim / 2) split over its 8 blocks, qp a
 *    block; their rows are requested with bulk copies into shared memory before the dependency
 *    wait; rotated, they go into q, and each block reads the head's q once all are in.
 *  - k and v: KV head kh's head_dim pairs (k's rope pairs, then v's rows i, i + head_dim / 2)
 *    split over the 8G blocks of its G query heads, kvp a block, one a warp: the first batch of
 *    each warp's rows in registers before the wait. Each pair goes into the cache at *pos; the
 *    block whose span holds *pos reads that row once all its KV head's pairs are stored.
 *  - x: the residual through the fused RMSNorm, staged after the wait as the matvec does. Every
 *    block adds its o products into that residual, so it does so only once every block has
 *    staged it.
 *  - the o rows go into the q rows' shared memory once those are read, then the attention + o
 *    tail (ao_tail), its partials combined through global memory.
 * A split over devices keeps this shape: a device's heads are its columns of o and its rows of q,
 * k and v, the KV heads of its query heads with them. */
template <int KDT, int WDT, int DPL>
__global__ void __launch_bounds__(AO_THREADS, 1) qao_kernel(const qao_args p) {
    constexpr uint32_t HD = 32 * DPL, HALF = HD / 2, EPV = vec_of<WDT>::epv;
    constexpr uint32_t WSZ = WDT == THIN_DTYPE_F8_E4M3 ? 1 : 2;
    constexpr int HB = MV_UNROLL;
    extern __shared__ __align__(16) uint8_t smb[];
    __shared__ float mlw[2 * AO_WARPS], red32[32];
    const mv_args &m = p.mv;
    const attn_args &a = p.ao.a;
    const uint32_t rank = blockIdx.x, h = blockIdx.y, G = a.n_heads / a.n_kv, kh = h / G;
    const uint32_t tid = threadIdx.x, lane = tid & 31, w = tid >> 5;
    const ao_span s = ao_span_of(p.ao, rank);
    if (s.chunk > a.chunk_max) return; /* never, by the caller's limit (the same for the whole grid) */
    pdl_trigger();
    ktrace kt;
    kt.start();
    unsigned long long *kvcnt = p.count + 1, *qcnt = kvcnt + a.n_kv, *pcnt = qcnt + a.n_heads;
    const uint32_t cols = m.seg[0].w.cols, pitch = m.seg[0].w.pitch, nvec = pitch / EPV;
    const uint32_t rowb = pitch * WSZ;
    const ao_layout L = ao_layout_of(HD, KDT, WDT, p.ao.rows_per, a.chunk_max, p.qp * 2 * rowb, pitch * 4, p.qp);
    uint8_t *wq = smb + L.w;
    float *xs = (float *)(smb + L.xs), *qs = (float *)(smb + L.q);
    uint64_t *bar = (uint64_t *)(smb + L.bar);
    /* 1. the block's q rows, bulk copies into shared memory */
    if (tid < p.qp) mbar_init(&bar[tid], 1);
    mbar_init_fence();
    __syncthreads();
    if (tid < p.qp) {
        const uint32_t rr = h * HD + rank * p.qp + tid;
        const uint64_t pol = evict_first_policy();
        uint8_t *dst = wq + (size_t)tid * 2 * rowb;
        mbar_expect_tx(&bar[tid], 2 * rowb);
        bulk_load(dst, row_ptr(m.seg[0].w, rr), rowb, &bar[tid], pol);
        bulk_load(dst + rowb, row_ptr(m.seg[0].w, rr + HALF), rowb, &bar[tid], pol);
    }
    /* 2. warp w's first K/V pair: its first batch of loads, its rotation and scales */
    const uint32_t gb = (h - kh * G) * ATTN_O_CLUSTER + rank; /* this block in its KV head's group */
    uint4 wr[2][HB];
    const uint4 *rows[2];
    int seg = 1;
    uint32_t rr = 0;
    float2 rot = make_float2(1.0f, 0.0f);
    mv_epi<2> e;
    auto kv_pair = [&](uint32_t i) { /* pair i of the block: its rows, or false past the last */
        const uint32_t u = gb * p.kvp + i;
        if (i >= p.kvp || u >= HD) return false;
        seg = u < HALF ? 1 : 2;
        rr = kh * HD + (u < HALF ? u : u - HALF);
        rows[0] = row_ptr(m.seg[seg].w, rr);
        rows[1] = row_ptr(m.seg[seg].w, rr + HALF);
        load_batch<2, HB>(wr, rows, lane, nvec);
        if (lane == 0) {
            rot = rope_rot(m, seg, rr);
            epi_weights<WDT, 2>(m, seg, rr, e);
        }
        return true;
    };
    uint32_t kvi = w;
    bool kv_more = kv_pair(kvi);
    /* warp w's first q pair: its rotation and scales */
    float2 qrot = make_float2(1.0f, 0.0f);
    mv_epi<2> qe;
    if (w < p.qp && lane == 0) {
        const uint32_t rq = h * HD + rank * p.qp + w;
        qrot = rope_rot(m, 0, rq);
        epi_weights<WDT, 2>(m, 0, rq, qe);
    }
    /* 3. the span's K/V rows before *pos, the norm weights */
    const ao_cache<KDT, HD> kv(a, kh);
    kv.stage(s, smb + L.k, smb + L.v);
    float nw[MV_XPRE];
    preload_norm(m, cols, nw);
    pdl_wait();
    kt.waited();
    stage_x<WDT>(xs, m, cols, pitch, red32, nw);
    ao_sync sy = {p.part, pcnt, p.count, 0, 0};
    if (tid == 0) { /* this block has read the residual */
        const unsigned long long nb = (unsigned long long)gridDim.x * gridDim.y;
        __threadfence();
        sy.epoch = atomicAdd(p.count, 1ull) / nb;
        sy.target = (sy.epoch + 1) * nb;
    }
    /* 4. the K/V pairs: into the cache (and k, v), each counted once stored */
    while (kv_more) {
        float acc[2] = {0.0f, 0.0f};
        use_batch<WDT, 2, HB>(wr, lane, nvec, xs, acc);
        for (uint32_t base = lane + 32 * HB; base < nvec; base += 32 * HB) {
            load_batch<2, HB>(wr, rows, base, nvec);
            use_batch<WDT, 2, HB>(wr, base, nvec, xs, acc);
        }
        acc[0] = warp_sum(acc[0]);
        acc[1] = warp_sum(acc[1]);
        if (lane == 0) {
            store_rope<WDT, true>(m, seg, rr, acc[0], acc[1], rot, e);
            __threadfence();
            atomicAdd(kvcnt + kh, 1ull);
        }
        kvi += AO_WARPS;
        kv_more = kv_pair(kvi);
    }
    /* 5. the q pairs, from shared memory, into q, each counted once stored */
    const uint32_t ps = nvec * 4;
    for (uint32_t i = w; i < p.qp; i += AO_WARPS) {
        mbar_wait(&bar[i], 0);
        const uint8_t *r0p = wq + (size_t)i * 2 * rowb, *r1p = r0p + rowb;
        float a0 = 0.0f, a1 = 0.0f;
        for (uint32_t v = lane; v < nvec; v += 32) {
            a0 += dot16<WDT>(*(const uint4 *)(r0p + v * 16), xs + 4 * v, ps);
            a1 += dot16<WDT>(*(const uint4 *)(r1p + v * 16), xs + 4 * v, ps);
        }
        a0 = warp_sum(a0);
        a1 = warp_sum(a1);
        if (lane == 0) {
            const uint32_t r = h * HD + rank * p.qp + i;
            if (i != w) {
                qrot = rope_rot(m, 0, r);
                epi_weights<WDT, 2>(m, 0, r, qe);
            }
            store_rope<WDT, true>(m, 0, r, a0, a1, qrot, qe);
            __threadfence();
            atomicAdd(qcnt + h, 1ull);
        }
    }
    __syncthreads(); /* this block's q rows are read */
    /* 6. the o rows into the q rows' space; the head's q and the newest K/V row once in */
    const float4 sc4 = ao_request_o<WDT, HD>(p.ao, s, h, smb + L.w);
    if (tid == 0) {
        while (ld_acquire64(qcnt + h) < (sy.epoch + 1) * HALF) __nanosleep(20);
        if (s.has_newest())
            while (ld_acquire64(kvcnt + kh) < (sy.epoch + 1) * HD) __nanosleep(20);
    }
    __syncthreads();
    const float4 *q4 = (const float4 *)(a.q + (size_t)h * HD);
    for (uint32_t i = tid; i < HD / 4; i += AO_THREADS) ((float4 *)qs)[i] = __ldcg(q4 + i);
    kv.newest(s, smb + L.k, smb + L.v);
    gm_wait<1>(); /* the K/V rows; the o rows may still come */
    __syncthreads();
    ao_tail<KDT, WDT, DPL, true>(p.ao, L, smb, mlw, s.cnt, s.chunk, s.len, s.r0, s.nr, sc4, sy, kt, TRACE_QAO);
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
    return ao_layout_of(head_dim, kv_dtype, o->dtype, ao_rows_per(o->rows), chunk, 0, 0, 0,
                        thin_cuda_ao_push ? ATTN_O_CLUSTER * (head_dim + 4) : 0)
        .total;
}

int qao_supported(uint32_t n_heads, uint32_t n_kv, uint32_t head_dim, int kv_dtype, const dmat *q, const dmat *k,
                  const dmat *v, const dmat *o) {
    if (!attn_o_supported(n_heads, n_kv, head_dim, kv_dtype, o)) return 0;
    const dmat *w[3] = {q, k, v};
    const uint32_t heads[3] = {n_heads, n_kv, n_kv};
    for (int i = 0; i < 3; i++) {
        if (w[i]->dtype != o->dtype || w[i]->trans || w[i]->rows != heads[i] * head_dim ||
            w[i]->cols != q->cols || w[i]->pitch != q->pitch || w[i]->row0 % head_dim)
            return 0;
        if (o->dtype == THIN_DTYPE_F8_E4M3 && !w[i]->scale) return 0;
    }
    return q->cols == o->rows;
}

/* q pairs and K/V pairs a block of the attention block kernel takes. */
static uint32_t qao_qp(uint32_t head_dim) { return head_dim / 2 / ATTN_O_CLUSTER; }
static uint32_t qao_kvp(uint32_t n_heads, uint32_t n_kv, uint32_t head_dim) {
    const uint32_t blocks = ATTN_O_CLUSTER * (n_heads / n_kv);
    return (head_dim + blocks - 1) / blocks;
}

size_t qao_smem(uint32_t head_dim, int kv_dtype, const dmat *q, const dmat *o, uint32_t chunk) {
    if (chunk > AO_CHUNK_MAX) return SIZE_MAX;
    const size_t rowb = (size_t)q->pitch * thin_dtype_size((thin_dtype)q->dtype);
    const uint32_t qp = qao_qp(head_dim);
    if (2 * qp * rowb > (1u << 30) || (size_t)q->pitch * 4 > (1u << 30)) return SIZE_MAX;
    return ao_layout_of(head_dim, kv_dtype, o->dtype, ao_rows_per(o->rows), chunk, (uint32_t)(2 * qp * rowb),
                        q->pitch * 4, qp)
        .total;
}

/* Whether the attention takes the general instance: a window, a soft cap, a scale of its own. */
static bool ao_general(const attn_args &a) {
    return thin_cuda_ao_gen || a.window != 0 || a.softcap > 0.0f || a.scale > 0.0f;
}

template <int KDT, int WDT, int DPL, bool PUSH, bool ROPE, bool GEN, bool OLATE = false>
static cudaError_t launch_ao_g(const attn_o_args &a, size_t smem, cudaStream_t st) {
    auto k = attn_o_kernel<KDT, WDT, DPL, PUSH, ROPE, GEN, OLATE>;
    cudaError_t e = smem_attr(k, smem, 2 * AO_WARPS * sizeof(float));
    if (e != cudaSuccess) return e;
    return launch_kc(k, dim3(ATTN_O_CLUSTER, a.a.n_heads), dim3(AO_THREADS), smem, st, dim3(ATTN_O_CLUSTER, 1, 1), a);
}
template <int KDT, int WDT, int DPL, bool PUSH, bool ROPE>
static cudaError_t launch_ao_k(const attn_o_args &a, size_t smem, cudaStream_t st) {
    if (ao_general(a.a)) return launch_ao_g<KDT, WDT, DPL, PUSH, ROPE, true>(a, smem, st);
    /* THIN_CUDA_AO_OLATE: the o rows after the wait, in the plain instance only (instances of
     * their own, so that the others keep their registers) */
    return thin_cuda_ao_olate ? launch_ao_g<KDT, WDT, DPL, PUSH, ROPE, false, true>(a, smem, st)
                              : launch_ao_g<KDT, WDT, DPL, PUSH, ROPE, false>(a, smem, st);
}
template <int KDT, int WDT, int DPL>
static cudaError_t launch_ao(const attn_o_args &a, size_t smem, cudaStream_t st) {
    if (a.r.k) { /* the rope too: pushed partials and at most 128 dims only (attn_o_rope_supported) */
        if constexpr (64 * DPL <= AO_THREADS) {
            if (thin_cuda_ao_push) return launch_ao_k<KDT, WDT, DPL, true, true>(a, smem, st);
        }
        return cudaErrorInvalidValue;
    }
    return thin_cuda_ao_push ? launch_ao_k<KDT, WDT, DPL, true, false>(a, smem, st)
                             : launch_ao_k<KDT, WDT, DPL, false, false>(a, smem, st);
}

int attn_o_rope_supported(uint32_t head_dim) {
    return thin_cuda_ao_push && thin_cuda_ao_rope && 2 * head_dim <= AO_THREADS;
}

/* The attention block kernel's launch, or with per_sm set, its blocks an SM at most (the
 * occupancy calculator's, for this shared memory) into *per_sm instead. */
template <int KDT, int WDT, int DPL>
static cudaError_t launch_qao_k(const qao_args &a, size_t smem, cudaStream_t st, int *per_sm) {
    auto k = qao_kernel<KDT, WDT, DPL>;
    cudaError_t e = smem_attr(k, smem, (2 * AO_WARPS + 32) * sizeof(float));
    if (e != cudaSuccess) return e;
    if (per_sm) return cudaOccupancyMaxActiveBlocksPerMultiprocessor(per_sm, k, AO_THREADS, smem);
    return launch_k(k, dim3(ATTN_O_CLUSTER, a.ao.a.n_heads), dim3(AO_THREADS), smem, st, a);
}

/* f.run<KDT, WDT, DPL>() for the KV dtype, weight dtype and head_dim given. */
template <int K, int W, typename F>
static cudaError_t ao_dispatch_hd(uint32_t hd, const F &f) {
    switch (hd) {
    case 32: return f.template run<K, W, 1>();
    case 64: return f.template run<K, W, 2>();
    case 128: return f.template run<K, W, 4>();
    default: return f.template run<K, W, 8>();
    }
}
template <typename F>
static cudaError_t ao_dispatch(int kvdt, int wdt, uint32_t hd, const F &f) {
    const bool f8 = wdt == THIN_DTYPE_F8_E4M3;
    if (kvdt == THIN_DTYPE_BF16)
        return f8 ? ao_dispatch_hd<THIN_DTYPE_BF16, THIN_DTYPE_F8_E4M3>(hd, f)
                  : ao_dispatch_hd<THIN_DTYPE_BF16, THIN_DTYPE_BF16>(hd, f);
    return f8 ? ao_dispatch_hd<THIN_DTYPE_F32, THIN_DTYPE_F8_E4M3>(hd, f)
              : ao_dispatch_hd<THIN_DTYPE_F32, THIN_DTYPE_BF16>(hd, f);
}
struct ao_launcher {
    const attn_o_args &a;
    size_t smem;
    cudaStream_t st;
    template <int K, int W, int D>
    cudaError_t run() const { return launch_ao<K, W, D>(a, smem, st); }
};
struct qao_launcher {
    const qao_args &a;
    size_t smem;
    cudaStream_t st;
    int *per_sm;
    template <int K, int W, int D>
    cudaError_t run() const { return launch_qao_k<K, W, D>(a, smem, st, per_sm); }
};

cudaError_t launch_attn_o(const attn_o_args *p, cudaStream_t st) {
    if (!attn_o_supported(p->a.n_heads, p->a.n_kv, p->a.head_dim, p->a.kv_dtype, &p->o) ||
        p->a.chunk_max == 0 || p->a.chunk_max > AO_CHUNK_MAX)
        return cudaErrorInvalidValue;
    attn_o_args a = *p;
    a.rows_per = ao_rows_per(a.o.rows);
    const size_t smem = attn_o_smem(a.a.head_dim, a.a.kv_dtype, &a.o, a.a.chunk_max);
    return ao_dispatch(a.a.kv_dtype, a.o.dtype, a.a.head_dim, ao_launcher{a, smem, st});
}

/* The attention block kernel's arguments completed (rows and pairs a block), its shared memory
 * (at least smem_min). */
static cudaError_t qao_prepare(const qao_args *p, qao_args *a, size_t *smem) {
    const attn_args &t = p->ao.a;
    if (!qao_supported(t.n_heads, t.n_kv, t.head_dim, t.kv_dtype, &p->mv.seg[0].w, &p->mv.seg[1].w,
                       &p->mv.seg[2].w, &p->ao.o) ||
        t.chunk_max == 0 || t.chunk_max > AO_CHUNK_MAX || p->mv.nseg != 3 || !p->mv.rope)
        return cudaErrorInvalidValue;
    *a = *p;
    a->ao.rows_per = ao_rows_per(a->ao.o.rows);
    a->qp = qao_qp(t.head_dim);
    a->kvp = qao_kvp(t.n_heads, t.n_kv, t.head_dim);
    *smem = qao_smem(t.head_dim, t.kv_dtype, &a->mv.seg[0].w, &a->ao.o, t.chunk_max);
    if (*smem < p->smem_min) *smem = p->smem_min;
    return cudaSuccess;
}

cudaError_t launch_qao(const qao_args *p, cudaStream_t st) {
    qao_args a;
    size_t smem;
    if (!p->count || !p->part) return cudaErrorInvalidValue;
    cudaError_t e = qao_prepare(p, &a, &smem);
    if (e != cudaSuccess) return e;
    return ao_dispatch(a.ao.a.kv_dtype, a.ao.o.dtype, a.ao.a.head_dim, qao_launcher{a, smem, st, nullptr});
}

cudaError_t qao_per_sm(const qao_args *p, int *per_sm) {
    qao_args a;
    size_t smem;
    *per_sm = 0;
    cudaError_t e = qao_prepare(p, &a, &smem);
    if (e != cudaSuccess) return e;
    return ao_dispatch(a.ao.a.kv_dtype, a.ao.o.dtype, a.ao.a.head_dim, qao_launcher{a, smem, (cudaStream_t)0, per_sm});
}
