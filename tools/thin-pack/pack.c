/* pack.c — the packing job: planning tensors, writing their bytes, side files (see pack.h). */
#include "pack_private.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "arch.h"
#include "cli.h"
#include "gguf_vocab.h"
#include "roles.h"

int pack_fail(const char *fmt, ...)
{
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    cli_error("%s", msg);
    return -1;
}

static void note_name(char *list, size_t cap, size_t *count, const char *name)
{
    if (++*count <= 3) {
        size_t l = strlen(list);
        snprintf(list + l, cap - l, "%s%s", l ? ", " : "", name);
    }
}

static thin_dtype out_dtype(const pack *p, thin_dtype in)
{
    return p->o->to_bf16 && (in == THIN_DTYPE_F32 || in == THIN_DTYPE_F16) ? THIN_DTYPE_BF16 : in;
}

int pack_plan_shard(pack *p, const st_header *h, const char *label)
{
    if (p->n_t + h->n_tensors > p->cap_t) {
        size_t cap = (p->n_t + h->n_tensors) * 2;
        pack_tensor *t = realloc(p->t, cap * sizeof *t);
        if (!t)
            return pack_fail("out of memory");
        p->t = t;
        p->cap_t = cap;
    }
    for (size_t i = 0; i < h->n_tensors; i++) {
        const st_tensor *s = &h->tensors[i];
        json_t *prev = json_object_get(p->seen, s->name);
        if (prev)
            return pack_fail("%s: tensor '%s' is also in %s", label, s->name,
                             p->t[json_integer_value(prev)].shard);
        pack_tensor *t = &p->t[p->n_t];
        memset(t, 0, sizeof *t);
        roles_kind k = roles_map_family(p->family, s->name, &t->role, &t->layer, &t->expert);
        static const char *const vision[] = {"vision_tower.", "multi_modal_projector.",
                                             "model.vision_tower.", "model.multi_modal_projector."};
        int is_vision = 0;
        for (size_t v = 0; k == ROLES_UNKNOWN && v < sizeof vision / sizeof vision[0]; v++)
            is_vision |= strncmp(s->name, vision[v], strlen(vision[v])) == 0;
        if (is_vision)
            p->n_vision++;
        else if (k == ROLES_UNKNOWN)
            note_name(p->unknown_names, sizeof p->unknown_names, &p->n_unknown, s->name);
        if (k == ROLES_BIAS)
            note_name(p->bias_names, sizeof p->bias_names, &p->n_bias, s->name);
        t->dtype = out_dtype(p, s->dtype);
        t->rank = s->rank;
        memcpy(t->shape, s->shape, sizeof t->shape);
        t->name = strdup(s->name);
        t->shard = strdup(label);
        if (!t->name || !t->shard ||
            json_object_set_new(p->seen, s->name, json_integer((json_int_t)p->n_t))) {
            free(t->name);
            free(t->shard);
            return pack_fail("out of memory");
        }
        p->n_t++;
        p->total += s->end - s->begin;
    }
    return 0;
}

static int begin(pack *p, const st_tensor *t)
{
    json_t *idx = json_object_get(p->seen, t->name);
    if (!idx)
        return pack_fail("internal error: tensor '%s' was not planned", t->name);
    const pack_tensor *pt = &p->t[json_integer_value(idx)];
    thin_tensor_desc d = {.name = pt->name, .role = pt->role, .layer = pt->layer,
                          .dtype = pt->dtype, .rank = pt->rank, .has_expert = pt->expert >= 0,
                          .expert = pt->expert};
    memcpy(d.shape, pt->shape, sizeof d.shape);
    if (thin_writer_begin_tensor(p->w, &d) != THIN_OK)
        return pack_fail("%s", thin_writer_error(p->w));
    return 0;
}

