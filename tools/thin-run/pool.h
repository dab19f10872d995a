/*
 * pool.h — a small persistent thread pool: runs one function in n parts at once and waits.
 */
#ifndef THIN_RUN_POOL_H
#define THIN_RUN_POOL_H

typedef struct pool pool;

/* fn(arg, part, n_parts) is called once for each part 0..n_parts-1. */
typedef void (*pool_fn)(void *arg, unsigned part, unsigned n_parts);

/* Starts a pool of n threads in all (the caller counts as one: n - 1 are created). NULL on
 * failure. */
pool *pool_new(unsigned n);
/* Number of parts pool_run splits work into. */
unsigned pool_size(const pool *p);
/* Runs fn in pool_size(p) parts (part 0 on the calling thread) and returns when all are done. */
void pool_run(pool *p, pool_fn fn, void *arg);
/* Stops and joins the threads. NULL allowed. */
void pool_free(pool *p);

#endif /* THIN_RUN_POOL_H */
