/*
 * source.h — where thin-pack's input comes from.
 *
 * On disk: one .safetensors file, a sharded model (model.safetensors.index.json), or a Hugging
 * Face folder; shards are mapped, the small side files (config.json, tokenizer files, ...) read.
 * As a stream: a tar / tar.gz / tar.zst / zip archive of such a folder (read through libarchive,
 * entry by entry, never unpacked), or a bare SafeTensors file on stdin. A source_fd hashes every
 * byte it hands out, so the source digest costs no extra pass over a stream.
 */
#ifndef THIN_PACK_SOURCE_H
#define THIN_PACK_SOURCE_H

#include <stddef.h>
#include <stdint.h>

#include <jansson.h>
#include <openssl/evp.h>

#define SOURCE_MAX_SIDE ((size_t)256 << 20) /* bytes of one side file (tokenizer.json, ...) */

/* Side files a model folder may hold, in source-digest order. */
extern const char *const source_side_names[];
/* Index in source_side_names of a file's base name, or -1. */
int source_side_index(const char *base);

/* A mapped file. */
typedef struct source_map {
    char *path;
    const uint8_t *data;
    uint64_t size;
} source_map;

/* Maps a regular file read-only (a zero-length file maps to data NULL). 0, or -1 with err. */
int source_map_open(source_map *m, const char *path, char *err, size_t errlen);
void source_map_close(source_map *m);

/* Reads a whole small file (at most SOURCE_MAX_SIDE bytes). *data is malloc'd. 0, 1 when the
 * file does not exist, or -1 with err. */
int source_read_file(const char *path, uint8_t **data, size_t *size, char *err, size_t errlen);

/* What an input path is. */
typedef enum source_kind {
    SOURCE_SAFETENSORS = 1, /* one file */
    SOURCE_INDEX = 2,       /* model.safetensors.index.json */
    SOURCE_FOLDER = 3,      /* a Hugging Face model folder */
    SOURCE_ARCHIVE = 4,     /* anything else: tried as an archive */
    SOURCE_GGUF = 5,        /* a GGUF file: not packable as a model */
} source_kind;

/* Looks at a path: folder, index by name, or the first bytes of a file. 0, or -1 with err. */
int source_classify(const char *path, source_kind *kind, char *err, size_t errlen);

/* The shard files of a folder or index (sorted, each once) and the folder side files live in.
 * *shards is an array of malloc'd paths. With an index, *weight_map receives its "weight_map"
 * object (tensor name -> shard file name), else NULL. 0, or -1 with err. */
int source_list_shards(const char *path, source_kind kind, char ***shards, size_t *n,
                       char **folder, json_t **weight_map, char *err, size_t errlen);
/* Parses an index's bytes: checks that weight_map is an object of file names, returns it. */
int source_parse_index(const char *label, const uint8_t *data, size_t size, json_t **weight_map,
                       char *err, size_t errlen);
void source_free_list(char **list, size_t n);

/* A descriptor being read, with an optional prefix already taken from it (sniffing stdin);
 * every byte returned is added to `sha` (may be NULL). */
typedef struct source_fd {
    int fd;
    const char *label;
    uint8_t prefix[16];
    size_t prefix_len, prefix_pos;
    EVP_MD_CTX *sha;
    uint64_t bytes;     /* bytes handed out so far */
    uint8_t *buf;       /* block buffer for libarchive */
    size_t buf_size;
} source_fd;

/* Reads up to n bytes (fewer only at end of input); *got = 0 at the end. 0, or -1 (errno). */
int source_fd_read(source_fd *s, void *buf, size_t n, size_t *got);

/* 1 when the bytes look like the start of a SafeTensors file (sane length, then '{'). */
int source_looks_safetensors(const uint8_t *p, size_t n);

/* Base name of a path inside an archive or on disk (after the last '/'). */
const char *source_base(const char *path);

#endif /* THIN_PACK_SOURCE_H */
