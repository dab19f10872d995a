/*
 * thin-bench-ops — the CPU backend's hot ops timed on one thread: the batched products
 * (op_matmat) in their AVX-512 and AVX2 forms, and the attention of one token and of a prompt's
 * rows against op_attention_heads, each checked to give the same bits as the other form.
 *
 *   thin-bench-ops [POSITIONS]        (make bench; POSITIONS of cached K/V, default 1000)
 *
 * Matrices are the gate (5632 × 2048) and down (2048 × 5632) shapes of bench/bench-cpu-run.sh's
 * Llama-shaped model; the attention has 16 query and 4 KV heads of 128, a BF16 cache. Each figure
 * is the best of 7 runs. Prints one table; "avx512" is "-" where the CPU has no AVX-512.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ops.h"

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static uint32_t rng = 2463534242u;
static float frand(void) { /* uniform in [-0.5, 0.5) */
    rng ^= rng << 13, rng ^= rng >> 17, rng ^= rng << 5;
    return (float)(rng >> 8) / 16777216.0f - 0.5f;
}

/* Best of 7 seconds of op_matmat with the form `avx512` (0 or 1) into y. */
static double time_matmat(int avx512, float *y, const thin_wmat *W, const float *x, uint32_t nb) {
    op_cpu_avx512(avx512);
    double best = 1e30;
    for (int it = 0; it < 7; it++) {
        const double t0 = now_s();
        op_matmat(y, W->rows, W, x, W->cols, nb, 0, W->rows);
        const double t = now_s() - t0;
        if (t < best) best = t;
    }
    return best;
}

static void bench_matmat(int have512) {
    static const struct { const char *name; thin_dtype dt; size_t esz; } dts[] = {
        {"bf16", THIN_DTYPE_BF16, 2}, {"fp8", THIN_DTYPE_F8_E4M3, 1}, {"f32", THIN_DTYPE_F32, 4}};
    static const struct { const char *name; uint64_t rows, cols; } shapes[] = {
        {"gate", 5632, 2048}, {"down", 2048, 5632}};
    static const uint32_t nbs[] = {1, 8, 32};
    printf("%-6s %-5s %4s %16s %16s %10s\n", "matrix", "dtype", "rows", "avx512 GFLOP/s",
           "avx2 GFLOP/s", "same bits");
    for (size_t s = 0; s < 2; s++)
        for (size_t d = 0; d < 3; d++) {
            const uint64_t R = shapes[s].rows, C = shapes[s].cols;
            uint8_t *w = malloc(R * C * dts[d].esz);
            float *scale = malloc(R * sizeof(float)), *x = malloc(32 * C * sizeof(float));
            float *y1 = malloc(32 * R * sizeof(float)), *y2 = malloc(32 * R * sizeof(float));
            if (!w || !scale || !x || !y1 || !y2) return;
            for (uint64_t i = 0; i < R * C; i++) {
                const float v = frand();
                if (dts[d].dt == THIN_DTYPE_BF16) ((uint16_t *)w)[i] = thin_f32_to_bf16(v);
                else if (dts[d].dt == THIN_DTYPE_F32) ((float *)w)[i] = v;
                else w[i] = thin_f32_to_e4m3(v * 400.0f);
            }
            for (uint64_t r = 0; r < R; r++) scale[r] = 1.0f / 400.0f;
            for (uint64_t i = 0; i < 32 * C; i++) x[i] = frand();
            thin_wmat W = {w, dts[d].dt, dts[d].dt == THIN_DTYPE_F8_E4M3 ? scale : NULL, R, C};
            for (size_t k = 0; k < sizeof nbs / sizeof nbs[0]; k++) {
                const uint32_t nb = nbs[k];
                const double flop = 2.0 * (double)R * (double)C * nb;
                const double t2 = time_matmat(0, y2, &W, x, nb);
                char g512[32] = "-", same[8] = "-";
                if (have512) {
                    const double t5 = time_matmat(1, y1, &W, x, nb);
                    snprintf(g512, sizeof g512, "%.1f", flop / t5 * 1e-9);
                    snprintf(same, sizeof same, "%s",
                             memcmp(y1, y2, (size_t)nb * R * sizeof(float)) ? "NO" : "yes");
                }
                printf("%-6s %-5s %4u %16s %16.1f %10s\n", shapes[s].name, dts[d].name, nb, g512,
                       flop / t2 * 1e-9, same);
            }
            free(w), free(scale), free(x), free(y1), free(y2);
        }
}

