/* stats.c — thin-inspect --stats: the values of each tensor summed up (see stats.h). */
#include "stats.h"

#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

#define STATS_BLOCK 4096 /* elements decoded at a time */

typedef struct stats_item {
    char *name;
    thin_dtype dtype;
    uint64_t rows, cols;  /* rows as the per-row scales count them; cols = elements / rows */
    uint64_t elems, seen; /* elements of the tensor; those summed so far */
    int tied, done, dequantized, bad;
    stats_sum total;
    stats_sum *row;       /* an FP8 weight's sums per row until its scale is applied: [rows] */
    float *values;        /* a one-pass F32 scale tensor's values: [elems] */
    uint8_t *carry;       /* a stream's block split between feeds (the set's buffer), or NULL */
    size_t ncarry;
} stats_item;

struct stats_set {
    stats_item *items;
    size_t n, cap;
    json_t *index;        /* name -> position in items */
    stats_item *cur;      /* the tensor of a one pass being fed */
    uint8_t carry[STATS_BLOCK * 8];
};

static const stats_sum EMPTY = {INFINITY, -INFINITY, 0, 0, 0, 0, 0, 0};

stats_set *stats_new(void)
{
    stats_set *s = calloc(1, sizeof *s);
    if (s && !(s->index = json_object())) {
        free(s);
        return NULL;
    }
    return s;
}

static void item_clear(stats_item *it)
{
    free(it->name);
    free(it->row);
    free(it->values);
    memset(it, 0, sizeof *it);
}

void stats_free(stats_set *s)
{
    if (!s)
        return;
    for (size_t i = 0; i < s->n; i++)
        item_clear(&s->items[i]);
    free(s->items);
    json_decref(s->index);
    free(s);
}

int stats_match(const show_filter *f, const thin_tensor_info *t)
{
    return show_match_fields(f, thin_role_name(t->role), t->layer, thin_dtype_name(t->dtype));
}

static int is_fp8(thin_dtype d) { return d == THIN_DTYPE_F8_E4M3 || d == THIN_DTYPE_F8_E5M2; }

/* Sets up item `it` for tensor t; keep_values: hold an F32 vector's values for stats_resolve. */
static int item_init(stats_item *it, const thin_tensor_info *t, int keep_values)
{
    memset(it, 0, sizeof *it);
    if (!(it->name = strdup(t->name)))
        return -1;
    it->dtype = t->dtype;
    it->tied = t->tied_to != NULL;
    it->total = EMPTY;
    size_t es = thin_dtype_size(t->dtype);
    it->elems = es ? t->nbytes / es : 0;
    it->rows = thin_tensor_rows(t);
    it->cols = it->rows ? it->elems / it->rows : 0;
    if (it->tied)
        return 0;
    if (is_fp8(t->dtype) && it->rows && it->elems) {
        if (it->rows > SIZE_MAX / sizeof *it->row || !(it->row = malloc(it->rows * sizeof *it->row)))
            return -1;
        for (uint64_t r = 0; r < it->rows; r++)
            it->row[r] = EMPTY;
    }
    if (keep_values && t->role == THIN_ROLE_SCALE && t->dtype == THIN_DTYPE_F32 && it->elems &&
        !(it->values = malloc(t->nbytes)))
        return -1;
    return 0;
}

static void merge(stats_sum *a, const stats_sum *b)
{
    a->min = b->min < a->min ? b->min : a->min;
    a->max = b->max > a->max ? b->max : a->max;
    a->sum += b->sum, a->sumsq += b->sumsq;
    a->finite += b->finite, a->nan += b->nan, a->inf += b->inf, a->zero += b->zero;
}

/* One block's sums, value by value, NaN and infinities counted apart. */
static void block_checked(stats_sum *b, const double *v, size_t n)
{
    *b = EMPTY;
    for (size_t i = 0; i < n; i++) {
        double x = v[i];
        if (isnan(x)) {
            b->nan++;
        } else if (isinf(x)) {
            b->inf++;
        } else {
            b->sum += x, b->sumsq += x * x;
            b->min = x < b->min ? x : b->min;
            b->max = x > b->max ? x : b->max;
            b->finite++, b->zero += x == 0;
        }
    }
}

/* One block's sums in 8 lanes folded in a fixed order; a NaN or infinity anywhere shows in the
 * folded sum, minimum or maximum, and the block is then summed again value by value. */
