/*
 * pack.h — the packing job of thin-pack: SafeTensors shards in, one .thin file out.
 *
 * Files on disk are validated completely (every shard's header, tiling and size, the index's
 * weight map, names unique across shards) before the writer starts; then their mapped bytes go
 * to the writer without copying. Archives and stdin are read in one pass: each shard's header is
 * parsed, then its tensors are streamed in offset order; an error found late abandons the writer,
 * which removes its temporary file. Side files (config.json, tokenizer files, ...) become blobs;
 * the model, tokenizer and tape sections are set last.
 */
#ifndef THIN_PACK_PACK_H
#define THIN_PACK_PACK_H

#include "thin.h"

typedef struct pack_options {
    const char *input;      /* file, folder, index, archive, or "-" (stdin) */
    const char *output;     /* path, or "-" for stdout */
    const char *tokenizer;  /* --tokenizer: tokenizer.json or a vocab-only GGUF file, or NULL */
    thin_writer_options writer;
    int to_bf16;            /* --dtype bf16: F32/F16 tensors become BF16 */
    const char *compress;   /* the --compress text, recorded in provenance */
} pack_options;

/* Runs the job; messages go to stderr through the cli_* helpers. Returns an exit status: 0, or 1
 * for bad data or a failed operation (nothing is left at the output path). */
int pack_run(const pack_options *o);

#endif /* THIN_PACK_PACK_H */
