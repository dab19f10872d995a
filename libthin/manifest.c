/*
 * manifest.c — validation of the JSON manifest (SPEC.md §6, §7): entry fields, dtype and shape
 * arithmetic with overflow checks, chunk lists against the file, name uniqueness, tied_to and
 * scale links. Shared by the random-access reader and the stream reader.
 */
#include <stdlib.h>
#include <string.h>

#include "manifest_private.h"

#define FAIL(st, msg) do { *why = (msg); return (st); } while (0)

static thin_status get_u64(json_t *o, const char *key, int required, uint64_t *out,
                           const char **why)
{
    json_t *v = json_object_get(o, key);
    if (!v) {
        if (required) FAIL(THIN_E_BAD_MANIFEST, "a required member is missing");
        return THIN_OK;
    }
    if (!json_is_integer(v) || json_integer_value(v) < 0)
        FAIL(THIN_E_BAD_MANIFEST, "a size or offset is not a non-negative integer");
    *out = (uint64_t)json_integer_value(v);
    return THIN_OK;
}

static thin_status get_str(json_t *o, const char *key, int required, const char **out,
                           const char **why)
{
    json_t *v = json_object_get(o, key);
    *out = NULL;
    if (!v) {
        if (required) FAIL(THIN_E_BAD_MANIFEST, "a required member is missing");
        return THIN_OK;
    }
    if (!json_is_string(v)) FAIL(THIN_E_BAD_MANIFEST, "a name member is not a string");
    *out = json_string_value(v);
    return THIN_OK;
}

/* role, layer, dtype, shape, nbytes of a tensor entry. */
static thin_status parse_tensor_fields(json_t *e, thin_tensor_info *t, const char **why)
{
    const char *role = NULL, *dtype = NULL;
    thin_status s = get_str(e, "role", 0, &role, why);
    if (s) return s;
    if (role && thin_role_from_name(role, &t->role) != THIN_OK)
        FAIL(THIN_E_BAD_MANIFEST, "unknown role");
    json_t *layer = json_object_get(e, "layer");
    if (layer) {
        if (!json_is_integer(layer) || json_integer_value(layer) < -1 ||
            json_integer_value(layer) > INT32_MAX)
            FAIL(THIN_E_BAD_MANIFEST, "layer is not an integer >= -1");
        t->layer = (int32_t)json_integer_value(layer);
    }
    json_t *expert = json_object_get(e, "expert");
    if (expert) {
        if (!json_is_integer(expert) || json_integer_value(expert) < 0 ||
            json_integer_value(expert) > INT32_MAX)
            FAIL(THIN_E_BAD_MANIFEST, "expert is not an integer >= 0");
        if (t->layer < 0) FAIL(THIN_E_BAD_MANIFEST, "an expert's tensor belongs to no layer");
        t->expert = (int32_t)json_integer_value(expert);
    }
    if ((s = get_str(e, "dtype", 1, &dtype, why))) return s;
    t->dtype = thin_dtype_from_name(dtype);
    if (t->dtype == THIN_DTYPE_INVALID || strcmp(thin_dtype_name(t->dtype), dtype) != 0)
        FAIL(THIN_E_DTYPE, "unknown dtype");
    json_t *shape = json_object_get(e, "shape");
    if (!json_is_array(shape)) FAIL(THIN_E_BAD_MANIFEST, "shape is not an array");
    if (json_array_size(shape) > THIN_MAX_RANK) FAIL(THIN_E_LIMIT, "rank above 8");
    t->rank = (uint32_t)json_array_size(shape);
    uint64_t n = thin_dtype_size(t->dtype);
    for (uint32_t i = 0; i < t->rank; i++) {
        json_t *d = json_array_get(shape, i);
        if (!json_is_integer(d) || json_integer_value(d) < 0)
            FAIL(THIN_E_BAD_MANIFEST, "a dimension is not a non-negative integer");
        t->shape[i] = (uint64_t)json_integer_value(d);
        if (__builtin_mul_overflow(n, t->shape[i], &n))
            FAIL(THIN_E_RANGE, "shape x dtype size overflows 64 bits");
    }
    if ((s = get_u64(e, "nbytes", 1, &t->nbytes, why))) return s;
    if (n != t->nbytes) FAIL(THIN_E_SHAPE, "nbytes is not product(shape) x dtype size");
    if ((s = get_str(e, "scale", 0, &t->scale, why))) return s;
    return get_str(e, "tied_to", 0, &t->tied_to, why);
}

