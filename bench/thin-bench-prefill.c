/*
 * thin-bench-prefill — a prompt's prefill timed several times in one CUDA session, so that the
 * first run (which pays one-time costs: the kernels' first launches, and with THIN_CUDA_GEMM=lt
 * cuBLASLt's first calls) can be told from the runs after it.
 *
 *   thin-bench-prefill MODEL.thin [LEN[,LEN...] [REPEAT]]   (make bench builds it with the CUDA backend)
 *
 * The prompt is the ids 1..LEN (default 512); with several lengths each run prefills each of them
 * in turn (a new length's first run pays what depends on the batch size, such as cuBLASLt's
 * heuristic, but not what the process pays once). It prints a JSON line with the seconds the session
 * took to create (weights to the device, kernels set up, warm-up), then each of REPEAT runs
 * (default 4) does what thin-run's prefill does, all LEN ids as one batch from position 0 with the
 * last row's argmax (cuda_session_prefill; with THIN_BENCH_SPLIT=1 the earlier form: the first
 * LEN - 1 ids as one batch and the last as one decode step), and prints one JSON line per length:
 * the run, the length, seconds, prompt tokens per second and the argmax id (the same in every
 * run). The KV cache is rewritten from position 0 each time. With THIN_BENCH_PREPARE=1 the session
 * first runs
 * cuda_session_prepare for the first length (what thin-run does while it verifies the checksums)
 * and prints its seconds. Environment variables of the backend (THIN_CUDA_*) apply.
 * The file is not verified.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../tools/thin-run/backend.h"
#include "../tools/thin-run/plan.h"
#include "cuda_backend.h"
#include "thin.h"

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

int main(int argc, char **argv) {
    if (argc < 2 || argc > 4) {
        fprintf(stderr, "usage: thin-bench-prefill MODEL.thin [LEN[,LEN...] [REPEAT]]\n");
        return 2;
    }
    long lens[16], n_lens = 0, len = 0; /* len: the longest */
    const char *ls = argc > 2 ? argv[2] : "512";
    for (;;) {
        char *end;
        const long l = strtol(ls, &end, 10);
        if (end == ls || l < 2 || l > 65536 || n_lens == 16 || (*end && *end != ',')) {
            fprintf(stderr, "thin-bench-prefill: LEN must be 2..65536, at most 16 of them, comma-separated\n");
            return 2;
        }
        lens[n_lens++] = l;
        if (l > len) len = l;
        if (!*end) break;
        ls = end + 1;
    }
    const long repeat = argc > 3 ? strtol(argv[3], NULL, 10) : 4;
    if (repeat < 1 || repeat > 1000) {
        fprintf(stderr, "thin-bench-prefill: REPEAT must be 1..1000\n");
        return 2;
    }
    if (!cuda_backend_available()) {
        fprintf(stderr, "thin-bench-prefill: no CUDA device\n");
        return 1;
    }
    thin_file *f = thin_file_new();
    if (!f) {
        fprintf(stderr, "thin-bench-prefill: out of memory\n");
        return 1;
    }
    if (thin_file_open(f, argv[1], 0) != THIN_OK) {
        fprintf(stderr, "thin-bench-prefill: %s\n", thin_file_error(f));
        thin_file_free(f);
        return 1;
    }
    int rc = 1;
    char err[512];
    plan p;
    cuda_session *s = NULL;
    int32_t *ids = malloc((size_t)len * sizeof *ids);
    if (!ids) {
        fprintf(stderr, "thin-bench-prefill: out of memory\n");
        thin_file_free(f);
        return 1;
    }
    for (long i = 0; i < len; i++) ids[i] = (int32_t)(i + 1);
    if (plan_build(&p, f, THIN_DTYPE_INVALID, err, sizeof err) != THIN_OK) {
        fprintf(stderr, "thin-bench-prefill: %s: %s\n", argv[1], err);
        free(ids);
        thin_file_free(f);
        return 1;
    }
    if ((uint64_t)len > p.hp.max_pos) {
        fprintf(stderr, "thin-bench-prefill: %s: LEN %ld is past the model's %u positions\n", argv[1], len,
                (unsigned)p.hp.max_pos);
        goto out;
    }
    const char *sp = getenv("THIN_BENCH_SPLIT");
    const int split = sp && strcmp(sp, "1") == 0;
    const double c0 = now_s();
    if (cuda_session_create(&s, &p, (uint32_t)len, err, sizeof err)) {
        fprintf(stderr, "thin-bench-prefill: %s: %s\n", argv[1], err);
        goto out;
    }
    printf("{\"session_s\": %.6f}\n", now_s() - c0); /* weights to the device, kernels compiled, warm-up */
    const char *pe = getenv("THIN_BENCH_PREPARE");
    if (pe && strcmp(pe, "1") == 0) {
        const double p0 = now_s();
        setenv("THIN_CUDA_PREPARE", "1", 1); /* the backend's opt-in */
        if (cuda_session_prepare(s, (uint32_t)lens[0]) < 0) {
            fprintf(stderr, "thin-bench-prefill: %s: %s\n", argv[1], cuda_session_error(s));
            goto out;
        }
        printf("{\"prepare_s\": %.6f}\n", now_s() - p0);
    }
    for (long r = 0; r < repeat; r++) {
        for (long j = 0; j < n_lens; j++) {
            const long l = lens[j];
            int32_t next = -1;
            const double t0 = now_s();
            if (split ? cuda_session_forward(s, ids, (uint32_t)l - 1, 0, NULL, NULL) ||
                            cuda_session_forward(s, ids + l - 1, 1, (uint32_t)l - 1, NULL, &next)
                      : cuda_session_prefill(s, ids, (uint32_t)l, 0, NULL, &next)) {
                fprintf(stderr, "thin-bench-prefill: %s: %s\n", argv[1], cuda_session_error(s));
                goto out;
            }
            const double dt = now_s() - t0;
            printf("{\"run\": %ld, \"len\": %ld, \"prefill_s\": %.6f, \"prefill_tok_s\": %.1f, \"next\": %d}\n",
                   r, l, dt, (double)l / dt, (int)next);
            fflush(stdout);
        }
    }
    rc = 0;
out:
    cuda_session_free(s);
    plan_free(&p);
    free(ids);
    thin_file_free(f);
    return rc;
}
