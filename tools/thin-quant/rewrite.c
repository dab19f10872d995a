/*
 * rewrite.c — thin-quant's pipeline (see rewrite.h): one tensor at a time, in blocks of whole
 * rows, so memory stays bounded by the block size (plus, for a compressed input file, the one
 * tensor being read).
 */
#include "rewrite.h"

#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "input.h"
#include "quant.h"
#include "sections.h"

typedef struct pending_blob {
    char *name;
    unsigned char *data; /* [size] */
    size_t size;
} pending_blob;

typedef struct run {
    const tq_options *o;
    tq_input in;
    thin_writer *w;
    tq_report *rep;
    uint32_t n_layers;     /* for choosing (0 until known in stream mode) */
    int32_t max_layer;     /* largest layer index seen */
    uint64_t done, total;  /* progress, raw source bytes */
    pending_blob *blobs;   /* stream mode: blobs kept until the tensors are written */
    size_t n_blobs;
    unsigned char *out;    /* block output buffer */
    size_t out_cap;
} run;

static int wfail(run *r)
{
    cli_error("%s: %s", r->o->output, thin_writer_error(r->w));
    return -1;
}

static int ifail(run *r)
{
    cli_error("%s", r->in.err);
    return -1;
}

static unsigned char *out_buffer(run *r, size_t n)
{
    if (n > r->out_cap) {
        unsigned char *b = realloc(r->out, n);
        if (!b)
            return NULL;
        r->out = b;
        r->out_cap = n;
    }
    return r->out;
}

static thin_tensor_desc desc_of(const thin_tensor_info *t)
{
    thin_tensor_desc d;
    memset(&d, 0, sizeof d);
    d.name = t->name;
    d.role = t->role;
    d.layer = t->layer;
    d.has_expert = t->expert >= 0;
    d.expert = t->expert;
    d.dtype = t->dtype;
    d.rank = t->rank;
    memcpy(d.shape, t->shape, sizeof d.shape);
    d.scale = t->scale;
    d.tied_to = t->tied_to;
    return d;
}

static void progress(run *r, uint64_t n)
{
    r->done += n;
    cli_progress("thin-quant", r->done, r->total);
}

/* Same dtype and bytes, streamed through in blocks. */
static int copy_tensor(run *r, const thin_tensor_info *t)
{
    thin_tensor_desc d = desc_of(t);
    if (thin_writer_begin_tensor(r->w, &d) != THIN_OK)
        return wfail(r);
    for (uint64_t off = 0; off < t->nbytes;) {
        size_t n = t->nbytes - off < TQ_BLOCK_BYTES ? (size_t)(t->nbytes - off) : TQ_BLOCK_BYTES;
        const unsigned char *p;
        if (tq_input_view(&r->in, n, &p) != 0)
            return ifail(r);
        if (thin_writer_write(r->w, p, n) != THIN_OK)
            return wfail(r);
        off += n;
        progress(r, n);
    }
    return thin_writer_end_tensor(r->w) == THIN_OK ? 0 : wfail(r);
}

static int nonfinite(run *r, const thin_tensor_info *t, uint64_t index)
{
    uint64_t cols = t->rank >= 2 ? t->shape[t->rank - 1] : 0;
    if (cols)
        cli_error("%s: tensor %s has a NaN or Inf at [%llu, %llu]", r->in.label, t->name,
                  (unsigned long long)(index / cols), (unsigned long long)(index % cols));
    else
        cli_error("%s: tensor %s has a NaN or Inf at element %llu", r->in.label, t->name,
                  (unsigned long long)index);
    return -1;
}

