/*
 * tok_hf.c — a tok from a Hugging Face tokenizer.json (+ tokenizer_config.json).
 *
 * Supported: model BPE (vocab, merges as "a b" strings or [a, b] pairs, byte_fallback, fuse_unk,
 * ignore_merges, unk_token); added_tokens (special ones matched with parse_special, the others
 * always; lstrip/rstrip); normalizer null / Sequence / Replace (String or Regex) / Prepend /
 * NFC / NFD / NFKC / NFKD (Qwen2 and Qwen3 use NFC);
 * pre_tokenizer null / Sequence / Split (Regex or String; Isolated, MergedWithPrevious,
 * MergedWithNext or Contiguous; not inverted: Gemma's is a String one) / ByteLevel (no prefix
 * space; use_regex adds GPT-2's pattern) / Metaspace ("▁"; prepend_scheme always, first or never;
 * split); decoder null / Sequence / Replace / ByteFallback / Fuse / Strip (spaces) / ByteLevel /
 * Metaspace; post_processor TemplateProcessing (a leading special token = BOS).
 * Anything else is refused with a message naming it, rather than tokenized differently.
 * A ByteLevel pre-tokenizer or decoder makes the tokenizer byte-level; otherwise SentencePiece.
 */
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "tok_private.h"

typedef struct hf {
    tok *t;
    char *err;
    size_t errlen;
} hf;

static int is_type(json_t *o, const char *type)
{
    json_t *ty = json_object_get(o, "type");
    return json_is_string(ty) && !strcmp(json_string_value(ty), type);
}

static const char *type_of(json_t *o)
{
    json_t *ty = json_object_get(o, "type");
    return json_is_string(ty) ? json_string_value(ty) : "(no type)";
}

/* Whether any component of a (possibly Sequence) section has the given type. */
static int section_has(json_t *sec, const char *list_key, const char *type)
{
    if (!json_is_object(sec))
        return 0;
    if (is_type(sec, type))
        return 1;
    json_t *items = json_object_get(sec, list_key);
    size_t i;
    json_t *it;
    json_array_foreach(items, i, it) if (section_has(it, list_key, type)) return 1;
    return 0;
}

/* ---- normalizer ---- */

static int add_norm_op(hf *h, tok_norm_kind kind, const char *pat, size_t plen, const char *con,
                       size_t clen)
{
    tok *t = h->t;
    if (t->n_norm >= TOK_MAX_NORM_OPS)
        return cli_fail(h->err, h->errlen, "normalizer has more than %d steps", TOK_MAX_NORM_OPS);
    tok_norm_op *op = &t->norm[t->n_norm];
    memset(op, 0, sizeof *op);
    op->kind = kind;
    op->pattern = malloc(plen + 1);
    op->content = malloc(clen + 1);
    if (!op->pattern || !op->content) {
        free(op->pattern);
        free(op->content);
        return cli_fail(h->err, h->errlen, "out of memory");
    }
    memcpy(op->pattern, pat, plen);
    op->pattern[plen] = 0;
    memcpy(op->content, con, clen);
    op->content[clen] = 0;
    op->pattern_len = plen;
    op->content_len = clen;
    t->n_norm++; /* owned by t from here on, freed by tok_free */
    if (kind == TOK_NORM_REPLACE_RE && !(op->code = tok_regex_compile(pat, plen, h->err, h->errlen)))
        return -1;
    return 0;
}

static int norm_replace(hf *h, json_t *n)
{
    json_t *pat = json_object_get(n, "pattern"), *con = json_object_get(n, "content");
    json_t *s = json_object_get(pat, "String"), *re = json_object_get(pat, "Regex");
    if (!json_is_string(con) || (!json_is_string(s) && !json_is_string(re)))
        return cli_fail(h->err, h->errlen, "Replace normalizer needs pattern and content");
    json_t *p = json_is_string(s) ? s : re;
    return add_norm_op(h, json_is_string(s) ? TOK_NORM_REPLACE_STR : TOK_NORM_REPLACE_RE,
                       json_string_value(p), json_string_length(p), json_string_value(con),
                       json_string_length(con));
}