static void block_sums(stats_sum *b, const double *v, size_t n)
{
    double s[8] = {0}, q[8] = {0}, lo[8], hi[8];
    uint64_t z[8] = {0};
    size_t i, l;
    for (l = 0; l < 8; l++)
        lo[l] = INFINITY, hi[l] = -INFINITY;
    for (i = 0; i + 8 <= n; i += 8)
        for (l = 0; l < 8; l++) {
            double x = v[i + l];
            s[l] += x, q[l] += x * x, z[l] += x == 0;
            lo[l] = x < lo[l] ? x : lo[l];
            hi[l] = x > hi[l] ? x : hi[l];
        }
    for (l = 0; i < n; i++, l++) {
        double x = v[i];
        s[l] += x, q[l] += x * x, z[l] += x == 0;
        lo[l] = x < lo[l] ? x : lo[l];
        hi[l] = x > hi[l] ? x : hi[l];
    }
    *b = EMPTY;
    for (l = 0; l < 8; l++) {
        b->sum += s[l], b->sumsq += q[l], b->zero += z[l];
        b->min = lo[l] < b->min ? lo[l] : b->min;
        b->max = hi[l] > b->max ? hi[l] : b->max;
    }
    b->finite = n;
    if (n && !(isfinite(b->sum) && isfinite(b->sumsq) && isfinite(b->min) && isfinite(b->max)))
        block_checked(b, v, n);
}

/* Decodes n elements of dtype d at p into v. */
static void decode(double *v, thin_dtype d, const uint8_t *p, size_t n)
{
    size_t i;
    switch (d) {
    case THIN_DTYPE_F64: memcpy(v, p, n * 8); return;
    case THIN_DTYPE_F32: for (i = 0; i < n; i++) { float f; memcpy(&f, p + 4 * i, 4); v[i] = f; } return;
    case THIN_DTYPE_F16: case THIN_DTYPE_BF16: case THIN_DTYPE_F8_E4M3: case THIN_DTYPE_F8_E5M2: {
        float f[STATS_BLOCK];
        thin_convert(f, THIN_DTYPE_F32, p, d, n);
        for (i = 0; i < n; i++) v[i] = f[i];
        return;
    }
#define INTS(T)                                                                                    \
    for (i = 0; i < n; i++) { T x; memcpy(&x, p + sizeof x * i, sizeof x); v[i] = (double)x; }     \
    return;
    case THIN_DTYPE_I64: INTS(int64_t)
    case THIN_DTYPE_I32: INTS(int32_t)
    case THIN_DTYPE_I16: INTS(int16_t)
    case THIN_DTYPE_I8: INTS(int8_t)
    case THIN_DTYPE_U8: INTS(uint8_t)
    case THIN_DTYPE_BOOL: for (i = 0; i < n; i++) v[i] = p[i] != 0; return;
    case THIN_DTYPE_U16: INTS(uint16_t)
    case THIN_DTYPE_U32: INTS(uint32_t)
    case THIN_DTYPE_U64: INTS(uint64_t)
#undef INTS
    default: for (i = 0; i < n; i++) v[i] = NAN; return;
    }
}

/* Elements in the block that starts at element it->seen: STATS_BLOCK, or fewer at the end of the
 * row (FP8 weights, summed per row) or of the tensor. Blocks fall at the same places however the
 * bytes arrive, so the figures do not depend on how a stream was cut. */
static size_t block_len(const stats_item *it)
{
    uint64_t left = it->row ? it->cols - it->seen % it->cols : it->elems - it->seen;
    return left < STATS_BLOCK ? (size_t)left : STATS_BLOCK;
}

/* The next whole block (m elements at p) into the tensor's or its row's sums. */
static void item_block(stats_item *it, const uint8_t *p, size_t m)
{
    double v[STATS_BLOCK];
    stats_sum b;
    if (it->values)
        memcpy(it->values + it->seen, p, m * 4);
    decode(v, it->dtype, p, m);
    block_sums(&b, v, m);
    merge(it->row ? &it->row[it->seen / it->cols] : &it->total, &b);
    it->seen += m;
}

static void item_feed(stats_item *it, const uint8_t *p, size_t n)
{
    size_t es = thin_dtype_size(it->dtype);
    while (n) {
        size_t need = it->tied || !es || it->seen == it->elems ? 0 : block_len(it) * es;
        if (!need) {
            it->bad = 1;
            return;
        }
        if (!it->ncarry && (n >= need || !it->carry)) {
            if (n < need) {  /* a mapped tensor comes whole */
                it->bad = 1;
                return;
            }
            item_block(it, p, need / es);
            p += need, n -= need;
            continue;
        }
        size_t k = need - it->ncarry < n ? need - it->ncarry : n;
        memcpy(it->carry + it->ncarry, p, k);
        it->ncarry += k, p += k, n -= k;
        if (it->ncarry == need) {
            item_block(it, it->carry, need / es);
            it->ncarry = 0;
        }
    }
}

