/*
 * test_container.c — round trips through the writer and the random-access reader: bytes, infos,
 * lookups, sections, blobs, tied entries, scale links, zero-copy pointers, codecs, chunking.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

#include "thin_test_util.h"

typedef tu_fx fx;

static int setup(void **state) { return tu_fx_setup(state, "model.thin", 1); }

/* Opens f->path, checks every tensor's bytes and infos against the sample. */
static void check_sample(fx *f, thin_codec codec, uint32_t flags)
{
    thin_file *r = thin_file_new();
    assert_int_equal(thin_file_open(r, f->path, flags), THIN_OK);
    assert_int_equal(thin_file_tensor_count(r), TU_N);
    for (uint32_t i = 0; i < TU_N; i++) {
        thin_tensor_info t;
        assert_int_equal(thin_file_tensor(r, i, &t), THIN_OK);
        assert_string_equal(t.name, f->s.d[i].name);
        assert_int_equal(t.role, f->s.d[i].role);
        assert_int_equal(t.layer, f->s.d[i].layer);
        assert_int_equal(t.dtype, f->s.d[i].dtype);
        assert_int_equal(t.rank, f->s.d[i].rank);
        assert_int_equal(t.nbytes, f->s.nbytes[i]);
        assert_int_equal(t.index, i);
        const uint8_t *want = f->s.d[i].tied_to ? f->s.data[0] : f->s.data[i];
        uint8_t *buf = malloc(t.nbytes + 1);
        assert_int_equal(thin_file_tensor_read(r, i, buf, t.nbytes, 1), THIN_OK);
        assert_memory_equal(buf, want, t.nbytes);
        const void *p = NULL;
        thin_status s = thin_file_tensor_data(r, i, &p);
        if (codec == THIN_CODEC_NONE || t.nbytes == 0) {
            assert_int_equal(s, THIN_OK);
            assert_memory_equal(p, want, t.nbytes);
            assert_int_equal(((uintptr_t)p - (uintptr_t)p % 4096) % 4096, 0);
        } else {
            assert_int_equal(s, THIN_E_UNSUPPORTED);
        }
        assert_int_equal(thin_file_verify_tensor(r, i), THIN_OK);
        free(buf);
    }
    const void *b;
    size_t bl;
    assert_int_equal(thin_file_blob_count(r), 1);
    assert_string_equal(thin_file_blob_name(r, 0), "tokenizer.json");
    assert_int_equal(thin_file_blob(r, "tokenizer.json", &b, &bl), THIN_OK);
    assert_int_equal(bl, f->s.blob_len);
    assert_memory_equal(b, f->s.blob, bl);
    assert_int_equal(thin_file_blob(r, "nope", &b, &bl), THIN_E_NOT_FOUND);
    assert_int_equal(thin_file_verify(r, 2, NULL, NULL), THIN_OK);
    thin_file_free(r);
}

static void test_roundtrip_none(void **state)
{
    fx *f = *state;
    assert_int_equal(tu_sample_save(f->path, &f->s, THIN_CODEC_NONE, 16384, 2), THIN_OK);
    check_sample(f, THIN_CODEC_NONE, 0);
    check_sample(f, THIN_CODEC_NONE, THIN_OPEN_VERIFY | THIN_OPEN_NO_MMAP);
}

static void test_roundtrip_zstd(void **state)
{
    fx *f = *state;
    assert_int_equal(tu_sample_save(f->path, &f->s, THIN_CODEC_ZSTD, 8192, 3), THIN_OK);
    check_sample(f, THIN_CODEC_ZSTD, THIN_OPEN_VERIFY);
}

