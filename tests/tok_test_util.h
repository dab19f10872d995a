/*
 * tok_test_util.h — helpers shared by the tokenizer tests: reading fixture files.
 */
#ifndef THIN_TOK_TEST_UTIL_H
#define THIN_TOK_TEST_UTIL_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Reads fixtures/<rel> (or $FIX/<rel>) whole; returns a malloc'd, NUL-terminated buffer or NULL. */
static char *fixture_read(const char *rel, size_t *len)
{
    const char *dir = getenv("FIX") ? getenv("FIX") : "fixtures";
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", dir, rel);
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    char *buf = NULL;
    size_t n = 0, cap = 0;
    for (;;) {
        if (cap - n < 65536) {
            char *b = realloc(buf, cap + 65536 + 1);
            if (!b) {
                free(buf);
                fclose(f);
                return NULL;
            }
            buf = b;
            cap += 65536;
        }
        size_t got = fread(buf + n, 1, cap - n, f);
        n += got;
        if (got == 0)
            break;
    }
    fclose(f);
    buf[n] = 0;
    *len = n;
    return buf;
}

#endif
