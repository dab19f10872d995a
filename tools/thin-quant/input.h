/*
 * input.h — thin-quant's view of its input: a mapped .thin file (random access, tensors in
 * manifest order) or a one-pass stream from a pipe, read tensor by tensor in blocks.
 */
#ifndef THIN_QUANT_INPUT_H
#define THIN_QUANT_INPUT_H

#include <stddef.h>
#include <stdint.h>

#include "thin.h"

typedef struct tq_input {
    const char *label;          /* name in messages */
    thin_file *f;               /* file mode */
    thin_stream *s;             /* stream mode */
    int spool_fd;               /* temporary copy of stdin, or -1 */
    uint32_t next;              /* file mode: next tensor index */
    /* the current item's bytes */
    const unsigned char *data;  /* file mode: the whole tensor (mapped or read) */
    unsigned char *owned;       /* file mode: buffer when the tensor had to be read */
    uint64_t pos, len;
    unsigned char *scratch;     /* stream mode: block buffer */
    size_t scratch_cap;
    char err[512];
} tq_input;

/* Opens `path` ("-" = stdin). A stdin pipe is read as a stream, unless `spool` is set: then it is
 * first copied to an unlinked temporary file (in $TMPDIR or /tmp) and opened as a file. Returns 0,
 * or -1 with the message in in->err. */
int tq_input_open(tq_input *in, const char *path, int spool);
void tq_input_close(tq_input *in);
/* Whether the input is read in one pass (the manifest comes last). */
int tq_input_is_stream(const tq_input *in);

/* Item kinds returned by tq_input_next. */
typedef enum tq_item { TQ_ITEM_TENSOR = 1, TQ_ITEM_BLOB = 2, TQ_ITEM_END = 3 } tq_item;

/* Advances to the next item. File mode yields the tensors in manifest order, then END (blobs are
 * read by name with thin_file_blob); stream mode yields items as they come. The info's pointers
 * stay valid until the next call. Returns 0, or -1 with in->err set. */
int tq_input_next(tq_input *in, tq_item *kind, thin_tensor_info *info);
/* Points *p at the next n bytes of the current item (valid until the next call). Returns 0, or -1
 * with in->err set (data too short, checksum mismatch, I/O). */
int tq_input_view(tq_input *in, size_t n, const unsigned char **p);
/* The manifest JSON: at once in file mode, after END in stream mode. */
int tq_input_manifest(tq_input *in, const char **json, size_t *len);
/* The input's whole-file digest (after END in stream mode). */
const uint8_t *tq_input_digest(const tq_input *in);

#endif /* THIN_QUANT_INPUT_H */
