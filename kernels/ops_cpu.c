/*
 * ops_cpu.c — CPU reference implementations of the forward-pass ops (ops.h).
 *
 * Short flat loops with F32 accumulation. Weights are read where they lie (F32, F16, BF16, or
 * F8_E4M3 with one F32 scale per row) and converted on the fly. op_matvec and op_matmat, where
 * the time goes, have an AVX2/FMA path (the build targets x86-64-v3), an AVX-512 path chosen at
 * run time that gives the same bits, and a portable scalar path.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ops.h"

#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
#include <immintrin.h>
#define OPS_AVX2 1
#endif

/* ---- element conversions ----
 * libthin's converters (thin.h), but for widening BF16 and F16, inline here for the scalar loops
 * (they leave a NaN's payload as it is, which no weight has). */

static inline float bf16_to_f32(uint16_t h) { return thin_f32_from_bits((uint32_t)h << 16); }

static inline float f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1Fu, man = h & 0x3FFu;
    if (exp == 0x1F) return thin_f32_from_bits(sign | 0x7F800000u | (man << 13));
    if (exp != 0) return thin_f32_from_bits(sign | ((exp + 112u) << 23) | (man << 13));
    float v = (float)man * 0x1p-24f; /* subnormal or zero */
    return sign ? -v : v;
}

/* E4M3FN decoded once: 256 values, index = byte. */
static float e4m3_lut[256];
static int e4m3_lut_ready;

static const float *e4m3_table(void) {
    /* Idempotent and racy only in the benign sense: every writer stores the same values. */
    if (!__atomic_load_n(&e4m3_lut_ready, __ATOMIC_ACQUIRE)) {
        for (int i = 0; i < 256; i++) e4m3_lut[i] = thin_e4m3_to_f32((uint8_t)i);
        __atomic_store_n(&e4m3_lut_ready, 1, __ATOMIC_RELEASE);
    }
    return e4m3_lut;
}

float thin_wmat_get(const thin_wmat *w, uint64_t r, uint64_t c) {
    uint64_t i = r * w->cols + c;
    switch (w->dtype) {
    case THIN_DTYPE_F32: return ((const float *)w->data)[i];
    case THIN_DTYPE_F16: return f16_to_f32(((const uint16_t *)w->data)[i]);
    case THIN_DTYPE_BF16: return bf16_to_f32(((const uint16_t *)w->data)[i]);
    case THIN_DTYPE_F8_E4M3: {
        float s = w->scale ? w->scale[r] : 1.0f;
        return e4m3_table()[((const uint8_t *)w->data)[i]] * s;
    }
    default: return NAN;
    }
}

/* ---- embedding, norms ---- */

void op_embed(float *out, const thin_wmat *E, uint64_t token) {
    for (uint64_t c = 0; c < E->cols; c++) out[c] = thin_wmat_get(E, token, c);
}

static float inv_rms(const float *x, uint64_t n, float eps) {
    float ss = 0.0f;
    for (uint64_t i = 0; i < n; i++) ss += x[i] * x[i];
    return 1.0f / sqrtf(ss / (float)n + eps);
}

void op_rmsnorm(float *out, const float *x, const thin_wmat *w, uint64_t n, float eps, float offset) {
    float s = inv_rms(x, n, eps);
    if (offset == 0.0f)
        for (uint64_t i = 0; i < n; i++) out[i] = thin_wmat_get(w, 0, i) * (s * x[i]);
    else
        for (uint64_t i = 0; i < n; i++) out[i] = (offset + thin_wmat_get(w, 0, i)) * (s * x[i]);
}

void op_add_rmsnorm(float *x, const float *h, float *out, const thin_wmat *w, uint64_t n,
                    float eps, float offset) {
    op_add(x, h, n);
    op_rmsnorm(out, x, w, n, eps, offset);
}

void op_head_rmsnorm(float *x, const thin_wmat *w, uint64_t n_heads, uint64_t head_dim,
                     float eps, float offset) {
    for (uint64_t h = 0; h < n_heads; h++) {
        float *xh = x + h * head_dim;
        op_rmsnorm(xh, xh, w, head_dim, eps, offset);
    }
}

/* ---- matrix-vector product ---- */

