/*
 * quant.c — FP8 E4M3 row quantization (absmax or least-squared-error row scales), BF16 narrowing
 * and their error statistics (see quant.h).
 *
 * Work is split into fixed units (rows, or segments of SEGMENT elements) whose statistics are kept
 * apart and summed in order afterwards, so the output and the numbers are the same whatever the
 * number of threads.
 */
#include "quant.h"

#include <float.h>
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

enum { SEGMENT = 1 << 16, MAX_THREADS = 256 };

void tq_stats_merge(tq_stats *a, const tq_stats *b)
{
    a->sum_sq_src += b->sum_sq_src;
    a->sum_sq_deq += b->sum_sq_deq;
    a->sum_sq_err += b->sum_sq_err;
    a->dot += b->dot;
    if (b->max_abs_err > a->max_abs_err)
        a->max_abs_err = b->max_abs_err;
    a->count += b->count;
}

double tq_stats_rel_rms(const tq_stats *s)
{
    if (s->sum_sq_src > 0)
        return sqrt(s->sum_sq_err / s->sum_sq_src);
    return s->sum_sq_err > 0 ? INFINITY : 0.0;
}

double tq_stats_cosine(const tq_stats *s)
{
    if (s->sum_sq_src > 0 && s->sum_sq_deq > 0)
        return s->dot / sqrt(s->sum_sq_src * s->sum_sq_deq);
    return (s->sum_sq_src == 0 && s->sum_sq_deq == 0) ? 1.0 : 0.0;
}

float tq_row_scale(float amax)
{
    if (amax == 0)
        return 1.0f;
    float s = amax / TQ_E4M3_MAX;
    return s > 0 ? s : FLT_TRUE_MIN;
}

const char *tq_scale_name(tq_scale_method m)
{
    return m == TQ_SCALE_ABSMAX ? "absmax" : "mse";
}

const char *tq_method_name(tq_scale_method m)
{
    return m == TQ_SCALE_ABSMAX ? "fp8_e4m3_row_absmax" : "fp8_e4m3_row_mse";
}

int tq_scale_parse(const char *name, tq_scale_method *out)
{
    if (strcmp(name, "mse") == 0)
        *out = TQ_SCALE_MSE;
    else if (strcmp(name, "absmax") == 0)
        *out = TQ_SCALE_ABSMAX;
    else
        return -1;
    return 0;
}

/* ---- a parallel loop over [0, n) in contiguous ranges ---- */

typedef void (*range_fn)(void *ctx, size_t begin, size_t end);

typedef struct range_job {
    range_fn fn;
    void *ctx;
    size_t begin, end;
} range_job;

static void *range_main(void *arg)
{
    range_job *j = arg;
    j->fn(j->ctx, j->begin, j->end);
    return NULL;
}

/* Runs fn over [0, n) split across up to `threads` threads; falls back to fewer threads (down to
 * the calling one alone) when a thread cannot be started. */
static void parallel_for(size_t n, unsigned threads, range_fn fn, void *ctx)
{
    if (threads > MAX_THREADS)
        threads = MAX_THREADS;
    if (threads > n)
        threads = (unsigned)n;
    if (threads <= 1) {
        if (n)
            fn(ctx, 0, n);
        return;
    }
    range_job jobs[MAX_THREADS];
    pthread_t tid[MAX_THREADS];
    int started[MAX_THREADS] = {0};
    for (unsigned t = 0; t < threads; t++) {
        jobs[t] = (range_job){fn, ctx, n * t / threads, n * (t + 1) / threads};
        if (t > 0)
            started[t] = pthread_create(&tid[t], NULL, range_main, &jobs[t]) == 0;
    }
    range_main(&jobs[0]);
    for (unsigned t = 1; t < threads; t++) {
        if (started[t])
            pthread_join(tid[t], NULL);
        else
            range_main(&jobs[t]);
    }
}

/* ---- FP8 rows ---- */

typedef struct rows_ctx {
    const unsigned char *src;
    thin_dtype src_type;
    tq_scale_method method;
    size_t cols, src_row_bytes;
    uint8_t *q;
    float *scales;
    tq_stats *row_stats;   /* [rows] */
    size_t *row_bad;       /* [rows]: index of the first non-finite element in the row, or SIZE_MAX */
    int nomem;
} rows_ctx;

