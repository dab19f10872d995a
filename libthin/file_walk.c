/*
 * file_walk.c — walks every record of an opened file in order (SPEC.md §2–§3) and checks it
 * against the manifest: ENTRY descriptors, where each chunk payload must lie, every CHUNK record
 * header. Records the padding runs that thin_file_verify checks.
 */
#include <stdlib.h>
#include <string.h>

#include "file_private.h"

static thin_status add_pad(thin_file *f, uint64_t from, uint64_t to)
{
    if (to <= from) return THIN_OK;
    if (f->n_pads == f->cap_pads) {
        size_t cap = f->cap_pads ? f->cap_pads * 2 : 64;
        thin_pad *p = realloc(f->pads, cap * sizeof *p);
        if (!p) return thin_errf(f->err, f->label, THIN_E_NOMEM, "out of memory");
        f->pads = p;
        f->cap_pads = cap;
    }
    f->pads[f->n_pads++] = (thin_pad){from, to - from};
    return THIN_OK;
}

static const char *kind_name(const thin_entry *e) { return e->is_blob ? "blob" : "tensor"; }

/* The ENTRY record at pos: returns the entry number in *k and the end of its descriptor. */
static thin_status walk_entry(thin_file *f, uint64_t pos, uint8_t *seen, uint32_t kind_next[2],
                              uint32_t *k, uint64_t *end)
{
    const char *why = NULL;
    thin_record r;
    uint64_t limit = f->trailer.manifest_offset;
    thin_status s = thin_record_decode(f->base + pos, &r, &why);
    if (s) return thin_errf(f->err, f->label, s, "offset %llu: %s", (unsigned long long)pos, why);
    int64_t n = r.type == THIN_REC_ENTRY ? thin_layout_entry(&f->L, r.kind, r.entry) : -1;
    if (n < 0 || seen[n] || r.entry != kind_next[r.kind])
        return thin_errf(f->err, f->label, THIN_E_BAD_RECORD, "offset %llu: expected the ENTRY "
                         "record of the next entry in manifest order", (unsigned long long)pos);
    kind_next[r.kind]++;
    thin_entry *e = &f->L.entries[n];
    seen[n] = 1;
    if (r.codec || r.offset != pos + 64 || r.stored != r.raw || r.stored > THIN_MAX_DESCRIPTOR ||
        r.stored > limit - r.offset || r.chunk != e->info.n_chunks)
        return thin_errf(f->err, f->label, THIN_E_BAD_RECORD, "%s '%s': ENTRY record fields do "
                         "not match the manifest", kind_name(e), e->info.name);
    uint8_t sha[32];
    const char *desc = (const char *)f->base + r.offset;
    if ((s = thin_sha256(desc, r.stored, sha))) return s;
    if (memcmp(sha, r.sha, 16))
        return thin_errf(f->err, f->label, THIN_E_CHECKSUM, "%s '%s': descriptor SHA-256 "
                         "mismatch", kind_name(e), e->info.name);
    if (!thin_descriptor_matches(e->json, desc, r.stored))
        return thin_errf(f->err, f->label, THIN_E_BAD_RECORD, "%s '%s': descriptor differs from "
                         "the manifest entry", kind_name(e), e->info.name);
    *k = (uint32_t)n;
    *end = r.offset + r.stored;
    return THIN_OK;
}

/* Chunk payloads of entry k from `pos` (end of its descriptor); *pos ends at the CHUNK headers. */
static thin_status walk_payloads(thin_file *f, uint32_t k, uint64_t *pos, size_t *nf)
{
    thin_entry *e = &f->L.entries[k];
    uint64_t expect = thin_align_up(*pos, THIN_DATA_ALIGN);
    thin_status s = add_pad(f, *pos, expect);
    for (uint32_t j = 0; !s && j < e->info.n_chunks; j++) {
        const thin_chunk_info *c = &f->L.chunks[e->first_chunk + j];
        if (c->offset != expect)
            return thin_errf(f->err, f->label, THIN_E_BAD_MANIFEST, "chunk %u of %s '%s': offset "
                             "%llu, the layout puts it at %llu", j, kind_name(e), e->info.name,
                             (unsigned long long)c->offset, (unsigned long long)expect);
        uint64_t cend = c->offset + c->stored_size;
        uint64_t next = thin_align_up(cend, j + 1 < e->info.n_chunks ? THIN_DATA_ALIGN : 64);
        s = add_pad(f, cend, next);
        f->file_order[*nf] = e->first_chunk + j;
        f->chunk_owner[e->first_chunk + j] = k;
        ++*nf;
        expect = next;
    }
    *pos = expect;
    return s;
}