static int load_normalizer(hf *h, json_t *n, int depth)
{
    if (json_is_null(n) || !n)
        return 0;
    if (!json_is_object(n) || depth > 4)
        return cli_fail(h->err, h->errlen, "malformed normalizer");
    if (is_type(n, "Sequence")) {
        json_t *list = json_object_get(n, "normalizers"), *it;
        size_t i;
        if (!json_is_array(list))
            return cli_fail(h->err, h->errlen, "Sequence normalizer without a list");
        json_array_foreach(list, i, it) if (load_normalizer(h, it, depth + 1)) return -1;
        return 0;
    }
    if (is_type(n, "Replace"))
        return norm_replace(h, n);
    static const struct {
        const char *type;
        tok_uform form;
    } forms[] = {{"NFC", TOK_NFC}, {"NFD", TOK_NFD}, {"NFKC", TOK_NFKC}, {"NFKD", TOK_NFKD}};
    for (size_t i = 0; i < sizeof forms / sizeof forms[0]; i++)
        if (is_type(n, forms[i].type)) {
            if (add_norm_op(h, TOK_NORM_UNICODE, "", 0, "", 0))
                return -1;
            h->t->norm[h->t->n_norm - 1].uform = forms[i].form;
            return 0;
        }
    if (is_type(n, "Prepend")) {
        json_t *p = json_object_get(n, "prepend");
        if (!json_is_string(p))
            return cli_fail(h->err, h->errlen, "Prepend normalizer without a string");
        return add_norm_op(h, TOK_NORM_PREPEND, "", 0, json_string_value(p),
                           json_string_length(p));
    }
    return cli_fail(h->err, h->errlen, "unsupported normalizer %s", type_of(n));
}

/* ---- pre-tokenizer ---- */

static int add_split(hf *h, const char *re, size_t len)
{
    tok *t = h->t;
    if (t->n_split >= TOK_MAX_SPLITS)
        return cli_fail(h->err, h->errlen, "more than %d split steps", TOK_MAX_SPLITS);
    if (!(t->split[t->n_split] = tok_regex_compile(re, len, h->err, h->errlen)))
        return -1;
    t->n_split++;
    return 0;
}

/* A Split pre-tokenizer: its pattern (a Regex, or a String matched literally) with the behavior
 * of its matches, as one pattern whose matches and the text between them are the pieces
 * (split_level's way, which is Isolated's): Isolated as given; MergedWithPrevious as "text
 * without a match, then a match, or text without a match to the end" (each match joins the
 * piece before it), MergedWithNext the mirror; Contiguous as runs of matches. Removed and
 * inverted splits are refused. */
static int pre_split(hf *h, json_t *p)
{
    json_t *pat = json_object_get(p, "pattern");
    json_t *re = json_object_get(pat, "Regex"), *str = json_object_get(pat, "String");
    json_t *beh = json_object_get(p, "behavior"), *inv = json_object_get(p, "invert");
    const char *b = json_string_value(beh);
    if (!json_is_string(re) && !(json_is_string(str) && json_string_length(str) > 0))
        return cli_fail(h->err, h->errlen, "Split pre-tokenizer: no Regex or String pattern");
    if (!b || json_is_true(inv) ||
        (strcmp(b, "Isolated") && strcmp(b, "MergedWithPrevious") && strcmp(b, "MergedWithNext") &&
         strcmp(b, "Contiguous")))
        return cli_fail(h->err, h->errlen, "Split pre-tokenizer: only Isolated, MergedWithPrevious, "
                        "MergedWithNext or Contiguous, not inverted");
    /* the pattern as a group: a String's bytes escaped one by one */
    const char *src = json_string_value(re ? re : str);
    const size_t n = json_string_length(re ? re : str);
    if (memchr(src, 0, n))
        return cli_fail(h->err, h->errlen, "Split pre-tokenizer: a pattern with a NUL character");
    char *d = malloc(2 * n + 8);
    if (!d)
        return cli_fail(h->err, h->errlen, "out of memory");
    size_t k = 0;
    d[k++] = '(', d[k++] = '?', d[k++] = ':';
    for (size_t i = 0; i < n; i++) {
        if (!re && strchr("\\^$.|?*+()[]{}#- ", src[i])) /* no NUL: checked above */
            d[k++] = '\\';
        d[k++] = src[i];
    }
    d[k++] = ')';
    d[k] = '\0';
    char *full = NULL;
    int len = !strcmp(b, "Isolated") ? asprintf(&full, "%s", d)
              : !strcmp(b, "Contiguous") ? asprintf(&full, "%s+", d)
              : !strcmp(b, "MergedWithPrevious")
                  ? asprintf(&full, "(?:(?!%s)[\\s\\S])*%s|(?:(?!%s)[\\s\\S])+", d, d, d)
                  : asprintf(&full, "%s(?:(?!%s)[\\s\\S])*|(?:(?!%s)[\\s\\S])+", d, d, d);
    free(d);
    if (len < 0)
        return cli_fail(h->err, h->errlen, "out of memory");
    int rc = add_split(h, full, (size_t)len);
    free(full);
    return rc;
}

