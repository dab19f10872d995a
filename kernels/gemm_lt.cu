/*
 * gemm_lt.cu — the prefill's batched linear through cuBLASLt: out[i][r] = sum_c W[r][c] x[i][c]
 * (and resid[i][r] += that), i < n, on the tensor cores, BF16 × BF16 with F32 accumulation and
 * output, the same arithmetic as gemm.cu's own kernel:
 *  - the activations are rounded to BF16 into a scratch (n rows of K = W's columns);
 *  - BF16 weights are used as stored: rows of `pitch` elements, or, for the MLP kernel's down
 *    projection (dmat.trans), its transpose as stored, so no copy transposes it back;
 *  - FP8 E4M3 weights are widened to BF16 into a scratch (exactly: every E4M3 value is a BF16
 *    value), in blocks of rows when the matrix is larger than the scratch, and their per-row
 *    scales are applied afterwards, with the residual add, by one elementwise pass.
 * cuBLASLt is column-major: W as stored (rows of pitch elements) is the K × rows matrix with
 * leading dimension pitch, taken transposed; the transposed store is the rows × K matrix, taken
 * as is; x (BF16, n rows of K) is K × n, and out (n rows of ldo floats) is rows × n.
 * Algorithms come from cuBLASLt's heuristic with a 32 MiB workspace, once per shape, layout and
 * batch size n (a small cache). With env THIN_CUDA_LT_CLASS=1 (opt-in until timed on the GPU
 * machine) once per batch-size class instead (n rounded up to a power of two, at least 16): the
 * answer for the class's top size is checked for each n (cublasLtMatmulAlgoCheck) and taken where
 * it fits, so a prompt of a new length does not ask the heuristic again (a new length cost about
 * 10 ms more than a repeated one for SmolLM3-3B's linears on the H200); where it does not fit, the
 * heuristic answers for that n itself. One cache holds both: the class's answer is the entry for
 * the class's top size. Shapes it cannot take (no algorithm; a transposed FP8 matrix larger than the
 * scratch) return cudaErrorNotSupported, and the caller runs gemm.cu's kernel instead.
 * Measured on the H200 with SmolLM3-3B BF16 (bench/thin-bench-prefill, prefills after the first
 * in a session): 512 tokens in 21.1 ms against 52.3 through gemm.cu's kernel, 2048 in 126 against
 * 251, 16 in 7.4 against 9.9. Its first product in a process costs about 0.1 s more, which
 * gemm_lt_start pays on a helper thread while the weights go to the device (cuda_backend.cu).
 * CPU twin: op_matvec row by row (ops_cpu.c).
 */
#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_fp8.h>
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_common.cuh"

/* cuBLASLt is loaded when a session first asks for it (dlopen of the toolkit's shared library,
 * found through LD_LIBRARY_PATH or the run path the build sets), so that thin-run needs no more
 * than the driver: without the library the own GEMM runs. */
#define LT_STR2(x) #x
#define LT_STR(x) LT_STR2(x)
#define LT_LIBRARY "libcublasLt.so." LT_STR(CUBLAS_VER_MAJOR)
#define LT_FUNCS(X)                                                                                \
    X(Create) X(Destroy) X(GetStatusString) X(MatmulDescCreate) X(MatmulDescDestroy)              \
    X(MatmulDescSetAttribute) X(MatrixLayoutCreate) X(MatrixLayoutDestroy)                         \
    X(MatmulPreferenceCreate) X(MatmulPreferenceDestroy) X(MatmulPreferenceSetAttribute)           \
    X(MatmulAlgoGetHeuristic) X(MatmulAlgoCheck) X(Matmul)
struct lt_api {
#define LT_FIELD(f) decltype(&cublasLt##f) f;
    LT_FUNCS(LT_FIELD)
#undef LT_FIELD
};

