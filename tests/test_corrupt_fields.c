/*
 * test_corrupt_fields.c — every field of the file header, of a record header and of the trailer,
 * set wrong with its CRC recomputed, and every kind of bad manifest: each gives its own status.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>
#include <jansson.h>

#include "thin_private.h"
#include "thin_test_util.h"

typedef struct fx {
    char *dir, *path;
    uint8_t *img;
    size_t len;
    tu_sample s;
} fx;

static int setup(void **state)
{
    fx *f = calloc(1, sizeof *f);
    f->dir = tu_mkdtemp();
    f->path = tu_path(f->dir, "m.thin");
    tu_sample_init(&f->s, 1);
    if (tu_sample_save(f->path, &f->s, THIN_CODEC_NONE, 16384, 1)) return -1;
    f->img = tu_read_file(f->path, &f->len);
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    fx *f = *state;
    tu_sample_free(&f->s);
    free(f->img);
    free(f->path);
    tu_rmdir(f->dir);
    free(f);
    return 0;
}

/* Opens a copy of the image with bytes [off, off+n) replaced and the 64-byte structure at
 * crc_base re-sealed (crc_base < 0: no CRC fix); returns open's status, or verify's when open
 * succeeds and `verify` is set. */
static thin_status try_patch(fx *f, size_t off, const void *bytes, size_t n, long crc_base,
                             int verify)
{
    uint8_t *img = malloc(f->len);
    memcpy(img, f->img, f->len);
    memcpy(img + off, bytes, n);
    if (crc_base >= 0) thin_put32(img + crc_base + 60, thin_crc32c(img + crc_base, 60));
    thin_file *r = thin_file_new();
    thin_status s = thin_file_open_memory(r, img, f->len, "m.thin", 0);
    if (!s && verify) s = thin_file_verify(r, 1, NULL, NULL);
    if (s) assert_non_null(strstr(thin_file_error(r), "m.thin: "));
    thin_file_free(r);
    free(img);
    return s;
}

static thin_status patch32(fx *f, size_t off, uint32_t v, long crc_base)
{
    uint8_t b[4];
    thin_put32(b, v);
    return try_patch(f, off, b, 4, crc_base, 1);
}

static void test_file_header_fields(void **state)
{
    fx *f = *state;
    assert_int_equal(try_patch(f, 0, "\x89THN", 4, -1, 1), THIN_OK);
    assert_int_equal(try_patch(f, 0, "PK\3\4", 4, 0, 1), THIN_E_BAD_MAGIC);
    assert_int_equal(try_patch(f, 4, "\n\x1a\n\0", 4, 0, 1), THIN_E_BAD_MAGIC); /* CRLF -> LF */
    assert_int_equal(try_patch(f, 8, "\2\0", 2, 0, 1), THIN_E_VERSION);
    assert_int_equal(try_patch(f, 8, "\0\0", 2, 0, 1), THIN_E_VERSION);
    assert_int_equal(patch32(f, 12, 1, 0), THIN_E_BAD_HEADER);
    assert_int_equal(patch32(f, 16, 128, 0), THIN_E_BAD_HEADER);
    assert_int_equal(patch32(f, 20, 32, 0), THIN_E_BAD_HEADER);
    assert_int_equal(patch32(f, 24, 65536, 0), THIN_E_BAD_HEADER);
    assert_int_equal(try_patch(f, 40, "\1", 1, 0, 1), THIN_E_PADDING);
    assert_int_equal(try_patch(f, 40, "\1", 1, -1, 1), THIN_E_BAD_HEADER);
    assert_int_equal(patch32(f, 60, 0, -1), THIN_E_BAD_HEADER);
    thin_file *r = thin_file_new();
    assert_int_equal(thin_file_open_memory(r, "\x89THN\r\n\x1a\n", 8, "m.thin", 0), THIN_E_TRUNCATED);
    assert_int_equal(thin_file_open_memory(r, "hello", 5, "m.thin", 0), THIN_E_BAD_MAGIC);
    assert_int_equal(thin_file_open(r, "/nonexistent/x.thin", 0), THIN_E_IO);
    thin_file_free(r);
}

