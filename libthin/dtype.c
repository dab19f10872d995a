/*
 * dtype.c — dtype sizes and names, and conversions between the floating-point dtypes.
 *
 * Every narrowing conversion rounds to nearest, ties to even, handles subnormals of both formats,
 * keeps the sign of zero and turns NaN into a quiet NaN of the same sign. The scalar routines work
 * on bit patterns only, so they do not depend on the floating-point environment. The bulk paths
 * that matter for speed (F32 <-> BF16, F16 <-> F32) are plain loops the compiler vectorises, or
 * F16C instructions when the build enables them; both give the same bits as the scalar routines.
 */
#include "thin.h"

#include <math.h>
#include <string.h>
#include <strings.h>

#ifdef __F16C__
#include <immintrin.h>
#endif

/* ---- sizes and names ---- */

static const struct {
    const char *name;
    size_t size;
} dtype_table[THIN_DTYPE_COUNT_] = {
    [THIN_DTYPE_INVALID] = {"INVALID", 0}, [THIN_DTYPE_F64] = {"F64", 8},
    [THIN_DTYPE_F32] = {"F32", 4},         [THIN_DTYPE_F16] = {"F16", 2},
    [THIN_DTYPE_BF16] = {"BF16", 2},       [THIN_DTYPE_F8_E4M3] = {"F8_E4M3", 1},
    [THIN_DTYPE_F8_E5M2] = {"F8_E5M2", 1}, [THIN_DTYPE_I64] = {"I64", 8},
    [THIN_DTYPE_I32] = {"I32", 4},         [THIN_DTYPE_I16] = {"I16", 2},
    [THIN_DTYPE_I8] = {"I8", 1},           [THIN_DTYPE_U8] = {"U8", 1},
    [THIN_DTYPE_BOOL] = {"BOOL", 1},       [THIN_DTYPE_U16] = {"U16", 2},
    [THIN_DTYPE_U32] = {"U32", 4},         [THIN_DTYPE_U64] = {"U64", 8},
};

size_t thin_dtype_size(thin_dtype t)
{
    if ((int)t <= 0 || (int)t >= THIN_DTYPE_COUNT_)
        return 0;
    return dtype_table[t].size;
}

const char *thin_dtype_name(thin_dtype t)
{
    if ((int)t <= 0 || (int)t >= THIN_DTYPE_COUNT_)
        return "INVALID";
    return dtype_table[t].name;
}

thin_dtype thin_dtype_from_name(const char *name)
{
    if (!name)
        return THIN_DTYPE_INVALID;
    for (int t = 1; t < THIN_DTYPE_COUNT_; t++)
        if (strcasecmp(name, dtype_table[t].name) == 0)
            return (thin_dtype)t;
    return THIN_DTYPE_INVALID;
}

/* ---- bit helpers ---- */

/* v >> s rounded to nearest, ties to even; v < 2^25. */
static inline uint32_t shift_rne(uint32_t v, unsigned s)
{
    if (s == 0)
        return v;
    if (s >= 32)
        return 0;
    uint32_t q = v >> s, rem = v & ((1u << s) - 1), half = 1u << (s - 1);
    if (rem > half || (rem == half && (q & 1)))
        q++;
    return q;
}

/* Magnitude code (exponent << M | mantissa) of the finite f32 |u| in a format with M mantissa
 * bits and exponent bias B, rounded to nearest even. The result may exceed the format's largest
 * code; the caller decides between saturation and infinity. F32 subnormals give 0 (they lie below
 * half the smallest subnormal of every format this is used for). */
