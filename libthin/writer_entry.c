/*
 * writer_entry.c — the writer's tensors and blobs: descriptor checks, the ENTRY record, data
 * through writer_chunks.c, and the CHUNK record headers written after the entry's payloads.
 */
#include <stdlib.h>
#include <string.h>

#include "writer_private.h"

static thin_status check_name(thin_writer *w, const char *name, const char *what)
{
    if (!name || !name[0]) return thin_writer_fail(w, THIN_E_INVALID_ARG, "%s: empty name", what);
    if (strlen(name) > THIN_MAX_NAME)
        return thin_writer_fail(w, THIN_E_LIMIT, "%s: name longer than %d bytes", what, THIN_MAX_NAME);
    return THIN_OK;
}

/* Writes the ENTRY record of descriptor d (a new reference taken over) and opens the entry. */
static thin_status begin_entry(thin_writer *w, json_t *d, int blob, uint64_t data_bytes)
{
    const char *name = json_string_value(json_object_get(d, "name"));
    int r = thin_names_insert(&w->names, name, 0, NULL);
    if (r != 0) {
        thin_status s = r < 0 ? thin_writer_fail(w, THIN_E_NOMEM, "out of memory")
                              : thin_writer_fail(w, THIN_E_INVALID_ARG, "duplicate name '%s'", name);
        json_decref(d);
        return s;
    }
    w->cur = d; /* owns the name the index borrows */
    w->cur_blob = blob;
    w->cur_index = (uint32_t)json_array_size(blob ? w->blobs : w->tensors);
    w->cur_nbytes = data_bytes;
    w->cur_written = 0;
    w->cur_done = 0;
    w->fill = 0;
    uint64_t n = data_bytes ? (data_bytes - 1) / w->chunk_size + 1 : 0;
    if (n > UINT32_MAX) return thin_writer_fail(w, THIN_E_LIMIT, "'%s': too many chunks", name);
    w->cur_nchunks = (uint32_t)n;
    free(w->recs);
    w->recs = calloc(n + 1, sizeof *w->recs);
    w->cur_chunks = json_array();
    char *desc = json_dumps(d, JSON_COMPACT);
    if (!w->recs || !w->cur_chunks || !desc) {
        free(desc);
        return thin_writer_fail(w, THIN_E_NOMEM, "out of memory");
    }
    size_t len = strlen(desc);
    uint8_t sha[32], h[64];
    thin_record rec = {.type = THIN_REC_ENTRY, .entry = w->cur_index, .chunk = w->cur_nchunks,
                       .offset = w->pos + 64, .stored = len, .raw = len,
                       .kind = blob ? THIN_KIND_BLOB : THIN_KIND_TENSOR};
    thin_status s = thin_sha256(desc, len, sha);
    memcpy(rec.sha, sha, 16);
    thin_record_encode(&rec, h);
    if (!s) s = thin_wout_write(w, h, 64);
    if (!s) s = thin_wout_write(w, desc, len);
    free(desc);
    if (!s) w->state = W_ENTRY;
    return s;
}

static thin_status desc_tail(thin_writer *w, json_t *d)
{
    if (json_object_set_new(d, "codec", json_string(thin_codec_name(w->codec))) ||
        json_object_set_new(d, "chunk_size", json_integer((json_int_t)w->chunk_size)))
        return thin_writer_fail(w, THIN_E_NOMEM, "out of memory");
    return THIN_OK;
}

/* Checks d and computes its byte size. */
static thin_status check_desc(thin_writer *w, const thin_tensor_desc *d, uint64_t *nbytes)
{
    thin_status s = check_name(w, d->name, "tensor");
    if (s) return s;
    if ((int)d->role < 0 || d->role >= THIN_ROLE_COUNT_ || d->layer < -1)
        return thin_writer_fail(w, THIN_E_INVALID_ARG, "tensor '%s': bad role or layer", d->name);
    if (d->has_expert && (d->expert < 0 || d->layer < 0))
        return thin_writer_fail(w, THIN_E_INVALID_ARG, "tensor '%s': an expert index below 0 or "
                                "without a layer", d->name);
    uint64_t n = thin_dtype_size(d->dtype);
    if (!n) return thin_writer_fail(w, THIN_E_DTYPE, "tensor '%s': unknown dtype", d->name);
    if (d->rank > THIN_MAX_RANK)
        return thin_writer_fail(w, THIN_E_LIMIT, "tensor '%s': rank above 8", d->name);
    for (uint32_t i = 0; i < d->rank; i++) {
        if (d->shape[i] > INT64_MAX || __builtin_mul_overflow(n, d->shape[i], &n) || n > INT64_MAX)
            return thin_writer_fail(w, THIN_E_RANGE, "tensor '%s': size overflows", d->name);
    }
    if ((d->scale && (s = check_name(w, d->scale, "scale"))) ||
        (d->tied_to && (s = check_name(w, d->tied_to, "tied_to"))))
        return s;
    *nbytes = n;
    return THIN_OK;
}

