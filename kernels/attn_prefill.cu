/*
 * attn_prefill.cu — the prefill's causal GQA attention on tensor cores, in the flash-attention
 * form: block (tile of AP_BM query rows, query head), four warps of 16 rows each. Row i of the
 * batch sits at position *pos + i and attends positions 0..*pos + i of its head's KV head
 * (h / (n_heads / n_kv)), or with a sliding window the last `window` of them (a block starts at
 * the tile of its first row's first position; rows mask the positions before theirs). The K and V rows come in tiles of BN positions through a
 * double-buffered cp.async pipeline (zero-filled past the last position the block attends, so
 * nothing past the written rows is read); scores and weighted V sums are mma.sync m16n8k16 BF16
 * products with F32 accumulators; the softmax runs online per row in registers (exp2 of scores
 * scaled by log2(e) / sqrt(head_dim) through q). Heavy tiles (the batch's last rows, which attend
 * most positions) are scheduled first.
 *
 * Precision: the cache is BF16, so K and V are exact operands; q (F32) and the probabilities
 * enter the products as the sum of two BF16 numbers, their rounding and its rest, which keeps
 * about 16 significant bits where one BF16 rounding would keep 8, for twice the products.
 * Accumulation order differs from the F32 kernels' (attention.cu), so results are not
 * bit-identical; tests/cuda/test_cuda_backend holds the prefill logits to 2e-3 relative of theirs
 * (1.9e-4 to 7.1e-4 on the H200), and on SmolLM3-3B the last prompt position's logits of the two
 * paths had a centered cosine of 0.999998 after 512 tokens.
 *
 * Takes BF16 caches with head_dim 32, 64, 128 or 256 (attn_prefill_fits) for batches of
 * thin_cuda_attn_tc rows or more (ATTN_TC_DEFAULT, THIN_CUDA_ATTN_TC=N; 0 never); attention.cu's
 * kernels take shorter batches, every other shape, F32 caches and single rows. CPU twin:
 * op_attention in ops_cpu.c.
 */
#include "cuda_common.cuh"

#define AP_BM 64                 /* query rows per block */
#define AP_THREADS 128           /* four warps of 16 rows */

int thin_cuda_attn_tc = ATTN_TC_DEFAULT;

/* Positions per K/V tile: 64, or 32 at head_dim 256 (shared memory). */
__host__ __device__ constexpr int ap_bn(int hd) { return hd <= 128 ? 64 : 32; }
/* Elements per staged row: head_dim plus 8 (16 bytes), so that ldmatrix's eight rows of a matrix
 * fall on different banks. */
__host__ __device__ constexpr int ap_pitch(int hd) { return hd + 8; }

static size_t ap_smem(int hd) {
    return (size_t)(2 * AP_BM + 4 * ap_bn(hd)) * ap_pitch(hd) * sizeof(uint16_t);
}

__device__ __forceinline__ void ldsm_x4(uint32_t (&r)[4], const uint16_t *p) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"((uint32_t)__cvta_generic_to_shared(p))
                 : "memory");
}
__device__ __forceinline__ void ldsm_x4_t(uint32_t (&r)[4], const uint16_t *p) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"((uint32_t)__cvta_generic_to_shared(p))
                 : "memory");
}

/* x and y as two BF16 pairs: hi their roundings, lo the roundings of what is left (x low). */
__device__ __forceinline__ void split_bf16x2(float x, float y, uint32_t &hi, uint32_t &lo) {
    hi = bf16x2(x, y);
    lo = bf16x2(x - bf16_bits_to_f32(hi & 0xffffu), y - bf16_bits_to_f32(hi >> 16));
}