/* Writes n source bytes of t (converted when the output dtype differs). */
static int put(pack *p, const st_tensor *t, const uint8_t *src, size_t n)
{
    thin_dtype od = out_dtype(p, t->dtype);
    thin_status s;
    if (od == t->dtype) {
        s = thin_writer_write(p->w, src, n);
    } else {
        size_t es = st_dtype_size(t->dtype), count = n / es;
        s = thin_convert(p->cvt, od, src, t->dtype, count);
        if (s == THIN_OK)
            s = thin_writer_write(p->w, p->cvt, count * st_dtype_size(od));
    }
    if (s != THIN_OK)
        return pack_fail("%s", thin_writer_error(p->w));
    p->done += n;
    cli_progress("packing", p->done, p->total);
    return 0;
}

static int end(pack *p)
{
    if (thin_writer_end_tensor(p->w) != THIN_OK)
        return pack_fail("%s", thin_writer_error(p->w));
    return 0;
}

int pack_write_mem(pack *p, const st_tensor *t, const uint8_t *data)
{
    /* zero copy: big pieces straight from the mapping; converted ones through cvt */
    size_t piece = out_dtype(p, t->dtype) == t->dtype ? (size_t)64 << 20 : PACK_BLOCK;
    if (begin(p, t))
        return -1;
    for (uint64_t off = 0; off < t->end - t->begin;) {
        size_t n = (size_t)(t->end - t->begin - off < piece ? t->end - t->begin - off : piece);
        if (put(p, t, data + t->begin + off, n))
            return -1;
        off += n;
    }
    return end(p);
}

int pack_write_read(pack *p, const st_tensor *t, pack_read_fn rd, void *ctx, const char *label)
{
    if (begin(p, t))
        return -1;
    for (uint64_t off = 0; off < t->end - t->begin;) {
        size_t want = (size_t)(t->end - t->begin - off < PACK_BLOCK ? t->end - t->begin - off
                                                                    : PACK_BLOCK);
        size_t got;
        if (rd(ctx, p->buf, want, &got))
            return -1;
        if (got < want)
            return pack_fail("%s: truncated: the input ends inside tensor '%s' (byte %llu of "
                             "%llu)", label, t->name, (unsigned long long)(off + got),
                             (unsigned long long)(t->end - t->begin));
        if (put(p, t, p->buf, want))
            return -1;
        off += want;
    }
    return end(p);
}

int pack_keep_metadata(pack *p, const char *base, const st_header *h)
{
    if (h->metadata && json_object_set(p->st_meta, base, h->metadata))
        return pack_fail("out of memory");
    return 0;
}

int pack_take_side(pack *p, const char *base, uint8_t *data, size_t size)
{
    int i = source_side_index(base);
    if (i < 0) {
        free(data);
        return 0;
    }
    if (p->side[i].name) {
        free(data);
        return pack_fail("%s: the input holds %s twice", p->o->input, base);
    }
    size_t n = strlen(base);
    json_error_t je;
    json_t *j = n > 5 && strcmp(base + n - 5, ".json") == 0
                    ? json_loadb((const char *)data, size, 0, &je) : json_object();
    int ok = json_is_object(j), parsed = j != NULL;
    if (ok && i == 0) /* config.json: the family names the roles of the tensors planned after it */
        p->family = arch_family(json_string_value(json_array_get(json_object_get(j, "architectures"), 0)));
    json_decref(j);
    if (!ok) {
        free(data);
        if (parsed)
            return pack_fail("%s: %s is not a JSON object", p->o->input, base);
        return pack_fail("%s: %s is not valid JSON: %s (line %d)", p->o->input, base, je.text,
                         je.line);
    }
    p->side[i].name = strdup(base);
    p->side[i].data = data;
    p->side[i].size = size;
    return p->side[i].name ? 0 : pack_fail("out of memory");
}