/* Largest magnitude of x[0..n); sets *bad to the first non-finite index, or SIZE_MAX. */
static float row_amax(const float *x, size_t n, size_t *bad)
{
    float amax = 0;
    int nonfinite = 0;
    for (size_t j = 0; j < n; j++) {
        float a = fabsf(x[j]);
        nonfinite |= !(a <= FLT_MAX);
        amax = a > amax ? a : amax;
    }
    *bad = SIZE_MAX;
    if (nonfinite)
        for (size_t j = 0; j < n; j++)
            if (!isfinite(x[j])) {
                *bad = j;
                break;
            }
    return amax;
}

/* E4M3 code of a finite v (saturated to ±448), and the code's value in *value: the same result as
 * thin_f32_to_e4m3 (round to nearest even; the tests compare them), but branch-free so that the
 * loop over a row vectorises. Normal range: round the F32 significand to 3 bits in place (a carry
 * moves into the exponent). Subnormal range (|v| < 2^-6): round |v| * 2^9 to an integer 0..8, 8
 * being the smallest normal code, by adding and subtracting 2^23 in round-to-nearest-even. */
static inline uint8_t e4m3_encode_fast(float v, float *value)
{
    uint32_t u = thin_f32_bits(v), sign = u & 0x80000000u, a = u & 0x7fffffffu;
    a = a < 0x43e00000u ? a : 0x43e00000u; /* saturate at 448 */
    uint32_t r = (a + 0x7ffffu + ((a >> 20) & 1u)) & 0xfff00000u;
    uint32_t normal_code = (r >> 20) - (120u << 3);
    float sub = (thin_f32_from_bits(a) * 512.0f + 0x1p23f) - 0x1p23f;
    uint32_t sub_code = (uint32_t)(int32_t)sub, sub_bits = thin_f32_bits(sub * 0x1p-9f);
    uint32_t normal = 0u - (uint32_t)(a >= 0x3c800000u); /* all ones when |v| >= 2^-6 */
    uint32_t code = (normal_code & normal) | (sub_code & ~normal);
    *value = thin_f32_from_bits(((r & normal) | (sub_bits & ~normal)) | sign);
    return (uint8_t)(code | (sign >> 24));
}

static inline uint8_t encode_one(float x, float scale, float *value)
{
    return e4m3_encode_fast(x / scale, value);
}

/* Loops run in groups of a fixed size, which the compiler vectorises, then a scalar tail. */
enum { GROUP = 16, LANES = 8 };

/* q[j] = code of x[j] / scale; d[j] = the code's value times the scale (the dequantized value). */
static void row_codes(const float *restrict x, size_t n, float scale, uint8_t *restrict q,
                      float *restrict d)
{
    size_t j = 0;
    for (; j + GROUP <= n; j += GROUP)
        for (size_t k = 0; k < GROUP; k++) {
            float value;
            q[j + k] = encode_one(x[j + k], scale, &value);
            d[j + k] = value * scale;
        }
    for (; j < n; j++) {
        float value;
        q[j] = encode_one(x[j], scale, &value);
        d[j] = value * scale;
    }
}

/* The E4M3 value nearest a >= 0 in the normal range (3 fraction bits, round to nearest even,
 * saturated at 448); below 2^-6 it keeps 3 fraction bits instead of the subnormals' fixed step,
 * which only the ranking of candidate scales uses (such elements weigh nothing in a row's error). */
static inline float e4m3_value_normal(float a)
{
    uint32_t u = thin_f32_bits(a);
    u = u < 0x43e00000u ? u : 0x43e00000u;
    return thin_f32_from_bits((u + 0x7ffffu + ((u >> 20) & 1u)) & 0xfff00000u);
}

/* Σ (value(ax[j] · inv) · s − ax[j])² in F32 over magnitudes ax: the cost that ranks candidate
 * scales (LANES partial sums in a fixed order, so the compiler vectorises it). */
static float row_err_fast(const float *restrict ax, size_t n, float s, float inv)
{
    float acc[LANES] = {0};
    size_t j = 0;
    for (; j + LANES <= n; j += LANES)
        for (size_t k = 0; k < LANES; k++) {
            float e = e4m3_value_normal(ax[j + k] * inv) * s - ax[j + k];
            acc[k] += e * e;
        }
    for (; j < n; j++) {
        float e = e4m3_value_normal(ax[j] * inv) * s - ax[j];
        acc[0] += e * e;
    }
    float sum = 0;
    for (size_t k = 0; k < LANES; k++)
        sum += acc[k];
    return sum;
}

/* Σ (code value · s − x[j])² in F64, the codes being those the row gets with scale s: the squared
 * error of the row as stored (LANES partial sums in a fixed order). */
