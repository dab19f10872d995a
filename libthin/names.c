/*
 * names.c — hash index from names to entry numbers, used by the reader and the writer.
 */
#include <stdlib.h>
#include <string.h>

#include "names_private.h"

static uint64_t fnv1a(const char *s)
{
    uint64_t h = 0xcbf29ce484222325ull;
    for (; *s; s++) h = (h ^ (uint8_t)*s) * 0x100000001b3ull;
    return h;
}

static size_t slot_of(const thin_names *t, const char *name)
{
    size_t i = (size_t)fnv1a(name) & (t->cap - 1);
    while (t->key[i] && strcmp(t->key[i], name) != 0) i = (i + 1) & (t->cap - 1);
    return i;
}

static int grow(thin_names *t)
{
    size_t cap = t->cap ? t->cap * 2 : 64;
    thin_names n = {calloc(cap, sizeof *n.key), calloc(cap, sizeof *n.val), cap, 0};
    if (!n.key || !n.val) {
        free(n.key);
        free(n.val);
        return -1;
    }
    for (size_t i = 0; i < t->cap; i++) {
        if (!t->key[i]) continue;
        size_t j = slot_of(&n, t->key[i]);
        n.key[j] = t->key[i];
        n.val[j] = t->val[i];
        n.len++;
    }
    thin_names_free(t);
    *t = n;
    return 0;
}

int thin_names_insert(thin_names *t, const char *name, uint32_t val, uint32_t *old)
{
    if ((t->len + 1) * 2 > t->cap && grow(t) != 0) return -1;
    size_t i = slot_of(t, name);
    if (t->key[i]) {
        if (old) *old = t->val[i];
        return 1;
    }
    t->key[i] = name;
    t->val[i] = val;
    t->len++;
    return 0;
}

int thin_names_find(const thin_names *t, const char *name, uint32_t *val)
{
    if (!t->cap) return -1;
    size_t i = slot_of(t, name);
    if (!t->key[i]) return -1;
    *val = t->val[i];
    return 0;
}

void thin_names_free(thin_names *t)
{
    free(t->key);
    free(t->val);
    memset(t, 0, sizeof *t);
}
