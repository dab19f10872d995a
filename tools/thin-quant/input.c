/*
 * input.c — reading thin-quant's input tensor by tensor (see input.h).
 */
#include "input.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static int fail(tq_input *in, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static int fail(tq_input *in, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(in->err, sizeof in->err, fmt, ap);
    va_end(ap);
    return -1;
}

/* Copies stdin to an unlinked temporary file; returns its descriptor (at offset 0) or -1. */
static int spool_stdin(tq_input *in)
{
    const char *dir = getenv("TMPDIR");
    char path[4096];
    snprintf(path, sizeof path, "%s/thin-quant.XXXXXX", dir && *dir ? dir : "/tmp");
    int fd = mkstemp(path);
    if (fd < 0)
        return fail(in, "cannot create a temporary file in %s: %s", dir && *dir ? dir : "/tmp",
                    strerror(errno));
    unlink(path);
    static unsigned char buf[1 << 20];
    for (;;) {
        ssize_t n = read(0, buf, sizeof buf);
        if (n == 0)
            break;
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 || write(fd, buf, (size_t)n) != n) {
            fail(in, "copying stdin to a temporary file: %s", strerror(errno));
            close(fd);
            return -1;
        }
    }
    if (lseek(fd, 0, SEEK_SET) != 0) {
        fail(in, "temporary file: %s", strerror(errno));
        close(fd);
        return -1;
    }
    return fd;
}

int tq_input_open(tq_input *in, const char *path, int spool)
{
    memset(in, 0, sizeof *in);
    in->spool_fd = -1;
    int is_stdin = strcmp(path, "-") == 0;
    in->label = is_stdin ? "<stdin>" : path;
    struct stat st;
    int pipe_like = is_stdin && !(fstat(0, &st) == 0 && S_ISREG(st.st_mode));
    thin_status rc;
    if (pipe_like && !spool) {
        if (!(in->s = thin_stream_new()))
            return fail(in, "out of memory");
        if ((rc = thin_stream_open_fd(in->s, 0, in->label)) != THIN_OK)
            return fail(in, "%s", thin_stream_error(in->s));
        return 0;
    }
    if (!(in->f = thin_file_new()))
        return fail(in, "out of memory");
    if (pipe_like) {
        if ((in->spool_fd = spool_stdin(in)) < 0)
            return -1;
        rc = thin_file_open_fd(in->f, in->spool_fd, in->label, 0);
    } else if (is_stdin) {
        rc = thin_file_open_fd(in->f, 0, in->label, 0);
    } else {
        rc = thin_file_open(in->f, path, 0);
    }
    if (rc != THIN_OK)
        return fail(in, "%s", thin_file_error(in->f));
    return 0;
}

void tq_input_close(tq_input *in)
{
    free(in->owned);
    free(in->scratch);
    thin_file_free(in->f);
    thin_stream_free(in->s);
    if (in->spool_fd >= 0)
        close(in->spool_fd);
    memset(in, 0, sizeof *in);
    in->spool_fd = -1;
}

int tq_input_is_stream(const tq_input *in)
{
    return in->s != NULL;
}

/* File mode: makes the bytes of tensor i available, verifying each chunk's checksum. */
static int file_load(tq_input *in, uint32_t i, const thin_tensor_info *info)
{
    const void *p;
    in->data = NULL;
    in->pos = 0;
    in->len = info->tied_to ? 0 : info->nbytes;
    if (in->len == 0)
        return 0;
    thin_status rc = thin_file_tensor_data(in->f, i, &p);
    if (rc == THIN_OK) {
        if ((rc = thin_file_verify_tensor(in->f, i)) != THIN_OK)
            return fail(in, "%s", thin_file_error(in->f));
        in->data = p;
        return 0;
    }
    if (rc != THIN_E_UNSUPPORTED)
        return fail(in, "%s", thin_file_error(in->f));
    if (info->nbytes > SIZE_MAX || !(in->owned = malloc((size_t)info->nbytes)))
        return fail(in, "%s: out of memory reading tensor %s", in->label, info->name);
    if ((rc = thin_file_tensor_read(in->f, i, in->owned, (size_t)info->nbytes, 1)) != THIN_OK)
        return fail(in, "%s", thin_file_error(in->f));
    in->data = in->owned;
    return 0;
}

int tq_input_next(tq_input *in, tq_item *kind, thin_tensor_info *info)
{
    free(in->owned);
    in->owned = NULL;
    in->data = NULL;
    in->pos = in->len = 0;
    if (in->s) {
        thin_item_kind k;
        if (thin_stream_next(in->s, &k, info) != THIN_OK)
            return fail(in, "%s", thin_stream_error(in->s));
        *kind = k == THIN_ITEM_TENSOR ? TQ_ITEM_TENSOR : k == THIN_ITEM_BLOB ? TQ_ITEM_BLOB
                                                                             : TQ_ITEM_END;
        if (*kind != TQ_ITEM_END)
            in->len = info->tied_to ? 0 : info->nbytes;
        return 0;
    }
    if (in->next >= thin_file_tensor_count(in->f)) {
        *kind = TQ_ITEM_END;
        return 0;
    }
    uint32_t i = in->next++;
    if (thin_file_tensor(in->f, i, info) != THIN_OK)
        return fail(in, "%s", thin_file_error(in->f));
    *kind = TQ_ITEM_TENSOR;
    return file_load(in, i, info);
}

int tq_input_view(tq_input *in, size_t n, const unsigned char **p)
{
    if (n > in->len - in->pos)
        return fail(in, "%s: read past the end of an item", in->label);
    if (in->f) {
        *p = in->data + in->pos;
        in->pos += n;
        return 0;
    }
    if (n > in->scratch_cap) {
        unsigned char *b = realloc(in->scratch, n);
        if (!b)
            return fail(in, "%s: out of memory", in->label);
        in->scratch = b;
        in->scratch_cap = n;
    }
    for (size_t have = 0; have < n;) {
        size_t got = 0;
        if (thin_stream_read(in->s, in->scratch + have, n - have, &got) != THIN_OK)
            return fail(in, "%s", thin_stream_error(in->s));
        if (got == 0)
            return fail(in, "%s: item ends early", in->label);
        have += got;
    }
    in->pos += n;
    *p = in->scratch;
    return 0;
}

int tq_input_manifest(tq_input *in, const char **json, size_t *len)
{
    thin_status rc = in->s ? thin_stream_manifest(in->s, json, len)
                           : thin_file_manifest(in->f, json, len);
    if (rc != THIN_OK)
        return fail(in, "%s", in->s ? thin_stream_error(in->s) : thin_file_error(in->f));
    return 0;
}

const uint8_t *tq_input_digest(const tq_input *in)
{
    return in->s ? thin_stream_digest(in->s) : thin_file_digest(in->f);
}
