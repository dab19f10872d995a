/*
 * writer.c — the streaming writer's API: options, entries (ENTRY records, CHUNK records after the
 * payloads), manifest sections, the manifest and the trailer (SPEC.md §2–§5).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zstd.h>

#include "manifest_private.h"
#include "writer_private.h"

thin_status thin_writer_fail(thin_writer *w, thin_status s, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    thin_verrf(w->err, w->label ? w->label : "(writer)", fmt, ap);
    va_end(ap);
    w->state = W_FAILED;
    return s;
}

thin_writer *thin_writer_new(void)
{
    thin_writer *w = calloc(1, sizeof *w);
    if (w) w->fd = -1;
    return w;
}

const char *thin_writer_error(const thin_writer *w) { return w ? w->err : ""; }

void thin_writer_free(thin_writer *w)
{
    if (!w) return;
    if (w->state != W_DONE) thin_wout_abandon(w);
    if (w->path && w->fd >= 0) close(w->fd);
    thin_wchunks_free(w);
    json_decref(w->tensors);
    json_decref(w->blobs);
    json_decref(w->sections);
    json_decref(w->cur);
    json_decref(w->cur_chunks);
    thin_names_free(&w->names);
    free(w->recs);
    free(w->sha);
    free(w->obuf);
    free(w->path);
    free(w->tmp);
    free(w->label);
    free(w);
}

static thin_status setup(thin_writer *w, const char *label, const thin_writer_options *opt)
{
    if (w->state != W_NEW) return THIN_E_STATE;
    thin_writer_options o = opt ? *opt : (thin_writer_options){0};
    w->label = strdup(label ? label : "(output)");
    if (!w->label) return THIN_E_NOMEM;
    w->chunk_size = o.chunk_size ? o.chunk_size : THIN_DEFAULT_CHUNK;
    if (w->chunk_size % THIN_DATA_ALIGN || w->chunk_size > THIN_MAX_CHUNK)
        return thin_writer_fail(w, THIN_E_INVALID_ARG, "chunk size must be a multiple of 4096 "
                                "up to 2 GiB");
    if (o.codec != THIN_CODEC_NONE && o.codec != THIN_CODEC_ZSTD)
        return thin_writer_fail(w, THIN_E_CODEC, "unknown codec %d", (int)o.codec);
    if (o.zstd_level < 0 || o.zstd_level > ZSTD_maxCLevel())
        return thin_writer_fail(w, THIN_E_INVALID_ARG, "zstd level out of range");
    w->codec = o.codec;
    w->level = o.zstd_level ? o.zstd_level : 3;
    w->threads = o.threads ? o.threads : thin_cpu_count();
    if (w->threads > 64) w->threads = 64;
    w->ocap = (size_t)1 << 20;
    w->obuf = malloc(w->ocap);
    w->tensors = json_array();
    w->blobs = json_array();
    w->sections = json_object();
    if (!w->obuf || !w->tensors || !w->blobs || !w->sections)
        return thin_writer_fail(w, THIN_E_NOMEM, "out of memory");
    return thin_wchunks_alloc(w);
}

static thin_status start(thin_writer *w)
{
    uint8_t h[64];
    thin_header_encode(h);
    thin_status s = thin_wout_write(w, h, sizeof h);
    if (!s) w->state = W_OPEN;
    return s;
}

thin_status thin_writer_open(thin_writer *w, const char *path, const thin_writer_options *opt)
{
    if (!w || !path) return THIN_E_INVALID_ARG;
    thin_status s = setup(w, path, opt);
    if (s) return s;
    if (!(w->path = strdup(path))) return thin_writer_fail(w, THIN_E_NOMEM, "out of memory");
    if ((s = thin_wout_open_path(w, path))) return s;
    return start(w);
}

thin_status thin_writer_open_fd(thin_writer *w, int fd, const char *label,
                                const thin_writer_options *opt)
{
    if (!w || fd < 0) return THIN_E_INVALID_ARG;
    thin_status s = setup(w, label, opt);
    if (s) return s;
    w->fd = fd;
    return start(w);
}

thin_status thin_wstate(thin_writer *w, int want)
{
    if (!w) return THIN_E_INVALID_ARG;
    if (w->state == W_FAILED) return THIN_E_STATE; /* the message of the failure stays */
    if (w->state != want) {
        const char *why = want == W_ENTRY ? "no tensor or blob is open"
                        : w->state == W_ENTRY ? "a tensor or blob is still open"
                                               : "the writer is not open";
        return thin_writer_fail(w, THIN_E_STATE, "%s", why);
    }
    return THIN_OK;
}

