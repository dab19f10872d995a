/*
 * pool.c — persistent worker threads woken per job by a generation counter (pool.h).
 */
#include <pthread.h>
#include <stdlib.h>

#include "pool.h"

typedef struct worker {
    pool *p;
    unsigned part;
    pthread_t tid;
} worker;

struct pool {
    unsigned n;             /* parts (threads including the caller) */
    worker *w;              /* n - 1 workers */
    unsigned started;       /* workers actually running */
    pthread_mutex_t mu;
    pthread_cond_t wake, done;
    unsigned long gen;      /* bumped for every job */
    unsigned pending;       /* workers still running the current job */
    int stop;
    pool_fn fn;
    void *arg;
};

static void *worker_main(void *a) {
    worker *w = a;
    pool *p = w->p;
    unsigned long seen = 0;
    pthread_mutex_lock(&p->mu);
    for (;;) {
        while (!p->stop && p->gen == seen) pthread_cond_wait(&p->wake, &p->mu);
        if (p->stop) break;
        seen = p->gen;
        pool_fn fn = p->fn;
        void *arg = p->arg;
        pthread_mutex_unlock(&p->mu);
        fn(arg, w->part, p->n);
        pthread_mutex_lock(&p->mu);
        if (--p->pending == 0) pthread_cond_signal(&p->done);
    }
    pthread_mutex_unlock(&p->mu);
    return NULL;
}

pool *pool_new(unsigned n) {
    pool *p = calloc(1, sizeof *p);
    if (!p) return NULL;
    p->n = n ? n : 1;
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->wake, NULL);
    pthread_cond_init(&p->done, NULL);
    if (p->n > 1 && !(p->w = calloc(p->n - 1, sizeof *p->w))) {
        pool_free(p);
        return NULL;
    }
    for (unsigned i = 0; i + 1 < p->n; i++) {
        p->w[i] = (worker){p, i + 1, 0};
        if (pthread_create(&p->w[i].tid, NULL, worker_main, &p->w[i]) != 0) {
            pool_free(p);
            return NULL;
        }
        p->started++;
    }
    return p;
}

unsigned pool_size(const pool *p) { return p->n; }

void pool_run(pool *p, pool_fn fn, void *arg) {
    if (p->n == 1) {
        fn(arg, 0, 1);
        return;
    }
    pthread_mutex_lock(&p->mu);
    p->fn = fn;
    p->arg = arg;
    p->pending = p->n - 1;
    p->gen++;
    pthread_cond_broadcast(&p->wake);
    pthread_mutex_unlock(&p->mu);
    fn(arg, 0, p->n);
    pthread_mutex_lock(&p->mu);
    while (p->pending) pthread_cond_wait(&p->done, &p->mu);
    pthread_mutex_unlock(&p->mu);
}

void pool_free(pool *p) {
    if (!p) return;
    pthread_mutex_lock(&p->mu);
    p->stop = 1;
    pthread_cond_broadcast(&p->wake);
    pthread_mutex_unlock(&p->mu);
    for (unsigned i = 0; i < p->started; i++) pthread_join(p->w[i].tid, NULL);
    pthread_cond_destroy(&p->wake);
    pthread_cond_destroy(&p->done);
    pthread_mutex_destroy(&p->mu);
    free(p->w);
    free(p);
}