/* Quantizes the rows block by block; returns 0 with scales[rows] filled. */
static int fp8_rows(run *r, const thin_tensor_info *t, tq_entry *e, float *scales)
{
    size_t rows = (size_t)thin_tensor_rows(t), cols = (size_t)t->shape[t->rank - 1];
    size_t row_bytes = cols * thin_dtype_size(t->dtype);
    size_t block = row_bytes >= TQ_BLOCK_BYTES ? 1 : TQ_BLOCK_BYTES / row_bytes;
    for (size_t r0 = 0; r0 < rows; r0 += block) {
        size_t n = rows - r0 < block ? rows - r0 : block;
        const unsigned char *p;
        unsigned char *q = out_buffer(r, n * cols);
        size_t bad = 0;
        if (!q) {
            cli_error("%s: out of memory", t->name);
            return -1;
        }
        if (tq_input_view(&r->in, n * row_bytes, &p) != 0)
            return ifail(r);
        tq_result res = tq_quantize_rows(p, t->dtype, n, cols, r->o->scale, q, scales + r0,
                                         r->o->threads, &e->stats, &bad);
        if (res == TQ_NONFINITE)
            return nonfinite(r, t, (uint64_t)r0 * cols + bad);
        if (res != TQ_OK) {
            cli_error("%s: cannot quantize tensor %s", r->in.label, t->name);
            return -1;
        }
        if (thin_writer_write(r->w, q, n * cols) != THIN_OK)
            return wfail(r);
        progress(r, n * row_bytes);
    }
    return 0;
}

/* FP8 E4M3 weight followed by its F32 scale tensor "<name>.scale" of shape [rows]. */
static int fp8_tensor(run *r, const thin_tensor_info *t, tq_entry *e)
{
    char scale_name[THIN_MAX_NAME + 8];
    size_t rows = (size_t)thin_tensor_rows(t);
    if (snprintf(scale_name, sizeof scale_name, "%s.scale", t->name) > THIN_MAX_NAME) {
        cli_error("%s: tensor %s: name too long for its scale tensor", r->in.label, t->name);
        return -1;
    }
    float *scales = malloc(rows * sizeof *scales);
    if (!scales) {
        cli_error("%s: out of memory", t->name);
        return -1;
    }
    thin_tensor_desc d = desc_of(t);
    d.dtype = THIN_DTYPE_F8_E4M3;
    d.scale = scale_name;
    int rc = -1;
    if (thin_writer_begin_tensor(r->w, &d) != THIN_OK)
        rc = wfail(r);
    else if (fp8_rows(r, t, e, scales) == 0)
        rc = thin_writer_end_tensor(r->w) == THIN_OK ? 0 : wfail(r);
    if (rc == 0) {
        thin_tensor_desc s;
        memset(&s, 0, sizeof s);
        s.name = scale_name;
        s.role = THIN_ROLE_SCALE;
        s.layer = t->layer;
        s.dtype = THIN_DTYPE_F32;
        s.rank = 1;
        s.shape[0] = rows;
        if (thin_writer_add_tensor(r->w, &s, scales) != THIN_OK)
            rc = wfail(r);
    }
    free(scales);
    e->to = THIN_DTYPE_F8_E4M3;
    e->bytes_after = (uint64_t)rows * t->shape[t->rank - 1] + (uint64_t)rows * 4;
    return rc;
}

/* Narrowed to BF16, block by block. */
static int bf16_tensor(run *r, const thin_tensor_info *t, tq_entry *e)
{
    size_t es = thin_dtype_size(t->dtype), n_all = (size_t)(t->nbytes / es);
    size_t block = TQ_BLOCK_BYTES / es;
    thin_tensor_desc d = desc_of(t);
    d.dtype = THIN_DTYPE_BF16;
    if (thin_writer_begin_tensor(r->w, &d) != THIN_OK)
        return wfail(r);
    for (size_t i = 0; i < n_all; i += block) {
        size_t n = n_all - i < block ? n_all - i : block, bad = 0;
        const unsigned char *p;
        uint16_t *h = (uint16_t *)(void *)out_buffer(r, n * 2);
        if (!h) {
            cli_error("%s: out of memory", t->name);
            return -1;
        }
        if (tq_input_view(&r->in, n * es, &p) != 0)
            return ifail(r);
        if (tq_convert_bf16(p, t->dtype, n, h, r->o->threads, &e->stats, &bad) != TQ_OK)
            return nonfinite(r, t, (uint64_t)i + bad);
        if (thin_writer_write(r->w, h, n * 2) != THIN_OK)
            return wfail(r);
        progress(r, n * es);
    }
    e->to = THIN_DTYPE_BF16;
    e->bytes_after = (uint64_t)n_all * 2;
    return thin_writer_end_tensor(r->w) == THIN_OK ? 0 : wfail(r);
}