static void test_entry_record_fields(void **state)
{
    fx *f = *state;
    uint64_t big = 1;
    assert_int_equal(try_patch(f, 64, "TREX", 4, 64, 1), THIN_E_BAD_RECORD);
    assert_int_equal(try_patch(f, 68, "\7", 1, 64, 1), THIN_E_BAD_RECORD);
    assert_int_equal(try_patch(f, 68, "\2", 1, 64, 1), THIN_E_BAD_RECORD);
    assert_int_equal(try_patch(f, 70, "\1", 1, 64, 1), THIN_E_BAD_RECORD);
    assert_int_equal(patch32(f, 72, 1, 64), THIN_E_BAD_RECORD);
    assert_int_equal(patch32(f, 72, 99, 64), THIN_E_BAD_RECORD);
    assert_int_equal(patch32(f, 76, 2, 64), THIN_E_BAD_RECORD);
    assert_int_equal(try_patch(f, 80, &big, 1, 64, 1), THIN_E_BAD_RECORD);
    assert_int_equal(try_patch(f, 88, "\7", 1, 64, 1), THIN_E_BAD_RECORD);
    assert_int_equal(try_patch(f, 96, "\7", 1, 64, 1), THIN_E_BAD_RECORD);
    assert_int_equal(try_patch(f, 104, "\7", 1, 64, 1), THIN_E_CHECKSUM);
    assert_int_equal(try_patch(f, 120, "\1", 1, 64, 1), THIN_E_BAD_RECORD); /* kind blob */
    assert_int_equal(try_patch(f, 120, "\7", 1, 64, 1), THIN_E_BAD_RECORD);
    assert_int_equal(try_patch(f, 121, "\1", 1, 64, 1), THIN_E_PADDING);
    assert_int_equal(try_patch(f, 124, "\1", 1, -1, 1), THIN_E_BAD_RECORD);
    assert_int_equal(try_patch(f, 130, "X", 1, -1, 1), THIN_E_CHECKSUM); /* descriptor */
}

/* Offset of the first CHUNK record header of tensor i. */
static uint64_t chunk_header_at(fx *f, uint32_t i, thin_chunk_info *first)
{
    thin_file *r = thin_file_new();
    assert_int_equal(thin_file_open_memory(r, f->img, f->len, "m", 0), THIN_OK);
    thin_tensor_info t;
    thin_chunk_info c;
    assert_int_equal(thin_file_tensor(r, i, &t), THIN_OK);
    assert_int_equal(thin_file_chunk(r, i, 0, first), THIN_OK);
    assert_int_equal(thin_file_chunk(r, i, t.n_chunks - 1, &c), THIN_OK);
    thin_file_free(r);
    return thin_align_up(c.offset + c.stored_size, 64);
}

