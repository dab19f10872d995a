/* pack_stream.c — one-pass inputs: archives through libarchive, a bare SafeTensors stream. */
#include "pack_private.h"

#include <archive.h>
#include <archive_entry.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"

int pack_open_writer(pack *p)
{
    if (p->w)
        return 0;
    p->w = thin_writer_new();
    if (!p->w)
        return pack_fail("out of memory");
    thin_status s = strcmp(p->o->output, "-") == 0
                        ? thin_writer_open_fd(p->w, 1, "stdout", &p->o->writer)
                        : thin_writer_open(p->w, p->o->output, &p->o->writer);
    if (s != THIN_OK)
        return pack_fail("%s", thin_writer_error(p->w));
    return 0;
}

/* Reads the rest of the input to count trailing bytes. */
static int check_end(pack *p, pack_read_fn rd, void *ctx, const st_header *h, const char *label)
{
    uint64_t extra = 0;
    size_t got;
    do {
        if (rd(ctx, p->buf, PACK_BLOCK, &got))
            return -1;
        extra += got;
    } while (got > 0);
    if (extra)
        return pack_fail("%s: %llu trailing bytes after the last tensor (data ends at %llu)",
                         label, (unsigned long long)extra, (unsigned long long)h->data_size);
    return 0;
}

static int read_header(pack *p, pack_read_fn rd, void *ctx, uint64_t size, const char *label,
                       st_header *h)
{
    uint8_t prefix[8];
    uint64_t hlen;
    size_t got;
    char err[1024];
    if (rd(ctx, prefix, 8, &got))
        return -1;
    if (got < 8)
        return pack_fail("%s: truncated: %zu bytes, too short for the 8-byte header length",
                         label, got);
    if (st_parse_prefix(prefix, size, &hlen, err, sizeof err))
        return pack_fail("%s: %s", label, err);
    char *json = malloc((size_t)hlen);
    if (!json)
        return pack_fail("out of memory");
    int rc = rd(ctx, json, (size_t)hlen, &got);
    if (!rc && got < hlen)
        rc = pack_fail("%s: truncated: the input ends inside the header", label);
    if (!rc && st_parse_header(json, (size_t)hlen, label, h, err, sizeof err))
        rc = pack_fail("%s", err);
    free(json);
    if (!rc && size != ST_SIZE_UNKNOWN &&
        st_check_data_size(h, size - 8 - hlen, label, err, sizeof err)) {
        st_header_free(h);
        rc = pack_fail("%s", err);
    }
    return rc;
}

int pack_stream_shard(pack *p, pack_read_fn rd, void *ctx, uint64_t size, const char *label)
{
    st_header h;
    if (read_header(p, rd, ctx, size, label, &h))
        return -1;
    const char *base = source_base(label);
    int rc = pack_plan_shard(p, &h, base) || pack_keep_metadata(p, base, &h) ||
             json_array_append_new(p->source_files, json_string(base)) || pack_open_writer(p);
    for (size_t i = 0; !rc && i < h.n_tensors; i++)
        rc = pack_write_read(p, &h.tensors[i], rd, ctx, label);
    rc = rc || check_end(p, rd, ctx, &h, label);
    st_header_free(&h);
    return rc ? -1 : 0;
}

static int fd_read(void *ctx, void *buf, size_t n, size_t *got)
{
    source_fd *s = ctx;
    if (source_fd_read(s, buf, n, got))
        return pack_fail("%s: read error: %s", s->label, strerror(errno));
    return 0;
}

/* libarchive pulls raw (compressed) bytes through here, so they are hashed as read. */
static la_ssize_t arc_pull(struct archive *a, void *ctx, const void **out)
{
    source_fd *s = ctx;
    size_t got;
    if (source_fd_read(s, s->buf, s->buf_size, &got)) {
        archive_set_error(a, errno, "%s: read error: %s", s->label, strerror(errno));
        return -1;
    }
    *out = s->buf;
    return (la_ssize_t)got;
}

typedef struct entry_ctx {
    struct archive *a;
    const char *label;
} entry_ctx;

static int arc_read(void *ctx, void *buf, size_t n, size_t *got)
{
    entry_ctx *e = ctx;
    size_t have = 0;
    while (have < n) {
        la_ssize_t r = archive_read_data(e->a, (uint8_t *)buf + have, n - have);
        if (r < 0)
            return pack_fail("%s: %s", e->label, archive_error_string(e->a));
        if (r == 0)
            break;
        have += (size_t)r;
    }
    *got = have;
    return 0;
}

