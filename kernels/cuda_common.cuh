/*
 * cuda_common.cuh — shared pieces of the CUDA kernels: the device weight descriptor, element
 * loads for every weight dtype, warp/block reductions, and the launchers each kernels/<family>.cu
 * exports to the backend (kernels/cuda_backend.cu).
 *
 * Activations are F32 rows; a batch of n rows of one buffer lies at x + i * ld (ld in floats).
 * Every launcher returns the cudaError_t of its launch (cudaGetLastError), never aborts.
 */
#ifndef THIN_CUDA_COMMON_CUH
#define THIN_CUDA_COMMON_CUH

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>
#include <stdint.h>

#include "thin.h"

/* A weight matrix (or a row/column block of one, for a split over devices) on the device. */
struct dmat {
    const void *data;   /* rows × pitch elements of dtype, rows 16-byte aligned, zero padded */
    const float *scale; /* F8_E4M3: rows per-row scales; NULL otherwise */
    int dtype;          /* thin_dtype: F32, F16, BF16, F8_E4M3 */
    uint32_t rows;      /* rows held here (out features) */
    uint32_t cols;      /* columns held here (in features) */
    uint32_t pitch;     /* elements per stored row: dmat_pitch(cols) */
    uint64_t row0;      /* first row of the full matrix held here */
    uint64_t col0;      /* first column of the full matrix held here */
    uint32_t trans;     /* 1: data holds the transpose, cols rows of `pitch` elements (rows padded
                           to 16 bytes); scale is still per row of the matrix (the MLP kernel's
                           down projection, see mlp.cu) */
};

/* Elements per 16-byte vector of a weight dtype (0 if unsupported). */
static inline uint32_t dtype_vec_elems(int dt) {
    switch (dt) {
    case THIN_DTYPE_F32: return 4;
    case THIN_DTYPE_F16:
    case THIN_DTYPE_BF16: return 8;
    case THIN_DTYPE_F8_E4M3: return 16;
    default: return 0;
    }
}

/* Elements per stored row of a dmat whose rows hold n elements: n padded to a multiple of 32
 * (zeros), so that every row starts 16-byte aligned and whole load batches need no tail test. */
static inline __host__ __device__ uint32_t dmat_pitch(uint64_t n) { return (uint32_t)((n + 31) / 32 * 32); }

/* ---- device helpers ---- */

__device__ __forceinline__ float bf16_bits_to_f32(uint32_t h) { return __uint_as_float(h << 16); }

/* Element i of a vector of weight dtype dt (scale not applied). */
__device__ __forceinline__ float load_elem(const void *p, int dt, uint64_t i) {
    switch (dt) {
    case THIN_DTYPE_F32: return ((const float *)p)[i];
    case THIN_DTYPE_F16: return __half2float(((const __half *)p)[i]);
    case THIN_DTYPE_BF16: return bf16_bits_to_f32(((const uint16_t *)p)[i]);
    case THIN_DTYPE_F8_E4M3: {
        __nv_fp8_e4m3 v;
        v.__x = ((const __nv_fp8_storage_t *)p)[i];
        return (float)v;
    }
    default: return 0.0f;
    }
}

/* Stores v as element i of a KV cache of dtype dt (BF16 rounded to nearest even, or F32). */
__device__ __forceinline__ void store_kv(void *cache, int dt, size_t i, float v) {
    if (dt == THIN_DTYPE_BF16) ((__nv_bfloat16 *)cache)[i] = __float2bfloat16_rn(v);
    else ((float *)cache)[i] = v;
}

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

/* Sum over the block (blockDim.x a multiple of 32, at most 1024); every thread gets the result.
 * `red` is 32 floats of shared memory. */
__device__ __forceinline__ float block_sum(float v, float *red) {
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    v = warp_sum(v);
    __syncthreads();
    if (lane == 0) red[warp] = v;
    __syncthreads();
    v = lane < nw ? red[lane] : 0.0f;
    return warp_sum(v);
}

__device__ __forceinline__ float block_max(float v, float *red) {
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    v = warp_max(v);
    __syncthreads();
    if (lane == 0) red[warp] = v;
    __syncthreads();
    v = lane < nw ? red[lane] : -INFINITY;
    return warp_max(v);
}

/* Two floats rounded to BF16 (nearest even), lo in the low half. */
__device__ __forceinline__ uint32_t bf16x2(float lo, float hi) {
    __nv_bfloat162 b = __floats2bfloat162_rn(lo, hi);
    return *(uint32_t *)&b;
}

/* The two E4M3 bytes in the low half of v widened to BF16 (exact), the lower byte low (the
 * prefill GEMMs: gemm.cu, gemm_lt.cu). */
__device__ __forceinline__ uint32_t fp8x2_bf16x2(uint32_t v) {
    __half2_raw h = __nv_cvt_fp8x2_to_halfraw2((__nv_fp8x2_storage_t)(v & 0xffffu), __NV_E4M3);
    float2 f = __half22float2(*(__half2 *)&h);
    return bf16x2(f.x, f.y);
}

/* p[0..3] += v with one float4 atomic (sm_90; p 16-byte aligned) when vec, else four. */
__device__ __forceinline__ void atomic_add4(float *p, float4 v, bool vec = true) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    if (vec) {
        atomicAdd((float4 *)p, v);
        return;
    }
#endif
    (void)vec;
    atomicAdd(p, v.x);
    atomicAdd(p + 1, v.y);
    atomicAdd(p + 2, v.z);
    atomicAdd(p + 3, v.w);
}

__device__ __forceinline__ float silu_f(float g) { return g / (1.0f + expf(-g)); }

/* A grow-only counter of the decode kernels (mlp.cu, attn_o.cu), read with acquire semantics. */
__device__ __forceinline__ unsigned long long ld_acquire64(const unsigned long long *p) {
    unsigned long long v;
    asm volatile("ld.acquire.gpu.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
    return v;
}

/* ---- mbarriers and bulk copies (sm_90: the persistent decode kernel, stream.cu, and the
 * attention block kernel, attn_o.cu) ---- */

__device__ __forceinline__ uint32_t smem_u32(const void *p) { return (uint32_t)__cvta_generic_to_shared(p); }

__device__ __forceinline__ void mbar_init(uint64_t *b, uint32_t count) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(smem_u32(b)), "r"(count) : "memory");
#endif
}

__device__ __forceinline__ void mbar_init_fence() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
#endif
}

/* Arrives on b, announcing `bytes` of copies that complete its phase. */
__device__ __forceinline__ void mbar_expect_tx(uint64_t *b, uint32_t bytes) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smem_u32(b)), "r"(bytes)
                 : "memory");
#endif
}