static double row_err_exact(const float *restrict x, size_t n, float s)
{
    double acc[LANES] = {0};
    size_t j = 0;
    for (; j + LANES <= n; j += LANES)
        for (size_t k = 0; k < LANES; k++) {
            float value;
            (void)encode_one(x[j + k], s, &value);
            double e = (double)value * s - x[j + k];
            acc[k] += e * e;
        }
    for (; j < n; j++) {
        float value;
        (void)encode_one(x[j], s, &value);
        double e = (double)value * s - x[j];
        acc[0] += e * e;
    }
    double sum = 0;
    for (size_t k = 0; k < LANES; k++)
        sum += acc[k];
    return sum;
}

/* The least-squared-error scale of row x: the absmax scale s0 times c, c = 1 + k / TQ_MSE_STEPS
 * for k in [0, TQ_MSE_STEPS) (so no element saturates), ranked by row_err_fast (the first
 * smallest wins); the winner replaces s0 only when its exact F64 error is below s0's. Zero rows
 * and rows whose s0 is subnormal keep s0. ax is scratch for n floats. */
static float row_scale_mse(const float *x, size_t n, float amax, float *restrict ax)
{
    float s0 = tq_row_scale(amax);
    if (amax == 0 || s0 < FLT_MIN)
        return s0;
    for (size_t j = 0; j < n; j++)
        ax[j] = fabsf(x[j]);
    float best = s0, best_err = row_err_fast(ax, n, s0, 1.0f / s0);
    for (int k = 1; k < TQ_MSE_STEPS; k++) {
        float s = s0 * ((float)(TQ_MSE_STEPS + k) / (float)TQ_MSE_STEPS);
        float e = row_err_fast(ax, n, s, 1.0f / s);
        if (e < best_err)
            best = s, best_err = e;
    }
    if (best != s0 && !(row_err_exact(x, n, best) < row_err_exact(x, n, s0)))
        best = s0;
    return best;
}

/* Statistics of d against x over n elements, in LANES independent partial sums added in a fixed
 * order (so the compiler may vectorise across lanes without changing the result). */
static void row_stats(const float *x, const float *d, size_t n, tq_stats *st)
{
    double src[LANES] = {0}, deq[LANES] = {0}, err[LANES] = {0}, dot[LANES] = {0};
    float mx[LANES] = {0};
    size_t j = 0;
    for (; j + LANES <= n; j += LANES)
        for (size_t k = 0; k < LANES; k++) {
            double w = x[j + k], v = d[j + k], e = v - w;
            float ae = fabsf(d[j + k] - x[j + k]);
            src[k] += w * w;
            deq[k] += v * v;
            err[k] += e * e;
            dot[k] += w * v;
            mx[k] = ae > mx[k] ? ae : mx[k];
        }
    for (; j < n; j++) {
        double w = x[j], v = d[j], e = v - w;
        float ae = fabsf(d[j] - x[j]);
        src[0] += w * w;
        deq[0] += v * v;
        err[0] += e * e;
        dot[0] += w * v;
        mx[0] = ae > mx[0] ? ae : mx[0];
    }
    tq_stats s = {0};
    for (size_t k = 0; k < LANES; k++) {
        s.sum_sq_src += src[k];
        s.sum_sq_deq += deq[k];
        s.sum_sq_err += err[k];
        s.dot += dot[k];
        s.max_abs_err = mx[k] > s.max_abs_err ? mx[k] : s.max_abs_err;
    }
    s.count = n;
    *st = s;
}

static void rows_worker(void *ctx, size_t begin, size_t end)
{
    rows_ctx *c = ctx;
    float *x = malloc(2 * c->cols * sizeof *x + 1), *d = x ? x + c->cols : NULL;
    if (!x) {
        __atomic_store_n(&c->nomem, 1, __ATOMIC_RELAXED);
        return;
    }
    for (size_t r = begin; r < end; r++) {
        thin_convert(x, THIN_DTYPE_F32, c->src + r * c->src_row_bytes, c->src_type, c->cols);
        float amax = row_amax(x, c->cols, &c->row_bad[r]);
        if (c->row_bad[r] != SIZE_MAX)
            continue;
        float scale = c->method == TQ_SCALE_ABSMAX ? tq_row_scale(amax)
                                                   : row_scale_mse(x, c->cols, amax, d);
        c->scales[r] = scale;
        row_codes(x, c->cols, scale, c->q + r * c->cols, d);
        row_stats(x, d, c->cols, &c->row_stats[r]);
    }
    free(x);
}

static int is_source_type(thin_dtype t)
{
    return t == THIN_DTYPE_F32 || t == THIN_DTYPE_F16 || t == THIN_DTYPE_BF16;
}

