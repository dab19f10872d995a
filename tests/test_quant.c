/*
 * test_quant.c — thin-quant's row quantizer: error bounds against the source, the absmax and mse
 * scale rules (mse never worse than absmax on any row), saturation, zero rows, NaN/Inf detection,
 * F16/BF16 sources, determinism across thread counts, and the BF16 narrowing with its statistics.
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

#include "../tools/thin-quant/quant.h"
#include "thin.h"

static uint64_t rng = 0x243f6a8885a308d3ull;

static const tq_scale_method methods[2] = {TQ_SCALE_ABSMAX, TQ_SCALE_MSE};

static double uniform(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (double)(rng >> 11) * 0x1p-53;
}

static double gaussian(void)
{
    double u = uniform() + 1e-300, v = uniform();
    return sqrt(-2 * log(u)) * cos(2 * M_PI * v);
}

/* rows × cols of random data; each row has its own magnitude, some rows heavy-tailed. */
static float *random_matrix(size_t rows, size_t cols)
{
    float *w = malloc(rows * cols * sizeof *w);
    assert_non_null(w);
    for (size_t r = 0; r < rows; r++) {
        double mag = pow(10.0, uniform() * 6 - 3);
        for (size_t j = 0; j < cols; j++) {
            double g = gaussian();
            if (r % 3 == 2 && uniform() < 0.01)
                g *= 20; /* outliers */
            w[r * cols + j] = (float)(g * mag);
        }
    }
    return w;
}

/* Half an E4M3 ulp at the magnitude of v (v in code units, |v| <= 448). */
static double e4m3_half_ulp(double v)
{
    double a = fabs(v);
    if (a < 0x1p-6)
        return 0x1p-10;
    int e;
    frexp(a, &e); /* a = m * 2^e, m in [0.5, 1) */
    return ldexp(1.0, e - 1 - 3) / 2;
}

static void test_error_bounds_random(void **state)
{
    size_t rows = 97, cols = 515;
    float *w = random_matrix(rows, cols);
    uint8_t *q = malloc(rows * cols);
    float *scales = malloc(rows * sizeof *scales);
    tq_stats st = {0};
    assert_int_equal(tq_quantize_rows(w, THIN_DTYPE_F32, rows, cols, TQ_SCALE_ABSMAX, q, scales, 2,
                                      &st, NULL), TQ_OK);
    double max_err = 0;
    for (size_t r = 0; r < rows; r++) {
        float amax = 0;
        for (size_t j = 0; j < cols; j++)
            amax = fmaxf(amax, fabsf(w[r * cols + j]));
        assert_true(scales[r] == amax / 448.0f);
        for (size_t j = 0; j < cols; j++) {
            double x = w[r * cols + j], d = (double)thin_e4m3_to_f32(q[r * cols + j]) * scales[r];
            double bound = e4m3_half_ulp(x / scales[r]) * scales[r] * (1 + 1e-6);
            double err = fabs(d - x);
            if (err > bound)
                fail_msg("row %zu col %zu: %g -> %g, error %g > %g", r, j, x, d, err, bound);
            if (err > max_err)
                max_err = err;
        }
    }
    assert_int_equal(st.count, rows * cols);
    double rel = tq_stats_rel_rms(&st);
    assert_true(rel > 0.005 && rel < 0.04);
    assert_true(tq_stats_cosine(&st) > 0.999);
    assert_true(fabs(st.max_abs_err - max_err) <= max_err * 1e-6);
    free(w);
    free(q);
    free(scales);
}

/* The largest element of each row maps to ±448 exactly. */
static void test_row_max_saturates_to_448(void **state)
{
    float w[2][4] = {{0.5f, -3.0f, 1.0f, 2.0f}, {7.0f, 1e-3f, -7.0f, 0.0f}};
    uint8_t q[8];
    float s[2];
    assert_int_equal(tq_quantize_rows(w, THIN_DTYPE_F32, 2, 4, TQ_SCALE_ABSMAX, q, s, 1, NULL, NULL),
                     TQ_OK);
    assert_true(s[0] == 3.0f / 448.0f);
    assert_int_equal(q[1], 0xfe);
    assert_int_equal(q[4], 0x7e);
    assert_int_equal(q[6], 0xfe);
    assert_int_equal(q[7], 0x00);
    assert_true(thin_e4m3_to_f32(q[0]) * s[0] == thin_e4m3_to_f32(thin_f32_to_e4m3(0.5f / s[0])) * s[0]);
}