static void test_chunk_record_and_data(void **state)
{
    fx *f = *state;
    thin_chunk_info c;
    long h = (long)chunk_header_at(f, 1, &c);
    assert_int_equal(try_patch(f, h + 4, "\1", 1, h, 1), THIN_E_BAD_RECORD);
    assert_int_equal(try_patch(f, h + 6, "\1", 1, h, 1), THIN_E_BAD_RECORD);
    assert_int_equal(try_patch(f, h + 8, "\0", 1, h, 1), THIN_E_BAD_RECORD);
    assert_int_equal(try_patch(f, h + 12, "\1", 1, h, 1), THIN_E_BAD_RECORD);
    assert_int_equal(try_patch(f, h + 17, "\1", 1, h, 1), THIN_E_BAD_RECORD);
    assert_int_equal(try_patch(f, h + 24, "\1", 1, h, 1), THIN_E_BAD_RECORD);
    assert_int_equal(try_patch(f, h + 32, "\1", 1, h, 1), THIN_E_BAD_RECORD);
    assert_int_equal(try_patch(f, h + 40, "\1", 1, h, 1), THIN_E_BAD_RECORD);
    assert_int_equal(try_patch(f, h + 56, "\1", 1, h, 1), THIN_E_BAD_RECORD);
    assert_int_equal(try_patch(f, h + 60, "\1", 1, -1, 1), THIN_E_BAD_RECORD);
    /* payload and padding: found by verify, which names the tensor and chunk */
    uint8_t *img = malloc(f->len);
    memcpy(img, f->img, f->len);
    img[c.offset + 100] ^= 0x40;
    thin_file *r = thin_file_new();
    assert_int_equal(thin_file_open_memory(r, img, f->len, "model.thin", 0), THIN_OK);
    assert_int_equal(thin_file_verify(r, 2, NULL, NULL), THIN_E_CHECKSUM);
    assert_string_equal(thin_file_error(r), "model.thin: chunk 0 of tensor "
                        "'model.layers.0.self_attn.q_proj.weight': SHA-256 mismatch");
    assert_int_equal(thin_file_verify_tensor(r, 1), THIN_E_CHECKSUM);
    assert_int_equal(thin_file_verify_tensor(r, 0), THIN_OK);
    uint8_t buf[48000];
    assert_int_equal(thin_file_tensor_read(r, 1, buf, sizeof buf, 1), THIN_E_CHECKSUM);
    assert_int_equal(thin_file_tensor_read(r, 1, buf, sizeof buf, 0), THIN_OK);
    assert_int_equal(thin_file_tensor_read(r, 1, buf, 100, 0), THIN_E_INVALID_ARG);
    thin_file_free(r);
    free(img);
    r = thin_file_new(); /* the blob's 10000 bytes end 48 bytes before a 64-byte boundary */
    const void *blob;
    size_t bl;
    assert_int_equal(thin_file_open_memory(r, f->img, f->len, "m", 0), THIN_OK);
    assert_int_equal(thin_file_blob(r, "tokenizer.json", &blob, &bl), THIN_OK);
    size_t blob_end = (size_t)((const uint8_t *)blob - f->img) + bl;
    thin_file_free(r);
    assert_int_equal(try_patch(f, blob_end + 5, "\1", 1, -1, 1), THIN_E_PADDING);
    assert_int_equal(try_patch(f, 64 + 64 + 10 + 1000, "\1", 1, -1, 1), THIN_E_PADDING);
}

static void test_trailer_fields(void **state)
{
    fx *f = *state;
    long t = (long)f->len - 64;
    assert_int_equal(try_patch(f, t, "THNTRAIX", 8, t, 1), THIN_E_TRUNCATED);
    assert_int_equal(try_patch(f, t + 8, "\1", 1, t, 1), THIN_E_BAD_TRAILER);
    assert_int_equal(try_patch(f, t + 9, "\1", 1, t, 1), THIN_E_BAD_TRAILER);
    assert_int_equal(try_patch(f, t + 16, "\1", 1, t, 1), THIN_E_BAD_TRAILER);
    assert_int_equal(try_patch(f, t + 23, "\1", 1, t, 1), THIN_E_LIMIT);
    assert_int_equal(try_patch(f, t + 30, "\1", 1, t, 1), THIN_E_DIGEST);
    assert_int_equal(try_patch(f, t + 56, "\1", 1, t, 1), THIN_E_PADDING);
    assert_int_equal(try_patch(f, t + 62, "\1", 1, -1, 1), THIN_E_BAD_TRAILER);
    uint64_t mo = thin_get64(f->img + t + 8);
    assert_int_equal(try_patch(f, mo + 64 + 5, "\1", 1, -1, 1), THIN_E_CHECKSUM);
    assert_int_equal(try_patch(f, mo + 4, "\2", 1, mo, 1), THIN_E_BAD_RECORD);
}

