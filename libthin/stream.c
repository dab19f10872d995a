/*
 * stream.c — the one-pass stream reader: buffered input from a descriptor, ENTRY records as
 * items, chunk payloads decoded and hashed as they pass, CHUNK records checked at each item's end.
 * Memory: the input buffer, one zstd window (at most a chunk) and the per-entry bookkeeping.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zstd.h>

#include "stream_private.h"

#define IN_CAP ((size_t)1 << 20)

thin_status thin_stream_fail(thin_stream *s, thin_status st, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    thin_verrf(s->err, s->label ? s->label : "(stream)", fmt, ap);
    va_end(ap);
    s->state = S_FAILED;
    return st;
}

thin_stream *thin_stream_new(void) { return calloc(1, sizeof(thin_stream)); }

const char *thin_stream_error(const thin_stream *s) { return s ? s->err : ""; }

const uint8_t *thin_stream_digest(const thin_stream *s) { return s->trailer.digest; }

uint64_t thin_stream_size(const thin_stream *s) { return s && s->state == S_END ? s->pos : 0; }

void thin_stream_free(thin_stream *s)
{
    if (!s) return;
    free(s->label);
    free(s->in);
    for (size_t i = 0; i < s->n_seen; i++) json_decref(s->seen[i].desc);
    free(s->seen);
    free(s->chunks);
    thin_sha256_free(&s->sha);
    thin_sha256_free(&s->zsha);
    free(s->stored_sha);
    ZSTD_freeDStream(s->zd);
    free(s->manifest);
    json_decref(s->root);
    for (size_t i = 0; i < s->n_sec; i++) {
        free(s->sec_key[i]);
        free(s->sec_json[i]);
    }
    free(s->sec_key);
    free(s->sec_json);
    free(s);
}

/* Makes at least one unread byte available; returns 0 at end of input. */
static thin_status fill(thin_stream *s, size_t *avail)
{
    if (s->in_pos == s->in_len) {
        s->in_pos = s->in_len = 0;
        for (;;) {
            ssize_t n = read(s->fd, s->in, s->in_cap);
            if (n < 0 && errno == EINTR) continue;
            if (n < 0) return thin_stream_fail(s, THIN_E_IO, "read: %s", strerror(errno));
            s->in_len = (size_t)n;
            break;
        }
    }
    *avail = s->in_len - s->in_pos;
    return THIN_OK;
}

static void consume(thin_stream *s, size_t n)
{
    s->in_pos += n;
    s->pos += n;
}

thin_status thin_stream_get(thin_stream *s, void *dst, size_t n)
{
    uint8_t *d = dst;
    while (n) {
        size_t avail;
        thin_status st = fill(s, &avail);
        if (st) return st;
        if (!avail)
            return thin_stream_fail(s, THIN_E_TRUNCATED, "input ends at offset %llu",
                                    (unsigned long long)s->pos);
        size_t take = avail < n ? avail : n;
        memcpy(d, s->in + s->in_pos, take);
        consume(s, take);
        d += take;
        n -= take;
    }
    return THIN_OK;
}

thin_status thin_stream_zeros_to(thin_stream *s, uint64_t align)
{
    uint64_t n = thin_align_up(s->pos, align) - s->pos;
    uint8_t buf[THIN_DATA_ALIGN];
    thin_status st = thin_stream_get(s, buf, (size_t)n);
    if (!st && !thin_all_zero(buf, (size_t)n))
        return thin_stream_fail(s, THIN_E_PADDING, "padding at offset %llu is not zero",
                                (unsigned long long)(s->pos - n));
    return st;
}

