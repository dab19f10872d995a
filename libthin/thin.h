/*
 * thin.h — public interface of libthin, the .thin tensor container.
 *
 * Byte layout (SPEC.md is the authority; this is a summary, little-endian throughout):
 *
 *   offset 0        file header, 64 bytes: magic 89 54 48 4E 0D 0A 1A 0A ("\x89THN\r\n\x1a\n"),
 *                   u16 major, u16 minor, u32 flags, u32 header_size (64), u32 record_align (64),
 *                   u32 data_align (4096), reserved zeros, u32 CRC-32C of bytes 0..59.
 *   then records    each starts at a 64-byte boundary with a 64-byte record header:
 *                   u32 magic "TREC", u16 type, u16 codec, u32 entry index, u32 chunk index,
 *                   u64 payload offset (absolute), u64 stored size, u64 raw size, u8 sha256[0..15]
 *                   (first half of the SHA-256 of the stored payload), u8 kind, reserved, u32 CRC-32C.
 *                   type ENTRY: JSON descriptor of the tensor or blob, then its chunk payloads, each
 *                   at a 4096-byte boundary (uncompressed ones back to back), then one CHUNK record
 *                   per chunk (they follow the payloads: a writer that never seeks knows a chunk's
 *                   hash only after it).
 *                   type MANIFEST: the JSON manifest.
 *   end             trailer, 64 bytes: magic "THNTRAIL", u64 manifest record offset, u64 manifest
 *                   size, u8 digest[32] (whole-file content digest), u32 reserved, u32 CRC-32C.
 *
 * A writer never seeks, so it streams to a pipe; a reader of a file maps it and jumps anywhere; a
 * reader of a pipe consumes it in one pass with memory bounded by the chunk size.
 *
 * Conventions: every call returns a thin_status (THIN_OK = 0, errors negative and pinned forever)
 * and gives results through out-parameters. A human-readable message for the last error is kept by
 * the handle (thin_file_error(), ...). The library never prints, exits or aborts.
 */
