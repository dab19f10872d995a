/*
 * test_inspect_stats.c — thin-inspect --stats on a small file written with the libthin writer:
 * figures worked out by hand for FP8 weights whose row scales are positive, negative, zero, NaN
 * and infinite, BF16 with NaN and infinity, integers, FP8 without a scale, a tensor of no elements
 * and a tied entry; the mapped file on several threads and the one-pass stream fed a few bytes at
 * a time give the same figures; a compressed file is sent to the stream path.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <fcntl.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../tools/thin-inspect/stats.h"
#include "thin.h"

typedef struct fixture {
    char dir[64], plain[128], zstd[128];
} fixture;

static void add(thin_writer *w, const char *name, thin_role role, thin_dtype dt, uint64_t rows,
                uint64_t cols, const char *scale, const void *data)
{
    thin_tensor_desc d = {.name = name, .role = role, .layer = -1, .dtype = dt,
                          .rank = cols ? 2 : 1, .shape = {rows, cols}, .scale = scale};
    assert_int_equal(thin_writer_add_tensor(w, &d, data), THIN_OK);
}

static void fp8(uint8_t *out, const float *v, size_t n)
{
    assert_int_equal(thin_convert(out, THIN_DTYPE_F8_E4M3, v, THIN_DTYPE_F32, n), THIN_OK);
}

static void write_file(const char *path, thin_codec codec)
{
    thin_writer *w = thin_writer_new();
    thin_writer_options o = {.codec = codec, .threads = 1};
    assert_int_equal(thin_writer_open(w, path, &o), THIN_OK);
    /* w: rows scaled by 2, -0.5 and 0 */
    static const float wv[12] = {1, -2, 0, 4, 1, 2, 3, -1, 5, 5, 5, 5}, ws[3] = {2, -0.5f, 0};
    uint8_t wq[12];
    fp8(wq, wv, 12);
    add(w, "w", THIN_ROLE_GATE, THIN_DTYPE_F8_E4M3, 3, 4, "w.scale", wq);
    add(w, "w.scale", THIN_ROLE_SCALE, THIN_DTYPE_F32, 3, 0, NULL, ws);
    /* v: a NaN scale and an infinite one (0 x inf is NaN) */
    static const float vv[4] = {1, 0, 0, 3};
    const float vs[2] = {NAN, INFINITY};
    uint8_t vq[4];
    fp8(vq, vv, 4);
    add(w, "v.scale", THIN_ROLE_SCALE, THIN_DTYPE_F32, 2, 0, NULL, vs);  /* before its weight */
    add(w, "v", THIN_ROLE_UP, THIN_DTYPE_F8_E4M3, 2, 2, "v.scale", vq);
    /* u: FP8 codes without a scale */
    static const float uv[4] = {1, 2, 3, 4};
    uint8_t uq[4];
    fp8(uq, uv, 4);
    add(w, "u", THIN_ROLE_OTHER, THIN_DTYPE_F8_E4M3, 2, 2, NULL, uq);
    /* b: BF16 with NaN and -inf */
    const float bv[5] = {1, -INFINITY, NAN, 0, 2.5f};
    uint16_t bq[5];
    assert_int_equal(thin_convert(bq, THIN_DTYPE_BF16, bv, THIN_DTYPE_F32, 5), THIN_OK);
    add(w, "b", THIN_ROLE_EMBEDDING, THIN_DTYPE_BF16, 5, 0, NULL, bq);
    static const float none[1] = {0};
    add(w, "e", THIN_ROLE_OTHER, THIN_DTYPE_F32, 0, 4, NULL, none);  /* no elements */
    static const int32_t iv[4] = {-3, 7, 0, 2};
    add(w, "i", THIN_ROLE_OTHER, THIN_DTYPE_I32, 4, 0, NULL, iv);
    thin_tensor_desc t = {.name = "t", .role = THIN_ROLE_LM_HEAD, .layer = -1,
                          .dtype = THIN_DTYPE_BF16, .rank = 1, .shape = {5}, .tied_to = "b"};
    assert_int_equal(thin_writer_begin_tensor(w, &t), THIN_OK);
    assert_int_equal(thin_writer_end_tensor(w), THIN_OK);
    assert_int_equal(thin_writer_finish(w, NULL), THIN_OK);
    thin_writer_free(w);
}

