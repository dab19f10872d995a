/*
 * test_stream.c — the writer to a pipe and the one-pass stream reader: a file written to a pipe
 * equals the one written to a path byte for byte; the stream reader yields the same bytes, skips
 * unread data, checks the manifest and digest, and reports damage.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <sys/wait.h>

#include <cmocka.h>

#include "thin_test_util.h"

typedef tu_fx fx;

static int setup(void **state) { return tu_fx_setup(state, "model.thin", 3); }

/* Reads fd to the end into memory. */
static uint8_t *slurp(int fd, size_t *len)
{
    size_t cap = 1 << 16;
    uint8_t *b = malloc(cap);
    *len = 0;
    ssize_t n;
    while ((n = read(fd, b + *len, cap - *len)) > 0) {
        *len += (size_t)n;
        if (*len == cap) b = realloc(b, cap *= 2);
    }
    return b;
}

/* A child process feeding `img` into a pipe; returns the read end. */
static int feed(const uint8_t *img, size_t len, pid_t *pid)
{
    int fds[2];
    assert_int_equal(pipe(fds), 0);
    *pid = fork();
    if (*pid == 0) {
        close(fds[0]);
        size_t off = 0;
        while (off < len) { /* small writes: the reader sees many partial reads */
            size_t n = len - off < 7777 ? len - off : 7777;
            ssize_t w = write(fds[1], img + off, n);
            if (w <= 0) _exit(1);
            off += (size_t)w;
        }
        _exit(0);
    }
    close(fds[1]);
    return fds[0];
}

static void reap(pid_t pid)
{
    int st;
    waitpid(pid, &st, 0);
}

static void test_pipe_equals_path(void **state)
{
    fx *f = *state;
    for (int codec = 0; codec < 2; codec++) {
        assert_int_equal(tu_sample_save(f->path, &f->s, (thin_codec)codec, 8192, 2), THIN_OK);
        size_t flen;
        uint8_t *fimg = tu_read_file(f->path, &flen);
        int fds[2];
        assert_int_equal(pipe(fds), 0);
        pid_t pid = fork();
        if (pid == 0) {
            close(fds[0]);
            thin_writer_options o = {.chunk_size = 8192, .codec = (thin_codec)codec, .threads = 1};
            thin_writer *w = thin_writer_new();
            thin_status st = thin_writer_open_fd(w, fds[1], "pipe", &o);
            if (!st) st = tu_sample_write(w, &f->s);
            thin_writer_free(w);
            _exit(st ? 1 : 0);
        }
        close(fds[1]);
        size_t plen;
        uint8_t *pimg = slurp(fds[0], &plen);
        close(fds[0]);
        int status;
        waitpid(pid, &status, 0);
        assert_int_equal(WEXITSTATUS(status), 0);
        assert_int_equal(plen, flen);
        assert_memory_equal(pimg, fimg, flen);
        free(pimg);
        free(fimg);
    }
}

/* Streams the file at f->path, reading every item in pieces of `piece` bytes (0: skip data). */
static void stream_check(fx *f, size_t piece)
{
    size_t len;
    uint8_t *img = tu_read_file(f->path, &len);
    pid_t pid;
    int fd = feed(img, len, &pid);
    thin_stream *s = thin_stream_new();
    assert_int_equal(thin_stream_open_fd(s, fd, "pipe"), THIN_OK);
    int tensors = 0, blobs = 0;
    uint8_t *buf = malloc(1 << 20);
    for (;;) {
        thin_item_kind k;
        thin_tensor_info t;
        assert_int_equal(thin_stream_next(s, &k, &t), THIN_OK);
        if (k == THIN_ITEM_END) break;
        assert_int_equal(thin_stream_size(s), 0); /* known only at the end */
        const uint8_t *want = f->s.blob;
        if (k == THIN_ITEM_TENSOR) {
            assert_string_equal(t.name, f->s.d[tensors].name);
            assert_int_equal(t.dtype, f->s.d[tensors].dtype);
            want = f->s.data[tensors++];
        } else {
            assert_string_equal(t.name, "tokenizer.json");
            assert_int_equal(t.nbytes, f->s.blob_len);
            blobs++;
        }
        if (!piece || t.tied_to) continue;
        size_t off = 0, got;
        do {
            assert_int_equal(thin_stream_read(s, buf + off, piece, &got), THIN_OK);
            off += got;
        } while (got);
        assert_int_equal(off, t.nbytes);
        assert_memory_equal(buf, want, off);
    }
    assert_int_equal(tensors, TU_N);
    assert_int_equal(blobs, 1);
    thin_file *r = thin_file_new();
    assert_int_equal(thin_file_open(r, f->path, 0), THIN_OK);
    const char *m1, *m2, *sec;
    size_t l1, l2;
    assert_int_equal(thin_stream_manifest(s, &m1, &l1), THIN_OK);
    assert_int_equal(thin_file_manifest(r, &m2, &l2), THIN_OK);
    assert_int_equal(l1, l2);
    assert_memory_equal(m1, m2, l1);
    assert_memory_equal(thin_stream_digest(s), thin_file_digest(r), 32);
    assert_int_equal(thin_stream_size(s), len);
    assert_int_equal(thin_stream_size(s), thin_file_size(r));
    assert_int_equal(thin_stream_section(s, "model", &sec), THIN_OK);
    assert_string_equal(sec, "{\"family\":\"llama\",\"n\":[1,2]}");
    assert_int_equal(thin_stream_section(s, "nothing", &sec), THIN_E_NOT_FOUND);
    thin_file_free(r);
    thin_stream_free(s);
    close(fd);
    reap(pid);
    free(buf);
    free(img);
}