/* Waits until the phase of b with the given parity has completed. */
__device__ __forceinline__ void mbar_wait(uint64_t *b, uint32_t parity) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("{\n\t.reg .pred P1;\n"
                 "MB_WAIT:\n\t"
                 "mbarrier.try_wait.parity.shared::cta.b64 P1, [%0], %1;\n\t"
                 "@P1 bra MB_DONE;\n\t"
                 "bra MB_WAIT;\n"
                 "MB_DONE:\n\t}" ::"r"(smem_u32(b)),
                 "r"(parity)
                 : "memory");
#endif
}

/* Copies `bytes` (a multiple of 16, both addresses 16-byte aligned) from global to shared memory,
 * completing on b; weights are read once per token, so they are marked first to leave L2. */
__device__ __forceinline__ void bulk_load(void *dst, const void *src, uint32_t bytes, uint64_t *b, uint64_t pol) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint"
                 " [%0], [%1], %2, [%3], %4;" ::"r"(smem_u32(dst)),
                 "l"(src), "r"(bytes), "r"(smem_u32(b)), "l"(pol)
                 : "memory");
#endif
}

/* Asks for `bytes` at src to be brought into L2 (no completion to wait for). */
__device__ __forceinline__ void l2_prefetch(const void *src, uint32_t bytes) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(src), "r"(bytes) : "memory");
#endif
}

__device__ __forceinline__ uint64_t evict_first_policy() {
    uint64_t p = 0;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(p));
#endif
    return p;
}

/* ---- cp.async and tensor-core helpers (gemm.cu, attn_prefill.cu, the decode attention's staging) ---- */

/* 16 bytes global → shared; bytes (0..16) are read, the rest zero-filled. */
__device__ __forceinline__ void gm_cp16(void *dst, const void *src, uint32_t bytes) {
    uint32_t d = (uint32_t)__cvta_generic_to_shared(dst);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(d), "l"(src), "r"(bytes) : "memory");
}
/* 16 bytes global → shared, all of them. */
__device__ __forceinline__ void gm_cp16(void *dst, const void *src) {
    uint32_t d = (uint32_t)__cvta_generic_to_shared(dst);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(d), "l"(src) : "memory");
}
/* 4 bytes global → shared; bytes 0 or 4. */
__device__ __forceinline__ void gm_cp4(void *dst, const void *src, uint32_t bytes) {
    uint32_t d = (uint32_t)__cvta_generic_to_shared(dst);
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;" ::"r"(d), "l"(src), "r"(bytes) : "memory");
}
__device__ __forceinline__ void gm_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }
template <int N> __device__ __forceinline__ void gm_wait() {
    asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory");
}

/* d += a (16×16 row-major, BF16) × b (16×8 col-major, BF16), F32 accumulators. */
__device__ __forceinline__ void gm_mma(float *d, uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                                       uint32_t b0, uint32_t b1) {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

/* ---- programmatic dependent launch ----
 * Kernels are launched so that the next one may start while the previous one drains: each kernel
 * lets its dependents launch at once (pdl_trigger) and waits for its predecessors to complete
 * (pdl_wait) before it reads or writes anything they touch; only read-only weights are loaded
 * before the wait. thin_cuda_pdl = 0 (env THIN_CUDA_PDL=0) launches plainly. */
extern int thin_cuda_pdl;
/* thin_cuda_fuse = 0 (env THIN_CUDA_FUSE=0): no rope/KV-store epilogue in the q, k, v matvec and
 * the per-head attention kernels with a separate combine (for comparisons). */
extern int thin_cuda_fuse;
/* Kernel launches made through launch_k since the process started (for the profile). */
extern unsigned long long thin_cuda_launches;

__device__ __forceinline__ void pdl_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}
__device__ __forceinline__ void pdl_trigger() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

/* Preferred shared-memory carveout (percent) set on every kernel before its first launch (env
 * THIN_CUDA_CARVEOUT=0..100), so that neighbouring kernels can share an SM without reconfiguring
 * it; -1 (the default): the driver's choice per kernel, which measured faster on the H200. */
extern int thin_cuda_carveout;
/* Matvec launch variant (env THIN_CUDA_MV="MINB,BPS,SMALL_BPS,SMALL_MB"): registers limited for
 * MINB (1 or 3) blocks per SM (0: the dtype's default), at most BPS blocks per SM (0: as many as
 * fit), and at most SMALL_BPS for matrices of at most SMALL_MB MiB (default 16; SMALL_BPS 0: no
 * such limit). */
extern int thin_cuda_mv_minb, thin_cuda_mv_bps, thin_cuda_mv_small_bps, thin_cuda_mv_small_mb;
/* Env THIN_CUDA_MV_PIPE="1[,BPS]": single rows of several load batches (the down projection)
 * keep two batches in flight per warp (matvec_pipe) instead of one, as the other matvecs, in at
 * most BPS blocks per SM (0: as many as fit). */
extern int thin_cuda_mv_pipe, thin_cuda_mv_pipe_bps;
/* The per-op matvec stages x with 16-byte loads (four in flight per thread) when it is longer
 * than thin_cuda_mv_x4 elements (env THIN_CUDA_MV_X4; 0: never; default 4096: the down
 * projection, whose x of 11008 floats then comes in three rounds instead of six). */
extern int thin_cuda_mv_x4;
/* Single-row matvecs (o, down, LM head) run in a kernel of their own (full load batches within 80
 * registers) at most thin_cuda_mv_single blocks per SM (env THIN_CUDA_MV_SINGLE; default 3; 0:
 * in the kernel shared with the pairs, as FP8 at half batches). */
extern int thin_cuda_mv_single;
/* Single-row matrices of at most 16 MiB (the o-projection) take two rows a warp, both requested
 * before the wait, in the row-pair kernel at most thin_cuda_mv_dual blocks per SM (env
 * THIN_CUDA_MV_DUAL; default 1; 0: off, one row a warp in the single-row kernel). Those and the
 * q/k/v rope pairs run in blocks of mv_args.warps warps (12, one per SM by registers, or 8),
 * unless thin_cuda_mv_warps (env THIN_CUDA_MV_WARPS) says 8 or 12 for all of them. */
extern int thin_cuda_mv_dual, thin_cuda_mv_warps;
/* THIN_CUDA_MV_SLIM=1: q/k/v (row pairs with the rope) in 8-warp blocks within 64 registers. */
extern int thin_cuda_mv_slim;
/* THIN_CUDA_MV_SMEM=1[,NS]: q/k/v (row pairs with the rope) copied whole into shared memory as each
 * block starts (NS ns after it), one block per SM; see matvec_smem_kernel. 0: never; unset (-1):
 * after an MLP kernel with FP8 gate/up (cuda_exec.cu's qkv_smem). */
extern int thin_cuda_mv_smem, thin_cuda_mv_smem_ns;

