/*
 * test_dtype.c — dtype names and sizes, and every float conversion: exhaustive over all 8- and
 * 16-bit patterns, every rounding midpoint, saturation, Inf/NaN, subnormals, random floats against
 * a reference computed in double, and thin_convert between every pair of float dtypes.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "thin.h"

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;

static uint32_t rng32(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (uint32_t)(rng_state >> 16);
}

/* ---- a description of each narrow format, decoded independently with ldexp ---- */

typedef struct fmt {
    const char *name;
    unsigned bits, ebits, mbits;
    int bias;
    int has_inf;   /* IEEE-like: all-ones exponent is Inf/NaN; else only S.1111.111 is NaN */
    double max;    /* largest finite value */
    float (*decode)(unsigned code);
    unsigned (*encode)(float f);
} fmt;

/* Value of a code from the format's definition; NAN for NaN codes, INFINITY for infinities. */
static double ref_decode(const fmt *F, unsigned code)
{
    unsigned s = (code >> (F->bits - 1)) & 1u;
    unsigned e = (code >> F->mbits) & ((1u << F->ebits) - 1);
    unsigned m = code & ((1u << F->mbits) - 1);
    unsigned emax = (1u << F->ebits) - 1;
    double v;
    if (F->has_inf && e == emax)
        v = m ? NAN : INFINITY;
    else if (!F->has_inf && e == emax && m == (1u << F->mbits) - 1)
        v = NAN;
    else if (e == 0)
        v = ldexp((double)m, 1 - F->bias - (int)F->mbits);
    else
        v = ldexp((double)((1u << F->mbits) + m), (int)e - F->bias - (int)F->mbits);
    return s ? -v : v;
}

static float dec_bf16(unsigned c) { return thin_bf16_to_f32((uint16_t)c); }
static unsigned enc_bf16(float f) { return thin_f32_to_bf16(f); }
static float dec_f16(unsigned c) { return thin_f16_to_f32((uint16_t)c); }
static unsigned enc_f16(float f) { return thin_f32_to_f16(f); }
static float dec_e4m3(unsigned c) { return thin_e4m3_to_f32((uint8_t)c); }
static unsigned enc_e4m3(float f) { return thin_f32_to_e4m3(f); }
static float dec_e5m2(unsigned c) { return thin_e5m2_to_f32((uint8_t)c); }
static unsigned enc_e5m2(float f) { return thin_f32_to_e5m2(f); }
static unsigned enc_e5m2_sat(float f) { return thin_f32_to_e5m2_sat(f); }

static const fmt FMT_BF16 = {"bf16", 16, 8, 7, 127, 1, 0x1.fep127, dec_bf16, enc_bf16};
static const fmt FMT_F16 = {"f16", 16, 5, 10, 15, 1, 65504.0, dec_f16, enc_f16};
static const fmt FMT_E4M3 = {"e4m3", 8, 4, 3, 7, 0, 448.0, dec_e4m3, enc_e4m3};
static const fmt FMT_E5M2 = {"e5m2", 8, 5, 2, 15, 1, 57344.0, dec_e5m2, enc_e5m2};
static const fmt FMT_E5M2_SAT = {"e5m2sat", 8, 5, 2, 15, 1, 57344.0, dec_e5m2, enc_e5m2_sat};

static int is_nan_code(const fmt *F, unsigned c)
{
    return isnan(ref_decode(F, c));
}

/* Every code decodes to the reference value; every non-NaN code survives decode -> encode; NaN
 * decodes to a quiet NaN of the same sign and encodes back to a NaN of the same sign. */
static void check_exhaustive(const fmt *F)
{
    unsigned n = 1u << F->bits, sign = 1u << (F->bits - 1);
    for (unsigned c = 0; c < n; c++) {
        double r = ref_decode(F, c);
        float v = F->decode(c);
        if (isnan(r)) {
            assert_true(isnan(v));
            assert_int_equal(signbit(v) != 0, (c & sign) != 0);
            assert_true(thin_f32_bits(v) & 0x00400000u); /* quiet */
            unsigned back = F->encode(v);
            assert_true(is_nan_code(F, back));
            assert_int_equal(back & sign, c & sign);
            continue;
        }
        if ((double)v != r || !signbit(v) != !signbit(r))
            fail_msg("%s code 0x%x: decoded %.9g, expected %.9g", F->name, c, (double)v, r);
        if (F->encode(v) != c)
            fail_msg("%s code 0x%x: round trip gave 0x%x", F->name, c, F->encode(v));
    }
}

