/*
 * safetensors.h — a strict SafeTensors header parser.
 *
 * Layout: u64 little-endian header length N, then N bytes of UTF-8 JSON (an object; padding with
 * spaces allowed), then the data section. Each member but "__metadata__" describes one tensor:
 * {"dtype": "F32", "shape": [d0, ...], "data_offsets": [begin, end]} with offsets relative to the
 * start of the data section. "__metadata__" is an object of string values.
 *
 * The checks follow the format's reference implementation: N <= 100,000,000; the header is valid
 * UTF-8 and a JSON object without duplicate keys; every dtype is known; product(shape) × dtype
 * size equals end - begin (overflow-checked); begin <= end; sorted by begin, the tensors tile the
 * data section exactly from 0 to its end (no gap, no overlap, no trailing bytes).
 */
#ifndef THIN_PACK_SAFETENSORS_H
#define THIN_PACK_SAFETENSORS_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "thin.h"

#define ST_MAX_HEADER 100000000ull /* bytes of header JSON, as the reference implementation */
#define ST_SIZE_UNKNOWN UINT64_MAX   /* data-section size not known yet (a stream) */

typedef struct st_tensor {
    char *name;
    thin_dtype dtype;
    uint32_t rank;
    uint64_t shape[THIN_MAX_RANK];
    uint64_t begin, end; /* byte range inside the data section */
} st_tensor;

typedef struct st_header {
    st_tensor *tensors;  /* n_tensors, sorted by begin */
    size_t n_tensors;
    json_t *metadata;    /* "__metadata__" object (string values) or NULL */
    uint64_t header_len; /* N */
    uint64_t data_start; /* 8 + N: offset of the data section in the file */
    uint64_t data_size;  /* end of the last tensor = required size of the data section */
} st_header;

/* dtype of a SafeTensors dtype name (exact, case-sensitive); THIN_DTYPE_INVALID if unknown. */
thin_dtype st_dtype_from_name(const char *name);
/* Bytes per element of a dtype (0 when invalid). */
size_t st_dtype_size(thin_dtype t);

/* Reads the 8-byte length prefix and checks it against the limit and, unless file_size is
 * ST_SIZE_UNKNOWN, against the file size. Returns 0, or -1 with a message in err. */
int st_parse_prefix(const uint8_t prefix[8], uint64_t file_size, uint64_t *header_len,
                    char *err, size_t errlen);

/* Parses and checks header JSON bytes (len = N): UTF-8, JSON, schema, dtypes, shapes, tiling.
 * Sets out->data_size to the end of the last tensor. `label` names the file in messages.
 * Returns 0, or -1 with a message naming the file and tensor in err (out left empty). */
int st_parse_header(const char *json, size_t len, const char *label, st_header *out,
                    char *err, size_t errlen);

/* Checks that the data section (data_size bytes) holds the tensors exactly. */
int st_check_data_size(const st_header *h, uint64_t data_size, const char *label, char *err,
                       size_t errlen);

/* Parses a whole SafeTensors image held in memory (a mapped file): prefix, header, data size. */
int st_parse_memory(const void *data, uint64_t size, const char *label, st_header *out,
                    char *err, size_t errlen);

/* Frees what a parse allocated; the struct is left empty. */
void st_header_free(st_header *h);

/* Index of the tensor named `name`, or -1. */
long st_header_find(const st_header *h, const char *name);

#endif /* THIN_PACK_SAFETENSORS_H */