static void test_multichunk_layout(void **state)
{
    fx *f = *state;
    assert_int_equal(tu_sample_save(f->path, &f->s, THIN_CODEC_NONE, 4096, 1), THIN_OK);
    thin_file *r = thin_file_new();
    assert_int_equal(thin_file_open(r, f->path, 0), THIN_OK);
    thin_tensor_info t;
    assert_int_equal(thin_file_find(r, f->s.d[1].name, &t), THIN_OK);
    assert_int_equal(t.n_chunks, (48000 + 4095) / 4096);
    assert_int_equal(t.stored_bytes, 48000);
    uint64_t raw = 0;
    for (uint32_t j = 0; j < t.n_chunks; j++) {
        thin_chunk_info c;
        assert_int_equal(thin_file_chunk(r, t.index, j, &c), THIN_OK);
        assert_int_equal(c.offset % 4096, 0);
        assert_int_equal(c.raw_offset, raw);
        raw += c.raw_size;
    }
    assert_int_equal(raw, 48000);
    assert_int_equal(thin_file_chunk(r, t.index, t.n_chunks, &(thin_chunk_info){0}),
                     THIN_E_INVALID_ARG);
    thin_file_free(r);
}

static void test_lookup(void **state)
{
    fx *f = *state;
    assert_int_equal(tu_sample_save(f->path, &f->s, THIN_CODEC_NONE, 0, 0), THIN_OK);
    thin_file *r = thin_file_new();
    assert_int_equal(thin_file_open(r, f->path, 0), THIN_OK);
    thin_tensor_info t;
    assert_int_equal(thin_file_find_role(r, THIN_ROLE_GATE, 0, &t), THIN_OK);
    assert_string_equal(t.name, f->s.d[2].name);
    assert_non_null(t.scale);
    assert_string_equal(t.scale, f->s.d[3].name);
    assert_int_equal(thin_file_find_role(r, THIN_ROLE_LM_HEAD, -1, &t), THIN_OK);
    assert_string_equal(t.tied_to, f->s.d[0].name);
    assert_int_equal(t.n_chunks, 0);
    assert_int_equal(thin_file_find_role(r, THIN_ROLE_GATE, 1, &t), THIN_E_NOT_FOUND);
    assert_int_equal(thin_file_find(r, "missing", &t), THIN_E_NOT_FOUND);
    assert_int_equal(thin_file_find(r, "tokenizer.json", &t), THIN_E_NOT_FOUND);
    const char *js;
    assert_int_equal(thin_file_section(r, "model", &js), THIN_OK);
    assert_string_equal(js, "{\"family\":\"llama\",\"n\":[1,2]}");
    assert_int_equal(thin_file_section(r, "model", &js), THIN_OK);
    assert_int_equal(thin_file_section(r, "tape", &js), THIN_E_NOT_FOUND);
    uint16_t ma, mi;
    thin_file_version(r, &ma, &mi);
    assert_int_equal(ma, 1);
    assert_int_equal(mi, 0);
    thin_file_free(r);
}

static void test_many_dtypes(void **state)
{
    fx *f = *state;
    thin_writer *w = thin_writer_new();
    thin_writer_options o = {.chunk_size = 4096, .codec = THIN_CODEC_ZSTD, .threads = 2};
    assert_int_equal(thin_writer_open(w, f->path, &o), THIN_OK);
    uint8_t *data = malloc(70000);
    tu_fill_low(data, 70000, 9);
    char names[THIN_DTYPE_COUNT_][16];
    for (int dt = 1; dt < THIN_DTYPE_COUNT_; dt++) {
        snprintf(names[dt], 16, "t%d", dt);
        thin_tensor_desc d = tu_desc(names[dt], THIN_ROLE_OTHER, dt % 3 - 1, (thin_dtype)dt, 3,
                                     (uint64_t)dt, 7);
        d.shape[2] = 33;
        assert_int_equal(thin_writer_begin_tensor(w, &d), THIN_OK);
        size_t n = thin_dtype_size((thin_dtype)dt) * (size_t)dt * 7 * 33;
        for (size_t off = 0; off < n; off += 1000) /* many small writes */
            assert_int_equal(thin_writer_write(w, data + off, n - off < 1000 ? n - off : 1000), 0);
        assert_int_equal(thin_writer_end_tensor(w), THIN_OK);
    }
    uint8_t digest[32];
    assert_int_equal(thin_writer_finish(w, digest), THIN_OK);
    thin_writer_free(w);
    thin_file *r = thin_file_new();
    assert_int_equal(thin_file_open(r, f->path, THIN_OPEN_VERIFY), THIN_OK);
    assert_memory_equal(thin_file_digest(r), digest, 32);
    for (uint32_t i = 0; i < thin_file_tensor_count(r); i++) {
        thin_tensor_info t;
        assert_int_equal(thin_file_tensor(r, i, &t), THIN_OK);
        uint8_t *buf = malloc(t.nbytes);
        assert_int_equal(thin_file_tensor_read(r, i, buf, t.nbytes, 1), THIN_OK);
        assert_memory_equal(buf, data, t.nbytes);
        free(buf);
    }
    free(data);
    thin_file_free(r);
}