/* The loaded functions, or NULL (then *why says what failed); loaded once per process. */
static const lt_api *lt_api_get(const char **why) {
    static const char *fail = NULL;
    static char msg[256]; /* dlerror's text, which the next dl call may overwrite */
    static const lt_api *api = []() -> const lt_api * {
        static lt_api a;
        void *h = dlopen(LT_LIBRARY, RTLD_NOW | RTLD_LOCAL);
        if (!h) {
            const char *d = dlerror();
            snprintf(msg, sizeof msg, "%s", d ? d : "cannot load " LT_LIBRARY);
            fail = msg;
            return nullptr;
        }
#define LT_LOAD(f)                                                                                 \
    if (!(a.f = (decltype(a.f))dlsym(h, "cublasLt" #f))) {                                         \
        fail = "a cuBLASLt function is missing from " LT_LIBRARY;                                  \
        return nullptr;                                                                            \
    }
        LT_FUNCS(LT_LOAD)
#undef LT_LOAD
        return &a;
    }();
    if (!api && why) *why = fail ? fail : "cannot load " LT_LIBRARY;
    return api;
}

int thin_cuda_gemm_lt = THIN_CUDA_GEMM_AUTO;
long thin_cuda_gemm_widen = 64l << 20;

#define LT_WS_BYTES ((size_t)32 << 20)
#define LT_CACHE 32

struct lt_algo {
    int m, n, k, trans, valid;
    uint32_t lda, ldb, ldd;
    uint32_t align; /* the pointers' alignments, 4 bits each (log2) */
    cublasLtMatmulAlgo_t algo;
};

/* log2 of the largest power of two up to 256 that divides p */
static uint32_t lt_align_log2(const void *p) {
    const uintptr_t a = (uintptr_t)p;
    uint32_t l = 0;
    while (l < 8 && !(a & ((uintptr_t)1 << l))) l++;
    return l;
}

struct gemm_lt {
    const lt_api *api;
    cublasLtHandle_t h;
    void *ws;                       /* workspace, LT_WS_BYTES */
    __nv_bfloat16 *xb;              /* activations: x_elems */
    __nv_bfloat16 *wb;              /* widened FP8 weights: w_elems (NULL without FP8 weights) */
    size_t x_elems, w_elems;
    lt_algo cache[LT_CACHE];
    int next;
    int classes;                    /* THIN_CUDA_LT_CLASS=1: answers per batch-size class */
    cublasStatus_t last;            /* the last cuBLASLt failure */
};

__global__ void lt_round_kernel(__nv_bfloat16 *dst, uint32_t ldd, const float *src, uint32_t lds,
                                uint32_t cols) {
    const float *s = src + (size_t)blockIdx.y * lds;
    __nv_bfloat16 *d = dst + (size_t)blockIdx.y * ldd;
    for (uint32_t c = blockIdx.x * blockDim.x + threadIdx.x; c < cols; c += gridDim.x * blockDim.x)
        d[c] = __float2bfloat16_rn(s[c]);
}

/* 16 FP8 bytes → 16 BF16 values a thread; count a multiple of 16 (rows are 16-byte padded). */
__global__ void lt_widen_kernel(__nv_bfloat16 *dst, const uint8_t *src, size_t count) {
    const size_t nv = count / 16;
    for (size_t v = (size_t)blockIdx.x * blockDim.x + threadIdx.x; v < nv; v += (size_t)gridDim.x * blockDim.x) {
        const uint4 w = ((const uint4 *)src)[v];
        uint4 *d = (uint4 *)(dst + 16 * v);
        d[0] = make_uint4(fp8x2_bf16x2(w.x), fp8x2_bf16x2(w.x >> 16), fp8x2_bf16x2(w.y), fp8x2_bf16x2(w.y >> 16));
        d[1] = make_uint4(fp8x2_bf16x2(w.z), fp8x2_bf16x2(w.z >> 16), fp8x2_bf16x2(w.w), fp8x2_bf16x2(w.w >> 16));
    }
}

/* out[i][r] *= scale[r] (FP8), then resid[i][r] += out[i][r] */
__global__ void lt_epilogue_kernel(float *out, uint32_t ldo, float *resid, uint32_t ldr,
                                   const float *scale, uint32_t rows) {
    float *o = out + (size_t)blockIdx.y * ldo;
    for (uint32_t r = blockIdx.x * blockDim.x + threadIdx.x; r < rows; r += gridDim.x * blockDim.x) {
        float v = o[r];
        if (scale) o[r] = v = v * scale[r];
        if (resid) resid[(size_t)blockIdx.y * ldr + r] += v;
    }
}

static cudaError_t lt_err(gemm_lt *g, cublasStatus_t st) {
    if (st == CUBLAS_STATUS_SUCCESS) return cudaSuccess;
    g->last = st;
    return st == CUBLAS_STATUS_NOT_SUPPORTED ? cudaErrorNotSupported : cudaErrorUnknown;
}

const char *gemm_lt_status(const gemm_lt *g) {
    return g && g->api ? g->api->GetStatusString(g->last) : "no cuBLASLt handle";
}

void gemm_lt_destroy(gemm_lt *g) {
    if (!g) return;
    if (g->h) g->api->Destroy(g->h);
    cudaFree(g->ws);
    cudaFree(g->xb);
    cudaFree(g->wb);
    free(g);
}

static cudaError_t lt_matmul(gemm_lt *g, const void *A, uint32_t lda, int trans, const void *B,
                             uint32_t ldb, float *D, uint32_t ldd, uint32_t m, uint32_t n, uint32_t k,
                             cudaStream_t st);

cudaError_t gemm_lt_start(gemm_lt **out, const char **why) {
    *out = NULL;
    const lt_api *api = lt_api_get(why);
    if (!api) return cudaErrorNotSupported;
    gemm_lt *g = (gemm_lt *)calloc(1, sizeof *g);
    if (!g) {
        *why = "out of memory";
        return cudaErrorMemoryAllocation;
    }
    g->api = api;
    const char *cls = getenv("THIN_CUDA_LT_CLASS");
    g->classes = cls && strcmp(cls, "1") == 0;
    cudaError_t e = lt_err(g, api->Create(&g->h));
    if (e != cudaSuccess) {
        *why = api->GetStatusString(g->last);
        g->h = NULL;
        gemm_lt_destroy(g);
        return e;
    }
    e = cudaMalloc(&g->ws, LT_WS_BYTES);
    /* one small product (64 × 64 × 64, zeros) on a stream of its own: cuBLASLt's first product in a
     * process costs about 0.1 s whatever its shape (on the H200 with SmolLM3-3B, a 16- and a
     * 512-token prefill's first runs took 104 and 125 ms against 7 and 21 after; loading all its
     * kernels at the start, CUDA_MODULE_LOADING=EAGER, did not remove it) */
    void *buf = NULL;
    cudaStream_t st = NULL;
    const uint32_t d = 64;
    const size_t ab = (size_t)d * d * sizeof(__nv_bfloat16), bytes = 2 * ab + (size_t)d * d * sizeof(float);
    if (e == cudaSuccess) e = cudaMalloc(&buf, bytes);
    if (e == cudaSuccess) e = cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking);
    if (e == cudaSuccess) e = cudaMemsetAsync(buf, 0, bytes, st);
    if (e == cudaSuccess) e = lt_matmul(g, buf, d, 0, (const uint8_t *)buf + ab, d, (float *)((uint8_t *)buf + 2 * ab), d, d, d, d, st);
    if (e == cudaSuccess) e = cudaStreamSynchronize(st);
    if (st) cudaStreamDestroy(st);
    if (buf) cudaFree(buf);
    if (e != cudaSuccess) {
        *why = e == cudaErrorUnknown ? api->GetStatusString(g->last) : cudaGetErrorString(e);
        gemm_lt_destroy(g);
        return e;
    }
    *out = g;
    return cudaSuccess;
}

cudaError_t gemm_lt_scratch(gemm_lt *g, size_t x_elems, size_t w_elems, const char **why) {
    cudaError_t e = cudaMalloc((void **)&g->xb, (x_elems ? x_elems : 8) * sizeof(__nv_bfloat16));
    if (e == cudaSuccess && w_elems) e = cudaMalloc((void **)&g->wb, w_elems * sizeof(__nv_bfloat16));
    if (e != cudaSuccess) {
        *why = cudaGetErrorString(e);
        return e;
    }
    g->x_elems = x_elems;
    g->w_elems = w_elems;
    return cudaSuccess;
}

/* The cached answer for this shape and layout (n: a batch size, or a class), or NULL. */
static const lt_algo *lt_find(const lt_algo *cache, uint32_t m, uint32_t n, uint32_t k, int trans, uint32_t akey,
                              uint32_t lda, uint32_t ldb, uint32_t ldd) {
    for (int i = 0; i < LT_CACHE; i++) {
        const lt_algo &c = cache[i];
        if (c.valid && c.m == (int)m && c.n == (int)n && c.k == (int)k && c.trans == trans && c.align == akey &&
            c.lda == lda && c.ldb == ldb && c.ldd == ldd)
            return &c;
    }
    return NULL;
}

static const lt_algo *lt_store(lt_algo *cache, int *next, uint32_t m, uint32_t n, uint32_t k, int trans,
                               uint32_t akey, uint32_t lda, uint32_t ldb, uint32_t ldd,
                               const cublasLtMatmulAlgo_t *algo) {
    lt_algo &c = cache[*next];
    *next = (*next + 1) % LT_CACHE;
    c.m = (int)m, c.n = (int)n, c.k = (int)k, c.trans = trans, c.valid = 1, c.align = akey;
    c.lda = lda, c.ldb = ldb, c.ldd = ldd;
    c.algo = *algo;
    return &c;
}

/* cuBLASLt's first answer for the product, within the workspace and the pointers' alignments
 * (log2, A, B and C/D); cudaErrorNotSupported when it has none. */
static cudaError_t lt_heuristic(gemm_lt *g, cublasLtMatmulDesc_t op, cublasLtMatrixLayout_t la,
                                cublasLtMatrixLayout_t lb, cublasLtMatrixLayout_t ld, const uint32_t al[3],
                                cublasLtMatmulAlgo_t *algo) {
    cublasLtMatmulPreference_t pref = NULL;
    cublasLtMatmulHeuristicResult_t res;
    size_t ws = LT_WS_BYTES;
    int found = 0;
    cudaError_t e = lt_err(g, g->api->MatmulPreferenceCreate(&pref));
    if (e == cudaSuccess)
        e = lt_err(g, g->api->MatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws,
                                                          sizeof ws));
    const cublasLtMatmulPreferenceAttributes_t at[4] = {
        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES};
    for (int i = 0; e == cudaSuccess && i < 4; i++) {
        const uint32_t bytes = 1u << al[i < 2 ? i : 2];
        e = lt_err(g, g->api->MatmulPreferenceSetAttribute(pref, at[i], &bytes, sizeof bytes));
    }
    if (e == cudaSuccess) e = lt_err(g, g->api->MatmulAlgoGetHeuristic(g->h, op, la, lb, ld, ld, pref, 1, &res, &found));
    if (e == cudaSuccess && found < 1) e = cudaErrorNotSupported;
    if (e == cudaSuccess) *algo = res.algo;
    if (pref) g->api->MatmulPreferenceDestroy(pref);
    return e;
}