static thin_status walk_chunk_headers(thin_file *f, uint32_t k, uint64_t pos)
{
    thin_entry *e = &f->L.entries[k];
    const char *why = NULL;
    for (uint32_t j = 0; j < e->info.n_chunks; j++) {
        const thin_chunk_info *c = &f->L.chunks[e->first_chunk + j];
        thin_record r;
        thin_status s = thin_record_decode(f->base + pos + 64 * (uint64_t)j, &r, &why);
        if (s) return thin_errf(f->err, f->label, s, "chunk %u of %s '%s': %s", j, kind_name(e),
                                e->info.name, why);
        if (r.type != THIN_REC_CHUNK || r.kind != (e->is_blob ? THIN_KIND_BLOB : THIN_KIND_TENSOR) ||
            r.entry != e->kind_index || r.chunk != j || r.codec != c->codec ||
            r.offset != c->offset || r.stored != c->stored_size || r.raw != c->raw_size ||
            (c->codec == THIN_CODEC_NONE && memcmp(r.sha, c->sha256, 16)))
            return thin_errf(f->err, f->label, THIN_E_BAD_RECORD, "chunk %u of %s '%s': CHUNK "
                             "record does not match the manifest", j, kind_name(e), e->info.name);
        memcpy(f->stored_sha[e->first_chunk + j], r.sha, 16);
    }
    return THIN_OK;
}

static thin_status walk_records(thin_file *f, uint8_t *seen)
{
    uint64_t pos = THIN_HEADER_SIZE, limit = f->trailer.manifest_offset;
    size_t nf = 0;
    uint32_t kind_next[2] = {0, 0};
    thin_status s = THIN_OK;
    while (!s && pos < limit) {
        uint32_t k = 0;
        uint64_t end = 0;
        if (limit - pos < 64)
            return thin_errf(f->err, f->label, THIN_E_BAD_RECORD, "record overlaps the manifest");
        if ((s = walk_entry(f, pos, seen, kind_next, &k, &end))) return s;
        uint32_t n = f->L.entries[k].info.n_chunks;
        if (n == 0) {
            pos = thin_align_up(end, 64);
            s = add_pad(f, end, pos);
            continue;
        }
        pos = end;
        if ((s = walk_payloads(f, k, &pos, &nf))) return s;
        if (pos > limit || (limit - pos) / 64 < n)
            return thin_errf(f->err, f->label, THIN_E_BAD_RECORD, "%s '%s': CHUNK records overlap "
                             "the manifest", kind_name(&f->L.entries[k]), f->L.entries[k].info.name);
        if ((s = walk_chunk_headers(f, k, pos))) return s;
        pos += 64 * (uint64_t)n;
    }
    if (!s && pos != limit)
        s = thin_errf(f->err, f->label, THIN_E_BAD_RECORD, "records run past the manifest");
    return s;
}

thin_status thin_file_walk(thin_file *f)
{
    uint32_t n = f->L.n_tensors + f->L.n_blobs;
    uint8_t *seen = calloc(n + 1, 1);
    f->file_order = calloc(f->L.n_chunks + 1, sizeof *f->file_order);
    f->chunk_owner = calloc(f->L.n_chunks + 1, sizeof *f->chunk_owner);
    f->stored_sha = calloc(f->L.n_chunks + 1, sizeof *f->stored_sha);
    if (!seen || !f->file_order || !f->chunk_owner || !f->stored_sha) {
        free(seen);
        return thin_errf(f->err, f->label, THIN_E_NOMEM, "out of memory");
    }
    thin_status s = walk_records(f, seen);
    for (uint32_t i = 0; !s && i < n; i++) {
        if (!seen[i])
            s = thin_errf(f->err, f->label, THIN_E_BAD_MANIFEST, "%s '%s' has no record in the "
                          "file", kind_name(&f->L.entries[i]), f->L.entries[i].info.name);
    }
    free(seen);
    uint64_t mend = f->trailer.manifest_offset + 64 + f->trailer.manifest_size;
    if (!s) s = add_pad(f, mend, f->size - 64);
    return s;
}