static void test_bf16_exhaustive(void **state) { check_exhaustive(&FMT_BF16); }
static void test_f16_exhaustive(void **state) { check_exhaustive(&FMT_F16); }
static void test_e4m3_exhaustive(void **state) { check_exhaustive(&FMT_E4M3); }
static void test_e5m2_exhaustive(void **state) { check_exhaustive(&FMT_E5M2); }

/* Positive finite codes in increasing value order (codes are monotonic in value). */
static unsigned finite_codes(const fmt *F, unsigned *out)
{
    unsigned k = 0, half = 1u << (F->bits - 1);
    for (unsigned c = 0; c < half; c++) {
        double r = ref_decode(F, c);
        if (!isnan(r) && !isinf(r))
            out[k++] = c;
    }
    return k;
}

/* Encodes x and -x and checks both give code c (with the sign bit for -x). */
static void expect(const fmt *F, float x, unsigned c)
{
    unsigned sign = 1u << (F->bits - 1);
    unsigned got = F->encode(x), gotn = F->encode(-x);
    if (got != c || gotn != (c | sign))
        fail_msg("%s: %.10g -> 0x%x / -> 0x%x for the negative, expected 0x%x", F->name,
                 (double)x, got, gotn, c);
}

/* The midpoint between each pair of neighbours rounds to the even code; values just above and
 * below it go to the nearer neighbour. Includes 0 and the smallest subnormal. */
static void check_midpoints(const fmt *F)
{
    static unsigned codes[1u << 15];
    unsigned k = finite_codes(F, codes);
    for (unsigned i = 0; i + 1 < k; i++) {
        double a = ref_decode(F, codes[i]), b = ref_decode(F, codes[i + 1]);
        float mid = (float)((a + b) / 2);
        assert_true((double)mid == (a + b) / 2); /* exact in float */
        unsigned even = (codes[i] & 1u) ? codes[i + 1] : codes[i];
        expect(F, mid, even);
        expect(F, nextafterf(mid, INFINITY), codes[i + 1]);
        expect(F, nextafterf(mid, 0.0f), codes[i]);
    }
}

static void test_bf16_midpoints(void **state) { check_midpoints(&FMT_BF16); }
static void test_f16_midpoints(void **state) { check_midpoints(&FMT_F16); }
static void test_e4m3_midpoints(void **state) { check_midpoints(&FMT_E4M3); }
static void test_e5m2_midpoints(void **state)
{
    check_midpoints(&FMT_E5M2);
    check_midpoints(&FMT_E5M2_SAT);
}

/* Beyond the largest finite value: IEEE-like formats round to Inf from the midpoint between max
 * and the next power (ties to even: the "next" code has an even mantissa); E4M3 and the _sat
 * variant saturate. */