/* Fields every entry has (everything but "chunks"). */
static thin_status parse_fields(json_t *e, int is_blob, thin_entry *out, const char **why)
{
    memset(out, 0, sizeof *out);
    out->tied = -1;
    out->is_blob = is_blob;
    out->json = e;
    thin_tensor_info *t = &out->info;
    t->layer = -1;
    t->expert = -1;
    if (!json_is_object(e)) FAIL(THIN_E_BAD_MANIFEST, "an entry is not an object");
    thin_status s = get_str(e, "name", 1, &t->name, why);
    if (s) return s;
    if (!t->name[0]) FAIL(THIN_E_BAD_MANIFEST, "empty name");
    if (strlen(t->name) > THIN_MAX_NAME) FAIL(THIN_E_LIMIT, "name longer than 512 bytes");
    if (is_blob) {
        t->dtype = THIN_DTYPE_U8;
        t->rank = 1;
        if ((s = get_u64(e, "nbytes", 1, &t->nbytes, why))) return s;
        t->shape[0] = t->nbytes;
    } else if ((s = parse_tensor_fields(e, t, why))) {
        return s;
    }
    const char *codec = NULL;
    if ((s = get_str(e, "codec", 0, &codec, why))) return s;
    int c = codec ? thin_codec_from_name(codec) : THIN_CODEC_NONE;
    if (c < 0) FAIL(THIN_E_CODEC, "unknown codec");
    t->codec = (thin_codec)c;
    if ((s = get_u64(e, "chunk_size", 0, &out->chunk_size, why))) return s;
    if (out->chunk_size > THIN_MAX_CHUNK) FAIL(THIN_E_LIMIT, "chunk_size above 2 GiB");
    if (out->chunk_size % THIN_DATA_ALIGN) FAIL(THIN_E_ALIGN, "chunk_size not a multiple of 4096");
    if (t->tied_to) return THIN_OK; /* a tied entry has no chunks */
    if (t->nbytes && !out->chunk_size) FAIL(THIN_E_BAD_MANIFEST, "chunk_size missing or zero");
    uint64_t n = t->nbytes ? (t->nbytes - 1) / out->chunk_size + 1 : 0;
    if (n > UINT32_MAX) FAIL(THIN_E_LIMIT, "too many chunks");
    t->n_chunks = (uint32_t)n;
    return THIN_OK;
}

static thin_status parse_chunk(json_t *c, const thin_entry *e, uint32_t j, uint64_t data_end,
                               thin_chunk_info *out, const char **why)
{
    if (!json_is_object(c)) FAIL(THIN_E_BAD_MANIFEST, "a chunk is not an object");
    thin_status s;
    if ((s = get_u64(c, "offset", 1, &out->offset, why)) ||
        (s = get_u64(c, "stored", 1, &out->stored_size, why)) ||
        (s = get_u64(c, "raw", 1, &out->raw_size, why)))
        return s;
    const char *codec, *sha;
    if ((s = get_str(c, "codec", 1, &codec, why)) || (s = get_str(c, "sha256", 1, &sha, why)))
        return s;
    int cc = thin_codec_from_name(codec);
    if (cc < 0) FAIL(THIN_E_CODEC, "unknown chunk codec");
    if (cc != (int)e->info.codec) FAIL(THIN_E_CODEC, "chunk codec differs from the entry's codec");
    out->codec = (thin_codec)cc;
    if (thin_hex32_parse(sha, out->sha256)) FAIL(THIN_E_BAD_MANIFEST, "malformed sha256");
    out->raw_offset = (uint64_t)j * e->chunk_size;
    if (out->raw_size != thin_chunk_raw(e->info.nbytes, e->chunk_size, j))
        FAIL(THIN_E_BAD_MANIFEST, "chunk raw sizes are not contiguous chunk_size pieces");
    if (out->offset % THIN_DATA_ALIGN) FAIL(THIN_E_ALIGN, "chunk offset not 4096-aligned");
    if (out->stored_size == 0 || out->offset < THIN_HEADER_SIZE || out->offset > data_end ||
        out->stored_size > data_end - out->offset)
        FAIL(THIN_E_RANGE, "chunk lies outside the file's data area");
    if (cc == THIN_CODEC_NONE && out->stored_size != out->raw_size)
        FAIL(THIN_E_BAD_MANIFEST, "uncompressed chunk with stored != raw");
    return THIN_OK;
}

