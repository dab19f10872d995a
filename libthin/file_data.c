/*
 * file_data.c — the reader's data access: zero-copy tensor pointers, decoding reads, blobs, and
 * verification of chunk hashes, padding and the whole-file digest (threads share the chunks).
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <zstd.h>

#include "file_private.h"

thin_status thin_file_chunk_error(thin_file *f, size_t ci, thin_status s, const char *why)
{
    const thin_entry *e = &f->L.entries[f->chunk_owner[ci]];
    return thin_errf(f->err, f->label, s, "chunk %zu of %s '%s': %s", ci - e->first_chunk,
                     e->is_blob ? "blob" : "tensor", e->info.name, why);
}

thin_status thin_file_check_chunk(const thin_file *f, size_t ci, void *dctx, uint8_t *scratch,
                                  const char **why)
{
    const thin_chunk_info *c = &f->L.chunks[ci];
    const uint8_t *src = f->base + c->offset;
    uint8_t sha[32];
    thin_status s;
    if (c->codec == THIN_CODEC_ZSTD) {
        if ((s = thin_sha256(src, c->stored_size, sha))) {
            *why = "SHA-256 failed";
            return s;
        }
        if (memcmp(sha, f->stored_sha[ci], 16)) {
            *why = "SHA-256 mismatch of the compressed bytes";
            return THIN_E_CHECKSUM;
        }
        size_t r = ZSTD_decompressDCtx(dctx, scratch, c->raw_size, src, c->stored_size);
        if (ZSTD_isError(r) || r != c->raw_size) {
            *why = "zstd payload does not decode to its raw size";
            return THIN_E_CODEC;
        }
        src = scratch;
    }
    s = thin_sha256(src, c->raw_size, sha);
    if (s) {
        *why = "SHA-256 failed";
        return s;
    }
    if (memcmp(sha, c->sha256, 32)) {
        *why = "SHA-256 mismatch";
        return THIN_E_CHECKSUM;
    }
    return THIN_OK;
}

static thin_status get_dctx(thin_file *f)
{
    if (!f->dctx && !(f->dctx = ZSTD_createDCtx()))
        return thin_errf(f->err, f->label, THIN_E_NOMEM, "out of memory");
    return THIN_OK;
}

/* Copies (decoding) entry k's bytes into buf, optionally checking each chunk's hash. */
static thin_status read_entry(thin_file *f, uint32_t k, uint8_t *buf, int verify)
{
    const thin_entry *e = &f->L.entries[k];
    thin_status s = get_dctx(f);
    for (uint32_t j = 0; !s && j < e->info.n_chunks; j++) {
        size_t ci = e->first_chunk + j;
        const thin_chunk_info *c = &f->L.chunks[ci];
        uint8_t *dst = buf + c->raw_offset;
        const char *why = NULL;
        if (c->codec == THIN_CODEC_NONE && !verify) {
            memcpy(dst, f->base + c->offset, c->raw_size);
        } else if (c->codec == THIN_CODEC_NONE) {
            memcpy(dst, f->base + c->offset, c->raw_size);
            s = thin_file_check_chunk(f, ci, f->dctx, NULL, &why);
        } else if (verify) {
            s = thin_file_check_chunk(f, ci, f->dctx, dst, &why);
        } else {
            size_t r = ZSTD_decompressDCtx(f->dctx, dst, c->raw_size, f->base + c->offset,
                                           c->stored_size);
            if (ZSTD_isError(r) || r != c->raw_size) {
                s = THIN_E_CODEC;
                why = "zstd payload does not decode to its raw size";
            }
        }
        if (s) return thin_file_chunk_error(f, ci, s, why);
    }
    return s;
}

static uint32_t data_entry(const thin_file *f, uint32_t tensor)
{
    const thin_entry *e = &f->L.entries[tensor];
    return e->tied >= 0 ? (uint32_t)e->tied : tensor;
}

