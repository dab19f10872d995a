/*
 * compare.c — centered-logit cosine, top-1 agreement and max abs difference (compare.h).
 */
#include <math.h>

#include "compare.h"

static uint32_t argmax(const float *x, uint64_t n) {
    uint64_t best = 0;
    for (uint64_t i = 1; i < n; i++)
        if (x[i] > x[best] || (isnan(x[best]) && !isnan(x[i]))) best = i;
    return (uint32_t)best;
}

void compare_rows(const float *ref, const float *test, uint64_t n, compare_row *out) {
    double ma = 0.0, mb = 0.0, mx = 0.0;
    int finite = 1;
    for (uint64_t i = 0; i < n; i++) {
        if (!isfinite(ref[i]) || !isfinite(test[i])) {
            finite = 0;
            continue;
        }
        ma += ref[i];
        mb += test[i];
        double d = fabs((double)ref[i] - (double)test[i]);
        mx = d > mx ? d : mx;
    }
    ma /= (double)n;
    mb /= (double)n;
    double ab = 0.0, aa = 0.0, bb = 0.0;
    for (uint64_t i = 0; finite && i < n; i++) {
        double a = ref[i] - ma, b = test[i] - mb;
        ab += a * b;
        aa += a * a;
        bb += b * b;
    }
    double cos;
    if (!finite) cos = 0.0;
    else if (aa == 0.0 && bb == 0.0) cos = 1.0; /* two constant rows: same distribution */
    else if (aa == 0.0 || bb == 0.0) cos = 0.0;
    else cos = ab / sqrt(aa * bb);
    *out = (compare_row){cos > 1.0 ? 1.0 : cos, mx, argmax(ref, n), argmax(test, n), finite};
}

void compare_summary_init(compare_summary *s) {
    *s = (compare_summary){0, 1.0, 0, 0.0, 0, 0.0, 0, 0};
}

void compare_summary_add(compare_summary *s, const compare_row *r, uint64_t row) {
    if (s->rows == 0 || r->cosine < s->cosine_min) {
        s->cosine_min = r->cosine;
        s->cosine_min_row = row;
    }
    if (s->rows == 0 || r->max_abs > s->max_abs) {
        s->max_abs = r->max_abs;
        s->max_abs_row = row;
    }
    s->cosine_sum += r->cosine;
    s->top1_agree += r->ref_top == r->test_top;
    s->nonfinite += !r->finite;
    s->rows++;
}

double compare_summary_mean(const compare_summary *s) {
    return s->rows ? s->cosine_sum / (double)s->rows : 1.0;
}
