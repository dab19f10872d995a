/*
 * show.h — what thin-inspect prints, built from a .thin manifest (JSON) alone, so a mapped file
 * and a one-pass stream are listed by the same code.
 */
#ifndef THIN_INSPECT_SHOW_H
#define THIN_INSPECT_SHOW_H

#include <jansson.h>
#include <stdint.h>
#include <stdio.h>

typedef struct show_filter {
    const char *role;   /* role name, or NULL for any */
    long long layer;    /* -2 for any; -1 global tensors */
    const char *dtype;  /* dtype name, or NULL for any */
} show_filter;

typedef struct show_file {
    const char *label;  /* path or "stdin" */
    uint64_t size;      /* bytes of the file, or those read from the stream */
    const char *digest; /* hex of the whole-file digest */
    json_t *manifest;   /* the parsed manifest */
    int verified;       /* -1 not asked, 1 all checks passed */
} show_file;

/* 1 when a tensor of that role, layer (-1: none) and dtype (names as the manifest writes them)
 * passes the filter. */
int show_match_fields(const show_filter *f, const char *role, long long layer, const char *dtype);
/* 1 when tensor entry t passes the filter. */
int show_match(const show_filter *f, const json_t *t);

/* The default listing: header, model section, tensor table, summary by role and by dtype. */
void show_text(FILE *out, const show_file *sf, const show_filter *f);

/* The tape, one op a line. Returns 0, or -1 when the file has no tape. */
int show_tape(FILE *out, const json_t *manifest);

/*
 * --json output (schema version 1; members are only ever added, never renamed or removed):
 * {"schema": 1, "file": label, "size": bytes (0 when read from a stream), "digest": hex,
 *  "format": {"major", "minor"}, "model": the manifest's model section without "config" (or
 *  null), "tokenizer": section or null, "quant": section or null, "tape_ops": count or null,
 *  "tensors": [{"name", "role", "layer", "dtype", "shape", "nbytes", "stored", "chunks",
 *               "codec", "tied_to"? , "scale"?}]   (filtered),
 *  "blobs": [{"name", "nbytes", "stored"}],
 *  "by_role": {role: {"tensors", "bytes", "share"}}, "by_dtype": {dtype: {...}}  (filtered;
 *  share = bytes / bytes of all tensors), "total_bytes", "verified": true|false|null}
 * With --tape, "tape" holds the whole tape section; with --stats each tensor entry holds "stats"
 * (stats.h).
 */
json_t *show_json(const show_file *sf, const show_filter *f, int with_tape);

#endif /* THIN_INSPECT_SHOW_H */