static void test_overflow_and_saturation(void **state)
{
    /* BF16: max 0x7f7f; midpoint to 2^128 */
    float mid_bf = (float)((0x1.fep127 + 0x1p128) / 2);
    assert_int_equal(thin_f32_to_bf16(nextafterf(mid_bf, 0)), 0x7f7f);
    assert_int_equal(thin_f32_to_bf16(mid_bf), 0x7f80);
    assert_int_equal(thin_f32_to_bf16(INFINITY), 0x7f80);
    assert_int_equal(thin_f32_to_bf16(-INFINITY), 0xff80);
    assert_int_equal(thin_f32_to_bf16(FLT_MAX), 0x7f80);
    /* F16: max 65504, midpoint 65520 */
    assert_int_equal(thin_f32_to_f16(65504.0f), 0x7bff);
    assert_int_equal(thin_f32_to_f16(nextafterf(65520.0f, 0)), 0x7bff);
    assert_int_equal(thin_f32_to_f16(65520.0f), 0x7c00);
    assert_int_equal(thin_f32_to_f16(-1e9f), 0xfc00);
    assert_int_equal(thin_f32_to_f16(INFINITY), 0x7c00);
    /* E5M2: max 57344, midpoint 61440 */
    assert_int_equal(thin_f32_to_e5m2(57344.0f), 0x7b);
    assert_int_equal(thin_f32_to_e5m2(nextafterf(61440.0f, 0)), 0x7b);
    assert_int_equal(thin_f32_to_e5m2(61440.0f), 0x7c);
    assert_int_equal(thin_f32_to_e5m2(-1e30f), 0xfc);
    assert_int_equal(thin_f32_to_e5m2(INFINITY), 0x7c);
    assert_int_equal(thin_f32_to_e5m2(-INFINITY), 0xfc);
    assert_int_equal(thin_f32_to_e5m2_sat(61440.0f), 0x7b);
    assert_int_equal(thin_f32_to_e5m2_sat(-1e30f), 0xfb);
    assert_int_equal(thin_f32_to_e5m2_sat(INFINITY), 0x7b);
    assert_int_equal(thin_f32_to_e5m2_sat(-INFINITY), 0xfb);
    assert_int_equal(thin_f32_to_e5m2_sat(FLT_MAX), 0x7b);
    /* E4M3: max 448 = 0x7e; everything beyond saturates, Inf included */
    assert_int_equal(thin_f32_to_e4m3(448.0f), 0x7e);
    assert_int_equal(thin_f32_to_e4m3(nextafterf(448.0f, INFINITY)), 0x7e);
    assert_int_equal(thin_f32_to_e4m3(464.0f), 0x7e);
    assert_int_equal(thin_f32_to_e4m3(480.0f), 0x7e);
    assert_int_equal(thin_f32_to_e4m3(1e6f), 0x7e);
    assert_int_equal(thin_f32_to_e4m3(FLT_MAX), 0x7e);
    assert_int_equal(thin_f32_to_e4m3(-FLT_MAX), 0xfe);
    assert_int_equal(thin_f32_to_e4m3(INFINITY), 0x7e);
    assert_int_equal(thin_f32_to_e4m3(-INFINITY), 0xfe);
    assert_int_equal(thin_f32_to_e4m3(nextafterf(432.0f, 0)), 0x7d); /* 416 */
}

static void test_nan_and_zero(void **state)
{
    float qn = NAN, nqn = -NAN;
    float sn = thin_f32_from_bits(0x7f800001u), nsn = thin_f32_from_bits(0xff800001u); /* signaling, low payload */
    assert_int_equal(thin_f32_to_e4m3(qn), 0x7f);
    assert_int_equal(thin_f32_to_e4m3(nqn), 0xff);
    assert_int_equal(thin_f32_to_e4m3(sn), 0x7f);
    assert_true(isnan(thin_bf16_to_f32(thin_f32_to_bf16(sn))));
    assert_true(signbit(thin_bf16_to_f32(thin_f32_to_bf16(nsn))));
    assert_true(isnan(thin_f16_to_f32(thin_f32_to_f16(sn))));
    assert_true(isnan(thin_f16_to_f32(thin_f32_to_f16(nsn))));
    assert_int_equal(thin_f32_to_f16(nsn) & 0x8000, 0x8000);
    assert_int_equal(thin_f32_to_e5m2(sn) & 0x7f, 0x7e);
    assert_int_equal(thin_f32_to_e5m2(nsn), 0xfe);
    assert_int_equal(thin_f32_to_e5m2_sat(qn), 0x7e);
    assert_int_equal(thin_f32_to_bf16(sn) & 0x7fc0, 0x7fc0);
    /* signed zeros */
    assert_int_equal(thin_f32_to_bf16(-0.0f), 0x8000);
    assert_int_equal(thin_f32_to_f16(-0.0f), 0x8000);
    assert_int_equal(thin_f32_to_e4m3(-0.0f), 0x80);
    assert_int_equal(thin_f32_to_e5m2(-0.0f), 0x80);
    assert_true(signbit(thin_e4m3_to_f32(0x80)) && thin_e4m3_to_f32(0x80) == 0.0f);
    assert_true(signbit(thin_e5m2_to_f32(0x80)));
    assert_true(isnan(thin_e4m3_to_f32(0x7f)) && isnan(thin_e4m3_to_f32(0xff)));
    assert_true(isinf(thin_e5m2_to_f32(0x7c)) && !isnan(thin_e4m3_to_f32(0x7e)));
}

