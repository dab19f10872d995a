/*
 * fuzz_inspect_stats.c — thin-inspect --stats on arbitrary bytes: a mapped image summed in place
 * on two threads, and the same bytes as a one-pass stream (pieces of odd sizes, the manifest's
 * scales resolved after it), each printed as text and added to the JSON listing. The two must
 * agree wherever both take the file. Any crash, leak or sanitizer report is a bug.
 */
#include <jansson.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "show.h"
#include "stats.h"
#include "thin.h"

#include "fuzz_thin_fix.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const show_filter ALL = {NULL, -2, NULL};

/* The stats as JSON text (the caller frees), printed as text too. */
static char *render(const stats_set *s, json_t *manifest, uint64_t size)
{
    show_file sf = {"fuzz.thin", size, "0", manifest, -1};
    FILE *null = fopen("/dev/null", "w");
    if (null) {
        stats_text(null, s, &sf, &ALL);
        fclose(null);
    }
    json_t *l = show_json(&sf, &ALL, 0);
    char *text = NULL;
    if (l) {
        stats_json(l, s);
        text = json_dumps(json_object_get(l, "tensors"), JSON_SORT_KEYS);
    }
    json_decref(l);
    return text;
}

static char *mapped(const uint8_t *data, size_t size)
{
    thin_file *f = thin_file_new();
    stats_set *s = stats_new();
    const char *text;
    size_t len;
    char *out = NULL;
    if (f && s && thin_file_open_memory(f, data, size, "fuzz.thin", 0) == THIN_OK &&
        thin_file_manifest(f, &text, &len) == THIN_OK) {
        json_t *m = json_loadb(text, len, 0, NULL);
        if (m && stats_file(s, f, &ALL, 2) == 0)
            out = render(s, m, size);
        json_decref(m);
    }
    stats_free(s);
    thin_file_free(f);
    return out;
}

static char *streamed(const uint8_t *data, size_t size)
{
    int fd = memfd_create("fuzz-stats", 0);
    if (fd < 0) return NULL;
    if (write(fd, data, size) != (ssize_t)size || lseek(fd, 0, SEEK_SET) != 0) {
        close(fd);
        return NULL;
    }
    thin_stream *st = thin_stream_new();
    stats_set *s = stats_new();
    char *out = NULL;
    thin_item_kind kind;
    thin_tensor_info ti;
    uint8_t buf[1000];
    int ok = st && s && thin_stream_open_fd(st, fd, "fuzz.thin") == THIN_OK;
    for (unsigned item = 0; ok; item++) {
        if (thin_stream_next(st, &kind, &ti) != THIN_OK) break;
        if (kind == THIN_ITEM_END) {
            const char *text;
            size_t len;
            json_t *m = thin_stream_manifest(st, &text, &len) == THIN_OK ? json_loadb(text, len, 0, NULL) : NULL;
            if (m) {
                stats_resolve(s, m);
                out = render(s, m, size);
            }
            json_decref(m);
            break;
        }
        if (kind != THIN_ITEM_TENSOR) continue;
        if (stats_begin(s, &ti)) break;
        size_t got = 0, cap = 1 + item * 37 % sizeof buf;
        while ((ok = thin_stream_read(st, buf, cap, &got) == THIN_OK) && got > 0) stats_feed(s, buf, got);
        if (ok && stats_end(s)) ok = 0;
    }
    stats_free(s);
    thin_stream_free(st);
    close(fd);
    return out;
}

static void one(const uint8_t *data, size_t size)
{
    char *a = mapped(data, size), *b = a ? streamed(data, size) : NULL;
    /* a file both readers take fully gives the same figures (NaN figures print as null either way) */
    if (a && b && strcmp(a, b) != 0) abort();
    free(a);
    free(b);
    if (!a) free(streamed(data, size));
}

/* Each input runs as given, then with its checksums made consistent (fuzz_thin_fix.h). */
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    one(data, size);
    uint8_t *fixed = fuzz_thin_fix(data, size);
    if (fixed) one(fixed, size);
    free(fixed);
    return 0;
}