/* --tokenizer FILE: a tokenizer.json (with tokenizer_config.json beside it) or a vocab GGUF. */
static int read_tokenizer(pack *p, const char *path)
{
    char err[512];
    uint8_t *data;
    size_t size;
    int rc = source_read_file(path, &data, &size, err, sizeof err);
    if (rc)
        return rc > 0 ? pack_fail("%s: no such file", path) : pack_fail("%s", err);
    uint64_t n_tokens;
    p->tok_gguf = gguf_is_gguf(data, size);
    if (p->tok_gguf && gguf_vocab_check(data, size, &n_tokens, err, sizeof err)) {
        free(data);
        return pack_fail("%s: %s", path, err);
    }
    json_t *j = p->tok_gguf ? NULL : json_loadb((const char *)data, size, 0, NULL);
    if (!p->tok_gguf && !json_is_object(j)) {
        json_decref(j);
        free(data);
        return pack_fail("%s: neither a tokenizer.json (JSON object) nor a GGUF file", path);
    }
    json_decref(j);
    p->tok[0] = (pack_blob){strdup(p->tok_gguf ? "tokenizer.gguf" : "tokenizer.json"), data, size};
    if (!p->tok[0].name)
        return pack_fail("out of memory");
    if (p->tok_gguf)
        return 0;
    char *cfg, *dir = strdup(path), *slash = dir ? strrchr(dir, '/') : NULL;
    if (!dir)
        return pack_fail("out of memory");
    if (slash)
        *slash = 0;
    rc = asprintf(&cfg, "%s/tokenizer_config.json", slash ? dir : ".") < 0 ? -1 : 0;
    free(dir);
    if (rc)
        return pack_fail("out of memory");
    rc = source_read_file(cfg, &data, &size, err, sizeof err);
    free(cfg);
    if (rc < 0)
        return pack_fail("%s", err);
    if (rc == 0 && !(p->tok[1] = (pack_blob){strdup("tokenizer_config.json"), data, size}).name)
        return pack_fail("out of memory");
    return 0;
}

static void pack_free(pack *p)
{
    thin_writer_free(p->w); /* abandons an unfinished output: its temporary file is removed */
    EVP_MD_CTX_free(p->sha);
    for (int i = 0; i < PACK_N_SIDE; i++) {
        free(p->side[i].name);
        free(p->side[i].data);
    }
    for (int i = 0; i < 2; i++) {
        free(p->tok[i].name);
        free(p->tok[i].data);
    }
    for (size_t i = 0; i < p->n_t; i++) {
        free(p->t[i].name);
        free(p->t[i].shard);
    }
    free(p->t);
    json_decref(p->weight_map);
    json_decref(p->st_meta);
    json_decref(p->source_files);
    json_decref(p->seen);
    free(p->cvt);
    free(p->buf);
}

int pack_run(const pack_options *o)
{
    pack p;
    memset(&p, 0, sizeof p);
    p.o = o;
    p.sha = EVP_MD_CTX_new();
    p.st_meta = json_object();
    p.source_files = json_array();
    p.seen = json_object();
    p.cvt = malloc(PACK_BLOCK);
    p.buf = malloc(PACK_BLOCK);
    int rc = -1;
    source_kind kind = SOURCE_ARCHIVE;
    char err[1024];
    if (!p.sha || !p.st_meta || !p.source_files || !p.seen || !p.cvt || !p.buf ||
        EVP_DigestInit_ex(p.sha, EVP_sha256(), NULL) != 1)
        pack_fail("out of memory");
    else if (o->tokenizer && read_tokenizer(&p, o->tokenizer))
        ;
    else if (strcmp(o->input, "-") != 0 && source_classify(o->input, &kind, err, sizeof err))
        pack_fail("%s", err);
    else if (kind == SOURCE_GGUF)
        pack_fail("%s: a GGUF file is not a model to pack (use --tokenizer for a vocab-only GGUF)",
                  o->input);
    else if (kind == SOURCE_ARCHIVE)
        rc = pack_stream(&p, kind) || pack_finish(&p) ? -1 : 0;
    else {
        p.hash_sides = 1;
        rc = pack_disk(&p, kind);
    }
    pack_free(&p);
    return rc ? CLI_EXIT_DATA : CLI_EXIT_OK;
}