/* D (m × n, ld ldd, F32) = op(A) (m × k) · B (k × n, ld ldb, BF16); A BF16 as stored: trans = 0,
 * K × m with ld lda (taken transposed); trans = 1, m × K with ld lda. */
static cudaError_t lt_matmul(gemm_lt *g, const void *A, uint32_t lda, int trans, const void *B,
                             uint32_t ldb, float *D, uint32_t ldd, uint32_t m, uint32_t n, uint32_t k,
                             cudaStream_t st) {
    cublasLtMatmulDesc_t op = NULL;
    cublasLtMatrixLayout_t la = NULL, lb = NULL, ld = NULL;
    const cublasOperation_t ta = trans ? CUBLAS_OP_N : CUBLAS_OP_T, tb = CUBLAS_OP_N;
    const float alpha = 1.0f, beta = 0.0f;
    cudaError_t e = lt_err(g, g->api->MatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    if (e == cudaSuccess)
        e = lt_err(g, g->api->MatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta));
    if (e == cudaSuccess)
        e = lt_err(g, g->api->MatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb));
    if (e == cudaSuccess)
        e = lt_err(g, g->api->MatrixLayoutCreate(&la, CUDA_R_16BF, trans ? m : k, trans ? k : m, lda));
    if (e == cudaSuccess) e = lt_err(g, g->api->MatrixLayoutCreate(&lb, CUDA_R_16BF, k, n, ldb));
    if (e == cudaSuccess) e = lt_err(g, g->api->MatrixLayoutCreate(&ld, CUDA_R_32F, m, n, ldd));
    /* the heuristic assumes 256-byte aligned pointers unless told otherwise; weights are only
     * 16-byte aligned */
    const uint32_t al[3] = {lt_align_log2(A), lt_align_log2(B), lt_align_log2(D)};
    const uint32_t akey = al[0] | al[1] << 4 | al[2] << 8;
    const lt_algo *hit = lt_find(g->cache, m, n, k, trans, akey, lda, ldb, ldd);
    if (e == cudaSuccess && !hit) {
        uint32_t nc = n; /* n's batch-size class (its top size) */
        if (g->classes)
            for (nc = 16; nc < n && nc < (1u << 30);) nc *= 2;
        const lt_algo *c = NULL;
        if (nc != n) {
            c = lt_find(g->cache, m, nc, k, trans, akey, lda, ldb, ldd);
            if (!c) { /* the heuristic for the class's top size */
                cublasLtMatrixLayout_t lbc = NULL, ldc = NULL;
                cublasLtMatmulAlgo_t algo;
                e = lt_err(g, g->api->MatrixLayoutCreate(&lbc, CUDA_R_16BF, k, nc, ldb));
                if (e == cudaSuccess) e = lt_err(g, g->api->MatrixLayoutCreate(&ldc, CUDA_R_32F, m, nc, ldd));
                if (e == cudaSuccess) e = lt_heuristic(g, op, la, lbc, ldc, al, &algo);
                if (e == cudaSuccess) c = lt_store(g->cache, &g->next, m, nc, k, trans, akey, lda, ldb, ldd, &algo);
                if (ldc) g->api->MatrixLayoutDestroy(ldc);
                if (lbc) g->api->MatrixLayoutDestroy(lbc);
                if (e == cudaErrorNotSupported) e = cudaSuccess; /* none for the class: ask for n */
            }
            cublasLtMatmulHeuristicResult_t chk;
            if (e == cudaSuccess && c &&
                (g->api->MatmulAlgoCheck(g->h, op, la, lb, ld, ld, &c->algo, &chk) != CUBLAS_STATUS_SUCCESS ||
                 chk.workspaceSize > LT_WS_BYTES))
                c = NULL; /* the class's answer does not fit this n */
        }
        cublasLtMatmulAlgo_t algo;
        if (e == cudaSuccess && c) algo = c->algo; /* copied: storing n's entry may reuse c's slot */
        else if (e == cudaSuccess) e = lt_heuristic(g, op, la, lb, ld, al, &algo);
        if (e == cudaSuccess) hit = lt_store(g->cache, &g->next, m, n, k, trans, akey, lda, ldb, ldd, &algo);
    }
    if (e == cudaSuccess)
        e = lt_err(g, g->api->Matmul(g->h, op, &alpha, A, la, B, lb, &beta, D, ld, D, ld, &hit->algo, g->ws,
                                     LT_WS_BYTES, st));
    if (ld) g->api->MatrixLayoutDestroy(ld);
    if (lb) g->api->MatrixLayoutDestroy(lb);
    if (la) g->api->MatrixLayoutDestroy(la);
    if (op) g->api->MatmulDescDestroy(op);
    return e;
}

