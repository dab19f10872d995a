/*
 * test_writer.c — the writer: atomic replacement (no temporary or target left on failure),
 * argument and state errors, output identical for any thread count, zero-copy adds.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

#include "thin_test_util.h"

typedef tu_fx fx;

static int setup(void **state) { return tu_fx_setup(state, "out.thin", 7); }

/* Reads path; keeps the first image read in *first, and checks later ones equal it byte for byte. */
static void same_as_first(const char *path, uint8_t **first, size_t *first_len)
{
    size_t len;
    uint8_t *img = tu_read_file(path, &len);
    assert_non_null(img);
    if (!*first) {
        *first = img;
        *first_len = len;
        return;
    }
    assert_int_equal(len, *first_len);
    assert_memory_equal(img, *first, len);
    free(img);
}

static void test_wrong_byte_count_leaves_nothing(void **state)
{
    fx *f = *state;
    thin_writer *w = thin_writer_new();
    assert_int_equal(thin_writer_open(w, f->path, NULL), THIN_OK);
    assert_int_equal(tu_count_entries(f->dir), 1); /* the temporary file */
    assert_int_equal(thin_writer_begin_tensor(w, &f->s.d[0]), THIN_OK);
    assert_int_equal(thin_writer_write(w, f->s.data[0], 100), THIN_OK);
    assert_int_equal(thin_writer_end_tensor(w), THIN_E_SHAPE);
    assert_non_null(strstr(thin_writer_error(w), "100 bytes written, 4096 declared"));
    assert_int_equal(thin_writer_finish(w, NULL), THIN_E_STATE);
    thin_writer_free(w);
    assert_int_equal(tu_count_entries(f->dir), 0);
    w = thin_writer_new(); /* too many bytes */
    assert_int_equal(thin_writer_open(w, f->path, NULL), THIN_OK);
    assert_int_equal(thin_writer_begin_tensor(w, &f->s.d[3]), THIN_OK);
    assert_int_equal(thin_writer_write(w, f->s.data[0], 65), THIN_E_SHAPE);
    thin_writer_free(w);
    assert_int_equal(tu_count_entries(f->dir), 0);
}

static void test_existing_target_kept_on_failure(void **state)
{
    fx *f = *state;
    assert_int_equal(tu_write_file(f->path, "old", 3), 0);
    thin_writer *w = thin_writer_new();
    assert_int_equal(thin_writer_open(w, f->path, NULL), THIN_OK);
    assert_int_equal(thin_writer_add_tensor(w, &f->s.d[0], f->s.data[0]), THIN_OK);
    thin_writer_free(w); /* never finished */
    size_t len;
    uint8_t *b = tu_read_file(f->path, &len);
    assert_int_equal(len, 3);
    assert_memory_equal(b, "old", 3);
    free(b);
    assert_int_equal(tu_count_entries(f->dir), 1);
    /* finishing replaces it */
    assert_int_equal(tu_sample_save(f->path, &f->s, THIN_CODEC_NONE, 0, 1), THIN_OK);
    assert_int_equal(tu_count_entries(f->dir), 1);
    struct stat st;
    assert_int_equal(stat(f->path, &st), 0);
    mode_t um = umask(0);
    umask(um);
    assert_int_equal(st.st_mode & 0777, 0666 & ~um);
}

static void test_unwritable_directory(void **state)
{
    fx *f = *state;
    char *ro = tu_path(f->dir, "ro");
    assert_int_equal(mkdir(ro, 0555), 0);
    char *p = tu_path(ro, "x.thin");
    thin_writer *w = thin_writer_new();
    thin_status s = thin_writer_open(w, p, NULL);
    if (geteuid() != 0) { /* root writes anywhere */
        assert_int_equal(s, THIN_E_IO);
        assert_non_null(strstr(thin_writer_error(w), "x.thin"));
        assert_int_equal(tu_count_entries(ro), 0);
    }
    thin_writer_free(w);
    w = thin_writer_new();
    assert_int_equal(thin_writer_open(w, "/nonexistent-dir/x.thin", NULL), THIN_E_IO);
    thin_writer_free(w);
    char *file = tu_path(f->dir, "plain"), *under = tu_path(file, "x.thin");
    assert_int_equal(tu_write_file(file, "x", 1), 0); /* a parent that is not a folder */
    w = thin_writer_new();
    assert_int_equal(thin_writer_open(w, under, NULL), THIN_E_IO);
    thin_writer_free(w);
    assert_int_equal(tu_count_entries(f->dir), 2);
    free(file);
    free(under);
    rmdir(ro);
    free(ro);
    free(p);
}