thin_status thin_stream_open_fd(thin_stream *s, int fd, const char *label)
{
    if (!s || fd < 0) return THIN_E_INVALID_ARG;
    if (s->state != S_NEW) return THIN_E_STATE;
    s->fd = fd;
    s->label = strdup(label ? label : "(stream)");
    s->in_cap = IN_CAP;
    s->in = malloc(s->in_cap);
    if (!s->label || !s->in) return thin_stream_fail(s, THIN_E_NOMEM, "out of memory");
    uint8_t h[64];
    const char *why = NULL;
    thin_status st = thin_stream_get(s, h, 8);
    if (!st && memcmp(h, thin_file_magic, 8))
        return thin_stream_fail(s, THIN_E_BAD_MAGIC, "not a .thin file (bad magic)");
    if (!st) st = thin_stream_get(s, h + 8, 56);
    if (st) return st;
    st = thin_header_decode(h, &s->major, &s->minor, &why);
    if (st == THIN_E_VERSION)
        return thin_stream_fail(s, st, "format version %u.%u is not supported (this library "
                                "reads major version %d)", s->major, s->minor, THIN_VERSION_MAJOR);
    if (st) return thin_stream_fail(s, st, "%s", why);
    s->state = S_BETWEEN;
    return THIN_OK;
}

static const char *cur_kind(const thin_stream *s) { return s->cur.is_blob ? "blob" : "tensor"; }

static thin_status begin_chunk(thin_stream *s)
{
    s->c_off = s->pos;
    s->c_raw = thin_chunk_raw(s->cur.info.nbytes, s->cur.chunk_size, s->cj);
    s->c_raw_done = s->c_stored = 0;
    if (s->cur.info.codec == THIN_CODEC_ZSTD) {
        if (!s->zd && !(s->zd = ZSTD_createDStream()))
            return thin_stream_fail(s, THIN_E_NOMEM, "out of memory");
        ZSTD_DCtx_reset(s->zd, ZSTD_reset_session_only);
        ZSTD_DCtx_setParameter(s->zd, ZSTD_d_windowLogMax, 31);
    }
    return THIN_OK;
}

static thin_status push_chunk(thin_stream *s, const uint8_t sha[32])
{
    if (s->n_chunks == s->cap_chunks) {
        size_t cap = s->cap_chunks ? s->cap_chunks * 2 : 256;
        thin_chunk_info *c = realloc(s->chunks, cap * sizeof *c);
        if (c) s->chunks = c;
        uint8_t(*z)[16] = c ? realloc(s->stored_sha, cap * 16) : NULL;
        if (!z) return thin_stream_fail(s, THIN_E_NOMEM, "out of memory");
        s->stored_sha = z;
        s->cap_chunks = cap;
    }
    thin_chunk_info *c = &s->chunks[s->n_chunks++];
    *c = (thin_chunk_info){.offset = s->c_off, .stored_size = s->c_stored, .raw_size = s->c_raw,
                           .raw_offset = (uint64_t)s->cj * s->cur.chunk_size,
                           .codec = s->cur.info.codec};
    memcpy(c->sha256, sha, 32);
    memcpy(s->stored_sha[s->n_chunks - 1], sha, 16);
    if (s->cur.info.codec != THIN_CODEC_ZSTD) return THIN_OK;
    uint8_t z[32];
    thin_status st = thin_sha256_final(&s->zsha, z);
    if (st) return thin_stream_fail(s, st, "SHA-256 failed");
    memcpy(s->stored_sha[s->n_chunks - 1], z, 16);
    return THIN_OK;
}

/* The current chunk's bytes are all out: hash, record, skip its padding, start the next one. */
static thin_status end_chunk(thin_stream *s)
{
    uint8_t sha[32];
    thin_status st = thin_sha256_final(&s->sha, sha);
    if (st) return thin_stream_fail(s, st, "SHA-256 failed");
    if ((st = push_chunk(s, sha))) return st;
    s->cj++;
    st = thin_stream_zeros_to(s, s->cj < s->cur.info.n_chunks ? THIN_DATA_ALIGN : 64);
    if (!st && s->cj < s->cur.info.n_chunks) st = begin_chunk(s);
    return st;
}

