/*
 * stream.cu — the decode step's layers as one persistent kernel that streams the weights.
 *
 * A token's decode reads every weight once, so its speed is the rate at which the weights come in
 * from memory. Run as one kernel per op, each op boundary drains the memory pipe: the last blocks
 * of a matvec finish alone, the next kernel's blocks wait for registers, and the attention (a few
 * kilobytes of K and V) leaves the memory idle for microseconds per layer. Here one kernel runs a
 * run of decode steps (matvecs with their fusions, and attention) as phases, with one block per
 * SM, and the weights never stop flowing:
 *
 * - Each of the block's 8 warps owns a ring of slots of shared memory (as many as fit beside x,
 *   at most SK_SLOTS_MAX, of SK_SLOT bytes by default: two for SmolLM3), with one mbarrier per
 *   slot. Its lane 0 requests pieces of the weight rows the warp will need, in the order it will
 *   use them, by bulk asynchronous copies (cp.async.bulk, the TMA's one-dimensional form) into
 *   the next free slot, and re-fills a slot as soon as the warp has used it. The sequence runs
 *   across phases: while a warp waits for the previous phase to finish, or computes attention,
 *   its ring already holds the next matrices' first pieces. Optionally it also asks L2 for a few
 *   pieces past its ring (cp.async.bulk.prefetch.L2).
 * - Phases follow each other through counters in global memory: when a block has done its part
 *   of a phase it adds one to the phase's counter (after a fence), and a block starts a phase once
 *   the previous phase's counter holds every block. Only activations wait; weights do not depend
 *   on them. The last block to leave resets the counters for the next launch.
 * - A matvec phase works in units of one or two rows (a gate/up pair, rows i and i + head_dim/2
 *   of a head for the rope epilogue, or two neighbouring rows, which share each x element read
 *   from shared memory); each block takes a contiguous range of units (so every SM streams the
 *   same bytes) and its warps take them in turn. x is staged per block in shared memory as in
 *   matvec.cu (with the fused RMSNorm), and the epilogues are those of matvec.cu, their scales
 *   and residuals loaded while the pieces are used. The running phase's arguments are copied
 *   into shared memory, and every phase's compact weight source (sk_src) is kept there for the
 *   requests that run ahead.
 * - An attention phase runs the grouped attention (attn_dev.cuh) over (KV head, split) units, one
 *   per block at a time, in the space x is staged in; the last split of a head combines them.
 *
 * The grid is one block per SM and every block must be resident at once (the phase waits spin):
 * the kernel is launched with exactly the SM count, each block taking most of an SM's shared
 * memory. BF16 and FP8 weights; runs are made by stream_build from the compiled steps when env
 * THIN_CUDA_STREAM=1 (each step otherwise runs as its own kernels, as for prefill).
 *
 * Measured on the H200 (bench/results/decode-notes.md, "The persistent decode kernel"), it is
 * slower than the per-op kernels (344 against 475 tokens/s BF16): the weight stream keeps the
 * memory busy, and every access on the critical path (phase counters, x, q, K/V, attention
 * partials) waits behind it.
 * It stays opt-in as the base for that work.
 */
#include <string.h>

#include "attn_dev.cuh"
#include "cuda_session.cuh"
#include "matvec_dev.cuh"

#define SK_WARPS 8
#define SK_THREADS (SK_WARPS * 32)
#define SK_SLOT 8192u      /* bytes per ring slot (default): one piece of each row of a unit */
#define SK_SLOTS_MAX 8
#define SK_PF 0u           /* pieces per warp prefetched into L2 past its ring (default) */
#define SK_SMEM_MAX (226u * 1024u) /* of the 227 KiB a block may have, some left for static data */

enum { SK_MV = 1, SK_ATTN = 2 };

/* One phase of a run (built on the host, read by every block); an MV phase's geometry (units,
 * rows per unit, pieces) is in its sk_src, an attention phase's units are at's KV heads × splits. */
struct sk_phase {
    int kind;            /* SK_MV or SK_ATTN */
    int dtype;           /* MV: the weights' dtype (BF16 or F8_E4M3) */
    mv_args mv;
    attn_args at;
} __attribute__((aligned(16)));

enum { SK_PLAIN = 0, SK_PAIR = 1, SK_ROPE = 2 };

/* Where a phase's weight pieces come from, compactly (every block keeps all phases' in shared
 * memory, for the warps that request pieces ahead of the phase they compute, and the warps that
 * compute read the running phase's geometry from it). */