static int pre_bytelevel(hf *h, json_t *p)
{
    if (json_is_true(json_object_get(p, "add_prefix_space")))
        return cli_fail(h->err, h->errlen, "ByteLevel add_prefix_space is not supported");
    json_t *use = json_object_get(p, "use_regex");
    if (!use || json_is_true(use)) /* tokenizers' default is true */
        return add_split(h, tok_re_gpt2, strlen(tok_re_gpt2));
    return 0;
}

/* Metaspace's prepend scheme: "always", "first" (the start of the text only) or "never"; older
 * files say add_prefix_space (true: always). Returns 0 never, 1 always, 2 first, or -1. */
static int metaspace_scheme(hf *h, json_t *p)
{
    json_t *r = json_object_get(p, "replacement"), *ps = json_object_get(p, "prepend_scheme");
    json_t *aps = json_object_get(p, "add_prefix_space");
    if (!json_is_string(r) || strcmp(json_string_value(r), "\xE2\x96\x81"))
        return cli_fail(h->err, h->errlen, "Metaspace: only the replacement \"▁\" is supported");
    if (!ps || json_is_null(ps))
        return !aps || json_is_true(aps) ? 1 : 0;
    const char *s = json_string_value(ps);
    if (s && !strcmp(s, "always"))
        return 1;
    if (s && !strcmp(s, "first"))
        return 2;
    if (s && !strcmp(s, "never"))
        return 0;
    return cli_fail(h->err, h->errlen, "Metaspace: unknown prepend_scheme");
}

/* Metaspace: spaces become "▁", "▁" is prepended as the scheme says (normalizer steps after the
 * normalizer's own), and with split (the default) each piece starts at a "▁". */
static int pre_metaspace(hf *h, json_t *p)
{
    const int scheme = metaspace_scheme(h, p);
    if (scheme < 0 || add_norm_op(h, TOK_NORM_REPLACE_STR, " ", 1, "\xE2\x96\x81", 3))
        return -1;
    if (scheme) {
        if (add_norm_op(h, TOK_NORM_PREPEND, "", 0, "\xE2\x96\x81", 3))
            return -1;
        h->t->norm[h->t->n_norm - 1].first_only = scheme == 2;
    }
    json_t *split = json_object_get(p, "split");
    if (!split || json_is_true(split)) {
        static const char re[] = "\xE2\x96\x81[^\xE2\x96\x81]*|[^\xE2\x96\x81]+";
        return add_split(h, re, sizeof re - 1);
    }
    return 0;
}

static int load_pretokenizer(hf *h, json_t *p, int depth)
{
    if (json_is_null(p) || !p)
        return 0;
    if (!json_is_object(p) || depth > 4)
        return cli_fail(h->err, h->errlen, "malformed pre_tokenizer");
    if (is_type(p, "Sequence")) {
        json_t *list = json_object_get(p, "pretokenizers"), *it;
        size_t i;
        if (!json_is_array(list))
            return cli_fail(h->err, h->errlen, "Sequence pre_tokenizer without a list");
        json_array_foreach(list, i, it) if (load_pretokenizer(h, it, depth + 1)) return -1;
        return 0;
    }
    if (is_type(p, "Split"))
        return pre_split(h, p);
    if (is_type(p, "ByteLevel"))
        return pre_bytelevel(h, p);
    if (is_type(p, "Metaspace"))
        return pre_metaspace(h, p);
    return cli_fail(h->err, h->errlen, "unsupported pre_tokenizer %s", type_of(p));
}

/* ---- decoder ---- */

