/*
 * tok_bpe.c — the BPE merge loop shared by both tokenizer kinds.
 *
 * A word starts as one symbol per character (SentencePiece) or per byte (byte-level). Every
 * adjacent pair that may merge becomes a candidate in a min-heap ordered by (priority, left
 * position): the merge rank for pair tables (Hugging Face BPE, GGUF merges) or minus the score of
 * the concatenated piece (llama.cpp's llm_tokenizer_spm). The best candidate merges, candidates
 * whose symbols changed since they were queued are dropped, and the new neighbours are queued.
 * Symbols left without a token fall back to byte pieces, else to unk.
 */
#include <stdlib.h>
#include <string.h>

#include "tok_private.h"

typedef struct sym {
    uint32_t start, len; /* bytes of the word; len 0 = merged away */
    int32_t id;          /* token of these bytes, or -1 */
    int32_t prev, next;  /* neighbours, -1 at the ends */
} sym;

typedef struct cand {
    float key;           /* lower merges first */
    uint32_t left, size; /* left symbol, bytes of the merged pair */
    int32_t right, merged;
} cand;

typedef struct heap {
    cand *v;
    size_t n, cap;
} heap;

static int cand_less(const cand *a, const cand *b)
{
    return a->key < b->key || (a->key == b->key && a->left < b->left);
}

static int heap_push(heap *h, cand c)
{
    if (h->n == h->cap) {
        size_t cap = h->cap ? h->cap * 2 : 64;
        cand *v = realloc(h->v, cap * sizeof *v);
        if (!v)
            return -1;
        h->v = v;
        h->cap = cap;
    }
    size_t i = h->n++;
    while (i > 0 && cand_less(&c, &h->v[(i - 1) / 2])) {
        h->v[i] = h->v[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    h->v[i] = c;
    return 0;
}

static cand heap_pop(heap *h)
{
    cand top = h->v[0], last = h->v[--h->n];
    size_t i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= h->n)
            break;
        if (c + 1 < h->n && cand_less(&h->v[c + 1], &h->v[c]))
            c++;
        if (!cand_less(&h->v[c], &last))
            break;
        h->v[i] = h->v[c];
        i = c;
    }
    if (h->n)
        h->v[i] = last;
    return top;
}

int tok_ids_push(tok_ids *o, int32_t id)
{
    if (o->n == o->cap) {
        size_t cap = o->cap ? o->cap * 2 : 64;
        int32_t *v = realloc(o->v, cap * sizeof *v);
        if (!v)
            return -1;
        o->v = v;
        o->cap = cap;
    }
    o->v[o->n++] = id;
    return 0;
}

/* Queues the pair (l, r) if it may merge. */
static int try_pair(const tok *t, const char *s, const sym *sy, int32_t l, int32_t r, heap *h)
{
    if (l < 0 || r < 0)
        return 0;
    cand c = {0};
    c.left = (uint32_t)l;
    c.right = r;
    c.size = sy[l].len + sy[r].len;
    if (t->mode == TOK_MERGE_RANKS) {
        int32_t rank;
        if (sy[l].id < 0 || sy[r].id < 0 ||
            !tok_pairmap_get(&t->pairs, sy[l].id, sy[r].id, &rank, &c.merged))
            return 0;
        c.key = (float)rank;
    } else {
        c.merged = tok_strmap_get(&t->map, t, s + sy[l].start, c.size);
        if (c.merged < 0 || t->tokens[c.merged].attr != TOK_ATTR_NORMAL)
            return 0;
        c.key = -t->tokens[c.merged].score;
    }
    return heap_push(h, c);
}

/* Splits the word into initial symbols; returns their count. */
static size_t init_symbols(const tok *t, const char *s, size_t len, sym *sy)
{
    size_t n = 0;
    for (size_t i = 0; i < len; n++) {
        size_t l = 1;
        if (t->kind == TOK_SPM_BPE) {
            l = tok_utf8_lead_len((unsigned char)s[i]);
            if (l > len - i)
                l = len - i;
        }
        sy[n].start = (uint32_t)i;
        sy[n].len = (uint32_t)l;
        sy[n].id = l == 1 && t->kind == TOK_BYTE_BPE ? t->byte_id[(unsigned char)s[i]]
                                                     : tok_strmap_get(&t->map, t, s + i, l);
        sy[n].prev = (int32_t)n - 1;
        sy[n].next = (int32_t)n + 1;
        i += l;
    }
    if (n)
        sy[n - 1].next = -1;
    return n;
}

static int merge_all(const tok *t, const char *s, sym *sy, size_t n, heap *h)
{
    for (size_t i = 0; i + 1 < n; i++)
        if (try_pair(t, s, sy, (int32_t)i, (int32_t)i + 1, h))
            return -1;
    while (h->n) {
        cand c = heap_pop(h);
        sym *l = &sy[c.left], *r = &sy[c.right];
        if (l->len == 0 || r->len == 0 || l->len + r->len != c.size || l->next != c.right)
            continue; /* stale */
        l->len += r->len;
        l->id = c.merged;
        r->len = 0;
        l->next = r->next;
        if (r->next >= 0)
            sy[r->next].prev = (int32_t)c.left;
        if (try_pair(t, s, sy, l->prev, (int32_t)c.left, h) ||
            try_pair(t, s, sy, (int32_t)c.left, l->next, h))
            return -1;
    }
    return 0;
}

static int push_unk(const tok *t, tok_ids *out)
{
    if (t->unk < 0)
        return 0; /* no unk token: the bytes are dropped, as tokenizers does */
    if (t->fuse_unk && out->n && out->v[out->n - 1] == t->unk)
        return 0;
    return tok_ids_push(out, t->unk);
}

/* A symbol with no token: its bytes as byte pieces, else unk. */
static int fallback(const tok *t, const char *s, const sym *y, tok_ids *out)
{
    if (t->kind == TOK_BYTE_BPE || t->byte_fallback) {
        for (uint32_t k = 0; k < y->len; k++) {
            int32_t b = t->byte_id[(unsigned char)s[y->start + k]];
            if ((b >= 0 ? tok_ids_push(out, b) : push_unk(t, out)) != 0)
                return -1;
        }
        return 0;
    }
    return push_unk(t, out);
}

int tok_bpe_word(const tok *t, const char *s, size_t len, tok_ids *out)
{
    if (len == 0)
        return 0;
    if (t->ignore_merges) {
        int32_t id = tok_strmap_get(&t->map, t, s, len);
        if (id >= 0)
            return tok_ids_push(out, id);
    }
    if (len > UINT32_MAX / 2)
        return -1;
    sym *sy = malloc(len * sizeof *sy);
    heap h = {0};
    int rc = -1;
    if (!sy)
        return -1;
    size_t n = init_symbols(t, s, len, sy);
    if (merge_all(t, s, sy, n, &h) == 0) {
        rc = 0;
        for (int32_t i = 0; i >= 0 && rc == 0; i = sy[i].next)
            rc = sy[i].id >= 0 ? tok_ids_push(out, sy[i].id) : fallback(t, s, &sy[i], out);
    }
    free(h.v);
    free(sy);
    return rc;
}