struct sk_src {
    const uint8_t *base[3]; /* each segment's first row */
    uint32_t rows[3];       /* rows per segment */
    uint32_t units;         /* units of nr rows; 0: nothing to stream (attention) */
    uint32_t row_bytes;     /* bytes per stored row */
    uint32_t piece;         /* bytes of each row per ring slot (a multiple of 16) */
    uint32_t pieces;        /* slots per unit */
    uint32_t half;          /* rope: head_dim / 2 */
    uint8_t nr, mode, nseg; /* rows per unit; SK_PLAIN, SK_PAIR or SK_ROPE; segments */
    uint8_t pad[9];
} __attribute__((aligned(16)));

#define SK_BAR_BYTES (SK_WARPS * SK_SLOTS_MAX * 8)
/* The thread that signals and awaits phases: not a lane that requests weight copies. */
#define SK_SYNC_THREAD 1

__device__ __forceinline__ unsigned int ld_acquire(const unsigned int *p) {
    unsigned int v;
    asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
    return v;
}

/* ---- the weight stream ---- */

/* First unit of block b's contiguous share of `units`. */
__device__ __forceinline__ uint32_t sk_lo(uint32_t units, uint32_t b) {
    return (uint32_t)((uint64_t)units * b / gridDim.x);
}

/* Segment and first row of unit u of a phase (see sk_src): the gate/up pair's row; with rope,
 * row a of rows (a, a + half) of a head; else the unit's first row. The same mapping as rows_of's
 * (matvec_dev.cuh), over the compact source. */
__device__ __forceinline__ uint32_t src_unit(const sk_src &d, uint32_t u, int *seg) {
    int s = 0;
    uint32_t r;
    if (d.mode == SK_PAIR) {
        r = u;
    } else if (d.mode == SK_ROPE) {
        while (s + 1 < d.nseg && u >= d.rows[s] / 2) u -= d.rows[s++] / 2;
        r = (u / d.half) * 2 * d.half + u % d.half;
    } else {
        r = u * d.nr;
        while (s + 1 < d.nseg && r >= d.rows[s]) r -= d.rows[s++];
    }
    *seg = s;
    return r;
}

/* Lane 0: the address of piece pc of unit u's first row, its length, and (*second) the address
 * of the same piece of the unit's second row (meaningful when nr is 2). */
__device__ __forceinline__ const uint8_t *src_piece(const sk_src &d, uint32_t u, uint32_t pc, uint32_t *len,
                                                   const uint8_t **second) {
    int s;
    const uint32_t r = src_unit(d, u, &s);
    const uint32_t off = pc * d.piece;
    const uint8_t *p0 = d.base[s] + (size_t)r * d.row_bytes + off;
    *second = d.mode == SK_PAIR   ? d.base[1] + (size_t)r * d.row_bytes + off
              : d.mode == SK_ROPE ? p0 + (size_t)d.half * d.row_bytes
                                  : p0 + d.row_bytes;
    *len = min(d.piece, d.row_bytes - off);
    return p0;
}

/* A warp's place in its sequence of pieces: phase, unit, piece of the unit (lane 0 only). */
struct sk_it {
    int ph;
    uint32_t u, pc, hi;
};

/* Moves it to this warp's first unit in a phase >= ph (it.ph = nph when there is none). */
__device__ __forceinline__ void sk_seek(const sk_src *D, int nph, int ph, sk_it &it) {
    const uint32_t w = threadIdx.x >> 5;
    for (; ph < nph; ph++) {
        const uint32_t u = sk_lo(D[ph].units, blockIdx.x) + w, hi = sk_lo(D[ph].units, blockIdx.x + 1);
        if (u < hi) {
            it.ph = ph, it.u = u, it.pc = 0, it.hi = hi;
            return;
        }
    }
    it.ph = nph;
}

__device__ __forceinline__ void sk_advance(const sk_src *D, int nph, sk_it &it) {
    if (++it.pc < D[it.ph].pieces) return;
    it.pc = 0;
    it.u += SK_WARPS;
    if (it.u < it.hi) return;
    sk_seek(D, nph, it.ph + 1, it);
}

