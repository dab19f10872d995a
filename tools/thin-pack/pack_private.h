/* pack_private.h — state shared by the files of the packing job (pack.c, pack_disk.c,
 * pack_stream.c, pack_model.c); not part of any public interface. */
#ifndef THIN_PACK_PACK_PRIVATE_H
#define THIN_PACK_PACK_PRIVATE_H

#include <jansson.h>
#include <openssl/evp.h>

#include "pack.h"
#include "safetensors.h"
#include "source.h"

#define PACK_N_SIDE 6 /* entries of source_side_names */

typedef struct pack_blob {
    char *name;    /* blob name in the .thin file */
    uint8_t *data; /* malloc'd */
    size_t size;
} pack_blob;

/* A tensor that will be in the file (after any dtype conversion). */
typedef struct pack_tensor {
    char *name;
    char *shard;              /* base name of the source file */
    thin_role role;
    int32_t layer;
    int32_t expert;           /* a mixture's expert, or -1 */
    thin_dtype dtype;
    uint32_t rank;
    uint64_t shape[THIN_MAX_RANK];
} pack_tensor;

typedef struct pack {
    const pack_options *o;
    thin_writer *w;
    EVP_MD_CTX *sha;          /* source digest */
    pack_blob side[PACK_N_SIDE];
    pack_blob tok[2];         /* --tokenizer: tokenizer.json (+ tokenizer_config.json) or GGUF */
    int tok_gguf;
    json_t *weight_map;       /* index weight_map, or NULL */
    json_t *st_meta;          /* shard base name -> __metadata__ */
    json_t *source_files;     /* names of the files read, in digest order */
    json_t *seen;             /* tensor name -> index in t */
    pack_tensor *t;
    size_t n_t, cap_t;
    size_t n_unknown, n_bias, n_vision; /* n_vision: a multimodal checkpoint's vision tower and
                                           projector tensors (role other, not in the tape) */
    char unknown_names[200], bias_names[200];
    uint64_t done, total;     /* progress, raw source bytes */
    uint8_t *cvt;             /* conversion buffer, PACK_BLOCK bytes */
    uint8_t *buf;             /* stream read buffer, PACK_BLOCK bytes */
    int hash_sides;           /* side files go into the source digest (inputs on disk) */
    const char *family;       /* config.json's family (arch_family) once it has been read, else
                                 NULL: the tensors planned before it are named as Llama names them */
} pack;

#define PACK_BLOCK ((size_t)4 << 20)

/* Reads exactly n bytes into buf (short only at end of input: *got < n). 0, or -1 on error. */
typedef int (*pack_read_fn)(void *ctx, void *buf, size_t n, size_t *got);

/* pack.c */
int pack_fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Records a shard's tensors (role, layer, output dtype); refuses a name seen before. */
int pack_plan_shard(pack *p, const st_header *h, const char *label);
/* Writes one tensor whose bytes are in memory (zero copy unless converted). */
int pack_write_mem(pack *p, const st_tensor *t, const uint8_t *data);
/* Writes one tensor whose bytes come from a reader. */
int pack_write_read(pack *p, const st_tensor *t, pack_read_fn rd, void *ctx, const char *label);
/* Keeps a shard's __metadata__ under its base name. */
int pack_keep_metadata(pack *p, const char *base, const st_header *h);
/* Takes a side file (config.json, tokenizer.json, ...) by base name; data is adopted. */
int pack_take_side(pack *p, const char *base, uint8_t *data, size_t size);

/* pack_disk.c: validate every shard, then write them from their mappings. */
int pack_disk(pack *p, source_kind kind);

/* pack_stream.c: an archive (path or stdin) or a bare SafeTensors stream on stdin. */
int pack_stream(pack *p, source_kind kind);
/* Reads one shard from a reader: header and checks, then its tensors in offset order; `size` is
 * the shard's length, or ST_SIZE_UNKNOWN (then trailing bytes are found at the end). */
int pack_stream_shard(pack *p, pack_read_fn rd, void *ctx, uint64_t size, const char *label);
/* Opens the writer on the output (once; later calls do nothing). */
int pack_open_writer(pack *p);

/* pack_model.c: the tied lm_head entry, blobs, model/tokenizer/tape sections, finish. */
int pack_finish(pack *p);
/* Checks the index weight map against the tensors written. */
int pack_check_weight_map(pack *p);

#endif /* THIN_PACK_PACK_PRIVATE_H */