thin_status thin_writer_set_section(thin_writer *w, const char *key, const char *json)
{
    if (!w || !key || !json) return THIN_E_INVALID_ARG;
    if (w->state == W_FAILED || w->state == W_NEW || w->state == W_DONE) return thin_wstate(w, W_OPEN);
    if (!strcmp(key, "format") || !strcmp(key, "tensors") || !strcmp(key, "blobs") || !key[0])
        return thin_writer_fail(w, THIN_E_INVALID_ARG, "section name '%s' is reserved", key);
    json_error_t je;
    json_t *v = json_loads(json, JSON_DECODE_ANY | JSON_REJECT_DUPLICATES, &je);
    if (!v) return thin_writer_fail(w, THIN_E_INVALID_ARG, "section '%s': invalid JSON: %s", key, je.text);
    if (json_object_set_new(w->sections, key, v))
        return thin_writer_fail(w, THIN_E_NOMEM, "out of memory");
    return THIN_OK;
}

/* The manifest: format, tensors, blobs, then the sections in the order they were first set. */
static json_t *build_manifest(thin_writer *w)
{
    json_t *m = json_pack("{s{sssisi}sOsO}", "format", "name", "thin", "major", THIN_VERSION_MAJOR,
                          "minor", THIN_VERSION_MINOR, "tensors", w->tensors, "blobs", w->blobs);
    if (m && json_object_update(m, w->sections)) {
        json_decref(m);
        m = NULL;
    }
    return m;
}

/* Checks the manifest exactly as a reader will (links, names, sizes). */
static thin_status check_manifest(thin_writer *w, json_t *m)
{
    thin_layout L;
    char err[THIN_ERR_LEN];
    thin_status s = thin_manifest_parse(m, THIN_VERSION_MAJOR, THIN_VERSION_MINOR, w->pos, &L,
                                        err, w->label);
    if (s) {
        snprintf(w->err, THIN_ERR_LEN, "%s", err);
        w->state = W_FAILED;
        return s;
    }
    thin_layout_free(&L);
    return THIN_OK;
}

static thin_status write_tail(thin_writer *w, const char *man, size_t len, uint8_t digest[32])
{
    uint8_t h[64], sha[32];
    thin_trailer t = {.manifest_offset = w->pos, .manifest_size = len};
    thin_record r = {.type = THIN_REC_MANIFEST, .offset = w->pos + 64, .stored = len, .raw = len};
    thin_status s = thin_sha256(man, len, sha);
    if (!s) s = thin_digest_compute(man, len, (const uint8_t(*)[32])w->sha, w->n_sha, t.digest);
    if (s) return thin_writer_fail(w, s, "SHA-256 failed");
    memcpy(r.sha, sha, 16);
    thin_record_encode(&r, h);
    if ((s = thin_wout_write(w, h, 64)) || (s = thin_wout_write(w, man, len)) ||
        (s = thin_wout_zero_to(w, 64)))
        return s;
    thin_trailer_encode(&t, h);
    if ((s = thin_wout_write(w, h, 64))) return s;
    if (digest) memcpy(digest, t.digest, 32);
    return THIN_OK;
}

thin_status thin_writer_finish(thin_writer *w, uint8_t digest[32])
{
    thin_status s = thin_wstate(w, W_OPEN);
    if (s) return s;
    json_t *m = build_manifest(w);
    if (!m) return thin_writer_fail(w, THIN_E_NOMEM, "out of memory");
    char *man = NULL;
    s = check_manifest(w, m);
    if (!s && !(man = json_dumps(m, JSON_COMPACT)))
        s = thin_writer_fail(w, THIN_E_NOMEM, "out of memory");
    json_decref(m);
    size_t len = man ? strlen(man) : 0;
    if (!s && len > THIN_MAX_MANIFEST)
        s = thin_writer_fail(w, THIN_E_LIMIT, "manifest larger than 256 MiB");
    if (!s) s = write_tail(w, man, len, digest);
    free(man);
    if (!s) s = thin_wout_finish(w);
    if (!s) w->state = W_DONE;
    return s;
}
