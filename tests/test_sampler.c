/* Unit tests of the sampler (tools/thin-run/sampler.c). */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <cmocka.h>

#include "../tools/thin-run/sampler.h"

static void test_greedy_takes_lowest_index_on_ties(void **state) {
    (void)state;
    sampler s;
    float l[5] = {0.5f, 2.0f, -1.0f, 2.0f, 1.0f};
    assert_int_equal(sampler_init(&s, 5, 0.0f, 0, 1.0f, 1), 0);
    assert_int_equal(sampler_sample(&s, l), 1);
    sampler_free(&s);
}

static void test_bad_parameters_are_refused(void **state) {
    (void)state;
    sampler s;
    assert_int_equal(sampler_init(&s, 5, -1.0f, 0, 1.0f, 1), -1);
    assert_int_equal(sampler_init(&s, 5, 1.0f, 0, 0.0f, 1), -1);
    assert_int_equal(sampler_init(&s, 5, 1.0f, 0, 1.5f, 1), -1);
    assert_int_equal(sampler_init(&s, 0, 1.0f, 0, 1.0f, 1), -1);
}

static void test_prng_is_pinned(void **state) {
    (void)state;
    /* splitmix64 seeded with 42: these values must never change across machines or releases. */
    sampler s;
    assert_int_equal(sampler_init(&s, 4, 1.0f, 0, 1.0f, 42), 0);
    float c0 = sampler_coin(&s), c1 = sampler_coin(&s);
    assert_true(c0 >= 0.0f && c0 < 1.0f && c1 >= 0.0f && c1 < 1.0f);
    sampler t;
    assert_int_equal(sampler_init(&t, 4, 1.0f, 0, 1.0f, 42), 0);
    assert_true(sampler_coin(&t) == c0 && sampler_coin(&t) == c1);
    /* first output of splitmix64(42) is 0xBDD732262FEB6E95 */
    assert_true(c0 == (float)(0xBDD732262FEB6E95ull >> 40) * 0x1p-24f);
    sampler_free(&s);
    sampler_free(&t);
}

static void test_pick_follows_cumulative_probabilities(void **state) {
    (void)state;
    sampler s;
    float l[3] = {logf(0.2f), logf(0.5f), logf(0.3f)};
    assert_int_equal(sampler_init(&s, 3, 1.0f, 0, 1.0f, 7), 0);
    /* unsorted order without trimming: id 0 covers [0, .2), id 1 [.2, .7), id 2 [.7, 1) */
    assert_int_equal(sampler_pick(&s, l, 0.1f), 0);
    assert_int_equal(sampler_pick(&s, l, 0.5f), 1);
    assert_int_equal(sampler_pick(&s, l, 0.9f), 2);
    sampler_free(&s);
}

static void test_top_k_and_top_p_trim(void **state) {
    (void)state;
    sampler s;
    float l[4] = {logf(0.1f), logf(0.4f), logf(0.15f), logf(0.35f)};
    assert_int_equal(sampler_init(&s, 4, 1.0f, 1, 1.0f, 7), 0);
    for (int i = 0; i < 10; i++) assert_int_equal(sampler_pick(&s, l, (float)i / 10.0f), 1);
    sampler_free(&s);
    assert_int_equal(sampler_init(&s, 4, 1.0f, 2, 1.0f, 7), 0);
    for (int i = 0; i < 10; i++) {
        int32_t t = sampler_pick(&s, l, (float)i / 10.0f);
        assert_true(t == 1 || t == 3);
    }
    sampler_free(&s);
    /* top-p 0.7: sorted 0.4, 0.35 reach 0.75 >= 0.7, so only ids 1 and 3 */
    assert_int_equal(sampler_init(&s, 4, 1.0f, 0, 0.7f, 7), 0);
    for (int i = 0; i < 100; i++) {
        int32_t t = sampler_sample(&s, l);
        assert_true(t == 1 || t == 3);
    }
    assert_int_equal(sampler_pick(&s, l, 0.0f), 1);
    assert_int_equal(sampler_pick(&s, l, 0.99f), 3);
    sampler_free(&s);
}

static void test_frequencies_match_the_distribution(void **state) {
    (void)state;
    sampler s;
    float l[3] = {0.0f, 1.0f, 2.0f};
    double z = 1 + exp(1) + exp(2);
    int count[3] = {0, 0, 0}, n = 60000;
    assert_int_equal(sampler_init(&s, 3, 1.0f, 0, 1.0f, 123), 0);
    for (int i = 0; i < n; i++) count[sampler_sample(&s, l)]++;
    for (int i = 0; i < 3; i++) assert_true(fabs(count[i] / (double)n - exp(i) / z) < 0.01);
    sampler_free(&s);
    /* a low temperature sharpens: almost always the largest */
    assert_int_equal(sampler_init(&s, 3, 0.05f, 0, 1.0f, 123), 0);
    int top = 0;
    for (int i = 0; i < 1000; i++) top += sampler_sample(&s, l) == 2;
    assert_true(top > 990);
    sampler_free(&s);
}

/* Logits that hold a NaN or +infinity, or are all -infinity, leave no candidate: -1 (no read
 * outside the candidates), with and without trimming; finite logits with some -infinity still
 * draw among the finite ones. */
static void test_no_candidate_is_reported(void **state) {
    (void)state;
    sampler s;
    const float bad[4][4] = {{1.0f, NAN, 0.5f, 2.0f},
                             {NAN, NAN, NAN, NAN},
                             {1.0f, INFINITY, 0.5f, 2.0f},
                             {-INFINITY, -INFINITY, -INFINITY, -INFINITY}};
    const uint32_t ks[3] = {0, 2, 0};
    const float ps[3] = {1.0f, 1.0f, 0.9f};
    for (int t = 0; t < 3; t++) {
        assert_int_equal(sampler_init(&s, 4, 0.8f, ks[t], ps[t], 3), 0);
        for (int r = 0; r < 4; r++) {
            assert_int_equal(sampler_pick(&s, bad[r], 0.5f), -1);
            assert_int_equal(sampler_sample(&s, bad[r]), -1);
        }
        const float some[4] = {-INFINITY, 1.0f, -INFINITY, 1.0f};
        for (int i = 0; i < 20; i++) {
            const int32_t id = sampler_sample(&s, some);
            assert_true(id == 1 || id == 3);
        }
        sampler_free(&s);
    }
    sampler_cand c[1] = {{0.0f, 0}};
    assert_int_equal(sampler_draw(c, 0, 0, 1.0f, 0.5f), -1);
    assert_int_equal(sampler_draw(c, 1, 0, 1.0f, 0.5f), -1); /* mass 0 */
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_greedy_takes_lowest_index_on_ties),
        cmocka_unit_test(test_bad_parameters_are_refused),
        cmocka_unit_test(test_prng_is_pinned),
        cmocka_unit_test(test_pick_follows_cumulative_probabilities),
        cmocka_unit_test(test_top_k_and_top_p_trim),
        cmocka_unit_test(test_frequencies_match_the_distribution),
        cmocka_unit_test(test_no_candidate_is_reported),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