#ifdef OPS_AVX2
static inline float hsum8(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

/* Loads 8 weights of row w (dtype dt) at column c as floats. E4M3 is widened exactly to F16
 * (its exponent bias 7 vs 15 makes the F16 value 2^-8 times the E4M3 value; the caller scales
 * by 2^8); E4M3 NaN codes, which quantizers never write, read as 480. */
static inline __m256 load8(const void *w, thin_dtype dt, uint64_t c) {
    switch (dt) {
    case THIN_DTYPE_F32: return _mm256_loadu_ps((const float *)w + c);
    case THIN_DTYPE_BF16: {
        __m128i h = _mm_loadu_si128((const __m128i *)((const uint16_t *)w + c));
        return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
    }
    case THIN_DTYPE_F16:
        return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)((const uint16_t *)w + c)));
    default: { /* F8_E4M3: each byte to the top of a 16-bit lane (s eeee mmm, then zeros), one
                  arithmetic shift (sign into bits 15 and 14), bit 14 cleared: s 0eeee mmm0000000 */
        __m128i b = _mm_loadl_epi64((const __m128i *)((const uint8_t *)w + c));
        __m128i y = _mm_srai_epi16(_mm_unpacklo_epi8(_mm_setzero_si128(), b), 1);
        return _mm256_cvtph_ps(_mm_and_si128(y, _mm_set1_epi16((short)0xBFFF)));
    }
    }
}

/* Element c of a row as a float, unscaled (E4M3 at its own value, not load8's 2^-8): the tails. */
static inline float elem_at(const void *row, thin_dtype dt, uint64_t c) {
    switch (dt) {
    case THIN_DTYPE_F32: return ((const float *)row)[c];
    case THIN_DTYPE_BF16: return bf16_to_f32(((const uint16_t *)row)[c]);
    case THIN_DTYPE_F16: return f16_to_f32(((const uint16_t *)row)[c]);
    default: return e4m3_table()[((const uint8_t *)row)[c]];
    }
}

/* Always inlined so that each call below, with a constant dtype, gets its own loop. */
static inline __attribute__((always_inline)) float dot_row_t(const void *row, thin_dtype dt,
                                                              const float *x, uint64_t n) {
    __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
    uint64_t c = 0;
    for (; c + 16 <= n; c += 16) {
        a0 = _mm256_fmadd_ps(load8(row, dt, c), _mm256_loadu_ps(x + c), a0);
        a1 = _mm256_fmadd_ps(load8(row, dt, c + 8), _mm256_loadu_ps(x + c + 8), a1);
    }
    for (; c + 8 <= n; c += 8) a0 = _mm256_fmadd_ps(load8(row, dt, c), _mm256_loadu_ps(x + c), a0);
    float s = hsum8(_mm256_add_ps(a0, a1));
    float k = dt == THIN_DTYPE_F8_E4M3 ? 0x1p-8f : 1.0f; /* undo the 2^8 of the tail below */
    for (; c < n; c++) {
        const float wv = elem_at(row, dt, c);
        s += wv * k * x[c];
    }
    return s;
}

static float dot_row(const void *row, thin_dtype dt, const float *x, uint64_t n) {
    switch (dt) {
    case THIN_DTYPE_F32: return dot_row_t(row, THIN_DTYPE_F32, x, n);
    case THIN_DTYPE_BF16: return dot_row_t(row, THIN_DTYPE_BF16, x, n);
    case THIN_DTYPE_F16: return dot_row_t(row, THIN_DTYPE_F16, x, n);
    default: return dot_row_t(row, THIN_DTYPE_F8_E4M3, x, n);
    }
}

/* dot_row_t of one row against four vectors (x + k * ldx), each weight piece loaded and widened
 * once: each vector's sums run in exactly dot_row_t's order, so each out[k] equals its result. */
static inline __attribute__((always_inline)) void dot4_t(const void *row, thin_dtype dt,
                                                          const float *x, uint64_t ldx, uint64_t n,
                                                          float *out) {
    __m256 a0[4], a1[4];
#pragma GCC unroll 4
    for (int k = 0; k < 4; k++) a0[k] = a1[k] = _mm256_setzero_ps();
    uint64_t c = 0;
    for (; c + 16 <= n; c += 16) {
        const __m256 w0 = load8(row, dt, c), w1 = load8(row, dt, c + 8);
#pragma GCC unroll 4
        for (int k = 0; k < 4; k++) {
            a0[k] = _mm256_fmadd_ps(w0, _mm256_loadu_ps(x + k * ldx + c), a0[k]);
            a1[k] = _mm256_fmadd_ps(w1, _mm256_loadu_ps(x + k * ldx + c + 8), a1[k]);
        }
    }
    for (; c + 8 <= n; c += 8) {
        const __m256 w0 = load8(row, dt, c);
#pragma GCC unroll 4
        for (int k = 0; k < 4; k++) a0[k] = _mm256_fmadd_ps(w0, _mm256_loadu_ps(x + k * ldx + c), a0[k]);
    }
    for (int k = 0; k < 4; k++) out[k] = hsum8(_mm256_add_ps(a0[k], a1[k]));
    float kf = dt == THIN_DTYPE_F8_E4M3 ? 0x1p-8f : 1.0f;
    for (; c < n; c++) {
        const float wv = elem_at(row, dt, c);
        for (int k = 0; k < 4; k++) out[k] += wv * kf * x[k * ldx + c];
    }
}