static void bench_attention(uint64_t np) {
    enum { NH = 16, NKV = 4, HD = 128, NB = 32 };
    const uint64_t kv_dim = NKV * HD, ld = NH * HD;
    uint16_t *kc = malloc((np + NB) * kv_dim * 2), *vc = malloc((np + NB) * kv_dim * 2);
    float *k = malloc(kv_dim * sizeof(float)), *v = malloc(kv_dim * sizeof(float));
    float *q = malloc(NB * ld * sizeof(float)), *o1 = malloc(NB * ld * sizeof(float));
    float *o2 = malloc(NB * ld * sizeof(float));
    float *scratch = malloc((NB > OP_ATTN_HEADS ? NB : OP_ATTN_HEADS) * (np + NB) * sizeof(float));
    if (!kc || !vc || !k || !v || !q || !o1 || !o2 || !scratch) return;
    for (uint64_t t = 0; t < np + NB; t++) {
        for (uint64_t i = 0; i < kv_dim; i++) k[i] = frand(), v[i] = frand();
        op_kv_store(kc, vc, THIN_DTYPE_BF16, k, v, kv_dim, t);
    }
    for (uint64_t i = 0; i < NB * ld; i++) q[i] = 2.0f * frand();
    double heads = 1e30, rows1 = 1e30, heads32 = 1e30, rows32 = 1e30;
    for (int it = 0; it < 7; it++) {
        double t0 = now_s(), t;
        op_attention_heads(o1, q, kc, vc, THIN_DTYPE_BF16, NH, NKV, HD, np + 1, 0, NH, scratch);
        if ((t = now_s() - t0) < heads) heads = t;
        t0 = now_s();
        op_attention_rows(o2, ld, q, ld, kc, vc, THIN_DTYPE_BF16, NH, NKV, HD, np, 1, 0, NH, scratch);
        if ((t = now_s() - t0) < rows1) rows1 = t;
    }
    const int same1 = memcmp(o1, o2, ld * sizeof(float)) == 0;
    int same32 = 1;
    for (int it = 0; it < 7; it++) {
        double t0 = now_s(), t;
        for (uint32_t i = 0; i < NB; i++)
            op_attention_heads(o1 + i * ld, q + i * ld, kc, vc, THIN_DTYPE_BF16, NH, NKV, HD,
                               np + i + 1, 0, NH, scratch);
        if ((t = now_s() - t0) < heads32) heads32 = t;
        t0 = now_s();
        op_attention_rows(o2, ld, q, ld, kc, vc, THIN_DTYPE_BF16, NH, NKV, HD, np, NB, 0, NH, scratch);
        if ((t = now_s() - t0) < rows32) rows32 = t;
    }
    same32 = memcmp(o1, o2, NB * ld * sizeof(float)) == 0;
    printf("\nattention, 16 query and 4 KV heads of 128, BF16 cache of %llu positions (us)\n",
           (unsigned long long)np);
    printf("%-26s %16s %16s %10s\n", "rows", "op_attention_rows", "op_attention_heads", "same bits");
    printf("%-26s %16.1f %16.1f %10s\n", "one token", rows1 * 1e6, heads * 1e6, same1 ? "yes" : "NO");
    printf("%-26s %16.1f %16.1f %10s\n", "32 rows of a prompt", rows32 * 1e6, heads32 * 1e6,
           same32 ? "yes" : "NO");
    free(kc), free(vc), free(k), free(v), free(q), free(o1), free(o2), free(scratch);
}

int main(int argc, char **argv) {
    const long np = argc > 1 ? strtol(argv[1], NULL, 10) : 1000;
    if (np < 1 || np > 1 << 20) {
        fprintf(stderr, "usage: thin-bench-ops [POSITIONS 1..1048576]\n");
        return 2;
    }
    const int was = op_cpu_avx512(-1), have512 = op_cpu_avx512(1);
    printf("thin-bench-ops: one thread, best of 7; AVX-512 %s\n", have512 ? "present" : "absent");
    bench_matmat(have512);
    op_cpu_avx512(was);
    bench_attention((uint64_t)np);
    return 0;
}