#ifndef THIN_H
#define THIN_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#ifdef __cplusplus
extern "C" {
#endif

#define THIN_VERSION_MAJOR 1 /* format major version this library reads and writes */
#define THIN_VERSION_MINOR 0
#define THIN_LIB_VERSION "1.0.0"

/* Limits (SPEC.md §Limits). Readers refuse files beyond them with THIN_E_LIMIT. */
#define THIN_MAX_RANK 8
#define THIN_MAX_NAME 512                    /* bytes of a tensor or blob name, NUL excluded */
#define THIN_MAX_ENTRIES (1u << 20)          /* tensors + blobs */
#define THIN_MAX_MANIFEST ((size_t)256 << 20) /* bytes of the JSON manifest */
#define THIN_MAX_CHUNK ((uint64_t)1 << 31)   /* raw bytes of one chunk */
#define THIN_DEFAULT_CHUNK ((size_t)4 << 20)
#define THIN_DATA_ALIGN 4096
#define THIN_RECORD_ALIGN 64

/* ---- status codes (pinned: values never change, new ones are appended) ---- */
typedef enum thin_status {
    THIN_OK = 0,
    THIN_E_IO = -1,           /* an operating-system read/write/open/mmap call failed */
    THIN_E_NOMEM = -2,        /* an allocation failed */
    THIN_E_INVALID_ARG = -3,  /* a caller passed a bad argument */
    THIN_E_BAD_MAGIC = -4,    /* not a .thin file, or mangled by a text-mode transfer */
    THIN_E_VERSION = -5,      /* unknown major format version */
    THIN_E_TRUNCATED = -6,    /* the file ends early */
    THIN_E_BAD_HEADER = -7,   /* a file-header field is invalid */
    THIN_E_BAD_RECORD = -8,   /* a record header is invalid (magic, type, CRC, fields) */
    THIN_E_BAD_TRAILER = -9,  /* the trailer is invalid */
    THIN_E_BAD_MANIFEST = -10,/* the manifest is not valid JSON or breaks the schema */
    THIN_E_LIMIT = -11,       /* a count or size is beyond the limits */
    THIN_E_RANGE = -12,       /* an offset or size lies outside the file or overflows */
    THIN_E_ALIGN = -13,       /* an offset is not aligned as required */
    THIN_E_CHECKSUM = -14,    /* a chunk's SHA-256 does not match */
    THIN_E_DIGEST = -15,      /* the whole-file digest does not match */
    THIN_E_CODEC = -16,       /* unknown codec, or decompression failed */
    THIN_E_NOT_FOUND = -17,   /* no tensor/blob/section of that name or role */
    THIN_E_DTYPE = -18,       /* unknown dtype, or a conversion not supported */
    THIN_E_SHAPE = -19,       /* shape × dtype size does not match the byte size */
    THIN_E_STATE = -20,       /* call made in the wrong state (e.g. write before begin) */
    THIN_E_UNSUPPORTED = -21, /* valid but not supported by this build */
    THIN_E_INTERNAL = -22,    /* a bug: an invariant did not hold */
    THIN_E_PADDING = -23,     /* padding or reserved bytes are not zero */
} thin_status;

/* Pinned name of a status ("THIN_E_CHECKSUM"); never NULL. */
const char *thin_status_name(thin_status s);

/* ---- dtypes (pinned) ---- */
typedef enum thin_dtype {
    THIN_DTYPE_INVALID = 0,
    THIN_DTYPE_F64 = 1,
    THIN_DTYPE_F32 = 2,
    THIN_DTYPE_F16 = 3,
    THIN_DTYPE_BF16 = 4,
    THIN_DTYPE_F8_E4M3 = 5, /* E4M3FN: no infinities, NaN = S.1111.111, max ±448 */
    THIN_DTYPE_F8_E5M2 = 6, /* IEEE-like: infinities, max finite ±57344 */
    THIN_DTYPE_I64 = 7,
    THIN_DTYPE_I32 = 8,
    THIN_DTYPE_I16 = 9,
    THIN_DTYPE_I8 = 10,
    THIN_DTYPE_U8 = 11,
    THIN_DTYPE_BOOL = 12,
    THIN_DTYPE_U16 = 13,
    THIN_DTYPE_U32 = 14,
    THIN_DTYPE_U64 = 15,
    THIN_DTYPE_COUNT_
} thin_dtype;

/* Bytes per element (0 for INVALID or unknown). */
size_t thin_dtype_size(thin_dtype t);
/* SafeTensors-style name ("BF16", "F8_E4M3", ...); "INVALID" for unknown values. */
const char *thin_dtype_name(thin_dtype t);
/* Parses a name as thin_dtype_name() writes it (case-insensitive); THIN_DTYPE_INVALID if unknown. */
thin_dtype thin_dtype_from_name(const char *name);

/* ---- roles (pinned) ---- */
typedef enum thin_role {
    THIN_ROLE_OTHER = 0,
    THIN_ROLE_EMBEDDING = 1,
    THIN_ROLE_Q = 2,
    THIN_ROLE_K = 3,
    THIN_ROLE_V = 4,
    THIN_ROLE_O = 5,
    THIN_ROLE_QKV = 6,
    THIN_ROLE_GATE = 7,
    THIN_ROLE_UP = 8,
    THIN_ROLE_GATE_UP = 9,
    THIN_ROLE_DOWN = 10,
    THIN_ROLE_ATTN_NORM = 11,
    THIN_ROLE_FFN_NORM = 12,
    THIN_ROLE_Q_NORM = 13,
    THIN_ROLE_K_NORM = 14,
    THIN_ROLE_FINAL_NORM = 15,
    THIN_ROLE_LM_HEAD = 16,
    THIN_ROLE_SCALE = 17,
    THIN_ROLE_Q_BIAS = 18,
    THIN_ROLE_K_BIAS = 19,
    THIN_ROLE_V_BIAS = 20,
    THIN_ROLE_ATTN_POST_NORM = 21, /* a norm of the attention's output before its residual add (Gemma) */
    THIN_ROLE_FFN_POST_NORM = 22,  /* a norm of the MLP's output before its residual add (Gemma) */
    THIN_ROLE_ROUTER = 23,         /* a mixture of experts' router: one row of scores per expert */
    THIN_ROLE_COUNT_
} thin_role;

/* Lower-case name ("gate_up", "lm_head", ...); "other" for unknown values. */
const char *thin_role_name(thin_role r);
/* Parses a role name; returns THIN_OK and sets *out, or THIN_E_NOT_FOUND. */
thin_status thin_role_from_name(const char *name, thin_role *out);

/* ---- codecs (pinned) ---- */
typedef enum thin_codec {
    THIN_CODEC_NONE = 0,
    THIN_CODEC_ZSTD = 1,
} thin_codec;

/* ---- dtype conversions ----
 * Narrowing conversions round to nearest, ties to even. NaN stays NaN (quiet, sign kept).
 * F16/BF16/E5M2 overflow to ±Inf as IEEE does, except the *_sat variants which saturate to the
 * largest finite value (Inf in gives ±max, NaN stays NaN). E4M3 has no Inf: it always saturates
 * to ±448, and Inf in gives ±448. */
/* The bits of an F32 and back (no conversion). */
static inline uint32_t thin_f32_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}
static inline float thin_f32_from_bits(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}
float thin_bf16_to_f32(uint16_t h);
uint16_t thin_f32_to_bf16(float f);
float thin_f16_to_f32(uint16_t h);
uint16_t thin_f32_to_f16(float f);
float thin_e4m3_to_f32(uint8_t b);
uint8_t thin_f32_to_e4m3(float f);
float thin_e5m2_to_f32(uint8_t b);
uint8_t thin_f32_to_e5m2(float f);
uint8_t thin_f32_to_e5m2_sat(float f);

