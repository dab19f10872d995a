/*
 * file_private.h — the random-access reader's handle, shared by file.c (open, validation, lookup)
 * and file_data.c (data access, verification).
 */
#ifndef THIN_FILE_PRIVATE_H
#define THIN_FILE_PRIVATE_H

#include "manifest_private.h"

typedef struct thin_pad {
    uint64_t offset; /* a run of bytes that must be zero */
    uint64_t len;
} thin_pad;

typedef struct thin_section {
    char *key;
    char *json;
} thin_section;

struct thin_file {
    const uint8_t *base;   /* (size) the file image: mapped, read into `owned`, or the caller's */
    uint64_t size;
    void *map;             /* mmap base, or NULL */
    uint8_t *owned;        /* malloc'd image, or NULL */
    char *label;
    char err[THIN_ERR_LEN];
    int opened;
    uint16_t major, minor;
    thin_trailer trailer;
    const char *manifest;  /* (manifest_len) inside the image */
    size_t manifest_len;
    json_t *root;
    thin_layout L;
    size_t *file_order;    /* (L.n_chunks) chunk numbers in file order */
    uint32_t *chunk_owner; /* (L.n_chunks) entry number of each chunk */
    uint8_t (*stored_sha)[16]; /* (L.n_chunks) CHUNK record hash prefix of the stored bytes */
    thin_pad *pads;        /* (n_pads) every padding run of the file */
    size_t n_pads, cap_pads;
    thin_section *sections;/* (n_sections) cached compact JSON of manifest members */
    size_t n_sections;
    const void **blob_data;/* (L.n_blobs) verified blob bytes, or NULL until first use */
    void **blob_owned;     /* (L.n_blobs) decompressed copies to free */
    void *dctx;            /* ZSTD_DCtx for reads on this handle */
};

/* Walks every record of an opened image against the parsed manifest (file.c → file_walk.c). */
thin_status thin_file_walk(thin_file *f);
/* Hashes (decoding as needed) chunk number ci and compares it with the manifest. scratch must
 * hold the chunk's raw size when it is compressed. *why is set on failure. */
thin_status thin_file_check_chunk(const thin_file *f, size_t ci, void *dctx, uint8_t *scratch,
                                  const char **why);
/* Formats "chunk j of tensor 'x': why" for chunk number ci. */
thin_status thin_file_chunk_error(thin_file *f, size_t ci, thin_status s, const char *why);

#endif
