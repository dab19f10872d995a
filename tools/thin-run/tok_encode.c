/*
 * tok_encode.c — text to ids: added tokens are cut out of the text first (longest match at each
 * position; special ones only with parse_special, user-defined ones always), then each plain
 * segment is normalized (SentencePiece) or pre-tokenized (byte-level) and run through BPE.
 */
#include <stdlib.h>
#include <string.h>

#include "tok_private.h"

static int word_cb(void *ctx, const char *s, size_t len)
{
    void **c = ctx;
    return tok_bpe_word(c[0], s, len, c[1]);
}

/* One plain segment (no added tokens inside); first: it starts the text. */
static int encode_plain(const tok *t, const char *s, size_t len, int first, tok_ids *out)
{
    if (len == 0)
        return 0;
    char *norm = NULL;
    size_t nlen = len;
    if (t->n_norm) {
        if (tok_normalize(t, s, len, first, &norm, &nlen))
            return -1;
        s = norm;
    }
    int rc;
    if (t->n_split) {
        void *ctx[2] = {(void *)t, out};
        rc = tok_pretokenize(t, s, nlen, word_cb, ctx);
    } else
        rc = tok_bpe_word(t, s, nlen, out);
    free(norm);
    return rc;
}

static int32_t match_added(const tok *t, const char *s, size_t len, size_t i, int parse_special)
{
    unsigned char b = (unsigned char)s[i];
    for (uint32_t k = t->added_start[b]; k < t->added_start[b + 1]; k++) {
        int32_t id = t->added[k];
        const tok_token *tk = &t->tokens[id];
        if (tk->attr != TOK_ATTR_USER && !parse_special)
            continue;
        if (tk->key_len <= len - i && !memcmp(s + i, t->arena + tk->key_off, tk->key_len))
            return id;
    }
    return -1;
}

static int is_space(char c)
{
    return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
}

static int encode_all(const tok *t, const char *s, size_t len, int parse_special, tok_ids *out)
{
    size_t seg = 0, i = 0;
    while (i < len) {
        int32_t id = t->n_added ? match_added(t, s, len, i, parse_special) : -1;
        if (id < 0) {
            i++;
            continue;
        }
        const tok_token *tk = &t->tokens[id];
        size_t end = i;
        while (tk->lstrip && end > seg && is_space(s[end - 1]))
            end--;
        if (encode_plain(t, s + seg, end - seg, seg == 0, out) || tok_ids_push(out, id))
            return -1;
        i += tk->key_len;
        while (tk->rstrip && i < len && is_space(s[i]))
            i++;
        seg = i;
    }
    return encode_plain(t, s + seg, len - seg, seg == 0, out);
}

int tok_encode(const tok *t, const char *text, size_t len, int add_bos, int parse_special,
               int32_t **ids, size_t *n_ids, char *err, size_t errlen)
{
    tok_ids out = {0};
    *ids = NULL;
    *n_ids = 0;
    if (!text && len)
        return cli_fail(err, errlen, "no text");
    if ((add_bos && t->bos >= 0 && tok_ids_push(&out, t->bos)) ||
        encode_all(t, text, len, parse_special, &out)) {
        free(out.v);
        return cli_fail(err, errlen, "encode failed (out of memory or regex error)");
    }
    if (!out.v && !(out.v = malloc(sizeof *out.v))) /* an empty result is still an array */
        return cli_fail(err, errlen, "out of memory");
    *ids = out.v;
    *n_ids = out.n;
    return 0;
}
