/*
 * compare.h — agreement between two rows of logits over the same vocabulary: the centered-logit
 * cosine (each row's mean subtracted first), top-1 agreement and the largest absolute difference,
 * accumulated in double over many rows (positions).
 */
#ifndef THIN_COMPARE_H
#define THIN_COMPARE_H

#include <stdint.h>

typedef struct compare_row {
    double cosine;      /* centered cosine in [-1, 1]; 0 when a row has a non-finite value */
    double max_abs;     /* max |ref - test| over the row (finite values) */
    uint32_t ref_top;   /* argmax of ref (lowest index wins ties) */
    uint32_t test_top;  /* argmax of test */
    int finite;         /* 1 when both rows hold only finite values */
} compare_row;

typedef struct compare_summary {
    uint64_t rows;          /* rows compared */
    double cosine_min;      /* smallest row cosine (1 when no rows) */
    uint64_t cosine_min_row;
    double cosine_sum;      /* for the mean */
    uint64_t top1_agree;    /* rows whose argmaxes agree */
    double max_abs;         /* largest row max_abs */
    uint64_t max_abs_row;
    uint64_t nonfinite;     /* rows with a NaN or infinity in either input */
} compare_summary;

/* Compares one row of n values (n >= 1). */
void compare_rows(const float *ref, const float *test, uint64_t n, compare_row *out);

/* Starts an empty summary. */
void compare_summary_init(compare_summary *s);
/* Adds row number `row` to the summary. */
void compare_summary_add(compare_summary *s, const compare_row *r, uint64_t row);
/* Mean cosine over the rows (1 when no rows). */
double compare_summary_mean(const compare_summary *s);

#endif /* THIN_COMPARE_H */
