/*
 * quant.h — the row quantizer of thin-quant: FP8 E4M3 with one F32 scale per output row, the BF16
 * narrowing, and the error metrics of the result against the source.
 *
 * Values = RNE(w / scale) saturated to ±448, for one of two scale rules:
 *   absmax  scale[r] = s0 = max|w[r][:]| / 448 (as float): the largest element maps to ±448.
 *   mse     the scale with the least squared error Σ (code value · scale − w)² among
 *           s0 · (1 + k/64), k = 0..63, so no element saturates; s0 is kept unless another is
 *           strictly better, so a row's squared error is never above absmax's. E4M3 keeps about
 *           the same relative precision at any scale, but where a row's elements fall between
 *           the codes depends on it: the best of the 64 gives 2.0% instead of 2.5% relative RMS
 *           error on 64-wide Gaussian rows, 2.54% instead of 2.65% on 2048-wide ones.
 * An all-zero row gets scale 1. A row whose maximum is so small that max / 448 underflows to zero
 * gets the smallest positive float as its scale (mse keeps s0 when it is subnormal). Results never
 * depend on the thread count: rows are independent and the statistics are combined in row order.
 */
#ifndef THIN_QUANT_QUANT_H
#define THIN_QUANT_QUANT_H

#include <stddef.h>
#include <stdint.h>

#include "thin.h"

#define TQ_E4M3_MAX 448.0f
#define TQ_MSE_STEPS 64 /* candidate scales per row of the mse rule: s0 · (1 + k / 64) */

/* How a row's scale is chosen (see above). */
typedef enum tq_scale_method {
    TQ_SCALE_MSE = 0,    /* the default */
    TQ_SCALE_ABSMAX = 1,
} tq_scale_method;

/* "mse" or "absmax". */
const char *tq_scale_name(tq_scale_method m);
/* The method recorded in the quant section: "fp8_e4m3_row_mse" or "fp8_e4m3_row_absmax". */
const char *tq_method_name(tq_scale_method m);
/* Parses "mse" or "absmax". Returns 0, or -1 for any other name. */
int tq_scale_parse(const char *name, tq_scale_method *out);

/* Error statistics of a transformed tensor (w = source value, d = value after the round trip). */
typedef struct tq_stats {
    double sum_sq_src; /* Σ w² */
    double sum_sq_deq; /* Σ d² */
    double sum_sq_err; /* Σ (d − w)² */
    double dot;        /* Σ w·d */
    double max_abs_err;/* max |d − w| */
    uint64_t count;    /* elements */
} tq_stats;

/* Adds b into a (a += b; max for max_abs_err). */
void tq_stats_merge(tq_stats *a, const tq_stats *b);
/* sqrt(Σ(d−w)² / Σw²); 0 when the source is all zeros and so is the error. */
double tq_stats_rel_rms(const tq_stats *s);
/* Σw·d / sqrt(Σw² Σd²); 1 when both are all zeros, 0 when only one is. */
double tq_stats_cosine(const tq_stats *s);

/* Result of a block operation. */
typedef enum tq_result {
    TQ_OK = 0,
    TQ_NONFINITE = 1, /* a NaN or Inf in the source; *bad holds the first such element's index */
    TQ_NOMEM = 2,
    TQ_BADTYPE = 3,   /* source dtype is not F32, F16 or BF16 */
} tq_result;

/* Quantizes `rows` rows of `cols` elements of src (dtype F32, F16 or BF16, row-major) into E4M3
 * codes q[rows × cols] and scales[rows] chosen by `method`, using up to `threads` threads. When st is not NULL the
 * error statistics of the dequantized rows (code value × scale) against the source are added to
 * it. On TQ_NONFINITE, *bad (if not NULL) is the flat index within this block of the first NaN or
 * Inf element; q and scales are then unspecified. */
tq_result tq_quantize_rows(const void *src, thin_dtype src_type, size_t rows, size_t cols,
                           tq_scale_method method, uint8_t *q, float *scales, unsigned threads,
                           tq_stats *st, size_t *bad);

/* Converts n elements of src (F64, F32 or F16) to BF16 in dst, adding the error statistics of the
 * BF16 values against the source to st (if not NULL); TQ_NONFINITE (with *bad) on a NaN or Inf. */
tq_result tq_convert_bf16(const void *src, thin_dtype src_type, size_t n, uint16_t *dst,
                          unsigned threads, tq_stats *st, size_t *bad);

/* The absmax scale of one row whose largest magnitude is amax (finite, >= 0), as the rule above. */
float tq_row_scale(float amax);

#endif /* THIN_QUANT_QUANT_H */