/* Converts n elements between any two of F64, F32, F16, BF16, F8_E4M3, F8_E5M2 (through float,
 * F64 through double). THIN_E_DTYPE for other pairs. dst and src must not overlap unless equal
 * and the element sizes match. */
thin_status thin_convert(void *dst, thin_dtype dst_type, const void *src, thin_dtype src_type,
                         size_t n);

/* ---- descriptors ---- */
typedef struct thin_tensor_info {
    const char *name;     /* owned by the handle, valid until it is closed */
    thin_role role;
    int32_t layer;        /* -1 when the tensor belongs to no layer */
    thin_dtype dtype;
    uint32_t rank;
    uint64_t shape[THIN_MAX_RANK];
    uint64_t nbytes;      /* raw bytes = product(shape) * dtype size */
    uint64_t stored_bytes;/* bytes of all chunk payloads on disk */
    uint32_t n_chunks;
    thin_codec codec;     /* codec of the first chunk (chunks may differ) */
    const char *scale;    /* name of the linked scale tensor (quantized weights), or NULL */
    const char *tied_to;  /* this tensor shares the data of that one (e.g. lm_head → embedding),
                             or NULL; a tied entry has no chunks of its own */
    uint32_t index;       /* position in the manifest */
    int32_t expert;       /* the expert's index in its layer's mixture (a gate, up or down weight
                             of one expert), or -1 */
} thin_tensor_info;

/* The rows of a tensor as its per-row scales count them (SPEC §7.1): a vector's length, else the
 * product of every dim but the last (a stack of matrices [E, R, C] has E·R rows); 0 for rank 0.
 * No overflow for a tensor the reader accepted (its byte size fits 64 bits). */
static inline uint64_t thin_tensor_rows(const thin_tensor_info *t)
{
    uint64_t n = t->rank ? t->shape[0] : 0;
    for (uint32_t i = 1; i + 1 < t->rank; i++)
        n *= t->shape[i];
    return n;
}

typedef struct thin_chunk_info {
    uint64_t offset;      /* absolute offset of the payload in the file */
    uint64_t stored_size;
    uint64_t raw_size;
    uint64_t raw_offset;  /* offset of this chunk's bytes inside the tensor */
    thin_codec codec;
    uint8_t sha256[32];   /* of the raw bytes */
} thin_chunk_info;

/* ---- random-access reader ---- */
typedef struct thin_file thin_file;

enum {
    THIN_OPEN_VERIFY = 1u << 0, /* verify every chunk checksum and the digest while opening */
    THIN_OPEN_NO_MMAP = 1u << 1,/* read the file into memory instead of mapping it */
};

/* Allocates a reader handle (NULL only when out of memory). */
thin_file *thin_file_new(void);
/* Opens and validates a .thin file by path: header, every record header, trailer, manifest schema,
 * every offset/size/alignment against the file and against overflow. Data is mapped, not read. */
thin_status thin_file_open(thin_file *f, const char *path, uint32_t flags);
/* Opens from a file descriptor: a regular file is mapped; a pipe is read in one pass into memory
 * (validated as it arrives). The descriptor is not closed. `label` names it in messages. */
thin_status thin_file_open_fd(thin_file *f, int fd, const char *label, uint32_t flags);
/* Opens a .thin image held in memory (not copied; must outlive the handle). */
thin_status thin_file_open_memory(thin_file *f, const void *data, size_t size, const char *label,
                                  uint32_t flags);
/* Unmaps and frees everything. NULL is allowed. */
void thin_file_free(thin_file *f);
/* Message for the last error on this handle, naming the file; "" when none. */
const char *thin_file_error(const thin_file *f);