static uint32_t narrow_code(uint32_t u, unsigned M, int B)
{
    int e32 = (int)(u >> 23);
    if (e32 == 0)
        return 0;
    uint32_t mant = (u & 0x7fffffu) | 0x800000u; /* 24 significant bits */
    int e = e32 - 127 + B;                       /* target biased exponent */
    if (e >= 1) {
        uint32_t q = shift_rne(mant, 23 - M);    /* in [2^M, 2^(M+1)] */
        return ((uint32_t)e << M) + q - (1u << M); /* a carry moves into the exponent */
    }
    /* Subnormal in the target: value = m * 2^(1 - B - M). Rounding up to 2^M yields the
     * smallest normal code, which is the correct encoding. */
    return shift_rne(mant, (unsigned)(23 - (int)M + 1 - e));
}

/* ---- BF16 ---- */

/* F32 -> BF16 of one value's bits, branch-free so that loops over it vectorise. */
static inline uint16_t bf16_round(uint32_t u)
{
    uint32_t r = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
    uint32_t q = (u >> 16) | 0x0040u;
    return (uint16_t)((u & 0x7fffffffu) > 0x7f800000u ? q : r);
}

static inline uint32_t bf16_widen(uint16_t h)
{
    uint32_t u = (uint32_t)h << 16;
    return (u & 0x7fffffffu) > 0x7f800000u ? (u | 0x00400000u) : u;
}

float thin_bf16_to_f32(uint16_t h)
{
    return thin_f32_from_bits(bf16_widen(h));
}

uint16_t thin_f32_to_bf16(float f)
{
    return bf16_round(thin_f32_bits(f));
}

/* ---- F16 ---- */

float thin_f16_to_f32(uint16_t h)
{
    uint32_t s = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 31u, m = h & 0x3ffu;
    if (e == 31)
        return thin_f32_from_bits(s | 0x7f800000u | (m << 13) | (m ? 0x00400000u : 0));
    if (e == 0) {
        float v = (float)m * 0x1p-24f; /* exact: m < 2^10 */
        return thin_f32_from_bits(s | thin_f32_bits(v));
    }
    return thin_f32_from_bits(s | ((e + 112u) << 23) | (m << 13));
}

uint16_t thin_f32_to_f16(float f)
{
    uint32_t u = thin_f32_bits(f), a = u & 0x7fffffffu;
    uint16_t s = (uint16_t)((u >> 16) & 0x8000u);
    if (a > 0x7f800000u)
        return (uint16_t)(s | 0x7e00u | ((a >> 13) & 0x3ffu));
    if (a == 0x7f800000u)
        return (uint16_t)(s | 0x7c00u);
    uint32_t c = narrow_code(a, 10, 15);
    return (uint16_t)(s | (c >= 0x7c00u ? 0x7c00u : c));
}

/* ---- F8 E4M3 (E4M3FN) ---- */

float thin_e4m3_to_f32(uint8_t b)
{
    uint32_t s = (uint32_t)(b & 0x80u) << 24, e = (b >> 3) & 15u, m = b & 7u;
    if (e == 15 && m == 7)
        return thin_f32_from_bits(s | 0x7fc00000u);
    if (e == 0)
        return thin_f32_from_bits(s | thin_f32_bits((float)m * 0x1p-9f));
    return thin_f32_from_bits(s | ((e + 120u) << 23) | (m << 20));
}

uint8_t thin_f32_to_e4m3(float f)
{
    uint32_t u = thin_f32_bits(f), a = u & 0x7fffffffu;
    uint8_t s = (uint8_t)((u >> 24) & 0x80u);
    if (a > 0x7f800000u)
        return (uint8_t)(s | 0x7fu);
    if (a >= 0x43e00000u) /* |f| >= 448, Inf included */
        return (uint8_t)(s | 0x7eu);
    uint32_t c = narrow_code(a, 3, 7);
    return (uint8_t)(s | (c > 0x7eu ? 0x7eu : c));
}

/* ---- F8 E5M2 (the upper byte of an F16) ---- */

float thin_e5m2_to_f32(uint8_t b)
{
    return thin_f16_to_f32((uint16_t)(b << 8));
}