/* Decodes up to cap bytes of the current zstd chunk into buf. */
static thin_status zstd_step(thin_stream *s, uint8_t *buf, size_t cap, size_t *got, int *frame_end)
{
    size_t avail;
    thin_status st = fill(s, &avail);
    if (st) return st;
    if (!avail)
        return thin_stream_fail(s, THIN_E_TRUNCATED, "input ends inside chunk %u of %s '%s'",
                                s->cj, cur_kind(s), s->cur.info.name);
    uint8_t dummy;
    ZSTD_inBuffer in = {s->in + s->in_pos, avail, 0};
    ZSTD_outBuffer out = {cap ? buf : &dummy, cap ? cap : 1, 0};
    size_t r = ZSTD_decompressStream(s->zd, &out, &in);
    thin_status zs = thin_sha256_update(&s->zsha, s->in + s->in_pos, in.pos);
    if (zs) return thin_stream_fail(s, zs, "SHA-256 failed");
    consume(s, in.pos);
    s->c_stored += in.pos;
    if (ZSTD_isError(r) || (!cap && out.pos))
        return thin_stream_fail(s, THIN_E_CODEC, "chunk %u of %s '%s': zstd payload does not "
                                "decode to its raw size", s->cj, cur_kind(s), s->cur.info.name);
    *got = out.pos;
    *frame_end = r == 0;
    return THIN_OK;
}

/* Moves up to cap decoded bytes of the current chunk into buf (hashing them). */
static thin_status chunk_step(thin_stream *s, uint8_t *buf, size_t cap, size_t *got)
{
    uint64_t left = s->c_raw - s->c_raw_done;
    size_t want = left < cap ? (size_t)left : cap;
    int frame_end = 0;
    thin_status st;
    *got = 0;
    if (s->cur.info.codec == THIN_CODEC_NONE) {
        size_t avail;
        if ((st = fill(s, &avail))) return st;
        if (!avail)
            return thin_stream_fail(s, THIN_E_TRUNCATED, "input ends inside chunk %u of %s '%s'",
                                    s->cj, cur_kind(s), s->cur.info.name);
        *got = avail < want ? avail : want;
        memcpy(buf, s->in + s->in_pos, *got);
        consume(s, *got);
        s->c_stored += *got;
        frame_end = s->c_raw_done + *got == s->c_raw;
    } else if ((st = zstd_step(s, buf, want, got, &frame_end))) {
        return st;
    }
    if ((st = thin_sha256_update(&s->sha, buf, *got))) return thin_stream_fail(s, st, "SHA-256 failed");
    s->c_raw_done += *got;
    if (frame_end && s->c_raw_done != s->c_raw)
        return thin_stream_fail(s, THIN_E_CODEC, "chunk %u of %s '%s': zstd payload does not "
                                "decode to its raw size", s->cj, cur_kind(s), s->cur.info.name);
    return frame_end ? end_chunk(s) : THIN_OK;
}

/* After the last payload: the entry's CHUNK records, checked against what was read. */
static thin_status end_item(thin_stream *s)
{
    size_t first = s->n_chunks - s->cur.info.n_chunks;
    const thin_chunk_info *c = &s->chunks[first];
    for (uint32_t j = 0; j < s->cur.info.n_chunks; j++, c++) {
        uint8_t h[64];
        thin_record r;
        const char *why = NULL;
        thin_status st = thin_stream_get(s, h, 64);
        if (!st) st = thin_record_decode(h, &r, &why);
        if (st) return st == THIN_E_TRUNCATED ? st : thin_stream_fail(s, st, "chunk %u of %s "
                       "'%s': %s", j, cur_kind(s), s->cur.info.name, why);
        if (memcmp(r.sha, s->stored_sha[first + j], 16))
            return thin_stream_fail(s, THIN_E_CHECKSUM, "chunk %u of %s '%s': SHA-256 mismatch",
                                    j, cur_kind(s), s->cur.info.name);
        if (r.type != THIN_REC_CHUNK || r.kind != (s->cur.is_blob ? 1 : 0) ||
            r.entry != s->cur.kind_index || r.chunk != j || r.codec != c->codec ||
            r.offset != c->offset || r.stored != c->stored_size || r.raw != c->raw_size)
            return thin_stream_fail(s, THIN_E_BAD_RECORD, "chunk %u of %s '%s': CHUNK record "
                                    "does not match the data", j, cur_kind(s), s->cur.info.name);
    }
    s->state = S_ITEM_DONE;
    return THIN_OK;
}