static int load_decoder(hf *h, json_t *d, int depth)
{
    if (json_is_null(d) || !d)
        return 0;
    if (!json_is_object(d) || depth > 4)
        return cli_fail(h->err, h->errlen, "malformed decoder");
    if (is_type(d, "Sequence")) {
        json_t *list = json_object_get(d, "decoders"), *it;
        size_t i;
        if (!json_is_array(list))
            return cli_fail(h->err, h->errlen, "Sequence decoder without a list");
        json_array_foreach(list, i, it) if (load_decoder(h, it, depth + 1)) return -1;
        return 0;
    }
    if (is_type(d, "Strip")) {
        json_t *c = json_object_get(d, "content"), *start = json_object_get(d, "start");
        json_t *stop = json_object_get(d, "stop");
        if (!json_is_string(c) || strcmp(json_string_value(c), " ") || !json_is_integer(start) ||
            json_integer_value(start) < 0 || (stop && json_integer_value(stop) != 0))
            return cli_fail(h->err, h->errlen, "unsupported Strip decoder");
        json_int_t n = json_integer_value(start);
        h->t->strip_lead = n > UINT32_MAX ? UINT32_MAX : (uint32_t)n;
        return 0;
    }
    if (is_type(d, "Replace")) {
        json_t *pat = json_object_get(json_object_get(d, "pattern"), "String");
        json_t *c = json_object_get(d, "content");
        if (!json_is_string(pat) || strcmp(json_string_value(pat), "\xE2\x96\x81") ||
            !json_is_string(c) || strcmp(json_string_value(c), " "))
            return cli_fail(h->err, h->errlen, "unsupported Replace decoder (only \"▁\" -> \" \")");
        return 0;
    }
    if (is_type(d, "Metaspace")) { /* "▁" -> " " (every piece's bytes), the prepended one dropped */
        const int scheme = metaspace_scheme(h, d);
        if (scheme < 0)
            return -1;
        if (scheme && !h->t->strip_lead)
            h->t->strip_lead = 1;
        return 0;
    }
    if (is_type(d, "ByteFallback") || is_type(d, "Fuse") || is_type(d, "ByteLevel"))
        return 0; /* what every piece's decoded bytes already hold */
    return cli_fail(h->err, h->errlen, "unsupported decoder %s", type_of(d));
}

/* ---- vocabulary ---- */

/* Number of ids: one past the largest id of vocab and added_tokens, checked for sanity. */
static int vocab_size(hf *h, json_t *vocab, json_t *added, uint32_t *n)
{
    const char *key;
    json_t *v, *it;
    size_t i, entries = json_object_size(vocab) + json_array_size(added);
    json_int_t max = -1;
    json_object_foreach(vocab, key, v) {
        if (!json_is_integer(v) || json_integer_value(v) < 0 ||
            json_integer_value(v) >= TOK_MAX_VOCAB)
            return cli_fail(h->err, h->errlen, "vocab id of \"%.40s\" is not in 0..%u", key,
                            TOK_MAX_VOCAB - 1);
        if (json_integer_value(v) > max)
            max = json_integer_value(v);
    }
    json_array_foreach(added, i, it) {
        json_t *id = json_object_get(it, "id");
        if (!json_is_integer(id) || json_integer_value(id) < 0 ||
            json_integer_value(id) >= TOK_MAX_VOCAB || !json_is_string(json_object_get(it, "content")))
            return cli_fail(h->err, h->errlen, "added token %zu needs an id and a content", i);
        if (json_integer_value(id) > max)
            max = json_integer_value(id);
    }
    if (max < 0 || (size_t)max >= 2 * entries + 256)
        return cli_fail(h->err, h->errlen, "vocab ids are too sparse or missing");
    *n = (uint32_t)max + 1;
    return 0;
}

static int load_vocab(hf *h, json_t *vocab)
{
    tok *t = h->t;
    const char *key;
    json_t *v;
    json_object_foreach(vocab, key, v) {
        uint32_t id = (uint32_t)json_integer_value(v);
        size_t len = strlen(key); /* jansson keys cannot hold NUL */
        uint8_t attr = TOK_ATTR_NORMAL;
        if (t->tokens[id].attr != TOK_ATTR_MISSING)
            return cli_fail(h->err, h->errlen, "vocab id %u used twice", id);
        if (t->kind == TOK_SPM_BPE && t->byte_fallback && tok_parse_byte_piece(key, len) >= 0)
            attr = TOK_ATTR_BYTE;
        if (tok_set_token_text(t, id, key, len, attr, h->err, h->errlen))
            return -1;
    }
    return 0;
}

