/*
 * writer_chunks.c — cuts the current entry into chunks, hashes and compresses a batch of chunks
 * on `threads` threads (one chunk each), then writes the batch in order. The bytes written depend
 * only on the data, the chunk size, the codec and the level: never on the thread count.
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <zstd.h>

#include "writer_private.h"

thin_status thin_wchunks_alloc(thin_writer *w)
{
    unsigned t = w->threads;
    w->jobs = calloc(t, sizeof *w->jobs);
    w->slots = calloc(t, sizeof *w->slots);
    w->zbuf = calloc(t, sizeof *w->zbuf);
    w->cctx = calloc(t, sizeof *w->cctx);
    if (!w->jobs || !w->slots || !w->zbuf || !w->cctx)
        return thin_writer_fail(w, THIN_E_NOMEM, "out of memory");
    w->zcap = ZSTD_compressBound(w->chunk_size);
    return THIN_OK;
}

void thin_wchunks_free(thin_writer *w)
{
    for (unsigned i = 0; i < w->threads; i++) {
        if (w->slots) free(w->slots[i]);
        if (w->zbuf) free(w->zbuf[i]);
        if (w->cctx) ZSTD_freeCCtx(w->cctx[i]);
    }
    free(w->jobs);
    free(w->slots);
    free(w->zbuf);
    free(w->cctx);
}

typedef struct job_arg {
    thin_writer *w;
    unsigned i;
} job_arg;

static void run_job(thin_writer *w, unsigned i)
{
    thin_wjob *j = &w->jobs[i];
    j->status = thin_sha256(j->src, j->raw, j->sha);
    if (j->status || w->codec != THIN_CODEC_ZSTD) return;
    if (!w->cctx[i]) w->cctx[i] = ZSTD_createCCtx();
    if (!w->zbuf[i]) w->zbuf[i] = malloc(w->zcap);
    if (!w->cctx[i] || !w->zbuf[i]) {
        j->status = THIN_E_NOMEM;
        return;
    }
    size_t r = ZSTD_compressCCtx(w->cctx[i], w->zbuf[i], w->zcap, j->src, j->raw, w->level);
    if (ZSTD_isError(r)) {
        j->status = THIN_E_CODEC;
        return;
    }
    j->stored = r;
    j->status = thin_sha256(w->zbuf[i], r, j->zsha);
}

static void *job_thread(void *p)
{
    job_arg *a = p;
    run_job(a->w, a->i);
    return NULL;
}

static thin_status run_batch(thin_writer *w)
{
    pthread_t tid[64];
    job_arg arg[64];
    unsigned started = 0, n = w->n_jobs;
    for (unsigned i = 1; i < n && i < 64; i++) {
        arg[i] = (job_arg){w, i};
        if (pthread_create(&tid[i], NULL, job_thread, &arg[i]) != 0) break;
        started = i;
    }
    run_job(w, 0);
    for (unsigned i = started + 1; i < n; i++) run_job(w, i);
    for (unsigned i = 1; i <= started; i++) pthread_join(tid[i], NULL);
    for (unsigned i = 0; i < n; i++) {
        thin_status s = w->jobs[i].status;
        if (s == THIN_E_NOMEM) return thin_writer_fail(w, s, "out of memory");
        if (s) return thin_writer_fail(w, s, "%s failed", s == THIN_E_CODEC ? "zstd" : "SHA-256");
    }
    return THIN_OK;
}

/* Writes job i's payload at the next 4096 boundary and records its chunk. */
static thin_status emit(thin_writer *w, const thin_wjob *j)
{
    thin_status s = thin_wout_zero_to(w, THIN_DATA_ALIGN);
    if (s) return s;
    int z = w->codec == THIN_CODEC_ZSTD;
    uint64_t off = w->pos;
    size_t stored = z ? j->stored : j->raw;
    const uint8_t *payload = z ? w->zbuf[j - w->jobs] : j->src;
    if ((s = thin_wout_write(w, payload, stored))) return s;
    char hex[65];
    thin_hex32(j->sha, hex);
    json_t *c = json_pack("{sIsIsIssss}", "offset", (json_int_t)off, "stored", (json_int_t)stored,
                          "raw", (json_int_t)j->raw, "codec", thin_codec_name(w->codec),
                          "sha256", hex);
    if (!c || json_array_append_new(w->cur_chunks, c))
        return thin_writer_fail(w, THIN_E_NOMEM, "out of memory");
    thin_record *r = &w->recs[w->cur_done];
    *r = (thin_record){.type = THIN_REC_CHUNK, .codec = (uint16_t)w->codec, .entry = w->cur_index,
                       .chunk = w->cur_done, .offset = off, .stored = stored, .raw = j->raw,
                       .kind = w->cur_blob ? THIN_KIND_BLOB : THIN_KIND_TENSOR};
    memcpy(r->sha, z ? j->zsha : j->sha, 16);
    if (w->n_sha == w->cap_sha) {
        size_t cap = w->cap_sha ? w->cap_sha * 2 : 256;
        uint8_t(*p)[32] = realloc(w->sha, cap * 32);
        if (!p) return thin_writer_fail(w, THIN_E_NOMEM, "out of memory");
        w->sha = p;
        w->cap_sha = cap;
    }
    memcpy(w->sha[w->n_sha++], j->sha, 32);
    w->cur_done++;
    return THIN_OK;
}

thin_status thin_wchunks_flush(thin_writer *w)
{
    if (!w->n_jobs) return THIN_OK;
    thin_status s = run_batch(w);
    for (unsigned i = 0; !s && i < w->n_jobs; i++) s = emit(w, &w->jobs[i]);
    w->n_jobs = 0;
    return s;
}

static thin_status push(thin_writer *w, const uint8_t *src, size_t raw, int borrowed)
{
    w->jobs[w->n_jobs++] = (thin_wjob){.src = src, .raw = raw, .borrowed = borrowed};
    return w->n_jobs == w->threads ? thin_wchunks_flush(w) : THIN_OK;
}

thin_status thin_wchunks_write(thin_writer *w, const uint8_t *data, size_t n)
{
    thin_status s = THIN_OK;
    int borrowed = 0;
    while (!s && n) {
        uint64_t j = w->cur_done + w->n_jobs;
        size_t raw = (size_t)thin_chunk_raw(w->cur_nbytes, w->chunk_size, j);
        if (w->fill == 0 && n >= raw) {
            borrowed = 1;
            s = push(w, data, raw, 1);
            data += raw;
            n -= raw;
            continue;
        }
        uint8_t **slot = &w->slots[w->n_jobs];
        if (!*slot && !(*slot = malloc(w->chunk_size)))
            return thin_writer_fail(w, THIN_E_NOMEM, "out of memory");
        size_t take = raw - w->fill < n ? raw - w->fill : n;
        memcpy(*slot + w->fill, data, take);
        w->fill += take;
        data += take;
        n -= take;
        if (w->fill == raw) {
            w->fill = 0;
            s = push(w, *slot, raw, 0);
        }
    }
    if (!s && borrowed) {
        /* The caller's bytes must be hashed before returning. A chunk begun after them waits in
         * slot n_jobs, but after the flush filling resumes in slot 0: move it there. */
        unsigned k = w->n_jobs;
        s = thin_wchunks_flush(w);
        if (!s && w->fill && k) {
            uint8_t *t = w->slots[0];
            w->slots[0] = w->slots[k];
            w->slots[k] = t;
        }
    }
    return s;
}