template <int HD>
__global__ void __launch_bounds__(AP_THREADS) attn_prefill_kernel(const attn_args a, uint32_t n) {
    constexpr int BN = ap_bn(HD), P = ap_pitch(HD), CH = HD / 8; /* 16-byte pieces a row */
    constexpr int NT = BN / 8, DT = HD / 8;                      /* n-tiles of scores, of output */
    extern __shared__ __align__(16) uint16_t ap_sm[];
    uint16_t *qh = ap_sm, *ql = qh + AP_BM * P, *ks = ql + AP_BM * P, *vs = ks + 2 * BN * P;
    pdl_trigger();
    pdl_wait();
    const uint32_t r0 = (gridDim.x - 1 - blockIdx.x) * AP_BM, h = blockIdx.y;
    const uint32_t kvh = h / (a.n_heads / a.n_kv), pos0 = (uint32_t)*a.pos;
    const uint32_t rows = min(n - r0, (uint32_t)AP_BM);
    const uint32_t last = pos0 + r0 + rows - 1; /* the last position any row here attends */
    const uint32_t ntiles = last / BN + 1;
    /* the first tile any row here attends: 0, or with a sliding window the first row's first */
    const uint32_t t0 = attn_first(pos0 + r0 + 1, a.window) / BN;
    const size_t kvd = (size_t)a.n_kv * HD;
    const uint16_t *kc = (const uint16_t *)a.kcache + (size_t)kvh * HD;
    const uint16_t *vc = (const uint16_t *)a.vcache + (size_t)kvh * HD;

    auto load_kv = [&](uint32_t t, int stage) {
        for (int i = threadIdx.x; i < BN * CH; i += AP_THREADS) {
            const int r = i / CH, c = i % CH;
            const uint32_t p = t * BN + r;
            const uint32_t bytes = p <= last ? 16 : 0;
            const size_t src = (size_t)(p <= last ? p : 0) * kvd + c * 8;
            gm_cp16(ks + (stage * BN + r) * P + c * 8, kc + src, bytes);
            gm_cp16(vs + (stage * BN + r) * P + c * 8, vc + src, bytes);
        }
        gm_commit();
    };
    load_kv(t0, 0);

    /* q rows scaled by log2(e) / sqrt(head_dim), split into BF16 high and low parts */
    const float qs = 1.4426950408889634f * attn_scale_of(a);
    for (int i = threadIdx.x; i < AP_BM * (HD / 4); i += AP_THREADS) {
        const int r = i / (HD / 4), d = (i % (HD / 4)) * 4;
        float4 v = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        if ((uint32_t)r < rows) v = *(const float4 *)(a.q + (size_t)(r0 + r) * a.ldq + (size_t)h * HD + d);
        uint32_t h0, l0, h1, l1;
        split_bf16x2(v.x * qs, v.y * qs, h0, l0);
        split_bf16x2(v.z * qs, v.w * qs, h1, l1);
        *(uint2 *)(qh + r * P + d) = make_uint2(h0, h1);
        *(uint2 *)(ql + r * P + d) = make_uint2(l0, l1);
    }

    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t4 = lane & 3;
    const uint32_t wpos = pos0 + r0 + warp * 16; /* position of the warp's first row */
    const uint32_t rpos0 = wpos + g, rpos1 = wpos + g + 8;
    /* with a sliding window: the first position of the warp's first row and of this lane's rows */
    const uint32_t wfirst = attn_first(wpos + 1, a.window);
    const uint32_t rfirst0 = attn_first(rpos0 + 1, a.window), rfirst1 = attn_first(rpos1 + 1, a.window);
    const bool live = (uint32_t)warp * 16 < rows; /* the warp has rows of the batch */
    float o[DT][4];
#pragma unroll
    for (int j = 0; j < DT; j++) o[j][0] = o[j][1] = o[j][2] = o[j][3] = 0.0f;
    float m0 = -INFINITY, m1 = -INFINITY, l0 = 0.0f, l1 = 0.0f;

    for (uint32_t t = t0; t < ntiles; t++) {
        const int stage = (t - t0) & 1;
        if (t + 1 < ntiles) {
            load_kv(t + 1, stage ^ 1);
            gm_wait<1>();
        } else {
            gm_wait<0>();
        }
        __syncthreads(); /* tile t (and, the first time, q) in shared memory for every warp */
        const uint32_t p0 = t * BN;
        /* else every row of the warp is before this tile, or past it by more than the window */
        if (live && p0 <= wpos + 15 && p0 + BN > wfirst) {
            const uint16_t *kt = ks + stage * BN * P, *vt = vs + stage * BN * P;
            float s[NT][4];
#pragma unroll
            for (int j = 0; j < NT; j++) s[j][0] = s[j][1] = s[j][2] = s[j][3] = 0.0f;
#pragma unroll
            for (int kk = 0; kk < HD; kk += 16) {
                uint32_t ah[4], al[4];
                const int qo = (warp * 16 + (lane & 15)) * P + kk + (lane >> 4) * 8;
                ldsm_x4(ah, qh + qo);
                ldsm_x4(al, ql + qo);
#pragma unroll
                for (int j = 0; j < NT; j += 2) {
                    uint32_t b[4];
                    ldsm_x4(b, kt + (j * 8 + (lane & 7) + (lane >> 4) * 8) * P + kk + ((lane >> 3) & 1) * 8);
                    gm_mma(s[j], ah[0], ah[1], ah[2], ah[3], b[0], b[1]);
                    gm_mma(s[j], al[0], al[1], al[2], al[3], b[0], b[1]);
                    gm_mma(s[j + 1], ah[0], ah[1], ah[2], ah[3], b[2], b[3]);
                    gm_mma(s[j + 1], al[0], al[1], al[2], al[3], b[2], b[3]);
                }
            }
            if (a.softcap > 0.0f) { /* scores are in log2 units (q carries log2(e)): cap the natural ones */
                const float cl = a.softcap * 1.4426950408889634f, inv = 1.0f / cl;
#pragma unroll
                for (int j = 0; j < NT; j++)
#pragma unroll
                    for (int e = 0; e < 4; e++) s[j][e] = cl * tanhf(s[j][e] * inv);
            }
            if (p0 + BN - 1 > wpos) { /* the causal mask reaches into this tile */
#pragma unroll
                for (int j = 0; j < NT; j++) {
                    const uint32_t p = p0 + j * 8 + 2 * t4;
                    if (p > rpos0) s[j][0] = -INFINITY;
                    if (p + 1 > rpos0) s[j][1] = -INFINITY;
                    if (p > rpos1) s[j][2] = -INFINITY;
                    if (p + 1 > rpos1) s[j][3] = -INFINITY;
                }
            }
            if (a.window && p0 < rfirst1) { /* the window's start reaches into this tile */
#pragma unroll
                for (int j = 0; j < NT; j++) {
                    const uint32_t p = p0 + j * 8 + 2 * t4;
                    if (p < rfirst0) s[j][0] = -INFINITY;
                    if (p + 1 < rfirst0) s[j][1] = -INFINITY;
                    if (p < rfirst1) s[j][2] = -INFINITY;
                    if (p + 1 < rfirst1) s[j][3] = -INFINITY;
                }
            }
            /* online softmax: rows g (elements 0, 1) and g + 8 (2, 3), a row over a lane quad.
             * Without a window tile 0 holds position 0, which every row attends, so the maxima are
             * finite; with one a row may have no position in the tiles so far (its maximum stays
             * -inf, and its weights come out 0, not NaN). */
            float x0 = -INFINITY, x1 = -INFINITY;
#pragma unroll
            for (int j = 0; j < NT; j++) {
                x0 = fmaxf(x0, fmaxf(s[j][0], s[j][1]));
                x1 = fmaxf(x1, fmaxf(s[j][2], s[j][3]));
            }
#pragma unroll
            for (int k = 1; k <= 2; k <<= 1) {
                x0 = fmaxf(x0, __shfl_xor_sync(0xffffffffu, x0, k));
                x1 = fmaxf(x1, __shfl_xor_sync(0xffffffffu, x1, k));
            }
            const float n0 = fmaxf(m0, x0), n1 = fmaxf(m1, x1);
            /* the exponents' base: the running maximum, 0 while it is still -inf (the maximum
             * itself stays -inf until a position counts) */
            const float u0 = n0 == -INFINITY ? 0.0f : n0, u1 = n1 == -INFINITY ? 0.0f : n1;
            const float c0 = exp2f(m0 - u0), c1 = exp2f(m1 - u1);
            m0 = n0, m1 = n1;
            l0 *= c0, l1 *= c1;
#pragma unroll
            for (int j = 0; j < DT; j++) o[j][0] *= c0, o[j][1] *= c0, o[j][2] *= c1, o[j][3] *= c1;
#pragma unroll
            for (int j = 0; j < NT; j++) {
                s[j][0] = exp2f(s[j][0] - u0), s[j][1] = exp2f(s[j][1] - u0);
                s[j][2] = exp2f(s[j][2] - u1), s[j][3] = exp2f(s[j][3] - u1);
                l0 += s[j][0] + s[j][1], l1 += s[j][2] + s[j][3];
            }
            /* o += p V: the score tiles 2k and 2k + 1 are the A fragment of positions 16k.. */
#pragma unroll
            for (int k = 0; k < BN / 16; k++) {
                uint32_t ph[4], pl[4];
                split_bf16x2(s[2 * k][0], s[2 * k][1], ph[0], pl[0]);
                split_bf16x2(s[2 * k][2], s[2 * k][3], ph[1], pl[1]);
                split_bf16x2(s[2 * k + 1][0], s[2 * k + 1][1], ph[2], pl[2]);
                split_bf16x2(s[2 * k + 1][2], s[2 * k + 1][3], ph[3], pl[3]);
#pragma unroll
                for (int j = 0; j < DT; j += 2) {
                    uint32_t b[4];
                    ldsm_x4_t(b, vt + (k * 16 + (lane & 7) + ((lane >> 3) & 1) * 8) * P + j * 8 + (lane >> 4) * 8);
                    gm_mma(o[j], ph[0], ph[1], ph[2], ph[3], b[0], b[1]);
                    gm_mma(o[j], pl[0], pl[1], pl[2], pl[3], b[0], b[1]);
                    gm_mma(o[j + 1], ph[0], ph[1], ph[2], ph[3], b[2], b[3]);
                    gm_mma(o[j + 1], pl[0], pl[1], pl[2], pl[3], b[2], b[3]);
                }
            }
        }
        __syncthreads(); /* every warp done with this stage before it is refilled */
    }
#pragma unroll
    for (int k = 1; k <= 2; k <<= 1) {
        l0 += __shfl_xor_sync(0xffffffffu, l0, k);
        l1 += __shfl_xor_sync(0xffffffffu, l1, k);
    }
    const uint32_t row = r0 + warp * 16 + g;
    const float i0 = 1.0f / l0, i1 = 1.0f / l1;
    float *out = a.out + (size_t)h * HD + 2 * t4;
#pragma unroll
    for (int j = 0; j < DT; j++) {
        if (row < n) *(float2 *)(out + (size_t)row * a.ldo + j * 8) = make_float2(o[j][0] * i0, o[j][1] * i0);
        if (row + 8 < n)
            *(float2 *)(out + (size_t)(row + 8) * a.ldo + j * 8) = make_float2(o[j][2] * i1, o[j][3] * i1);
    }
}

