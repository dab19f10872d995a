/*
 * stats.h — thin-inspect --stats: what a tensor's values are (count, minimum, maximum, mean,
 * standard deviation, root mean square, NaN, infinities, zeros), FP8 weights dequantized with
 * their row scales (value × scale[row], SPEC §7.1).
 *
 * Two ways in. A mapped file whose tensors are stored uncompressed is read in place on several
 * threads (stats_file). Anything else (a pipe, compressed chunks) comes in one pass, tensor by
 * tensor (stats_begin / stats_feed / stats_end), and the manifest that follows the data says which
 * scale belongs to which FP8 weight (stats_resolve): the sums of an FP8 weight are kept per row
 * until then (64 bytes a row), and the values of every F32 scale tensor are kept.
 * Both give the same figures: one tensor's values are summed in the same order either way.
 */
#ifndef THIN_INSPECT_STATS_H
#define THIN_INSPECT_STATS_H

#include <jansson.h>
#include <stdint.h>
#include <stdio.h>

#include "show.h"
#include "thin.h"

typedef struct stats_sum {
    double min, max;        /* over finite values; +inf / -inf when there are none */
    double sum, sumsq;      /* of finite values */
    uint64_t finite, nan, inf, zero; /* zero: finite values equal to 0 (either sign) */
} stats_sum;

typedef struct stats_set stats_set;

/* An empty set; NULL when out of memory. */
stats_set *stats_new(void);
void stats_free(stats_set *s);

/* Whether a tensor passes the listing's filter (role, layer, dtype). */
int stats_match(const show_filter *f, const thin_tensor_info *t);

/*
 * Every matching tensor of a mapped file, on `threads` threads (0: all cores), FP8 weights
 * dequantized with their scales as each is finished. Returns 0; 1 when a matching tensor's bytes
 * cannot be read in place (compressed chunks: read the file as a stream instead, nothing was
 * added); -1 when out of memory.
 */
int stats_file(stats_set *s, const thin_file *f, const show_filter *flt, unsigned threads);

/* One pass: the next tensor begins (a tied entry has no bytes: it is only noted). -1 when out of
 * memory. */
int stats_begin(stats_set *s, const thin_tensor_info *t);
/* Bytes of the current tensor, in order, any split. */
void stats_feed(stats_set *s, const void *data, size_t n);
/* The current tensor's bytes are all in; -1 when fewer or more came than its size. */
int stats_end(stats_set *s);
/* After a pass: the FP8 weights of the manifest's entries that name a scale are dequantized with
 * it (a scale that is missing, not F32 or not one value a row leaves the weight's codes as they
 * are, and the tensor says so). */
void stats_resolve(stats_set *s, const json_t *manifest);

/* The table: one line a matching tensor, in manifest order. */
void stats_text(FILE *out, const stats_set *s, const show_file *sf, const show_filter *f);
/* Adds "stats" to each entry of show_json's "tensors" (null for a tied entry):
 * {"elements", "finite", "nan", "inf", "zero", "min", "max", "mean", "std", "rms" (null when no
 *  value is finite), "dequantized": true when FP8 codes were multiplied by their row scales}. */
void stats_json(json_t *listing, const stats_set *s);
/* Prints one line to stderr for each matching tensor holding NaN or infinite values (the first 20,
 * then a count); returns how many do. */
uint64_t stats_report_nonfinite(const stats_set *s, const show_file *sf, const show_filter *f);

#endif /* THIN_INSPECT_STATS_H */
