/*
 * fuzz_thin_stream.c — the one-pass stream reader on arbitrary bytes fed through a memfd: every
 * item is read to its end (in odd-sized pieces), then the manifest, sections and digest. Half of
 * the items are skipped instead, so the skip path (hashing unread bytes) runs too.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "thin.h"

#include "fuzz_thin_fix.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int stream_memfd(const uint8_t *data, size_t size)
{
    int fd = memfd_create("fuzz-stream", 0);
    if (fd < 0) return -1;
    size_t off = 0;
    while (off < size) {
        ssize_t w = write(fd, data + off, size - off);
        if (w <= 0) {
            close(fd);
            return -1;
        }
        off += (size_t)w;
    }
    if (lseek(fd, 0, SEEK_SET) != 0) {
        close(fd);
        return -1;
    }
    return fd;
}

static void stream_drain(thin_stream *s)
{
    thin_item_kind kind;
    thin_tensor_info info;
    unsigned char buf[1000];
    for (unsigned item = 0; thin_stream_next(s, &kind, &info) == THIN_OK; item++) {
        if (kind == THIN_ITEM_END) {
            const char *json;
            size_t len;
            (void)thin_stream_manifest(s, &json, &len);
            (void)thin_stream_section(s, "model", &json);
            (void)thin_stream_section(s, "tape", &json);
            (void)thin_stream_digest(s);
            return;
        }
        if (item % 2) continue; /* skipped: thin_stream_next hashes the rest */
        size_t got = 0, cap = 1 + item % sizeof buf;
        while (thin_stream_read(s, buf, cap, &got) == THIN_OK && got > 0) {
        }
    }
}

static void stream_one(const uint8_t *data, size_t size)
{
    int fd = stream_memfd(data, size);
    if (fd < 0) return;
    thin_stream *s = thin_stream_new();
    if (s && thin_stream_open_fd(s, fd, "fuzz.thin") == THIN_OK) stream_drain(s);
    if (s) (void)strlen(thin_stream_error(s));
    thin_stream_free(s);
    close(fd);
}

/* Each input runs as given, then with its checksums made consistent (fuzz_thin_fix.h). */
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    stream_one(data, size);
    uint8_t *fixed = fuzz_thin_fix(data, size);
    if (fixed) stream_one(fixed, size);
    free(fixed);
    return 0;
}