/* Reads a small entry (side file or index) whole, up to SOURCE_MAX_SIDE bytes. */
static int read_small(struct archive *a, const char *label, uint8_t **data, size_t *size)
{
    entry_ctx ec = {a, label};
    size_t cap = 0, len = 0, got = 1;
    uint8_t *buf = NULL;
    while (got > 0) {
        if (len == cap) {
            cap = cap ? cap * 2 : (size_t)64 << 10;
            uint8_t *b = cap <= 2 * SOURCE_MAX_SIDE ? realloc(buf, cap + 1) : NULL;
            if (!b) {
                free(buf);
                return pack_fail("%s: out of memory or larger than %zu MiB", label,
                                 SOURCE_MAX_SIDE >> 20);
            }
            buf = b;
        }
        if (arc_read(&ec, buf + len, cap - len, &got)) {
            free(buf);
            return -1;
        }
        len += got;
    }
    if (len > SOURCE_MAX_SIDE) {
        free(buf);
        return pack_fail("%s: larger than %zu MiB", label, SOURCE_MAX_SIDE >> 20);
    }
    buf[len] = 0;
    *data = buf;
    *size = len;
    return 0;
}

static int ends_with(const char *s, const char *suffix)
{
    size_t a = strlen(s), b = strlen(suffix);
    return a >= b && strcmp(s + a - b, suffix) == 0;
}

/* One regular entry of the archive. */
static int take_entry(pack *p, struct archive *a, struct archive_entry *e, const char *arc)
{
    char label[1024];
    const char *path = archive_entry_pathname(e);
    const char *base = source_base(path ? path : "");
    snprintf(label, sizeof label, "%s:%s", arc, path ? path : "?");
    if (!path || base[0] == '.')
        return 0;
    if (ends_with(base, ".safetensors")) {
        entry_ctx ec = {a, label};
        uint64_t size = archive_entry_size_is_set(e) ? (uint64_t)archive_entry_size(e)
                                                     : ST_SIZE_UNKNOWN;
        return pack_stream_shard(p, arc_read, &ec, size, label);
    }
    int is_index = strcmp(base, "model.safetensors.index.json") == 0;
    if (!is_index && source_side_index(base) < 0)
        return 0;
    uint8_t *data = NULL;
    size_t size = 0;
    char err[1024];
    if (read_small(a, label, &data, &size))
        return -1;
    if (!is_index)
        return pack_take_side(p, base, data, size);
    int rc = p->weight_map ? pack_fail("%s: a second index", label)
                           : source_parse_index(label, data, size, &p->weight_map, err, sizeof err)
                                 ? pack_fail("%s", err) : 0;
    free(data);
    return rc;
}

static int walk_archive(pack *p, source_fd *src)
{
    struct archive *a = archive_read_new();
    if (!a)
        return pack_fail("out of memory");
    archive_read_support_filter_all(a);
    archive_read_support_format_tar(a);
    archive_read_support_format_gnutar(a);
    archive_read_support_format_zip(a);
    int rc = 0;
    if (archive_read_open(a, src, NULL, arc_pull, NULL) != ARCHIVE_OK)
        rc = pack_fail("%s: not a SafeTensors file, index, folder or supported archive: %s",
                       src->label, archive_error_string(a));
    struct archive_entry *e;
    int r = ARCHIVE_OK;
    while (!rc && (r = archive_read_next_header(a, &e)) == ARCHIVE_OK)
        if (archive_entry_filetype(e) == AE_IFREG)
            rc = take_entry(p, a, e, src->label);
    if (!rc && r != ARCHIVE_EOF)
        rc = pack_fail("%s: not a SafeTensors file, index, folder or supported archive: %s",
                       src->label, archive_error_string(a));
    archive_read_free(a);
    if (!rc && p->n_t == 0)
        rc = pack_fail("%s: the archive holds no .safetensors file", src->label);
    return rc || pack_check_weight_map(p) ? -1 : 0;
}

int pack_stream(pack *p, source_kind kind)
{
    int is_stdin = strcmp(p->o->input, "-") == 0;
    source_fd src = {.fd = 0, .label = is_stdin ? "stdin" : p->o->input, .sha = p->sha};
    if (!is_stdin && (src.fd = open(p->o->input, O_RDONLY | O_CLOEXEC)) < 0)
        return pack_fail("%s: %s", p->o->input, strerror(errno));
    int rc = 0;
    if (is_stdin) {
        ssize_t n;
        while ((n = read(0, src.prefix + src.prefix_len, sizeof src.prefix - src.prefix_len)) > 0)
            if ((src.prefix_len += (size_t)n) == sizeof src.prefix)
                break;
        if (n < 0)
            rc = pack_fail("stdin: read error: %s", strerror(errno));
        else if (src.prefix_len >= 4 && memcmp(src.prefix, "GGUF", 4) == 0)
            rc = pack_fail("stdin: a GGUF file is not a model to pack (use --tokenizer for a "
                           "vocab-only GGUF)");
        else if (source_looks_safetensors(src.prefix, src.prefix_len)) {
            return pack_stream_shard(p, fd_read, &src, ST_SIZE_UNKNOWN, "stdin");
        }
    }
    src.buf_size = (size_t)1 << 20;
    src.buf = rc ? NULL : malloc(src.buf_size);
    if (!rc)
        rc = src.buf ? walk_archive(p, &src) : pack_fail("out of memory");
    free(src.buf);
    if (!is_stdin)
        close(src.fd);
    (void)kind;
    return rc;
}
