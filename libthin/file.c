/*
 * file.c — the random-access reader: opening a path, a descriptor or a memory image, validating
 * the header, trailer and manifest, and looking entries up. Record walking is in file_walk.c,
 * data access and verification in file_data.c.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zstd.h>

#include "file_private.h"

thin_file *thin_file_new(void) { return calloc(1, sizeof(thin_file)); }

static void file_reset(thin_file *f)
{
    if (f->map) munmap(f->map, f->size);
    free(f->owned);
    free(f->label);
    json_decref(f->root);
    for (size_t i = 0; i < f->L.n_blobs && f->blob_owned; i++) free(f->blob_owned[i]);
    free(f->blob_owned);
    free(f->blob_data);
    thin_layout_free(&f->L);
    free(f->file_order);
    free(f->chunk_owner);
    free(f->stored_sha);
    free(f->pads);
    for (size_t i = 0; i < f->n_sections; i++) {
        free(f->sections[i].key);
        free(f->sections[i].json);
    }
    free(f->sections);
    ZSTD_freeDCtx(f->dctx);
    memset(f, 0, sizeof *f);
}

void thin_file_free(thin_file *f)
{
    if (!f) return;
    file_reset(f);
    free(f);
}

const char *thin_file_error(const thin_file *f) { return f ? f->err : ""; }

static thin_status check_header(thin_file *f)
{
    const char *why = NULL;
    size_t n = f->size < 8 ? (size_t)f->size : 8;
    if (memcmp(f->base, thin_file_magic, n) != 0 || (n < 8 && n < f->size))
        return thin_errf(f->err, f->label, THIN_E_BAD_MAGIC, "not a .thin file (bad magic)");
    if (f->size < THIN_HEADER_SIZE)
        return thin_errf(f->err, f->label, THIN_E_TRUNCATED, "file ends inside the header");
    thin_status s = thin_header_decode(f->base, &f->major, &f->minor, &why);
    if (s == THIN_E_VERSION)
        return thin_errf(f->err, f->label, s, "format version %u.%u is not supported (this "
                         "library reads major version %d)", f->major, f->minor,
                         THIN_VERSION_MAJOR);
    if (s) return thin_errf(f->err, f->label, s, "%s", why);
    if (f->size < THIN_HEADER_SIZE + THIN_RECORD_SIZE + THIN_TRAILER_SIZE)
        return thin_errf(f->err, f->label, THIN_E_TRUNCATED, "file too short for a trailer");
    return THIN_OK;
}

static thin_status check_trailer(thin_file *f)
{
    const char *why = NULL;
    thin_trailer *t = &f->trailer;
    thin_status s = thin_trailer_decode(f->base + f->size - 64, t, &why);
    if (s) return thin_errf(f->err, f->label, s, "%s", why);
    if (f->size % THIN_RECORD_ALIGN)
        return thin_errf(f->err, f->label, THIN_E_BAD_TRAILER, "file size not a multiple of 64");
    if (t->manifest_size > THIN_MAX_MANIFEST)
        return thin_errf(f->err, f->label, THIN_E_LIMIT, "manifest larger than 256 MiB");
    uint64_t end = f->size - 64;
    if (t->manifest_offset % 64 || t->manifest_offset < 64 || t->manifest_offset > end - 64 ||
        t->manifest_size > end - 64 - t->manifest_offset ||
        thin_align_up(t->manifest_offset + 64 + t->manifest_size, 64) != end)
        return thin_errf(f->err, f->label, THIN_E_BAD_TRAILER,
                         "trailer does not point at a manifest that ends before it");
    return THIN_OK;
}

static thin_status load_manifest(thin_file *f)
{
    const char *why = NULL;
    thin_record r;
    uint64_t mo = f->trailer.manifest_offset, ms = f->trailer.manifest_size;
    thin_status s = thin_record_decode(f->base + mo, &r, &why);
    if (s) return thin_errf(f->err, f->label, s, "manifest %s", why);
    if (r.type != THIN_REC_MANIFEST || r.codec || r.entry || r.chunk || r.kind ||
        r.offset != mo + 64 || r.stored != ms || r.raw != ms)
        return thin_errf(f->err, f->label, THIN_E_BAD_RECORD,
                         "manifest record header does not match the trailer");
    f->manifest = (const char *)f->base + mo + 64;
    f->manifest_len = (size_t)ms;
    uint8_t sha[32];
    if ((s = thin_sha256(f->manifest, f->manifest_len, sha)))
        return thin_errf(f->err, f->label, s, "SHA-256 failed");
    if (memcmp(sha, r.sha, 16))
        return thin_errf(f->err, f->label, THIN_E_CHECKSUM, "manifest: SHA-256 mismatch");
    json_error_t je;
    f->root = json_loadb(f->manifest, f->manifest_len, JSON_REJECT_DUPLICATES, &je);
    if (!f->root)
        return thin_errf(f->err, f->label, THIN_E_BAD_MANIFEST, "manifest is not valid JSON: %s",
                         je.text);
    return thin_manifest_parse(f->root, f->major, f->minor, mo, &f->L, f->err, f->label);
}

static thin_status validate(thin_file *f, uint32_t flags)
{
    thin_status s = check_header(f);
    if (!s) s = check_trailer(f);
    if (!s) s = load_manifest(f);
    if (!s) s = thin_file_walk(f);
    if (!s) {
        f->blob_data = calloc(f->L.n_blobs + 1, sizeof *f->blob_data);
        f->blob_owned = calloc(f->L.n_blobs + 1, sizeof *f->blob_owned);
        if (!f->blob_data || !f->blob_owned) s = thin_errf(f->err, f->label, THIN_E_NOMEM, "out of memory");
    }
    if (!s && (flags & THIN_OPEN_VERIFY)) {
        f->opened = 1;
        s = thin_file_verify(f, 0, NULL, NULL);
    }
    return s;
}

static thin_status begin(thin_file *f, const char *label)
{
    if (!f) return THIN_E_INVALID_ARG;
    if (f->opened) return thin_errf(f->err, f->label, THIN_E_STATE, "handle already open");
    file_reset(f);
    f->label = strdup(label ? label : "(memory)");
    if (!f->label) return THIN_E_NOMEM;
    return THIN_OK;
}

/* Drops everything but the message. */
static thin_status finish_open_fail(thin_file *f, thin_status s)
{
    char err[THIN_ERR_LEN];
    memcpy(err, f->err, sizeof err);
    file_reset(f);
    memcpy(f->err, err, sizeof err);
    return s;
}