/* Lane 0: requests the piece at it (when there is one) into slot, completing on bar. */
__device__ __forceinline__ void sk_issue(const sk_src *D, int nph, const sk_it &it, uint8_t *slot,
                                         uint64_t *bar, uint64_t pol) {
    if (it.ph >= nph) return;
    const sk_src &d = D[it.ph];
    uint32_t len;
    const uint8_t *second;
    const uint8_t *first = src_piece(d, it.u, it.pc, &len, &second);
    mbar_expect_tx(bar, len * d.nr);
    bulk_load(slot, first, len, bar, pol);
    if (d.nr == 2) bulk_load(slot + d.piece, second, len, bar, pol);
}

/* Lane 0: asks L2 for the piece at it (when there is one). */
__device__ __forceinline__ void sk_prefetch(const sk_src *D, int nph, const sk_it &it) {
    if (it.ph >= nph) return;
    const sk_src &d = D[it.ph];
    uint32_t len;
    const uint8_t *second;
    const uint8_t *first = src_piece(d, it.u, it.pc, &len, &second);
    l2_prefetch(first, len);
    if (d.nr == 2) l2_prefetch(second, len);
}

/* The per-warp ring: slots, their barriers, the pieces used so far and (lane 0) the request
 * cursor, and the L2 prefetch cursor that runs a few pieces ahead of it. */
struct sk_ring {
    uint8_t *slots;   /* this warp's n slots of sb bytes */
    uint64_t *bar;    /* n barriers */
    uint32_t n;       /* slots */
    uint32_t sb;      /* bytes per slot */
    uint32_t used;    /* pieces consumed */
    sk_it next;       /* the next piece to request */
    sk_it pf;         /* the next piece to prefetch into L2 (ahead of next) */
    uint64_t pol;
#if THIN_CUDA_TRACE
    unsigned long long waited; /* ns spent waiting for pieces (timeline builds) */
#endif
};

/* Waits for the next piece; returns its slot. */
__device__ __forceinline__ const uint8_t *ring_wait(sk_ring &r) {
    const uint32_t k = r.used % r.n;
#if THIN_CUDA_TRACE
    const unsigned long long t = gtimer();
#endif
    mbar_wait(&r.bar[k], (r.used / r.n) & 1u);
#if THIN_CUDA_TRACE
    r.waited += gtimer() - t;
#endif
    return r.slots + (size_t)k * r.sb;
}

/* The piece just waited for is used up: its slot takes the next request. */
__device__ __forceinline__ void ring_release(sk_ring &r, const sk_src *D, int nph) {
    const uint32_t k = r.used % r.n;
    __syncwarp();
    if ((threadIdx.x & 31) == 0 && r.next.ph < nph) {
        sk_issue(D, nph, r.next, r.slots + (size_t)k * r.sb, &r.bar[k], r.pol);
        sk_advance(D, nph, r.next);
        if (r.pf.ph < nph) {
            sk_prefetch(D, nph, r.pf);
            sk_advance(D, nph, r.pf);
        }
    }
    r.used++;
}

/* ---- phases ---- */

/* The epilogue of unit rows (rr, ...) of segment seg (rot: the rope rotation; sc, rv: lane 0's
 * early loads of the rows' FP8 scales and residuals). */
template <int DT, int NR>
__device__ __forceinline__ void sk_store(const mv_args &a, int seg, uint32_t rr, const float *acc, float2 rot,
                                         const float *sc, const float *rv) {
    if (a.rope) {
        mv_epi<2> e;
        epi_weights<DT, 2>(a, seg, rr, e);
        store_rope<DT, true>(a, seg, rr, acc[0], acc[1], rot, e);
    } else if (a.pair) {
        const float g = acc[0] * sc[0], u = acc[1] * sc[1];
        a.seg[1].out[rr] = u;
        a.seg[0].out[rr] = silu_f(g) * u;
    } else {
#pragma unroll
        for (int j = 0; j < NR; j++) {
            const float y = acc[j] * sc[j] + bias_of(a, seg, rr + j);
            a.seg[seg].out[rr + j] = y;
            if (a.resid) a.resid[rr + j] = rv[j] + y;
        }
    }
}

/* This block's part of an MV phase p (a copy in shared memory; g: its source and geometry): x
 * staged by the block's threads, then each warp's units. */
