/*
 * tokenizer.c — the public tokenizer calls: finishing a loaded vocabulary, encode (added tokens
 * split out literally, then normalizer or pre-tokenizer, then BPE per word), pieces, accessors.
 */
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "tok_private.h"

/* Whether the literal text of a token is matched before the model. */
static int attr_is_added(uint8_t attr)
{
    return attr == TOK_ATTR_CONTROL || attr == TOK_ATTR_USER || attr == TOK_ATTR_UNKNOWN;
}

typedef struct added_key {
    unsigned char first;
    uint32_t len;
    int32_t id;
} added_key;

static int added_cmp(const void *pa, const void *pb)
{
    const added_key *a = pa, *b = pb;
    if (a->first != b->first)
        return a->first < b->first ? -1 : 1;
    if (a->len != b->len)
        return a->len > b->len ? -1 : 1; /* longest first */
    return a->id < b->id ? -1 : 1;
}

static int build_added(tok *t)
{
    uint32_t n = 0;
    for (uint32_t id = 0; id < t->n_vocab; id++)
        n += attr_is_added(t->tokens[id].attr) && t->tokens[id].key_len > 0;
    added_key *k = malloc((n ? n : 1) * sizeof *k);
    t->added = malloc((n ? n : 1) * sizeof *t->added);
    if (!k || !t->added) {
        free(k);
        return -1;
    }
    n = 0;
    for (uint32_t id = 0; id < t->n_vocab; id++) {
        const tok_token *tk = &t->tokens[id];
        if (attr_is_added(tk->attr) && tk->key_len > 0)
            k[n++] = (added_key){(unsigned char)t->arena[tk->key_off], tk->key_len, (int32_t)id};
    }
    qsort(k, n, sizeof *k, added_cmp);
    for (uint32_t i = 0; i < n; i++)
        t->added[i] = k[i].id;
    t->n_added = n;
    uint32_t i = 0;
    for (int b = 0; b < 256; b++) {
        while (i < n && k[i].first < b)
            i++;
        t->added_start[b] = i;
    }
    t->added_start[256] = n;
    free(k);
    return 0;
}

static void build_byte_table(tok *t)
{
    for (uint32_t id = t->n_vocab; id-- > 0;) {
        const tok_token *tk = &t->tokens[id];
        if (t->kind == TOK_SPM_BPE && tk->attr == TOK_ATTR_BYTE && tk->piece_len == 1)
            t->byte_id[(unsigned char)t->arena[tk->piece_off]] = (int32_t)id;
    }
    for (int b = 0; b < 256; b++) {
        if (t->byte_id[b] >= 0)
            continue;
        char c = (char)b;
        if (t->kind == TOK_BYTE_BPE || b < 0x80)
            t->byte_id[b] = tok_strmap_get(&t->map, t, &c, 1);
    }
}

int tok_finish(tok *t, char *err, size_t errlen)
{
    if (tok_strmap_build(&t->map, t) || build_added(t))
        return cli_fail(err, errlen, "out of memory");
    build_byte_table(t);
    if (t->bos >= (int32_t)t->n_vocab || t->eos >= (int32_t)t->n_vocab ||
        t->unk >= (int32_t)t->n_vocab)
        return cli_fail(err, errlen, "special token id out of range (vocab %u)", t->n_vocab);
    if (t->kind == TOK_BYTE_BPE)
        for (int b = 0; b < 256; b++)
            if (t->byte_id[b] < 0)
                return cli_fail(err, errlen, "byte-level vocab lacks the token of byte 0x%02X", b);
    return 0;
}

void tok_free(tok *t)
{
    if (!t)
        return;
    for (uint32_t i = 0; i < t->n_norm; i++) {
        free(t->norm[i].pattern);
        free(t->norm[i].content);
        if (t->norm[i].code)
            tok_regex_free(t->norm[i].code);
    }
    for (uint32_t i = 0; i < t->n_split; i++)
        tok_regex_free(t->split[i]);
    tok_strmap_free(&t->map);
    tok_pairmap_free(&t->pairs);
    free(t->added);
    free(t->tokens);
    free(t->arena);
    free(t->chat_template);
    free(t);
}

tok_kind tok_type(const tok *t) { return t->kind; }
uint32_t tok_vocab_size(const tok *t) { return t->n_vocab; }
int32_t tok_bos(const tok *t) { return t->bos; }
int32_t tok_eos(const tok *t) { return t->eos; }
int tok_add_bos(const tok *t) { return t->add_bos && t->bos >= 0; }

int32_t tok_find(const tok *t, const char *piece)
{
    if (!piece)
        return -1;
    size_t len = strlen(piece);
    int32_t id = tok_strmap_get(&t->map, t, piece, len);
    if (id >= 0 || t->kind != TOK_BYTE_BPE)
        return id;
    char *tmp = malloc(len + 1); /* byte-level vocabulary form, e.g. "Ġthe" */
    if (!tmp)
        return -1;
    long n = tok_bytelevel_decode(piece, len, tmp);
    id = n >= 0 ? tok_strmap_get(&t->map, t, tmp, (size_t)n) : -1;
    free(tmp);
    return id;
}

int tok_piece(const tok *t, int32_t id, const char **bytes, size_t *len)
{
    if (id < 0 || (uint32_t)id >= t->n_vocab || t->tokens[id].attr == TOK_ATTR_MISSING)
        return -1;
    *bytes = t->arena + t->tokens[id].piece_off;
    *len = t->tokens[id].piece_len;
    return 0;
}

const char *tok_chat_template(const tok *t)
{
    return t->chat_template;
}

int tok_set_chat_template(tok *t, const char *text, size_t len, int is_json, char *err, size_t errlen)
{
    char *tpl;
    if (is_json) {
        json_error_t je;
        json_t *j = json_loadb(text, len, 0, &je);
        const json_t *s = json_object_get(j, "chat_template");
        if (!json_is_string(s)) {
            json_decref(j);
            return cli_fail(err, errlen, "chat_template.json holds no \"chat_template\" string");
        }
        tpl = strndup(json_string_value(s), json_string_length(s));
        json_decref(j);
    } else {
        tpl = strndup(text, len);
    }
    if (!tpl)
        return cli_fail(err, errlen, "out of memory");
    free(t->chat_template);
    t->chat_template = tpl;
    return 0;
}

size_t tok_max_piece(const tok *t)
{
    return t->max_piece;
}
