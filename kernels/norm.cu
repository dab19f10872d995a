/*
 * norm.cu — the row-wise and elementwise ops: embedding gather, RMSNorm, per-head RMSNorm,
 * residual add, bias add, SiLU and GELU (tanh) gates. Each works on n rows (a prefill batch; n = 1
 * when decoding). CPU twins: op_embed (+ op_scale), op_rmsnorm, op_head_rmsnorm, op_add,
 * op_add_bias, op_silu_mul, op_gelu_tanh_mul in ops_cpu.c.
 */
#include "cuda_common.cuh"

__global__ void embed_kernel(float *out, uint32_t ldo, const dmat E, const int32_t *tokens, float scale) {
    pdl_trigger();
    pdl_wait();
    const uint32_t row = blockIdx.y;
    const uint64_t t = (uint64_t)tokens[row];
    const uint8_t *base = (const uint8_t *)E.data;
    size_t esz = E.dtype == THIN_DTYPE_F32 ? 4 : E.dtype == THIN_DTYPE_F8_E4M3 ? 1 : 2;
    const void *r = base + t * E.pitch * esz;
    float s = (E.dtype == THIN_DTYPE_F8_E4M3 && E.scale) ? E.scale[t] : 1.0f;
    for (uint32_t c = blockIdx.x * blockDim.x + threadIdx.x; c < E.cols; c += gridDim.x * blockDim.x) {
        const float v = load_elem(r, E.dtype, c) * s;
        out[(size_t)row * ldo + c] = scale == 1.0f ? v : v * scale; /* op_embed, then op_scale */
    }
}

cudaError_t launch_embed(float *out, uint32_t ldo, const dmat *E, const int32_t *tokens, float scale,
                         uint32_t n, cudaStream_t st) {
    dim3 grid((E->cols + 255) / 256 < 8 ? (E->cols + 255) / 256 : 8, n);
    return launch_k(embed_kernel, dim3(grid), dim3(256), 0, st, out, ldo, *E, tokens, scale);
}

/* out = x / sqrt(mean(x^2) + eps) * w for one row per block. out may equal x. */
__global__ void rmsnorm_kernel(float *out, uint32_t ldo, const float *x, uint32_t ldx,
                               const void *w, int wdt, uint32_t cols, float eps) {
    pdl_trigger();
    pdl_wait();
    __shared__ float red[32];
    const float *xr = x + (size_t)blockIdx.x * ldx;
    float *orow = out + (size_t)blockIdx.x * ldo;
    float ss = 0.0f;
    for (uint32_t i = threadIdx.x; i < cols; i += blockDim.x) ss += xr[i] * xr[i];
    ss = block_sum(ss, red);
    float inv = 1.0f / sqrtf(ss / (float)cols + eps);
    for (uint32_t i = threadIdx.x; i < cols; i += blockDim.x)
        orow[i] = load_elem(w, wdt, i) * (inv * xr[i]);
}

cudaError_t launch_rmsnorm(float *out, uint32_t ldo, const float *x, uint32_t ldx, const dmat *w,
                           uint32_t cols, float eps, uint32_t n, cudaStream_t st) {
    return launch_k(rmsnorm_kernel, dim3(n), dim3(256), 0, st, out, ldo, x, ldx, w->data, w->dtype, cols, eps);
}

/* One warp per (row, head): per-head RMSNorm in place. */
__global__ void head_rmsnorm_kernel(float *x, uint32_t ldx, const void *w, int wdt,
                                    uint32_t n_heads, uint32_t hd, float eps) {
    pdl_trigger();
    pdl_wait();
    const uint32_t h = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
    const int lane = threadIdx.x & 31;
    if (h >= n_heads) return;
    float *xh = x + (size_t)blockIdx.y * ldx + (size_t)h * hd;
    float ss = 0.0f;
    for (uint32_t i = lane; i < hd; i += 32) ss += xh[i] * xh[i];
    ss = warp_sum(ss);
    float inv = 1.0f / sqrtf(ss / (float)hd + eps);
    for (uint32_t i = lane; i < hd; i += 32) xh[i] = load_elem(w, wdt, i) * (inv * xh[i]);
}

cudaError_t launch_head_rmsnorm(float *x, uint32_t ldx, const dmat *w, uint32_t n_heads,
                                uint32_t head_dim, float eps, uint32_t n, cudaStream_t st) {
    dim3 grid((n_heads + 3) / 4, n);
    return launch_k(head_rmsnorm_kernel, dim3(grid), dim3(128), 0, st, x, ldx, w->data, w->dtype, n_heads, head_dim, eps);
}

/* The grid of the elementwise kernels below: blocks of 256 threads along the columns, at most 64
 * (each thread strides over the rest), and one row of the batch per grid row. */
static dim3 rows_grid(uint32_t cols, uint32_t n) {
    const uint32_t bx = (cols + 255) / 256;
    return dim3(bx < 64 ? bx : 64, n);
}

