/* pack_model.c — the end of a pack: tied lm_head, blobs, model/tokenizer/tape sections. */
#include "pack_private.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "arch.h"
#include "roles.h"
#include "cli.h"

int pack_check_weight_map(pack *p)
{
    if (!p->weight_map)
        return 0;
    const char *k;
    json_t *v;
    json_object_foreach(p->weight_map, k, v) {
        json_t *idx = json_object_get(p->seen, k);
        if (!idx)
            return pack_fail("%s: the index lists tensor '%s' but %s does not hold it",
                             p->o->input, k, json_string_value(v));
        const char *shard = p->t[json_integer_value(idx)].shard;
        if (strcmp(shard, json_string_value(v)) != 0)
            return pack_fail("%s: the index puts tensor '%s' in %s but it is in %s", p->o->input,
                             k, json_string_value(v), shard);
    }
    for (size_t i = 0; i < p->n_t; i++)
        if (!json_object_get(p->weight_map, p->t[i].name))
            return pack_fail("%s: tensor '%s' of %s is missing from the index", p->o->input,
                             p->t[i].name, p->t[i].shard);
    return 0;
}

static int lookup(void *user, const char *name, uint32_t *rank, uint64_t shape[THIN_MAX_RANK])
{
    const pack *p = user;
    json_t *idx = json_object_get(p->seen, name);
    if (!idx)
        return 0;
    const pack_tensor *t = &p->t[json_integer_value(idx)];
    *rank = t->rank;
    memcpy(shape, t->shape, sizeof t->shape);
    return 1;
}

/* Prints a warning of arch_build and keeps the last one in user (char[256]): when no tape is
 * written, it says why. */
static void on_warn(void *user, const char *msg)
{
    cli_warn("%s", msg);
    snprintf((char *)user, 256, "%s", msg);
}

static int parse_side(const pack *p, int i, json_t **out)
{
    *out = NULL;
    if (!p->side[i].name)
        return 0;
    json_error_t je;
    *out = json_loadb((const char *)p->side[i].data, p->side[i].size, 0, &je);
    if (!*out || !json_is_object(*out)) {
        json_decref(*out);
        *out = NULL;
        return pack_fail("%s: %s is not a JSON object: %s (line %d)", p->o->input,
                         source_side_names[i], je.text, je.line);
    }
    return 0;
}

/* The tied LM head entry (head, e.g. lm_head.weight): no data, shares the embedding (embed). */
static int add_tied(pack *p, const char *embed, const char *head)
{
    json_t *idx = json_object_get(p->seen, embed);
    if (!idx)
        return pack_fail("internal error: no tensor '%s' to tie the LM head to", embed);
    const pack_tensor *e = &p->t[json_integer_value(idx)];
    thin_tensor_desc d = {.name = head, .role = THIN_ROLE_LM_HEAD, .layer = -1,
                          .dtype = e->dtype, .rank = e->rank, .tied_to = embed};
    memcpy(d.shape, e->shape, sizeof d.shape);
    if (thin_writer_begin_tensor(p->w, &d) != THIN_OK || thin_writer_end_tensor(p->w) != THIN_OK)
        return pack_fail("%s", thin_writer_error(p->w));
    return 0;
}

static void summary_warnings(const pack *p)
{
    if (p->n_vision)
        cli_warn("%zu tensor%s of a vision tower and its projector kept with role other (the tape "
                 "runs the text model)", p->n_vision, p->n_vision == 1 ? "" : "s");
    if (p->n_unknown)
        cli_warn("%zu tensor%s with names outside the Llama family naming kept with role other: "
                 "%s%s", p->n_unknown, p->n_unknown == 1 ? "" : "s", p->unknown_names,
                 p->n_unknown > 3 ? ", ..." : "");
    if (p->n_bias)
        cli_warn("%zu bias tensor%s kept with role other (the execution tape cannot use biases):"
                 " %s%s", p->n_bias, p->n_bias == 1 ? "" : "s", p->bias_names,
                 p->n_bias > 3 ? ", ..." : "");
}

static int add_blob(pack *p, const pack_blob *b)
{
    if (thin_writer_add_blob(p->w, b->name, b->data, b->size) != THIN_OK)
        return pack_fail("%s", thin_writer_error(p->w));
    return 0;
}

/* Side files (minus tokenizer files replaced by --tokenizer), then the --tokenizer files. */
static int add_blobs(pack *p)
{
    for (int i = 0; i < PACK_N_SIDE; i++) {
        if (!p->side[i].name)
            continue;
        int replaced = p->tok[0].name && (strcmp(p->side[i].name, "tokenizer.json") == 0 ||
                                          strcmp(p->side[i].name, "tokenizer_config.json") == 0);
        if (!replaced && add_blob(p, &p->side[i]))
            return -1;
    }
    for (int i = 0; i < 2; i++)
        if (p->tok[i].name && add_blob(p, &p->tok[i]))
            return -1;
    return 0;
}

static const pack_blob *blob_named(const pack *p, const char *name)
{
    for (int i = 0; i < 2; i++)
        if (p->tok[i].name && strcmp(p->tok[i].name, name) == 0)
            return &p->tok[i];
    for (int i = 0; !p->tok[0].name && i < PACK_N_SIDE; i++)
        if (p->side[i].name && strcmp(p->side[i].name, name) == 0)
            return &p->side[i];
    if (strcmp(name, "chat_template.jinja") == 0 && p->side[4].name)
        return &p->side[4];
    if (strcmp(name, "chat_template.json") == 0 && p->side[5].name)
        return &p->side[5];
    return NULL;
}

