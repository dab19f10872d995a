/* gguf_vocab.c — GGUF header and KV walk for vocab-only files (see gguf_vocab.h). */
#include "gguf_vocab.h"

#include <stdio.h>
#include <string.h>
#include "cli.h"

typedef struct cur {
    const uint8_t *p;
    size_t left;
} cur;

static int take(cur *c, void *out, size_t n)
{
    if (c->left < n)
        return -1;
    if (out)
        memcpy(out, c->p, n);
    c->p += n;
    c->left -= n;
    return 0;
}

static int u32(cur *c, uint32_t *v)
{
    uint8_t b[4];
    if (take(c, b, 4))
        return -1;
    *v = (uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 | (uint32_t)b[3] << 24;
    return 0;
}

static int u64(cur *c, uint64_t *v)
{
    uint32_t lo, hi;
    if (u32(c, &lo) || u32(c, &hi))
        return -1;
    *v = (uint64_t)hi << 32 | lo;
    return 0;
}

static int skip_string(cur *c)
{
    uint64_t n;
    return u64(c, &n) || n > c->left ? -1 : take(c, NULL, (size_t)n);
}

static size_t scalar_size(uint32_t type)
{
    static const size_t sz[13] = {1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8};
    return type < 13 ? sz[type] : 0;
}

/* Skips one value of `type`; arrays of arrays are refused (GGUF allows no such thing in vocabs). */
static int skip_value(cur *c, uint32_t type, uint64_t *count, uint32_t *item_type)
{
    if (type == 8)
        return skip_string(c);
    if (type != 9) {
        size_t s = scalar_size(type);
        return s ? take(c, NULL, s) : -1;
    }
    uint64_t n;
    if (u32(c, item_type) || u64(c, &n))
        return -1;
    *count = n;
    if (*item_type == 8) {
        for (uint64_t i = 0; i < n; i++)
            if (skip_string(c))
                return -1;
        return 0;
    }
    size_t s = scalar_size(*item_type);
    if (!s || n > c->left / s)
        return -1;
    return take(c, NULL, (size_t)(n * s));
}


int gguf_is_gguf(const void *data, size_t size)
{
    return size >= 4 && memcmp(data, "GGUF", 4) == 0;
}

int gguf_vocab_check(const void *data, size_t size, uint64_t *n_tokens, char *err, size_t errlen)
{
    cur c = {data, size};
    uint32_t version;
    uint64_t n_tensors, n_kv;
    if (!gguf_is_gguf(data, size))
        return cli_fail(err, errlen, "not a GGUF file (no GGUF magic)");
    take(&c, NULL, 4);
    if (u32(&c, &version) || u64(&c, &n_tensors) || u64(&c, &n_kv))
        return cli_fail(err, errlen, "GGUF header truncated");
    if (version < 2 || version > 3)
        return cli_fail(err, errlen, "GGUF version %u not supported (2 or 3)", version);
    int found = 0;
    for (uint64_t i = 0; i < n_kv; i++) {
        uint64_t klen, count = 0;
        uint32_t type, item = 0;
        if (u64(&c, &klen) || klen > c.left || klen > 65535)
            return cli_fail(err, errlen, "GGUF key %llu: bad key length", (unsigned long long)i);
        const char *key = (const char *)c.p;
        take(&c, NULL, (size_t)klen);
        if (u32(&c, &type) || skip_value(&c, type, &count, &item))
            return cli_fail(err, errlen, "GGUF key '%.*s': bad or truncated value", (int)klen, key);
        if (klen == 21 && memcmp(key, "tokenizer.ggml.tokens", 21) == 0) {
            if (type != 9 || item != 8)
                return cli_fail(err, errlen, "GGUF tokenizer.ggml.tokens is not an array of strings");
            *n_tokens = count;
            found = 1;
        }
    }
    if (!found)
        return cli_fail(err, errlen, "GGUF file has no tokenizer.ggml.tokens");
    return 0;
}