static inline void set_carveout(const void *k) {
    static const void *seen[64];
    static int n_seen;
    for (int i = 0; i < n_seen; i++)
        if (seen[i] == k) return;
    if (n_seen < 64) seen[n_seen++] = k;
    if (thin_cuda_carveout >= 0)
        (void)cudaFuncSetAttribute(k, cudaFuncAttributePreferredSharedMemoryCarveout, thin_cuda_carveout);
}

/* Launches kernel k<<<g, b, smem, st>>>(args...), with programmatic serialisation when pdl is
 * set, in thread block clusters of cluster_dim blocks unless cluster_dim.x is 0. */
template <typename... KArgs, typename... Args>
static inline cudaError_t launch_kcp(void (*k)(KArgs...), dim3 g, dim3 b, size_t smem,
                                     cudaStream_t st, dim3 cluster_dim, int pdl, Args... args) {
    cudaLaunchConfig_t cfg = {};
    cudaLaunchAttribute at[2];
    unsigned n = 0;
    cfg.gridDim = g;
    cfg.blockDim = b;
    cfg.dynamicSmemBytes = smem;
    cfg.stream = st;
    if (cluster_dim.x) {
        at[n].id = cudaLaunchAttributeClusterDimension;
        at[n].val.clusterDim.x = cluster_dim.x;
        at[n].val.clusterDim.y = cluster_dim.y;
        at[n].val.clusterDim.z = cluster_dim.z;
        n++;
    }
    if (pdl) {
        at[n].id = cudaLaunchAttributeProgrammaticStreamSerialization;
        at[n].val.programmaticStreamSerializationAllowed = 1;
        n++;
    }
    cfg.attrs = n ? at : NULL;
    cfg.numAttrs = n;
    thin_cuda_launches++;
    set_carveout((const void *)k);
    cudaError_t e = cudaLaunchKernelEx(&cfg, k, ((KArgs)args)...);
    if (e != cudaSuccess) {
        (void)cudaGetLastError(); /* not left for the next launch to report */
        return e;
    }
    return cudaGetLastError();
}

/* launch_kcp with programmatic serialisation when enabled (thin_cuda_pdl). */
template <typename... KArgs, typename... Args>
static inline cudaError_t launch_kc(void (*k)(KArgs...), dim3 g, dim3 b, size_t smem,
                                    cudaStream_t st, dim3 cluster_dim, Args... args) {
    return launch_kcp(k, g, b, smem, st, cluster_dim, thin_cuda_pdl, args...);
}

/* Raises kernel k's dynamic shared memory limit to smem bytes when smem plus `reserved` (room for
 * its static shared memory) is over the 48 KiB default; else leaves it. */
template <typename K>
static inline cudaError_t smem_attr(K k, size_t smem, size_t reserved) {
    if (smem + reserved <= 48 * 1024) return cudaSuccess;
    return cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
}

/* launch_kc without clusters. */
template <typename... KArgs, typename... Args>
static inline cudaError_t launch_k(void (*k)(KArgs...), dim3 g, dim3 b, size_t smem,
                                   cudaStream_t st, Args... args) {
    return launch_kc(k, g, b, smem, st, dim3(0, 0, 0), args...);
}

/* ---- decode timeline (env THIN_CUDA_TRACE=N, in a build made with CUDA_TRACE=1) ----
 * With a trace armed, each block of the traced kernels (the matvecs and the decode attention)
 * records its launch id, SM, block, and the global timer when it starts, when its wait for the
 * previous kernel returns and when it ends: where a token's time goes between and within kernels.
 * Each .cu file holds its own pointer to the buffer (no relocatable device code) and exports an
 * arm function. */
struct trace_rec {
    unsigned long long grid;      /* %gridid: one per launch */
    unsigned int kind;            /* TRACE_* below, with the launch's units << 8 */
    unsigned int sm, block;
    unsigned int pad;
    unsigned long long t0, t1, t2;/* global timer (ns): start, after the wait, end */
    unsigned long long mark[4];   /* phases within the kernel (0: none) */
};
enum { TRACE_MV = 2, TRACE_ATTN = 3, TRACE_STREAM = 4, TRACE_MLP = 5, TRACE_ATTN_O = 6, TRACE_QAO = 7 };
static __device__ trace_rec *d_trace;
static __device__ unsigned int *d_trace_n;
static __device__ unsigned int d_trace_cap;

