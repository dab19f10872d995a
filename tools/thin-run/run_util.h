/*
 * run_util.h — small pieces of thin-run's front end: reading whole inputs, parsing token ids,
 * and holding back generated text that may be the start of a stop string.
 */
#ifndef THIN_RUN_UTIL_H
#define THIN_RUN_UTIL_H

#include <stddef.h>
#include <stdint.h>

/* Reads a whole file ('-' = stdin) into a NUL-terminated malloc'd buffer. Returns 0, or -1 with
 * errno set. */
int read_whole(const char *path, char **data, size_t *len);

/* Parses whitespace-separated token ids, each in [0, vocab), into a malloc'd array (at least one
 * id). Returns 0, or -1 with a message naming the offending id in err. */
int ids_parse(const char *text, uint32_t vocab, int32_t **ids, size_t *n, char *err,
              size_t errlen);

/* Receives text that is safe to show. */
typedef void (*text_sink)(void *user, const char *s, size_t n);

typedef struct stop_filter {
    const char *const *stops; /* n_stops non-empty strings */
    int n_stops;
    char *pend;               /* text held back: it may begin a stop string */
    size_t n_pend, cap;
    text_sink sink;
    void *user;
} stop_filter;

void stop_filter_init(stop_filter *f, const char *const *stops, int n_stops, text_sink sink,
                      void *user);
/* Adds generated text. Passes on everything that cannot be part of a stop string; when a stop
 * string is complete, passes on the text before it and returns 1 (the rest is dropped).
 * Returns 0 to continue, -1 when out of memory. */
int stop_filter_push(stop_filter *f, const char *s, size_t n);
/* Passes on the text held back (the generation ended without a stop string) and frees. */
void stop_filter_finish(stop_filter *f);

#endif /* THIN_RUN_UTIL_H */
