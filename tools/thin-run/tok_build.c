/*
 * tok_build.c — building a tokenizer: the arena of token texts, token attributes, the merge
 * table and the indexes that encode uses (key map, byte table, added-token buckets). The two
 * loaders (tok_hf.c, tok_gguf.c) fill a tok through these calls.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tok_private.h"

tok *tok_alloc(tok_kind kind, uint32_t n_vocab)
{
    if (n_vocab == 0 || n_vocab > TOK_MAX_VOCAB)
        return NULL;
    tok *t = calloc(1, sizeof *t);
    if (!t)
        return NULL;
    t->tokens = calloc(n_vocab, sizeof *t->tokens);
    if (!t->tokens) {
        free(t);
        return NULL;
    }
    t->kind = kind;
    t->mode = TOK_MERGE_RANKS;
    t->n_vocab = n_vocab;
    t->bos = t->eos = t->unk = -1;
    for (int b = 0; b < 256; b++)
        t->byte_id[b] = -1;
    return t;
}

int tok_arena_add(tok *t, const void *bytes, size_t len, uint32_t *off)
{
    if (len > TOK_MAX_PIECE || t->arena_len + len + 1 > UINT32_MAX)
        return -1;
    if (t->arena_len + len + 1 > t->arena_cap) {
        size_t cap = t->arena_cap ? t->arena_cap : 4096;
        while (cap < t->arena_len + len + 1)
            cap *= 2;
        char *a = realloc(t->arena, cap);
        if (!a)
            return -1;
        t->arena = a;
        t->arena_cap = cap;
    }
    if (len)
        memcpy(t->arena + t->arena_len, bytes, len);
    t->arena[t->arena_len + len] = 0;
    *off = (uint32_t)t->arena_len;
    t->arena_len += len + 1;
    return 0;
}

int tok_set_token(tok *t, uint32_t id, const char *key, size_t key_len, const char *piece,
                  size_t piece_len, uint8_t attr)
{
    if (id >= t->n_vocab)
        return -1;
    tok_token *tk = &t->tokens[id];
    if (tok_arena_add(t, key, key_len, &tk->key_off))
        return -1;
    tk->key_len = (uint32_t)key_len;
    if (piece_len == key_len && !memcmp(piece, key, key_len))
        tk->piece_off = tk->key_off;
    else if (tok_arena_add(t, piece, piece_len, &tk->piece_off))
        return -1;
    tk->piece_len = (uint32_t)piece_len;
    tk->attr = attr;
    if (piece_len > t->max_piece)
        t->max_piece = piece_len;
    return 0;
}

int tok_parse_byte_piece(const char *s, size_t len)
{
    if (len != 6 || memcmp(s, "<0x", 3) || s[5] != '>')
        return -1;
    int v = 0;
    for (int i = 3; i < 5; i++) {
        char c = s[i];
        int d = c >= '0' && c <= '9' ? c - '0' : c >= 'A' && c <= 'F' ? c - 'A' + 10
              : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
        if (d < 0)
            return -1;
        v = v * 16 + d;
    }
    return v;
}

/* SentencePiece piece text: "▁" (E2 96 81) becomes a space. out holds len bytes. */
static size_t spm_unescape(const char *s, size_t len, char *out)
{
    size_t n = 0;
    for (size_t i = 0; i < len;) {
        if (len - i >= 3 && !memcmp(s + i, "\xE2\x96\x81", 3)) {
            out[n++] = ' ';
            i += 3;
        } else
            out[n++] = s[i++];
    }
    return n;
}

int tok_set_token_text(tok *t, uint32_t id, const char *text, size_t len, uint8_t attr,
                       char *err, size_t errlen)
{
    if (len > TOK_MAX_PIECE)
        return cli_fail(err, errlen, "token %u is longer than %u bytes", id, TOK_MAX_PIECE);
    char *tmp = malloc(len + 1);
    if (!tmp)
        return cli_fail(err, errlen, "out of memory");
    int rc;
    if (attr == TOK_ATTR_BYTE) {
        int b = tok_parse_byte_piece(text, len);
        char c = (char)b;
        rc = b < 0 ? -2 : tok_set_token(t, id, text, len, &c, 1, attr);
    } else if (t->kind == TOK_BYTE_BPE && attr == TOK_ATTR_NORMAL) {
        long n = tok_bytelevel_decode(text, len, tmp);
        rc = n < 0 ? tok_set_token(t, id, text, len, text, len, attr)
                   : tok_set_token(t, id, tmp, (size_t)n, tmp, (size_t)n, attr);
    } else if (t->kind == TOK_SPM_BPE && attr != TOK_ATTR_CONTROL) {
        size_t n = spm_unescape(text, len, tmp);
        rc = tok_set_token(t, id, text, len, tmp, n, attr);
    } else
        rc = tok_set_token(t, id, text, len, text, len, attr);
    free(tmp);
    if (rc == -2)
        return cli_fail(err, errlen, "token %u is a byte token but not <0xNN>", id);
    return rc ? cli_fail(err, errlen, "out of memory") : 0;
}

const char *tok_key(const tok *t, int32_t id, size_t *len)
{
    *len = t->tokens[id].key_len;
    return t->arena + t->tokens[id].key_off;
}

/* Looks a merge part up, mapping byte-level text back to bytes first. */
static int32_t merge_part_id(const tok *t, const char *s, size_t len, char *tmp)
{
    if (t->kind == TOK_BYTE_BPE) {
        long n = tok_bytelevel_decode(s, len, tmp);
        if (n >= 0)
            return tok_strmap_get(&t->map, t, tmp, (size_t)n);
    }
    return tok_strmap_get(&t->map, t, s, len);
}

int tok_add_merge(tok *t, const char *left, size_t left_len, const char *right, size_t right_len,
                  int32_t rank)
{
    if (left_len > TOK_MAX_PIECE || right_len > TOK_MAX_PIECE)
        return 0;
    char *tmp = malloc(left_len + right_len + 1);
    if (!tmp)
        return -1;
    int32_t a = merge_part_id(t, left, left_len, tmp);
    int32_t b = merge_part_id(t, right, right_len, tmp);
    if (a >= 0 && b >= 0) {
        size_t la, lb;
        const char *ka = tok_key(t, a, &la), *kb = tok_key(t, b, &lb);
        memcpy(tmp, ka, la);
        memcpy(tmp + la, kb, lb);
        int32_t m = tok_strmap_get(&t->map, t, tmp, la + lb);
        if (m >= 0)
            tok_pairmap_put(&t->pairs, a, b, rank, m);
    }
    free(tmp);
    return 0;
}

int tok_add_merge_line(tok *t, const char *line, size_t len, int32_t rank)
{
    const char *sp = len > 1 ? memchr(line + 1, ' ', len - 1) : NULL;
    if (!sp)
        return 0;
    size_t l = (size_t)(sp - line);
    return tok_add_merge(t, line, l, sp + 1, len - l - 1, rank);
}