/* Format version of the opened file. */
void thin_file_version(const thin_file *f, uint16_t *major, uint16_t *minor);
/* Whole-file digest as stored in the trailer (validated by thin_file_verify). */
const uint8_t *thin_file_digest(const thin_file *f);
/* Total size of the file in bytes. */
uint64_t thin_file_size(const thin_file *f);

/* The manifest's raw JSON bytes (not NUL-terminated). */
thin_status thin_file_manifest(const thin_file *f, const char **json, size_t *len);
/* Compact JSON text (NUL-terminated, owned by the handle) of the manifest's top-level member
 * `key` ("model", "tape", "tokenizer", "quant", ...). THIN_E_NOT_FOUND when absent. */
thin_status thin_file_section(thin_file *f, const char *key, const char **json);

/* Number of tensors (blobs not counted). */
uint32_t thin_file_tensor_count(const thin_file *f);
/* Info of tensor i (0 <= i < count). */
thin_status thin_file_tensor(const thin_file *f, uint32_t i, thin_tensor_info *out);
/* Lookup by exact name. */
thin_status thin_file_find(const thin_file *f, const char *name, thin_tensor_info *out);
/* Lookup by role and layer (layer -1 for global tensors); the first match in manifest order. */
thin_status thin_file_find_role(const thin_file *f, thin_role role, int32_t layer,
                                thin_tensor_info *out);
/* Chunk j of tensor i. */
thin_status thin_file_chunk(const thin_file *f, uint32_t tensor, uint32_t j, thin_chunk_info *out);

/* Zero-copy pointer to a tensor's bytes: valid when every chunk is uncompressed and the chunks are
 * contiguous (the writer lays them so), else THIN_E_UNSUPPORTED. Follows tied_to links. The
 * pointer is 4096-aligned in the file and valid until thin_file_free. */
thin_status thin_file_tensor_data(const thin_file *f, uint32_t tensor, const void **data);
/* Copies (decompressing as needed) the tensor's raw bytes into buf, which must hold nbytes.
 * With `verify`, each chunk's SHA-256 is checked. */
thin_status thin_file_tensor_read(thin_file *f, uint32_t tensor, void *buf, size_t cap, int verify);

/* Blobs: embedded files (tokenizer.json, tokenizer_config.json, generation_config.json, ...). */
uint32_t thin_file_blob_count(const thin_file *f);
/* Name of blob i. */
const char *thin_file_blob_name(const thin_file *f, uint32_t i);
/* Bytes of a blob by name; decompressed once into handle-owned memory if needed. */
thin_status thin_file_blob(thin_file *f, const char *name, const void **data, size_t *size);

/* Verification progress callback: called after each chunk; return non-zero to cancel. */
typedef int (*thin_progress_fn)(void *user, uint64_t done_bytes, uint64_t total_bytes);

/* Verifies every chunk's SHA-256 (using `threads` threads; 0 = number of cores), every padding
 * region and the whole-file digest. On a mismatch returns THIN_E_CHECKSUM (or THIN_E_DIGEST,
 * THIN_E_PADDING) and the message names the tensor and chunk. */
thin_status thin_file_verify(thin_file *f, unsigned threads, thin_progress_fn progress, void *user);
/* Verifies one tensor's chunks. */
thin_status thin_file_verify_tensor(thin_file *f, uint32_t tensor);

/* ---- one-pass stream reader (pipes; memory bounded by the chunk size) ---- */
typedef struct thin_stream thin_stream;

typedef enum thin_item_kind {
    THIN_ITEM_TENSOR = 1, /* a tensor's descriptor; its bytes follow through thin_stream_read */
    THIN_ITEM_BLOB = 2,   /* a blob's descriptor; its bytes follow through thin_stream_read */
    THIN_ITEM_END = 3,    /* the manifest was read and validated; no more items */
} thin_item_kind;

thin_stream *thin_stream_new(void);
/* Starts reading from fd (not closed by the library); `label` names it in messages. */
thin_status thin_stream_open_fd(thin_stream *s, int fd, const char *label);
/* Advances to the next item, skipping unread bytes of the current one (still hashing them).
 * For TENSOR and BLOB items *info describes it (name, role, layer, dtype, shape, nbytes; for a blob
 * dtype is U8 and rank 1). Pointers in *info stay valid until the next call. */
thin_status thin_stream_next(thin_stream *s, thin_item_kind *kind, thin_tensor_info *info);
/* Reads up to cap raw (decompressed) bytes of the current item; *got = 0 at its end. Each chunk's
 * SHA-256 is checked when the chunk is complete. */
