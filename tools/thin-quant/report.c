/*
 * report.c — the per-tensor report of thin-quant (see report.h).
 */
#include "report.h"

#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

void tq_report_init(tq_report *r)
{
    memset(r, 0, sizeof *r);
}

void tq_report_free(tq_report *r)
{
    if (!r)
        return;
    for (size_t i = 0; i < r->count; i++)
        free(r->entries[i].name);
    free(r->entries);
    memset(r, 0, sizeof *r);
}

tq_entry *tq_report_add(tq_report *r, const thin_tensor_info *t)
{
    if (r->count == r->cap) {
        size_t cap = r->cap ? r->cap * 2 : 64;
        tq_entry *e = realloc(r->entries, cap * sizeof *e);
        if (!e)
            return NULL;
        r->entries = e;
        r->cap = cap;
    }
    tq_entry *e = &r->entries[r->count];
    memset(e, 0, sizeof *e);
    e->name = strdup(t->name ? t->name : "");
    if (!e->name)
        return NULL;
    e->role = t->role;
    e->layer = t->layer;
    e->from = e->to = t->dtype;
    e->rank = t->rank;
    memcpy(e->shape, t->shape, sizeof e->shape);
    e->bytes_before = e->bytes_after = t->tied_to ? 0 : t->nbytes;
    e->tied = t->tied_to != NULL;
    r->count++;
    return e;
}

void tq_report_totals(const tq_report *r, uint64_t *before, uint64_t *after, size_t counts[3])
{
    *before = *after = 0;
    counts[0] = counts[1] = counts[2] = 0;
    for (size_t i = 0; i < r->count; i++) {
        *before += r->entries[i].bytes_before;
        *after += r->entries[i].bytes_after;
        counts[r->entries[i].action]++;
    }
}

static double mib(uint64_t b)
{
    return (double)b / (1024.0 * 1024.0);
}

void tq_report_print(const tq_report *r, FILE *out)
{
    int header = 0;
    for (size_t i = 0; i < r->count; i++) {
        const tq_entry *e = &r->entries[i];
        if (e->action == TQ_ACTION_COPY && !e->note)
            continue;
        if (!header) {
            fprintf(out, "%-48s %-9s %5s %-12s %10s %10s %10s %9s\n", "tensor", "role", "layer",
                    "dtype", "rel_rms", "max_abs", "cosine", "MiB");
            header = 1;
        }
        char dt[32];
        snprintf(dt, sizeof dt, "%s>%s", thin_dtype_name(e->from),
                 e->to == THIN_DTYPE_F8_E4M3 ? "F8" : thin_dtype_name(e->to));
        if (e->action == TQ_ACTION_COPY) {
            fprintf(out, "%-48s %-9s %5d %-12s  copied: %s\n", e->name, thin_role_name(e->role),
                    (int)e->layer, thin_dtype_name(e->from), e->note);
            continue;
        }
        fprintf(out, "%-48s %-9s %5d %-12s %10.3e %10.3e %10.7f %9.2f\n", e->name,
                thin_role_name(e->role), (int)e->layer, dt, tq_stats_rel_rms(&e->stats),
                e->stats.max_abs_err, tq_stats_cosine(&e->stats), mib(e->bytes_after));
    }
    uint64_t before, after;
    size_t counts[3];
    tq_report_totals(r, &before, &after, counts);
    fprintf(out, "%zu tensors: %zu FP8, %zu BF16, %zu copied; %.2f MiB -> %.2f MiB (%.1f%%)",
            r->count, counts[TQ_ACTION_FP8], counts[TQ_ACTION_BF16], counts[TQ_ACTION_COPY],
            mib(before), mib(after), before ? 100.0 * (double)after / (double)before : 100.0);
    if (r->seconds > 0)
        fprintf(out, " in %.2f s", r->seconds);
    fputc('\n', out);
}

static const char *action_name(tq_action a)
{
    return a == TQ_ACTION_FP8 ? "fp8" : a == TQ_ACTION_BF16 ? "bf16" : "copy";
}

/* A JSON number for a metric; null when not finite (e.g. the relative error of a zero tensor
 * with a non-zero error cannot happen, but keep the output valid JSON whatever). */
static json_t *metric(double v)
{
    return isfinite(v) ? json_real(v) : json_null();
}

static json_t *entry_json(const tq_entry *e)
{
    json_t *shape = json_array();
    for (uint32_t k = 0; k < e->rank; k++)
        json_array_append_new(shape, json_integer((json_int_t)e->shape[k]));
    json_t *o = json_pack("{s:s, s:s, s:I, s:s, s:s, s:s, s:o, s:I, s:I, s:b}", "name", e->name,
                          "role", thin_role_name(e->role), "layer", (json_int_t)e->layer,
                          "action", action_name(e->action), "from", thin_dtype_name(e->from),
                          "to", thin_dtype_name(e->to), "shape", shape, "bytes_before",
                          (json_int_t)e->bytes_before, "bytes_after", (json_int_t)e->bytes_after,
                          "tied", e->tied);
    if (o && e->action != TQ_ACTION_COPY) {
        json_object_set_new(o, "rel_rms", metric(tq_stats_rel_rms(&e->stats)));
        json_object_set_new(o, "max_abs_err", metric(e->stats.max_abs_err));
        json_object_set_new(o, "cosine", metric(tq_stats_cosine(&e->stats)));
    }
    if (o && e->note)
        json_object_set_new(o, "note", json_string(e->note));
    return o;
}

int tq_report_write_json(const tq_report *r, const char *input, const char *output,
                         const char *profile, FILE *out)
{
    uint64_t before, after;
    size_t counts[3];
    tq_report_totals(r, &before, &after, counts);
    json_t *tensors = json_array();
    for (size_t i = 0; i < r->count; i++)
        json_array_append_new(tensors, entry_json(&r->entries[i]));
    json_t *summary = json_pack("{s:I, s:I, s:I, s:I, s:I, s:I, s:f, s:f}", "tensors",
                                (json_int_t)r->count, "fp8", (json_int_t)counts[TQ_ACTION_FP8],
                                "bf16", (json_int_t)counts[TQ_ACTION_BF16], "copied",
                                (json_int_t)counts[TQ_ACTION_COPY], "bytes_before",
                                (json_int_t)before, "bytes_after", (json_int_t)after, "ratio",
                                before ? (double)after / (double)before : 1.0, "seconds",
                                r->seconds);
    json_t *root = json_pack("{s:s, s:s, s:s, s:s, s:s, s:I, s:s, s:s, s:o, s:o}", "tool",
                             "thin-quant", "version", THIN_LIB_VERSION, "input", input, "output",
                             output, "profile", profile, "n_layers", (json_int_t)r->n_layers,
                             "source_digest", r->source_digest, "output_digest",
                             r->output_digest, "summary", summary, "tensors", tensors);
    if (!root)
        return -1;
    if (r->method)
        json_object_set_new(root, "method", json_string(r->method));
    int rc = json_dumpf(root, out, JSON_INDENT(1)) == 0 && fputc('\n', out) != EOF ? 0 : -1;
    json_decref(root);
    return rc;
}