/* count FP8 bytes at src (a multiple of 16) widened into the scratch */
static cudaError_t lt_widen(gemm_lt *g, const uint8_t *src, size_t count, cudaStream_t st) {
    const size_t blocks = (count / 16 + 255) / 256;
    lt_widen_kernel<<<(unsigned)(blocks < 4096 ? blocks : 4096), 256, 0, st>>>(g->wb, src, count);
    return cudaGetLastError();
}

cudaError_t launch_gemm_lt(gemm_lt *g, const dmat *w, const float *x, uint32_t ldx, float *out, uint32_t ldo,
                           float *resid, uint32_t ldr, uint32_t n, cudaStream_t st) {
    if (!g || (w->dtype != THIN_DTYPE_BF16 && w->dtype != THIN_DTYPE_F8_E4M3)) return cudaErrorNotSupported;
    if (n == 0 || w->rows == 0) return cudaSuccess;
    const uint32_t k = (uint32_t)w->cols, ldb = (k + 7) / 8 * 8; /* 16-byte rows of x */
    const int fp8 = w->dtype == THIN_DTYPE_F8_E4M3;
    if ((size_t)n * ldb > g->x_elems || (w->pitch * (fp8 ? 1u : 2u)) % 16 || ldo % 4) return cudaErrorNotSupported;
    if (fp8 && (!g->wb || (w->trans && (size_t)k * w->pitch > g->w_elems) ||
                (!w->trans && (size_t)128 * w->pitch > g->w_elems)))
        return cudaErrorNotSupported;
    lt_round_kernel<<<dim3((k + 1023) / 1024, n), 256, 0, st>>>(g->xb, ldb, x, ldx, k);
    cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess) return e;
    if (!fp8) {
        e = lt_matmul(g, w->data, w->pitch, (int)w->trans, g->xb, ldb, out, ldo, w->rows, n, k, st);
    } else if (w->trans) { /* the transposed store, k rows of pitch, widened whole */
        e = lt_widen(g, (const uint8_t *)w->data, (size_t)k * w->pitch, st);
        if (e == cudaSuccess) e = lt_matmul(g, g->wb, w->pitch, 1, g->xb, ldb, out, ldo, w->rows, n, k, st);
    } else { /* blocks of whole rows (a multiple of 128) that fit the scratch */
        const uint32_t blk = (uint32_t)(g->w_elems / w->pitch) / 128 * 128;
        for (uint32_t r0 = 0; e == cudaSuccess && r0 < w->rows; r0 += blk) {
            const uint32_t nr = w->rows - r0 < blk ? w->rows - r0 : blk;
            e = lt_widen(g, (const uint8_t *)w->data + (size_t)r0 * w->pitch, (size_t)nr * w->pitch, st);
            if (e == cudaSuccess) e = lt_matmul(g, g->wb, w->pitch, 0, g->xb, ldb, out + r0, ldo, nr, n, k, st);
        }
    }
    if (e != cudaSuccess) return e;
    const float *scale = fp8 ? w->scale : NULL;
    if (!scale && !resid) return cudaSuccess;
    lt_epilogue_kernel<<<dim3((w->rows + 255) / 256 < 64 ? (w->rows + 255) / 256 : 64, n), 256, 0, st>>>(
        out, ldo, resid, ldr, scale, w->rows);
    return cudaGetLastError();
}