template <int DT, int NR>
__device__ void sk_matvec(const sk_phase &p, const sk_src &g, const sk_src *D, int nph, sk_ring &ring, float *xs,
                          float *red, const float (&nw)[MV_XPRE], unsigned long long *staged) {
    const mv_args &a = p.mv;
    stage_x<DT, true>(xs, a, a.seg[0].w.cols, a.seg[0].w.pitch, red, nw);
#if THIN_CUDA_TRACE
    if (threadIdx.x == 0) *staged = gtimer();
#else
    (void)staged;
#endif
    const uint32_t ps = a.seg[0].w.pitch / vec_of<DT>::epv * 4, lane = threadIdx.x & 31;
    const uint32_t hi = sk_lo(g.units, blockIdx.x + 1);
    for (uint32_t u = sk_lo(g.units, blockIdx.x) + (threadIdx.x >> 5); u < hi; u += SK_WARPS) {
        int seg;
        const uint32_t rr = src_unit(g, u, &seg);
        float2 rot = make_float2(1.0f, 0.0f);
        float sc[2] = {1.0f, 1.0f}, rv[2] = {0.0f, 0.0f};
        if (lane == 0) { /* loads the epilogue needs, in flight while the pieces are used */
            if (a.rope) {
                rot = rope_rot(a, seg, rr);
            } else if (a.pair) {
                if (DT == THIN_DTYPE_F8_E4M3 && a.seg[0].w.scale) sc[0] = a.seg[0].w.scale[rr];
                if (DT == THIN_DTYPE_F8_E4M3 && a.seg[1].w.scale) sc[1] = a.seg[1].w.scale[rr];
            } else {
#pragma unroll
                for (int j = 0; j < NR; j++) {
                    if (DT == THIN_DTYPE_F8_E4M3 && a.seg[seg].w.scale) sc[j] = a.seg[seg].w.scale[rr + j];
                    if (a.resid) rv[j] = __ldcg(a.resid + rr + j);
                }
            }
        }
        float acc[NR];
#pragma unroll
        for (int j = 0; j < NR; j++) acc[j] = 0.0f;
        for (uint32_t pc = 0; pc < g.pieces; pc++) {
            const uint8_t *slot = ring_wait(ring);
            const uint32_t off = pc * g.piece, nv = min(g.piece, g.row_bytes - off) / 16;
            const float *xv = xs + 4 * (off / 16); /* x of the piece's first vector */
            for (uint32_t k = lane; k < nv; k += 32) {
#pragma unroll
                for (int j = 0; j < NR; j++)
                    acc[j] += dot16<DT>(((const uint4 *)(slot + j * g.piece))[k], xv + 4 * k, ps);
            }
            ring_release(ring, D, nph);
        }
#pragma unroll
        for (int j = 0; j < NR; j++) acc[j] = warp_sum(acc[j]);
        if (lane == 0) sk_store<DT, NR>(a, seg, rr, acc, rot, sc, rv);
    }
}

template <int DT>
__device__ __forceinline__ void sk_matvec_nr(const sk_phase &p, const sk_src &g, const sk_src *D, int nph,
                                             sk_ring &ring, float *xs, float *red, const float (&nw)[MV_XPRE],
                                             unsigned long long *staged) {
    if (g.nr == 2) sk_matvec<DT, 2>(p, g, D, nph, ring, xs, red, nw, staged);
    else sk_matvec<DT, 1>(p, g, D, nph, ring, xs, red, nw, staged);
}

#if THIN_CUDA_TRACE
/* Timeline (make CUDA_TRACE=1): one record per block and phase: t0 the phase's start, t1 its
 * wait for the previous phase over, m0 x staged, t2 the block's part done; m1 the ns its warps
 * waited for weight pieces, summed; m2 the pieces it used (both plus the token's start time,
 * which the trace writer subtracts). */
#define SK_TRACE(...) __VA_ARGS__
#else
#define SK_TRACE(...)
#endif

/* Copies n bytes (a multiple of 16) from global to shared memory with the block's threads. */
__device__ __forceinline__ void copy16(void *dst, const void *src, size_t n) {
    for (size_t i = threadIdx.x; i < n / 16; i += blockDim.x) ((uint4 *)dst)[i] = ((const uint4 *)src)[i];
}

/* One block per SM; dynamic shared memory: the rings' barriers, the phase being run, the
 * sources of every phase, x (or the attention's scratch, xs_floats floats), then the rings.
 * ctr: nph + 1 counters, zero at launch and left at zero. */