/* out += f * in (op_add, op_add_scaled: Granite's residual_multiplier). */
__global__ void add_kernel(float *out, uint32_t ldo, const float *in, uint32_t ldi, uint32_t cols, float f) {
    pdl_trigger();
    pdl_wait();
    const uint32_t row = blockIdx.y;
    for (uint32_t i = blockIdx.x * blockDim.x + threadIdx.x; i < cols; i += gridDim.x * blockDim.x)
        out[(size_t)row * ldo + i] += f * in[(size_t)row * ldi + i];
}

cudaError_t launch_add(float *out, uint32_t ldo, const float *in, uint32_t ldi, uint32_t cols, float f,
                       uint32_t n, cudaStream_t st) {
    const dim3 grid = rows_grid(cols, n);
    return launch_k(add_kernel, dim3(grid), dim3(256), 0, st, out, ldo, in, ldi, cols, f);
}

__global__ void bias_kernel(float *out, uint32_t ldo, const void *b, int bdt, uint32_t cols) {
    pdl_trigger();
    pdl_wait();
    const uint32_t row = blockIdx.y;
    for (uint32_t i = blockIdx.x * blockDim.x + threadIdx.x; i < cols; i += gridDim.x * blockDim.x)
        out[(size_t)row * ldo + i] += load_elem(b, bdt, i);
}

cudaError_t launch_bias(float *out, uint32_t ldo, const dmat *b, uint32_t cols, uint32_t n, cudaStream_t st) {
    const dim3 grid = rows_grid(cols, n);
    return launch_k(bias_kernel, dim3(grid), dim3(256), 0, st, out, ldo, b->data, b->dtype, cols);
}

__global__ void silu_mul_kernel(float *g, uint32_t ldg, const float *u, uint32_t ldu,
                                uint32_t cols) {
    pdl_trigger();
    pdl_wait();
    const uint32_t row = blockIdx.y;
    for (uint32_t i = blockIdx.x * blockDim.x + threadIdx.x; i < cols;
         i += gridDim.x * blockDim.x) {
        float *gp = g + (size_t)row * ldg + i;
        *gp = silu_f(*gp) * u[(size_t)row * ldu + i];
    }
}

cudaError_t launch_silu_mul(float *g, uint32_t ldg, const float *u, uint32_t ldu, uint32_t cols,
                            uint32_t n, cudaStream_t st) {
    const dim3 grid = rows_grid(cols, n);
    return launch_k(silu_mul_kernel, dim3(grid), dim3(256), 0, st, g, ldg, u, ldu, cols);
}

/* g = gelu_tanh(g) * u (op_gelu_tanh_mul: in double, rounded once). */
__global__ void gelu_tanh_mul_kernel(float *g, uint32_t ldg, const float *u, uint32_t ldu,
                                     uint32_t cols) {
    pdl_trigger();
    pdl_wait();
    const uint32_t row = blockIdx.y;
    const double k = 0.7978845608028654; /* sqrt(2 / pi) */
    for (uint32_t i = blockIdx.x * blockDim.x + threadIdx.x; i < cols;
         i += gridDim.x * blockDim.x) {
        float *gp = g + (size_t)row * ldg + i;
        const double x = *gp;
        *gp = (float)(0.5 * x * (1.0 + tanh(k * (x + 0.044715 * x * x * x))) * u[(size_t)row * ldu + i]);
    }
}

cudaError_t launch_gelu_tanh_mul(float *g, uint32_t ldg, const float *u, uint32_t ldu, uint32_t cols,
                                 uint32_t n, cudaStream_t st) {
    const dim3 grid = rows_grid(cols, n);
    return launch_k(gelu_tanh_mul_kernel, dim3(grid), dim3(256), 0, st, g, ldg, u, ldu, cols);
}

/* x = cap * tanh(x / cap) (op_softcap). */
__global__ void softcap_kernel(float *x, uint32_t ldx, uint32_t cols, float cap) {
    pdl_trigger();
    pdl_wait();
    const uint32_t row = blockIdx.y;
    for (uint32_t i = blockIdx.x * blockDim.x + threadIdx.x; i < cols; i += gridDim.x * blockDim.x) {
        float *xp = x + (size_t)row * ldx + i;
        *xp = cap * tanhf(*xp / cap);
    }
}

cudaError_t launch_softcap(float *x, uint32_t ldx, uint32_t cols, float cap, uint32_t n, cudaStream_t st) {
    const dim3 grid = rows_grid(cols, n);
    return launch_k(softcap_kernel, dim3(grid), dim3(256), 0, st, x, ldx, cols, cap);
}

/* x *= f (op_scale: Granite's logits divided by logits_scaling). */
__global__ void scale_kernel(float *x, uint32_t ldx, uint32_t cols, float f) {
    pdl_trigger();
    pdl_wait();
    const uint32_t row = blockIdx.y;
    for (uint32_t i = blockIdx.x * blockDim.x + threadIdx.x; i < cols; i += gridDim.x * blockDim.x)
        x[(size_t)row * ldx + i] *= f;
}

cudaError_t launch_scale(float *x, uint32_t ldx, uint32_t cols, float f, uint32_t n, cudaStream_t st) {
    const dim3 grid = rows_grid(cols, n);
    return launch_k(scale_kernel, dim3(grid), dim3(256), 0, st, x, ldx, cols, f);
}