static json_t *tensor_json(const thin_tensor_desc *d, uint64_t nbytes)
{
    json_t *shape = json_array();
    for (uint32_t i = 0; shape && i < d->rank; i++)
        if (json_array_append_new(shape, json_integer((json_int_t)d->shape[i]))) {
            json_decref(shape);
            return NULL;
        }
    json_t *o = json_pack("{sssssisssosI}", "name", d->name, "role", thin_role_name(d->role),
                          "layer", (int)d->layer, "dtype", thin_dtype_name(d->dtype), "shape",
                          shape, "nbytes", (json_int_t)nbytes);
    if (o && d->has_expert && json_object_set_new(o, "expert", json_integer(d->expert))) o = NULL;
    if (o && d->scale && json_object_set_new(o, "scale", json_string(d->scale))) o = NULL;
    if (o && d->tied_to && json_object_set_new(o, "tied_to", json_string(d->tied_to))) o = NULL;
    return o;
}

thin_status thin_writer_begin_tensor(thin_writer *w, const thin_tensor_desc *d)
{
    thin_status s = thin_wstate(w, W_OPEN);
    uint64_t nbytes = 0;
    if (s) return s;
    if (!d) return thin_writer_fail(w, THIN_E_INVALID_ARG, "NULL descriptor");
    if ((s = check_desc(w, d, &nbytes))) return s;
    json_t *o = tensor_json(d, nbytes);
    if (!o) return thin_writer_fail(w, THIN_E_NOMEM, "out of memory");
    if ((s = desc_tail(w, o))) {
        json_decref(o);
        return s;
    }
    return begin_entry(w, o, 0, d->tied_to ? 0 : nbytes);
}

thin_status thin_writer_begin_blob(thin_writer *w, const char *name, uint64_t size)
{
    thin_status s = thin_wstate(w, W_OPEN);
    if (s || (s = check_name(w, name, "blob"))) return s;
    if (size > INT64_MAX) return thin_writer_fail(w, THIN_E_RANGE, "blob '%s': too large", name);
    json_t *o = json_pack("{sssI}", "name", name, "nbytes", (json_int_t)size);
    if (!o) return thin_writer_fail(w, THIN_E_NOMEM, "out of memory");
    if ((s = desc_tail(w, o))) {
        json_decref(o);
        return s;
    }
    return begin_entry(w, o, 1, size);
}

thin_status thin_writer_write(thin_writer *w, const void *data, size_t n)
{
    thin_status s = thin_wstate(w, W_ENTRY);
    if (s) return s;
    if (!data && n) return thin_writer_fail(w, THIN_E_INVALID_ARG, "NULL data");
    if (n > w->cur_nbytes - w->cur_written)
        return thin_writer_fail(w, THIN_E_SHAPE, "'%s': more bytes than declared (%llu)",
                                json_string_value(json_object_get(w->cur, "name")),
                                (unsigned long long)w->cur_nbytes);
    w->cur_written += n;
    return thin_wchunks_write(w, data, n);
}

thin_status thin_writer_end_tensor(thin_writer *w)
{
    thin_status s = thin_wstate(w, W_ENTRY);
    if (s) return s;
    const char *name = json_string_value(json_object_get(w->cur, "name"));
    if (w->cur_written != w->cur_nbytes)
        return thin_writer_fail(w, THIN_E_SHAPE, "'%s': %llu bytes written, %llu declared", name,
                                (unsigned long long)w->cur_written,
                                (unsigned long long)w->cur_nbytes);
    if ((s = thin_wchunks_flush(w)) || (s = thin_wout_zero_to(w, 64))) return s;
    if (w->cur_done != w->cur_nchunks) return thin_writer_fail(w, THIN_E_INTERNAL, "chunk count");
    for (uint32_t j = 0; j < w->cur_nchunks; j++) {
        uint8_t h[64];
        thin_record_encode(&w->recs[j], h);
        if ((s = thin_wout_write(w, h, 64))) return s;
    }
    if (json_object_set_new(w->cur, "chunks", w->cur_chunks) ||
        json_array_append_new(w->cur_blob ? w->blobs : w->tensors, w->cur)) {
        w->cur = w->cur_chunks = NULL;
        return thin_writer_fail(w, THIN_E_NOMEM, "out of memory");
    }
    w->cur = w->cur_chunks = NULL;
    w->state = W_OPEN;
    return THIN_OK;
}

thin_status thin_writer_add_tensor(thin_writer *w, const thin_tensor_desc *d, const void *data)
{
    thin_status s = thin_writer_begin_tensor(w, d);
    if (!s && w->cur_nbytes > SIZE_MAX)
        return thin_writer_fail(w, THIN_E_LIMIT, "tensor too large for one call");
    if (!s && w->cur_nbytes) s = thin_writer_write(w, data, (size_t)w->cur_nbytes);
    return s ? s : thin_writer_end_tensor(w);
}

thin_status thin_writer_add_blob(thin_writer *w, const char *name, const void *data, size_t size)
{
    thin_status s = thin_writer_begin_blob(w, name, size);
    if (!s && size) s = thin_writer_write(w, data, size);
    return s ? s : thin_writer_end_tensor(w);
}