static int load_added(hf *h, json_t *added, const char *unk)
{
    size_t i;
    json_t *it;
    json_array_foreach(added, i, it) {
        json_t *c = json_object_get(it, "content");
        uint32_t id = (uint32_t)json_integer_value(json_object_get(it, "id"));
        const char *s = json_string_value(c);
        size_t len = json_string_length(c);
        uint8_t attr = !json_is_true(json_object_get(it, "special")) ? TOK_ATTR_USER
                       : unk && !strcmp(unk, s)                     ? TOK_ATTR_UNKNOWN
                                                                     : TOK_ATTR_CONTROL;
        if (len == 0)
            return cli_fail(h->err, h->errlen, "added token %u is empty", id);
        if (tok_set_token_text(h->t, id, s, len, attr, h->err, h->errlen))
            return -1;
        h->t->tokens[id].lstrip = json_is_true(json_object_get(it, "lstrip"));
        h->t->tokens[id].rstrip = json_is_true(json_object_get(it, "rstrip"));
    }
    return 0;
}

static int load_merges(hf *h, json_t *merges)
{
    size_t i, n = json_array_size(merges);
    json_t *m;
    if (!json_is_array(merges) || n > TOK_MAX_MERGES)
        return cli_fail(h->err, h->errlen, "model.merges must be an array");
    if (tok_pairmap_init(&h->t->pairs, (uint32_t)n))
        return cli_fail(h->err, h->errlen, "out of memory");
    json_array_foreach(merges, i, m) {
        int rc;
        json_t *a = json_array_get(m, 0), *b = json_array_get(m, 1);
        if (json_is_string(m))
            rc = tok_add_merge_line(h->t, json_string_value(m), json_string_length(m), (int32_t)i);
        else if (json_array_size(m) == 2 && json_is_string(a) && json_is_string(b))
            rc = tok_add_merge(h->t, json_string_value(a), json_string_length(a),
                               json_string_value(b), json_string_length(b), (int32_t)i);
        else
            return cli_fail(h->err, h->errlen, "merge %zu is neither \"a b\" nor [a, b]", i);
        if (rc)
            return cli_fail(h->err, h->errlen, "out of memory");
    }
    return 0;
}

/* Model options that change the result and are not supported are refused. */
static int check_model(hf *h, json_t *model)
{
    json_t *ty = json_object_get(model, "type"), *drop = json_object_get(model, "dropout");
    json_t *csp = json_object_get(model, "continuing_subword_prefix");
    json_t *eow = json_object_get(model, "end_of_word_suffix");
    if (!json_is_object(model) || (ty && !is_type(model, "BPE")))
        return cli_fail(h->err, h->errlen, "unsupported model type %s (only BPE)", type_of(model));
    if (!json_is_object(json_object_get(model, "vocab")))
        return cli_fail(h->err, h->errlen, "model.vocab missing");
    if ((drop && !json_is_null(drop) && json_number_value(drop) != 0.0) ||
        (json_is_string(csp) && json_string_length(csp)) ||
        (json_is_string(eow) && json_string_length(eow)))
        return cli_fail(h->err, h->errlen,
                        "unsupported BPE option (dropout, continuing_subword_prefix, suffix)");
    return 0;
}

/* ---- special ids ---- */

/* BOS from a TemplateProcessing post-processor whose "single" starts with a special token. */
static void post_processor_bos(hf *h, json_t *pp, int depth)
{
    if (!json_is_object(pp) || depth > 4)
        return;
    json_t *it;
    size_t i;
    json_array_foreach(json_object_get(pp, "processors"), i, it) post_processor_bos(h, it, depth + 1);
    if (!is_type(pp, "TemplateProcessing"))
        return;
    json_t *first = json_object_get(json_array_get(json_object_get(pp, "single"), 0), "SpecialToken");
    json_t *name = json_object_get(first, "id");
    if (json_is_string(name) && tok_find(h->t, json_string_value(name)) >= 0) {
        h->t->bos = tok_find(h->t, json_string_value(name));
        h->t->add_bos = 1;
    }
}

/* A config token entry: "text", {"content": "text"} or null. Returns 1 if the key is present. */
static int config_token(hf *h, json_t *cfg, const char *key, int32_t *id)
{
    json_t *v = json_object_get(cfg, key);
    if (!v)
        return 0;
    if (json_is_object(v))
        v = json_object_get(v, "content");
    *id = json_is_string(v) ? tok_find(h->t, json_string_value(v)) : -1;
    return 1;
}

