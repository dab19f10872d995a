/*
 * writer_out.c — the writer's output: a buffer over write(2) (never seeking), the temporary file
 * beside an atomic target, fsync, rename and the directory fsync.
 */
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include "writer_private.h"

static thin_status write_all(thin_writer *w, const uint8_t *p, size_t n)
{
    while (n) {
        ssize_t r = write(w->fd, p, n > ((size_t)1 << 30) ? (size_t)1 << 30 : n);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) return thin_writer_fail(w, THIN_E_IO, "write: %s", strerror(errno));
        p += r;
        n -= (size_t)r;
    }
    return THIN_OK;
}

static thin_status flush(thin_writer *w)
{
    thin_status s = write_all(w, w->obuf, w->olen);
    w->olen = 0;
    return s;
}

thin_status thin_wout_write(thin_writer *w, const void *data, size_t n)
{
    thin_status s = THIN_OK;
    w->pos += n;
    if (n >= w->ocap / 2) {
        if (w->olen) s = flush(w);
        return s ? s : write_all(w, data, n);
    }
    if (w->olen + n > w->ocap && (s = flush(w))) return s;
    memcpy(w->obuf + w->olen, data, n);
    w->olen += n;
    return THIN_OK;
}

thin_status thin_wout_zero_to(thin_writer *w, uint64_t align)
{
    static const uint8_t zeros[THIN_DATA_ALIGN];
    uint64_t pad = thin_align_up(w->pos, align) - w->pos;
    return pad ? thin_wout_write(w, zeros, (size_t)pad) : THIN_OK;
}

thin_status thin_wout_open_path(thin_writer *w, const char *path)
{
    struct stat st;
    if (stat(path, &st) == 0 && !S_ISREG(st.st_mode) && !S_ISDIR(st.st_mode)) {
        /* A device or FIFO (/dev/null, /dev/full, a named pipe) is written in place: renaming a
         * temporary file over it would replace the device node. */
        w->fd = open(path, O_WRONLY | O_CLOEXEC);
        if (w->fd < 0) return thin_writer_fail(w, THIN_E_IO, "%s: %s", path, strerror(errno));
        return THIN_OK;
    }
    char *d = strdup(path), *b = strdup(path);
    if (!d || !b) {
        free(d);
        free(b);
        return thin_writer_fail(w, THIN_E_NOMEM, "out of memory");
    }
    const char *dir = dirname(d), *base = basename(b);
    size_t len = strlen(dir) + strlen(base) + 32;
    w->tmp = malloc(len);
    thin_status s = w->tmp ? THIN_OK : thin_writer_fail(w, THIN_E_NOMEM, "out of memory");
    for (int tries = 0; !s && tries < 100; tries++) {
        uint32_t r = 0;
        if (getrandom(&r, sizeof r, 0) != sizeof r) r = (uint32_t)getpid() * 2654435761u + tries;
        snprintf(w->tmp, len, "%s/.%s.%08x.tmp", dir, base, r);
        w->fd = open(w->tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
        if (w->fd >= 0) break;
        if (errno != EEXIST) s = thin_writer_fail(w, THIN_E_IO, "cannot create a temporary file "
                                                  "in %s: %s", dir, strerror(errno));
    }
    if (!s && w->fd < 0) s = thin_writer_fail(w, THIN_E_IO, "cannot create a temporary file");
    if (s) {
        free(w->tmp);
        w->tmp = NULL;
    }
    free(d);
    free(b);
    return s;
}

static thin_status sync_dir(thin_writer *w)
{
    char *d = strdup(w->path);
    if (!d) return thin_writer_fail(w, THIN_E_NOMEM, "out of memory");
    int fd = open(dirname(d), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    free(d);
    if (fd < 0) return THIN_OK; /* the rename happened; a directory we cannot open is not fatal */
    fsync(fd);
    close(fd);
    return THIN_OK;
}

thin_status thin_wout_finish(thin_writer *w)
{
    thin_status s = flush(w);
    if (s) return s;
    struct stat st;
    if (fstat(w->fd, &st) == 0 && S_ISREG(st.st_mode) && fsync(w->fd) != 0)
        return thin_writer_fail(w, THIN_E_IO, "fsync: %s", strerror(errno));
    if (!w->path) return THIN_OK;
    int fd = w->fd;
    w->fd = -1;
    if (close(fd) != 0) return thin_writer_fail(w, THIN_E_IO, "close: %s", strerror(errno));
    if (!w->tmp) return THIN_OK; /* written in place (a device or FIFO) */
    if (rename(w->tmp, w->path) != 0)
        return thin_writer_fail(w, THIN_E_IO, "rename into place: %s", strerror(errno));
    free(w->tmp);
    w->tmp = NULL;
    return sync_dir(w);
}

void thin_wout_abandon(thin_writer *w)
{
    if (w->path && w->fd >= 0) close(w->fd);
    if (w->path) w->fd = -1;
    if (w->tmp) unlink(w->tmp);
    free(w->tmp);
    w->tmp = NULL;
}