template <int KDT, int GM>
__global__ void __launch_bounds__(SK_THREADS, 1)
    stream_kernel(const sk_phase *__restrict__ P, const sk_src *__restrict__ src, int nph, unsigned int *ctr,
                  uint32_t n_slots, uint32_t slot_bytes, uint32_t xs_floats, uint32_t n_pf) {
    extern __shared__ __align__(128) uint8_t sk_smem[];
    __shared__ float red[32];
    __shared__ int last;
    __shared__ unsigned long long staged;
    SK_TRACE(__shared__ unsigned long long waited_ns; __shared__ unsigned int pieces;
             trace_rec *tr = trace_armed(); unsigned long long tt0 = 0, tt1 = 0;
             if (threadIdx.x == 0) waited_ns = 0, pieces = 0;)
    const uint32_t warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    uint64_t *bars = (uint64_t *)sk_smem;
    sk_phase *cur = (sk_phase *)(sk_smem + SK_BAR_BYTES);
    sk_src *D = (sk_src *)((uint8_t *)cur + sizeof(sk_phase));
    float *xs = (float *)((uint8_t *)D + (size_t)nph * sizeof(sk_src));
    uint8_t *ring_base = (uint8_t *)(xs + (xs_floats + 31) / 32 * 32);
    sk_ring ring;
    ring.n = n_slots;
    ring.sb = slot_bytes;
    ring.slots = ring_base + (size_t)warp * n_slots * slot_bytes;
    ring.bar = bars + warp * SK_SLOTS_MAX;
    ring.used = 0;
    ring.pol = evict_first_policy();
    SK_TRACE(ring.waited = 0; uint32_t used0 = 0;)
    if (lane < n_slots) mbar_init(&ring.bar[lane], 1);
    mbar_init_fence();
    copy16(D, src, (size_t)nph * sizeof(sk_src));
    __syncthreads();
    /* Fill the ring before anything waits: weights do not depend on the previous kernel. */
    if (lane == 0) {
        sk_seek(D, nph, 0, ring.next);
        for (uint32_t k = 0; k < n_slots && ring.next.ph < nph; k++) {
            sk_issue(D, nph, ring.next, ring.slots + (size_t)k * ring.sb, &ring.bar[k], ring.pol);
            sk_advance(D, nph, ring.next);
        }
        ring.pf = ring.next; /* n_pf pieces past the ring go to L2 now, then one per piece used */
        for (uint32_t k = 0; k < n_pf && ring.pf.ph < nph; k++) {
            sk_prefetch(D, nph, ring.pf);
            sk_advance(D, nph, ring.pf);
        }
        if (!n_pf) ring.pf.ph = nph;
    }
    pdl_trigger();
    pdl_wait();
    for (int ph = 0; ph < nph; ph++) {
        copy16(cur, P + ph, sizeof(sk_phase)); /* the previous phase is done with it */
        SK_TRACE(tt0 = gtimer(); if (threadIdx.x == 0) staged = 0;)
        __syncthreads();
        const sk_phase &p = *cur;
        float nw[MV_XPRE];
        if (p.kind == SK_MV) preload_norm(p.mv, p.mv.seg[0].w.cols, nw);
        if (ph > 0) { /* every block has finished the previous phase (and so all before it) */
            if (threadIdx.x == SK_SYNC_THREAD)
                while (ld_acquire(&ctr[ph - 1]) < gridDim.x) {
                }
            __syncthreads();
        }
        SK_TRACE(tt1 = gtimer();)
        if (p.kind == SK_MV) {
            if (p.dtype == THIN_DTYPE_BF16)
                sk_matvec_nr<THIN_DTYPE_BF16>(p, D[ph], D, nph, ring, xs, red, nw, &staged);
            else sk_matvec_nr<THIN_DTYPE_F8_E4M3>(p, D[ph], D, nph, ring, xs, red, nw, &staged);
        } else {
            for (uint32_t u = blockIdx.x; u < p.at.n_kv * p.at.n_splits; u += gridDim.x) {
                __syncthreads(); /* the scratch of the previous unit is free */
                ag_unit<KDT, GM>(p.at, u % p.at.n_kv, u / p.at.n_kv, 0, xs, &last);
            }
        }
        SK_TRACE(if (lane == 0) {
            atomicAdd(&waited_ns, ring.waited);
            atomicAdd(&pieces, ring.used - used0);
        } ring.waited = 0;
                 used0 = ring.used;)
        __syncthreads(); /* the block's writes are done; x is free for the next phase */
        if (threadIdx.x == SK_SYNC_THREAD) {
            SK_TRACE(const unsigned long long mk[3] = {staged, tt0 + waited_ns, tt0 + pieces};
                     trace_block(tr, TRACE_STREAM | (unsigned)ph << 8, tt0, tt1, mk, 3); waited_ns = 0;
                     pieces = 0;)
            __threadfence();
            atomicAdd(&ctr[ph], 1u);
        }
    }
    if (threadIdx.x == SK_SYNC_THREAD) {
        __threadfence();
        if (atomicAdd(&ctr[nph], 1u) == gridDim.x - 1) { /* the last block out: all waits are over */
            for (int i = 0; i <= nph; i++) ctr[i] = 0;
            __threadfence();
        }
    }
}

