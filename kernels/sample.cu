/*
 * sample.cu — choosing the next token on the device: row-wise argmax (lowest index wins ties; -1
 * for a row holding NaN or an infinity) in two passes, and sampling with temperature, top-k and
 * top-p from one row, so that no row of logits crosses to the host, only the chosen id. CPU
 * twins: op_argmax, sampler_pick.
 */
#include "cuda_common.cuh"

/* Order of (value, index) pairs: the larger value, then the lower index. */
__device__ __forceinline__ bool better(float v, int i, float bv, int bi) {
    return v > bv || (v == bv && i < bi);
}

__device__ __forceinline__ void warp_best(float &v, int &i) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        float ov = __shfl_xor_sync(0xffffffffu, v, o);
        int oi = __shfl_xor_sync(0xffffffffu, i, o);
        if (oi >= 0 && (i < 0 || better(ov, oi, v, i))) {
            v = ov;
            i = oi;
        }
    }
}

/* Best of the block's (v, i); thread 0 gets it. */
__device__ void block_best(float &v, int &i) {
    __shared__ float sv[32];
    __shared__ int si[32];
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    warp_best(v, i);
    if (lane == 0) {
        sv[warp] = v;
        si[warp] = i;
    }
    __syncthreads();
    if (warp == 0) {
        v = lane < nw ? sv[lane] : -INFINITY;
        i = lane < nw ? si[lane] : -1;
        warp_best(v, i);
    }
}

/* A block's part of a row: its best (value, index), or index ARGMAX_NONFINITE when the part holds
 * NaN or an infinity. */
#define ARGMAX_NONFINITE (-2)

__global__ void argmax_partial_kernel(const float *x, uint32_t ld, uint32_t cols, float2 *partial) {
    pdl_trigger();
    pdl_wait();
    const uint32_t row = blockIdx.y;
    const float *xr = x + (size_t)row * ld;
    float bv = -INFINITY;
    int bi = -1, bad = 0;
    for (uint32_t c = blockIdx.x * blockDim.x + threadIdx.x; c < cols; c += gridDim.x * blockDim.x) {
        float v = xr[c];
        bad |= !isfinite(v);
        if (bi < 0 || v > bv) { /* ascending c: the first of equal values stays */
            bv = v;
            bi = (int)c;
        }
    }
    bad = __syncthreads_or(bad);
    block_best(bv, bi);
    if (threadIdx.x == 0)
        partial[(size_t)row * gridDim.x + blockIdx.x] =
            make_float2(bv, __int_as_float(bad ? ARGMAX_NONFINITE : bi));
}

/* next: when not NULL (one row, the decode step), the chosen id also becomes the next step's input
 * (next[0] = *pos + 1, next[1] = id) and goes to ring[*pos % DECODE_RING] (host memory). A row
 * holding NaN or an infinity gives -1 in out and ring, and token 0 as the next step's input (a
 * step queued ahead then runs on a valid token, and the host, seeing -1, drops it). */
__global__ void argmax_final_kernel(int32_t *out, const float2 *partial, uint32_t parts, const int32_t *pos,
                                    int32_t *next, int32_t *ring) {
    pdl_trigger();
    pdl_wait();
    const uint32_t row = blockIdx.x;
    float bv = -INFINITY;
    int bi = -1, bad = 0;
    for (uint32_t j = threadIdx.x; j < parts; j += blockDim.x) {
        float2 p = partial[(size_t)row * parts + j];
        int pi = __float_as_int(p.y);
        bad |= pi == ARGMAX_NONFINITE;
        if (pi >= 0 && (bi < 0 || better(p.x, pi, bv, bi))) {
            bv = p.x;
            bi = pi;
        }
    }
    bad = __syncthreads_or(bad);
    block_best(bv, bi);
    if (threadIdx.x == 0) {
        const int32_t id = bad ? -1 : bi < 0 ? 0 : bi;
        out[row] = id;
        if (next) {
            const int32_t p = *pos;
            next[0] = p + 1;
            next[1] = id < 0 ? 0 : id;
            ring[(uint32_t)p % DECODE_RING] = id;
            __threadfence_system();
        }
    }
}

static cudaError_t argmax_launches(int32_t *out, const float *x, uint32_t ld, uint32_t cols, uint32_t n,
                                   float2 *partial, const int32_t *pos, int32_t *next, int32_t *ring,
                                   cudaStream_t st) {
    cudaError_t e = launch_k(argmax_partial_kernel, dim3(ARGMAX_PARTS, n), dim3(256), 0, st, x, ld, cols, partial);
    if (e != cudaSuccess) return e;
    return launch_k(argmax_final_kernel, dim3(n), dim3(128), 0, st, out, partial, ARGMAX_PARTS, pos, next, ring);
}