static void test_memory_and_fd(void **state)
{
    fx *f = *state;
    assert_int_equal(tu_sample_save(f->path, &f->s, THIN_CODEC_ZSTD, 4096, 1), THIN_OK);
    size_t len = 0;
    uint8_t *img = tu_read_file(f->path, &len);
    thin_file *r = thin_file_new();
    assert_int_equal(thin_file_open_memory(r, img, len, "mem", THIN_OPEN_VERIFY), THIN_OK);
    assert_int_equal(thin_file_size(r), len);
    assert_int_equal(thin_file_open_memory(r, img, len, "mem", 0), THIN_E_STATE);
    thin_file_free(r);
    int fds[2];
    assert_int_equal(pipe(fds), 0);
    pid_t pid = fork();
    if (pid == 0) {
        close(fds[0]);
        ssize_t wr = write(fds[1], img, len);
        _exit(wr == (ssize_t)len ? 0 : 1);
    }
    close(fds[1]);
    r = thin_file_new();
    assert_int_equal(thin_file_open_fd(r, fds[0], "pipe", THIN_OPEN_VERIFY), THIN_OK);
    close(fds[0]);
    const char *man;
    size_t ml;
    assert_int_equal(thin_file_manifest(r, &man, &ml), THIN_OK);
    assert_true(ml > 100 && man[0] == '{');
    thin_file_free(r);
    free(img);
}

/* A mixture's expert index: written where given, read back (-1 elsewhere, and on blobs); the
 * writer refuses one below 0 or on a tensor of no layer. */
static void test_expert_index(void **state)
{
    fx *f = *state;
    thin_writer *w = thin_writer_new();
    thin_writer_options o = {.chunk_size = 4096};
    assert_int_equal(thin_writer_open(w, f->path, &o), THIN_OK);
    float v[8] = {0};
    thin_tensor_desc r = tu_desc("model.layers.2.mlp.gate.weight", THIN_ROLE_ROUTER, 2, THIN_DTYPE_F32, 2, 2, 4);
    thin_tensor_desc e = tu_desc("model.layers.2.mlp.experts.5.up_proj.weight", THIN_ROLE_UP, 2, THIN_DTYPE_F32,
                                 2, 2, 4);
    e.has_expert = 1, e.expert = 5;
    assert_int_equal(thin_writer_add_tensor(w, &r, v), THIN_OK);
    assert_int_equal(thin_writer_add_tensor(w, &e, v), THIN_OK);
    thin_tensor_desc bad = e;
    bad.name = "x", bad.expert = -1;
    assert_int_equal(thin_writer_begin_tensor(w, &bad), THIN_E_INVALID_ARG);
    thin_writer_free(w); /* a failed writer is abandoned: start again */
    w = thin_writer_new();
    assert_int_equal(thin_writer_open(w, f->path, &o), THIN_OK);
    bad.expert = 0, bad.layer = -1;
    assert_int_equal(thin_writer_begin_tensor(w, &bad), THIN_E_INVALID_ARG);
    thin_writer_free(w);
    w = thin_writer_new();
    assert_int_equal(thin_writer_open(w, f->path, &o), THIN_OK);
    assert_int_equal(thin_writer_add_tensor(w, &r, v), THIN_OK);
    assert_int_equal(thin_writer_add_tensor(w, &e, v), THIN_OK);
    assert_int_equal(thin_writer_finish(w, NULL), THIN_OK);
    thin_writer_free(w);
    thin_file *rd = thin_file_new();
    assert_int_equal(thin_file_open(rd, f->path, THIN_OPEN_VERIFY), THIN_OK);
    thin_tensor_info t;
    assert_int_equal(thin_file_tensor(rd, 0, &t), THIN_OK);
    assert_int_equal(t.role, THIN_ROLE_ROUTER);
    assert_int_equal(t.expert, -1);
    assert_int_equal(thin_file_tensor(rd, 1, &t), THIN_OK);
    assert_int_equal(t.role, THIN_ROLE_UP);
    assert_int_equal(t.layer, 2);
    assert_int_equal(t.expert, 5);
    thin_file_free(rd);
}

