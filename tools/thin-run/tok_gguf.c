/*
 * tok_gguf.c — the vocabulary of a GGUF file (v2/v3): a strict reader of the header and the
 * key/value section, then the tokenizer.ggml.* keys turned into a tok.
 *
 * Layout (little-endian): "GGUF", u32 version, u64 n_tensors, u64 n_kv, then n_kv times
 * { string key, u32 type, value }. A string is u64 length + bytes; an array is u32 element type,
 * u64 count, elements. Types: 0 u8, 1 i8, 2 u16, 3 i16, 4 u32, 5 i32, 6 f32, 7 bool, 8 string,
 * 9 array, 10 u64, 11 i64, 12 f64. Every length and count is checked against the bytes left
 * before use; nested arrays and repeated keys are refused. Tensor infos are not read.
 */
#include <stdlib.h>
#include <string.h>

#include "tok_private.h"

enum { GT_U8, GT_I8, GT_U16, GT_I16, GT_U32, GT_I32, GT_F32, GT_BOOL, GT_STR, GT_ARR, GT_U64,
       GT_I64, GT_F64, GT_COUNT };

typedef struct rd {
    const unsigned char *p;
    size_t n, off;
} rd;

/* A value found in the KV section: where its payload starts (after type / array header). */
typedef struct gval {
    int found;
    uint32_t type, elem; /* elem: element type of an array */
    uint64_t count;      /* array length */
    size_t off;
} gval;

enum { K_MODEL, K_PRE, K_TOKENS, K_SCORES, K_TYPES, K_MERGES, K_BOS, K_EOS, K_UNK, K_ADD_BOS,
       K_SPACE, K_TEMPLATE, K_COUNT };
static const char *const key_names[K_COUNT] = {
    "tokenizer.ggml.model", "tokenizer.ggml.pre", "tokenizer.ggml.tokens",
    "tokenizer.ggml.scores", "tokenizer.ggml.token_type", "tokenizer.ggml.merges",
    "tokenizer.ggml.bos_token_id", "tokenizer.ggml.eos_token_id",
    "tokenizer.ggml.unknown_token_id", "tokenizer.ggml.add_bos_token",
    "tokenizer.ggml.add_space_prefix", "tokenizer.chat_template"};

static int rd_bytes(rd *r, size_t len, const unsigned char **out)
{
    if (len > r->n - r->off)
        return -1;
    *out = r->p + r->off;
    r->off += len;
    return 0;
}