cudaError_t launch_argmax(int32_t *out, const float *x, uint32_t ld, uint32_t cols, uint32_t n,
                          float2 *partial, cudaStream_t st) {
    return argmax_launches(out, x, ld, cols, n, partial, NULL, NULL, NULL, st);
}

cudaError_t launch_argmax_next(int32_t *out, const float *x, uint32_t cols, float2 *partial, const int32_t *pos,
                               int32_t *next, int32_t *ring, cudaStream_t st) {
    return argmax_launches(out, x, cols, cols, 1, partial, pos, next, ring, st);
}

/* ---- sampling (sampler.h's semantics, on the device) ----
 *
 * One row x of cols logits, the draw `coin` from the host's PRNG. As sampler.c: the max m, then
 * p_i = exp((double)(x_i - m) / t) / sum (double, kept as float), candidates p_i >= cutoff; without
 * top-k or top-p the draw walks the candidates in ascending id, else in the order (p descending,
 * id ascending), keeping the top_k first and then the shortest prefix whose mass reaches
 * top_p · mass. Masses are summed as 64-bit fixed point (p · 2^62), exact and independent of the
 * summation order, so a draw is deterministic and agrees with the CPU's double sums except where
 * the two differ in the last bits at a boundary.
 *  1. samp_max_kernel, samp_sum_kernel (SAMP_PARTS blocks): per-block max, then per-block sums of
 *     exp in double (the blocks' parts added in a fixed order by the next kernel);
 *  2. samp_prob_kernel: p into pf (-1: not a candidate) and a histogram (count, mass) over the
 *     top 11 bits of p's float bits (float bits of p >= 0 order as p does);
 *  3. samp_select_kernel (one block): each walk (the top-k count, the top-p mass, the draw) finds
 *     the element at which the cumulative weight in that order reaches its goal, by three digits
 *     of p's bits (11, 11, 9: the first from the histogram, the others by a pass over pf each)
 *     and, among equal p, the id rank (one pass in id order). */

struct samp_scratch {
    float pmax[SAMP_PARTS];
    double psum[SAMP_PARTS];
    unsigned int hcount[2048];
    unsigned long long hmass[2048];
};

__device__ __forceinline__ unsigned long long samp_fx(float p) { return (unsigned long long)((double)p * 0x1p62); }

__global__ void samp_max_kernel(const float *x, uint32_t cols, samp_scratch *sc) {
    pdl_trigger();
    pdl_wait();
    __shared__ float red[32];
    float m = -INFINITY;
    for (uint32_t i = blockIdx.x * blockDim.x + threadIdx.x; i < cols; i += gridDim.x * blockDim.x)
        m = fmaxf(m, x[i]);
    m = block_max(m, red);
    if (threadIdx.x == 0) sc->pmax[blockIdx.x] = m;
}

__device__ float samp_row_max(const samp_scratch *sc, float *red) {
    float m = threadIdx.x < SAMP_PARTS ? sc->pmax[threadIdx.x] : -INFINITY;
    return block_max(m, red);
}

/* Thread 0's block sum of v in double, in a fixed order (warp shuffles, then the warps in turn). */
__device__ double block_sum_d(double v, double *red) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    __syncthreads();
    if (lane == 0) red[warp] = v;
    __syncthreads();
    double s = 0.0;
    if (threadIdx.x == 0)
        for (int w = 0; w < nw; w++) s += red[w];
    return s;
}

__global__ void samp_sum_kernel(const float *x, uint32_t cols, float t, samp_scratch *sc) {
    pdl_trigger();
    pdl_wait();
    __shared__ float red[32];
    __shared__ double redd[32];
    const float m = samp_row_max(sc, red);
    double z = 0.0;
    for (uint32_t i = blockIdx.x * blockDim.x + threadIdx.x; i < cols; i += gridDim.x * blockDim.x)
        z += exp((double)(x[i] - m) / (double)t);
    z = block_sum_d(z, redd);
    if (threadIdx.x == 0) sc->psum[blockIdx.x] = z;
    /* clear the histogram for samp_prob_kernel (the last reader, samp_select_kernel, is done) */
    for (uint32_t b = blockIdx.x * blockDim.x + threadIdx.x; b < 2048; b += gridDim.x * blockDim.x) {
        sc->hcount[b] = 0;
        sc->hmass[b] = 0;
    }
}