/* A tied entry follows its target's new dtype and scale. */
static int tied_tensor(run *r, const thin_tensor_info *t, tq_entry *e)
{
    thin_tensor_desc d = desc_of(t);
    char scale_name[THIN_MAX_NAME + 8];
    for (size_t i = 0; i + 1 < r->rep->count; i++) {
        const tq_entry *target = &r->rep->entries[i];
        if (strcmp(target->name, t->tied_to) != 0)
            continue;
        d.dtype = e->to = target->to;
        if (target->action == TQ_ACTION_FP8) {
            snprintf(scale_name, sizeof scale_name, "%s.scale", target->name);
            d.scale = scale_name;
        }
        break;
    }
    if (thin_writer_begin_tensor(r->w, &d) != THIN_OK ||
        thin_writer_end_tensor(r->w) != THIN_OK)
        return wfail(r);
    return 0;
}

static int process_tensor(run *r, const thin_tensor_info *t)
{
    tq_entry *e = tq_report_add(r->rep, t);
    if (!e) {
        cli_error("out of memory");
        return -1;
    }
    if (t->layer > r->max_layer)
        r->max_layer = t->layer;
    e->action = tq_select(r->o->sel, t, r->n_layers, &e->note);
    if (t->tied_to)
        return tied_tensor(r, t, e);
    switch (e->action) {
    case TQ_ACTION_FP8: return fp8_tensor(r, t, e);
    case TQ_ACTION_BF16: return bf16_tensor(r, t, e);
    default: return copy_tensor(r, t);
    }
}

/* Stream mode: keeps a blob's bytes until the tensors are written. */
static int keep_blob(run *r, const thin_tensor_info *b)
{
    pending_blob *nb = realloc(r->blobs, (r->n_blobs + 1) * sizeof *nb);
    if (nb)
        r->blobs = nb;
    if (!nb || b->nbytes > SIZE_MAX - 1) {
        cli_error("%s: out of memory keeping blob %s", r->in.label, b->name);
        return -1;
    }
    pending_blob *p = &r->blobs[r->n_blobs];
    p->size = (size_t)b->nbytes;
    p->name = strdup(b->name);
    p->data = malloc(p->size + 1);
    const unsigned char *src;
    if (!p->name || !p->data) {
        free(p->name);
        free(p->data);
        cli_error("%s: out of memory keeping blob %s", r->in.label, b->name);
        return -1;
    }
    r->n_blobs++;
    if (p->size && tq_input_view(&r->in, p->size, &src) != 0)
        return ifail(r);
    if (p->size)
        memcpy(p->data, src, p->size);
    return 0;
}

static int write_blobs(run *r)
{
    if (tq_input_is_stream(&r->in)) {
        for (size_t i = 0; i < r->n_blobs; i++)
            if (thin_writer_add_blob(r->w, r->blobs[i].name, r->blobs[i].data,
                                     r->blobs[i].size) != THIN_OK)
                return wfail(r);
        return 0;
    }
    for (uint32_t i = 0; i < thin_file_blob_count(r->in.f); i++) {
        const char *name = thin_file_blob_name(r->in.f, i);
        const void *data;
        size_t size;
        if (thin_file_blob(r->in.f, name, &data, &size) != THIN_OK) {
            cli_error("%s", thin_file_error(r->in.f));
            return -1;
        }
        if (thin_writer_add_blob(r->w, name, data, size) != THIN_OK)
            return wfail(r);
    }
    return 0;
}

/* The layer count for choosing: --n-layers, else model.hparams.n_layers, else the largest layer
 * index seen plus one. */
static uint32_t layer_count(const run *r, const json_t *root)
{
    if (r->o->n_layers)
        return r->o->n_layers;
    uint32_t n = root ? tq_manifest_layers(root) : 0;
    return n ? n : (uint32_t)(r->max_layer + 1);
}