static int load_config(hf *h, const char *config, size_t len)
{
    json_error_t je;
    json_t *cfg = json_loadb(config, len, 0, &je);
    if (!json_is_object(cfg)) {
        json_decref(cfg);
        return cli_fail(h->err, h->errlen, "tokenizer_config.json: %s (line %d)", je.text, je.line);
    }
    tok *t = h->t;
    int have_bos = config_token(h, cfg, "bos_token", &t->bos);
    config_token(h, cfg, "eos_token", &t->eos);
    json_t *ab = json_object_get(cfg, "add_bos_token");
    if (json_is_boolean(ab))
        t->add_bos = json_is_true(ab);
    else if (have_bos && t->bos < 0)
        t->add_bos = 0;
    json_t *tpl = json_object_get(cfg, "chat_template");
    if (json_is_array(tpl)) { /* [{"name": "default", "template": ...}, ...] */
        json_t *it, *pick = NULL;
        size_t i;
        json_array_foreach(tpl, i, it) {
            json_t *name = json_object_get(it, "name");
            if (!pick || (json_is_string(name) && !strcmp(json_string_value(name), "default")))
                pick = json_object_get(it, "template");
        }
        tpl = pick;
    }
    int rc = 0;
    if (json_is_string(tpl) && !(t->chat_template = strdup(json_string_value(tpl))))
        rc = cli_fail(h->err, h->errlen, "out of memory");
    json_decref(cfg);
    return rc;
}

static int load_model(hf *h, json_t *root, json_t *model)
{
    json_t *vocab = json_object_get(model, "vocab"), *added = json_object_get(root, "added_tokens");
    json_t *unk = json_object_get(model, "unk_token");
    json_t *bf = json_object_get(model, "byte_fallback"), *fu = json_object_get(model, "fuse_unk");
    json_t *im = json_object_get(model, "ignore_merges");
    tok_kind kind = section_has(json_object_get(root, "pre_tokenizer"), "pretokenizers", "ByteLevel") ||
                    section_has(json_object_get(root, "decoder"), "decoders", "ByteLevel")
                        ? TOK_BYTE_BPE : TOK_SPM_BPE;
    uint32_t n = 0;
    if (added && !json_is_array(added))
        return cli_fail(h->err, h->errlen, "added_tokens must be an array");
    if (vocab_size(h, vocab, added, &n))
        return -1;
    if (!(h->t = tok_alloc(kind, n)))
        return cli_fail(h->err, h->errlen, "out of memory");
    tok *t = h->t;
    t->byte_fallback = json_is_true(bf);
    t->fuse_unk = json_is_true(fu);
    t->ignore_merges = json_is_true(im);
    if (load_vocab(h, vocab) || load_added(h, added, json_string_value(unk)) ||
        load_normalizer(h, json_object_get(root, "normalizer"), 0) ||
        load_pretokenizer(h, json_object_get(root, "pre_tokenizer"), 0) ||
        load_decoder(h, json_object_get(root, "decoder"), 0) || tok_finish(t, h->err, h->errlen))
        return -1;
    if (json_is_string(unk) && (t->unk = tok_find(t, json_string_value(unk))) < 0)
        return cli_fail(h->err, h->errlen, "unk_token \"%.40s\" is not in the vocab",
                        json_string_value(unk));
    return load_merges(h, json_object_get(model, "merges"));
}

int tok_load_hf(tok **out, const char *json, size_t json_len, const char *config,
                size_t config_len, char *err, size_t errlen)
{
    hf h = {NULL, err, errlen};
    json_error_t je;
    *out = NULL;
    if (!json)
        return cli_fail(err, errlen, "no tokenizer.json data");
    json_t *root = json_loadb(json, json_len, JSON_REJECT_DUPLICATES, &je);
    if (!json_is_object(root)) {
        json_decref(root);
        return cli_fail(err, errlen, "tokenizer.json: %s (line %d)", je.text, je.line);
    }
    json_t *model = json_object_get(root, "model");
    int rc = check_model(&h, model);
    if (!rc)
        rc = load_model(&h, root, model);
    if (!rc)
        post_processor_bos(&h, json_object_get(root, "post_processor"), 0);
    if (!rc && config)
        rc = load_config(&h, config, config_len);
    json_decref(root);
    if (rc) {
        tok_free(h.t);
        return -1;
    }
    *out = h.t;
    return 0;
}