/* Subnormal boundaries of the targets and F32 subnormal inputs. */
static void test_subnormals(void **state)
{
    /* E4M3: smallest subnormal 2^-9, smallest normal 2^-6 */
    assert_int_equal(thin_f32_to_e4m3(0x1p-9f), 0x01);
    assert_int_equal(thin_f32_to_e4m3(0x1p-10f), 0x00);             /* tie to even: 0 */
    assert_int_equal(thin_f32_to_e4m3(nextafterf(0x1p-10f, 1)), 0x01);
    assert_int_equal(thin_f32_to_e4m3(0x1.8p-9f), 0x02);            /* tie 1.5 -> 2 */
    assert_int_equal(thin_f32_to_e4m3(0x1p-6f), 0x08);
    assert_int_equal(thin_f32_to_e4m3(0x7.8p-9f), 0x08);            /* 7.5 ulps rounds up into normal */
    assert_int_equal(thin_f32_to_e4m3(1e-30f), 0x00);
    assert_int_equal(thin_f32_to_e4m3(-1e-30f), 0x80);
    /* E5M2: smallest subnormal 2^-16; F16: 2^-24 */
    assert_int_equal(thin_f32_to_e5m2(0x1p-16f), 0x01);
    assert_int_equal(thin_f32_to_e5m2(0x1p-17f), 0x00);
    assert_int_equal(thin_f32_to_e5m2(0x1.8p-16f), 0x02);
    assert_int_equal(thin_f32_to_f16(0x1p-24f), 0x0001);
    assert_int_equal(thin_f32_to_f16(0x1p-25f), 0x0000);
    assert_int_equal(thin_f32_to_f16(nextafterf(0x1p-25f, 1)), 0x0001);
    assert_int_equal(thin_f32_to_f16(0x1.ff8p-15f), 0x03ff);       /* largest subnormal */
    assert_int_equal(thin_f32_to_f16(0x1.ffcp-15f), 0x0400);       /* tie rounds up to 2^-14 */
    /* F32 subnormal inputs */
    float tiny = thin_f32_from_bits(0x00000001u);
    assert_int_equal(thin_f32_to_f16(tiny), 0x0000);
    assert_int_equal(thin_f32_to_f16(-tiny), 0x8000);
    assert_int_equal(thin_f32_to_bf16(tiny), 0x0000);
    assert_int_equal(thin_f32_to_bf16(thin_f32_from_bits(0x00008000u)), 0x0000); /* tie to even */
    assert_int_equal(thin_f32_to_bf16(thin_f32_from_bits(0x00018000u)), 0x0002); /* tie to even */
    assert_int_equal(thin_f32_to_bf16(thin_f32_from_bits(0x00008001u)), 0x0001);
    assert_int_equal(thin_f32_to_bf16(thin_f32_from_bits(0x007fffffu)), 0x0080); /* up to smallest normal */
    assert_true(thin_bf16_to_f32(0x0001) == 0x1p-133f);
}

/* Reference rounding in double: nearest representable value of a format, ties to the even code,
 * beyond the top: Inf for IEEE-like formats (when |x| >= max + half an ulp), else saturation. */
static unsigned ref_encode(const fmt *F, const unsigned *codes, unsigned k, double x, int sat)
{
    unsigned sign = signbit(x) ? 1u << (F->bits - 1) : 0;
    double a = fabs(x);
    double top = ref_decode(F, codes[k - 1]), prev = ref_decode(F, codes[k - 2]);
    if (a >= top + (top - prev) / 2 && F->has_inf && !sat)
        return sign | (((1u << F->ebits) - 1) << F->mbits);
    if (a >= top)
        return sign | codes[k - 1];
    unsigned lo = 0, hi = k - 1; /* largest i with value(codes[i]) <= a */
    while (hi - lo > 1) {
        unsigned m = (lo + hi) / 2;
        if (ref_decode(F, codes[m]) <= a) lo = m; else hi = m;
    }
    double vl = ref_decode(F, codes[lo]), vh = ref_decode(F, codes[lo + 1]);
    double dl = a - vl, dh = vh - a;
    unsigned c = dl < dh ? codes[lo] : dh < dl ? codes[lo + 1]
                 : (codes[lo] & 1u) ? codes[lo + 1] : codes[lo];
    return sign | c;
}

/* Random floats (all bit patterns, and ones scaled into the format's range) against the
 * double-precision reference. */