static int setup(void **state)
{
    fixture *f = calloc(1, sizeof *f);
    strcpy(f->dir, "/tmp/thin-stats-XXXXXX");
    assert_non_null(mkdtemp(f->dir));
    snprintf(f->plain, sizeof f->plain, "%s/p.thin", f->dir);
    snprintf(f->zstd, sizeof f->zstd, "%s/z.thin", f->dir);
    write_file(f->plain, THIN_CODEC_NONE);
    write_file(f->zstd, THIN_CODEC_ZSTD);
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    fixture *f = *state;
    unlink(f->plain);
    unlink(f->zstd);
    rmdir(f->dir);
    free(f);
    return 0;
}

static const show_filter ALL = {NULL, -2, NULL};

/* The listing's "tensors" with their stats, from the manifest's names. */
static json_t *listing(const stats_set *s, const json_t *manifest)
{
    json_t *l = json_pack("{s[]}", "tensors"), *t;
    size_t i;
    json_array_foreach(json_object_get(manifest, "tensors"), i, t) {
        json_t *e = json_pack("{sO}", "name", json_object_get(t, "name"));
        if (json_object_get(t, "tied_to"))
            json_object_set(e, "tied_to", json_object_get(t, "tied_to"));
        json_array_append_new(json_object_get(l, "tensors"), e);
    }
    stats_json(l, s);
    return l;
}

static json_t *manifest_of(thin_file *f)
{
    const char *text;
    size_t len;
    assert_int_equal(thin_file_manifest(f, &text, &len), THIN_OK);
    json_t *m = json_loadb(text, len, 0, NULL);
    assert_non_null(m);
    return m;
}

static json_t *file_stats(const char *path, unsigned threads, int *rc)
{
    thin_file *f = thin_file_new();
    assert_int_equal(thin_file_open(f, path, 0), THIN_OK);
    json_t *m = manifest_of(f);
    stats_set *s = stats_new();
    *rc = stats_file(s, f, &ALL, threads);
    json_t *l = *rc ? NULL : listing(s, m);
    stats_free(s);
    json_decref(m);
    thin_file_free(f);
    return l;
}

/* One pass over the file, read `step` bytes at a time. */
static json_t *stream_stats(const char *path, size_t step)
{
    int fd = open(path, O_RDONLY);
    assert_true(fd >= 0);
    thin_stream *st = thin_stream_new();
    stats_set *s = stats_new();
    assert_int_equal(thin_stream_open_fd(st, fd, path), THIN_OK);
    thin_item_kind kind;
    thin_tensor_info ti;
    uint8_t buf[16];
    for (;;) {
        assert_int_equal(thin_stream_next(st, &kind, &ti), THIN_OK);
        if (kind == THIN_ITEM_END)
            break;
        if (kind != THIN_ITEM_TENSOR)
            continue;
        assert_int_equal(stats_begin(s, &ti), 0);
        size_t got;
        do {
            assert_int_equal(thin_stream_read(st, buf, step, &got), THIN_OK);
            stats_feed(s, buf, got);
        } while (got);
        assert_int_equal(stats_end(s), 0);
    }
    const char *text;
    size_t len;
    assert_int_equal(thin_stream_manifest(st, &text, &len), THIN_OK);
    json_t *m = json_loadb(text, len, 0, NULL);
    stats_resolve(s, m);
    json_t *l = listing(s, m);
    json_decref(m);
    stats_free(s);
    thin_stream_free(st);
    close(fd);
    return l;
}

static const json_t *stats_of(const json_t *l, const char *name)
{
    size_t i;
    json_t *t;
    json_array_foreach(json_object_get(l, "tensors"), i, t)
        if (strcmp(json_string_value(json_object_get(t, "name")), name) == 0)
            return json_object_get(t, "stats");
    fail_msg("no tensor %s", name);
    return NULL;
}

static json_int_t ival(const json_t *s, const char *k) { return json_integer_value(json_object_get(s, k)); }
static double rval(const json_t *s, const char *k) { return json_real_value(json_object_get(s, k)); }