static thin_status finish_open(thin_file *f, uint32_t flags)
{
    thin_status s = validate(f, flags);
    if (s) return finish_open_fail(f, s);
    f->opened = 1;
    return THIN_OK;
}

thin_status thin_file_open_memory(thin_file *f, const void *data, size_t size, const char *label,
                                  uint32_t flags)
{
    thin_status s = begin(f, label);
    if (s) return s;
    if (!data && size) return thin_errf(f->err, f->label, THIN_E_INVALID_ARG, "NULL image");
    f->base = data ? data : (const uint8_t *)"";
    f->size = size;
    return finish_open(f, flags);
}

/* Reads the whole descriptor into f->owned; checks the magic as soon as 8 bytes are in. */
static thin_status read_all(thin_file *f, int fd)
{
    size_t cap = 1 << 20, len = 0;
    uint8_t *buf = malloc(cap);
    if (!buf) return thin_errf(f->err, f->label, THIN_E_NOMEM, "out of memory");
    for (;;) {
        if (len == cap) {
            uint8_t *nb = cap > SIZE_MAX / 2 ? NULL : realloc(buf, cap * 2);
            if (!nb) { free(buf); return thin_errf(f->err, f->label, THIN_E_NOMEM, "out of memory"); }
            buf = nb;
            cap *= 2;
        }
        ssize_t n = read(fd, buf + len, cap - len);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) {
            free(buf);
            return thin_errf(f->err, f->label, THIN_E_IO, "read: %s", strerror(errno));
        }
        if (n == 0) break;
        if (len < 8 && len + (size_t)n >= 8 && memcmp(buf, thin_file_magic, 8)) {
            free(buf);
            return thin_errf(f->err, f->label, THIN_E_BAD_MAGIC, "not a .thin file (bad magic)");
        }
        len += (size_t)n;
    }
    f->owned = buf;
    f->base = buf;
    f->size = len;
    return THIN_OK;
}

static thin_status map_fd(thin_file *f, int fd, uint32_t flags)
{
    struct stat st;
    if (fstat(fd, &st) != 0) return thin_errf(f->err, f->label, THIN_E_IO, "fstat: %s", strerror(errno));
    if (!S_ISREG(st.st_mode) || (flags & THIN_OPEN_NO_MMAP) || st.st_size == 0) return read_all(f, fd);
    void *m = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
    if (m == MAP_FAILED) return thin_errf(f->err, f->label, THIN_E_IO, "mmap: %s", strerror(errno));
    /* No read-ahead hint here: opening touches only headers; thin_file_verify asks for it. */
    f->map = m;
    f->base = m;
    f->size = (uint64_t)st.st_size;
    return THIN_OK;
}