__global__ void samp_prob_kernel(const float *x, uint32_t cols, float t, double cutoff, float *pf,
                                 samp_scratch *sc) {
    pdl_trigger();
    pdl_wait();
    __shared__ float red[32];
    __shared__ double total;
    __shared__ unsigned int hc[2048];
    __shared__ unsigned long long hm[2048];
    const float m = samp_row_max(sc, red);
    if (threadIdx.x == 0) {
        double z = 0.0;
        for (uint32_t b = 0; b < SAMP_PARTS; b++) z += sc->psum[b];
        total = z;
    }
    for (uint32_t b = threadIdx.x; b < 2048; b += blockDim.x) hc[b] = 0, hm[b] = 0;
    __syncthreads();
    const double z = total;
    for (uint32_t i = blockIdx.x * blockDim.x + threadIdx.x; i < cols; i += gridDim.x * blockDim.x) {
        const double p = exp((double)(x[i] - m) / (double)t) / z;
        if (p >= cutoff) {
            const float pf32 = (float)p;
            pf[i] = pf32;
            const uint32_t b = __float_as_uint(pf32) >> 20;
            atomicAdd(&hc[b], 1u);
            atomicAdd(&hm[b], samp_fx(pf32));
        } else {
            pf[i] = -1.0f;
        }
    }
    __syncthreads();
    for (uint32_t b = threadIdx.x; b < 2048; b += blockDim.x)
        if (hc[b]) {
            atomicAdd(&sc->hcount[b], hc[b]);
            atomicAdd(&sc->hmass[b], hm[b]);
        }
}

#define SAMP_T 1024 /* threads of samp_select_kernel */

/* Exclusive prefix sum over the block (SAMP_T threads, in thread order). */
__device__ unsigned long long block_scan_u64(unsigned long long v) {
    __shared__ unsigned long long ws[32];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    unsigned long long inc = v;
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
        const unsigned long long y = __shfl_up_sync(0xffffffffu, inc, o);
        if (lane >= o) inc += y;
    }
    __syncthreads();
    if (lane == 31) ws[warp] = inc;
    __syncthreads();
    if (warp == 0) {
        unsigned long long w = ws[lane], wi = w;
#pragma unroll
        for (int o = 1; o < 32; o <<= 1) {
            const unsigned long long y = __shfl_up_sync(0xffffffffu, wi, o);
            if (lane >= o) wi += y;
        }
        ws[lane] = wi - w; /* exclusive over the warps */
    }
    __syncthreads();
    return ws[warp] + inc - v;
}

/* The weight of id i in samp_id_walk: with by_rank, 1 for a candidate whose p has the float bits
 * `bits` (the members of a group of equal p), else a candidate's mass. */
__device__ __forceinline__ unsigned long long samp_id_weight(const float *pf, uint32_t i, bool by_rank,
                                                             uint32_t bits) {
    const float p = pf[i];
    if (p < 0.0f) return 0;
    return by_rank ? (unsigned long long)(__float_as_uint(p) == bits) : samp_fx(p);
}

/* What samp_id_walk found. */
struct samp_id_found {
    int32_t id;                 /* -1 when the total is 0 */
    unsigned long long target;  /* the target used */
};

/* The first id i at which the cumulative weight of ids 0..i (samp_id_weight), in ascending id,
 * passes target, with target first brought below the row's total (the walk then ends inside the
 * row). Each thread sums a contiguous share of the ids; the thread whose share holds the crossing
 * walks it. */
__device__ __forceinline__ samp_id_found samp_id_walk(const float *pf, uint32_t cols, bool by_rank, uint32_t bits,
                                                      unsigned long long target) {
    __shared__ int32_t found;
    __shared__ unsigned long long total;
    const uint32_t per = (cols + SAMP_T - 1) / SAMP_T, i0 = min(threadIdx.x * per, cols), i1 = min(i0 + per, cols);
    unsigned long long s = 0;
    for (uint32_t i = i0; i < i1; i++) s += samp_id_weight(pf, i, by_rank, bits);
    unsigned long long cum = block_scan_u64(s);
    if (threadIdx.x == SAMP_T - 1) total = cum + s;
    if (threadIdx.x == 0) found = -1;
    __syncthreads();
    if (total == 0) return {-1, target};
    if (target >= total) target = total - 1;
    if (cum <= target && target < cum + s)
        for (uint32_t i = i0; i < i1; i++)
            if (target < (cum += samp_id_weight(pf, i, by_rank, bits))) {
                found = (int32_t)i;
                break;
            }
    __syncthreads();
    const int32_t id = found;
    __syncthreads(); /* read by every thread before another walk resets it */
    return {id, target};
}

