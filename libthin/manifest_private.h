/*
 * manifest_private.h — the parsed and validated manifest (SPEC.md §6–§7), shared by the
 * random-access reader and the stream reader, and the entry JSON the writer builds.
 */
#ifndef THIN_MANIFEST_PRIVATE_H
#define THIN_MANIFEST_PRIVATE_H

#include <jansson.h>

#include "names_private.h"
#include "thin_private.h"

typedef struct thin_entry {
    thin_tensor_info info; /* a blob reads as dtype U8, rank 1, shape [nbytes], role other */
    int is_blob;
    uint32_t kind_index;   /* index in the manifest's "tensors" or "blobs" */
    uint64_t chunk_size;   /* raw bytes of every chunk but the last */
    size_t first_chunk;    /* index of chunk 0 in thin_layout.chunks */
    int64_t tied;          /* entry number of the tied_to target, or -1 */
    json_t *json;          /* borrowed from the manifest root */
} thin_entry;

typedef struct thin_layout {
    thin_entry *entries;     /* (n_tensors + n_blobs) tensors first, then blobs */
    uint32_t n_tensors;
    uint32_t n_blobs;
    thin_chunk_info *chunks; /* (n_chunks) per entry in manifest order */
    size_t n_chunks;
    thin_names names;        /* name -> entry number (tensors and blobs share one namespace) */
} thin_layout;

/* Validates the manifest `root` against SPEC.md §7 and fills L. Chunk payloads must lie within
 * [64, data_end). major/minor are the file header's version. On error the message goes to err
 * ("label: ...") and L is freed. */
thin_status thin_manifest_parse(json_t *root, uint16_t major, uint16_t minor, uint64_t data_end,
                                thin_layout *L, char *err, const char *label);
void thin_layout_free(thin_layout *L);
/* Entry number of kind/index, or -1 when out of range. */
int64_t thin_layout_entry(const thin_layout *L, int kind, uint32_t index);
/* Checks that desc (an ENTRY record's JSON) equals the manifest entry without its "chunks". */
int thin_descriptor_matches(json_t *entry, const char *desc, size_t len);
/* The same for a parsed descriptor. */
int thin_descriptor_equal(json_t *entry, json_t *desc);
/* Parses a descriptor (ENTRY JSON) into e for the stream reader: same checks as a manifest entry
 * except chunks. Returns a status and sets *why. The json is kept in e->json (caller decrefs). */
thin_status thin_descriptor_parse(const char *desc, size_t len, int is_blob, thin_entry *e,
                                  const char **why);

#endif