/* Pointer to entry k's bytes when they are stored uncompressed and back to back, else NULL. */
static const void *direct(const thin_file *f, uint32_t k)
{
    const thin_entry *e = &f->L.entries[k];
    if (e->info.n_chunks == 0) return f->base;
    const thin_chunk_info *c = &f->L.chunks[e->first_chunk];
    for (uint32_t j = 0; j < e->info.n_chunks; j++) {
        if (c[j].codec != THIN_CODEC_NONE) return NULL;
        if (j && c[j].offset != c[j - 1].offset + c[j - 1].stored_size) return NULL;
    }
    return f->base + c[0].offset;
}

thin_status thin_file_tensor_data(const thin_file *f, uint32_t tensor, const void **data)
{
    if (!f || !f->opened || !data || tensor >= f->L.n_tensors) return THIN_E_INVALID_ARG;
    *data = direct(f, data_entry(f, tensor));
    return *data ? THIN_OK : THIN_E_UNSUPPORTED;
}

thin_status thin_file_tensor_read(thin_file *f, uint32_t tensor, void *buf, size_t cap, int verify)
{
    if (!f || !f->opened || tensor >= f->L.n_tensors || (!buf && cap)) return THIN_E_INVALID_ARG;
    const thin_entry *e = &f->L.entries[tensor];
    if (cap < e->info.nbytes)
        return thin_errf(f->err, f->label, THIN_E_INVALID_ARG, "tensor '%s': buffer of %zu bytes "
                         "for %llu", e->info.name, cap, (unsigned long long)e->info.nbytes);
    return read_entry(f, data_entry(f, tensor), buf, verify);
}

thin_status thin_file_blob(thin_file *f, const char *name, const void **data, size_t *size)
{
    uint32_t k;
    if (!f || !f->opened || !name || !data || !size) return THIN_E_INVALID_ARG;
    if (thin_names_find(&f->L.names, name, &k) || k < f->L.n_tensors)
        return thin_errf(f->err, f->label, THIN_E_NOT_FOUND, "no blob '%s'", name);
    const thin_entry *e = &f->L.entries[k];
    uint32_t b = k - f->L.n_tensors;
    if (e->info.nbytes > SIZE_MAX) return THIN_E_LIMIT;
    if (!f->blob_data[b]) {
        const void *p = direct(f, k);
        uint8_t *copy = NULL;
        thin_status s = get_dctx(f);
        if (!p && !s && !(copy = malloc(e->info.nbytes + 1))) s = THIN_E_NOMEM;
        if (!s && !p) s = read_entry(f, k, copy, 1);
        for (uint32_t j = 0; p && !s && j < e->info.n_chunks; j++) {
            const char *why = NULL;
            s = thin_file_check_chunk(f, e->first_chunk + j, f->dctx, NULL, &why);
            if (s) thin_file_chunk_error(f, e->first_chunk + j, s, why);
        }
        if (s) {
            free(copy);
            return s == THIN_E_NOMEM ? thin_errf(f->err, f->label, s, "out of memory") : s;
        }
        f->blob_owned[b] = copy;
        f->blob_data[b] = p ? p : copy;
    }
    *data = f->blob_data[b];
    *size = (size_t)e->info.nbytes;
    return THIN_OK;
}

thin_status thin_file_verify_tensor(thin_file *f, uint32_t tensor)
{
    if (!f || !f->opened || tensor >= f->L.n_tensors) return THIN_E_INVALID_ARG;
    const thin_entry *e = &f->L.entries[data_entry(f, tensor)];
    thin_status s = get_dctx(f);
    uint8_t *scratch = NULL;
    if (!s && e->info.codec == THIN_CODEC_ZSTD && !(scratch = malloc(e->chunk_size)))
        s = thin_errf(f->err, f->label, THIN_E_NOMEM, "out of memory");
    for (uint32_t j = 0; !s && j < e->info.n_chunks; j++) {
        const char *why = NULL;
        s = thin_file_check_chunk(f, e->first_chunk + j, f->dctx, scratch, &why);
        if (s) thin_file_chunk_error(f, e->first_chunk + j, s, why);
    }
    free(scratch);
    return s;
}