/* Where a walk stands: the weight before the current bucket or element, and the element found. */
struct samp_walk {
    unsigned long long base_c, base_m; /* count and mass of the elements before it */
    uint32_t id;
};

/* Whether the cumulative weight cum reaches goal (strict: passes it). */
__device__ __forceinline__ bool samp_reach(unsigned long long cum, unsigned long long goal, bool strict) {
    return strict ? cum > goal : cum >= goal;
}

/* One digit: buckets nb (hc, hm in shared memory, bucket nb - 1 first), the walk's weight (mass or
 * count) against goal; the crossing bucket's index goes to *dig and w's bases move past the
 * buckets before it. */
__device__ void samp_digit(const unsigned int *hc, const unsigned long long *hm, uint32_t nb, bool by_mass,
                           unsigned long long goal, bool strict, samp_walk *w, uint32_t *dig) {
    const uint32_t per = (nb + SAMP_T - 1) / SAMP_T;
    const unsigned long long b_c = w->base_c, b_m = w->base_m; /* read before the scans' barriers */
    unsigned long long sc = 0, sm = 0;
    for (uint32_t k = threadIdx.x * per; k < (threadIdx.x + 1) * per && k < nb; k++) {
        const uint32_t b = nb - 1 - k;
        sc += hc[b];
        sm += hm[b];
    }
    const unsigned long long ec = block_scan_u64(sc), em = block_scan_u64(sm);
    unsigned long long cc = b_c + ec, cm = b_m + em;
    for (uint32_t k = threadIdx.x * per; k < (threadIdx.x + 1) * per && k < nb; k++) {
        const uint32_t b = nb - 1 - k;
        const unsigned long long before = by_mass ? cm : cc;
        const unsigned long long after = by_mass ? cm + hm[b] : cc + hc[b];
        if (!samp_reach(before, goal, strict) && samp_reach(after, goal, strict)) {
            *dig = b;
            w->base_c = cc; /* written by the one crossing thread; read after the barrier */
            w->base_m = cm;
        }
        cc += hc[b];
        cm += hm[b];
    }
    __syncthreads();
}

/* The element of the order (p descending, id ascending) at which the cumulative weight (mass, or
 * count when !by_mass) first reaches goal (strict: passes it). pf: p or -1; hist: the first digit's
 * (count, mass) over the row. On return (every thread) w holds the element and the weight before
 * it; *cum_c, *cum_m the weight through it. Needs 2048 × 12 bytes of shared memory (hc, hm). */
__device__ void samp_walk_run(const float *pf, uint32_t cols, const samp_scratch *sc, unsigned int *hc,
                              unsigned long long *hm, bool by_mass, unsigned long long goal, bool strict,
                              samp_walk *w, unsigned long long *cum_c, unsigned long long *cum_m) {
    __shared__ uint32_t dig;
    __syncthreads(); /* the previous walk's results have been read */
    if (threadIdx.x == 0) w->base_c = 0, w->base_m = 0, w->id = 0, dig = 0;
    for (uint32_t b = threadIdx.x; b < 2048; b += SAMP_T) hc[b] = sc->hcount[b], hm[b] = sc->hmass[b];
    __syncthreads();
    samp_digit(hc, hm, 2048, by_mass, goal, strict, w, &dig);
    uint32_t prefix = dig; /* bits 30..20 */
    /* digits 2 (bits 19..9) and 3 (bits 8..0): a pass over the row each */
    for (int level = 0; level < 2; level++) {
        const int shift_hi = level == 0 ? 20 : 9, shift_lo = level == 0 ? 9 : 0;
        const uint32_t nb = 1u << (shift_hi - shift_lo);
        __syncthreads();
        for (uint32_t b = threadIdx.x; b < nb; b += SAMP_T) hc[b] = 0, hm[b] = 0;
        __syncthreads();
        for (uint32_t i = threadIdx.x; i < cols; i += SAMP_T) {
            const float p = pf[i];
            if (p < 0.0f) continue;
            const uint32_t u = __float_as_uint(p);
            if ((u >> shift_hi) != prefix) continue;
            const uint32_t b = (u >> shift_lo) & (nb - 1);
            atomicAdd(&hc[b], 1u);
            atomicAdd(&hm[b], samp_fx(p));
        }
        __syncthreads();
        samp_digit(hc, hm, nb, by_mass, goal, strict, w, &dig);
        prefix = prefix << (shift_hi - shift_lo) | dig;
    }
    /* prefix: p's bits; the elements with these bits follow in ascending id, each of weight wt */
    const float pv = __uint_as_float(prefix);
    const unsigned long long wt = by_mass ? samp_fx(pv) : 1ull;
    const unsigned long long before = by_mass ? w->base_m : w->base_c;
    unsigned long long j = 1;
    if (wt > 0 && goal >= before) j = strict ? (goal - before) / wt + 1 : (goal - before + wt - 1) / wt;
    if (j < 1) j = 1;
    /* the j-th of them in id order (the walk keeps j inside the group, which a reachable goal
     * never leaves) */
    const samp_id_found f = samp_id_walk(pf, cols, true, prefix, j - 1);
    j = f.target + 1;
    if (threadIdx.x == 0) w->id = (uint32_t)f.id;
    *cum_c = w->base_c + j;
    *cum_m = w->base_m + j * samp_fx(pv);
}

