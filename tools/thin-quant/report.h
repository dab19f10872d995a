/*
 * report.h — what thin-quant did to each tensor: the stderr table and the --json report.
 */
#ifndef THIN_QUANT_REPORT_H
#define THIN_QUANT_REPORT_H

#include <stdint.h>
#include <stdio.h>

#include "quant.h"
#include "select.h"
#include "thin.h"

typedef struct tq_entry {
    char *name;
    thin_role role;
    int32_t layer;
    thin_dtype from, to;
    uint32_t rank;
    uint64_t shape[THIN_MAX_RANK];
    uint64_t bytes_before;   /* raw bytes of the source tensor */
    uint64_t bytes_after;    /* raw bytes written for it, its scale tensor included */
    tq_action action;
    int tied;                /* a tied entry (no bytes of its own) */
    tq_stats stats;          /* for FP8 and BF16 entries */
    const char *note;        /* why a chosen tensor was not quantized, or NULL */
} tq_entry;

typedef struct tq_report {
    tq_entry *entries;
    size_t count, cap;
    uint32_t n_layers;       /* layer count used for choosing */
    char source_digest[65];  /* input whole-file digest, hex */
    char output_digest[65];  /* output whole-file digest, hex ("" when unknown) */
    double seconds;
    const char *method;      /* the quant method's name (static), or NULL */
} tq_report;

void tq_report_init(tq_report *r);
void tq_report_free(tq_report *r);
/* Appends an entry (name copied); returns it, or NULL when out of memory. */
tq_entry *tq_report_add(tq_report *r, const thin_tensor_info *t);
/* Totals over all entries: bytes before and after, and the count per action. */
void tq_report_totals(const tq_report *r, uint64_t *before, uint64_t *after, size_t counts[3]);
/* The human-readable table of transformed tensors and the summary. */
void tq_report_print(const tq_report *r, FILE *out);
/* The JSON report (see the README for its fields). Returns 0, or -1 on a write error. */
int tq_report_write_json(const tq_report *r, const char *input, const char *output,
                         const char *profile, FILE *out);

#endif /* THIN_QUANT_REPORT_H */