static void dot4(const void *row, thin_dtype dt, const float *x, uint64_t ldx, uint64_t n,
                 float *out) {
    switch (dt) {
    case THIN_DTYPE_F32: dot4_t(row, THIN_DTYPE_F32, x, ldx, n, out); break;
    case THIN_DTYPE_BF16: dot4_t(row, THIN_DTYPE_BF16, x, ldx, n, out); break;
    case THIN_DTYPE_F16: dot4_t(row, THIN_DTYPE_F16, x, ldx, n, out); break;
    default: dot4_t(row, THIN_DTYPE_F8_E4M3, x, ldx, n, out); break;
    }
}

/* y += a * row (n elements of dtype dt: F32 or BF16, the KV caches) */
static inline __attribute__((always_inline)) void axpy_row_t(float *y, float a, const void *row,
                                                              thin_dtype dt, uint64_t n) {
    const __m256 va = _mm256_set1_ps(a);
    uint64_t c = 0;
    for (; c + 8 <= n; c += 8)
        _mm256_storeu_ps(y + c, _mm256_fmadd_ps(va, load8(row, dt, c), _mm256_loadu_ps(y + c)));
    for (; c < n; c++) y[c] += a * elem_at(row, dt, c);
}

static void axpy_row(float *y, float a, const void *row, thin_dtype dt, uint64_t n) {
    if (dt == THIN_DTYPE_BF16) axpy_row_t(y, a, row, THIN_DTYPE_BF16, n);
    else axpy_row_t(y, a, row, THIN_DTYPE_F32, n);
}
#else
static float dot_row(const void *row, thin_dtype dt, const float *x, uint64_t n) {
    float s = 0.0f;
    switch (dt) {
    case THIN_DTYPE_F32:
        for (uint64_t c = 0; c < n; c++) s += ((const float *)row)[c] * x[c];
        break;
    case THIN_DTYPE_BF16:
        for (uint64_t c = 0; c < n; c++) s += bf16_to_f32(((const uint16_t *)row)[c]) * x[c];
        break;
    case THIN_DTYPE_F16:
        for (uint64_t c = 0; c < n; c++) s += f16_to_f32(((const uint16_t *)row)[c]) * x[c];
        break;
    default: {
        const float *lut = e4m3_table();
        for (uint64_t c = 0; c < n; c++) s += lut[((const uint8_t *)row)[c]] * x[c];
        break;
    }
    }
    return s;
}

/* y += a * row (n elements of dtype dt: F32 or BF16, the KV caches) */
static void axpy_row(float *y, float a, const void *row, thin_dtype dt, uint64_t n) {
    if (dt == THIN_DTYPE_BF16)
        for (uint64_t c = 0; c < n; c++) y[c] += a * bf16_to_f32(((const uint16_t *)row)[c]);
    else
        for (uint64_t c = 0; c < n; c++) y[c] += a * ((const float *)row)[c];
}

/* The portable dot4: dot_row per vector (the weight row stays in cache after the first). */
static void dot4(const void *row, thin_dtype dt, const float *x, uint64_t ldx, uint64_t n,
                 float *out) {
    for (int k = 0; k < 4; k++) out[k] = dot_row(row, dt, x + k * ldx, n);
}
#endif

#ifdef OPS_AVX2
/* ---- the same products on AVX-512, chosen at run time ----
 * A 512-bit accumulator holds dot_row_t's two: lanes 0-7 are a0 (columns c..c+7 of every 16),
 * lanes 8-15 are a1 (c+8..c+15); the 8-column block after the last 16 goes into a0 alone, and the
 * sums end as dot_row_t's do (a0 + a1, hsum8, then the scalar tail). Every result is therefore the
 * AVX2 path's bit for bit, on any CPU. The wider registers (32 of them) let a block of four weight
 * rows meet up to six vectors: each widened weight piece feeds six FMAs and each x load four,
 * where dot4_t's loads fed one FMA each. */
#define T512 __attribute__((target("avx2,fma,f16c,avx512f,avx512bw,avx512dq,avx512vl")))
#define AI512 static inline __attribute__((always_inline)) T512