/* One block of SAMP_T threads, the registers of a whole SM (an explicit one block an SM: without it
 * ptxas held the kernel to 32 registers and spilled). */
__global__ void __launch_bounds__(SAMP_T, 1) samp_select_kernel(const float *pf, uint32_t cols, uint32_t top_k,
                                                                 float top_p, float coin, const samp_scratch *sc,
                                                                 int32_t *out) {
    pdl_trigger();
    pdl_wait();
    __shared__ unsigned int hc[2048];
    __shared__ unsigned long long hm[2048];
    __shared__ samp_walk w;
    __shared__ unsigned long long tot_c, tot_m;
    /* totals over the candidates */
    unsigned long long c = 0, m = 0;
    for (uint32_t b = threadIdx.x * 2; b < threadIdx.x * 2 + 2; b++) c += sc->hcount[b], m += sc->hmass[b];
    const unsigned long long ec = block_scan_u64(c), em = block_scan_u64(m);
    if (threadIdx.x == SAMP_T - 1) tot_c = ec + c, tot_m = em + m;
    __syncthreads();
    unsigned long long mass = tot_m;
    if (tot_c == 0) {
        if (threadIdx.x == 0) *out = -1;
        return;
    }
    if (top_k == 0 && top_p >= 1.0f) {
        /* every candidate, in ascending id: the first whose cumulative mass passes coin · mass
         * (the walk's total is this mass, below which it keeps r) */
        unsigned long long r = (unsigned long long)((double)coin * (double)mass);
        const samp_id_found f = samp_id_walk(pf, cols, false, 0, r);
        if (threadIdx.x == 0) *out = f.id;
        return;
    }
    unsigned long long cc, cm;
    if (top_k > 0 && top_k < tot_c) { /* the top_k most likely */
        samp_walk_run(pf, cols, sc, hc, hm, false, top_k, false, &w, &cc, &cm);
        mass = cm;
    }
    if (top_p < 1.0f) { /* the shortest prefix whose mass reaches top_p of it */
        unsigned long long goal = (unsigned long long)((double)top_p * (double)mass);
        if (goal > mass) goal = mass;
        if (goal == 0) goal = 1;
        samp_walk_run(pf, cols, sc, hc, hm, true, goal, false, &w, &cc, &cm);
        mass = cm;
    }
    unsigned long long r = (unsigned long long)((double)coin * (double)mass);
    if (r >= mass) r = mass - 1;
    samp_walk_run(pf, cols, sc, hc, hm, true, r, true, &w, &cc, &cm);
    if (threadIdx.x == 0) *out = (int32_t)w.id;
}

size_t sample_scratch_bytes(void) { return sizeof(samp_scratch); }

cudaError_t launch_sample(const float *x, uint32_t cols, float temperature, uint32_t top_k, float top_p,
                          float coin, void *scratch, float *pf, int32_t *out, cudaStream_t st) {
    samp_scratch *sc = (samp_scratch *)scratch;
    double cutoff = 0.0;
    if (top_k == 0 && top_p < 1.0f && cols > 1) cutoff = (1.0 - top_p) / (double)(cols - 1);
    cudaError_t e = launch_k(samp_max_kernel, dim3(SAMP_PARTS), dim3(256), 0, st, x, cols, sc);
    if (e == cudaSuccess) e = launch_k(samp_sum_kernel, dim3(SAMP_PARTS), dim3(256), 0, st, x, cols, temperature, sc);
    if (e == cudaSuccess)
        e = launch_k(samp_prob_kernel, dim3(SAMP_PARTS), dim3(256), 0, st, x, cols, temperature, cutoff, pf, sc);
    if (e == cudaSuccess)
        e = launch_k(samp_select_kernel, dim3(1), dim3(SAMP_T), 0, st, (const float *)pf, cols, top_k, top_p, coin,
                     (const samp_scratch *)sc, out);
    return e;
}
