/* show.c — thin-inspect's listings from a manifest (see show.h). */
#include "show.h"

#include <stdlib.h>
#include <string.h>
#include <strings.h>

static uint64_t u64(const json_t *o, const char *k)
{
    const json_t *v = json_object_get(o, k);
    return json_is_integer(v) && json_integer_value(v) > 0 ? (uint64_t)json_integer_value(v) : 0;
}

static const char *str(const json_t *o, const char *k, const char *def)
{
    const char *s = json_string_value(json_object_get(o, k));
    return s ? s : def;
}

static long long layer_of(const json_t *t)
{
    const json_t *l = json_object_get(t, "layer");
    return json_is_integer(l) ? json_integer_value(l) : -1;
}

static uint64_t stored_of(const json_t *t)
{
    uint64_t s = 0;
    size_t i;
    json_t *c;
    json_array_foreach(json_object_get(t, "chunks"), i, c)
        s += u64(c, "stored");
    return s;
}

int show_match_fields(const show_filter *f, const char *role, long long layer, const char *dtype)
{
    if (f->role && strcmp(role, f->role) != 0)
        return 0;
    if (f->layer != -2 && layer != f->layer)
        return 0;
    return !f->dtype || strcasecmp(dtype, f->dtype) == 0;
}

int show_match(const show_filter *f, const json_t *t)
{
    return show_match_fields(f, str(t, "role", "other"), layer_of(t), str(t, "dtype", ""));
}

static void shape_text(const json_t *t, char *buf, size_t cap)
{
    size_t i, n = 0;
    json_t *d;
    buf[0] = 0;
    n += (size_t)snprintf(buf, cap, "[");
    json_array_foreach(json_object_get(t, "shape"), i, d)
        if (n < cap)
            n += (size_t)snprintf(buf + n, cap - n, "%s%lld", i ? ", " : "",
                                  (long long)json_integer_value(d));
    if (n < cap)
        snprintf(buf + n, cap - n, "]");
}

static uint64_t total_bytes(const json_t *m)
{
    uint64_t s = 0;
    size_t i;
    json_t *t;
    json_array_foreach(json_object_get(m, "tensors"), i, t)
        if (!json_object_get(t, "tied_to"))
            s += u64(t, "nbytes");
    return s;
}

/* {key: {"tensors", "bytes", "share"}} over the matching, untied tensors. */
static json_t *summary(const json_t *m, const show_filter *f, const char *key)
{
    json_t *out = json_object(), *t;
    size_t i;
    double total = (double)total_bytes(m);
    json_array_foreach(json_object_get(m, "tensors"), i, t) {
        if (!show_match(f, t) || json_object_get(t, "tied_to"))
            continue;
        const char *k = str(t, key, "?");
        json_t *e = json_object_get(out, k);
        if (!e)
            json_object_set_new(out, k, e = json_pack("{sI sI sf}", "tensors", (json_int_t)0,
                                                      "bytes", (json_int_t)0, "share", 0.0));
        json_int_t b = json_integer_value(json_object_get(e, "bytes")) + (json_int_t)u64(t, "nbytes");
        json_object_set_new(e, "tensors",
                            json_integer(json_integer_value(json_object_get(e, "tensors")) + 1));
        json_object_set_new(e, "bytes", json_integer(b));
        json_object_set_new(e, "share", json_real(total > 0 ? (double)b / total : 0));
    }
    return out;
}

static void print_summary(FILE *out, const json_t *m, const show_filter *f, const char *key)
{
    json_t *s = summary(m, f, key), *e;
    const char *k;
    fprintf(out, "\nby %s:\n", key);
    json_object_foreach(s, k, e)
        fprintf(out, "  %-14s %6lld tensors %14lld bytes %6.2f%%\n", k,
                (long long)json_integer_value(json_object_get(e, "tensors")),
                (long long)json_integer_value(json_object_get(e, "bytes")),
                100.0 * json_real_value(json_object_get(e, "share")));
    json_decref(s);
}