/* The input's manifest, parsed into *root. */
static int read_manifest(run *r, json_t **root)
{
    const char *json;
    size_t len;
    if (tq_input_manifest(&r->in, &json, &len) != 0)
        return ifail(r);
    if (!(*root = tq_manifest_parse(json, len))) {
        cli_error("%s: the manifest is not a JSON object", r->in.label);
        return -1;
    }
    return 0;
}

/* File mode: the manifest and layer count are known before the first tensor. */
static int file_prepare(run *r, json_t **root)
{
    if (read_manifest(r, root) != 0)
        return -1;
    uint32_t count = thin_file_tensor_count(r->in.f);
    for (uint32_t i = 0; i < count; i++) {
        thin_tensor_info t;
        if (thin_file_tensor(r->in.f, i, &t) != THIN_OK) {
            cli_error("%s", thin_file_error(r->in.f));
            return -1;
        }
        if (t.layer > r->max_layer)
            r->max_layer = t.layer;
        if (!t.tied_to)
            r->total += t.nbytes;
    }
    r->n_layers = layer_count(r, *root);
    return 0;
}

/* Reads every item, writing tensors as they come; on return in stream mode *root holds the
 * manifest read last. */
static int process_items(run *r, json_t **root)
{
    for (;;) {
        tq_item kind;
        thin_tensor_info t;
        if (tq_input_next(&r->in, &kind, &t) != 0)
            return ifail(r);
        if (kind == TQ_ITEM_END)
            break;
        if ((kind == TQ_ITEM_TENSOR ? process_tensor(r, &t) : keep_blob(r, &t)) != 0)
            return -1;
    }
    cli_progress_end();
    return *root ? 0 : read_manifest(r, root);
}

static int open_writer(run *r)
{
    if (!(r->w = thin_writer_new())) {
        cli_error("out of memory");
        return -1;
    }
    thin_status rc = strcmp(r->o->output, "-") == 0
                         ? thin_writer_open_fd(r->w, 1, "<stdout>", &r->o->wopt)
                         : thin_writer_open(r->w, r->o->output, &r->o->wopt);
    return rc == THIN_OK ? 0 : wfail(r);
}

/* Everything after the last item: blobs, manifest sections, trailer. */
static int finish(run *r, const json_t *root)
{
    char err[512];
    uint8_t digest[32];
    thin_hex32(tq_input_digest(&r->in), r->rep->source_digest);
    r->rep->n_layers = layer_count(r, root);
    if (write_blobs(r) != 0)
        return -1;
    if (tq_sections_write(r->w, root, r->o, r->rep, err, sizeof err) != 0) {
        cli_error("%s: %s", r->o->output, err);
        return -1;
    }
    if (thin_writer_finish(r->w, digest) != THIN_OK)
        return wfail(r);
    thin_hex32(digest, r->rep->output_digest);
    return 0;
}

int tq_rewrite(const tq_options *o, tq_report *rep)
{
    run r;
    memset(&r, 0, sizeof r);
    r.o = o;
    r.rep = rep;
    r.max_layer = -1;
    r.n_layers = o->n_layers;
    rep->method = tq_method_name(o->scale);
    json_t *root = NULL;
    double t0 = cli_now();
    int spool = tq_selection_needs_layer_count(o->sel) && !o->n_layers;
    int rc = -1;
    if (tq_input_open(&r.in, o->input, spool) != 0)
        cli_error("%s", r.in.err);
    else if (!tq_input_is_stream(&r.in) && file_prepare(&r, &root) != 0)
        ;
    else if (open_writer(&r) == 0 && process_items(&r, &root) == 0)
        rc = finish(&r, root);
    cli_progress_end();
    rep->seconds = cli_now() - t0;
    thin_writer_free(r.w);
    tq_input_close(&r.in);
    json_decref(root);
    for (size_t i = 0; i < r.n_blobs; i++) {
        free(r.blobs[i].name);
        free(r.blobs[i].data);
    }
    free(r.blobs);
    free(r.out);
    return rc == 0 ? CLI_EXIT_OK : CLI_EXIT_DATA;
}