/* 16 weights at column c as floats (E4M3 at 2^-8 of its value, as load8) */
AI512 __m512 load16(const void *w, thin_dtype dt, uint64_t c) {
    switch (dt) {
    case THIN_DTYPE_F32: return _mm512_loadu_ps((const float *)w + c);
    case THIN_DTYPE_BF16: {
        __m256i h = _mm256_loadu_si256((const __m256i *)((const uint16_t *)w + c));
        return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
    }
    case THIN_DTYPE_F16:
        return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)((const uint16_t *)w + c)));
    default: { /* load8's bits: s 0eeee mmm0000000 */
        __m256i y = _mm256_cvtepu8_epi16(_mm_loadu_si128((const __m128i *)((const uint8_t *)w + c)));
        y = _mm256_srai_epi16(_mm256_slli_epi16(y, 8), 1);
        return _mm512_cvtph_ps(_mm256_and_si256(y, _mm256_set1_epi16((short)0xBFFF)));
    }
    }
}

/* RB rows (base + a * pitch) against NB vectors (x + b * ldx), n columns: out[a * NB + b] is
 * dot_row_t(row a, vector b) exactly. */
AI512 void dot_block_t(const uint8_t *base, size_t pitch, thin_dtype dt, int RB, int NB,
                        const float *x, uint64_t ldx, uint64_t n, float *out) {
    __m512 acc[4][6];
#pragma GCC unroll 4
    for (int a = 0; a < RB; a++)
#pragma GCC unroll 6
        for (int b = 0; b < NB; b++) acc[a][b] = _mm512_setzero_ps();
    uint64_t c = 0;
    for (; c + 16 <= n; c += 16) {
        __m512 w[4];
#pragma GCC unroll 4
        for (int a = 0; a < RB; a++) w[a] = load16(base + a * pitch, dt, c);
#pragma GCC unroll 6
        for (int b = 0; b < NB; b++) {
            const __m512 xv = _mm512_loadu_ps(x + b * ldx + c);
#pragma GCC unroll 4
            for (int a = 0; a < RB; a++) acc[a][b] = _mm512_fmadd_ps(w[a], xv, acc[a][b]);
        }
    }
    const float kf = dt == THIN_DTYPE_F8_E4M3 ? 0x1p-8f : 1.0f;
#pragma GCC unroll 4
    for (int a = 0; a < RB; a++) {
        const uint8_t *row = base + a * pitch;
        const int tail8 = c + 8 <= n;
        const __m256 w8 = tail8 ? load8(row, dt, c) : _mm256_setzero_ps();
#pragma GCC unroll 6
        for (int b = 0; b < NB; b++) {
            __m256 a0 = _mm512_castps512_ps256(acc[a][b]);
            const __m256 a1 = _mm512_extractf32x8_ps(acc[a][b], 1);
            if (tail8) a0 = _mm256_fmadd_ps(w8, _mm256_loadu_ps(x + b * ldx + c), a0);
            float s = hsum8(_mm256_add_ps(a0, a1));
            for (uint64_t t = c + (tail8 ? 8 : 0); t < n; t++) s += elem_at(row, dt, t) * kf * x[b * ldx + t];
            out[a * NB + b] = s;
        }
    }
}

/* One instance per dtype, row block and vector count, each with its loops unrolled. */
#define DOT_BLOCK(name, DT, RB, NB)                                                                \
    static T512 __attribute__((noinline)) void name(const uint8_t *base, size_t pitch,             \
                                                    const float *x, uint64_t ldx, uint64_t n,      \
                                                    float *out) {                                  \
        dot_block_t(base, pitch, DT, RB, NB, x, ldx, n, out);                                      \
    }