static void test_zero_row_gets_scale_one(void **state)
{
    for (int m = 0; m < 2; m++) {
        float w[3][5] = {{0}, {1, 2, 3, 4, 5}, {-0.0f, 0, 0, 0, 0}};
        uint8_t q[15];
        float s[3];
        tq_stats st = {0};
        assert_int_equal(tq_quantize_rows(w, THIN_DTYPE_F32, 3, 5, methods[m], q, s, 2, &st, NULL),
                         TQ_OK);
        assert_true(s[0] == 1.0f && s[2] == 1.0f);
        for (int j = 0; j < 5; j++) {
            assert_true(thin_e4m3_to_f32(q[j]) == 0.0f);
            assert_true(thin_e4m3_to_f32(q[10 + j]) * s[2] == 0.0f);
        }
        /* all-zero tensor: no error, cosine 1 */
        tq_stats z = {0};
        float zeros[8] = {0};
        assert_int_equal(tq_quantize_rows(zeros, THIN_DTYPE_F32, 2, 4, methods[m], q, s, 1, &z,
                                          NULL), TQ_OK);
        assert_true(tq_stats_rel_rms(&z) == 0.0 && tq_stats_cosine(&z) == 1.0);
    }
}

static void test_tiny_row_scale(void **state)
{
    float w[4] = {1e-44f, -2e-45f, 0, 1e-45f};
    uint8_t q[4];
    float s[1];
    for (int m = 0; m < 2; m++) {
        assert_int_equal(tq_quantize_rows(w, THIN_DTYPE_F32, 1, 4, methods[m], q, s, 1, NULL,
                                          NULL), TQ_OK);
        assert_true(s[0] > 0 && isfinite(s[0]));
        assert_true(s[0] == tq_row_scale(1e-44f)); /* mse keeps a subnormal absmax scale */
        for (int j = 0; j < 4; j++)
            assert_true(isfinite(thin_e4m3_to_f32(q[j]) * s[0]));
    }
    assert_true(tq_row_scale(0) == 1.0f);
    assert_true(tq_row_scale(448.0f) == 1.0f);
}

static void test_nonfinite_is_reported(void **state)
{
    size_t rows = 10, cols = 33;
    float *w = random_matrix(rows, cols);
    uint8_t *q = malloc(rows * cols);
    float s[10];
    size_t bad = 0;
    w[7 * cols + 5] = INFINITY;
    w[8 * cols + 1] = NAN;
    for (unsigned t = 1; t <= 3; t++) {
        assert_int_equal(tq_quantize_rows(w, THIN_DTYPE_F32, rows, cols, methods[t % 2], q, s, t,
                                          NULL, &bad), TQ_NONFINITE);
        assert_int_equal(bad, 7 * cols + 5);
    }
    w[7 * cols + 5] = 1;
    assert_int_equal(tq_quantize_rows(w, THIN_DTYPE_F32, rows, cols, TQ_SCALE_MSE, q, s, 2, NULL,
                                      &bad), TQ_NONFINITE);
    assert_int_equal(bad, 8 * cols + 1);
    uint16_t h[4] = {0x3c00, 0x7c00, 0, 0};
    assert_int_equal(tq_quantize_rows(h, THIN_DTYPE_F16, 1, 4, TQ_SCALE_MSE, q, s, 1, NULL, &bad),
                     TQ_NONFINITE);
    assert_int_equal(bad, 1);
    uint16_t b[4] = {0x3f80, 0, 0, 0xffc1};
    assert_int_equal(tq_quantize_rows(b, THIN_DTYPE_BF16, 2, 2, TQ_SCALE_ABSMAX, q, s, 1, NULL,
                                      &bad), TQ_NONFINITE);
    assert_int_equal(bad, 3);
    free(w);
    free(q);
}

static void test_bad_source_type(void **state)
{
    double d[4] = {0};
    uint8_t q[4];
    float s[1];
    assert_int_equal(tq_quantize_rows(d, THIN_DTYPE_F64, 1, 4, TQ_SCALE_MSE, q, s, 1, NULL, NULL),
                     TQ_BADTYPE);
    assert_int_equal(tq_quantize_rows(d, THIN_DTYPE_I32, 1, 4, TQ_SCALE_ABSMAX, q, s, 1, NULL,
                                      NULL), TQ_BADTYPE);
}

