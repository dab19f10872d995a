/*
 * test_corrupt_bytes.c — damage at every byte of small files: truncation at every offset gives a
 * clean error from open; flipping any single byte is caught by open or verify (100%); the stream
 * reader catches truncation too.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

#include "thin_test_util.h"

/* A small file: a two-chunk tensor, a one-chunk tensor, an empty one, a tied one and a blob. */
static uint8_t *small_file(thin_codec codec, size_t *len)
{
    char *dir = tu_mkdtemp(), *path = tu_path(dir, "s.thin");
    thin_writer_options o = {.chunk_size = 4096, .codec = codec, .threads = 1};
    thin_writer *w = thin_writer_new();
    uint8_t a[6000], b[256];
    tu_fill_low(a, sizeof a, 1);
    tu_fill(b, sizeof b, 2);
    thin_tensor_desc da = tu_desc("a", THIN_ROLE_EMBEDDING, -1, THIN_DTYPE_F16, 2, 30, 100);
    thin_tensor_desc db = tu_desc("b", THIN_ROLE_Q, 0, THIN_DTYPE_U8, 1, 256, 0);
    thin_tensor_desc de = tu_desc("e", THIN_ROLE_OTHER, 1, THIN_DTYPE_F32, 1, 0, 0);
    thin_tensor_desc dt = tu_desc("t", THIN_ROLE_LM_HEAD, -1, THIN_DTYPE_F16, 2, 30, 100);
    dt.tied_to = "a";
    assert_int_equal(thin_writer_open(w, path, &o), THIN_OK);
    assert_int_equal(thin_writer_add_tensor(w, &da, a), THIN_OK);
    assert_int_equal(thin_writer_add_blob(w, "cfg.json", "{\"x\":1}", 7), THIN_OK);
    assert_int_equal(thin_writer_add_tensor(w, &db, b), THIN_OK);
    assert_int_equal(thin_writer_add_tensor(w, &de, NULL), THIN_OK);
    assert_int_equal(thin_writer_add_tensor(w, &dt, NULL), THIN_OK);
    assert_int_equal(thin_writer_set_section(w, "model", "{\"k\":1}"), THIN_OK);
    assert_int_equal(thin_writer_finish(w, NULL), THIN_OK);
    thin_writer_free(w);
    uint8_t *img = tu_read_file(path, len);
    free(path);
    tu_rmdir(dir);
    return img;
}

static void truncate_every_offset(thin_codec codec)
{
    size_t len;
    uint8_t *img = small_file(codec, &len);
    thin_file *r = thin_file_new();
    for (size_t n = 0; n < len; n++) {
        uint8_t *copy = malloc(n ? n : 1); /* exact size: ASan sees any over-read */
        memcpy(copy, img, n);
        thin_status s = thin_file_open_memory(r, copy, n, "s.thin", 0);
        if (s == THIN_OK) fail_msg("truncated at %zu: opened", n);
        assert_true(strlen(thin_file_error(r)) > 8);
        free(copy);
    }
    assert_int_equal(thin_file_open_memory(r, img, len, "s.thin", THIN_OPEN_VERIFY), THIN_OK);
    thin_file_free(r);
    free(img);
}

static void test_truncate_none(void **state) { (void)state; truncate_every_offset(THIN_CODEC_NONE); }
static void test_truncate_zstd(void **state) { (void)state; truncate_every_offset(THIN_CODEC_ZSTD); }

static void flip_every_byte(thin_codec codec)
{
    size_t len;
    uint8_t *img = small_file(codec, &len);
    size_t caught_open = 0, caught_verify = 0, missed = 0;
    for (size_t i = 0; i < len; i++) {
        for (int bit = 0; bit < 8; bit += 7) { /* the lowest and the highest bit of each byte */
            img[i] ^= (uint8_t)(1u << bit);
            thin_file *r = thin_file_new();
            thin_status s = thin_file_open_memory(r, img, len, "s.thin", 0);
            if (s) caught_open++;
            else if (thin_file_verify(r, 1, NULL, NULL) != THIN_OK) caught_verify++;
            else {
                missed++;
                print_error("flip of bit %d at offset %zu not detected\n", bit, i);
            }
            thin_file_free(r);
            img[i] ^= (uint8_t)(1u << bit);
        }
    }
    print_message("%s file of %zu bytes: %zu flips caught by open, %zu by verify, %zu missed "
                  "(%.2f%% detected)\n", codec ? "zstd" : "uncompressed", len, caught_open,
                  caught_verify, missed, 100.0 * (double)(caught_open + caught_verify) / (2.0 * len));
    assert_int_equal(missed, 0);
    free(img);
}

static void test_flip_none(void **state) { (void)state; flip_every_byte(THIN_CODEC_NONE); }
static void test_flip_zstd(void **state) { (void)state; flip_every_byte(THIN_CODEC_ZSTD); }

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_truncate_none),
        cmocka_unit_test(test_truncate_zstd),
        cmocka_unit_test(test_flip_none),
        cmocka_unit_test(test_flip_zstd),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
