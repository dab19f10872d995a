/*
 * sections.c — manifest members written by thin-quant (see sections.h).
 *
 * The quant section (fields are only ever added):
 *   {"tool": "thin-quant", "version": "1.0.0", "profile": "quality" | "none",
 *    "method": "fp8_e4m3_row_mse" | "fp8_e4m3_row_absmax",     the row scale rule (--scale)
 *    "scale_dtype": "F32", "scale_suffix": ".scale",
 *    "options": {"roles": "gate,up" | null, "layers": "2-33" | null, "select": ["down:9-26"],
 *                "n_layers": 36, "scale": "mse" | "absmax"},
 *    "fp8": {"gate": "0-35", "up": "0-35", "down": "9-26"},   per role: layers made FP8
 *    "fp8_global": ["lm_head"],                                 roles of global FP8 tensors
 *    "bf16": 12,                                                tensors narrowed to BF16
 *    "kv_cache_dtype": "BF16",                                  when the profile sets it
 *    "source_digest": "hex of the input's whole-file digest",
 *    "bytes_before": N, "bytes_after": N,                       raw tensor bytes
 *    "previous": {...}}                                         the input's quant section, if any
 */
#include "sections.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

json_t *tq_manifest_parse(const char *json, size_t len)
{
    json_t *root = json_loadb(json, len, 0, NULL);
    if (root && !json_is_object(root)) {
        json_decref(root);
        return NULL;
    }
    return root;
}

uint32_t tq_manifest_layers(const json_t *root)
{
    json_t *n = json_object_get(json_object_get(json_object_get(root, "model"), "hparams"),
                                "n_layers");
    if (!json_is_integer(n) || json_integer_value(n) <= 0 ||
        json_integer_value(n) > TQ_MAX_LAYERS)
        return 0;
    return (uint32_t)json_integer_value(n);
}

/* "fp8": per-role layer ranges of the tensors made FP8, and the roles of global ones. */
static void add_fp8_layers(json_t *q, const tq_report *rep)
{
    json_t *by_role = json_object(), *global = json_array();
    unsigned char *bits = calloc(TQ_MAX_LAYERS, 1);
    char ranges[4096];
    for (int role = 0; bits && role < THIN_ROLE_COUNT_; role++) {
        int any = 0, any_global = 0;
        memset(bits, 0, TQ_MAX_LAYERS);
        for (size_t i = 0; i < rep->count; i++) {
            const tq_entry *e = &rep->entries[i];
            if (e->action != TQ_ACTION_FP8 || (int)e->role != role)
                continue;
            if (e->layer >= 0 && e->layer < TQ_MAX_LAYERS)
                bits[e->layer] = 1, any = 1;
            else
                any_global = 1;
        }
        if (any) {
            tq_format_ranges(bits, TQ_MAX_LAYERS, ranges, sizeof ranges);
            json_object_set_new(by_role, thin_role_name((thin_role)role), json_string(ranges));
        }
        if (any_global)
            json_array_append_new(global, json_string(thin_role_name((thin_role)role)));
    }
    free(bits);
    json_object_set_new(q, "fp8", by_role);
    json_object_set_new(q, "fp8_global", global);
}

json_t *tq_quant_section(const tq_options *o, const tq_report *rep, const json_t *previous)
{
    json_t *sel = json_array();
    for (size_t i = 0; i < o->n_select; i++)
        json_array_append_new(sel, json_string(o->select_args[i]));
    json_t *opts = json_pack("{s:s?, s:s?, s:o, s:I, s:s}", "roles", o->roles_arg, "layers",
                             o->layers_arg, "select", sel, "n_layers",
                             (json_int_t)rep->n_layers, "scale", tq_scale_name(o->scale));
    uint64_t before, after;
    size_t counts[3];
    tq_report_totals(rep, &before, &after, counts);
    json_t *q = json_pack("{s:s, s:s, s:s, s:s, s:s, s:s, s:o}", "tool", "thin-quant", "version",
                          THIN_LIB_VERSION, "profile", tq_profile_name(o->sel->profile), "method",
                          tq_method_name(o->scale), "scale_dtype", "F32", "scale_suffix", ".scale",
                          "options", opts);
    if (!q)
        return NULL;
    add_fp8_layers(q, rep);
    json_object_set_new(q, "bf16", json_integer((json_int_t)counts[TQ_ACTION_BF16]));
    if (tq_selection_runtime_bf16(o->sel))
        json_object_set_new(q, "kv_cache_dtype", json_string("BF16"));
    json_object_set_new(q, "source_digest", json_string(rep->source_digest));
    json_object_set_new(q, "bytes_before", json_integer((json_int_t)before));
    json_object_set_new(q, "bytes_after", json_integer((json_int_t)after));
    if (previous)
        json_object_set(q, "previous", (json_t *)previous);
    return q;
}

/* Sets one member from a JSON value. */
static int set_member(thin_writer *w, const char *key, const json_t *v, char *err, size_t errlen)
{
    char *text = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY | JSON_REAL_PRECISION(17));
    if (!text) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    thin_status rc = thin_writer_set_section(w, key, text);
    free(text);
    if (rc != THIN_OK) {
        snprintf(err, errlen, "%s", thin_writer_error(w));
        return -1;
    }
    return 0;
}

int tq_sections_write(thin_writer *w, const json_t *root, const tq_options *o,
                      const tq_report *rep, char *err, size_t errlen)
{
    const char *key;
    json_t *v;
    json_object_foreach((json_t *)root, key, v) {
        if (!strcmp(key, "format") || !strcmp(key, "tensors") || !strcmp(key, "blobs") ||
            !strcmp(key, "quant") || !strcmp(key, "runtime"))
            continue;
        if (set_member(w, key, v, err, errlen) != 0)
            return -1;
    }
    json_t *runtime = json_object_get(root, "runtime");
    runtime = json_is_object(runtime) ? json_deep_copy(runtime) : json_object();
    if (runtime && tq_selection_runtime_bf16(o->sel))
        json_object_set_new(runtime, "kv_cache_dtype", json_string("BF16"));
    int rc = 0;
    if (!runtime)
        rc = -1, snprintf(err, errlen, "out of memory");
    else if (json_object_size(runtime) > 0 || json_object_get(root, "runtime"))
        rc = set_member(w, "runtime", runtime, err, errlen);
    json_decref(runtime);
    if (rc != 0)
        return -1;
    json_t *q = tq_quant_section(o, rep, json_object_get(root, "quant"));
    if (!q) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    rc = set_member(w, "quant", q, err, errlen);
    json_decref(q);
    return rc;
}