/* Same bytes and statistics for 1, 2, 3 and 8 threads, with either scale rule. */
static void test_deterministic_across_threads(void **state)
{
    size_t rows = 257, cols = 129;
    float *w = random_matrix(rows, cols);
    uint8_t *q1 = malloc(rows * cols), *qn = malloc(rows * cols);
    float *s1 = malloc(rows * sizeof(float)), *sn = malloc(rows * sizeof(float));
    for (int m = 0; m < 2; m++) {
        tq_stats a = {0};
        assert_int_equal(tq_quantize_rows(w, THIN_DTYPE_F32, rows, cols, methods[m], q1, s1, 1, &a,
                                          NULL), TQ_OK);
        unsigned counts[] = {2, 3, 8, 0};
        for (size_t k = 0; k < 4; k++) {
            tq_stats b = {0};
            assert_int_equal(tq_quantize_rows(w, THIN_DTYPE_F32, rows, cols, methods[m], qn, sn,
                                              counts[k], &b, NULL), TQ_OK);
            assert_memory_equal(q1, qn, rows * cols);
            assert_memory_equal(s1, sn, rows * sizeof(float));
            assert_memory_equal(&a, &b, sizeof a);
        }
    }
    free(w);
    free(q1);
    free(qn);
    free(s1);
    free(sn);
}

/* F16 and BF16 sources give what their F32 values give. */
static void test_half_sources_match_f32(void **state)
{
    size_t rows = 20, cols = 70, n = rows * cols;
    float *w = random_matrix(rows, cols), *wf = malloc(n * sizeof *wf);
    uint16_t *h = malloc(n * 2);
    uint8_t *qa = malloc(n), *qb = malloc(n);
    float sa[20], sb[20];
    thin_dtype types[2] = {THIN_DTYPE_F16, THIN_DTYPE_BF16};
    for (int k = 0; k < 2; k++) {
        assert_int_equal(thin_convert(h, types[k], w, THIN_DTYPE_F32, n), THIN_OK);
        assert_int_equal(thin_convert(wf, THIN_DTYPE_F32, h, types[k], n), THIN_OK);
        for (size_t i = 0; i < n; i++)
            if (!isfinite(wf[i]))
                wf[i] = 0, h[i] = 0; /* F16 overflow of the largest magnitudes */
        for (int m = 0; m < 2; m++) {
            assert_int_equal(tq_quantize_rows(h, types[k], rows, cols, methods[m], qa, sa, 2, NULL,
                                              NULL), TQ_OK);
            assert_int_equal(tq_quantize_rows(wf, THIN_DTYPE_F32, rows, cols, methods[m], qb, sb, 1,
                                              NULL, NULL), TQ_OK);
            assert_memory_equal(qa, qb, n);
            assert_memory_equal(sa, sb, sizeof sa);
        }
    }
    free(w);
    free(wf);
    free(h);
    free(qa);
    free(qb);
}

static void test_bf16_conversion(void **state)
{
    size_t n = 200003; /* several segments and a partial one */
    float *w = random_matrix(1, n);
    uint16_t *a = malloc(n * 2), *b = malloc(n * 2);
    tq_stats st = {0}, st2 = {0};
    assert_int_equal(tq_convert_bf16(w, THIN_DTYPE_F32, n, a, 2, &st, NULL), TQ_OK);
    assert_int_equal(thin_convert(b, THIN_DTYPE_BF16, w, THIN_DTYPE_F32, n), THIN_OK);
    assert_memory_equal(a, b, n * 2);
    assert_int_equal(st.count, n);
    assert_true(tq_stats_rel_rms(&st) < 0x1p-8 && tq_stats_rel_rms(&st) > 0);
    assert_true(tq_stats_cosine(&st) > 0.99999);
    assert_int_equal(tq_convert_bf16(w, THIN_DTYPE_F32, n, b, 5, &st2, NULL), TQ_OK);
    assert_memory_equal(&st, &st2, sizeof st);
    double *d = malloc(n * sizeof *d);
    for (size_t i = 0; i < n; i++)
        d[i] = w[i];
    d[150000] = -INFINITY;
    size_t bad = 0;
    assert_int_equal(tq_convert_bf16(d, THIN_DTYPE_F64, n, a, 2, NULL, &bad), TQ_NONFINITE);
    assert_int_equal(bad, 150000);
    assert_int_equal(tq_convert_bf16(a, THIN_DTYPE_BF16, 4, b, 1, NULL, NULL), TQ_BADTYPE);
    free(w);
    free(a);
    free(b);
    free(d);
}

/* With scale 1 (row maximum 448) the codes are exactly thin_f32_to_e4m3 of the values: every
 * representable value, every midpoint and its neighbours, random values, subnormals, zeros. */