static thin_status parse_chunks(thin_layout *L, thin_entry *e, uint64_t data_end,
                                uint32_t *bad_chunk, const char **why)
{
    json_t *arr = json_object_get(e->json, "chunks");
    if (!json_is_array(arr)) FAIL(THIN_E_BAD_MANIFEST, "chunks is not an array");
    if (json_array_size(arr) != e->info.n_chunks)
        FAIL(THIN_E_BAD_MANIFEST, e->info.tied_to ? "a tied entry has chunks"
                                                   : "chunk count does not match nbytes/chunk_size");
    e->first_chunk = L->n_chunks;
    for (uint32_t j = 0; j < e->info.n_chunks; j++) {
        thin_chunk_info *c = &L->chunks[L->n_chunks];
        *bad_chunk = j;
        thin_status s = parse_chunk(json_array_get(arr, j), e, j, data_end, c, why);
        if (s) return s;
        e->info.stored_bytes += c->stored_size;
        L->n_chunks++;
    }
    *bad_chunk = UINT32_MAX;
    return THIN_OK;
}

static thin_status check_links(thin_layout *L, thin_entry *e, const char **why)
{
    uint32_t k;
    if (e->info.tied_to) {
        if (thin_names_find(&L->names, e->info.tied_to, &k) || k >= L->n_tensors)
            FAIL(THIN_E_BAD_MANIFEST, "tied_to names no tensor");
        const thin_tensor_info *t = &L->entries[k].info;
        if (t->tied_to) FAIL(THIN_E_BAD_MANIFEST, "tied_to names a tied tensor");
        if (t->dtype != e->info.dtype || t->rank != e->info.rank ||
            memcmp(t->shape, e->info.shape, sizeof t->shape))
            FAIL(THIN_E_BAD_MANIFEST, "tied_to target differs in dtype or shape");
        e->tied = k;
    }
    if (e->info.scale) {
        if (thin_names_find(&L->names, e->info.scale, &k) || k >= L->n_tensors)
            FAIL(THIN_E_BAD_MANIFEST, "scale names no tensor");
        const thin_tensor_info *t = &L->entries[k].info;
        if (t->dtype != THIN_DTYPE_F32 || t->rank != 1 || t->role != THIN_ROLE_SCALE)
            FAIL(THIN_E_BAD_MANIFEST, "scale target is not a rank-1 F32 tensor of role scale");
        /* one scale a row (a stack of matrices' rows counted together) */
        if (e->info.rank < 1 || t->shape[0] != thin_tensor_rows(&e->info))
            FAIL(THIN_E_BAD_MANIFEST, "scale length differs from the tensor's rows");
    }
    return THIN_OK;
}

static thin_status check_format(json_t *root, uint16_t major, uint16_t minor, const char **why)
{
    if (!json_is_object(root)) FAIL(THIN_E_BAD_MANIFEST, "the manifest is not a JSON object");
    json_t *f = json_object_get(root, "format");
    json_t *name = json_object_get(f, "name"), *ma = json_object_get(f, "major"),
           *mi = json_object_get(f, "minor");
    if (!json_is_object(f) || !json_is_string(name) || strcmp(json_string_value(name), "thin"))
        FAIL(THIN_E_BAD_MANIFEST, "format.name is not \"thin\"");
    if (!json_is_integer(ma) || !json_is_integer(mi) || json_integer_value(ma) != major ||
        json_integer_value(mi) != minor)
        FAIL(THIN_E_BAD_MANIFEST, "format version differs from the file header's");
    json_t *t = json_object_get(root, "tensors"), *b = json_object_get(root, "blobs");
    if (!json_is_array(t)) FAIL(THIN_E_BAD_MANIFEST, "tensors is not an array");
    if (b && !json_is_array(b)) FAIL(THIN_E_BAD_MANIFEST, "blobs is not an array");
    if (json_array_size(t) + json_array_size(b) > THIN_MAX_ENTRIES)
        FAIL(THIN_E_LIMIT, "more than 2^20 entries");
    return THIN_OK;
}