static uint8_t e5m2_encode(float f, int saturate)
{
    uint32_t u = thin_f32_bits(f), a = u & 0x7fffffffu;
    uint8_t s = (uint8_t)((u >> 24) & 0x80u);
    uint8_t top = saturate ? 0x7bu : 0x7cu;
    if (a > 0x7f800000u)
        return (uint8_t)(s | 0x7eu);
    if (a == 0x7f800000u)
        return (uint8_t)(s | top);
    uint32_t c = narrow_code(a, 2, 15);
    return (uint8_t)(s | (c >= 0x7cu ? top : c));
}

uint8_t thin_f32_to_e5m2(float f)
{
    return e5m2_encode(f, 0);
}

uint8_t thin_f32_to_e5m2_sat(float f)
{
    return e5m2_encode(f, 1);
}

/* ---- bulk conversion ---- */

/* The bulk loops run in groups of a fixed size, which the compiler vectorises even under its
 * cheapest cost model, then a scalar tail. */
enum { GROUP = 32 };

/* F32 -> BF16, n elements. */
static void f32_to_bf16_n(uint16_t *restrict dst, const uint32_t *restrict src, size_t n)
{
    size_t i = 0;
    for (; i + GROUP <= n; i += GROUP)
        for (size_t j = 0; j < GROUP; j++)
            dst[i + j] = bf16_round(src[i + j]);
    for (; i < n; i++)
        dst[i] = bf16_round(src[i]);
}

/* BF16 -> F32, n elements. */
static void bf16_to_f32_n(uint32_t *restrict dst, const uint16_t *restrict src, size_t n)
{
    size_t i = 0;
    for (; i + GROUP <= n; i += GROUP)
        for (size_t j = 0; j < GROUP; j++)
            dst[i + j] = bf16_widen(src[i + j]);
    for (; i < n; i++)
        dst[i] = bf16_widen(src[i]);
}

/* F16 -> F32 and F32 -> F16, n elements: F16C when the build has it, else the scalar routines. */
static void f16_to_f32_n(float *restrict dst, const uint16_t *restrict src, size_t n)
{
    size_t i = 0;
#ifdef __F16C__
    for (; i + 8 <= n; i += 8) {
        __m128i h = _mm_loadu_si128((const __m128i *)(const void *)(src + i));
        _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(h));
    }
#endif
    for (; i < n; i++)
        dst[i] = thin_f16_to_f32(src[i]);
}

static void f32_to_f16_n(uint16_t *restrict dst, const float *restrict src, size_t n)
{
    size_t i = 0;
#ifdef __F16C__
    for (; i + 8 <= n; i += 8) {
        __m128i h = _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT);
        _mm_storeu_si128((__m128i *)(void *)(dst + i), h);
    }
#endif
    for (; i < n; i++)
        dst[i] = thin_f32_to_f16(src[i]);
}

/* Double -> float rounded to odd: truncate, then set the lowest bit when inexact. Narrowing the
 * result once more with round-to-nearest-even gives the correctly rounded value of the double,
 * since float keeps at least two more bits than any narrower format here. */
static float f64_to_f32_odd(double d)
{
    float t = (float)d;
    if (t != t || d == (double)t)
        return t;
    uint32_t u = thin_f32_bits(t);
    if (!(fabs((double)t) < fabs(d)))
        u -= 1; /* |t| overshot (possibly to Inf): step one ulp toward zero */
    return thin_f32_from_bits(u | 1u);
}

static int is_float_dtype(thin_dtype t)
{
    return t == THIN_DTYPE_F64 || t == THIN_DTYPE_F32 || t == THIN_DTYPE_F16 ||
           t == THIN_DTYPE_BF16 || t == THIN_DTYPE_F8_E4M3 || t == THIN_DTYPE_F8_E5M2;
}