static void test_codes_match_reference(void **state)
{
    enum { COLS = 4096 };
    float *w = malloc(COLS * sizeof *w);
    uint8_t *q = malloc(COLS);
    float s;
    size_t k = 0;
    w[k++] = 448.0f;
    for (unsigned c = 0; c < 0x7f; c++) {
        float a = thin_e4m3_to_f32((uint8_t)c), b = thin_e4m3_to_f32((uint8_t)(c + 1));
        float mid = (a + b) / 2;
        w[k++] = a;
        w[k++] = -a;
        if (c + 1 < 0x7f) {
            w[k++] = mid;
            w[k++] = -nextafterf(mid, 0);
            w[k++] = nextafterf(mid, INFINITY);
        }
    }
    w[k++] = -0.0f;
    w[k++] = 1e-30f;
    w[k++] = -0x1p-10f;
    w[k++] = 0x1.8p-10f;
    while (k < COLS)
        w[k++] = (float)((uniform() * 2 - 1) * ldexp(1.0, (int)(uniform() * 20) - 11));
    assert_int_equal(tq_quantize_rows(w, THIN_DTYPE_F32, 1, COLS, TQ_SCALE_ABSMAX, q, &s, 1, NULL,
                                      NULL), TQ_OK);
    assert_true(s == 1.0f);
    for (size_t j = 0; j < COLS; j++)
        if (q[j] != thin_f32_to_e4m3(w[j]))
            fail_msg("%a: code 0x%x, reference 0x%x", (double)w[j], q[j], thin_f32_to_e4m3(w[j]));
    free(w);
    free(q);
}

/* Squared error of row r as stored: Σ (code value · scale − w)², in index order. */
static double row_sq_err(const float *w, const uint8_t *q, float s, size_t cols)
{
    double sum = 0;
    for (size_t j = 0; j < cols; j++) {
        double e = (double)thin_e4m3_to_f32(q[j]) * s - w[j];
        sum += e * e;
    }
    return sum;
}

/* The mse rule on Gaussian rows of several widths and on the mixed-magnitude matrix: on every row
 * its squared error is at most absmax's; its scale is one of s0 · (1 + k/64), so no element
 * saturates; each element is still the nearest code (half-ulp bound); the statistics are those
 * of the stored rows; in total the error is clearly below absmax's (measured MSE ratios: 0.67 on
 * 64-wide rows, 0.92 on 2048-wide ones). */
static void test_mse_never_worse_than_absmax(void **state)
{
    struct { size_t rows, cols; double max_ratio; int gaussian; } cases[] = {
        {400, 64, 0.8, 1}, {40, 2048, 0.97, 1}, {97, 515, 1.0, 0}, {3, 11008, 1.0, 1}};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        size_t rows = cases[c].rows, cols = cases[c].cols, n = rows * cols;
        float *w = cases[c].gaussian ? malloc(n * sizeof *w) : random_matrix(rows, cols);
        assert_non_null(w);
        if (cases[c].gaussian)
            for (size_t i = 0; i < n; i++)
                w[i] = (float)(gaussian() * 0.02);
        uint8_t *qa = malloc(n), *qm = malloc(n);
        float *sa = malloc(rows * sizeof *sa), *sm = malloc(rows * sizeof *sm);
        tq_stats st = {0};
        assert_int_equal(tq_quantize_rows(w, THIN_DTYPE_F32, rows, cols, TQ_SCALE_ABSMAX, qa, sa, 2,
                                          NULL, NULL), TQ_OK);
        assert_int_equal(tq_quantize_rows(w, THIN_DTYPE_F32, rows, cols, TQ_SCALE_MSE, qm, sm, 2,
                                          &st, NULL), TQ_OK);
        double ea = 0, em = 0;
        for (size_t r = 0; r < rows; r++) {
            const float *x = w + r * cols;
            double a = row_sq_err(x, qa + r * cols, sa[r], cols);
            double m = row_sq_err(x, qm + r * cols, sm[r], cols);
            if (!(m <= a * (1 + 1e-12))) /* equal, or less, but for the rounding of the sums */
                fail_msg("case %zu row %zu: mse error %.17g > absmax error %.17g", c, r, m, a);
            int k = -1;
            for (int i = 0; i < TQ_MSE_STEPS; i++)
                if (sm[r] == sa[r] * ((float)(TQ_MSE_STEPS + i) / (float)TQ_MSE_STEPS))
                    k = i;
            if (k < 0)
                fail_msg("case %zu row %zu: scale %a is not a candidate of %a", c, r,
                         (double)sm[r], (double)sa[r]);
            for (size_t j = 0; j < cols; j++) {
                double d = (double)thin_e4m3_to_f32(qm[r * cols + j]) * sm[r];
                double bound = e4m3_half_ulp(x[j] / sm[r]) * sm[r] * (1 + 1e-6);
                if (fabs(d - x[j]) > bound)
                    fail_msg("case %zu row %zu col %zu: %g -> %g", c, r, j, (double)x[j], d);
            }
            ea += a, em += m;
        }
        assert_true(fabs(st.sum_sq_err - em) <= em * 1e-5); /* the statistics round d to F32 */
        if (em > ea * cases[c].max_ratio)
            fail_msg("case %zu: squared error ratio mse/absmax %.4f > %.2f", c, em / ea,
                     cases[c].max_ratio);
        free(w);
        free(qa);
        free(qm);
        free(sa);
        free(sm);
    }
}

