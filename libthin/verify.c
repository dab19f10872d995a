/*
 * verify.c — thin_file_verify: every chunk's SHA-256 (threads take chunks from a shared counter),
 * every padding run, and the whole-file digest (SPEC.md §5).
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <zstd.h>

#include "file_private.h"

typedef struct verify_job {
    thin_file *f;
    size_t n;                 /* chunks */
    uint64_t total;           /* raw bytes of all chunks */
    size_t scratch_size;      /* largest raw size of a compressed chunk */
    atomic_size_t next;       /* next file-order position to take */
    atomic_uint_fast64_t done;/* raw bytes checked */
    atomic_int cancel;
    pthread_mutex_t lock;
    size_t fail;              /* lowest failing file-order position, or SIZE_MAX */
    thin_status fail_status;
    const char *fail_why;
    thin_progress_fn progress;
    void *user;
} verify_job;

static void note_failure(verify_job *v, size_t i, thin_status s, const char *why)
{
    pthread_mutex_lock(&v->lock);
    if (i < v->fail) {
        v->fail = i;
        v->fail_status = s;
        v->fail_why = why;
    }
    pthread_mutex_unlock(&v->lock);
}

static size_t current_fail(verify_job *v)
{
    pthread_mutex_lock(&v->lock);
    size_t r = v->fail;
    pthread_mutex_unlock(&v->lock);
    return r;
}

/* Takes chunks until none are left; the calling (main) thread also reports progress. */
static void verify_loop(verify_job *v, int main_thread)
{
    ZSTD_DCtx *dctx = ZSTD_createDCtx();
    uint8_t *scratch = v->scratch_size ? malloc(v->scratch_size) : NULL;
    if (!dctx || (v->scratch_size && !scratch)) {
        note_failure(v, 0, THIN_E_NOMEM, "out of memory");
        atomic_store(&v->cancel, 1);
    }
    while (!atomic_load(&v->cancel)) {
        size_t i = atomic_fetch_add(&v->next, 1);
        if (i >= v->n || i > current_fail(v)) break;
        size_t ci = v->f->file_order[i];
        const char *why = NULL;
        thin_status s = thin_file_check_chunk(v->f, ci, dctx, scratch, &why);
        if (s) note_failure(v, i, s, why);
        uint64_t done = atomic_fetch_add(&v->done, v->f->L.chunks[ci].raw_size) +
                        v->f->L.chunks[ci].raw_size;
        if (main_thread && v->progress && v->progress(v->user, done, v->total))
            atomic_store(&v->cancel, 2);
    }
    ZSTD_freeDCtx(dctx);
    free(scratch);
}

static void *verify_thread(void *arg)
{
    verify_loop(arg, 0);
    return NULL;
}

static thin_status verify_chunks(thin_file *f, unsigned threads, thin_progress_fn progress,
                                 void *user)
{
    verify_job v = {.f = f, .n = f->L.n_chunks, .fail = SIZE_MAX, .progress = progress,
                    .user = user};
    pthread_mutex_init(&v.lock, NULL);
    for (size_t i = 0; i < v.n; i++) {
        const thin_chunk_info *c = &f->L.chunks[i];
        v.total += c->raw_size;
        if (c->codec != THIN_CODEC_NONE && c->raw_size > v.scratch_size) v.scratch_size = c->raw_size;
    }
    if (threads == 0) threads = thin_cpu_count();
    if (threads > v.n) threads = v.n ? (unsigned)v.n : 1;
    pthread_t tid[256];
    unsigned started = 0;
    for (unsigned t = 1; t < threads && t < 256; t++, started++)
        if (pthread_create(&tid[started], NULL, verify_thread, &v) != 0) break;
    verify_loop(&v, 1);
    for (unsigned t = 0; t < started; t++) pthread_join(tid[t], NULL);
    pthread_mutex_destroy(&v.lock);
    if (v.fail != SIZE_MAX && v.fail_status == THIN_E_NOMEM)
        return thin_errf(f->err, f->label, THIN_E_NOMEM, "out of memory");
    if (v.fail != SIZE_MAX) return thin_file_chunk_error(f, f->file_order[v.fail], v.fail_status, v.fail_why);
    if (atomic_load(&v.cancel))
        return thin_errf(f->err, f->label, THIN_E_STATE, "verification cancelled");
    if (progress && progress(user, v.total, v.total))
        return thin_errf(f->err, f->label, THIN_E_STATE, "verification cancelled");
    return THIN_OK;
}

static thin_status verify_digest(thin_file *f)
{
    size_t n = f->L.n_chunks;
    uint8_t (*sha)[32] = malloc((n ? n : 1) * 32);
    if (!sha) return thin_errf(f->err, f->label, THIN_E_NOMEM, "out of memory");
    for (size_t i = 0; i < n; i++) memcpy(sha[i], f->L.chunks[f->file_order[i]].sha256, 32);
    uint8_t d[32];
    thin_status s = thin_digest_compute(f->manifest, f->manifest_len, (const uint8_t(*)[32])sha, n, d);
    free(sha);
    if (s) return thin_errf(f->err, f->label, s, "SHA-256 failed");
    if (memcmp(d, f->trailer.digest, 32))
        return thin_errf(f->err, f->label, THIN_E_DIGEST, "whole-file digest mismatch");
    return THIN_OK;
}

thin_status thin_file_verify(thin_file *f, unsigned threads, thin_progress_fn progress, void *user)
{
    if (!f || !f->opened) return THIN_E_INVALID_ARG;
    for (size_t i = 0; i < f->n_pads; i++) {
        const thin_pad *p = &f->pads[i];
        if (!thin_all_zero(f->base + p->offset, p->len))
            return thin_errf(f->err, f->label, THIN_E_PADDING, "padding at offset %llu (%llu bytes)"
                             " is not zero", (unsigned long long)p->offset,
                             (unsigned long long)p->len);
    }
    if (f->map) madvise(f->map, f->size, MADV_WILLNEED); /* every byte is read next */
    thin_status s = verify_chunks(f, threads, progress, user);
    return s ? s : verify_digest(f);
}
