/* Unit tests of the logit comparison (tools/thin-compare/compare.c). */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "../tools/thin-compare/compare.h"

static void test_identical_rows(void **state) {
    (void)state;
    float a[4] = {1.0f, -2.0f, 3.5f, 0.0f};
    compare_row r;
    compare_rows(a, a, 4, &r);
    assert_true(fabs(r.cosine - 1.0) < 1e-12);
    assert_true(r.max_abs == 0.0 && r.finite);
    assert_int_equal(r.ref_top, 2);
    assert_int_equal(r.test_top, 2);
}

static void test_cosine_is_centered(void **state) {
    (void)state;
    /* a constant shift leaves softmax unchanged: centered cosine 1, max abs = the shift */
    float a[4] = {1.0f, -2.0f, 3.5f, 0.0f}, b[4] = {11.0f, 8.0f, 13.5f, 10.0f};
    compare_row r;
    compare_rows(a, b, 4, &r);
    assert_true(fabs(r.cosine - 1.0) < 1e-12);
    assert_true(fabs(r.max_abs - 10.0) < 1e-12);
    /* a reversed row is anti-correlated */
    float c[2] = {1.0f, -1.0f}, d[2] = {-1.0f, 1.0f};
    compare_rows(c, d, 2, &r);
    assert_true(fabs(r.cosine + 1.0) < 1e-12);
    assert_int_equal(r.ref_top, 0);
    assert_int_equal(r.test_top, 1);
}

static void test_known_cosine_value(void **state) {
    (void)state;
    /* centered: a = (-1, 0, 1), b = (-1, 1, 0): cos = 1 / 2 */
    float a[3] = {0.0f, 1.0f, 2.0f}, b[3] = {0.0f, 2.0f, 1.0f};
    compare_row r;
    compare_rows(a, b, 3, &r);
    assert_true(fabs(r.cosine - 0.5) < 1e-12);
}

static void test_nonfinite_and_constant_rows(void **state) {
    (void)state;
    float a[3] = {1.0f, NAN, 2.0f}, b[3] = {1.0f, 1.0f, 2.0f}, k[3] = {5, 5, 5};
    compare_row r;
    compare_rows(a, b, 3, &r);
    assert_false(r.finite);
    assert_true(r.cosine == 0.0);
    compare_rows(k, k, 3, &r);
    assert_true(r.cosine == 1.0);
    compare_rows(k, b, 3, &r);
    assert_true(r.cosine == 0.0);
}

static void test_summary(void **state) {
    (void)state;
    compare_summary s;
    compare_summary_init(&s);
    compare_row r1 = {0.99, 0.5, 3, 3, 1}, r2 = {0.9, 0.25, 1, 2, 1}, r3 = {1.0, 0.75, 0, 0, 1};
    compare_summary_add(&s, &r1, 0);
    compare_summary_add(&s, &r2, 1);
    compare_summary_add(&s, &r3, 2);
    assert_int_equal(s.rows, 3);
    assert_true(s.cosine_min == 0.9 && s.cosine_min_row == 1);
    assert_true(fabs(compare_summary_mean(&s) - (0.99 + 0.9 + 1.0) / 3) < 1e-12);
    assert_int_equal(s.top1_agree, 2);
    assert_true(s.max_abs == 0.75 && s.max_abs_row == 2);
    assert_int_equal(s.nonfinite, 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_identical_rows),
        cmocka_unit_test(test_cosine_is_centered),
        cmocka_unit_test(test_known_cosine_value),
        cmocka_unit_test(test_nonfinite_and_constant_rows),
        cmocka_unit_test(test_summary),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