static void check_random(const fmt *F, int sat, unsigned n)
{
    static unsigned codes[1u << 15];
    unsigned k = finite_codes(F, codes);
    for (unsigned i = 0; i < n; i++) {
        float x;
        if (i & 1) {
            x = thin_f32_from_bits(rng32());
            if (isnan(x))
                continue;
        } else {
            double t = ldexp((double)(rng32() & 0xffffff), -24); /* [0, 1) */
            x = (float)ldexp(t, (int)(rng32() % 40u) - 30 + (F->max > 1e5 ? 10 : 0));
            if (rng32() & 1) x = -x;
        }
        unsigned want = ref_encode(F, codes, k, (double)x, sat);
        if (isinf(x) && !F->has_inf)
            want = (signbit(x) ? 1u << (F->bits - 1) : 0) | codes[k - 1];
        if (isinf(x) && F->has_inf && sat)
            want = (signbit(x) ? 1u << (F->bits - 1) : 0) | codes[k - 1];
        unsigned got = F->encode(x);
        if (got != want)
            fail_msg("%s: %a -> 0x%x, reference 0x%x", F->name, (double)x, got, want);
    }
}

static void test_random_against_double(void **state)
{
    check_random(&FMT_BF16, 0, 2000000);
    check_random(&FMT_F16, 0, 500000);
    check_random(&FMT_E4M3, 1, 500000);
    check_random(&FMT_E5M2, 0, 500000);
    check_random(&FMT_E5M2_SAT, 1, 500000);
}

static void test_names_and_sizes(void **state)
{
    static const char *names[] = {"F64", "F32", "F16", "BF16", "F8_E4M3", "F8_E5M2", "I64",
                                  "I32", "I16", "I8", "U8", "BOOL", "U16", "U32", "U64"};
    static const size_t sizes[] = {8, 4, 2, 2, 1, 1, 8, 4, 2, 1, 1, 1, 2, 4, 8};
    for (int t = 1; t < THIN_DTYPE_COUNT_; t++) {
        assert_string_equal(thin_dtype_name((thin_dtype)t), names[t - 1]);
        assert_int_equal(thin_dtype_size((thin_dtype)t), sizes[t - 1]);
        assert_int_equal(thin_dtype_from_name(names[t - 1]), t);
    }
    assert_int_equal(thin_dtype_from_name("bf16"), THIN_DTYPE_BF16);
    assert_int_equal(thin_dtype_from_name("f8_e4m3"), THIN_DTYPE_F8_E4M3);
    assert_int_equal(thin_dtype_from_name("Bool"), THIN_DTYPE_BOOL);
    assert_int_equal(thin_dtype_from_name("F8"), THIN_DTYPE_INVALID);
    assert_int_equal(thin_dtype_from_name(""), THIN_DTYPE_INVALID);
    assert_int_equal(thin_dtype_from_name(NULL), THIN_DTYPE_INVALID);
    assert_string_equal(thin_dtype_name(THIN_DTYPE_INVALID), "INVALID");
    assert_string_equal(thin_dtype_name((thin_dtype)99), "INVALID");
    assert_int_equal(thin_dtype_size((thin_dtype)99), 0);
    assert_int_equal(thin_dtype_size(THIN_DTYPE_INVALID), 0);
}

/* ---- thin_convert ---- */

static const thin_dtype FLOATS[] = {THIN_DTYPE_F64, THIN_DTYPE_F32, THIN_DTYPE_F16,
                                    THIN_DTYPE_BF16, THIN_DTYPE_F8_E4M3, THIN_DTYPE_F8_E5M2};

/* Scalar expectation for one element: the value as a double, then narrowed by the scalar
 * routines (the inputs below are floats, so one rounding from float is exact). */
static void put(void *buf, thin_dtype t, size_t i, float v)
{
    switch (t) {
    case THIN_DTYPE_F64: ((double *)buf)[i] = v; break;
    case THIN_DTYPE_F32: ((float *)buf)[i] = v; break;
    case THIN_DTYPE_F16: ((uint16_t *)buf)[i] = thin_f32_to_f16(v); break;
    case THIN_DTYPE_BF16: ((uint16_t *)buf)[i] = thin_f32_to_bf16(v); break;
    case THIN_DTYPE_F8_E4M3: ((uint8_t *)buf)[i] = thin_f32_to_e4m3(v); break;
    default: ((uint8_t *)buf)[i] = thin_f32_to_e5m2(v); break;
    }
}