thin_status thin_file_open_fd(thin_file *f, int fd, const char *label, uint32_t flags)
{
    thin_status s = begin(f, label ? label : "(fd)");
    if (s) return s;
    if (fd < 0) return thin_errf(f->err, f->label, THIN_E_INVALID_ARG, "bad descriptor");
    if ((s = map_fd(f, fd, flags))) return finish_open_fail(f, s);
    return finish_open(f, flags);
}

thin_status thin_file_open(thin_file *f, const char *path, uint32_t flags)
{
    if (!path) return THIN_E_INVALID_ARG;
    thin_status s = begin(f, path);
    if (s) return s;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return thin_errf(f->err, f->label, THIN_E_IO, "%s", strerror(errno));
    s = map_fd(f, fd, flags);
    close(fd);
    if (s) return finish_open_fail(f, s);
    return finish_open(f, flags);
}

void thin_file_version(const thin_file *f, uint16_t *major, uint16_t *minor)
{
    if (major) *major = f ? f->major : 0;
    if (minor) *minor = f ? f->minor : 0;
}

const uint8_t *thin_file_digest(const thin_file *f) { return f->trailer.digest; }

uint64_t thin_file_size(const thin_file *f) { return f ? f->size : 0; }

thin_status thin_file_manifest(const thin_file *f, const char **json, size_t *len)
{
    if (!f || !f->opened || !json || !len) return THIN_E_INVALID_ARG;
    *json = f->manifest;
    *len = f->manifest_len;
    return THIN_OK;
}

thin_status thin_file_section(thin_file *f, const char *key, const char **json)
{
    if (!f || !f->opened || !key || !json) return THIN_E_INVALID_ARG;
    for (size_t i = 0; i < f->n_sections; i++) {
        if (!strcmp(f->sections[i].key, key)) {
            *json = f->sections[i].json;
            return THIN_OK;
        }
    }
    json_t *v = json_object_get(f->root, key);
    if (!v) return thin_errf(f->err, f->label, THIN_E_NOT_FOUND, "no manifest member '%s'", key);
    thin_section *ns = realloc(f->sections, (f->n_sections + 1) * sizeof *ns);
    if (!ns) return thin_errf(f->err, f->label, THIN_E_NOMEM, "out of memory");
    f->sections = ns;
    thin_section *sec = &ns[f->n_sections];
    sec->key = strdup(key);
    sec->json = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY);
    if (!sec->key || !sec->json) {
        free(sec->key);
        free(sec->json);
        return thin_errf(f->err, f->label, THIN_E_NOMEM, "out of memory");
    }
    f->n_sections++;
    *json = sec->json;
    return THIN_OK;
}

uint32_t thin_file_tensor_count(const thin_file *f) { return f && f->opened ? f->L.n_tensors : 0; }

thin_status thin_file_tensor(const thin_file *f, uint32_t i, thin_tensor_info *out)
{
    if (!f || !f->opened || !out || i >= f->L.n_tensors) return THIN_E_INVALID_ARG;
    *out = f->L.entries[i].info;
    return THIN_OK;
}

thin_status thin_file_find(const thin_file *f, const char *name, thin_tensor_info *out)
{
    uint32_t k;
    if (!f || !f->opened || !name) return THIN_E_INVALID_ARG;
    if (thin_names_find(&f->L.names, name, &k) || k >= f->L.n_tensors) return THIN_E_NOT_FOUND;
    if (out) *out = f->L.entries[k].info;
    return THIN_OK;
}

thin_status thin_file_find_role(const thin_file *f, thin_role role, int32_t layer,
                                thin_tensor_info *out)
{
    if (!f || !f->opened) return THIN_E_INVALID_ARG;
    for (uint32_t i = 0; i < f->L.n_tensors; i++) {
        const thin_tensor_info *t = &f->L.entries[i].info;
        if (t->role == role && t->layer == layer) {
            if (out) *out = *t;
            return THIN_OK;
        }
    }
    return THIN_E_NOT_FOUND;
}

thin_status thin_file_chunk(const thin_file *f, uint32_t tensor, uint32_t j, thin_chunk_info *out)
{
    if (!f || !f->opened || !out || tensor >= f->L.n_tensors) return THIN_E_INVALID_ARG;
    const thin_entry *e = &f->L.entries[tensor];
    if (j >= e->info.n_chunks) return THIN_E_INVALID_ARG;
    *out = f->L.chunks[e->first_chunk + j];
    return THIN_OK;
}

uint32_t thin_file_blob_count(const thin_file *f) { return f && f->opened ? f->L.n_blobs : 0; }

const char *thin_file_blob_name(const thin_file *f, uint32_t i)
{
    if (!f || !f->opened || i >= f->L.n_blobs) return NULL;
    return f->L.entries[f->L.n_tensors + i].info.name;
}