/* ---- host ---- */


struct stream_run {
    uint32_t from, to;    /* steps [from, to) */
    sk_phase *d_ph;
    sk_src *d_src;
    int nph;
    unsigned int *d_ctr;
    uint32_t n_slots, slot, xs_floats, n_pf;
    size_t smem;
    int kdt, gm;
};

/* The kernel instance's dynamic shared memory limit was raised to SK_SMEM_MAX when the run was
 * probed (sk_blocks_per_sm), and every run stays within it. */
template <int KDT, int GM>
static cudaError_t sk_launch_t(const stream_run *r, int n_sm, cudaStream_t st) {
    return launch_k(stream_kernel<KDT, GM>, dim3(n_sm), dim3(SK_THREADS), r->smem, st, (const sk_phase *)r->d_ph,
                    (const sk_src *)r->d_src, r->nph, r->d_ctr, r->n_slots, r->slot, r->xs_floats, r->n_pf);
}

template <int KDT>
static cudaError_t sk_launch_k(const stream_run *r, int n_sm, cudaStream_t st) {
    switch (r->gm) {
    case 1: return sk_launch_t<KDT, 1>(r, n_sm, st);
    case 2: return sk_launch_t<KDT, 2>(r, n_sm, st);
    case 4: return sk_launch_t<KDT, 4>(r, n_sm, st);
    default: return sk_launch_t<KDT, 8>(r, n_sm, st);
    }
}

static cudaError_t sk_launch(const stream_run *r, int n_sm, cudaStream_t st) {
    if (r->kdt == THIN_DTYPE_BF16) return sk_launch_k<THIN_DTYPE_BF16>(r, n_sm, st);
    return sk_launch_k<THIN_DTYPE_F32>(r, n_sm, st);
}

template <int KDT, int GM>
static int sk_blocks_per_sm(size_t smem) {
    int n = 0;
    if (smem > SK_SMEM_MAX || cudaFuncSetAttribute(stream_kernel<KDT, GM>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                                   (int)SK_SMEM_MAX) != cudaSuccess)
        return 0;
    if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, stream_kernel<KDT, GM>, SK_THREADS, smem) != cudaSuccess)
        return 0;
    return n;
}

static int sk_fits(int kdt, int gm, size_t smem) {
    int n = 0;
#define SK_FIT(K, G) \
    if (kdt == K && gm == G) n = sk_blocks_per_sm<K, G>(smem);
    SK_FIT(THIN_DTYPE_BF16, 1)
    SK_FIT(THIN_DTYPE_BF16, 2)
    SK_FIT(THIN_DTYPE_BF16, 4)
    SK_FIT(THIN_DTYPE_BF16, 8)
    SK_FIT(THIN_DTYPE_F32, 1)
    SK_FIT(THIN_DTYPE_F32, 2)
    SK_FIT(THIN_DTYPE_F32, 4)
    SK_FIT(THIN_DTYPE_F32, 8)
#undef SK_FIT
    (void)cudaGetLastError();
    return n >= 1;
}

/* Phase of a linear step and its weight source (d), or 0 when the stream cannot run it. xs:
 * floats its x needs. */