static float get(const void *buf, thin_dtype t, size_t i)
{
    switch (t) {
    case THIN_DTYPE_F64: return (float)((const double *)buf)[i];
    case THIN_DTYPE_F32: return ((const float *)buf)[i];
    case THIN_DTYPE_F16: return thin_f16_to_f32(((const uint16_t *)buf)[i]);
    case THIN_DTYPE_BF16: return thin_bf16_to_f32(((const uint16_t *)buf)[i]);
    case THIN_DTYPE_F8_E4M3: return thin_e4m3_to_f32(((const uint8_t *)buf)[i]);
    default: return thin_e5m2_to_f32(((const uint8_t *)buf)[i]);
    }
}

static void test_convert_every_pair(void **state)
{
    enum { N = 3001 }; /* not a multiple of any block or vector width */
    static float vals[N];
    static unsigned char src[N * 8], dst[N * 8 + 1], want[N * 8];
    for (size_t i = 0; i < N; i++) {
        float x = (float)ldexp((double)(rng32() & 0xffffff) / 0x1p24, (int)(rng32() % 24u) - 12);
        vals[i] = (rng32() & 1) ? -x : x;
    }
    vals[0] = NAN; vals[1] = INFINITY; vals[2] = -0.0f; vals[3] = 1e6f; vals[4] = 0x1p-20f;
    for (size_t a = 0; a < 6; a++)
        for (size_t b = 0; b < 6; b++) {
            thin_dtype st = FLOATS[a], dt = FLOATS[b];
            for (size_t i = 0; i < N; i++)
                put(src, st, i, vals[i]);
            for (size_t i = 0; i < N; i++)
                put(want, dt, i, get(src, st, i));
            memset(dst, 0xcd, sizeof dst);
            assert_int_equal(thin_convert(dst, dt, src, st, N), THIN_OK);
            size_t bytes = N * thin_dtype_size(dt);
            for (size_t i = 0; i < N; i++) {
                float g = get(dst, dt, i), w = get(want, dt, i);
                if (isnan(w) ? !isnan(g) : thin_f32_bits(g) != thin_f32_bits(w))
                    fail_msg("%s -> %s element %zu: %a vs %a", thin_dtype_name(st),
                             thin_dtype_name(dt), i, (double)g, (double)w);
            }
            assert_int_equal(dst[bytes], 0xcd); /* nothing written past the end */
        }
}

/* The bulk F16 paths (F16C when built with it) give the scalar routines' bits. */
static void test_convert_f16_bulk_matches_scalar(void **state)
{
    static uint16_t h[65536], back[65536];
    static float f[65536];
    for (unsigned i = 0; i < 65536; i++)
        h[i] = (uint16_t)i;
    assert_int_equal(thin_convert(f, THIN_DTYPE_F32, h, THIN_DTYPE_F16, 65536), THIN_OK);
    for (unsigned i = 0; i < 65536; i++)
        assert_int_equal(thin_f32_bits(f[i]), thin_f32_bits(thin_f16_to_f32((uint16_t)i)));
    for (unsigned round = 0; round < 40; round++) {
        for (unsigned i = 0; i < 65536; i++) {
            uint32_t u = rng32();
            f[i] = (round & 1) ? thin_f32_from_bits(u) : (float)ldexp((double)(u >> 8), -(int)(round + 10));
        }
        assert_int_equal(thin_convert(back, THIN_DTYPE_F16, f, THIN_DTYPE_F32, 65536), THIN_OK);
        for (unsigned i = 0; i < 65536; i++)
            if (back[i] != thin_f32_to_f16(f[i]))
                fail_msg("f16 bulk %a -> 0x%x, scalar 0x%x", (double)f[i], back[i],
                         thin_f32_to_f16(f[i]));
    }
}

static void test_convert_bf16_bulk_matches_scalar(void **state)
{
    static uint32_t u[65536];
    static uint16_t h[65536];
    static float f[65536];
    for (unsigned i = 0; i < 65536; i++)
        u[i] = rng32();
    u[0] = 0x7f800001u; u[1] = 0xffc00000u; u[2] = 0x00008000u; u[3] = 0x7f7fffffu;
    assert_int_equal(thin_convert(h, THIN_DTYPE_BF16, u, THIN_DTYPE_F32, 65536), THIN_OK);
    for (unsigned i = 0; i < 65536; i++)
        assert_int_equal(h[i], thin_f32_to_bf16(thin_f32_from_bits(u[i])));
    for (unsigned i = 0; i < 65536; i++)
        h[i] = (uint16_t)i;
    assert_int_equal(thin_convert(f, THIN_DTYPE_F32, h, THIN_DTYPE_BF16, 65536), THIN_OK);
    for (unsigned i = 0; i < 65536; i++)
        assert_int_equal(thin_f32_bits(f[i]), thin_f32_bits(thin_bf16_to_f32((uint16_t)i)));
}