static void test_bad_arguments_and_states(void **state)
{
    fx *f = *state;
    thin_writer *w = thin_writer_new();
    thin_writer_options bad = {.chunk_size = 1000};
    assert_int_equal(thin_writer_open(w, f->path, &bad), THIN_E_INVALID_ARG);
    thin_writer_free(w);
    assert_int_equal(tu_count_entries(f->dir), 0);
    w = thin_writer_new();
    assert_int_equal(thin_writer_open(w, f->path, NULL), THIN_OK);
    assert_int_equal(thin_writer_set_section(w, "tensors", "[]"), THIN_E_INVALID_ARG);
    thin_writer_free(w);
    w = thin_writer_new();
    assert_int_equal(thin_writer_open(w, f->path, NULL), THIN_OK);
    assert_int_equal(thin_writer_write(w, "x", 1), THIN_E_STATE);
    thin_writer_free(w);
    thin_tensor_desc d = f->s.d[0];
    d.dtype = (thin_dtype)99;
    w = thin_writer_new();
    assert_int_equal(thin_writer_open(w, f->path, NULL), THIN_OK);
    assert_int_equal(thin_writer_begin_tensor(w, &d), THIN_E_DTYPE);
    thin_writer_free(w);
    d = f->s.d[0];
    d.rank = 2;
    d.shape[0] = d.shape[1] = (uint64_t)1 << 40;
    w = thin_writer_new();
    assert_int_equal(thin_writer_open(w, f->path, NULL), THIN_OK);
    assert_int_equal(thin_writer_begin_tensor(w, &d), THIN_E_RANGE);
    thin_writer_free(w);
    w = thin_writer_new(); /* duplicate names */
    assert_int_equal(thin_writer_open(w, f->path, NULL), THIN_OK);
    assert_int_equal(thin_writer_add_tensor(w, &f->s.d[0], f->s.data[0]), THIN_OK);
    assert_int_equal(thin_writer_add_tensor(w, &f->s.d[0], f->s.data[0]), THIN_E_INVALID_ARG);
    thin_writer_free(w);
    w = thin_writer_new(); /* a dangling tied_to is refused at finish */
    assert_int_equal(thin_writer_open(w, f->path, NULL), THIN_OK);
    assert_int_equal(thin_writer_add_tensor(w, &f->s.d[5], NULL), THIN_OK);
    assert_int_equal(thin_writer_finish(w, NULL), THIN_E_BAD_MANIFEST);
    assert_non_null(strstr(thin_writer_error(w), "tied_to"));
    thin_writer_free(w);
    w = thin_writer_new(); /* an unfinished entry */
    assert_int_equal(thin_writer_open(w, f->path, NULL), THIN_OK);
    assert_int_equal(thin_writer_begin_blob(w, "b", 10), THIN_OK);
    assert_int_equal(thin_writer_finish(w, NULL), THIN_E_STATE);
    thin_writer_free(w);
    assert_int_equal(tu_count_entries(f->dir), 0);
    thin_writer_free(NULL);
}

static void test_thread_count_determinism(void **state)
{
    fx *f = *state;
    for (int codec = 0; codec < 2; codec++) {
        uint8_t *first = NULL;
        size_t first_len = 0;
        unsigned threads[] = {1, 2, 3, 8};
        for (int k = 0; k < 4; k++) {
            assert_int_equal(tu_sample_save(f->path, &f->s, (thin_codec)codec, 4096, threads[k]), 0);
            same_as_first(f->path, &first, &first_len);
        }
        free(first);
    }
}

/* The same bytes written in one call, in pieces crossing chunk boundaries, byte by byte, and in
 * pieces of whole chunks and a part of the next (with several threads the whole chunks are
 * hashed in place while the part waits in a buffer across the call). */
static void test_write_piece_sizes(void **state)
{
    fx *f = *state;
    size_t pieces[] = {0, 4095, 1, 4096 + 1000, 3 * 4096 + 7, 2 * 4096 + 4095};
    unsigned threads[] = {2, 2, 2, 2, 3, 8};
    uint8_t *first = NULL;
    size_t first_len = 0;
    assert_true(f->s.nbytes[1] > 8 * 4096);
    for (int k = 0; k < 6; k++) {
        thin_writer_options o = {.chunk_size = 4096, .codec = THIN_CODEC_ZSTD, .threads = threads[k]};
        thin_writer *w = thin_writer_new();
        assert_int_equal(thin_writer_open(w, f->path, &o), THIN_OK);
        assert_int_equal(thin_writer_begin_tensor(w, &f->s.d[1]), THIN_OK);
        size_t n = f->s.nbytes[1], step = pieces[k] ? pieces[k] : n;
        for (size_t off = 0; off < n; off += step)
            assert_int_equal(thin_writer_write(w, f->s.data[1] + off, n - off < step ? n - off : step), 0);
        assert_int_equal(thin_writer_end_tensor(w), THIN_OK);
        uint8_t d1[32];
        assert_int_equal(thin_writer_finish(w, d1), THIN_OK);
        thin_writer_free(w);
        same_as_first(f->path, &first, &first_len);
    }
    free(first);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_wrong_byte_count_leaves_nothing, setup, tu_fx_teardown),
        cmocka_unit_test_setup_teardown(test_existing_target_kept_on_failure, setup, tu_fx_teardown),
        cmocka_unit_test_setup_teardown(test_unwritable_directory, setup, tu_fx_teardown),
        cmocka_unit_test_setup_teardown(test_bad_arguments_and_states, setup, tu_fx_teardown),
        cmocka_unit_test_setup_teardown(test_thread_count_determinism, setup, tu_fx_teardown),
        cmocka_unit_test_setup_teardown(test_write_piece_sizes, setup, tu_fx_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
