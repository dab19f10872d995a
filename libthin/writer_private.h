/*
 * writer_private.h — the writer's handle, shared by writer.c (API, entries, manifest),
 * writer_chunks.c (chunk batches: hashing and compression on threads) and writer_out.c
 * (buffered output, the temporary file and the atomic rename).
 */
#ifndef THIN_WRITER_PRIVATE_H
#define THIN_WRITER_PRIVATE_H

#include <jansson.h>

#include "names_private.h"
#include "thin_private.h"

enum { W_NEW = 0, W_OPEN, W_ENTRY, W_DONE, W_FAILED };

typedef struct thin_wjob {
    const uint8_t *src;  /* (raw) the chunk's bytes: the caller's memory or a staging slot */
    size_t raw;
    int borrowed;        /* src is the caller's memory: must be done before write() returns */
    size_t stored;       /* compressed size (zstd) */
    uint8_t sha[32];     /* of the raw bytes */
    uint8_t zsha[32];    /* of the stored (compressed) bytes */
    thin_status status;
} thin_wjob;

struct thin_writer {
    char *label;
    char err[THIN_ERR_LEN];
    int state;
    int fd;
    char *path;           /* target of an atomic path writer, else NULL */
    char *tmp;            /* its temporary file while it exists */
    uint64_t pos;         /* bytes emitted so far */
    uint8_t *obuf;        /* (ocap) output buffer */
    size_t olen, ocap;
    size_t chunk_size;
    thin_codec codec;
    int level;
    unsigned threads;
    json_t *tensors, *blobs, *sections;
    thin_names names;     /* entry names (borrowed from the entry objects) */
    uint8_t (*sha)[32];   /* (n_sha) every chunk's SHA-256 in file order */
    size_t n_sha, cap_sha;
    /* the entry being written */
    json_t *cur;          /* entry object (descriptor; "chunks" added at the end) */
    json_t *cur_chunks;
    int cur_blob;
    uint32_t cur_index;
    uint64_t cur_nbytes, cur_written;
    uint32_t cur_nchunks, cur_done; /* chunks in the entry, chunks emitted */
    thin_record *recs;    /* (cur_nchunks) CHUNK headers written after the payloads */
    /* the batch of chunks being assembled */
    thin_wjob *jobs;      /* (threads) */
    unsigned n_jobs;
    uint8_t **slots;      /* (threads) staging buffers of chunk_size bytes */
    size_t fill;          /* bytes in slots[n_jobs] */
    uint8_t **zbuf;       /* (threads) compression outputs */
    size_t zcap;
    void **cctx;          /* (threads) ZSTD_CCtx */
};

/* writer_out.c */
thin_status thin_wout_open_path(thin_writer *w, const char *path);
thin_status thin_wout_write(thin_writer *w, const void *data, size_t n);
thin_status thin_wout_zero_to(thin_writer *w, uint64_t align);
thin_status thin_wout_finish(thin_writer *w);
void thin_wout_abandon(thin_writer *w);

/* writer_chunks.c */
thin_status thin_wchunks_alloc(thin_writer *w);
void thin_wchunks_free(thin_writer *w);
/* Appends n bytes of the current entry, emitting chunks as batches fill. */
thin_status thin_wchunks_write(thin_writer *w, const uint8_t *data, size_t n);
/* Hashes/compresses the pending batch and writes it in order. */
thin_status thin_wchunks_flush(thin_writer *w);

/* THIN_OK when the writer is in state `want`, else THIN_E_STATE with a message. */
thin_status thin_wstate(thin_writer *w, int want);
/* Marks the writer failed with a message; returns s. */
thin_status thin_writer_fail(thin_writer *w, thin_status s, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#endif