static int mv_phase(const cuda_session *s, const step *st, uint32_t slot, sk_phase *ph, sk_src *d, uint32_t *xs) {
    const dmat *w0 = &s->w[s->op_w[st->lin[0]]];
    if (w0->dtype != THIN_DTYPE_BF16 && w0->dtype != THIN_DTYPE_F8_E4M3) return 0;
    if (st->nseg < 1 || (st->pair && st->nseg != 2)) return 0;
    memset(ph, 0, sizeof *ph);
    memset(d, 0, sizeof *d);
    ph->kind = SK_MV;
    ph->dtype = w0->dtype;
    linear_args(s, st, 0, 1, &ph->mv);
    const mv_args *a = &ph->mv;
    uint32_t total = 0;
    int even = 1;
    for (int k = 0; k < (a->pair ? 1 : a->nseg); k++) {
        total += a->seg[k].w.rows;
        even &= a->seg[k].w.rows % 2 == 0;
    }
    for (int k = 0; k < a->nseg; k++) {
        d->base[k] = (const uint8_t *)a->seg[k].w.data;
        d->rows[k] = a->seg[k].w.rows;
    }
    d->nseg = (uint8_t)a->nseg;
    d->mode = a->rope ? SK_ROPE : a->pair ? SK_PAIR : SK_PLAIN;
    d->half = a->rope ? a->head_dim / 2 : 0;
    d->nr = a->rope || a->pair || even ? 2 : 1;
    d->units = a->rope ? total / 2 : a->pair ? total : total / d->nr;
    d->row_bytes = w0->pitch * (uint32_t)thin_dtype_size((thin_dtype)w0->dtype);
    d->piece = slot / d->nr / 16 * 16;
    if (d->row_bytes < d->piece) d->piece = d->row_bytes;
    d->pieces = (d->row_bytes + d->piece - 1) / d->piece;
    *xs = w0->pitch;
    return d->units > 0 && d->row_bytes % 16 == 0;
}

/* Phase of a decode attention step, or 0 when the stream cannot run it (its sk_src, zeroed by
 * the caller, streams nothing). */
static int attn_phase(const cuda_session *s, const step *st, uint32_t n_splits, sk_phase *ph, uint32_t *xs,
                      int *gm) {
    if (!st->kv_fused) return 0;
    memset(ph, 0, sizeof *ph);
    ph->kind = SK_ATTN;
    attn_args *t = &ph->at;
    attn_common(s, st, t);
    t->n_splits = n_splits;
    uint32_t c = (s->max_ctx + n_splits - 1) / n_splits;
    t->chunk_max = c < ATTN_MIN_CHUNK ? ATTN_MIN_CHUNK : c;
    t->partial = s->d_skpart;
    t->counter = s->d_skcnt;
    *gm = attn_group_max(t);
    *xs = (uint32_t)ag_smem_floats(t->head_dim, t->n_heads / t->n_kv, t->chunk_max, n_splits, SK_WARPS);
    return *gm > 0;
}

static int step_streams(const cuda_session *s, const step *st) {
    return st->kind == STEP_LINEAR || (st->kind == STEP_ATTN && st->kv_fused);
}

