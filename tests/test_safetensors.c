/* test_safetensors.c — the strict SafeTensors parser: valid images and each rule it enforces. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "../tools/thin-pack/safetensors.h"

/* Builds "u64 len | header | data" in a static buffer; returns its size. */
static uint8_t img[4096];
static size_t make_image(const char *header, size_t data_len)
{
    size_t n = strlen(header);
    for (int i = 0; i < 8; i++)
        img[i] = (uint8_t)((uint64_t)n >> (8 * i));
    memcpy(img + 8, header, n);
    memset(img + 8 + n, 0x5a, data_len);
    return 8 + n + data_len;
}

static int parse(const char *header, size_t data_len, char *err, size_t errlen)
{
    st_header h;
    size_t n = make_image(header, data_len);
    int rc = st_parse_memory(img, n, "x.safetensors", &h, err, errlen);
    if (rc == 0)
        st_header_free(&h);
    return rc;
}

static void expect_error(const char *header, size_t data_len, const char *needle)
{
    char err[512] = "";
    assert_int_equal(parse(header, data_len, err, sizeof err), -1);
    if (!strstr(err, needle) || !strstr(err, "x.safetensors"))
        fail_msg("message '%s' lacks '%s'", err, needle);
}

#define T(name, dt, shape, b, e) \
    "\"" name "\": {\"dtype\": \"" dt "\", \"shape\": " shape ", \"data_offsets\": [" #b ", " #e "]}"

static void test_valid_image_sorted_by_offset(void **state)
{
    st_header h;
    char err[256];
    size_t n = make_image("{\"__metadata__\": {\"format\": \"pt\"}, " T("b", "BF16", "[4]", 16, 24)
                          ", " T("a", "F32", "[2, 2]", 0, 16) ", " T("e", "I8", "[0, 3]", 24, 24)
                          "}   ", 24);
    assert_int_equal(st_parse_memory(img, n, "x", &h, err, sizeof err), 0);
    assert_int_equal(h.n_tensors, 3);
    assert_string_equal(h.tensors[0].name, "a");
    assert_int_equal(h.tensors[0].dtype, THIN_DTYPE_F32);
    assert_int_equal(h.tensors[0].rank, 2);
    assert_string_equal(h.tensors[1].name, "b");
    assert_int_equal(h.tensors[1].begin, 16);
    assert_int_equal(h.data_size, 24);
    assert_non_null(h.metadata);
    assert_string_equal(json_string_value(json_object_get(h.metadata, "format")), "pt");
    assert_int_equal(st_header_find(&h, "e"), 2);
    assert_int_equal(st_header_find(&h, "z"), -1);
    st_header_free(&h);
    (void)state;
}

static void test_scalar_and_empty_header(void **state)
{
    char err[256];
    assert_int_equal(parse("{" T("s", "F64", "[]", 0, 8) "}", 8, err, sizeof err), 0);
    assert_int_equal(parse("{}", 0, err, sizeof err), 0);
    (void)state;
}

static void test_every_dtype_name(void **state)
{
    const char *names[] = {"F64", "F32", "F16", "BF16", "F8_E4M3", "F8_E5M2", "I64", "I32",
                           "I16", "I8", "U8", "BOOL", "U16", "U32", "U64"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        thin_dtype t = st_dtype_from_name(names[i]);
        assert_int_not_equal(t, THIN_DTYPE_INVALID);
        assert_true(st_dtype_size(t) > 0);
    }
    assert_int_equal(st_dtype_from_name("bf16"), THIN_DTYPE_INVALID);
    assert_int_equal(st_dtype_from_name("F4"), THIN_DTYPE_INVALID);
    (void)state;
}

static void test_overlap(void **state)
{
    expect_error("{" T("a", "F32", "[4]", 0, 16) ", " T("b", "F32", "[4]", 8, 24) "}", 24,
                 "overlaps tensor 'a'");
    (void)state;
}

static void test_gap(void **state)
{
    expect_error("{" T("a", "F32", "[4]", 0, 16) ", " T("b", "F32", "[4]", 20, 36) "}", 36,
                 "gap of 4 unused bytes before tensor 'b'");
    expect_error("{" T("a", "F32", "[4]", 4, 20) "}", 20, "gap of 4 unused bytes");
    (void)state;
}

