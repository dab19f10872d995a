/*
 * stream_end.c — the end of a stream: the MANIFEST record, the trailer, then the manifest checked
 * against every entry, chunk and hash seen on the way, and the whole-file digest.
 */
#include <stdlib.h>
#include <string.h>

#include "stream_private.h"

static thin_status read_tail(thin_stream *s, const thin_record *r, uint64_t at)
{
    if (r->codec || r->entry || r->chunk || r->kind || r->offset != at + 64 || r->stored != r->raw)
        return thin_stream_fail(s, THIN_E_BAD_RECORD, "manifest record header is invalid");
    if (r->stored > THIN_MAX_MANIFEST)
        return thin_stream_fail(s, THIN_E_LIMIT, "manifest larger than 256 MiB");
    s->manifest_len = (size_t)r->stored;
    if (!(s->manifest = malloc(s->manifest_len + 1)))
        return thin_stream_fail(s, THIN_E_NOMEM, "out of memory");
    uint8_t sha[32], t[64], extra;
    const char *why = NULL;
    thin_status st = thin_stream_get(s, s->manifest, s->manifest_len);
    if (st) return st;
    if ((st = thin_sha256(s->manifest, s->manifest_len, sha))) return thin_stream_fail(s, st, "SHA-256 failed");
    if (memcmp(sha, r->sha, 16)) return thin_stream_fail(s, THIN_E_CHECKSUM, "manifest: SHA-256 mismatch");
    if ((st = thin_stream_zeros_to(s, 64)) || (st = thin_stream_get(s, t, 64))) return st;
    if ((st = thin_trailer_decode(t, &s->trailer, &why))) return thin_stream_fail(s, st, "%s", why);
    if (s->trailer.manifest_offset != at || s->trailer.manifest_size != r->stored)
        return thin_stream_fail(s, THIN_E_BAD_TRAILER, "trailer does not point at the manifest");
    if (thin_stream_get(s, &extra, 1) != THIN_E_TRUNCATED)
        return thin_stream_fail(s, THIN_E_BAD_TRAILER, "data after the trailer");
    s->err[0] = '\0';
    s->state = S_BETWEEN;
    return THIN_OK;
}

/* Every entry seen equals its manifest entry, chunk by chunk. */
static thin_status compare(thin_stream *s, const thin_layout *L)
{
    if (s->n_seen != (size_t)L->n_tensors + L->n_blobs)
        return thin_stream_fail(s, THIN_E_BAD_MANIFEST, "manifest lists %u entries, the stream "
                                "held %zu", L->n_tensors + L->n_blobs, s->n_seen);
    for (size_t i = 0; i < s->n_seen; i++) {
        const thin_seen *e = &s->seen[i];
        int64_t k = thin_layout_entry(L, e->kind, e->index);
        const thin_entry *m = k >= 0 ? &L->entries[k] : NULL;
        if (!m || !thin_descriptor_equal(m->json, e->desc) || m->info.n_chunks != e->n_chunks)
            return thin_stream_fail(s, THIN_E_BAD_MANIFEST, "manifest entry %zu differs from the "
                                    "stream's ENTRY record", i);
        for (uint32_t j = 0; j < e->n_chunks; j++) {
            const thin_chunk_info *a = &L->chunks[m->first_chunk + j], *b = &s->chunks[e->first_chunk + j];
            if (memcmp(a->sha256, b->sha256, 32))
                return thin_stream_fail(s, THIN_E_CHECKSUM, "chunk %u of %s '%s': SHA-256 mismatch",
                                        j, e->kind ? "blob" : "tensor", m->info.name);
            if (a->offset != b->offset || a->stored_size != b->stored_size ||
                a->raw_size != b->raw_size || a->codec != b->codec)
                return thin_stream_fail(s, THIN_E_BAD_MANIFEST, "chunk %u of %s '%s' differs from "
                                        "the manifest", j, e->kind ? "blob" : "tensor", m->info.name);
        }
    }
    return THIN_OK;
}

thin_status thin_stream_finish(thin_stream *s, const thin_record *r, uint64_t at)
{
    thin_status st = read_tail(s, r, at);
    if (st) return st;
    json_error_t je;
    s->root = json_loadb(s->manifest, s->manifest_len, JSON_REJECT_DUPLICATES, &je);
    if (!s->root) return thin_stream_fail(s, THIN_E_BAD_MANIFEST, "manifest is not valid JSON: %s", je.text);
    thin_layout L;
    if ((st = thin_manifest_parse(s->root, s->major, s->minor, at, &L, s->err, s->label))) {
        s->state = S_FAILED;
        return st;
    }
    st = compare(s, &L);
    thin_layout_free(&L);
    if (st) return st;
    uint8_t (*sha)[32] = malloc((s->n_chunks ? s->n_chunks : 1) * 32);
    if (!sha) return thin_stream_fail(s, THIN_E_NOMEM, "out of memory");
    for (size_t i = 0; i < s->n_chunks; i++) memcpy(sha[i], s->chunks[i].sha256, 32);
    uint8_t d[32];
    st = thin_digest_compute(s->manifest, s->manifest_len, (const uint8_t(*)[32])sha, s->n_chunks, d);
    free(sha);
    if (st) return thin_stream_fail(s, st, "SHA-256 failed");
    if (memcmp(d, s->trailer.digest, 32))
        return thin_stream_fail(s, THIN_E_DIGEST, "whole-file digest mismatch");
    return THIN_OK;
}
