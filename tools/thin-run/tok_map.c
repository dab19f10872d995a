/*
 * tok_map.c — the tokenizer's hash maps: token text -> id and (left id, right id) -> merge.
 * Open addressing with linear probing over power-of-two tables kept at most half full; each slot
 * holds what a probe compares, so that a lookup touches the token texts only for its match.
 */
#include <stdlib.h>
#include <string.h>

#include "tok_private.h"

static uint64_t hash_bytes(const char *s, size_t len)
{
    uint64_t h = 0xcbf29ce484222325ull; /* FNV-1a, then a final mix */
    for (size_t i = 0; i < len; i++)
        h = (h ^ (unsigned char)s[i]) * 0x100000001b3ull;
    h ^= h >> 33;
    h *= 0xff51afd7ed558ccdull;
    h ^= h >> 33;
    return h;
}

static uint64_t hash_u64(uint64_t x)
{
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ull;
    x ^= x >> 33;
    return x;
}

static uint32_t table_cap(uint32_t n)
{
    uint32_t cap = 16;
    while (cap < 2u * n + 2u)
        cap <<= 1;
    return cap;
}

static int key_matchable(const tok_token *tk)
{
    return tk->attr != TOK_ATTR_MISSING && tk->key_len > 0;
}

int tok_strmap_build(tok_strmap *m, const tok *t)
{
    m->cap = table_cap(t->n_vocab);
    m->slots = calloc(m->cap, sizeof *m->slots);
    if (!m->slots)
        return -1;
    for (uint32_t id = 0; id < t->n_vocab; id++) {
        const tok_token *tk = &t->tokens[id];
        if (!key_matchable(tk))
            continue;
        const char *key = t->arena + tk->key_off;
        const uint64_t h = hash_bytes(key, tk->key_len);
        const uint32_t tag = (uint32_t)(h >> 32);
        uint32_t i = (uint32_t)h & (m->cap - 1);
        int dup = 0;
        while (m->slots[i].id1) {
            const tok_strslot *o = &m->slots[i];
            if (o->tag == tag && o->key_len == tk->key_len &&
                !memcmp(t->arena + o->key_off, key, tk->key_len)) {
                dup = 1; /* the lower id keeps the key */
                break;
            }
            i = (i + 1) & (m->cap - 1);
        }
        if (!dup)
            m->slots[i] = (tok_strslot){id + 1, tag, tk->key_off, tk->key_len};
    }
    return 0;
}

int32_t tok_strmap_get(const tok_strmap *m, const tok *t, const char *s, size_t len)
{
    if (!m->slots)
        return -1;
    const uint64_t h = hash_bytes(s, len);
    const uint32_t tag = (uint32_t)(h >> 32);
    uint32_t i = (uint32_t)h & (m->cap - 1);
    while (m->slots[i].id1) {
        const tok_strslot *o = &m->slots[i];
        if (o->tag == tag && o->key_len == len && !memcmp(t->arena + o->key_off, s, len))
            return (int32_t)(o->id1 - 1);
        i = (i + 1) & (m->cap - 1);
    }
    return -1;
}

void tok_strmap_free(tok_strmap *m)
{
    free(m->slots);
    m->slots = NULL;
    m->cap = 0;
}

int tok_pairmap_init(tok_pairmap *m, uint32_t n_expected)
{
    m->cap = table_cap(n_expected);
    m->n = 0;
    m->slots = calloc(m->cap, sizeof *m->slots);
    if (!m->slots) {
        tok_pairmap_free(m);
        return -1;
    }
    return 0;
}

static uint64_t pair_key(int32_t left, int32_t right)
{
    return (((uint64_t)(uint32_t)left << 32) | (uint32_t)right) + 1;
}

void tok_pairmap_put(tok_pairmap *m, int32_t left, int32_t right, int32_t rank, int32_t merged)
{
    if (!m->slots || 2u * m->n + 2u >= m->cap)
        return; /* never fill the table past half */
    uint64_t key = pair_key(left, right);
    uint32_t i = (uint32_t)hash_u64(key) & (m->cap - 1);
    while (m->slots[i].key) {
        if (m->slots[i].key == key)
            return;
        i = (i + 1) & (m->cap - 1);
    }
    m->slots[i] = (tok_pairslot){key, rank, merged};
    m->n++;
}

int tok_pairmap_get(const tok_pairmap *m, int32_t left, int32_t right, int32_t *rank,
                    int32_t *merged)
{
    if (!m->slots)
        return 0;
    uint64_t key = pair_key(left, right);
    uint32_t i = (uint32_t)hash_u64(key) & (m->cap - 1);
    while (m->slots[i].key) {
        if (m->slots[i].key == key) {
            *rank = m->slots[i].rank;
            *merged = m->slots[i].merged;
            return 1;
        }
        i = (i + 1) & (m->cap - 1);
    }
    return 0;
}

void tok_pairmap_free(tok_pairmap *m)
{
    free(m->slots);
    m->slots = NULL;
    m->cap = m->n = 0;
}