static void test_out_of_bounds_and_trailing(void **state)
{
    expect_error("{" T("a", "F32", "[4]", 0, 16) "}", 12, "past the end of the data section");
    expect_error("{" T("a", "F32", "[4]", 0, 16) "}", 20, "4 trailing bytes");
    (void)state;
}

static void test_bad_dtype_shape_offsets(void **state)
{
    expect_error("{" T("a", "F7", "[4]", 0, 16) "}", 16, "tensor 'a': unknown dtype 'F7'");
    expect_error("{" T("a", "F32", "[2, 3]", 0, 16) "}", 16, "size mismatch");
    expect_error("{" T("a", "F32", "[1099511627776, 1099511627776]", 0, 16) "}", 16,
                 "overflows");
    expect_error("{" T("a", "F32", "[0]", 16, 0) "}", 0, "begin > end");
    expect_error("{" T("a", "F32", "[-1]", 0, 16) "}", 16, "shape is not an array");
    expect_error("{" T("a", "F32", "[1,1,1,1,1,1,1,1,1]", 0, 4) "}", 4, "rank 9");
    expect_error("{\"a\": {\"dtype\": \"F32\", \"shape\": [1]}}", 4, "data_offsets");
    expect_error("{\"a\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [0, 4], "
                 "\"x\": 1}}", 4, "unknown member 'x'");
    (void)state;
}

static void test_header_text(void **state)
{
    expect_error("{\"a\": ", 0, "not valid JSON");
    expect_error("{\"a\xff\": 1}", 0, "not valid UTF-8");
    expect_error("{\"\xc0\xaf\": 1}", 0, "not valid UTF-8"); /* overlong '/' */
    expect_error("[1]", 0, "does not start with '{'");
    expect_error("{\"a\": 1, \"a\": 2}", 0, "not valid JSON");
    expect_error("{\"__metadata__\": {\"k\": 1}}", 0, "__metadata__ member 'k'");
    (void)state;
}

static void test_prefix_limits(void **state)
{
    uint8_t p[8] = {0};
    uint64_t n;
    char err[256];
    uint64_t big = 100000001;
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(big >> (8 * i));
    assert_int_equal(st_parse_prefix(p, ST_SIZE_UNKNOWN, &n, err, sizeof err), -1);
    assert_non_null(strstr(err, "exceeds the 100000000-byte limit"));
    memset(p, 0, 8);
    p[0] = 100;
    assert_int_equal(st_parse_prefix(p, 50, &n, err, sizeof err), -1);
    assert_non_null(strstr(err, "truncated"));
    assert_int_equal(st_parse_prefix(p, 108, &n, err, sizeof err), 0);
    assert_int_equal(n, 100);
    st_header h;
    assert_int_equal(st_parse_memory(p, 5, "short", &h, err, sizeof err), -1);
    assert_non_null(strstr(err, "truncated"));
    (void)state;
}

static void test_stories_fixture(void **state)
{
    const char *fix = getenv("FIX") ? getenv("FIX") : "fixtures";
    char path[512];
    snprintf(path, sizeof path, "%s/stories260k/model.safetensors", fix);
    FILE *f = fopen(path, "rb");
    if (!f)
        skip();
    static uint8_t buf[1 << 21];
    size_t n = fread(buf, 1, sizeof buf, f);
    fclose(f);
    st_header h;
    char err[256];
    assert_int_equal(st_parse_memory(buf, n, path, &h, err, sizeof err), 0);
    assert_int_equal(h.n_tensors, 2 + 9 * 5);
    assert_int_equal(h.data_start + h.data_size, n);
    st_header_free(&h);
    (void)state;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_valid_image_sorted_by_offset),
        cmocka_unit_test(test_scalar_and_empty_header),
        cmocka_unit_test(test_every_dtype_name),
        cmocka_unit_test(test_overlap),
        cmocka_unit_test(test_gap),
        cmocka_unit_test(test_out_of_bounds_and_trailing),
        cmocka_unit_test(test_bad_dtype_shape_offsets),
        cmocka_unit_test(test_header_text),
        cmocka_unit_test(test_prefix_limits),
        cmocka_unit_test(test_stories_fixture),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