/* Re-seals the image with a new manifest (and header version), then opens it. */
static thin_status with_manifest(fx *f, json_t *m, uint16_t minor)
{
    uint64_t mo = thin_get64(f->img + f->len - 56);
    char *js = json_dumps(m, JSON_COMPACT | JSON_ENCODE_ANY);
    size_t ml = strlen(js);
    size_t len = thin_align_up(mo + 64 + ml, 64) + 64;
    uint8_t *img = calloc(1, len), sha[32];
    memcpy(img, f->img, mo);
    thin_put16(img + 10, minor);
    thin_put32(img + 60, thin_crc32c(img, 60));
    thin_record r = {.type = THIN_REC_MANIFEST, .offset = mo + 64, .stored = ml, .raw = ml};
    thin_sha256(js, ml, sha);
    memcpy(r.sha, sha, 16);
    thin_record_encode(&r, img + mo);
    memcpy(img + mo + 64, js, ml);
    thin_trailer tr = {.manifest_offset = mo, .manifest_size = ml};
    thin_trailer_encode(&tr, img + len - 64);
    thin_file *fl = thin_file_new();
    thin_status s = thin_file_open_memory(fl, img, len, "m.thin", 0);
    if (s) assert_non_null(strstr(thin_file_error(fl), "m.thin: "));
    thin_file_free(fl);
    free(img);
    free(js);
    json_decref(m);
    return s;
}

static json_t *manifest_of(fx *f)
{
    uint64_t mo = thin_get64(f->img + f->len - 56), ml = thin_get64(f->img + f->len - 48);
    return json_loadb((const char *)f->img + mo + 64, ml, 0, NULL);
}

static json_t *tensor(json_t *m, size_t i) { return json_array_get(json_object_get(m, "tensors"), i); }
static json_t *chunk0(json_t *m, size_t i) { return json_array_get(json_object_get(tensor(m, i), "chunks"), 0); }