tq_result tq_quantize_rows(const void *src, thin_dtype src_type, size_t rows, size_t cols,
                           tq_scale_method method, uint8_t *q, float *scales, unsigned threads,
                           tq_stats *st, size_t *bad)
{
    if (!is_source_type(src_type))
        return TQ_BADTYPE;
    if (rows == 0 || cols == 0)
        return TQ_OK;
    rows_ctx *c = calloc(1, sizeof *c);
    tq_stats *rs = calloc(rows, sizeof *rs);
    size_t *rb = calloc(rows, sizeof *rb);
    tq_result res = TQ_NOMEM;
    if (!c || !rs || !rb)
        goto out;
    *c = (rows_ctx){.src = src, .src_type = src_type, .method = method, .cols = cols,
                    .src_row_bytes = cols * thin_dtype_size(src_type), .q = q, .scales = scales,
                    .row_stats = rs, .row_bad = rb};
    parallel_for(rows, threads ? threads : 1, rows_worker, c);
    if (c->nomem)
        goto out;
    res = TQ_OK;
    for (size_t r = 0; r < rows; r++) {
        if (rb[r] != SIZE_MAX) {
            if (bad)
                *bad = r * cols + rb[r];
            res = TQ_NONFINITE;
            break;
        }
        if (st)
            tq_stats_merge(st, &rs[r]);
    }
out:
    free(c);
    free(rs);
    free(rb);
    return res;
}

/* ---- BF16 ---- */

typedef struct bf16_ctx {
    const unsigned char *src;
    thin_dtype src_type;
    size_t n, src_size;
    uint16_t *dst;
    tq_stats *seg_stats; /* [segments] */
    size_t *seg_bad;     /* [segments] */
} bf16_ctx;

/* Element j of a F64, F32 or F16 array as a double. */
static double load_double(const unsigned char *s, thin_dtype t, size_t j)
{
    if (t == THIN_DTYPE_F64) {
        double d;
        memcpy(&d, s + j * 8, 8);
        return d;
    }
    if (t == THIN_DTYPE_F32) {
        float f;
        memcpy(&f, s + j * 4, 4);
        return f;
    }
    uint16_t h;
    memcpy(&h, s + j * 2, 2);
    return thin_f16_to_f32(h);
}

static void bf16_segment(bf16_ctx *c, size_t k)
{
    size_t i0 = k * SEGMENT, n = c->n - i0 < SEGMENT ? c->n - i0 : SEGMENT;
    const unsigned char *s = c->src + i0 * c->src_size;
    uint16_t *d = c->dst + i0;
    thin_convert(d, THIN_DTYPE_BF16, s, c->src_type, n);
    tq_stats st = {0};
    c->seg_bad[k] = SIZE_MAX;
    for (size_t j = 0; j < n; j++) {
        double w = load_double(s, c->src_type, j);
        if (!isfinite(w)) {
            c->seg_bad[k] = i0 + j;
            return;
        }
        double v = thin_bf16_to_f32(d[j]), e = fabs(v - w);
        st.sum_sq_src += w * w;
        st.sum_sq_deq += v * v;
        st.sum_sq_err += e * e;
        st.dot += w * v;
        if (e > st.max_abs_err)
            st.max_abs_err = e;
    }
    st.count = n;
    c->seg_stats[k] = st;
}

static void bf16_worker(void *ctx, size_t begin, size_t end)
{
    for (size_t k = begin; k < end; k++)
        bf16_segment(ctx, k);
}

tq_result tq_convert_bf16(const void *src, thin_dtype src_type, size_t n, uint16_t *dst,
                          unsigned threads, tq_stats *st, size_t *bad)
{
    if (src_type != THIN_DTYPE_F64 && src_type != THIN_DTYPE_F32 && src_type != THIN_DTYPE_F16)
        return TQ_BADTYPE;
    size_t segs = n / SEGMENT + (n % SEGMENT != 0);
    if (segs == 0)
        return TQ_OK;
    tq_stats *ss = calloc(segs, sizeof *ss);
    size_t *sb = calloc(segs, sizeof *sb);
    if (!ss || !sb) {
        free(ss);
        free(sb);
        return TQ_NOMEM;
    }
    bf16_ctx c = {src, src_type, n, thin_dtype_size(src_type), dst, ss, sb};
    parallel_for(segs, threads ? threads : 1, bf16_worker, &c);
    tq_result res = TQ_OK;
    for (size_t k = 0; k < segs; k++) {
        if (sb[k] != SIZE_MAX) {
            if (bad)
                *bad = sb[k];
            res = TQ_NONFINITE;
            break;
        }
        if (st)
            tq_stats_merge(st, &ss[k]);
    }
    free(ss);
    free(sb);
    return res;
}
