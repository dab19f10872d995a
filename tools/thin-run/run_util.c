/*
 * run_util.c — input reading, id parsing and the stop-string filter (run_util.h).
 */
#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "run_util.h"

int read_whole(const char *path, char **data, size_t *len) {
    FILE *f = strcmp(path, "-") == 0 ? stdin : fopen(path, "rb");
    if (!f) return -1;
    size_t cap = 4096, n = 0;
    char *buf = malloc(cap);
    while (buf) {
        n += fread(buf + n, 1, cap - 1 - n, f);
        if (n < cap - 1) break;
        char *nb = cap > SIZE_MAX / 2 ? NULL : realloc(buf, cap * 2);
        if (!nb) free(buf);
        buf = nb;
        cap *= 2;
    }
    int err = !buf || ferror(f);
    if (f != stdin) fclose(f);
    if (err) {
        free(buf);
        errno = buf ? EIO : ENOMEM;
        return -1;
    }
    buf[n] = '\0';
    *data = buf;
    *len = n;
    return 0;
}

int ids_parse(const char *text, uint32_t vocab, int32_t **ids, size_t *n, char *err,
              size_t errlen) {
    size_t cap = 64, count = 0;
    int32_t *out = malloc(cap * sizeof *out);
    const char *s = text;
    for (;;) {
        while (isspace((unsigned char)*s)) s++;
        if (!*s || !out) break;
        char *end;
        errno = 0;
        long long v = strtoll(s, &end, 10);
        if (end == s || errno || (*end && !isspace((unsigned char)*end)) || v < 0 ||
            (unsigned long long)v >= vocab) {
            int len = (int)strcspn(s, " \t\r\n");
            snprintf(err, errlen, "bad token id '%.*s' (ids are integers in 0..%u)",
                     len > 32 ? 32 : len, s, vocab - 1);
            free(out);
            return -1;
        }
        if (count == cap) {
            int32_t *no = realloc(out, (cap *= 2) * sizeof *out);
            if (!no) free(out);
            out = no;
            if (!out) break;
        }
        out[count++] = (int32_t)v;
        s = end;
    }
    if (!out || count == 0) {
        snprintf(err, errlen, out ? "no token ids" : "out of memory");
        free(out);
        return -1;
    }
    *ids = out;
    *n = count;
    return 0;
}

void stop_filter_init(stop_filter *f, const char *const *stops, int n_stops, text_sink sink,
                      void *user) {
    *f = (stop_filter){stops, n_stops, NULL, 0, 0, sink, user};
}

/* Length of the longest suffix of s[0..n) that is a proper prefix of a stop string. */
static size_t held_suffix(const stop_filter *f, const char *s, size_t n) {
    size_t best = 0;
    for (int i = 0; i < f->n_stops; i++) {
        size_t sl = strlen(f->stops[i]);
        for (size_t k = sl - 1 < n ? sl - 1 : n; k > best; k--)
            if (memcmp(s + n - k, f->stops[i], k) == 0) {
                best = k;
                break;
            }
    }
    return best;
}

int stop_filter_push(stop_filter *f, const char *s, size_t n) {
    if (f->n_stops == 0) {
        if (n) f->sink(f->user, s, n);
        return 0;
    }
    if (f->n_pend + n + 1 > f->cap) {
        size_t cap = (f->n_pend + n + 1) * 2;
        char *p = realloc(f->pend, cap);
        if (!p) return -1;
        f->pend = p;
        f->cap = cap;
    }
    memcpy(f->pend + f->n_pend, s, n);
    f->n_pend += n;
    f->pend[f->n_pend] = '\0';
    size_t first = SIZE_MAX;
    for (int i = 0; i < f->n_stops; i++) {
        const char *hit = memmem(f->pend, f->n_pend, f->stops[i], strlen(f->stops[i]));
        if (hit && (size_t)(hit - f->pend) < first) first = (size_t)(hit - f->pend);
    }
    if (first != SIZE_MAX) {
        if (first) f->sink(f->user, f->pend, first);
        f->n_pend = 0;
        return 1;
    }
    size_t keep = held_suffix(f, f->pend, f->n_pend), out = f->n_pend - keep;
    if (out) {
        f->sink(f->user, f->pend, out);
        memmove(f->pend, f->pend + out, keep);
        f->n_pend = keep;
    }
    return 0;
}

void stop_filter_finish(stop_filter *f) {
    if (f->n_pend) f->sink(f->user, f->pend, f->n_pend);
    free(f->pend);
    f->pend = NULL;
    f->n_pend = f->cap = 0;
}
