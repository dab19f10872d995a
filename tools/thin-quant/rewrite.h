/*
 * rewrite.h — thin-quant's pipeline: read a .thin (mapped file or one-pass stream), transform the
 * chosen tensors one at a time, copy everything else, and write a new .thin with a "quant"
 * manifest section.
 *
 * Output order: the tensors in input order (each FP8 weight followed by its "<name>.scale" tensor),
 * then the blobs in input order. Unchosen tensors keep their dtype and bytes. Manifest members
 * other than format/tensors/blobs are carried over; "quant" is replaced (the old one is kept under
 * quant.previous) and "runtime" gets kv_cache_dtype when the profile says so.
 */
#ifndef THIN_QUANT_REWRITE_H
#define THIN_QUANT_REWRITE_H

#include <stddef.h>
#include <stdint.h>

#include "report.h"
#include "select.h"
#include "thin.h"

typedef struct tq_options {
    const char *input;          /* path, or "-" for stdin */
    const char *output;         /* path, or "-" for stdout */
    const tq_selection *sel;
    const char *roles_arg;      /* --roles as given, or NULL */
    const char *layers_arg;     /* --layers as given, or NULL */
    const char *const *select_args; /* --select arguments as given [n_select] */
    size_t n_select;
    uint32_t n_layers;          /* --n-layers, 0 = from the model */
    unsigned threads;           /* >= 1 */
    tq_scale_method scale;      /* FP8 row scale rule (--scale) */
    thin_writer_options wopt;
} tq_options;

/* Source bytes handled per step (rows are never split; a row larger than this is one step). */
#define TQ_BLOCK_BYTES ((size_t)16 << 20)

/* Runs the rewrite and fills rep. Prints messages on stderr ("thin-quant: FILE: ..."); on any
 * error no output file is left behind. Returns the exit code: 0, or 1 for bad data or a failed
 * operation. */
int tq_rewrite(const tq_options *o, tq_report *rep);

#endif /* THIN_QUANT_REWRITE_H */