static void test_stream_none(void **state)
{
    fx *f = *state;
    assert_int_equal(tu_sample_save(f->path, &f->s, THIN_CODEC_NONE, 8192, 2), THIN_OK);
    stream_check(f, 1000);
    stream_check(f, 1 << 20);
    stream_check(f, 0);
}

static void test_stream_zstd(void **state)
{
    fx *f = *state;
    assert_int_equal(tu_sample_save(f->path, &f->s, THIN_CODEC_ZSTD, 4096, 2), THIN_OK);
    stream_check(f, 333);
    stream_check(f, 0);
}

/* Streams a damaged image to the end; returns the first error. */
static thin_status stream_all(const uint8_t *img, size_t len)
{
    pid_t pid;
    int fd = feed(img, len, &pid);
    thin_stream *s = thin_stream_new();
    thin_status st = thin_stream_open_fd(s, fd, "bad");
    thin_item_kind k = THIN_ITEM_TENSOR;
    uint8_t buf[4096];
    size_t got;
    while (!st && k != THIN_ITEM_END) {
        st = thin_stream_next(s, &k, NULL);
        if (!st && k != THIN_ITEM_END) st = thin_stream_read(s, buf, sizeof buf, &got);
    }
    if (st) assert_true(strlen(thin_stream_error(s)) > 5);
    thin_stream_free(s);
    close(fd);
    reap(pid);
    return st;
}

static void test_stream_damage(void **state)
{
    fx *f = *state;
    assert_int_equal(tu_sample_save(f->path, &f->s, THIN_CODEC_NONE, 8192, 1), THIN_OK);
    thin_file *r = thin_file_new();
    assert_int_equal(thin_file_open(r, f->path, 0), THIN_OK);
    thin_chunk_info c;
    assert_int_equal(thin_file_chunk(r, 1, 2, &c), THIN_OK);
    thin_file_free(r);
    size_t len;
    uint8_t *img = tu_read_file(f->path, &len);
    assert_int_equal(stream_all(img, len), THIN_OK);
    img[c.offset + 5] ^= 1;
    assert_int_equal(stream_all(img, len), THIN_E_CHECKSUM);
    img[c.offset + 5] ^= 1;
    img[c.offset + c.stored_size] ^= 1; /* padding after a chunk... or the next chunk */
    assert_true(stream_all(img, len) != THIN_OK);
    img[c.offset + c.stored_size] ^= 1;
    assert_int_equal(stream_all(img, len - 64), THIN_E_TRUNCATED);
    assert_int_equal(stream_all(img, 30), THIN_E_TRUNCATED);
    img[len - 10] ^= 1;
    assert_int_equal(stream_all(img, len), THIN_E_BAD_TRAILER);
    img[len - 10] ^= 1;
    img[0] = 'X';
    assert_int_equal(stream_all(img, len), THIN_E_BAD_MAGIC);
    free(img);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_pipe_equals_path, setup, tu_fx_teardown),
        cmocka_unit_test_setup_teardown(test_stream_none, setup, tu_fx_teardown),
        cmocka_unit_test_setup_teardown(test_stream_zstd, setup, tu_fx_teardown),
        cmocka_unit_test_setup_teardown(test_stream_damage, setup, tu_fx_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