static void check_figures(const json_t *l)
{
    const json_t *w = stats_of(l, "w");
    /* {2,-4,0,8} {-0.5,-1,-1.5,0.5} {0,0,0,0} */
    assert_int_equal(ival(w, "elements"), 12);
    assert_int_equal(ival(w, "finite"), 12);
    assert_int_equal(ival(w, "zero"), 5);
    assert_int_equal(ival(w, "nan") + ival(w, "inf"), 0);
    assert_true(rval(w, "min") == -4 && rval(w, "max") == 8);
    assert_true(fabs(rval(w, "mean") - 3.5 / 12) < 1e-12);
    assert_true(fabs(rval(w, "rms") - sqrt(87.75 / 12)) < 1e-12);
    assert_true(fabs(rval(w, "std") - sqrt(87.75 / 12 - (3.5 / 12) * (3.5 / 12))) < 1e-12);
    assert_true(json_is_true(json_object_get(w, "dequantized")));
    const json_t *v = stats_of(l, "v");
    assert_int_equal(ival(v, "nan"), 3);
    assert_int_equal(ival(v, "inf"), 1);
    assert_int_equal(ival(v, "finite"), 0);
    assert_true(json_is_null(json_object_get(v, "min")) && json_is_null(json_object_get(v, "mean")));
    const json_t *u = stats_of(l, "u");
    assert_true(json_is_false(json_object_get(u, "dequantized")));
    assert_true(rval(u, "min") == 1 && rval(u, "max") == 4 && rval(u, "mean") == 2.5);
    const json_t *b = stats_of(l, "b");
    assert_int_equal(ival(b, "finite"), 3);
    assert_int_equal(ival(b, "nan"), 1);
    assert_int_equal(ival(b, "inf"), 1);
    assert_int_equal(ival(b, "zero"), 1);
    assert_true(rval(b, "min") == 0 && rval(b, "max") == 2.5);
    const json_t *i = stats_of(l, "i");
    assert_true(rval(i, "min") == -3 && rval(i, "max") == 7 && rval(i, "mean") == 1.5);
    assert_true(json_is_null(stats_of(l, "t")));
    const json_t *e = stats_of(l, "e");
    assert_int_equal(ival(e, "elements"), 0);
    assert_true(json_is_null(json_object_get(e, "min")) && json_is_null(json_object_get(e, "rms")));
    const json_t *sc = stats_of(l, "w.scale");
    assert_true(rval(sc, "min") == -0.5 && rval(sc, "max") == 2);
}

static void test_file_figures(void **state)
{
    fixture *f = *state;
    for (unsigned threads = 1; threads <= 4; threads += 3) {
        int rc;
        json_t *l = file_stats(f->plain, threads, &rc);
        assert_int_equal(rc, 0);
        check_figures(l);
        json_decref(l);
    }
}

static void test_stream_same_as_file(void **state)
{
    fixture *f = *state;
    int rc;
    json_t *ref = file_stats(f->plain, 2, &rc);
    assert_int_equal(rc, 0);
    char *want = json_dumps(ref, JSON_SORT_KEYS);
    static const size_t steps[] = {1, 3, 7, 16};
    for (size_t k = 0; k < sizeof steps / sizeof steps[0]; k++) {
        for (int z = 0; z < 2; z++) {
            json_t *l = stream_stats(z ? f->zstd : f->plain, steps[k]);
            check_figures(l);
            char *got = json_dumps(l, JSON_SORT_KEYS);
            assert_string_equal(got, want);
            free(got);
            json_decref(l);
        }
    }
    free(want);
    json_decref(ref);
}

static void test_compressed_file_streams(void **state)
{
    fixture *f = *state;
    int rc;
    json_t *l = file_stats(f->zstd, 2, &rc);
    assert_int_equal(rc, 1);
    assert_null(l);
}

static void test_filter_and_short_tensor(void **state)
{
    (void)state;
    thin_tensor_info t = {.name = "x", .role = THIN_ROLE_GATE, .layer = 3,
                          .dtype = THIN_DTYPE_BF16, .rank = 1, .shape = {4}, .nbytes = 8};
    show_filter byrole = {"gate", -2, NULL}, bylayer = {NULL, 2, NULL}, bydt = {NULL, -2, "bf16"};
    assert_true(stats_match(&byrole, &t));
    assert_false(stats_match(&bylayer, &t));
    assert_true(stats_match(&bydt, &t));
    stats_set *s = stats_new();
    assert_int_equal(stats_begin(s, &t), 0);
    stats_feed(s, "\0\0\0\0\0", 5);  /* two and a half elements of four */
    assert_int_equal(stats_end(s), -1);
    assert_int_equal(stats_begin(s, &t), 0);
    stats_feed(s, "\0\0\0\0\0\0\0\0\0\0", 10);  /* one too many */
    assert_int_equal(stats_end(s), -1);
    stats_free(s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_file_figures),
        cmocka_unit_test(test_stream_same_as_file),
        cmocka_unit_test(test_compressed_file_streams),
        cmocka_unit_test(test_filter_and_short_tensor),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