static void print_model(FILE *out, const json_t *m)
{
    const json_t *model = json_object_get(m, "model"), *hp = json_object_get(model, "hparams");
    const json_t *tok = json_object_get(m, "tokenizer"), *q = json_object_get(m, "quant");
    const json_t *tape = json_object_get(m, "tape");
    fprintf(out, "model: %s (%s)\n", str(model, "architecture", "unknown"),
            str(model, "family", "unknown"));
    if (hp)
        fprintf(out, "  layers %llu, hidden %llu, ffn %llu, heads %llu / kv %llu, head_dim %llu, "
                "vocab %llu, context %llu, rope_theta %g%s\n",
                (unsigned long long)u64(hp, "n_layers"), (unsigned long long)u64(hp, "hidden_size"),
                (unsigned long long)u64(hp, "intermediate_size"),
                (unsigned long long)u64(hp, "n_heads"), (unsigned long long)u64(hp, "n_kv_heads"),
                (unsigned long long)u64(hp, "head_dim"), (unsigned long long)u64(hp, "vocab_size"),
                (unsigned long long)u64(hp, "max_position_embeddings"),
                json_number_value(json_object_get(hp, "rope_theta")),
                json_is_true(json_object_get(hp, "tie_word_embeddings")) ? ", tied embeddings" : "");
    if (hp && json_is_integer(json_object_get(hp, "n_experts"))) {
        size_t l, n_sparse = 0;
        const json_t *f;
        json_array_foreach(json_object_get(hp, "moe_layers"), l, f) n_sparse += json_integer_value(f) != 0;
        fprintf(out, "  mixture of %llu experts, %llu a token%s, expert ffn %llu, in %zu of %llu layers\n",
                (unsigned long long)u64(hp, "n_experts"), (unsigned long long)u64(hp, "n_experts_per_tok"),
                json_is_true(json_object_get(hp, "norm_topk_prob")) ? " (weights renormalized)" : "",
                (unsigned long long)u64(hp, "moe_intermediate_size"), n_sparse,
                (unsigned long long)u64(hp, "n_layers"));
    }
    const json_t *prov = json_object_get(model, "provenance");
    if (prov)
        fprintf(out, "  source %s, source sha256 %s\n", str(prov, "source", "?"),
                str(prov, "source_digest", "?"));
    fprintf(out, "tokenizer: %s\n", tok ? str(tok, "format", "?") : "none");
    const char *why = json_string_value(json_object_get(model, "no_tape"));
    if (!tape && why)
        fprintf(out, "tape: none (%s)\n", why);
    else if (!tape)
        fprintf(out, "tape: none\n");
    else {
        /* the attention ops' sliding windows, if any: "window W on N of L layers" */
        const json_t *ops = json_object_get(tape, "ops"), *o;
        size_t i, n_att = 0, n_win = 0;
        json_int_t win = 0;
        json_array_foreach(ops, i, o) {
            if (strcmp(str(o, "op", ""), "attention") != 0)
                continue;
            n_att++;
            const json_t *w = json_object_get(o, "window");
            if (json_is_integer(w))
                n_win++, win = json_integer_value(w) > win ? json_integer_value(w) : win;
        }
        fprintf(out, "tape: %zu ops, %zu buffers", json_array_size(ops),
                json_object_size(json_object_get(tape, "buffers")));
        if (n_win)
            fprintf(out, ", sliding window of %lld positions on %zu of %zu layers", (long long)win,
                    n_win, n_att);
        fputc('\n', out);
    }
    if (q) {
        char *qs = json_dumps(q, JSON_COMPACT);
        fprintf(out, "quant: %s\n", qs ? qs : "?");
        free(qs);
    }
}

void show_text(FILE *out, const show_file *sf, const show_filter *f)
{
    const json_t *m = sf->manifest;
    fprintf(out, "%s: %zu tensors, %zu blobs, %llu bytes, digest %s\n", sf->label,
            json_array_size(json_object_get(m, "tensors")),
            json_array_size(json_object_get(m, "blobs")), (unsigned long long)sf->size,
            sf->digest);
    print_model(out, m);
    fprintf(out, "\n%-52s %-14s %5s %-8s %-16s %12s %12s %6s\n", "name", "role", "layer", "dtype",
            "shape", "bytes", "stored", "chunks");
    size_t i;
    json_t *t;
    char shape[128];
    json_array_foreach(json_object_get(m, "tensors"), i, t) {
        if (!show_match(f, t))
            continue;
        shape_text(t, shape, sizeof shape);
        const char *tied = str(t, "tied_to", NULL);
        const json_t *ex = json_object_get(t, "expert");
        fprintf(out, "%-52s %-14s %5lld %-8s %-16s %12llu %12llu %6zu%s%s", str(t, "name", "?"),
                str(t, "role", "other"), layer_of(t), str(t, "dtype", "?"), shape,
                (unsigned long long)(tied ? 0 : u64(t, "nbytes")),
                (unsigned long long)stored_of(t), json_array_size(json_object_get(t, "chunks")),
                tied ? "  tied to " : "", tied ? tied : "");
        if (json_is_integer(ex))
            fprintf(out, "  expert %lld", (long long)json_integer_value(ex));
        fputc('\n', out);
    }
    print_summary(out, m, f, "role");
    print_summary(out, m, f, "dtype");
    fprintf(out, "\ntotal: %llu tensor bytes\n", (unsigned long long)total_bytes(m));
    if (sf->verified == 1)
        fprintf(out, "verified: every chunk checksum and the whole-file digest match\n");
}

