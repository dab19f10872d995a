/*
 * thin_private.h — byte layout helpers shared by the reader, the stream reader and the writer:
 * little-endian access, CRC-32C, SHA-256, the file header, record headers, the trailer and the
 * whole-file digest (SPEC.md §1–§5).
 */
#ifndef THIN_PRIVATE_H
#define THIN_PRIVATE_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include "thin.h"

#define THIN_HEADER_SIZE 64
#define THIN_RECORD_SIZE 64
#define THIN_TRAILER_SIZE 64
#define THIN_MAX_DESCRIPTOR ((size_t)64 << 10) /* bytes of an ENTRY record's JSON descriptor */
#define THIN_ERR_LEN 1024

extern const uint8_t thin_file_magic[8];

enum { THIN_REC_ENTRY = 1, THIN_REC_CHUNK = 2, THIN_REC_MANIFEST = 3 };
enum { THIN_KIND_TENSOR = 0, THIN_KIND_BLOB = 1 };

/* One decoded 64-byte record header (SPEC.md §2). */
typedef struct thin_record {
    uint16_t type;
    uint16_t codec;
    uint32_t entry;   /* index in the manifest's "tensors" or "blobs" */
    uint32_t chunk;   /* CHUNK: chunk index; ENTRY: number of chunks of the entry */
    uint64_t offset;  /* absolute payload offset */
    uint64_t stored;  /* payload bytes in the file */
    uint64_t raw;     /* payload bytes after decoding */
    uint8_t sha[16];  /* first half of the SHA-256 of the raw payload */
    uint8_t kind;     /* THIN_KIND_TENSOR or THIN_KIND_BLOB (0 for MANIFEST) */
} thin_record;

typedef struct thin_trailer {
    uint64_t manifest_offset; /* offset of the MANIFEST record header */
    uint64_t manifest_size;   /* bytes of the manifest JSON */
    uint8_t digest[32];
} thin_trailer;

static inline uint16_t thin_get16(const uint8_t *p) { return (uint16_t)(p[0] | p[1] << 8); }
static inline uint32_t thin_get32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}
static inline uint64_t thin_get64(const uint8_t *p)
{
    return (uint64_t)thin_get32(p) | (uint64_t)thin_get32(p + 4) << 32;
}
static inline void thin_put16(uint8_t *p, uint16_t v) { p[0] = (uint8_t)v; p[1] = (uint8_t)(v >> 8); }
static inline void thin_put32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i));
}
static inline void thin_put64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i));
}
/* Rounds x up to a multiple of a (a power of two); x is bounded by a file size (< 2^62). */
static inline uint64_t thin_align_up(uint64_t x, uint64_t a) { return (x + a - 1) & ~(a - 1); }

/* CRC-32C (Castagnoli, reflected, init and final xor 0xFFFFFFFF). */
uint32_t thin_crc32c(const void *data, size_t n);

/* SHA-256 (libcrypto EVP). The context functions return THIN_E_NOMEM/THIN_E_INTERNAL on failure. */
typedef struct thin_sha256_ctx {
    void *md; /* EVP_MD_CTX */
} thin_sha256_ctx;
thin_status thin_sha256(const void *data, size_t n, uint8_t out[32]);
thin_status thin_sha256_init(thin_sha256_ctx *c);
thin_status thin_sha256_update(thin_sha256_ctx *c, const void *data, size_t n);
thin_status thin_sha256_final(thin_sha256_ctx *c, uint8_t out[32]);
void thin_sha256_free(thin_sha256_ctx *c);

/* Whole-file digest (SPEC.md §5) from the manifest bytes and every chunk's SHA-256 in file order. */
thin_status thin_digest_compute(const char *manifest, size_t manifest_len,
                                const uint8_t (*chunk_sha)[32], size_t n_chunks, uint8_t out[32]);

/* File header (SPEC.md §1). decode returns BAD_MAGIC, VERSION or BAD_HEADER with *why set. */
void thin_header_encode(uint8_t out[64]);
thin_status thin_header_decode(const uint8_t in[64], uint16_t *major, uint16_t *minor,
                               const char **why);
/* Record header (SPEC.md §2). decode checks magic, CRC, type, reserved zeros (THIN_E_BAD_RECORD). */
void thin_record_encode(const thin_record *r, uint8_t out[64]);
thin_status thin_record_decode(const uint8_t in[64], thin_record *r, const char **why);
/* Trailer (SPEC.md §4). decode checks magic and CRC (THIN_E_BAD_TRAILER). */
void thin_trailer_encode(const thin_trailer *t, uint8_t out[64]);
thin_status thin_trailer_decode(const uint8_t in[64], thin_trailer *t, const char **why);

/* Codec names as the manifest spells them; thin_codec_from_name returns -1 when unknown. */
const char *thin_codec_name(thin_codec c);
int thin_codec_from_name(const char *s);
/* Parses 64 lower- or upper-case hex digits; returns 0, or -1 when malformed. */
int thin_hex32_parse(const char *s, uint8_t out[32]);

/* Formats "label: message" into err (THIN_ERR_LEN bytes). */
void thin_verrf(char *err, const char *label, const char *fmt, va_list ap);
/* Formats "label: message" into err (THIN_ERR_LEN bytes) and returns s. */
thin_status thin_errf(char *err, const char *label, thin_status s, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* Checks that n bytes are zero. */
int thin_all_zero(const uint8_t *p, size_t n);
/* Raw size of chunk j of an entry of nbytes split by chunk_size. */
static inline uint64_t thin_chunk_raw(uint64_t nbytes, uint64_t chunk_size, uint64_t j)
{
    uint64_t left = nbytes - j * chunk_size;
    return left < chunk_size ? left : chunk_size;
}

#endif /* THIN_PRIVATE_H */