/* Parses the fields of every entry, indexes names and sizes the chunk table. */
static thin_status parse_entries(json_t *root, thin_layout *L, uint64_t data_end, int64_t *bad,
                                 const char **why)
{
    json_t *t = json_object_get(root, "tensors"), *b = json_object_get(root, "blobs");
    L->n_tensors = (uint32_t)json_array_size(t);
    L->n_blobs = (uint32_t)json_array_size(b);
    uint32_t n = L->n_tensors + L->n_blobs;
    L->entries = calloc(n ? n : 1, sizeof *L->entries);
    if (!L->entries) FAIL(THIN_E_NOMEM, "out of memory");
    uint64_t total = 0;
    for (uint32_t i = 0; i < n; i++) {
        int blob = i >= L->n_tensors;
        thin_entry *e = &L->entries[i];
        *bad = i;
        thin_status s = parse_fields(json_array_get(blob ? b : t, blob ? i - L->n_tensors : i),
                                     blob, e, why);
        if (s) return s;
        e->kind_index = blob ? i - L->n_tensors : i;
        e->info.index = e->kind_index;
        int r = thin_names_insert(&L->names, e->info.name, i, NULL);
        if (r < 0) FAIL(THIN_E_NOMEM, "out of memory");
        if (r > 0) FAIL(THIN_E_BAD_MANIFEST, "duplicate name");
        total += e->info.n_chunks;
        if (total > data_end / THIN_DATA_ALIGN) FAIL(THIN_E_LIMIT, "more chunks than the file holds");
    }
    L->chunks = calloc(total ? total : 1, sizeof *L->chunks);
    if (!L->chunks) FAIL(THIN_E_NOMEM, "out of memory");
    return THIN_OK;
}

thin_status thin_manifest_parse(json_t *root, uint16_t major, uint16_t minor, uint64_t data_end,
                                thin_layout *L, char *err, const char *label)
{
    memset(L, 0, sizeof *L);
    const char *why = NULL;
    int64_t bad = -1;
    uint32_t bad_chunk = UINT32_MAX;
    thin_status s = check_format(root, major, minor, &why);
    if (!s) s = parse_entries(root, L, data_end, &bad, &why);
    for (uint32_t i = 0; !s && i < L->n_tensors + L->n_blobs; i++) {
        bad = i;
        s = parse_chunks(L, &L->entries[i], data_end, &bad_chunk, &why);
        if (!s) s = check_links(L, &L->entries[i], &why);
    }
    if (!s) return THIN_OK;
    if (bad < 0 || !L->entries || !L->entries[bad].info.name) {
        thin_errf(err, label, s, "manifest: %s", why);
    } else {
        const thin_entry *e = &L->entries[bad];
        char where[64] = "";
        if (bad_chunk != UINT32_MAX) snprintf(where, sizeof where, "chunk %u of ", bad_chunk);
        thin_errf(err, label, s, "manifest: %s%s '%s': %s", where, e->is_blob ? "blob" : "tensor",
                  e->info.name, why);
    }
    thin_layout_free(L);
    return s;
}

void thin_layout_free(thin_layout *L)
{
    free(L->entries);
    free(L->chunks);
    thin_names_free(&L->names);
    memset(L, 0, sizeof *L);
}

int64_t thin_layout_entry(const thin_layout *L, int kind, uint32_t index)
{
    if (kind == THIN_KIND_TENSOR) return index < L->n_tensors ? (int64_t)index : -1;
    return index < L->n_blobs ? (int64_t)L->n_tensors + index : -1;
}

int thin_descriptor_equal(json_t *entry, json_t *desc)
{
    json_t *m = json_copy(entry);
    int ok = desc && m && json_object_del(m, "chunks") == 0 && json_equal(desc, m);
    json_decref(m);
    return ok;
}

int thin_descriptor_matches(json_t *entry, const char *desc, size_t len)
{
    json_t *d = json_loadb(desc, len, JSON_REJECT_DUPLICATES, NULL);
    int ok = thin_descriptor_equal(entry, d);
    json_decref(d);
    return ok;
}

thin_status thin_descriptor_parse(const char *desc, size_t len, int is_blob, thin_entry *e,
                                  const char **why)
{
    json_t *d = json_loadb(desc, len, JSON_REJECT_DUPLICATES, NULL);
    if (!d) FAIL(THIN_E_BAD_RECORD, "entry descriptor is not valid JSON");
    thin_status s = parse_fields(d, is_blob, e, why);
    if (!s && json_object_get(d, "chunks")) {
        *why = "entry descriptor holds chunks";
        s = THIN_E_BAD_RECORD;
    }
    e->json = d;
    return s;
}