static int rd_u32(rd *r, uint32_t *v)
{
    const unsigned char *b;
    if (rd_bytes(r, 4, &b))
        return -1;
    *v = (uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 | (uint32_t)b[3] << 24;
    return 0;
}

static int rd_u64(rd *r, uint64_t *v)
{
    uint32_t lo, hi;
    if (rd_u32(r, &lo) || rd_u32(r, &hi))
        return -1;
    *v = (uint64_t)hi << 32 | lo;
    return 0;
}

static int rd_str(rd *r, const char **s, size_t *len)
{
    uint64_t l;
    const unsigned char *b;
    if (rd_u64(r, &l) || l > r->n - r->off || rd_bytes(r, (size_t)l, &b))
        return -1;
    *s = (const char *)b;
    *len = (size_t)l;
    return 0;
}

static size_t scalar_size(uint32_t type)
{
    static const unsigned char sz[GT_COUNT] = {1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8};
    return type < GT_COUNT ? sz[type] : 0;
}

/* Skips one value of the given type (arrays of scalars or strings only). */
static int skip_value(rd *r, uint32_t type, gval *g, char *err, size_t errlen)
{
    const char *s;
    size_t len;
    g->type = type;
    if (type == GT_STR) {
        g->off = r->off;
        return rd_str(r, &s, &len) ? cli_fail(err, errlen, "string runs past the end") : 0;
    }
    if (type != GT_ARR) {
        size_t sz = scalar_size(type);
        const unsigned char *b;
        g->off = r->off;
        if (!sz)
            return cli_fail(err, errlen, "unknown value type %u", type);
        return rd_bytes(r, sz, &b) ? cli_fail(err, errlen, "value runs past the end") : 0;
    }
    if (rd_u32(r, &g->elem) || rd_u64(r, &g->count))
        return cli_fail(err, errlen, "array header runs past the end");
    g->off = r->off;
    if (g->elem == GT_STR) {
        for (uint64_t i = 0; i < g->count; i++)
            if (rd_str(r, &s, &len))
                return cli_fail(err, errlen, "array string %llu runs past the end",
                                (unsigned long long)i);
        return 0;
    }
    size_t sz = scalar_size(g->elem);
    const unsigned char *b;
    if (!sz)
        return cli_fail(err, errlen, "array of unsupported type %u", g->elem);
    if (g->count > (r->n - r->off) / sz || rd_bytes(r, (size_t)g->count * sz, &b))
        return cli_fail(err, errlen, "array of %llu elements runs past the end",
                        (unsigned long long)g->count);
    return 0;
}

static int read_header(rd *r, gval *vals, char *err, size_t errlen)
{
    const unsigned char *magic;
    uint32_t version;
    uint64_t n_tensors, n_kv;
    if (rd_bytes(r, 4, &magic) || memcmp(magic, "GGUF", 4))
        return cli_fail(err, errlen, "not a GGUF file (bad magic)");
    if (rd_u32(r, &version) || (version != 2 && version != 3))
        return cli_fail(err, errlen, "unsupported GGUF version (need 2 or 3)");
    if (rd_u64(r, &n_tensors) || rd_u64(r, &n_kv))
        return cli_fail(err, errlen, "truncated GGUF header");
    for (uint64_t i = 0; i < n_kv; i++) {
        const char *key;
        size_t klen;
        uint32_t type;
        if (rd_str(r, &key, &klen) || rd_u32(r, &type))
            return cli_fail(err, errlen, "key %llu runs past the end", (unsigned long long)i);
        gval tmp = {0}, *g = &tmp;
        for (int k = 0; k < K_COUNT; k++)
            if (strlen(key_names[k]) == klen && !memcmp(key_names[k], key, klen)) {
                if (vals[k].found)
                    return cli_fail(err, errlen, "key %s repeated", key_names[k]);
                g = &vals[k];
            }
        if (skip_value(r, type, g, err, errlen))
            return -1;
        g->found = 1;
    }
    return 0;
}

static uint32_t le32(const unsigned char *b)
{
    return (uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 | (uint32_t)b[3] << 24;
}

/* An integer-typed scalar as int64; returns 0 or -1 (absent, not an integer, out of range). */
static int get_int(const rd *r, const gval *g, int64_t *v)
{
    const unsigned char *b = r->p + g->off;
    if (!g->found)
        return -1;
    switch (g->type) {
    case GT_U8: *v = b[0]; return 0;
    case GT_I8: *v = (int8_t)b[0]; return 0;
    case GT_U16: *v = b[0] | b[1] << 8; return 0;
    case GT_I16: *v = (int16_t)(b[0] | b[1] << 8); return 0;
    case GT_U32: *v = le32(b); return 0;
    case GT_I32: *v = (int32_t)le32(b); return 0;
    case GT_U64:
    case GT_I64: {
        uint64_t u = (uint64_t)le32(b + 4) << 32 | le32(b);
        if (u > INT64_MAX)
            return -1;
        *v = (int64_t)u;
        return 0;
    }
    }
    return -1;
}

/* An optional token id key: sets *id when present; error when present but not a valid id. */
static int get_id(const rd *r, const gval *g, uint32_t n_vocab, int32_t *id, const char *name,
                  char *err, size_t errlen)
{
    int64_t v;
    if (!g->found)
        return 0;
    if (get_int(r, g, &v) || v < -1 || v >= (int64_t)n_vocab)
        return cli_fail(err, errlen, "%s is not a token id", name);
    *id = (int32_t)v;
    return 0;
}

static int get_bool(const rd *r, const gval *g, int *v)
{
    if (!g->found)
        return 0;
    if (g->type != GT_BOOL)
        return -1;
    *v = r->p[g->off] != 0;
    return 0;
}

/* A string value (not NUL-terminated). */
static int get_str(const rd *r, const gval *g, const char **s, size_t *len)
{
    rd c = *r;
    if (!g->found || g->type != GT_STR)
        return -1;
    c.off = g->off;
    return rd_str(&c, s, len);
}

static int add_norm(tok *t, tok_norm_kind kind, const char *pat, const char *content)
{
    tok_norm_op *op = &t->norm[t->n_norm];
    op->kind = kind;
    op->pattern = strdup(pat);
    op->content = strdup(content);
    if (!op->pattern || !op->content) {
        free(op->pattern);
        free(op->content);
        return -1;
    }
    op->pattern_len = strlen(pat);
    op->content_len = strlen(content);
    t->n_norm++;
    return 0;
}

static int load_tokens(tok *t, const rd *r, const gval *v, char *err, size_t errlen)
{
    const gval *types = &v[K_TYPES], *scores = &v[K_SCORES];
    if (types->found && (types->type != GT_ARR || (types->elem != GT_I32 && types->elem != GT_U32)
                         || types->count != t->n_vocab))
        return cli_fail(err, errlen, "tokenizer.ggml.token_type must be %u int32", t->n_vocab);
    if (scores->found && (scores->type != GT_ARR || scores->elem != GT_F32 ||
                          scores->count != t->n_vocab))
        return cli_fail(err, errlen, "tokenizer.ggml.scores must be %u float32", t->n_vocab);
    rd c = *r;
    c.off = v[K_TOKENS].off;
    for (uint32_t id = 0; id < t->n_vocab; id++) {
        const char *s;
        size_t len;
        if (rd_str(&c, &s, &len))
            return cli_fail(err, errlen, "token %u runs past the end", id);
        uint32_t ty = types->found ? le32(r->p + types->off + 4 * (size_t)id) : TOK_ATTR_NORMAL;
        if (ty == 0)
            ty = TOK_ATTR_NORMAL; /* "undefined" */
        if (ty > TOK_ATTR_BYTE)
            return cli_fail(err, errlen, "token %u has unknown type %u", id, ty);
        if (len == 0 && ty == TOK_ATTR_NORMAL)
            ty = TOK_ATTR_UNUSED; /* an empty piece can never be matched */
        if (tok_set_token_text(t, id, s, len, (uint8_t)ty, err, errlen))
            return -1;
        if (scores->found)
            memcpy(&t->tokens[id].score, r->p + scores->off + 4 * (size_t)id, 4);
    }
    return 0;
}

static int load_merges(tok *t, const rd *r, const gval *g, char *err, size_t errlen)
{
    if (!g->found) {
        if (t->mode == TOK_MERGE_RANKS)
            return cli_fail(err, errlen, "tokenizer.ggml.merges missing");
        return 0;
    }
    if (g->type != GT_ARR || g->elem != GT_STR || g->count > TOK_MAX_MERGES)
        return cli_fail(err, errlen, "tokenizer.ggml.merges must be an array of strings");
    if (tok_pairmap_init(&t->pairs, (uint32_t)g->count))
        return cli_fail(err, errlen, "out of memory");
    rd c = *r;
    c.off = g->off;
    for (uint64_t i = 0; i < g->count; i++) {
        const char *s;
        size_t len;
        if (rd_str(&c, &s, &len))
            return cli_fail(err, errlen, "merge %llu runs past the end", (unsigned long long)i);
        if (tok_add_merge_line(t, s, len, (int32_t)i))
            return cli_fail(err, errlen, "out of memory");
    }
    return 0;
}

/* SentencePiece ("llama"): llama.cpp's SPM rules — one "▁" prefix, spaces to "▁", no collapsing. */
static int setup_spm(tok *t, const rd *r, const gval *v, char *err, size_t errlen)
{
    int space = 1;
    if (get_bool(r, &v[K_SPACE], &space))
        return cli_fail(err, errlen, "tokenizer.ggml.add_space_prefix is not a bool");
    t->mode = TOK_MERGE_SCORES;
    t->byte_fallback = 1;
    t->add_bos = 1;
    t->strip_lead = space ? 1 : 0;
    t->bos = 1 < t->n_vocab ? 1 : -1;
    t->eos = 2 < t->n_vocab ? 2 : -1;
    t->unk = 0;
    if (add_norm(t, TOK_NORM_REPLACE_STR, " ", "\xE2\x96\x81") ||
        (space && add_norm(t, TOK_NORM_PREPEND, "", "\xE2\x96\x81")))
        return cli_fail(err, errlen, "out of memory");
    return 0;
}

/* Byte-level ("gpt2"): the pre-tokenizer regex comes from tokenizer.ggml.pre. */
static int setup_bpe(tok *t, const rd *r, const gval *v, char *err, size_t errlen)
{
    static const char *const llama3[] = {"llama3", "llama-v3", "llama-bpe", "falcon3"};
    const char *pre;
    size_t len;
    const char *re = NULL;
    if (get_str(r, &v[K_PRE], &pre, &len))
        return cli_fail(err, errlen, "tokenizer.ggml.pre missing: pre-tokenizer unknown");
    for (size_t i = 0; i < sizeof llama3 / sizeof *llama3; i++)
        if (strlen(llama3[i]) == len && !memcmp(pre, llama3[i], len)) {
            re = tok_re_llama3;
            t->ignore_merges = 1;
            t->add_bos = 1;
        }
    if (len == 9 && !memcmp(pre, "smaug-bpe", 9))
        re = tok_re_llama3;
    if (len == 4 && !memcmp(pre, "gpt2", 4))
        re = tok_re_gpt2;
    if (!re)
        return cli_fail(err, errlen, "unsupported tokenizer.ggml.pre \"%.*s\"",
                        (int)(len > 64 ? 64 : len), pre);
    if (!(t->split[0] = tok_regex_compile(re, strlen(re), err, errlen)))
        return -1;
    t->n_split = 1;
    return 0;
}

static int setup_ids(tok *t, const rd *r, const gval *v, char *err, size_t errlen)
{
    if (get_id(r, &v[K_BOS], t->n_vocab, &t->bos, "bos_token_id", err, errlen) ||
        get_id(r, &v[K_EOS], t->n_vocab, &t->eos, "eos_token_id", err, errlen) ||
        get_id(r, &v[K_UNK], t->n_vocab, &t->unk, "unknown_token_id", err, errlen))
        return -1;
    if (get_bool(r, &v[K_ADD_BOS], &t->add_bos))
        return cli_fail(err, errlen, "tokenizer.ggml.add_bos_token is not a bool");
    const char *s;
    size_t len;
    if (!get_str(r, &v[K_TEMPLATE], &s, &len) && !(t->chat_template = strndup(s, len)))
        return cli_fail(err, errlen, "out of memory");
    return 0;
}

static int build(tok **out, const rd *r, const gval *v, char *err, size_t errlen)
{
    const char *model;
    size_t mlen;
    tok_kind kind;
    if (get_str(r, &v[K_MODEL], &model, &mlen))
        return cli_fail(err, errlen, "tokenizer.ggml.model missing (no vocabulary)");
    if (mlen == 5 && !memcmp(model, "llama", 5))
        kind = TOK_SPM_BPE;
    else if (mlen == 4 && !memcmp(model, "gpt2", 4))
        kind = TOK_BYTE_BPE;
    else
        return cli_fail(err, errlen, "unsupported tokenizer.ggml.model \"%.*s\"",
                        (int)(mlen > 64 ? 64 : mlen), model);
    const gval *tk = &v[K_TOKENS];
    if (!tk->found || tk->type != GT_ARR || tk->elem != GT_STR || tk->count == 0 ||
        tk->count > TOK_MAX_VOCAB)
        return cli_fail(err, errlen, "tokenizer.ggml.tokens must be 1..%u strings", TOK_MAX_VOCAB);
    tok *t = tok_alloc(kind, (uint32_t)tk->count);
    if (!t)
        return cli_fail(err, errlen, "out of memory");
    int rc = (kind == TOK_SPM_BPE ? setup_spm(t, r, v, err, errlen) : setup_bpe(t, r, v, err, errlen));
    if (!rc)
        rc = load_tokens(t, r, v, err, errlen);
    if (!rc)
        rc = setup_ids(t, r, v, err, errlen);
    if (!rc)
        rc = tok_finish(t, err, errlen);
    if (!rc)
        rc = load_merges(t, r, &v[K_MERGES], err, errlen);
    if (rc) {
        tok_free(t);
        return -1;
    }
    *out = t;
    return 0;
}

int tok_load_gguf(tok **out, const void *data, size_t size, char *err, size_t errlen)
{
    rd r = {data, size, 0};
    gval vals[K_COUNT] = {{0}};
    *out = NULL;
    if (!data)
        return cli_fail(err, errlen, "no data");
    if (read_header(&r, vals, err, errlen))
        return -1;
    return build(out, &r, vals, err, errlen);
}