/* Loads n elements of a non-F64 float dtype into floats. */
static void load_f32(float *dst, const void *src, thin_dtype t, size_t n)
{
    const uint16_t *h = src;
    const uint8_t *b = src;
    switch (t) {
    case THIN_DTYPE_F32: memmove(dst, src, n * sizeof(float)); break;
    case THIN_DTYPE_F16: f16_to_f32_n(dst, h, n); break;
    case THIN_DTYPE_BF16: bf16_to_f32_n((uint32_t *)(void *)dst, h, n); break;
    case THIN_DTYPE_F8_E4M3:
        for (size_t i = 0; i < n; i++)
            dst[i] = thin_e4m3_to_f32(b[i]);
        break;
    default: /* F8_E5M2 */
        for (size_t i = 0; i < n; i++)
            dst[i] = thin_e5m2_to_f32(b[i]);
        break;
    }
}

/* Stores n floats as a non-F64 float dtype. */
static void store_f32(void *dst, thin_dtype t, const float *src, size_t n)
{
    uint16_t *h = dst;
    uint8_t *b = dst;
    switch (t) {
    case THIN_DTYPE_F32: memmove(dst, src, n * sizeof(float)); break;
    case THIN_DTYPE_F16: f32_to_f16_n(h, src, n); break;
    case THIN_DTYPE_BF16: f32_to_bf16_n(h, (const uint32_t *)(const void *)src, n); break;
    case THIN_DTYPE_F8_E4M3:
        for (size_t i = 0; i < n; i++)
            b[i] = thin_f32_to_e4m3(src[i]);
        break;
    default: /* F8_E5M2 */
        for (size_t i = 0; i < n; i++)
            b[i] = thin_f32_to_e5m2(src[i]);
        break;
    }
}

enum { CONVERT_BLOCK = 1024 };

/* One block of at most CONVERT_BLOCK elements between any two float dtypes (not both F64). */
static void convert_block(void *dst, thin_dtype dt, const void *src, thin_dtype st, size_t n)
{
    float tmp[CONVERT_BLOCK];
    if (st == THIN_DTYPE_F64) {
        const double *d = src;
        if (dt == THIN_DTYPE_F32)
            for (size_t i = 0; i < n; i++)
                tmp[i] = (float)d[i];
        else
            for (size_t i = 0; i < n; i++)
                tmp[i] = f64_to_f32_odd(d[i]);
    } else {
        load_f32(tmp, src, st, n);
    }
    if (dt == THIN_DTYPE_F64) {
        double *d = dst;
        for (size_t i = 0; i < n; i++)
            d[i] = (double)tmp[i];
    } else {
        store_f32(dst, dt, tmp, n);
    }
}

thin_status thin_convert(void *dst, thin_dtype dst_type, const void *src, thin_dtype src_type,
                         size_t n)
{
    if (!is_float_dtype(dst_type) || !is_float_dtype(src_type))
        return THIN_E_DTYPE;
    if (n == 0)
        return THIN_OK;
    if (!dst || !src)
        return THIN_E_INVALID_ARG;
    size_t ds = thin_dtype_size(dst_type), ss = thin_dtype_size(src_type);
    if (n > SIZE_MAX / 8)
        return THIN_E_RANGE;
    if (dst_type == src_type) {
        if (dst != src)
            memmove(dst, src, n * ss);
        return THIN_OK;
    }
    if (src_type == THIN_DTYPE_F32 && dst_type == THIN_DTYPE_BF16) {
        f32_to_bf16_n(dst, src, n);
        return THIN_OK;
    }
    if (src_type == THIN_DTYPE_BF16 && dst_type == THIN_DTYPE_F32) {
        bf16_to_f32_n(dst, src, n);
        return THIN_OK;
    }
    for (size_t i = 0; i < n; i += CONVERT_BLOCK) {
        size_t m = n - i < CONVERT_BLOCK ? n - i : CONVERT_BLOCK;
        convert_block((char *)dst + i * ds, dst_type, (const char *)src + i * ss, src_type, m);
    }
    return THIN_OK;
}