thin_status thin_stream_read(thin_stream *s, void *buf, size_t cap, size_t *got)
{
    if (!s || !got || !buf || !cap) return THIN_E_INVALID_ARG;
    *got = 0;
    if (s->state == S_ITEM_DONE) return THIN_OK;
    if (s->state == S_FAILED) return THIN_E_STATE;
    if (s->state != S_ITEM) {
        thin_errf(s->err, s->label, THIN_E_STATE, "no current item"); /* the stream stays usable */
        return THIN_E_STATE;
    }
    while (*got == 0) {
        if (s->cj == s->cur.info.n_chunks) return end_item(s);
        thin_status st = chunk_step(s, buf, cap, got);
        if (st) return st;
    }
    return THIN_OK;
}

static thin_status add_seen(thin_stream *s)
{
    if (s->n_seen == s->cap_seen) {
        size_t cap = s->cap_seen ? s->cap_seen * 2 : 64;
        thin_seen *p = realloc(s->seen, cap * sizeof *p);
        if (!p) {
            json_decref(s->cur.json);
            return thin_stream_fail(s, THIN_E_NOMEM, "out of memory");
        }
        s->seen = p;
        s->cap_seen = cap;
    }
    int kind = s->cur.is_blob ? THIN_KIND_BLOB : THIN_KIND_TENSOR;
    s->seen[s->n_seen++] = (thin_seen){s->cur.json, kind, s->cur.kind_index, s->n_chunks,
                                       s->cur.info.n_chunks};
    s->n_kind[kind]++;
    return THIN_OK;
}

/* The ENTRY record r at offset at: its descriptor becomes the current item. */
static thin_status start_item(thin_stream *s, const thin_record *r, uint64_t at)
{
    if (r->codec || r->offset != at + 64 || r->stored != r->raw || r->stored > THIN_MAX_DESCRIPTOR ||
        r->entry != s->n_kind[r->kind])
        return thin_stream_fail(s, THIN_E_BAD_RECORD, "ENTRY record at offset %llu is invalid",
                                (unsigned long long)at);
    s->cur.json = NULL; /* the previous item's descriptor belongs to s->seen now */
    char *desc = malloc(r->stored + 1);
    if (!desc) return thin_stream_fail(s, THIN_E_NOMEM, "out of memory");
    uint8_t sha[32];
    const char *why = NULL;
    thin_status st = thin_stream_get(s, desc, r->stored);
    if (!st && (st = thin_sha256(desc, r->stored, sha))) thin_stream_fail(s, st, "SHA-256 failed");
    if (!st && memcmp(sha, r->sha, 16))
        st = thin_stream_fail(s, THIN_E_CHECKSUM, "descriptor at offset %llu: SHA-256 mismatch",
                              (unsigned long long)at);
    if (!st) {
        st = thin_descriptor_parse(desc, r->stored, r->kind == THIN_KIND_BLOB, &s->cur, &why);
        s->cur.kind_index = r->entry;
        s->cur.info.index = r->entry;
        if (st) thin_stream_fail(s, st, "descriptor at offset %llu: %s", (unsigned long long)at, why);
    }
    free(desc);
    if (!st && r->chunk != s->cur.info.n_chunks)
        st = thin_stream_fail(s, THIN_E_BAD_RECORD, "%s '%s': ENTRY record chunk count differs",
                              cur_kind(s), s->cur.info.name);
    if (st) {
        json_decref(s->cur.json);
        s->cur.json = NULL;
        return st;
    }
    s->state = S_ITEM;
    if (!st) st = add_seen(s);
    if (st) return st;
    s->cj = 0;
    if (!s->cur.info.n_chunks) {
        s->state = S_ITEM_DONE;
        return thin_stream_zeros_to(s, 64);
    }
    if (!(st = thin_stream_zeros_to(s, THIN_DATA_ALIGN))) st = begin_chunk(s);
    return st;
}

