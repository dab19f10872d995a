/*
 * thin-bench-container.c — throughput of the container core, driven by bench-container.sh:
 *   write FILE MIB [THREADS] [zstd]   writes MIB MiB of random tensors (256 MiB each, 4 MiB chunks)
 *   verify FILE [THREADS]             opens (mmap) and verifies every chunk and the digest
 *   stream                            reads a .thin from stdin in one pass, every byte of every item
 * Prints "SECONDS BYTES" on stdout.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "thin.h"

#define TENSOR_MIB 256

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static int die(const char *what, const char *msg)
{
    fprintf(stderr, "thin-bench-container: %s: %s\n", what, msg);
    return 1;
}

static int do_write(const char *path, long mib, unsigned threads, int zstd)
{
    size_t tbytes = (size_t)TENSOR_MIB << 20;
    uint64_t *buf = malloc(tbytes);
    if (!buf) return die("write", "out of memory");
    uint64_t x = 88172645463325252ull;
    for (size_t i = 0; i < tbytes / 8; i++) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        buf[i] = x;
    }
    thin_writer_options o = {.codec = zstd ? THIN_CODEC_ZSTD : THIN_CODEC_NONE, .threads = threads};
    thin_writer *w = thin_writer_new();
    double t0 = now();
    thin_status s = thin_writer_open(w, path, &o);
    long n = mib / TENSOR_MIB;
    for (long i = 0; !s && i < n; i++) {
        char name[64];
        snprintf(name, sizeof name, "model.layers.%ld.mlp.up_proj.weight", i);
        thin_tensor_desc d = {.name = name, .role = THIN_ROLE_UP, .layer = (int32_t)i,
                              .dtype = THIN_DTYPE_BF16, .rank = 2, .shape = {8192, 16384}};
        buf[0] = (uint64_t)i; /* every tensor differs */
        s = thin_writer_add_tensor(w, &d, buf);
    }
    if (!s) s = thin_writer_finish(w, NULL);
    double t1 = now();
    if (s) return die(path, thin_writer_error(w));
    thin_writer_free(w);
    free(buf);
    printf("%.6f %llu\n", t1 - t0, (unsigned long long)n * tbytes);
    return 0;
}

static int do_verify(const char *path, unsigned threads)
{
    thin_file *f = thin_file_new();
    double t0 = now();
    thin_status s = thin_file_open(f, path, 0);
    if (!s) s = thin_file_verify(f, threads, NULL, NULL);
    double t1 = now();
    if (s) return die(path, thin_file_error(f));
    printf("%.6f %llu\n", t1 - t0, (unsigned long long)thin_file_size(f));
    thin_file_free(f);
    return 0;
}

static int do_stream(void)
{
    size_t cap = (size_t)4 << 20;
    uint8_t *buf = malloc(cap);
    thin_stream *s = thin_stream_new();
    unsigned long long total = 0;
    double t0 = now();
    thin_status st = thin_stream_open_fd(s, 0, "stdin");
    thin_item_kind k = THIN_ITEM_TENSOR;
    while (!st && k != THIN_ITEM_END) {
        st = thin_stream_next(s, &k, NULL);
        size_t got = 1;
        while (!st && k != THIN_ITEM_END && got) {
            st = thin_stream_read(s, buf, cap, &got);
            total += got;
        }
    }
    double t1 = now();
    if (st) return die("stdin", thin_stream_error(s));
    printf("%.6f %llu\n", t1 - t0, total);
    thin_stream_free(s);
    free(buf);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc >= 4 && !strcmp(argv[1], "write"))
        return do_write(argv[2], atol(argv[3]), argc > 4 ? (unsigned)atoi(argv[4]) : 0,
                        argc > 5 && !strcmp(argv[5], "zstd"));
    if (argc >= 3 && !strcmp(argv[1], "verify"))
        return do_verify(argv[2], argc > 3 ? (unsigned)atoi(argv[3]) : 0);
    if (argc == 2 && !strcmp(argv[1], "stream")) return do_stream();
    fprintf(stderr, "usage: thin-bench-container write FILE MIB [THREADS] [zstd] | verify FILE "
                    "[THREADS] | stream\n");
    return 2;
}
