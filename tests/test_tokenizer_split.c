/*
 * test_tokenizer_split.c — a tokenizer.json Split pre-tokenizer with a String or a Regex pattern
 * and each behavior thin-run takes (Isolated, MergedWithPrevious, MergedWithNext, Contiguous):
 * the pieces it makes show in the ids of a BPE whose merges would cross them. A String pattern
 * is matched literally ("." is not "any character"); Gemma's pre-tokenizer (Split on " ",
 * MergedWithPrevious, after a normalizer that has replaced every space) changes nothing; Removed
 * and inverted splits are refused.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "../tools/thin-run/tokenizer.h"

/* ids: a 1, b 2, " " 3, "a " 4, " b" 5, "  " 6, "." 7, "a." 8, ".b" 9, "a b" 10, ▁ 11, "a▁" 12,
 * "a▁b" 13; every pair merges where the pieces allow. */
static tok *load(const char *normalizer, const char *pre, char *err, size_t errlen)
{
    char json[2048];
    snprintf(json, sizeof json,
             "{\"normalizer\": %s, \"pre_tokenizer\": %s, \"model\": {\"type\": \"BPE\", "
             "\"vocab\": {\"<unk>\": 0, \"a\": 1, \"b\": 2, \" \": 3, \"a \": 4, \" b\": 5, "
             "\"  \": 6, \".\": 7, \"a.\": 8, \".b\": 9, \"a b\": 10, \"\\u2581\": 11, "
             "\"a\\u2581\": 12, \"a\\u2581b\": 13}, \"merges\": [[\"a\", \" \"], [\" \", \"b\"], "
             "[\" \", \" \"], [\"a\", \".\"], [\".\", \"b\"], [\"a \", \"b\"], [\"a\", \"\\u2581\"], "
             "[\"a\\u2581\", \"b\"]]}}",
             normalizer, pre);
    tok *t = NULL;
    if (tok_load_hf(&t, json, strlen(json), NULL, 0, err, errlen))
        return NULL;
    return t;
}

static void expect(const char *pre, const char *text, const int32_t *want, size_t n)
{
    char err[256] = "";
    tok *t = load("null", pre, err, sizeof err);
    if (!t)
        fail_msg("load %s: %s", pre, err);
    int32_t *ids = NULL;
    size_t k = 0;
    if (tok_encode(t, text, strlen(text), 0, 0, &ids, &k, err, sizeof err))
        fail_msg("encode: %s", err);
    if (k != n)
        fail_msg("%s on '%s': %zu ids, want %zu", pre, text, k, n);
    for (size_t i = 0; i < n; i++)
        assert_int_equal(ids[i], want[i]);
    free(ids);
    tok_free(t);
}

#define SPLIT(pat, beh) "{\"type\": \"Split\", \"pattern\": " pat ", \"behavior\": \"" beh "\", \"invert\": false}"

static void test_behaviors(void **state)
{
    (void)state;
    const int32_t none[] = {10}, iso[] = {1, 3, 2}, prev[] = {4, 2}, next[] = {1, 5};
    expect("null", "a b", none, 1); /* no split: "a b" merges whole */
    expect(SPLIT("{\"String\": \" \"}", "Isolated"), "a b", iso, 3);
    expect(SPLIT("{\"String\": \" \"}", "MergedWithPrevious"), "a b", prev, 2);
    expect(SPLIT("{\"String\": \" \"}", "MergedWithNext"), "a b", next, 2);
    expect(SPLIT("{\"Regex\": \"\\\\s\"}", "MergedWithPrevious"), "a b", prev, 2);
    const int32_t two_iso[] = {1, 3, 3, 2}, two_cont[] = {1, 6, 2}, two_prev[] = {4, 3, 2};
    expect(SPLIT("{\"String\": \" \"}", "Isolated"), "a  b", two_iso, 4);
    expect(SPLIT("{\"String\": \" \"}", "Contiguous"), "a  b", two_cont, 3);
    expect(SPLIT("{\"String\": \" \"}", "MergedWithPrevious"), "a  b", two_prev, 3);
    /* a String is literal: "." splits at the dot only */
    const int32_t dot_iso[] = {1, 7, 2}, dot_prev[] = {8, 2}, dot_next[] = {1, 9};
    expect(SPLIT("{\"String\": \".\"}", "Isolated"), "a.b", dot_iso, 3);
    expect(SPLIT("{\"String\": \".\"}", "MergedWithPrevious"), "a.b", dot_prev, 2);
    expect(SPLIT("{\"String\": \".\"}", "MergedWithNext"), "a.b", dot_next, 2);
}

/* Gemma's normalizer and pre-tokenizer: spaces become ▁ before the split on " " */
static void test_gemma_form(void **state)
{
    (void)state;
    char err[256] = "";
    tok *t = load("{\"type\": \"Replace\", \"pattern\": {\"String\": \" \"}, \"content\": \"\\u2581\"}",
                  SPLIT("{\"String\": \" \"}", "MergedWithPrevious"), err, sizeof err);
    if (!t)
        fail_msg("load: %s", err);
    int32_t *ids = NULL;
    size_t k = 0;
    assert_int_equal(tok_encode(t, "a b", 3, 0, 0, &ids, &k, err, sizeof err), 0);
    assert_int_equal(k, 1);
    assert_int_equal(ids[0], 13);
    free(ids);
    tok_free(t);
}

static void test_refused(void **state)
{
    (void)state;
    char err[256];
    assert_null(load("null", SPLIT("{\"String\": \" \"}", "Removed"), err, sizeof err));
    assert_non_null(strstr(err, "Split pre-tokenizer"));
    assert_null(load("null", "{\"type\": \"Split\", \"pattern\": {\"String\": \" \"}, \"behavior\": "
                             "\"Isolated\", \"invert\": true}", err, sizeof err));
    assert_null(load("null", SPLIT("{\"String\": \"\"}", "Isolated"), err, sizeof err));
    assert_null(load("null", SPLIT("{\"String\": \"a\\u0000\"}", "Isolated"), err, sizeof err));
    assert_non_null(strstr(err, "NUL"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_behaviors),
        cmocka_unit_test(test_gemma_form),
        cmocka_unit_test(test_refused),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