#define DOT_BLOCKS(sfx, DT)                                                                        \
    DOT_BLOCK(db4x6_##sfx, DT, 4, 6) DOT_BLOCK(db4x4_##sfx, DT, 4, 4)                              \
    DOT_BLOCK(db4x2_##sfx, DT, 4, 2) DOT_BLOCK(db4x1_##sfx, DT, 4, 1)                              \
    DOT_BLOCK(db1x6_##sfx, DT, 1, 6) DOT_BLOCK(db1x4_##sfx, DT, 1, 4)                              \
    DOT_BLOCK(db1x2_##sfx, DT, 1, 2) DOT_BLOCK(db1x1_##sfx, DT, 1, 1)
DOT_BLOCKS(f32, THIN_DTYPE_F32)
DOT_BLOCKS(bf16, THIN_DTYPE_BF16)
DOT_BLOCKS(f16, THIN_DTYPE_F16)
DOT_BLOCKS(f8, THIN_DTYPE_F8_E4M3)

typedef void (*dot_block_fn)(const uint8_t *, size_t, const float *, uint64_t, uint64_t, float *);
#define DOT_TABLE(sfx)                                                                             \
    {{db1x1_##sfx, db1x2_##sfx, db1x4_##sfx, db1x6_##sfx},                                         \
     {db4x1_##sfx, db4x2_##sfx, db4x4_##sfx, db4x6_##sfx}}
static const dot_block_fn dot_blocks[4][2][4] = {DOT_TABLE(f32), DOT_TABLE(bf16), DOT_TABLE(f16),
                                                 DOT_TABLE(f8)};

/* Vectors a block takes next out of m left: six, unless that would leave one or two (seven and
 * eight go as four and the rest), so 32 go as 6, 6, 6, 6, 4, 4. */
static int block_vectors(uint32_t m, int *slot) {
    static const int nv[4] = {1, 2, 4, 6};
    *slot = m >= 6 && m != 7 && m != 8 ? 3 : m >= 4 ? 2 : m >= 2 ? 1 : 0;
    return nv[*slot];
}

static void products512(float *y, uint64_t ldy, const uint8_t *base, size_t pitch, thin_dtype dt,
                        uint64_t n, const float *scale, float k, const float *x, uint64_t ldx,
                        uint32_t nb, uint64_t r0, uint64_t r1) {
    const int di = dt == THIN_DTYPE_F32 ? 0 : dt == THIN_DTYPE_BF16 ? 1 : dt == THIN_DTYPE_F16 ? 2 : 3;
    float s[4 * 6];
    for (uint64_t r = r0; r < r1;) {
        const int rb = r1 - r >= 4 ? 4 : 1;
        for (uint32_t i = 0; i < nb;) {
            int slot;
            const int nv = block_vectors(nb - i, &slot);
            dot_blocks[di][rb == 4][slot](base + r * pitch, pitch, x + i * ldx, ldx, n, s);
            for (int a = 0; a < rb; a++) {
                const float f = dt == THIN_DTYPE_F8_E4M3 ? k * (scale ? scale[r + a] : 1.0f) : 1.0f;
                for (int b = 0; b < nv; b++) y[(i + b) * ldy + r + a] = s[a * nv + b] * f;
            }
            i += nv;
        }
        r += rb;
    }
}

/* 1 when the CPU runs AVX-512 (F, BW, DQ, VL) and THIN_CPU_AVX512 is not 0; decided once. */
static int simd_level = -1;

int op_cpu_avx512(int force) {
    if (force >= 0) {
        __atomic_store_n(&simd_level, force && __builtin_cpu_supports("avx512f") &&
                                          __builtin_cpu_supports("avx512bw") &&
                                          __builtin_cpu_supports("avx512dq") &&
                                          __builtin_cpu_supports("avx512vl"), __ATOMIC_RELAXED);
        return __atomic_load_n(&simd_level, __ATOMIC_RELAXED);
    }
    int l = __atomic_load_n(&simd_level, __ATOMIC_RELAXED);
    if (l < 0) { /* every thread that races here computes the same value */
        const char *e = getenv("THIN_CPU_AVX512");
        l = op_cpu_avx512(!(e && strcmp(e, "0") == 0));
    }
    return l;
}
#else
int op_cpu_avx512(int force) {
    (void)force;
    return 0;
}
#endif

/* y[i * ldy + r] = (row r · x_i) × f_r for rows [r0, r1) of n elements of dtype dt at base +
 * r * pitch and vectors x_i = x + i * ldx, i < nb: op_matvec's arithmetic for each. f_r is 1
 * (exact) except for FP8 rows: their scale (1 without scales) times load8's 2^8. */
static void products(float *y, uint64_t ldy, const uint8_t *base, size_t pitch, thin_dtype dt,
                     uint64_t n, const float *scale, const float *x, uint64_t ldx, uint32_t nb,
                     uint64_t r0, uint64_t r1) {
    float k = 1.0f;
#ifdef OPS_AVX2
    if (dt == THIN_DTYPE_F8_E4M3) k = 0x1p8f; /* see load8 */
    /* one vector (decode) stays on AVX2: as fast for BF16 weights and faster for FP8 ones, whose
     * widening bounds it (Llama-shaped 0.85 GB model on a 2-core AVX-512 machine: fp8-all decode
     * 17-18 / 34-35 tokens/s on one / two threads against 19 / 40) */
    if (nb >= 2 && op_cpu_avx512(-1)) {
        products512(y, ldy, base, pitch, dt, n, scale, k, x, ldx, nb, r0, r1);
        return;
    }
#endif
    for (uint64_t r = r0; r < r1; r++) {
        const uint8_t *row = base + r * pitch;
        const float f = dt == THIN_DTYPE_F8_E4M3 ? k * (scale ? scale[r] : 1.0f) : 1.0f;
        uint32_t i = 0;
        for (; i + 4 <= nb; i += 4) {
            float s[4];
            dot4(row, dt, x + i * ldx, ldx, n, s);
            for (int j = 0; j < 4; j++) y[(i + j) * ldy + r] = s[j] * f;
        }
        for (; i < nb; i++) y[i * ldy + r] = dot_row(row, dt, x + i * ldx, n) * f;
    }
}

void op_matmat_cols(float *y, uint64_t ldy, const thin_wmat *W, uint64_t c0, uint64_t c1,
                    const float *x, uint64_t ldx, uint32_t nb, uint64_t r0, uint64_t r1) {
    const size_t esz = thin_dtype_size(W->dtype);
    products(y, ldy, (const uint8_t *)W->data + c0 * esz, W->cols * esz, W->dtype, c1 - c0,
             W->scale, x + c0, ldx, nb, r0, r1);
}

void op_matmat(float *y, uint64_t ldy, const thin_wmat *W, const float *x, uint64_t ldx, uint32_t nb,
               uint64_t r0, uint64_t r1) {
    op_matmat_cols(y, ldy, W, 0, W->cols, x, ldx, nb, r0, r1);
}

void op_matvec(float *y, const thin_wmat *W, const float *x, uint64_t r0, uint64_t r1) {
    op_matmat(y, 0, W, x, 0, 1, r0, r1);
}

/* ---- position encoding ---- */

void op_rope(float *x, uint64_t n_heads, uint64_t head_dim, uint64_t rot_dim, uint64_t pos,
             float theta, const float *inv_freq, float scale) {
    if (!rot_dim) rot_dim = head_dim;
    uint64_t half = rot_dim / 2;
    for (uint64_t i = 0; i < half; i++) {
        double f = inv_freq ? (double)inv_freq[i]
                            : pow((double)theta, -2.0 * (double)i / (double)rot_dim);
        double a = (double)pos * f;
        float c = (float)cos(a) * scale, s = (float)sin(a) * scale;
        for (uint64_t h = 0; h < n_heads; h++) {
            float *xh = x + h * head_dim;
            float x0 = xh[i], x1 = xh[i + half];
            xh[i] = x0 * c - x1 * s;
            xh[i + half] = x0 * s + x1 * c;
        }
    }
}

/* ---- attention ---- */

void op_kv_store(void *kcache, void *vcache, thin_dtype kv_dtype, const float *k, const float *v,
                 uint64_t kv_dim, uint64_t pos) {
    uint64_t o = pos * kv_dim;
    if (kv_dtype == THIN_DTYPE_BF16) {
        uint16_t *kc = (uint16_t *)kcache + o, *vc = (uint16_t *)vcache + o;
        for (uint64_t i = 0; i < kv_dim; i++) {
            kc[i] = thin_f32_to_bf16(k[i]);
            vc[i] = thin_f32_to_bf16(v[i]);
        }
    } else {
        memcpy((float *)kcache + o, k, kv_dim * sizeof(float));
        memcpy((float *)vcache + o, v, kv_dim * sizeof(float));
    }
}

static void softmax(float *x, uint64_t n) {
    float mx = x[0];
    for (uint64_t i = 1; i < n; i++) mx = x[i] > mx ? x[i] : mx;
    float sum = 0.0f;
    for (uint64_t i = 0; i < n; i++) {
        x[i] = expf(x[i] - mx);
        sum += x[i];
    }
    for (uint64_t i = 0; i < n; i++) x[i] /= sum;
}

void op_attention_heads(float *out, const float *q, const void *kcache, const void *vcache,
                        thin_dtype kv_dtype, uint64_t n_heads, uint64_t n_kv_heads, uint64_t head_dim,
                        uint64_t n_pos, uint64_t h0, uint64_t h1, float *scratch) {
    const uint64_t kv_dim = n_kv_heads * head_dim, group = n_heads / n_kv_heads;
    const size_t esz = thin_dtype_size(kv_dtype);
    const uint8_t *kc = kcache, *vc = vcache;
    const float scale = 1.0f / sqrtf((float)head_dim);
    for (uint64_t h = h0; h < h1; h++) {
        const float *qh = q + h * head_dim;
        const uint64_t kvo = (h / group) * head_dim;
        for (uint64_t t = 0; t < n_pos; t++)
            scratch[t] = dot_row(kc + (t * kv_dim + kvo) * esz, kv_dtype, qh, head_dim) * scale;
        softmax(scratch, n_pos);
        float *oh = out + h * head_dim;
        memset(oh, 0, head_dim * sizeof(float));
        for (uint64_t t = 0; t < n_pos; t++)
            axpy_row(oh, scratch[t], vc + (t * kv_dim + kvo) * esz, kv_dtype, head_dim);
    }
}

void op_attention(float *out, const float *q, const void *kcache, const void *vcache,
                  thin_dtype kv_dtype, uint64_t n_heads, uint64_t n_kv_heads, uint64_t head_dim,
                  uint64_t n_pos, float *scratch) {
    op_attention_heads(out, q, kcache, vcache, kv_dtype, n_heads, n_kv_heads, head_dim, n_pos, 0,
                       n_heads, scratch);
}

/* out_i += Σ_{t < n_i} p_i[t] · V_t for rows i < nr (nr ≤ 2): each element's sum in axpy_row's
 * order (t ascending, one FMA per term in the 8-element pieces, the scalar form past them), with
 * the sums of up to 32 elements of both rows in registers while V_t's piece is widened once. */
static void wsum_rows(float *const *out, const float *const *p, const uint64_t *n, int nr,
                      const uint8_t *vbase, size_t pitch, thin_dtype dt, uint64_t head_dim) {
#ifdef OPS_AVX2
    const uint64_t nmin = nr == 2 && n[1] < n[0] ? n[1] : n[0];
    uint64_t d = 0;
    for (int w; (w = head_dim - d >= 32 ? 4 : (int)((head_dim - d) / 8)) > 0; d += 8 * (uint64_t)w) {
        /* w pieces of 8 elements from d */
        __m256 acc[2][4];
        for (int r = 0; r < nr; r++)
            for (int j = 0; j < w; j++) acc[r][j] = _mm256_loadu_ps(out[r] + d + 8 * j);
        uint64_t t = 0;
        if (nr == 2 && w == 4)
            for (; t < nmin; t++) {
                const uint8_t *v = vbase + t * pitch;
                const __m256 a0 = _mm256_set1_ps(p[0][t]), a1 = _mm256_set1_ps(p[1][t]);
#pragma GCC unroll 4
                for (int j = 0; j < 4; j++) {
                    const __m256 vv = load8(v, dt, d + 8 * j);
                    acc[0][j] = _mm256_fmadd_ps(a0, vv, acc[0][j]);
                    acc[1][j] = _mm256_fmadd_ps(a1, vv, acc[1][j]);
                }
            }
        for (int r = 0; r < nr; r++)
            for (uint64_t u = t; u < n[r]; u++) {
                const uint8_t *v = vbase + u * pitch;
                const __m256 a = _mm256_set1_ps(p[r][u]);
                for (int j = 0; j < w; j++) acc[r][j] = _mm256_fmadd_ps(a, load8(v, dt, d + 8 * j), acc[r][j]);
            }
        for (int r = 0; r < nr; r++)
            for (int j = 0; j < w; j++) _mm256_storeu_ps(out[r] + d + 8 * j, acc[r][j]);
    }
    for (int r = 0; r < nr; r++) /* the elements past the last piece of 8 */
        for (uint64_t t = 0; t < n[r]; t++)
            for (uint64_t c = d; c < head_dim; c++) out[r][c] += p[r][t] * elem_at(vbase + t * pitch, dt, c);
#else
    for (int r = 0; r < nr; r++)
        for (uint64_t t = 0; t < n[r]; t++) axpy_row(out[r], p[r][t], vbase + t * pitch, dt, head_dim);
#endif
}

/* Attention of nv query vectors (q + j * qs into out + j * os) that read one KV head's rows
 * (kbase, vbase, pitch bytes apart), vector j over positions 0..n0 + j * dn - 1 (dn = 1: a
 * prompt's consecutive rows; 0: a token's query heads of one group). Each position's K and V
 * rows are read once for all the vectors; every result is op_attention_heads' bit for bit.
 * scratch: nv × (n0 + (nv - 1) dn) floats. */
static void attend(float *out, uint64_t os, const float *q, uint64_t qs, uint32_t nv, uint64_t n0,
                   uint64_t dn, const uint8_t *kbase, const uint8_t *vbase, size_t pitch,
                   thin_dtype dt, uint64_t head_dim, float scale, uint64_t window, float softcap,
                   uint64_t first, float *scratch) {
    const uint64_t n_all = n0 + (nv - 1) * dn;
    /* the first position any vector sees: vector 0's window starts first */
    const uint64_t lo0 = op_window_start(n0, window);
    /* every vector's scores against every position from there (those past a vector's own are
     * not used) */
    products(scratch + first, n_all, kbase, pitch, dt, head_dim, NULL, q, qs, nv, lo0 - first, n_all - first);
    for (uint32_t j = 0; j < nv; j++) {
        float *sj = scratch + (size_t)j * n_all;
        const uint64_t n = n0 + j * dn, lo = op_window_start(n, window);
        for (uint64_t t = lo; t < n; t++) sj[t] *= scale;
        if (softcap > 0) op_softcap(sj + lo, softcap, n - lo);
        softmax(sj + lo, n - lo);
        memset(sj, 0, lo * sizeof(float)); /* outside the window: weight 0, adding nothing */
        memset(out + j * os, 0, head_dim * sizeof(float));
    }
    for (uint32_t j = 0; j < nv; j += 2) {
        const int two = nv - j >= 2;
        float *o[2] = {out + j * os, two ? out + (j + 1) * os : NULL};
        /* from lo0 on: the weights before a vector's window are 0 and would add nothing */
        const float *pr[2] = {scratch + (size_t)j * n_all + lo0,
                              two ? scratch + (size_t)(j + 1) * n_all + lo0 : NULL};
        const uint64_t n[2] = {n0 + j * dn - lo0, n0 + (j + 1) * dn - lo0};
        wsum_rows(o, pr, n, two ? 2 : 1, vbase + (lo0 - first) * pitch, pitch, dt, head_dim);
    }
}

void op_attention_rows(float *out, uint64_t ldo, const float *q, uint64_t ldq, const void *kcache,
                       const void *vcache, thin_dtype kv_dtype, uint64_t n_heads, uint64_t n_kv_heads,
                       uint64_t head_dim, uint64_t pos0, uint32_t nb, uint64_t h0, uint64_t h1,
                       float scale, uint64_t window, float softcap, uint64_t first, float *scratch) {
    const uint64_t kv_dim = n_kv_heads * head_dim, group = n_heads / n_kv_heads;
    const size_t esz = thin_dtype_size(kv_dtype), pitch = kv_dim * esz;
    const uint8_t *kc = kcache, *vc = vcache;
    for (uint64_t h = h0; h < h1;) {
        const uint64_t kvo = (h / group) * head_dim;
        if (nb > 1) { /* a prompt: one head, its rows the vectors */
            attend(out + h * head_dim, ldo, q + h * head_dim, ldq, nb, pos0 + 1, 1, kc + kvo * esz,
                   vc + kvo * esz, pitch, kv_dtype, head_dim, scale, window, softcap, first, scratch);
            h++;
            continue;
        }
        /* a token: the heads of one group, at most OP_ATTN_HEADS, the vectors */
        uint64_t he = (h / group + 1) * group;
        if (he > h1) he = h1;
        if (he > h + OP_ATTN_HEADS) he = h + OP_ATTN_HEADS;
        attend(out + h * head_dim, head_dim, q + h * head_dim, head_dim, (uint32_t)(he - h), pos0 + 1,
               0, kc + kvo * esz, vc + kvo * esz, pitch, kv_dtype, head_dim, scale, window, softcap,
               first, scratch);
        h = he;
    }
}

/* ---- elementwise ---- */

void op_silu_mul(float *g, const float *u, uint64_t n) {
    for (uint64_t i = 0; i < n; i++) g[i] = g[i] / (1.0f + expf(-g[i])) * u[i];
}

void op_gelu_tanh_mul(float *g, const float *u, uint64_t n) {
    const double k = sqrt(2.0 / M_PI);
    for (uint64_t i = 0; i < n; i++) {
        const double x = g[i];
        g[i] = (float)(0.5 * x * (1.0 + tanh(k * (x + 0.044715 * x * x * x))) * u[i]);
    }
}

void op_scale(float *x, float s, uint64_t n) {
    for (uint64_t i = 0; i < n; i++) x[i] *= s;
}

void op_softcap(float *x, float cap, uint64_t n) {
    for (uint64_t i = 0; i < n; i++) x[i] = cap * tanhf(x[i] / cap);
}

void op_add_scaled(float *x, const float *h, float s, uint64_t n) {
    for (uint64_t i = 0; i < n; i++) x[i] += s * h[i];
}

void op_add(float *x, const float *h, uint64_t n) {
    for (uint64_t i = 0; i < n; i++) x[i] += h[i];
}

void op_add_bias(float *x, const thin_wmat *b, uint64_t n) {
    for (uint64_t i = 0; i < n; i++) x[i] += thin_wmat_get(b, 0, i);
}

int64_t op_argmax(const float *x, uint64_t n) {
    uint64_t best = 0;
    int bad = 0;
    for (uint64_t i = 0; i < n; i++) {
        bad |= !isfinite(x[i]);
        if (x[i] > x[best]) best = i;
    }
    return bad ? -1 : (int64_t)best;
}