int attn_prefill_fits(const attn_args *a, uint32_t n) {
    if (thin_cuda_attn_tc <= 0 || n < 2 || n < (uint32_t)thin_cuda_attn_tc || a->kv_dtype != THIN_DTYPE_BF16)
        return 0;
    if (!a->n_kv || a->n_heads % a->n_kv || a->ldq % 4 || a->ldo % 2) return 0;
    if ((uintptr_t)a->q % 16 || (uintptr_t)a->out % 8) return 0; /* float4 q loads, float2 stores */
    return a->head_dim == 32 || a->head_dim == 64 || a->head_dim == 128 || a->head_dim == 256;
}

template <int HD>
static cudaError_t launch_hd(const attn_args *a, uint32_t n, cudaStream_t st) {
    const size_t smem = ap_smem(HD);
    cudaError_t e = smem_attr(attn_prefill_kernel<HD>, smem, 0);
    if (e != cudaSuccess) return e;
    return launch_k(attn_prefill_kernel<HD>, dim3((n + AP_BM - 1) / AP_BM, a->n_heads), dim3(AP_THREADS),
                    smem, st, *a, n);
}

cudaError_t launch_attn_prefill(const attn_args *a, uint32_t n, cudaStream_t st) {
    switch (a->head_dim) {
    case 32: return launch_hd<32>(a, n, st);
    case 64: return launch_hd<64>(a, n, st);
    case 128: return launch_hd<128>(a, n, st);
    case 256: return launch_hd<256>(a, n, st);
    default: return cudaErrorInvalidValue;
    }
}