/* A row on the E4M3 grid of a scale other than absmax's: codes {256, -192, 144, 13, 0} times
 * 2^-7. Its maximum maps to 448 under absmax (s0 = 2 / 448), where 192 · 448/256 = 336 falls
 * between codes; s0 · (1 + 48/64) is 2^-7 (to within an F32 rounding), where the row is exact. */
static void test_mse_finds_exact_scale(void **state)
{
    float w[5] = {256 * 0x1p-7f, -192 * 0x1p-7f, 144 * 0x1p-7f, 13 * 0x1p-7f, 0};
    uint8_t q[5];
    float sm, sa;
    assert_int_equal(tq_quantize_rows(w, THIN_DTYPE_F32, 1, 5, TQ_SCALE_ABSMAX, q, &sa, 1, NULL,
                                      NULL), TQ_OK);
    double ea = row_sq_err(w, q, sa, 5);
    assert_int_equal(tq_quantize_rows(w, THIN_DTYPE_F32, 1, 5, TQ_SCALE_MSE, q, &sm, 1, NULL, NULL),
                     TQ_OK);
    double em = row_sq_err(w, q, sm, 5);
    assert_true(ea > 1e-6);
    assert_true(em < 1e-9 * ea);
    assert_true(fabs(sm - 0x1p-7f) <= 0x1p-30f);
}

static void test_scale_names(void **state)
{
    tq_scale_method m = TQ_SCALE_ABSMAX;
    assert_int_equal(tq_scale_parse("mse", &m), 0);
    assert_int_equal(m, TQ_SCALE_MSE);
    assert_int_equal(tq_scale_parse("absmax", &m), 0);
    assert_int_equal(m, TQ_SCALE_ABSMAX);
    assert_int_equal(tq_scale_parse("max", &m), -1);
    assert_string_equal(tq_scale_name(TQ_SCALE_MSE), "mse");
    assert_string_equal(tq_method_name(TQ_SCALE_MSE), "fp8_e4m3_row_mse");
    assert_string_equal(tq_method_name(TQ_SCALE_ABSMAX), "fp8_e4m3_row_absmax");
}

static void test_stats_helpers(void **state)
{
    tq_stats a = {4, 4, 1, 3.5, 0.5, 2}, b = {0};
    tq_stats_merge(&b, &a);
    tq_stats_merge(&b, &a);
    assert_true(b.sum_sq_src == 8 && b.count == 4 && b.max_abs_err == 0.5);
    assert_true(fabs(tq_stats_rel_rms(&a) - 0.5) < 1e-12);
    assert_true(fabs(tq_stats_cosine(&a) - 3.5 / 4) < 1e-12);
    tq_stats only_err = {0, 1, 1, 0, 1, 1};
    assert_true(isinf(tq_stats_rel_rms(&only_err)));
    assert_true(tq_stats_cosine(&only_err) == 0.0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_error_bounds_random),
        cmocka_unit_test(test_row_max_saturates_to_448),
        cmocka_unit_test(test_zero_row_gets_scale_one),
        cmocka_unit_test(test_tiny_row_scale),
        cmocka_unit_test(test_nonfinite_is_reported),
        cmocka_unit_test(test_bad_source_type),
        cmocka_unit_test(test_deterministic_across_threads),
        cmocka_unit_test(test_half_sources_match_f32),
        cmocka_unit_test(test_bf16_conversion),
        cmocka_unit_test(test_codes_match_reference),
        cmocka_unit_test(test_mse_never_worse_than_absmax),
        cmocka_unit_test(test_mse_finds_exact_scale),
        cmocka_unit_test(test_scale_names),
        cmocka_unit_test(test_stats_helpers),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
