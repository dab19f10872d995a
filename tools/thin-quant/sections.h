/*
 * sections.h — the manifest members thin-quant carries over, and the "quant" and "runtime"
 * sections it writes.
 */
#ifndef THIN_QUANT_SECTIONS_H
#define THIN_QUANT_SECTIONS_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "report.h"
#include "rewrite.h"
#include "thin.h"

/* Parses the input manifest; NULL when it is not a JSON object. */
json_t *tq_manifest_parse(const char *json, size_t len);
/* model.hparams.n_layers of the manifest when it is a positive integer, else 0. */
uint32_t tq_manifest_layers(const json_t *root);
/* The "quant" section of this run (new reference; NULL when out of memory). `previous` is the
 * input's quant section or NULL. */
json_t *tq_quant_section(const tq_options *o, const tq_report *rep, const json_t *previous);
/* Sets every top-level member of the input manifest except format, tensors, blobs, quant and
 * runtime unchanged, then runtime (with kv_cache_dtype for the quality profile) and quant.
 * Returns 0, or -1 with a message in err. */
int tq_sections_write(thin_writer *w, const json_t *root, const tq_options *o,
                      const tq_report *rep, char *err, size_t errlen);

#endif /* THIN_QUANT_SECTIONS_H */