static thin_status drain(thin_stream *s)
{
    uint8_t buf[1 << 16];
    size_t got = 1;
    thin_status st = THIN_OK;
    while (!st && s->state == S_ITEM) st = thin_stream_read(s, buf, sizeof buf, &got);
    return st;
}

thin_status thin_stream_next(thin_stream *s, thin_item_kind *kind, thin_tensor_info *info)
{
    if (!s || !kind) return THIN_E_INVALID_ARG;
    if (s->state == S_FAILED || s->state == S_NEW) return THIN_E_STATE;
    if (s->state == S_END) {
        *kind = THIN_ITEM_END;
        return THIN_OK;
    }
    thin_status st = drain(s);
    if (st) return st;
    if (!s->sha.md && ((st = thin_sha256_init(&s->sha)) || (st = thin_sha256_init(&s->zsha))))
        return thin_stream_fail(s, st, "out of memory");
    uint8_t h[64];
    thin_record r;
    const char *why = NULL;
    uint64_t at = s->pos;
    if ((st = thin_stream_get(s, h, 64))) return st;
    if ((st = thin_record_decode(h, &r, &why)))
        return thin_stream_fail(s, st, "offset %llu: %s", (unsigned long long)at, why);
    if (r.type == THIN_REC_MANIFEST) {
        if ((st = thin_stream_finish(s, &r, at))) return st;
        s->state = S_END;
        *kind = THIN_ITEM_END;
        return THIN_OK;
    }
    if (r.type != THIN_REC_ENTRY)
        return thin_stream_fail(s, THIN_E_BAD_RECORD, "offset %llu: expected an ENTRY record",
                                (unsigned long long)at);
    if ((st = start_item(s, &r, at))) return st;
    *kind = s->cur.is_blob ? THIN_ITEM_BLOB : THIN_ITEM_TENSOR;
    if (info) *info = s->cur.info;
    return THIN_OK;
}

thin_status thin_stream_manifest(thin_stream *s, const char **json, size_t *len)
{
    if (!s || !json || !len) return THIN_E_INVALID_ARG;
    if (s->state != S_END) return THIN_E_STATE;
    *json = s->manifest;
    *len = s->manifest_len;
    return THIN_OK;
}

thin_status thin_stream_section(thin_stream *s, const char *key, const char **json)
{
    if (!s || !key || !json) return THIN_E_INVALID_ARG;
    if (s->state != S_END) return THIN_E_STATE;
    for (size_t i = 0; i < s->n_sec; i++) {
        if (!strcmp(s->sec_key[i], key)) {
            *json = s->sec_json[i];
            return THIN_OK;
        }
    }
    json_t *v = json_object_get(s->root, key);
    if (!v) return THIN_E_NOT_FOUND;
    char **k = realloc(s->sec_key, (s->n_sec + 1) * sizeof *k);
    if (k) s->sec_key = k;
    char **j = k ? realloc(s->sec_json, (s->n_sec + 1) * sizeof *j) : NULL;
    if (j) s->sec_json = j;
    char *kk = j ? strdup(key) : NULL, *jj = kk ? json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY) : NULL;
    if (!jj) {
        free(kk);
        return THIN_E_NOMEM;
    }
    s->sec_key[s->n_sec] = kk;
    s->sec_json[s->n_sec++] = jj;
    *json = jj;
    return THIN_OK;
}