thin_status thin_stream_read(thin_stream *s, void *buf, size_t cap, size_t *got);
/* After THIN_ITEM_END: the manifest bytes, checked against everything seen, and the digest. */
thin_status thin_stream_manifest(thin_stream *s, const char **json, size_t *len);
/* After THIN_ITEM_END: compact JSON of a top-level manifest member, as thin_file_section. */
thin_status thin_stream_section(thin_stream *s, const char *key, const char **json);
const uint8_t *thin_stream_digest(const thin_stream *s);
/* After THIN_ITEM_END: the stream's length in bytes, the trailer included (what the file's size
 * would be); 0 before. */
uint64_t thin_stream_size(const thin_stream *s);
const char *thin_stream_error(const thin_stream *s);
void thin_stream_free(thin_stream *s);

/* ---- writer (streaming; never seeks) ---- */
typedef struct thin_writer thin_writer;

typedef struct thin_writer_options {
    size_t chunk_size;   /* raw bytes per chunk; 0 = THIN_DEFAULT_CHUNK; multiple of 4096 */
    thin_codec codec;    /* codec for tensor chunks */
    int zstd_level;      /* 0 = zstd default (3) */
    unsigned threads;    /* hashing/compression threads; 0 = number of cores */
} thin_writer_options;

typedef struct thin_tensor_desc {
    const char *name;
    thin_role role;
    int32_t layer;       /* -1 for none */
    thin_dtype dtype;
    uint32_t rank;
    uint64_t shape[THIN_MAX_RANK];
    const char *scale;   /* linked scale tensor, or NULL */
    const char *tied_to; /* the tensor whose data this one shares, or NULL (then no data follows) */
    int has_expert;      /* 1: the tensor belongs to expert `expert` (>= 0) of its layer's mixture */
    int32_t expert;
} thin_tensor_desc;

thin_writer *thin_writer_new(void);
/* Writes to `path` atomically: a temporary file beside it, fsync, rename on finish. On any failure,
 * or thin_writer_free() before finish, the temporary file is removed and `path` is untouched. */
thin_status thin_writer_open(thin_writer *w, const char *path, const thin_writer_options *opt);
/* Writes to a descriptor (file or pipe) without seeking; not closed by the library. */
thin_status thin_writer_open_fd(thin_writer *w, int fd, const char *label,
                                const thin_writer_options *opt);
/* Sets a top-level manifest member (JSON text: object, array or value) such as "model", "tape",
 * "tokenizer", "quant". Reserved keys ("format", "tensors", "blobs") are refused. May be called
 * any time before finish. */
thin_status thin_writer_set_section(thin_writer *w, const char *key, const char *json);
/* Starts a tensor; its nbytes raw bytes follow through thin_writer_write (any number of calls).
 * A tensor with tied_to set takes no bytes: call thin_writer_end_tensor directly. */
thin_status thin_writer_begin_tensor(thin_writer *w, const thin_tensor_desc *d);
/* Starts a blob of `size` bytes (an embedded file). */
thin_status thin_writer_begin_blob(thin_writer *w, const char *name, uint64_t size);
/* Appends bytes to the current tensor or blob. */
thin_status thin_writer_write(thin_writer *w, const void *data, size_t n);
/* Ends the current tensor or blob; THIN_E_SHAPE if fewer/more bytes than declared were written. */
thin_status thin_writer_end_tensor(thin_writer *w);
/* begin + write + end in one call. */
thin_status thin_writer_add_tensor(thin_writer *w, const thin_tensor_desc *d, const void *data);
/* begin_blob + write + end in one call. */
thin_status thin_writer_add_blob(thin_writer *w, const char *name, const void *data, size_t size);
/* Writes the manifest and trailer, flushes, fsyncs and (for a path) renames into place. Optionally
 * returns the whole-file digest. */
thin_status thin_writer_finish(thin_writer *w, uint8_t digest[32]);
/* Frees the writer; an unfinished path target is abandoned (temporary removed). NULL is allowed. */
void thin_writer_free(thin_writer *w);
const char *thin_writer_error(const thin_writer *w);

/* ---- helpers ---- */
/* Lower-case hex of a 32-byte digest into out (65 bytes). */
void thin_hex32(const uint8_t d[32], char out[65]);
/* Number of online CPU cores (at least 1). */
unsigned thin_cpu_count(void);

#ifdef __cplusplus
}
#endif
#endif /* THIN_H */
