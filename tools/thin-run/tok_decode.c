/*
 * tok_decode.c — ids to text, streaming. Each piece's bytes go through a small UTF-8 assembler
 * that emits only complete characters; a byte that cannot continue the pending sequence turns
 * the pending bytes into one U+FFFD (the Unicode "maximal subpart" practice) and is looked at
 * again; flush turns an unfinished tail into U+FFFD. Control, unknown and unused tokens (BOS,
 * EOS, <unk>, reserved specials) emit nothing. SentencePiece output drops its leading spaces as
 * the tokenizer says (strip_lead: 1 for Llama-2's single dummy prefix, unlimited for stories260K,
 * whose Strip decoder removes every leading space).
 */
#include <stdlib.h>
#include <string.h>

#include "tok_private.h"

static const char replacement[3] = {(char)0xEF, (char)0xBF, (char)0xBD};

void tok_decoder_init(tok_decoder *d, const tok *t)
{
    memset(d, 0, sizeof *d);
    d->t = t;
}

/* Whether byte c may follow the pending bytes of a sequence led by pend[0]. */
static int continues(const tok_decoder *d, unsigned char c)
{
    unsigned char lead = d->pend[0], lo = 0x80, hi = 0xBF;
    if (d->n_pend == 1) {
        if (lead == 0xE0)
            lo = 0xA0;
        else if (lead == 0xED)
            hi = 0x9F;
        else if (lead == 0xF0)
            lo = 0x90;
        else if (lead == 0xF4)
            hi = 0x8F;
    }
    return c >= lo && c <= hi;
}

static void put(char *out, size_t *n, const void *s, size_t len)
{
    memcpy(out + *n, s, len);
    *n += len;
}

static void feed_byte(tok_decoder *d, unsigned char c, char *out, size_t *n)
{
    if (d->n_pend && !continues(d, c)) {
        put(out, n, replacement, 3);
        d->n_pend = 0;
    }
    if (d->n_pend) {
        d->pend[d->n_pend++] = c;
        if (d->n_pend == tok_utf8_lead_len(d->pend[0])) {
            put(out, n, d->pend, d->n_pend);
            d->n_pend = 0;
        }
    } else if (c < 0x80)
        put(out, n, &c, 1);
    else if (c >= 0xC2 && c <= 0xF4)
        d->pend[d->n_pend++] = c;
    else
        put(out, n, replacement, 3);
}

static int emits_nothing(uint8_t attr)
{
    return attr == TOK_ATTR_CONTROL || attr == TOK_ATTR_UNKNOWN || attr == TOK_ATTR_UNUSED ||
           attr == TOK_ATTR_MISSING;
}

int tok_decoder_push(tok_decoder *d, int32_t id, char *out, size_t cap, size_t *n)
{
    const tok *t = d->t;
    *n = 0;
    if (id < 0 || (uint32_t)id >= t->n_vocab)
        return -1;
    const tok_token *tk = &t->tokens[id];
    if (emits_nothing(tk->attr))
        return 0;
    const unsigned char *p = (const unsigned char *)t->arena + tk->piece_off;
    size_t len = tk->piece_len;
    if (cap / 3 < len + 4)
        return -1; /* worst case: every byte a U+FFFD, plus the pending ones */
    if (d->n_out == 0 && t->strip_lead) {
        size_t k = 0;
        while (k < len && k < t->strip_lead && p[k] == ' ')
            k++;
        p += k;
        len -= k;
        if (len == 0 && t->strip_lead > 1)
            return 0; /* still nothing shown: keep stripping in the next piece */
    }
    d->n_out++;
    for (size_t i = 0; i < len; i++)
        feed_byte(d, p[i], out, n);
    return 0;
}

int tok_decoder_flush(tok_decoder *d, char *out, size_t cap, size_t *n)
{
    *n = 0;
    if (!d->n_pend)
        return 0;
    if (cap < 3)
        return -1;
    put(out, n, replacement, 3);
    d->n_pend = 0;
    return 0;
}

int tok_decode(const tok *t, const int32_t *ids, size_t n_ids, char **text, size_t *len)
{
    size_t chunk = 3 * (t->max_piece + 4), cap = chunk + 1, n = 0, k;
    char *out = malloc(cap);
    tok_decoder d;
    tok_decoder_init(&d, t);
    for (size_t i = 0; out && i <= n_ids; i++) {
        if (cap - n < chunk + 1) {
            char *o = realloc(out, cap * 2 + chunk);
            if (!o)
                break;
            out = o;
            cap = cap * 2 + chunk;
        }
        int rc = i < n_ids ? tok_decoder_push(&d, ids[i], out + n, cap - n, &k)
                           : tok_decoder_flush(&d, out + n, cap - n, &k);
        if (rc)
            break;
        n += k;
        if (i == n_ids) {
            out[n] = 0;
            *text = out;
            *len = n;
            return 0;
        }
    }
    free(out);
    return -1;
}