/* A row's sums of codes as the sums of code × s. */
static void scale_sum(stats_sum *x, double s)
{
    if (isnan(s) || isinf(s)) {
        x->nan += isnan(s) ? x->finite : x->zero;  /* 0 × inf is NaN */
        x->inf += isnan(s) ? 0 : x->finite - x->zero;
        *x = (stats_sum){INFINITY, -INFINITY, 0, 0, 0, x->nan, x->inf, 0};
        return;
    }
    if (!x->finite)
        return;
    double lo = x->min * s, hi = x->max * s;
    x->min = lo < hi ? lo : hi;
    x->max = lo < hi ? hi : lo;
    x->sum *= s, x->sumsq *= s * s;
    if (s == 0)
        x->min = x->max = 0, x->zero = x->finite;
}

/* An FP8 weight's row sums folded into its total, times scale[row] where a scale is given. */
static void item_finish(stats_item *it, const float *scale)
{
    if (it->row) {
        for (uint64_t r = 0; r < it->rows; r++) {
            if (scale)
                scale_sum(&it->row[r], scale[r]);
            merge(&it->total, &it->row[r]);
        }
        free(it->row);
        it->row = NULL;
        it->dequantized = scale != NULL;
    }
    it->done = 1;
}

static stats_item *find(const stats_set *s, const char *name)
{
    json_t *k = json_object_get(s->index, name);
    return k ? &s->items[json_integer_value(k)] : NULL;
}

static stats_item *add(stats_set *s, const char *name)
{
    if (s->n == s->cap) {
        size_t cap = s->cap ? 2 * s->cap : 64;
        stats_item *a = realloc(s->items, cap * sizeof *a);
        if (!a)
            return NULL;
        s->items = a, s->cap = cap;
    }
    if (json_object_set_new(s->index, name, json_integer((json_int_t)s->n)))
        return NULL;
    memset(&s->items[s->n], 0, sizeof s->items[0]);
    return &s->items[s->n++];
}

int stats_begin(stats_set *s, const thin_tensor_info *t)
{
    stats_item *it = find(s, t->name);
    if (it)
        item_clear(it);  /* the reader refuses duplicate names; a repeat replaces */
    else if (!(it = add(s, t->name)))
        return -1;
    s->cur = it;
    if (item_init(it, t, 1)) {
        item_clear(it);
        s->cur = NULL;
        return -1;
    }
    it->carry = s->carry;
    return 0;
}

void stats_feed(stats_set *s, const void *data, size_t n)
{
    if (s->cur)
        item_feed(s->cur, data, n);
}

int stats_end(stats_set *s)
{
    stats_item *it = s->cur;
    s->cur = NULL;
    if (!it)
        return -1;
    it->carry = NULL;
    if (it->tied) {
        it->done = 1;
        return 0;
    }
    if (it->bad || it->ncarry || it->seen != it->elems)
        return -1;
    if (!it->row)
        it->done = 1;
    return 0;
}

/* The values of scale tensor `name` when it is F32 with one value per row, else NULL. */
static const float *pass_scale(const stats_set *s, const char *name, uint64_t rows)
{
    const stats_item *sc = name ? find(s, name) : NULL;
    return sc && sc->values && sc->elems == rows && sc->seen == rows ? sc->values : NULL;
}

void stats_resolve(stats_set *s, const json_t *manifest)
{
    size_t i;
    json_t *t;
    json_array_foreach(json_object_get(manifest, "tensors"), i, t) {
        stats_item *it = find(s, json_string_value(json_object_get(t, "name")));
        if (it && it->row && !it->done)
            item_finish(it, pass_scale(s, json_string_value(json_object_get(t, "scale")), it->rows));
    }
    for (i = 0; i < s->n; i++)  /* a weight the manifest does not list: its codes as they are */
        if (s->items[i].row)
            item_finish(&s->items[i], NULL);
}

/* ---- a mapped file, on threads ---- */

typedef struct file_job {
    stats_set *s;
    const thin_file *f;
    const uint32_t *order;     /* tensors to do, largest first */
    uint32_t n;
    atomic_uint next;
    atomic_uint_least64_t done_bytes;
    uint64_t total_bytes;
    atomic_int failed;
} file_job;

/* Tensor t's scale values in place, when F32 with one value a row and stored uncompressed. */
static const float *file_scale(const thin_file *f, const thin_tensor_info *t, uint64_t rows)
{
    thin_tensor_info si;
    const void *p;
    if (!t->scale || thin_file_find(f, t->scale, &si) != THIN_OK || si.role != THIN_ROLE_SCALE ||
        si.dtype != THIN_DTYPE_F32 ||
        si.nbytes != rows * 4 || thin_file_tensor_data(f, si.index, &p) != THIN_OK)
        return NULL;
    return p;
}