int stream_build(cuda_session *s) {
    const char *e = getenv("THIN_CUDA_STREAM");
    if (!(e && strcmp(e, "1") == 0) || !thin_cuda_fuse) return 0;
    const char *se = getenv("THIN_CUDA_SK_SLOT"); /* bytes per ring slot, for measurements */
    uint32_t slot = se && atoi(se) >= 512 ? (uint32_t)atoi(se) / 512 * 512 : SK_SLOT;
    const char *pe = getenv("THIN_CUDA_SK_PF"); /* pieces per warp prefetched into L2 past its ring */
    const uint32_t n_pf = pe ? (uint32_t)atoi(pe) : SK_PF;
    int major = 0;
    if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, 0) != cudaSuccess || major < 9) return 0;
    const plan *p = s->p;
    /* Attention splits: about one (KV head, split) unit per SM. */
    const uint32_t maxh = s->attn_max_heads, maxhd = s->attn_max_head_dim, min_kv = s->attn_min_kv;
    uint32_t ns = min_kv ? ((uint32_t)s->n_sm + min_kv - 1) / min_kv : 1;
    if (ns < 1) ns = 1;
    if (min_kv) {
        if (cuda_alloc(s, (void **)&s->d_skpart, (size_t)maxh * ns * (maxhd + 2) * sizeof(float)) ||
            cuda_alloc(s, (void **)&s->d_skcnt, (size_t)maxh * sizeof(unsigned int)))
            return -1;
        CK(s, cudaMemset(s->d_skcnt, 0, (size_t)maxh * sizeof(unsigned int)));
    }
    const size_t n_alloc = s->n_steps ? s->n_steps : 1;
    s->sk_runs = (stream_run *)calloc(n_alloc, sizeof(stream_run));
    sk_phase *ph = (sk_phase *)calloc(n_alloc, sizeof(sk_phase));
    sk_src *src = (sk_src *)calloc(n_alloc, sizeof(sk_src));
    if (!s->sk_runs || !ph || !src) {
        free(ph);
        free(src);
        return cuda_failf(s, "out of memory");
    }
    uint32_t i = 0;
    while (i < s->n_steps) {
        if (!step_streams(s, &s->steps[i])) {
            i++;
            continue;
        }
        stream_run r;
        memset(&r, 0, sizeof r);
        r.from = i;
        r.kdt = p->kv_dtype;
        r.gm = 0;
        uint32_t xs = 1, j = i;
        for (; j < s->n_steps && step_streams(s, &s->steps[j]); j++) {
            uint32_t need = 0;
            int gm = 0, ok;
            memset(&src[j - i], 0, sizeof *src);
            if (s->steps[j].kind == STEP_LINEAR) ok = mv_phase(s, &s->steps[j], slot, &ph[j - i], &src[j - i], &need);
            else ok = attn_phase(s, &s->steps[j], ns, &ph[j - i], &need, &gm) && (r.gm == 0 || gm == r.gm);
            if (!ok) break;
            if (gm) r.gm = gm;
            if (need > xs) xs = need;
        }
        r.to = j;
        r.nph = (int)(j - i);
        if (!r.gm) r.gm = 1;
        r.xs_floats = xs;
        const size_t fixed = SK_BAR_BYTES + sizeof(sk_phase) + (size_t)r.nph * sizeof(sk_src) +
                             (size_t)(xs + 31) / 32 * 32 * 4;
        r.slot = slot;
        r.n_pf = n_pf;
        /* as many slots per warp as fit (at most SK_SLOTS_MAX), then fewer while a block does not */
        uint32_t n_slots = 0;
        if (fixed + 2 * SK_WARPS * slot <= SK_SMEM_MAX) n_slots = (uint32_t)((SK_SMEM_MAX - fixed) / (SK_WARPS * slot));
        if (n_slots > SK_SLOTS_MAX) n_slots = SK_SLOTS_MAX;
        while (n_slots >= 2 && !sk_fits(r.kdt, r.gm, fixed + (size_t)n_slots * SK_WARPS * slot)) n_slots--;
        r.n_slots = n_slots;
        r.smem = fixed + (size_t)n_slots * SK_WARPS * slot;
        if (r.nph >= 2 && n_slots >= 2) {
            if (cuda_alloc(s, (void **)&r.d_ph, (size_t)r.nph * sizeof(sk_phase)) ||
                cuda_alloc(s, (void **)&r.d_src, (size_t)r.nph * sizeof(sk_src)) ||
                cuda_alloc(s, (void **)&r.d_ctr, (size_t)(r.nph + 1) * sizeof(unsigned int))) {
                free(src);
                free(ph);
                return -1;
            }
            cudaError_t ce = cudaMemcpy(r.d_ph, ph, (size_t)r.nph * sizeof(sk_phase), cudaMemcpyHostToDevice);
            if (ce == cudaSuccess)
                ce = cudaMemcpy(r.d_src, src, (size_t)r.nph * sizeof(sk_src), cudaMemcpyHostToDevice);
            if (ce == cudaSuccess) ce = cudaMemset(r.d_ctr, 0, (size_t)(r.nph + 1) * sizeof(unsigned int));
            if (ce != cudaSuccess) {
                free(src);
                free(ph);
                return cuda_fail(s, __FILE__, __LINE__, "stream phases", ce);
            }
            s->sk_runs[s->n_sk_runs++] = r;
        }
        i = j > i ? j : i + 1;
    }
    free(src);
    free(ph);
    return 0;
}

cudaError_t stream_trace_arm(trace_rec *recs, unsigned int *n, unsigned int cap) {
    return trace_arm_here(recs, n, cap);
}

/* The run starting at step i, or NULL. */
const stream_run *stream_at(const cuda_session *s, uint32_t i) {
    for (uint32_t k = 0; k < s->n_sk_runs; k++)
        if (s->sk_runs[k].from == i) return &s->sk_runs[k];
    return NULL;
}

uint32_t stream_end(const stream_run *r) { return r->to; }

int stream_launch(cuda_session *s, const stream_run *r) {
    CK(s, sk_launch(r, s->n_sm, s->st));
    return 0;
}
