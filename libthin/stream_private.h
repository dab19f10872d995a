/*
 * stream_private.h — the one-pass stream reader's handle, shared by stream.c (input, items, chunk
 * data) and stream_end.c (the manifest and trailer at the end, checked against what was seen).
 */
#ifndef THIN_STREAM_PRIVATE_H
#define THIN_STREAM_PRIVATE_H

#include "manifest_private.h"

enum { S_NEW = 0, S_BETWEEN, S_ITEM, S_ITEM_DONE, S_END, S_FAILED };

typedef struct thin_seen {
    json_t *desc;       /* the ENTRY descriptor */
    int kind;
    uint32_t index;
    size_t first_chunk; /* in thin_stream.chunks */
    uint32_t n_chunks;
} thin_seen;

struct thin_stream {
    int fd;
    char *label;
    char err[THIN_ERR_LEN];
    int state;
    uint8_t *in;               /* (in_cap) input buffer: bytes [in_pos, in_len) are unread */
    size_t in_cap, in_pos, in_len;
    uint64_t pos;              /* file offset of in[in_pos] */
    uint16_t major, minor;
    thin_seen *seen;           /* (n_seen) every entry so far, in file order */
    size_t n_seen, cap_seen;
    uint32_t n_kind[2];        /* entries seen per kind */
    thin_chunk_info *chunks;   /* (n_chunks) every chunk so far, as read, with its SHA-256 */
    size_t n_chunks, cap_chunks;
    thin_entry cur;            /* the current item */
    uint32_t cj;               /* its current chunk */
    uint64_t c_off, c_raw, c_raw_done, c_stored;
    thin_sha256_ctx sha;       /* of the current chunk's raw bytes */
    thin_sha256_ctx zsha;      /* of its stored bytes (zstd) */
    uint8_t (*stored_sha)[16]; /* (n_chunks) hash prefix of each chunk's stored bytes */
    void *zd;                  /* ZSTD_DStream */
    char *manifest;            /* (manifest_len) */
    size_t manifest_len;
    json_t *root;
    thin_trailer trailer;
    char **sec_key, **sec_json;/* (n_sec) cached sections */
    size_t n_sec;
};

/* stream.c input helpers used by stream_end.c */
thin_status thin_stream_get(thin_stream *s, void *dst, size_t n);
thin_status thin_stream_zeros_to(thin_stream *s, uint64_t align);
thin_status thin_stream_fail(thin_stream *s, thin_status st, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* stream_end.c: reads the MANIFEST record (header r at offset at), the trailer, checks all. */
thin_status thin_stream_finish(thin_stream *s, const thin_record *r, uint64_t at);

#endif