static void *file_worker(void *arg)
{
    file_job *j = arg;
    int first = 0;
    unsigned k;
    while ((k = atomic_fetch_add(&j->next, 1)) < j->n) {
        first |= k == 0;
        uint32_t i = j->order[k];
        thin_tensor_info t;
        const void *p = NULL;
        stats_item *it = &j->s->items[i];
        if (thin_file_tensor(j->f, i, &t) != THIN_OK || item_init(it, &t, 0)) {
            atomic_store(&j->failed, 1);
            continue;
        }
        if (!it->tied && thin_file_tensor_data(j->f, i, &p) == THIN_OK)
            item_feed(it, p, (size_t)t.nbytes);
        item_finish(it, it->row ? file_scale(j->f, &t, it->rows) : NULL);
        uint64_t d = atomic_fetch_add(&j->done_bytes, it->tied ? 0 : t.nbytes);
        if (first)  /* the thread that took the largest tensor shows the progress */
            cli_progress("summing", d, j->total_bytes);
    }
    return NULL;
}

typedef struct sized { uint64_t nbytes; uint32_t i; } sized;

static int by_size_desc(const void *a, const void *b)
{
    const sized *x = a, *y = b;
    return x->nbytes < y->nbytes ? 1 : x->nbytes > y->nbytes ? -1 : (x->i > y->i) - (x->i < y->i);
}

/* Fills j->order with the matching tensors, largest first; 1 when one of them (or its scale) is
 * not in place; -1 when out of memory. */
static int file_plan(file_job *j, const show_filter *flt, uint32_t *order)
{
    uint32_t nt = thin_file_tensor_count(j->f);
    sized *z = malloc((nt ? nt : 1) * sizeof *z);
    if (!z)
        return -1;
    for (uint32_t i = 0; i < nt; i++) {
        thin_tensor_info t, si;
        const void *p;
        if (thin_file_tensor(j->f, i, &t) != THIN_OK || !stats_match(flt, &t))
            continue;
        if ((!t.tied_to && thin_file_tensor_data(j->f, i, &p) != THIN_OK) ||
            (t.scale && is_fp8(t.dtype) && thin_file_find(j->f, t.scale, &si) == THIN_OK &&
             thin_file_tensor_data(j->f, si.index, &p) != THIN_OK)) {
            free(z);
            return 1;
        }
        z[j->n++] = (sized){t.tied_to ? 0 : t.nbytes, i};
        j->total_bytes += t.tied_to ? 0 : t.nbytes;
    }
    qsort(z, j->n, sizeof *z, by_size_desc);
    for (uint32_t k = 0; k < j->n; k++)
        order[k] = z[k].i;
    free(z);
    return 0;
}

int stats_file(stats_set *s, const thin_file *f, const show_filter *flt, unsigned threads)
{
    uint32_t nt = thin_file_tensor_count(f);
    file_job j = {.s = s, .f = f};
    uint32_t *order = malloc((nt ? nt : 1) * sizeof *order);
    if (!order)
        return -1;
    j.order = order;
    int rc = file_plan(&j, flt, order);
    if (rc) {
        free(order);
        return rc;
    }
    /* every tensor gets an item (unmatched ones stay empty), named for the lookup */
    stats_item *items = calloc(nt ? nt : 1, sizeof *items);
    if (!items) {
        free(order);
        return -1;
    }
    s->items = items, s->n = s->cap = nt;
    for (uint32_t i = 0; i < nt; i++) {
        thin_tensor_info t;
        thin_file_tensor(f, i, &t);
        if (json_object_set_new(s->index, t.name, json_integer(i))) {
            free(order);
            return -1;
        }
    }
    threads = threads ? threads : thin_cpu_count();
    threads = threads > j.n ? (j.n ? j.n : 1) : threads;
    pthread_t *tid = calloc(threads, sizeof *tid);
    unsigned started = 0;
    while (tid && started + 1 < threads && !pthread_create(&tid[started], NULL, file_worker, &j))
        started++;
    file_worker(&j);
    for (unsigned i = 0; i < started; i++)
        pthread_join(tid[i], NULL);
    cli_progress_end();
    free(tid);
    free(order);
    return atomic_load(&j.failed) ? -1 : 0;
}

/* ---- output ---- */

static double mean_of(const stats_sum *x) { return x->sum / (double)x->finite; }