static void test_status_and_roles(void **state)
{
    (void)state;
    assert_string_equal(thin_status_name(THIN_E_CHECKSUM), "THIN_E_CHECKSUM");
    assert_string_equal(thin_status_name(THIN_E_PADDING), "THIN_E_PADDING");
    assert_string_equal(thin_status_name(THIN_OK), "THIN_OK");
    assert_string_equal(thin_status_name((thin_status)-999), "THIN_E_UNKNOWN");
    for (int i = 0; i < THIN_ROLE_COUNT_; i++) {
        thin_role r;
        assert_int_equal(thin_role_from_name(thin_role_name((thin_role)i), &r), THIN_OK);
        assert_int_equal(r, i);
    }
    assert_string_equal(thin_role_name(THIN_ROLE_GATE_UP), "gate_up");
    assert_string_equal(thin_role_name((thin_role)99), "other");
    thin_role r;
    assert_int_equal(thin_role_from_name("bogus", &r), THIN_E_NOT_FOUND);
    uint8_t d[32];
    for (int i = 0; i < 32; i++) d[i] = (uint8_t)(i * 9);
    char hex[65];
    thin_hex32(d, hex);
    assert_int_equal(strlen(hex), 64);
    assert_memory_equal(hex, "0009121b", 8);
    assert_true(thin_cpu_count() >= 1);
}

static int count_progress(void *user, uint64_t done, uint64_t total)
{
    int *n = user;
    ++*n;
    return done > total;
}

static int cancel_progress(void *user, uint64_t done, uint64_t total)
{
    (void)user;
    (void)done;
    (void)total;
    return 1;
}

static void test_verify_progress(void **state)
{
    fx *f = *state;
    assert_int_equal(tu_sample_save(f->path, &f->s, THIN_CODEC_NONE, 4096, 1), THIN_OK);
    thin_file *r = thin_file_new();
    assert_int_equal(thin_file_open(r, f->path, 0), THIN_OK);
    int calls = 0;
    assert_int_equal(thin_file_verify(r, 1, count_progress, &calls), THIN_OK);
    assert_true(calls > 10);
    assert_int_equal(thin_file_verify(r, 2, cancel_progress, NULL), THIN_E_STATE);
    assert_non_null(strstr(thin_file_error(r), "cancelled"));
    thin_file_free(r);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_roundtrip_none, setup, tu_fx_teardown),
        cmocka_unit_test_setup_teardown(test_roundtrip_zstd, setup, tu_fx_teardown),
        cmocka_unit_test_setup_teardown(test_multichunk_layout, setup, tu_fx_teardown),
        cmocka_unit_test_setup_teardown(test_lookup, setup, tu_fx_teardown),
        cmocka_unit_test_setup_teardown(test_many_dtypes, setup, tu_fx_teardown),
        cmocka_unit_test_setup_teardown(test_memory_and_fd, setup, tu_fx_teardown),
        cmocka_unit_test(test_status_and_roles),
        cmocka_unit_test_setup_teardown(test_expert_index, setup, tu_fx_teardown),
        cmocka_unit_test_setup_teardown(test_verify_progress, setup, tu_fx_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