static json_t *tokenizer_section(const pack *p)
{
    if (p->tok_gguf)
        return json_pack("{ss ss}", "format", "gguf", "blob", "tokenizer.gguf");
    if (!blob_named(p, "tokenizer.json")) {
        cli_warn("no tokenizer.json: packed without a tokenizer");
        return NULL;
    }
    json_t *t = json_pack("{ss ss}", "format", "hf", "tokenizer_json", "tokenizer.json");
    if (t && blob_named(p, "tokenizer_config.json"))
        json_object_set_new(t, "tokenizer_config", json_string("tokenizer_config.json"));
    /* a template file of its own: chat_template.jinja, or a processor's chat_template.json */
    if (t && blob_named(p, "chat_template.jinja"))
        json_object_set_new(t, "chat_template", json_string("chat_template.jinja"));
    else if (t && blob_named(p, "chat_template.json"))
        json_object_set_new(t, "chat_template", json_string("chat_template.json"));
    return t;
}

static json_t *provenance(pack *p, const char *digest_hex)
{
    const thin_writer_options *w = &p->o->writer;
    return json_pack("{ss ss ss ss sO s{ss ss sI sI} sO}", "tool", "thin-pack", "version",
                     THIN_LIB_VERSION, "source", p->o->input, "source_digest", digest_hex,
                     "source_files", p->source_files, "options", "dtype",
                     p->o->to_bf16 ? "bf16" : "keep", "compress",
                     p->o->compress ? p->o->compress : "none", "chunk_size",
                     (json_int_t)(w->chunk_size ? w->chunk_size : THIN_DEFAULT_CHUNK), "threads",
                     (json_int_t)w->threads, "safetensors_metadata", p->st_meta);
}

static void hash_rest(pack *p, char hex[65])
{
    uint8_t d[32];
    unsigned len = 0;
    for (int i = 0; p->hash_sides && i < PACK_N_SIDE; i++)
        if (p->side[i].name)
            EVP_DigestUpdate(p->sha, p->side[i].data, p->side[i].size);
    for (int i = 0; i < 2; i++)
        if (p->tok[i].name)
            EVP_DigestUpdate(p->sha, p->tok[i].data, p->tok[i].size);
    EVP_DigestFinal_ex(p->sha, d, &len);
    thin_hex32(d, hex);
}

static int set_section(pack *p, const char *key, json_t *v)
{
    char *text = v ? json_dumps(v, JSON_COMPACT | JSON_REAL_PRECISION(17)) : NULL;
    thin_status s = text ? thin_writer_set_section(p->w, key, text) : THIN_E_NOMEM;
    free(text);
    if (s != THIN_OK)
        return pack_fail("%s", s == THIN_E_NOMEM ? "out of memory" : thin_writer_error(p->w));
    return 0;
}

/* The model section (§8); *tape receives the tape or NULL. */
static int model_section(pack *p, json_t **model, json_t **tape, int *tie, char embed[64],
                         char head[64])
{
    json_t *config, *gen;
    char hex[65], why[256] = "";
    arch_model am = {.architecture = "unknown", .family = "unknown"};
    *tie = 0;
    if (parse_side(p, 0, &config) || parse_side(p, 1, &gen))
        return -1;
    if (!config)
        cli_warn("no config.json: packed without hyperparameters or execution tape");
    else if (arch_build(config, lookup, p, on_warn, why, &am))
        return pack_fail("out of memory");
    if (am.tape && roles_family_post_norms(am.family))
        for (size_t i = 0; i < p->n_t; i++) {
            thin_role r;
            int32_t l, e;
            roles_map_family(am.family, p->t[i].name, &r, &l, &e);
            if (r != p->t[i].role) { /* tagged before config.json was read (an archive's order) */
                on_warn(why, "no execution tape: config.json came after the weights, whose "
                             "post-norms were tagged as Llama's norms; put it first in the archive");
                json_decref(am.tape);
                am.tape = NULL;
                break;
            }
        }
    hash_rest(p, hex);
    *model = json_pack("{ss ss so}", "architecture", am.architecture, "family", am.family,
                       "provenance", provenance(p, hex));
    if (*model && am.hparams)
        json_object_set(*model, "hparams", am.hparams);
    if (*model && config)
        json_object_set(*model, "config", config);
    if (*model && gen)
        json_object_set(*model, "generation", gen);
    if (*model && !am.tape)
        json_object_set_new(*model, "no_tape",
                            json_string(!config ? "no config.json" : *why ? why : "no tape"));
    *tape = am.tape ? json_incref(am.tape) : NULL;
    *tie = am.tie_lm_head;
    memcpy(embed, am.embed_name, sizeof am.embed_name);
    memcpy(head, am.head_name, sizeof am.head_name);
    arch_model_free(&am);
    json_decref(config);
    json_decref(gen);
    return *model ? 0 : pack_fail("out of memory");
}

int pack_finish(pack *p)
{
    json_t *model = NULL, *tape = NULL, *tok = NULL;
    int tie;
    char embed[64] = "", head[64] = "";
    summary_warnings(p);
    int rc = pack_open_writer(p) || model_section(p, &model, &tape, &tie, embed, head) ||
             (tie && add_tied(p, embed, head)) || add_blobs(p) || set_section(p, "model", model) ||
             ((tok = tokenizer_section(p)) && set_section(p, "tokenizer", tok)) ||
             (tape && set_section(p, "tape", tape));
    json_decref(model);
    json_decref(tape);
    json_decref(tok);
    if (rc)
        return -1;
    cli_progress_end();
    uint8_t digest[32];
    if (thin_writer_finish(p->w, digest) != THIN_OK)
        return pack_fail("%s", thin_writer_error(p->w));
    return 0;
}