static double std_of(const stats_sum *x)
{
    double m = mean_of(x), v = x->sumsq / (double)x->finite - m * m;
    return sqrt(v > 0 ? v : 0);
}

static double rms_of(const stats_sum *x) { return sqrt(x->sumsq / (double)x->finite); }

void stats_text(FILE *out, const stats_set *s, const show_file *sf, const show_filter *f)
{
    size_t i;
    json_t *t;
    stats_sum all = EMPTY;
    uint64_t n = 0, deq = 0;
    fprintf(out, "%s: value statistics\n\n%-52s %-8s %14s %12s %12s %12s %12s %12s %8s %8s %12s\n",
            sf->label, "name", "dtype", "elements", "min", "max", "mean", "std", "rms", "nan",
            "inf", "zeros");
    json_array_foreach(json_object_get(sf->manifest, "tensors"), i, t) {
        const char *name = json_string_value(json_object_get(t, "name"));
        const char *dt = json_string_value(json_object_get(t, "dtype"));
        const char *tied = json_string_value(json_object_get(t, "tied_to"));
        const stats_item *it = name ? find(s, name) : NULL;
        if (!show_match(f, t))
            continue;
        if (tied) {
            fprintf(out, "%-52s %-8s  tied to %s\n", name, dt ? dt : "?", tied);
            continue;
        }
        if (!it || !it->done)
            continue;
        const stats_sum *x = &it->total;
        fprintf(out, "%-52s %-8s %14llu", name, dt ? dt : "?", (unsigned long long)it->elems);
        if (x->finite)
            fprintf(out, " %12.5g %12.5g %12.5g %12.5g %12.5g", x->min, x->max, mean_of(x),
                    std_of(x), rms_of(x));
        else
            fprintf(out, " %12s %12s %12s %12s %12s", "-", "-", "-", "-", "-");
        fprintf(out, " %8llu %8llu %12llu%s\n", (unsigned long long)x->nan,
                (unsigned long long)x->inf, (unsigned long long)x->zero,
                it->dequantized ? "  dequantized" : "");
        merge(&all, x);
        n++, deq += it->dequantized;
    }
    fprintf(out, "\n%llu tensors, %llu values: %llu finite, %llu NaN, %llu infinite, %llu zeros\n",
            (unsigned long long)n, (unsigned long long)(all.finite + all.nan + all.inf),
            (unsigned long long)all.finite, (unsigned long long)all.nan,
            (unsigned long long)all.inf, (unsigned long long)all.zero);
    if (deq)
        fprintf(out, "dequantized: the FP8 codes of %llu tensors times their row scales\n",
                (unsigned long long)deq);
}

static json_t *num(double v, int ok) { return ok && isfinite(v) ? json_real(v) : json_null(); }

void stats_json(json_t *listing, const stats_set *s)
{
    size_t i;
    json_t *t;
    json_array_foreach(json_object_get(listing, "tensors"), i, t) {
        const stats_item *it = find(s, json_string_value(json_object_get(t, "name")));
        if (json_object_get(t, "tied_to")) {
            json_object_set_new(t, "stats", json_null());
            continue;
        }
        if (!it || !it->done)
            continue;
        const stats_sum *x = &it->total;
        int ok = x->finite > 0;
        json_object_set_new(t, "stats", json_pack(
            "{sI sI sI sI sI so so so so so sb}", "elements", (json_int_t)it->elems,
            "finite", (json_int_t)x->finite, "nan", (json_int_t)x->nan, "inf", (json_int_t)x->inf,
            "zero", (json_int_t)x->zero, "min", num(x->min, ok), "max", num(x->max, ok),
            "mean", num(ok ? mean_of(x) : 0, ok), "std", num(ok ? std_of(x) : 0, ok),
            "rms", num(ok ? rms_of(x) : 0, ok), "dequantized", it->dequantized));
    }
}

uint64_t stats_report_nonfinite(const stats_set *s, const show_file *sf, const show_filter *f)
{
    uint64_t bad = 0;
    size_t i;
    json_t *t;
    json_array_foreach(json_object_get(sf->manifest, "tensors"), i, t) {
        const stats_item *it = find(s, json_string_value(json_object_get(t, "name")));
        if (!show_match(f, t) || !it || !it->done || !(it->total.nan || it->total.inf))
            continue;
        if (++bad <= 20)
            cli_error("%s: tensor '%s' holds %llu NaN and %llu infinite values", sf->label,
                      it->name, (unsigned long long)it->total.nan, (unsigned long long)it->total.inf);
    }
    if (bad > 20)
        cli_error("%s: %llu more tensors hold NaN or infinite values", sf->label,
                  (unsigned long long)(bad - 20));
    return bad;
}