/* The global timer (ns). */
__device__ __forceinline__ unsigned long long gtimer() {
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

/* The armed trace or NULL: read at a kernel's start, so that the load has long arrived when
 * trace_block needs it and no block's end waits on it. */
__device__ __forceinline__ trace_rec *trace_armed() { return *(trace_rec *volatile *)&d_trace; }

/* Records one block's times into trace r (call from one thread of the block; nothing when r is
 * NULL). */
__device__ __forceinline__ void trace_block(trace_rec *r, unsigned int kind, unsigned long long t0,
                                            unsigned long long t1, const unsigned long long *mark = nullptr,
                                            int n_mark = 0) {
    if (!r) return;
    const unsigned long long t2 = gtimer();
    const unsigned int i = atomicAdd(d_trace_n, 1u);
    if (i >= d_trace_cap) return;
    unsigned long long g;
    unsigned int smid;
    asm volatile("mov.u64 %0, %%gridid;" : "=l"(g));
    asm volatile("mov.u32 %0, %%smid;" : "=r"(smid));
    r[i].grid = g;
    r[i].kind = kind;
    r[i].sm = smid;
    r[i].block = blockIdx.x + gridDim.x * blockIdx.y;
    r[i].pad = 0;
    r[i].t0 = t0;
    r[i].t1 = t1;
    r[i].t2 = t2;
    for (int k = 0; k < 4; k++) r[i].mark[k] = k < n_mark ? mark[k] : 0;
}

/* Host: points this file's trace at recs (cap records, count at *n), or off with recs NULL. */
static inline cudaError_t trace_arm_here(trace_rec *recs, unsigned int *n, unsigned int cap) {
    cudaError_t e = cudaMemcpyToSymbol(d_trace, &recs, sizeof recs);
    if (e == cudaSuccess) e = cudaMemcpyToSymbol(d_trace_n, &n, sizeof n);
    if (e == cudaSuccess) e = cudaMemcpyToSymbol(d_trace_cap, &cap, sizeof cap);
    return e;
}
cudaError_t matvec_trace_arm(trace_rec *recs, unsigned int *n, unsigned int cap);
cudaError_t mlp_trace_arm(trace_rec *recs, unsigned int *n, unsigned int cap);
cudaError_t attention_trace_arm(trace_rec *recs, unsigned int *n, unsigned int cap);
cudaError_t attn_o_trace_arm(trace_rec *recs, unsigned int *n, unsigned int cap);
cudaError_t stream_trace_arm(trace_rec *recs, unsigned int *n, unsigned int cap);

/* A kernel's timeline probe: compiled in with -DTHIN_CUDA_TRACE=1 (make CUDA_TRACE=1), empty
 * otherwise, so that a normal build's kernels carry no timer reads or trace checks. */
#ifndef THIN_CUDA_TRACE
#define THIN_CUDA_TRACE 0
#endif
#if THIN_CUDA_TRACE
struct ktrace {
    trace_rec *r;
    unsigned long long t0, t1, m[4];
    __device__ __forceinline__ void start() {
        r = trace_armed();
        t0 = gtimer();
        t1 = m[0] = m[1] = m[2] = m[3] = 0;
    }
    __device__ __forceinline__ void waited() { t1 = gtimer(); }
    __device__ __forceinline__ void mark(int k) { m[k] = gtimer(); }
    __device__ __forceinline__ void end(unsigned int kind, int n_mark) { trace_block(r, kind, t0, t1, m, n_mark); }
};
#else
struct ktrace {
    __device__ __forceinline__ void start() {}
    __device__ __forceinline__ void waited() {}
    __device__ __forceinline__ void mark(int) {}
    __device__ __forceinline__ void end(unsigned int, int) {}
};
#endif

/* A kernel's registers capped at R a thread (__maxnreg__, nvcc 12.4 and later; before, the bound
 * for one block of NT threads an SM, which may leave the block more registers than R). */
#if defined(__CUDACC_VER_MAJOR__) && (__CUDACC_VER_MAJOR__ > 12 || (__CUDACC_VER_MAJOR__ == 12 && __CUDACC_VER_MINOR__ >= 4))
#define THIN_MAXNREG(NT, R) __maxnreg__(R)
#else
#define THIN_MAXNREG(NT, R) __launch_bounds__(NT, 1)
#endif

/* ---- launchers (one family per .cu file) ---- */

/* Matrix-vector products for one token (matvec.cu). Up to three weights sharing the input are
 * run as one launch over their concatenated rows. With rope set (the q, k, v projections of a
 * layer), each warp computes rows i and i + head_dim/2 of one head, rotates them in registers when
 * the segment has a frequency table, and also stores them into the segment's KV cache at *pos. */
struct mv_seg {
    dmat w;
    float *out;          /* w.rows floats */
    const double *freq;  /* rope: head_dim/2 inverse frequencies, or NULL (no rotation) */
    float rope_m;        /* rope: factor on cos and sin (LongRoPE's attention factor; else 1) */
    void *cache;         /* rope: [ctx][w.rows] KV cache of kv_dtype, or NULL (q) */
};
struct mv_args {
    mv_seg seg[3];
    int nseg;            /* 1..3; with pair, 2 */
    const float *x;      /* cols floats (the input, or the rmsnorm input when norm_w is set) */
    const void *norm_w;  /* fused rmsnorm weight (cols elements of norm_dtype), or NULL */
    int norm_dtype;
    float eps;
    float *resid;        /* nseg 1: resid[r] += y[r] as well, or NULL */
    int pair;            /* seg0 = gate, seg1 = up: out0 = silu(g) * u, out1 = u */
    int rope;            /* row-pair epilogue above; every segment's rows a multiple of head_dim */
    int dual;            /* nseg 1, no pair or rope: unit r takes rows r and r + (rows + 1) / 2 */
    uint32_t head_dim;   /* rope */
    int kv_dtype;        /* rope: BF16 or F32 */
    const int32_t *pos;  /* rope: device position of the token */
    uint32_t x4;         /* per-op matvec: x staged with 16-byte loads when longer than this (0: never) */
    int warps;           /* rope and dual: warps per block, 8 or 12 (0: 12) */
    int smem;            /* rope: rows copied into shared memory (matvec_smem_kernel) where they
                          * fit; set by the caller (THIN_CUDA_MV_SMEM, see cuda_exec.cu) */
    /* per segment: w.rows elements of bias_dtype added to the products before the rope (Qwen2's
     * q, k, v biases), or NULL; kept last and run by kernels of their own (launch_matvec), so
     * that the kernels of models without them compile as they would without this */
    const void *bias[3];
    int bias_dtype[3];
};
cudaError_t launch_matvec(const mv_args *a, int n_sm, cudaStream_t st);
/* Whether launch_matvec takes a's rows from shared memory (a->smem set and the rows of a block
 * fit the device's opt-in shared memory); 0 also when the device cannot be asked. */
int matvec_smem_taken(const mv_args *a, int n_sm);

/* The decode step's MLP for one token in one kernel (mlp.cu): resid += down(silu(gate x') * up x'),
 * x' the fused RMSNorm of mv.x. mv: the gate/up pair's matvec arguments (its outputs unused);
 * down: the down projection stored transposed (trans set, BF16 or FP8); count: the step's
 * counter (zero before its first launch; each launch adds its grid size). */
struct mlp_args {
    mv_args mv;
    dmat down;
    float *resid;
    unsigned long long *count;
    uint32_t units;      /* set by the launcher: intermediate units per block */
    uint32_t tpr;        /* set by the launcher: threads per transposed down row (a power of two) */
    uint32_t h_off;      /* set by the launcher: floats of shared memory before the h values */
    int next_smem;       /* the q/k/v launch after it takes its rows from shared memory: FP8
                          * gate/up then run in the slim block, which leaves room beside it */
    int split;           /* BF16 gate/up: the units left over after whole rounds of the warps
                          * cut in halves, one a warp (THIN_CUDA_MLP_SPLIT; see mlp_body) */
    uint32_t *units_only; /* set: launch_mlp only stores the units per block it would launch */
};
cudaError_t launch_mlp(const mlp_args *a, int n_sm, cudaStream_t st);
/* Whether the MLP kernel takes these weights: gate/up and down BF16 or FP8, the transposed down
 * row (the hidden size) within the kernel's columns per thread. */
int mlp_supported(int gate_dtype, int down_dtype, uint32_t hidden, uint32_t inter);
/* A mixture of experts for n rows (moe.cu; the plan's moe op): x (rows ldx floats apart, the
 * op's input) through the router, each row's choice of top k experts, their gate/up/down and the
 * shared expert into out (rows ldo apart). tab: on the device, 3 (E + 1) dmats, each expert's
 * gate, up and down, then the shared expert's (rows 0 where there is none). Scratch (device): scores
 * n (E + 1) floats, sel and wts n KS each, cnt 3 (E + 1) + 1, list n KS, hb n KS imax floats, db
 * n KS hout floats. */
#define MOE_MAX_E 256u /* experts a moe op may have on the GPU */
#define MOE_SMEM_MAX (200u * 1024u) /* shared memory for one staged x or h (floats) of a moe op */
struct moe_args {
    const float *x;
    float *out;
    uint32_t ldx, ldo;
    dmat router;         /* [E, in] */
    dmat sgate;          /* the shared expert's gate [1, in], or data NULL */
    const dmat *tab;
    const float *bias;   /* DeepSeek-V3's choice bias (E), or NULL */
    uint32_t E, K, KS;   /* experts, chosen a row, slots a row (K, + 1 with a shared expert) */
    uint32_t n_group, topk_group, norm_topk, sigmoid;
    float routed_scale;  /* 0: 1 */
    uint32_t imax, hout; /* the largest inner size (routed or shared), output size */
    float *scores, *wts, *hb, *db;
    int32_t *sel;
    uint32_t *cnt, *list;
    int gu_dtype, dn_dtype; /* every gate/up, every down of one dtype (-1: mixed; see moe_one) */
    uint32_t one;           /* set by launch_moe: the one-row kernels run (moe_one) */
};
/* The moe op for n rows; n_sm sizes the one-row kernels' grids (moe.cu's moe_one; off with
 * thin_cuda_moe1 = 0, env THIN_CUDA_MOE1=0). */
extern int thin_cuda_moe1;
cudaError_t launch_moe(const moe_args *a, uint32_t n, int n_sm, cudaStream_t st);
/* 1 when a moe op of these input and (largest) inner sizes fits launch_moe's staging. */
int moe_fits(uint32_t hidden, uint32_t inter);
/* dst[c][r] = src[r][c] for r < rows, c < cols, elements of esz bytes (1 or 2); pitches in
 * elements. Padding of dst is left as it is. */
cudaError_t launch_transpose(void *dst, uint32_t dst_pitch, const void *src, uint32_t src_pitch,
                             uint32_t rows, uint32_t cols, size_t esz, cudaStream_t st);
/* The MLP kernel (env THIN_CUDA_MLP="ON[,BPS[,UNITS]]": 0 switches it off; at most BPS blocks per
 * SM, UNITS intermediate units per block; 0: the launcher's choice, see launch_m). Off with
 * THIN_CUDA_STREAM=1. */
extern int thin_cuda_mlp, thin_cuda_mlp_bps, thin_cuda_mlp_units, thin_cuda_mlp_warps;
/* THIN_CUDA_MLP_SLIM=24 or 16: the MLP kernel in one block of that many warps per SM within 64 or
 * 96 registers a thread; 0: no slim block; -1 (unset): the launcher's choice (launch_dd in mlp.cu:
 * 24 for BF16 gate/up unless THIN_CUDA_MLP_WARPS is 8 or 16). */
extern int thin_cuda_mlp_slim;
/* THIN_CUDA_MLP_SPLIT=0: mlp_args.split never; 1 (unset): for every MLP launch (the kernel takes
 * it for BF16 gate/up). */
extern int thin_cuda_mlp_split;

/* Batched linear for a prefill of n rows (gemm.cu): out[i] = W x[i] (+ resid[i] += ...); n_sm
 * sizes the grid. A transposed weight (dmat.trans) is read as stored. */
cudaError_t launch_gemm(const dmat *w, const float *x, uint32_t ldx, float *out, uint32_t ldo,
                        float *resid, uint32_t ldr, uint32_t n, int n_sm, cudaStream_t st);
/* The same for nseg (1..3) weights of one dtype, layout and column count applied to the same x,
 * each into its own out[k] (ldo[k]), in one launch (resid only with one); cudaErrorInvalidValue
 * when they differ. */
cudaError_t launch_gemm_segs(const dmat *const *w, float *const *out, const uint32_t *ldo, int nseg,
                             const float *x, uint32_t ldx, float *resid, uint32_t ldr, uint32_t n, int n_sm,
                             cudaStream_t st);
/* Whether launch_gemm_segs takes these nseg weights (BF16 or FP8, rows padded to 32 columns, one
 * dtype, layout and column count). */
int gemm_segs_fit(const dmat *const *w, int nseg);
/* thin_cuda_gemm_t = 1 (env THIN_CUDA_GEMM_T=1): gemm.cu's kernel reads the MLP kernel's transposed
 * down projections as stored in a prefill; else they are transposed back into a scratch first
 * (the default until the direct form has been timed and checked on the GPU). */
extern int thin_cuda_gemm_t;
/* thin_cuda_gemm_sub (env THIN_CUDA_GEMM_SUB=1, 2 or 4; 0, the default: 2 for tiles of up to 32
 * tokens, 1 for 64 and 128, the fastest on the GPU machine): 32-column sub-stages in each pipeline
 * stage of gemm.cu's kernel (capped by what fits and by the row), so that each weight row is read
 * in runs of 32·SUB columns. */
extern int thin_cuda_gemm_sub;
/* The same through cuBLASLt (gemm_lt.cu), with scratch for n · K BF16 activations (x_elems) and
 * w_elems BF16 values of widened FP8 weights; transposed weights (dmat.trans) are taken as stored.
 * gemm_lt_start loads the library (once per process), creates the handle and workspace and runs
 * one small product to pay cuBLASLt's one-time start-up (any thread; it uses a stream of its own
 * and waits for it); gemm_lt_scratch then allocates the scratch. On failure *why says what failed.
 * launch_gemm_lt: cudaErrorNotSupported for a shape it does not take (launch_gemm then),
 * cudaErrorUnknown for a cuBLASLt failure, named by gemm_lt_status. */
typedef struct gemm_lt gemm_lt;
cudaError_t gemm_lt_start(gemm_lt **g, const char **why);
cudaError_t gemm_lt_scratch(gemm_lt *g, size_t x_elems, size_t w_elems, const char **why);
void gemm_lt_destroy(gemm_lt *g);
cudaError_t launch_gemm_lt(gemm_lt *g, const dmat *w, const float *x, uint32_t ldx, float *out, uint32_t ldo,
                           float *resid, uint32_t ldr, uint32_t n, cudaStream_t st);
const char *gemm_lt_status(const gemm_lt *g);
/* The prefill's linears: through cuBLASLt where it takes the shape (THIN_CUDA_GEMM_LT), through
 * gemm.cu's kernel (THIN_CUDA_GEMM_OWN), or (THIN_CUDA_GEMM_AUTO, the default) through cuBLASLt
 * for batches of LT_AUTO_ROWS rows or more when the model's weights reach LT_AUTO_BYTES and the
 * library loads, else gemm.cu's kernel without a message (a small model's prefill does not repay
 * the library's load). cuBLASLt's first products at a new batch size cost time (a heuristic
 * query and the kernels' first launch per shape): on the H200 with SmolLM3-3B BF16 a process's
 * first 16-token prefill took 30.2 ms through it against 15.0 through gemm.cu's kernel, its
 * first 512-token one 35.6 against 57.3 (bench/thin-bench-prefill). Env THIN_CUDA_GEMM=lt or own. */
enum { THIN_CUDA_GEMM_OWN = 0, THIN_CUDA_GEMM_LT = 1, THIN_CUDA_GEMM_AUTO = 2 };
#define LT_AUTO_BYTES ((size_t)256 << 20)
#define LT_AUTO_ROWS 256u
extern int thin_cuda_gemm_lt;
/* Most BF16 values of an FP8 weight widened at once for cuBLASLt (env THIN_CUDA_GEMM_WIDEN; default
 * 64 Mi: a larger one, such as an FP8 LM head, goes in blocks of rows; a transposed one goes whole). */
extern long thin_cuda_gemm_widen;

/* Elementwise families (norm.cu). */
/* out = E[token] (× scale unless 1: Gemma's sqrt(hidden)) for n rows. */
cudaError_t launch_embed(float *out, uint32_t ldo, const dmat *E, const int32_t *tokens, float scale,
                         uint32_t n, cudaStream_t st);
cudaError_t launch_rmsnorm(float *out, uint32_t ldo, const float *x, uint32_t ldx, const dmat *w,
                           uint32_t cols, float eps, uint32_t n, cudaStream_t st);
cudaError_t launch_head_rmsnorm(float *x, uint32_t ldx, const dmat *w, uint32_t n_heads,
                                uint32_t head_dim, float eps, uint32_t n, cudaStream_t st);
/* out[r][i] += b[i] for rows r < n, i < cols (b: a 1 × cols weight, F32, F16 or BF16). */
cudaError_t launch_bias(float *out, uint32_t ldo, const dmat *b, uint32_t cols, uint32_t n, cudaStream_t st);
/* out[r][i] += f * in[r][i] for rows r < n (f = 1: op_add; else op_add_scaled). */
cudaError_t launch_add(float *out, uint32_t ldo, const float *in, uint32_t ldi, uint32_t cols, float f,
                       uint32_t n, cudaStream_t st);
cudaError_t launch_silu_mul(float *g, uint32_t ldg, const float *u, uint32_t ldu, uint32_t cols,
                            uint32_t n, cudaStream_t st);
cudaError_t launch_gelu_tanh_mul(float *g, uint32_t ldg, const float *u, uint32_t ldu, uint32_t cols,
                                 uint32_t n, cudaStream_t st);
/* x = cap * tanh(x / cap) in place, rows r < n (op_softcap: Gemma 2's logits). */
cudaError_t launch_softcap(float *x, uint32_t ldx, uint32_t cols, float cap, uint32_t n, cudaStream_t st);
/* x *= f in place, rows r < n (op_scale: Granite's logits). */
cudaError_t launch_scale(float *x, uint32_t ldx, uint32_t cols, float f, uint32_t n, cudaStream_t st);

/* RoPE on q and k (either may be skipped with a NULL frequency table) and the KV store (rope.cu).
 * Row i sits at position *pos + i. inv_freq tables hold head_dim/2 doubles. k/v caches: NULL to
 * rope only. */
struct rope_args {
    float *q;            /* n rows of ldq floats: n_heads × head_dim */
    uint32_t ldq, n_heads;
    const double *q_freq;/* or NULL: no rope on q */
    float q_m, k_m;      /* factors on cos and sin (LongRoPE's attention factor; else 1) */
    uint32_t q_rot, k_rot;/* the leading dims of each head that rotate where the table is given
                             (plan_rot_dim: head_dim, or fewer for a partial rotation) */
    float *k;            /* n rows of ldk floats: n_kv × head_dim, or NULL */
    uint32_t ldk, n_kv;
    const double *k_freq;/* or NULL: no rope on k */
    const float *v;      /* n rows of ldv floats, or NULL */
    uint32_t ldv;
    void *kcache, *vcache; /* [ctx][n_kv × head_dim] of kv_dtype, or NULL */
    int kv_dtype;
    uint32_t head_dim;
    const int32_t *pos;  /* device: position of row 0 */
    const void *q_norm, *k_norm; /* per-head RMSNorm weights (head_dim elements) applied to q / k
                                    before the rotation (Qwen3), or NULL */
    int q_norm_dt, k_norm_dt;
    float q_eps, k_eps;
};
cudaError_t launch_rope_store(const rope_args *a, uint32_t n, cudaStream_t st);

/* Dim i of a head of q (isk false) or k at position pos, as rope_store_kernel and the attention +
 * o kernel (which takes the rope where the q/k/v step could not) both compute it: its rotation
 * (cos and sin, in double as op_rope, times the table's factor; identity past rot or without a
 * table) and its head-norm weight (1 without a norm), all before the dependency wait. */
struct rope_dim {
    float cf, sf, wn;
};
__device__ __forceinline__ rope_dim rope_dim_of(const rope_args &a, bool isk, uint32_t i, int32_t pos) {
    rope_dim d = {1.0f, 0.0f, 1.0f};
    const double *freq = isk ? a.k_freq : a.q_freq;
    const uint32_t rot = isk ? a.k_rot : a.q_rot;
    if (freq && i < rot) {
        double sn, cs;
        sincos((double)pos * freq[i % (rot / 2)], &sn, &cs);
        const float m = isk ? a.k_m : a.q_m;
        d.cf = (float)cs * m;
        d.sf = (float)sn * m;
    }
    const void *nw = isk ? a.k_norm : a.q_norm;
    if (nw && i < a.head_dim) d.wn = load_elem(nw, isk ? a.k_norm_dt : a.q_norm_dt, i);
    return d;
}
/* Dim i's value v after the head's RMSNorm (ss: the head's sum of squares; op_head_rmsnorm). */
__device__ __forceinline__ float rope_dim_norm(const rope_args &a, bool isk, const rope_dim &d, float v, float ss) {
    return d.wn * (v * (1.0f / sqrtf(ss / (float)a.head_dim + (isk ? a.k_eps : a.q_eps))));
}
/* Dim i's value v rotated (xs: the head's dims; i < rot/2 pairs with i + rot/2). */
__device__ __forceinline__ float rope_dim_rotate(const rope_args &a, bool isk, const rope_dim &d, uint32_t i, float v,
                                                 const float *xs) {
    const uint32_t rot = isk ? a.k_rot : a.q_rot, half = rot / 2;
    if (i < half) return v * d.cf - xs[i + half] * d.sf;
    if (i < rot) return xs[i - half] * d.sf + v * d.cf;
    return v;
}

/* The first gate and up rows of each block of the decode MLP kernel that the kernel before it asks
 * L2 for (l2_ask_ahead), so that they come while the chain before the MLP leaves the memory partly
 * idle: block b's rows [b · units, b · units + ahead) of both (row_bytes each, rows in all). at:
 * where the attention + o kernel asks, 0 never, 1 at its blocks' start (default), 2 once their K/V
 * rows are in, 3 at their end; the long-context decode attention kernel (attention.cu), which the
 * o matvec follows, asks at its blocks' start for any at > 0. Env THIN_CUDA_MLP_PF=AHEAD[,AT]
 * (AHEAD 0: off; default MLP_PF_DEFAULT at 1). */
struct l2_ahead {
    const uint8_t *gate, *up;
    uint64_t row_bytes;
    uint32_t units, ahead, rows, at;
};
#define MLP_PF_DEFAULT 8
extern int thin_cuda_mlp_pf[2];

/* Thread 0 of block i of the grid asks L2 for the first rows of MLP blocks i, i + grid, ...
 * (l2_ahead; the grid's blocks in x and y). */
__device__ __forceinline__ void l2_ask_ahead(const l2_ahead &pf) {
    if (threadIdx.x) return;
    const uint32_t g = gridDim.x * gridDim.y;
    for (uint32_t r = (blockIdx.y * gridDim.x + blockIdx.x) * pf.units; r < pf.rows; r += g * pf.units) {
        const uint32_t n = min(pf.ahead, pf.rows - r);
        l2_prefetch(pf.gate + r * pf.row_bytes, (uint32_t)(n * pf.row_bytes));
        l2_prefetch(pf.up + r * pf.row_bytes, (uint32_t)(n * pf.row_bytes));
    }
}

/* Split-sequence attention for n rows, row i attending positions 0..*pos+i, or with a sliding
 * window its last `window` of them (attention.cu). */
struct attn_args {
    const float *q;      /* n rows of ldq floats */
    uint32_t ldq;
    const void *kcache, *vcache;
    int kv_dtype;
    float *out;          /* n rows of ldo floats */
    uint32_t ldo;
    uint32_t n_heads, n_kv, head_dim;
    uint32_t n_splits;   /* splits of the sequence (blocks per head) */
    uint32_t chunk_max;  /* largest positions per split (scores in shared memory) */
    float *partial;      /* n × n_heads × n_splits × (head_dim + 2) floats */
    unsigned int *counter; /* n × n_kv zeros: splits done per (row, KV head); left at zero */
    const int32_t *pos;
    int cluster;         /* one row: the cluster kernel may run (n_splits a multiple of 8 and
                            chunk_max from attn_decode_chunk_max) */
    uint32_t min_chunk;  /* cluster kernel: fewest positions per split, a multiple of 32 */
    uint32_t window;     /* a sliding window: a row at position p attends p - window + 1..p
                            (op_window_start); 0: all positions before it */
    float softcap;       /* > 0: each scaled score s capped as softcap * tanh(s / softcap) (Gemma 2) */
    float scale;         /* the scores' scale; 0: 1/sqrt(head_dim) (attn_scale_arg) */
    l2_ahead pf;         /* one decode row: the next MLP's first rows to ask L2 for, or pf.at 0 */
};

/* The scores' scale of a (attn_args.scale, else 1/sqrt(head_dim)). */
__device__ __forceinline__ float attn_scale_of(const attn_args &a) {
    return a.scale > 0.0f ? a.scale : rsqrtf((float)a.head_dim);
}

/* A scaled score under the attention's soft cap (op_attention's; cap 0: none). */
__device__ __forceinline__ float attn_cap(float s, float cap) {
    return cap > 0.0f ? cap * tanhf(s / cap) : s;
}

/* The first position a row whose context holds npos positions attends (op_window_start). */
__host__ __device__ __forceinline__ uint32_t attn_first(uint32_t npos, uint32_t window) {
    return window && npos > window ? npos - window : 0;
}
cudaError_t launch_attention(const attn_args *a, uint32_t n, cudaStream_t st);
/* The prefill's attention on tensor cores (attn_prefill.cu): whether it takes a batch of n rows
 * of a's shape (thin_cuda_attn_tc, n > 1, BF16 cache, head_dim 32, 64, 128 or 256), and its
 * launch. launch_attention calls it where it fits. */
int attn_prefill_fits(const attn_args *a, uint32_t n);
cudaError_t launch_attn_prefill(const attn_args *a, uint32_t n, cudaStream_t st);
/* thin_cuda_attn_tc = N (env THIN_CUDA_ATTN_TC=N, default ATTN_TC_DEFAULT): the prefill's
 * attention on tensor cores where it fits, for batches of N rows or more (0: never); else
 * attention.cu's kernels. On the H200 with SmolLM3-3B (bench/prefill-variants.sh, a process's
 * first prefill, BF16 / quality FP8): 32-128 rows within run-to-run spread either way, 256 rows
 * 7,689-7,739 / 7,396-7,687 tokens/s against 7,086-7,090 / 6,909-7,065, 512 rows 20,495-22,159
 * / 17,510-19,688 against 14,781-15,374 / 11,514-13,702; thin-bench-prefill's later prefills
 * of 512 and 2048 rows 11.9 and 46.6 ms against 21.2 and 126.9 ms (BF16). */
#define ATTN_TC_DEFAULT 256
extern int thin_cuda_attn_tc;
/* Minimum positions per split (fewer positions go to fewer splits). */
#define ATTN_MIN_CHUNK 16u
/* The decode (cluster) kernel's positions per split for contexts up to max_ctx over n_splits
 * splits, and its shared memory in bytes. */
uint32_t attn_decode_chunk_max(uint32_t max_ctx, uint32_t n_splits, uint32_t min_chunk);
size_t attn_decode_smem(uint32_t head_dim, uint32_t group, uint32_t chunk_max, int kv_dtype);
/* Clusters of the decode attention kernel (thread block clusters, sm_90): 1 when the device has
 * them and env THIN_CUDA_CLUSTER is not 0. */
extern int thin_cuda_cluster;
/* Shared-memory floats the attention launch needs for head group g (query heads per KV head). */
size_t attn_smem_floats(uint32_t head_dim, uint32_t group, uint32_t chunk_max, uint32_t n_splits);
/* Query heads per KV head of the grouped kernel instance for a's shape (1, 2, 4 or 8), or 0 when
 * the grouped kernel cannot take it. */
int attn_group_max(const attn_args *a);

/* The decode step's attention and output projection in one kernel, for contexts up to
 * ATTN_O_CLUSTER × a.chunk_max positions (attn_o.cu): a cluster of ATTN_O_CLUSTER blocks per query
 * head splits the positions, combines its partial results through distributed shared memory, and
 * each block multiplies the head's output by its share of the o-projection's rows (the head's
 * columns, requested into shared memory before the dependency wait) and adds the products into
 * the residual (float atomics). The attention output row is written as well. */
#define ATTN_O_CLUSTER 8u
struct attn_o_args {
    attn_args a;         /* q, caches, out, head counts, position; chunk_max: positions per block */
    dmat o;              /* rows (the residual's width) × n_heads · head_dim, BF16 or FP8 */
    float *resid;        /* resid[r] += (o · attention)[r] */
    uint32_t rows_per;   /* set by the launcher: o rows per block (a multiple of 4) */
    uint32_t solo;       /* a token whose positions number at most this (and a.chunk_max): every
                            block takes all of them, and the cluster's blocks do not meet */
    rope_args r;         /* r.k NULL: q and the newest K/V row as the q/k/v step left them (rotated,
                            stored). Else the step's rope and KV store of the token, which the q/k/v
                            step's epilogue could not take (a head's norm needs the whole head:
                            Qwen3), are done here: each block takes q (r.q) and the newest k and
                            v (r.k, r.v) of its heads, normalises and rotates them as
                            rope_store_kernel does, and the first query head of each group stores
                            k and v into the caches (attn_o_rope_supported) */
};
cudaError_t launch_attn_o(const attn_o_args *a, cudaStream_t st);
/* Decode positions below which the attention + o kernel runs (env THIN_CUDA_ATTN_O, default
 * ATTN_O_DEFAULT; 0: off, as with THIN_CUDA_STREAM=1, THIN_CUDA_FUSE=0 or without clusters),
 * rounded up to whole positions per block and capped by the context and shared memory. */
#define ATTN_O_DEFAULT 256
extern int thin_cuda_attn_o;
/* 1 (default): the attention + o kernel's blocks push their partials into every block of the
 * cluster before one barrier; 0 (THIN_CUDA_AO_PUSH=0): each block reads the others' after it */
extern int thin_cuda_ao_push;
extern int thin_cuda_ao_gen; /* THIN_CUDA_AO_GEN=1: the attention + o kernel's general instance always */
/* THIN_CUDA_AO_OLATE=1: the attention + o kernel's plain instance asks for its o rows after its
 * wait, once q and the newest K/V row are in, instead of before it (attn_o.cu's launch_ao_k) */
extern int thin_cuda_ao_olate;
/* THIN_CUDA_AO_SOLO=N (default ATTN_O_SOLO_DEFAULT): decode tokens with at most N positions run
 * the attention + o kernel with every block taking all of them (attn_o_args.solo; its shared
 * memory then holds N positions a block, or as many as fit); 0: never. On one H100 with
 * SmolLM3-3B (bench/decode-variants.sh, two rounds): N = 48 and 64 BF16 422.1-422.3 tokens/s
 * against 419.7-419.9 without, quality FP8 606.2-606.9 against 603.5-604.7; N = 80, 96 and 128
 * 403.8-405.8 and 546.9-549.1. */
#define ATTN_O_SOLO_DEFAULT 64
extern int thin_cuda_ao_solo;
/* Whether the kernel takes this shape: head_dim 32, 64, 128 or 256, BF16 or F32 KV cache, o BF16
 * or FP8 stored as rows (not transposed) with rows a multiple of 4 and n_heads · head_dim columns,
 * whole KV groups. */
int attn_o_supported(uint32_t n_heads, uint32_t n_kv, uint32_t head_dim, int kv_dtype, const dmat *o);
/* Whether the kernel can also take the token's rope and KV store (attn_o_args.r) for this head_dim:
 * two threads a dim pair of q and k (head_dim at most 128), with the partials pushed
 * (thin_cuda_ao_push) and env THIN_CUDA_AO_ROPE not 0. */
int attn_o_rope_supported(uint32_t head_dim);
extern int thin_cuda_ao_rope;
/* Its shared memory for a chunk of `chunk` positions per block (o rows as the launcher splits them). */
size_t attn_o_smem(uint32_t head_dim, int kv_dtype, const dmat *o, uint32_t chunk);

/* The decode step's whole attention block for one token in one kernel (attn_o.cu): the RMSNorm of
 * the residual, q, k and v with rope and the KV store, the attention and the o-projection with
 * the residual add, in attn_o_kernel's grid without clusters (see qao_kernel). mv: the q, k, v
 * step's matvec arguments with the rope epilogue (its outputs written as well); count: 1 + n_kv
 * + 2 n_heads counters of the step (zero before its first launch, only grow); part: n_heads × 8 ×
 * (head_dim + 4) floats; smem_min: shared memory a block asks for at least (more than half an
 * SM's: one block an SM). */
struct qao_args {
    attn_o_args ao;
    mv_args mv;
    unsigned long long *count;
    float *part;
    uint32_t smem_min;
    uint32_t qp, kvp;    /* set by the launcher: q pairs and K/V pairs a block */
};
cudaError_t launch_qao(const qao_args *a, cudaStream_t st);
/* Whether the kernel takes this shape: the attention + o kernel's, and q, k, v of o's dtype, as
 * rows, n_heads, n_kv and n_kv heads of head_dim rows, o's rows as columns. */
int qao_supported(uint32_t n_heads, uint32_t n_kv, uint32_t head_dim, int kv_dtype, const dmat *q, const dmat *k,
                  const dmat *v, const dmat *o);
/* Its shared memory for a chunk of `chunk` positions per block (before smem_min). */
size_t qao_smem(uint32_t head_dim, int kv_dtype, const dmat *q, const dmat *o, uint32_t chunk);
/* Its blocks an SM at most (the whole grid, 8 n_heads blocks, must be resident at once); count and
 * part are not needed for it. */
cudaError_t qao_per_sm(const qao_args *a, int *per_sm);
/* env THIN_CUDA_QAO=1: the attention block kernel where it fits, 0: the q/k/v matvec and the
 * attention + o kernel. */
extern int thin_cuda_qao;

/* Row-wise argmax (lowest index on ties) of n rows of cols floats (sample.cu). `partial` holds
 * n × ARGMAX_PARTS (float, int) pairs. */
#define ARGMAX_PARTS 128u
cudaError_t launch_argmax(int32_t *out, const float *x, uint32_t ld, uint32_t cols, uint32_t n,
                          float2 *partial, cudaStream_t st);
/* The decode step's argmax of one row, which also writes the next step's input, next[0] = *pos + 1
 * and next[1] = the id, and the id to ring[*pos % DECODE_RING] (mapped host memory), so that a
 * greedy decode can run steps ahead of the host. */
#define DECODE_RING 64u
cudaError_t launch_argmax_next(int32_t *out, const float *x, uint32_t cols, float2 *partial, const int32_t *pos,
                               int32_t *next, int32_t *ring, cudaStream_t st);
/* Sampling from one row x of cols logits with sampler.h's semantics (sampler_pick with draw coin):
 * the chosen id into *out (-1 when no token is a candidate). scratch: sample_scratch_bytes() of
 * device memory; pf: cols floats of device memory (the probabilities). */
#define SAMP_PARTS 128u
size_t sample_scratch_bytes(void);
cudaError_t launch_sample(const float *x, uint32_t cols, float temperature, uint32_t top_k, float top_p,
                          float coin, void *scratch, float *pf, int32_t *out, cudaStream_t st);

#endif /* THIN_CUDA_COMMON_CUH */