int show_tape(FILE *out, const json_t *m)
{
    const json_t *tape = json_object_get(m, "tape"), *op, *b;
    if (!tape)
        return -1;
    const char *k;
    size_t i;
    fprintf(out, "tape version %lld, buffers:", (long long)u64(tape, "version"));
    json_object_foreach((json_t *)json_object_get(tape, "buffers"), k, b)
        fprintf(out, " %s=%lld", k, (long long)json_integer_value(b));
    fprintf(out, "\n");
    json_array_foreach(json_object_get(tape, "ops"), i, op) {
        const json_t *l = json_object_get(op, "layer");
        fprintf(out, "%5zu  %-4s %-13s", i, "", str(op, "op", "?"));
        if (json_is_integer(l))
            fprintf(out, " L%-3lld", (long long)json_integer_value(l));
        else
            fprintf(out, " %-4s", "");
        json_t *v;
        json_object_foreach((json_t *)op, k, v) {
            if (!strcmp(k, "op") || !strcmp(k, "layer"))
                continue;
            const size_t n = json_array_size(v);
            if (n > 3 && (json_is_string(json_array_get(v, 0)) || json_is_array(json_array_get(v, 0)))) {
                /* a moe op's weights, one per expert: the first and the last */
                char *first = json_dumps(json_array_get(v, 0), JSON_COMPACT | JSON_ENCODE_ANY);
                char *last = json_dumps(json_array_get(v, n - 1), JSON_COMPACT | JSON_ENCODE_ANY);
                fprintf(out, " %s=[%zu: %s .. %s]", k, n, first ? first : "?", last ? last : "?");
                free(first);
                free(last);
                continue;
            }
            char *vs = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY);
            fprintf(out, " %s=%s", k, json_is_string(v) ? json_string_value(v) : (vs ? vs : "?"));
            free(vs);
        }
        fprintf(out, "\n");
    }
    return 0;
}

json_t *show_json(const show_file *sf, const show_filter *f, int with_tape)
{
    const json_t *m = sf->manifest, *model = json_object_get(m, "model");
    const json_t *fmt = json_object_get(m, "format"), *tape = json_object_get(m, "tape");
    json_t *mc = model ? json_deep_copy(model) : json_null();
    if (json_is_object(mc))
        json_object_del(mc, "config");
    json_t *tensors = json_array(), *blobs = json_array(), *t;
    size_t i;
    json_array_foreach(json_object_get(m, "tensors"), i, t) {
        if (!show_match(f, t))
            continue;
        json_t *e = json_pack("{ss ss sI ss sO sI sI sI ss}", "name", str(t, "name", "?"), "role",
                              str(t, "role", "other"), "layer", (json_int_t)layer_of(t), "dtype",
                              str(t, "dtype", "?"), "shape", json_object_get(t, "shape"),
                              "nbytes", (json_int_t)u64(t, "nbytes"), "stored",
                              (json_int_t)stored_of(t), "chunks",
                              (json_int_t)json_array_size(json_object_get(t, "chunks")), "codec",
                              str(json_array_get(json_object_get(t, "chunks"), 0), "codec", "none"));
        if (e && json_object_get(t, "tied_to"))
            json_object_set(e, "tied_to", json_object_get(t, "tied_to"));
        if (e && json_object_get(t, "scale"))
            json_object_set(e, "scale", json_object_get(t, "scale"));
        if (e && json_object_get(t, "expert"))
            json_object_set(e, "expert", json_object_get(t, "expert"));
        json_array_append_new(tensors, e);
    }
    json_array_foreach(json_object_get(m, "blobs"), i, t)
        json_array_append_new(blobs, json_pack("{ss sI sI}", "name", str(t, "name", "?"), "nbytes",
                                               (json_int_t)u64(t, "nbytes"), "stored",
                                               (json_int_t)stored_of(t)));
    json_t *o = json_pack("{si ss sI ss s{sI sI} so sO sO so so so so sI so}", "schema", 1, "file",
                          sf->label, "size", (json_int_t)sf->size, "digest", sf->digest, "format",
                          "major", (json_int_t)u64(fmt, "major"), "minor",
                          (json_int_t)u64(fmt, "minor"), "model", mc, "tokenizer",
                          json_object_get(m, "tokenizer") ? json_object_get(m, "tokenizer")
                                                          : json_null(),
                          "quant", json_object_get(m, "quant") ? json_object_get(m, "quant")
                                                              : json_null(),
                          "tape_ops", tape ? json_integer((json_int_t)json_array_size(
                                                 json_object_get(tape, "ops")))
                                           : json_null(),
                          "tensors", tensors, "blobs", blobs, "by_role", summary(m, f, "role"),
                          "total_bytes", (json_int_t)total_bytes(m), "verified",
                          sf->verified < 0 ? json_null() : json_boolean(sf->verified == 1));
    if (o)
        json_object_set_new(o, "by_dtype", summary(m, f, "dtype"));
    if (o && with_tape)
        json_object_set(o, "tape", tape ? (json_t *)tape : json_null());
    return o;
}