/* F64 sources round once, from the double, not twice through float. */
static void test_convert_f64_rounds_once(void **state)
{
    double d[4] = {1.0 + 0x1p-8 + 0x1p-30, 1.0 + 0x1p-11 + 0x1p-40, 1.0 + 0x1p-4 + 0x1p-35, 1e300};
    uint16_t b;
    uint8_t e;
    assert_int_equal(thin_convert(&b, THIN_DTYPE_BF16, &d[0], THIN_DTYPE_F64, 1), THIN_OK);
    assert_int_equal(b, 0x3f81); /* 1 + 2^-7, not the tie result 1.0 */
    assert_int_equal(thin_convert(&b, THIN_DTYPE_F16, &d[1], THIN_DTYPE_F64, 1), THIN_OK);
    assert_int_equal(b, 0x3c01);
    assert_int_equal(thin_convert(&e, THIN_DTYPE_F8_E4M3, &d[2], THIN_DTYPE_F64, 1), THIN_OK);
    assert_int_equal(e, 0x39); /* 1.125 */
    assert_int_equal(thin_convert(&b, THIN_DTYPE_F16, &d[3], THIN_DTYPE_F64, 1), THIN_OK);
    assert_int_equal(b, 0x7c00);
    assert_int_equal(thin_convert(&e, THIN_DTYPE_F8_E4M3, &d[3], THIN_DTYPE_F64, 1), THIN_OK);
    assert_int_equal(e, 0x7e);
    float f;
    assert_int_equal(thin_convert(&f, THIN_DTYPE_F32, &d[3], THIN_DTYPE_F64, 1), THIN_OK);
    assert_true(isinf(f));
}

static void test_convert_in_place_and_errors(void **state)
{
    enum { N = 2500 };
    static uint16_t buf[N], orig[N];
    for (size_t i = 0; i < N; i++)
        buf[i] = orig[i] = thin_f32_to_f16((float)i * 0.37f - 400.0f);
    assert_int_equal(thin_convert(buf, THIN_DTYPE_BF16, buf, THIN_DTYPE_F16, N), THIN_OK);
    for (size_t i = 0; i < N; i++)
        assert_int_equal(buf[i], thin_f32_to_bf16(thin_f16_to_f32(orig[i])));
    int32_t ints[4] = {0};
    float out[4];
    assert_int_equal(thin_convert(out, THIN_DTYPE_F32, ints, THIN_DTYPE_I32, 4), THIN_E_DTYPE);
    assert_int_equal(thin_convert(ints, THIN_DTYPE_U8, out, THIN_DTYPE_F32, 4), THIN_E_DTYPE);
    assert_int_equal(thin_convert(out, THIN_DTYPE_F32, out, THIN_DTYPE_INVALID, 4), THIN_E_DTYPE);
    assert_int_equal(thin_convert(NULL, THIN_DTYPE_F32, out, THIN_DTYPE_F16, 0), THIN_OK);
    assert_int_equal(thin_convert(NULL, THIN_DTYPE_F32, out, THIN_DTYPE_F16, 4),
                     THIN_E_INVALID_ARG);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_names_and_sizes),
        cmocka_unit_test(test_bf16_exhaustive),
        cmocka_unit_test(test_f16_exhaustive),
        cmocka_unit_test(test_e4m3_exhaustive),
        cmocka_unit_test(test_e5m2_exhaustive),
        cmocka_unit_test(test_bf16_midpoints),
        cmocka_unit_test(test_f16_midpoints),
        cmocka_unit_test(test_e4m3_midpoints),
        cmocka_unit_test(test_e5m2_midpoints),
        cmocka_unit_test(test_overflow_and_saturation),
        cmocka_unit_test(test_nan_and_zero),
        cmocka_unit_test(test_subnormals),
        cmocka_unit_test(test_random_against_double),
        cmocka_unit_test(test_convert_every_pair),
        cmocka_unit_test(test_convert_f16_bulk_matches_scalar),
        cmocka_unit_test(test_convert_bf16_bulk_matches_scalar),
        cmocka_unit_test(test_convert_f64_rounds_once),
        cmocka_unit_test(test_convert_in_place_and_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