static void test_manifest_schema(void **state)
{
    fx *f = *state;
    json_t *m;
    assert_int_equal(with_manifest(f, manifest_of(f), 0), THIN_OK);
    m = manifest_of(f);
    json_object_set_new(m, "future_member", json_true());
    assert_int_equal(with_manifest(f, m, 0), THIN_OK);
    m = manifest_of(f);
    json_object_set_new(json_object_get(m, "format"), "minor", json_integer(3));
    assert_int_equal(with_manifest(f, m, 3), THIN_OK); /* a newer minor is read */
    m = manifest_of(f);
    json_object_set_new(json_object_get(m, "format"), "major", json_integer(2));
    assert_int_equal(with_manifest(f, m, 0), THIN_E_BAD_MANIFEST);
    m = manifest_of(f);
    json_object_set_new(tensor(m, 1), "dtype", json_string("F42"));
    assert_int_equal(with_manifest(f, m, 0), THIN_E_DTYPE);
    m = manifest_of(f);
    json_array_set_new(json_object_get(tensor(m, 1), "shape"), 0, json_integer(41));
    assert_int_equal(with_manifest(f, m, 0), THIN_E_SHAPE);
    m = manifest_of(f);
    json_object_set_new(tensor(m, 1), "shape", json_pack("[II]", (json_int_t)1 << 62, (json_int_t)1 << 62));
    assert_int_equal(with_manifest(f, m, 0), THIN_E_RANGE);
    m = manifest_of(f);
    json_object_set_new(tensor(m, 1), "shape", json_pack("[iiiiiiiii]", 1, 1, 1, 1, 1, 1, 1, 1, 1));
    assert_int_equal(with_manifest(f, m, 0), THIN_E_LIMIT);
    m = manifest_of(f);
    json_object_set_new(chunk0(m, 1), "offset", json_integer((json_int_t)1 << 40));
    assert_int_equal(with_manifest(f, m, 0), THIN_E_RANGE);
    m = manifest_of(f);
    json_object_set_new(chunk0(m, 1), "offset",
                        json_integer(json_integer_value(json_object_get(chunk0(m, 1), "offset")) + 64));
    assert_int_equal(with_manifest(f, m, 0), THIN_E_ALIGN);
    m = manifest_of(f);
    json_object_set_new(chunk0(m, 1), "offset", json_integer(8192 * 4));
    assert_int_equal(with_manifest(f, m, 0), THIN_E_BAD_MANIFEST); /* not where the layout puts it */
    m = manifest_of(f);
    json_object_set_new(chunk0(m, 1), "raw", json_integer(100));
    assert_int_equal(with_manifest(f, m, 0), THIN_E_BAD_MANIFEST);
    m = manifest_of(f);
    json_object_set_new(chunk0(m, 1), "codec", json_string("lz4"));
    assert_int_equal(with_manifest(f, m, 0), THIN_E_CODEC);
    m = manifest_of(f);
    json_object_set_new(chunk0(m, 1), "sha256", json_string("00ff"));
    assert_int_equal(with_manifest(f, m, 0), THIN_E_BAD_MANIFEST);
    m = manifest_of(f);
    json_array_remove(json_object_get(tensor(m, 1), "chunks"), 0);
    assert_int_equal(with_manifest(f, m, 0), THIN_E_BAD_MANIFEST);
    m = manifest_of(f);
    json_object_set(tensor(m, 2), "name", json_object_get(tensor(m, 1), "name"));
    assert_int_equal(with_manifest(f, m, 0), THIN_E_BAD_MANIFEST);
    m = manifest_of(f);
    json_object_set_new(tensor(m, 5), "tied_to", json_string("nope"));
    assert_int_equal(with_manifest(f, m, 0), THIN_E_BAD_MANIFEST);
    m = manifest_of(f);
    json_object_set_new(tensor(m, 2), "scale", json_string("model.embed_tokens.weight"));
    assert_int_equal(with_manifest(f, m, 0), THIN_E_BAD_MANIFEST);
    m = manifest_of(f);
    json_object_set_new(tensor(m, 0), "role", json_string("wizard"));
    assert_int_equal(with_manifest(f, m, 0), THIN_E_BAD_MANIFEST);
    /* an expert index: an integer >= 0, on a tensor of a layer */
    m = manifest_of(f);
    json_object_set_new(tensor(m, 1), "expert", json_integer(-1));
    assert_int_equal(with_manifest(f, m, 0), THIN_E_BAD_MANIFEST);
    m = manifest_of(f);
    json_object_set_new(tensor(m, 1), "expert", json_string("3"));
    assert_int_equal(with_manifest(f, m, 0), THIN_E_BAD_MANIFEST);
    m = manifest_of(f);
    json_object_set_new(tensor(m, 0), "layer", json_integer(-1));
    json_object_set_new(tensor(m, 0), "expert", json_integer(0));
    assert_int_equal(with_manifest(f, m, 0), THIN_E_BAD_MANIFEST);
    m = manifest_of(f);
    char longname[600];
    memset(longname, 'a', sizeof longname - 1);
    longname[599] = 0;
    json_object_set_new(tensor(m, 0), "name", json_string(longname));
    assert_int_equal(with_manifest(f, m, 0), THIN_E_LIMIT);
    m = manifest_of(f);
    json_object_set_new(tensor(m, 0), "extra", json_true()); /* entry differs from its descriptor */
    assert_int_equal(with_manifest(f, m, 0), THIN_E_BAD_RECORD);
    m = manifest_of(f);
    json_array_remove(json_object_get(m, "tensors"), 4); /* "empty": its ENTRY names no entry */
    assert_int_equal(with_manifest(f, m, 0), THIN_E_BAD_RECORD);
    m = manifest_of(f);
    json_object_set_new(m, "tensors", json_object());
    assert_int_equal(with_manifest(f, m, 0), THIN_E_BAD_MANIFEST);
    m = json_string("not an object");
    assert_int_equal(with_manifest(f, m, 0), THIN_E_BAD_MANIFEST);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_file_header_fields, setup, teardown),
        cmocka_unit_test_setup_teardown(test_entry_record_fields, setup, teardown),
        cmocka_unit_test_setup_teardown(test_chunk_record_and_data, setup, teardown),
        cmocka_unit_test_setup_teardown(test_trailer_fields, setup, teardown),
        cmocka_unit_test_setup_teardown(test_manifest_schema, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
