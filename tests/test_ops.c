/* Unit tests of the CPU reference ops (kernels/ops_cpu.c) against naive double-precision loops. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "ops.h"

static uint32_t rng_state = 12345;

static float frand(void) { /* uniform in [-1, 1) */
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 17;
    rng_state ^= rng_state << 5;
    return (float)(rng_state >> 8) / 8388608.0f - 1.0f;
}

static void test_element_decoding(void **state) {
    (void)state;
    uint16_t f16[] = {0x3C00, 0x0001, 0x7BFF, 0xC000};
    float f16v[] = {1.0f, 0x1p-24f, 65504.0f, -2.0f};
    thin_wmat w = {f16, THIN_DTYPE_F16, NULL, 1, 4};
    for (int i = 0; i < 4; i++) assert_true(thin_wmat_get(&w, 0, (uint64_t)i) == f16v[i]);
    uint16_t bf[] = {0x3F80, 0xC040};
    thin_wmat wb = {bf, THIN_DTYPE_BF16, NULL, 1, 2};
    assert_true(thin_wmat_get(&wb, 0, 0) == 1.0f && thin_wmat_get(&wb, 0, 1) == -3.0f);
    uint8_t e8[] = {0x38, 0x7E, 0x01, 0xB8, 0x7F};
    float sc = 0.5f;
    thin_wmat we = {e8, THIN_DTYPE_F8_E4M3, &sc, 1, 5};
    assert_true(thin_wmat_get(&we, 0, 0) == 0.5f);
    assert_true(thin_wmat_get(&we, 0, 1) == 224.0f);
    assert_true(thin_wmat_get(&we, 0, 2) == 0x1p-10f);
    assert_true(thin_wmat_get(&we, 0, 3) == -0.5f);
    assert_true(isnan(thin_wmat_get(&we, 0, 4)));
}

/* Fills a rows×cols matrix of dtype dt with random values; returns it (malloc'd). */
static void *make_matrix(thin_dtype dt, uint64_t rows, uint64_t cols, float *scale) {
    uint64_t n = rows * cols;
    if (dt == THIN_DTYPE_F32) {
        float *m = malloc(n * 4);
        for (uint64_t i = 0; i < n; i++) m[i] = frand();
        return m;
    }
    if (dt == THIN_DTYPE_F8_E4M3) {
        uint8_t *m = malloc(n);
        for (uint64_t i = 0; i < n; i++) {
            m[i] = (uint8_t)(frand() * 127.0f + 128.0f);
            if ((m[i] & 0x7F) == 0x7F) m[i] ^= 1; /* no NaN codes */
        }
        for (uint64_t r = 0; r < rows; r++) scale[r] = 0.01f + (frand() + 1.0f) * 0.01f;
        return m;
    }
    uint16_t *m = malloc(n * 2);
    for (uint64_t i = 0; i < n; i++) {
        uint16_t bits = (uint16_t)((uint32_t)(frand() * 32767.0f + 32768.0f));
        if (dt == THIN_DTYPE_BF16) bits = (uint16_t)(0x3C00 + (bits & 0x7FF) + (bits & 0x8000));
        else bits = (uint16_t)(0x3000 + (bits & 0x1FFF) + (bits & 0x8000));
        m[i] = bits;
    }
    return m;
}

static void check_matvec(thin_dtype dt, uint64_t rows, uint64_t cols) {
    float *scale = malloc(rows * sizeof(float));
    thin_wmat W = {make_matrix(dt, rows, cols, scale), dt,
                   dt == THIN_DTYPE_F8_E4M3 ? scale : NULL, rows, cols};
    float *x = malloc(cols * sizeof(float)), *y = malloc(rows * sizeof(float));
    for (uint64_t c = 0; c < cols; c++) x[c] = frand();
    op_matvec(y, &W, x, 0, rows / 2);
    op_matvec(y, &W, x, rows / 2, rows);
    for (uint64_t r = 0; r < rows; r++) {
        double ref = 0.0, mag = 0.0;
        for (uint64_t c = 0; c < cols; c++) {
            double p = (double)thin_wmat_get(&W, r, c) * x[c];
            ref += p;
            mag += fabs(p);
        }
        assert_true(fabs(y[r] - ref) <= 1e-5 * mag + 1e-6);
    }
    free((void *)W.data);
    free(scale);
    free(x);
    free(y);
}

static void test_matvec_all_dtypes(void **state) {
    (void)state;
    thin_dtype dts[] = {THIN_DTYPE_F32, THIN_DTYPE_F16, THIN_DTYPE_BF16, THIN_DTYPE_F8_E4M3};
    uint64_t cols[] = {1, 7, 8, 16, 37, 64, 172, 259};
    for (size_t d = 0; d < 4; d++)
        for (size_t c = 0; c < sizeof cols / sizeof cols[0]; c++) check_matvec(dts[d], 13, cols[c]);
}

/* Every finite E4M3 code through the vector widening of op_matvec: a row of 16 copies (the
 * 16-wide loop) against a one-hot x gives the code's value exactly. */
static void test_matvec_every_e4m3_code(void **state) {
    (void)state;
    uint8_t w[16];
    float x[16] = {0}, y, scale = 1.0f;
    for (int code = 0; code < 256; code++) {
        if ((code & 0x7F) == 0x7F) continue; /* NaN codes, which quantizers never write */
        memset(w, code, sizeof w);
        thin_wmat W = {w, THIN_DTYPE_F8_E4M3, &scale, 1, 16};
        for (int j = 0; j < 16; j += 5) {
            x[j] = 1.0f;
            op_matvec(&y, &W, x, 0, 1);
            x[j] = 0.0f;
            assert_true(y == thin_e4m3_to_f32((uint8_t)code));
        }
    }
}

/* op_matmat against op_matvec, bit for bit, in each form the CPU has (op_matvec, one vector, runs
 * the AVX2 form; op_matmat of two or more the AVX-512 one where present, so this also holds the
 * two forms to the same bits): every dtype, 1..13 vectors (the AVX-512 form's blocks of six, four,
 * two and one), rows split in two calls that leave single rows after its blocks of four, column
 * counts with every kind of tail (16-column blocks, one 8-column block, scalar columns). */
static void test_matmat_equals_matvec(void **state) {
    (void)state;
    thin_dtype dts[] = {THIN_DTYPE_F32, THIN_DTYPE_F16, THIN_DTYPE_BF16, THIN_DTYPE_F8_E4M3};
    uint64_t cols[] = {1, 7, 8, 9, 15, 16, 17, 24, 31, 37, 64, 259, 2048};
    enum { ROWS = 11, NB = 13 };
    const int was = op_cpu_avx512(-1);
    for (int simd = 0; simd < 2; simd++) {
        if (op_cpu_avx512(simd) != simd) continue; /* no AVX-512 here */
        for (size_t d = 0; d < 4; d++)
            for (size_t c = 0; c < sizeof cols / sizeof cols[0]; c++) {
                const uint64_t n = cols[c], ldx = n + 3, ldy = ROWS + 2;
                float scale[ROWS];
                thin_wmat W = {make_matrix(dts[d], ROWS, n, scale), dts[d],
                               dts[d] == THIN_DTYPE_F8_E4M3 ? scale : NULL, ROWS, n};
                float *x = malloc(NB * ldx * sizeof(float)), y[NB * (ROWS + 2)], want[ROWS];
                for (uint64_t i = 0; i < NB * ldx; i++) x[i] = frand();
                for (uint32_t nb = 1; nb <= NB; nb++) {
                    op_matmat(y, ldy, &W, x, ldx, nb, 0, 6);
                    op_matmat(y, ldy, &W, x, ldx, nb, 6, ROWS);
                    for (uint32_t i = 0; i < nb; i++) {
                        op_matvec(want, &W, x + i * ldx, 0, ROWS);
                        assert_memory_equal(y + i * ldy, want, sizeof want);
                    }
                }
                free((void *)W.data);
                free(x);
            }
    }
    op_cpu_avx512(was);
}

/* Every E4M3 code through the AVX-512 form's widening (two vectors), against the AVX2 form, in
 * each position of a 16-column block and of the 8-column block after it. Skipped where the CPU
 * (or the build) has no AVX-512. */
static void test_avx512_every_e4m3_code(void **state) {
    (void)state;
    const int was = op_cpu_avx512(-1);
    if (!op_cpu_avx512(1)) {
        op_cpu_avx512(was);
        skip();
    }
    uint8_t w[4 * 24];
    float x[2 * 24], y[2 * 4], want[2 * 4], scale[4] = {1.0f, 0.5f, 2.0f, 1.0f};
    for (int code = 0; code < 256; code++) {
        for (int i = 0; i < 4 * 24; i++) w[i] = (uint8_t)(code + 37 * i);
        thin_wmat W = {w, THIN_DTYPE_F8_E4M3, scale, 4, 24};
        for (int j = 0; j < 2 * 24; j++) x[j] = frand();
        op_cpu_avx512(1);
        op_matmat(y, 4, &W, x, 24, 2, 0, 4);
        op_cpu_avx512(0);
        op_matmat(want, 4, &W, x, 24, 2, 0, 4);
        for (int r = 0; r < 2 * 4; r++)
            assert_true(memcmp(&y[r], &want[r], sizeof(float)) == 0 || (isnan(y[r]) && isnan(want[r])));
    }
    op_cpu_avx512(was);
}

static void test_rmsnorm(void **state) {
    (void)state;
    float x[5] = {1, -2, 3, -4, 5}, w[5] = {1, 2, 1, 0.5f, 1}, out[5];
    thin_wmat wv = {w, THIN_DTYPE_F32, NULL, 1, 5};
    op_rmsnorm(out, x, &wv, 5, 1e-5f, 0.0f);
    double ms = (1 + 4 + 9 + 16 + 25) / 5.0, s = 1.0 / sqrt(ms + 1e-5);
    for (int i = 0; i < 5; i++) assert_float_equal(out[i], x[i] * s * w[i], 1e-6);
    float h[5] = {1, 1, 1, 1, 1}, x2[5], out2[5];
    memcpy(x2, x, sizeof x);
    op_add_rmsnorm(x2, h, out2, &wv, 5, 1e-5f, 0.0f);
    assert_float_equal(x2[1], -1.0f, 0);
    float xs[5];
    for (int i = 0; i < 5; i++) xs[i] = x[i] + 1;
    op_rmsnorm(out, xs, &wv, 5, 1e-5f, 0.0f);
    for (int i = 0; i < 5; i++) assert_float_equal(out2[i], out[i], 0);
    op_rmsnorm(out, x, &wv, 5, 1e-5f, 1.0f); /* Gemma's weights, counted from 1 */
    for (int i = 0; i < 5; i++) assert_float_equal(out[i], x[i] * s * (1 + w[i]), 1e-6);
}

static void test_head_rmsnorm(void **state) {
    (void)state;
    float x[8] = {1, 2, 3, 4, 10, 20, 30, 40}, w[4] = {1, 1, 1, 1};
    thin_wmat wv = {w, THIN_DTYPE_F32, NULL, 1, 4};
    op_head_rmsnorm(x, &wv, 2, 4, 0.0f, 0.0f);
    for (int i = 0; i < 4; i++) assert_float_equal(x[i], x[i + 4], 1e-6);
    float y[4] = {1, 2, 3, 4}, z[4] = {1, 2, 3, 4}, w0[4] = {0, 0, 0, 0};
    thin_wmat w0v = {w0, THIN_DTYPE_F32, NULL, 1, 4};
    op_head_rmsnorm(y, &wv, 1, 4, 1e-6f, 0.0f);
    op_head_rmsnorm(z, &w0v, 1, 4, 1e-6f, 1.0f); /* 1 + 0 = the weights of 1 */
    assert_memory_equal(y, z, sizeof y);
}

static void test_rope(void **state) {
    (void)state;
    float x[16], y[16];
    for (int i = 0; i < 16; i++) x[i] = y[i] = frand();
    op_rope(y, 2, 8, 8, 0, 10000.0f, NULL, 1.0f); /* position 0: identity */
    for (int i = 0; i < 16; i++) assert_float_equal(y[i], x[i], 0);
    op_rope(y, 2, 8, 0, 7, 10000.0f, NULL, 1.0f);
    for (int h = 0; h < 2; h++)
        for (int i = 0; i < 4; i++) {
            double a = 7.0 * pow(10000.0, -2.0 * i / 8.0);
            double x0 = x[h * 8 + i], x1 = x[h * 8 + i + 4];
            assert_float_equal(y[h * 8 + i], x0 * cos(a) - x1 * sin(a), 1e-6);
            assert_float_equal(y[h * 8 + i + 4], x0 * sin(a) + x1 * cos(a), 1e-6);
        }
    float inv[4] = {1.0f, 0.5f, 0.25f, 0.125f}, z[8];
    memcpy(z, x, sizeof z);
    op_rope(z, 1, 8, 8, 3, 10000.0f, inv, 1.0f);
    assert_float_equal(z[1], x[1] * cos(1.5) - x[5] * sin(1.5), 1e-6);
    memcpy(z, x, sizeof z); /* LongRoPE's attention factor scales cos and sin */
    op_rope(z, 1, 8, 8, 3, 10000.0f, inv, 1.25f);
    assert_float_equal(z[1], 1.25 * (x[1] * cos(1.5) - x[5] * sin(1.5)), 1e-6);
    assert_float_equal(z[5], 1.25 * (x[1] * sin(1.5) + x[5] * cos(1.5)), 1e-6);
    memcpy(z, x, sizeof z); /* partial rotary: dims 0..3 rotate (i with i + 2), 4..7 pass */
    op_rope(z, 1, 8, 4, 3, 10000.0f, NULL, 1.0f);
    for (int i = 0; i < 2; i++) {
        double a = 3.0 * pow(10000.0, -2.0 * i / 4.0);
        assert_float_equal(z[i], x[i] * cos(a) - x[i + 2] * sin(a), 1e-6);
        assert_float_equal(z[i + 2], x[i] * sin(a) + x[i + 2] * cos(a), 1e-6);
    }
    for (int i = 4; i < 8; i++) assert_float_equal(z[i], x[i], 0);
}

static void check_attention(thin_dtype kv) {
    enum { NH = 4, NKV = 2, HD = 8, NP = 5, KVD = NKV * HD };
    float k[NP][KVD], v[NP][KVD], q[NH * HD], out[NH * HD], scratch[NP];
    uint16_t kc16[NP * KVD], vc16[NP * KVD];
    float kc32[NP * KVD], vc32[NP * KVD];
    void *kc = kv == THIN_DTYPE_BF16 ? (void *)kc16 : (void *)kc32;
    void *vc = kv == THIN_DTYPE_BF16 ? (void *)vc16 : (void *)vc32;
    for (int p = 0; p < NP; p++) {
        for (int i = 0; i < KVD; i++) k[p][i] = frand(), v[p][i] = frand();
        op_kv_store(kc, vc, kv, k[p], v[p], KVD, (uint64_t)p);
    }
    for (int i = 0; i < NH * HD; i++) q[i] = frand() * 3;
    op_attention(out, q, kc, vc, kv, NH, NKV, HD, NP, scratch);
    double tol = kv == THIN_DTYPE_BF16 ? 2e-2 : 1e-5;
    for (int h = 0; h < NH; h++) {
        int g = h / (NH / NKV);
        double sc[NP], mx = -1e30, sum = 0;
        for (int p = 0; p < NP; p++) {
            double s = 0;
            for (int i = 0; i < HD; i++) s += q[h * HD + i] * k[p][g * HD + i];
            sc[p] = s / sqrt(HD);
            mx = sc[p] > mx ? sc[p] : mx;
        }
        for (int p = 0; p < NP; p++) sum += (sc[p] = exp(sc[p] - mx));
        for (int i = 0; i < HD; i++) {
            double o = 0;
            for (int p = 0; p < NP; p++) o += sc[p] / sum * v[p][g * HD + i];
            assert_float_equal(out[h * HD + i], o, tol);
        }
    }
}

static void test_attention_f32_and_bf16_cache(void **state) {
    (void)state;
    check_attention(THIN_DTYPE_F32);
    check_attention(THIN_DTYPE_BF16);
}

/* op_attention_rows against op_attention_heads one row at a time, bit for bit: F32 and BF16
 * caches, head sizes with and without pieces of 32 and 8 elements, prompts starting at 0 and
 * later, 1..7 rows (pairs and a single one; one row takes a group's heads together), head ranges
 * that cut the groups, with the AVX-512 products and without; with sliding windows of 1 and 4
 * positions, against the heads over the window's rows alone. */
static void test_attention_rows_equal_one_at_a_time(void **state) {
    (void)state;
    enum { NH = 12, POS0 = 9, NB = 7 }; /* 12 or 6 query heads a KV head */
    const uint64_t dims[] = {8, 12, 24, 40, 64, 128};
    const int was = op_cpu_avx512(-1);
    for (int kvt = 0; kvt < 4; kvt++)
        for (size_t di = 0; di < sizeof dims / sizeof dims[0]; di++)
            for (int simd = 0; simd < 2; simd++) {
                const thin_dtype kv = kvt & 1 ? THIN_DTYPE_BF16 : THIN_DTYPE_F32;
                const uint64_t NKV = kvt < 2 ? 2 : 1;
                const uint64_t hd = dims[di], kv_dim = NKV * hd, ld = NH * hd + 3;
                const size_t esz = kvt & 1 ? 2 : 4, n_all = POS0 + NB;
                const float sc = 1.0f / sqrtf((float)hd);
                void *kc = malloc(n_all * kv_dim * esz), *vc = malloc(n_all * kv_dim * esz);
                float *k = malloc(kv_dim * sizeof(float)), *v = malloc(kv_dim * sizeof(float));
                float *q = malloc(NB * ld * sizeof(float)), *out = malloc(NB * ld * sizeof(float));
                float *want = malloc(NH * hd * sizeof(float));
                float *scratch = malloc((NB > OP_ATTN_HEADS ? NB : OP_ATTN_HEADS) * n_all * sizeof(float));
                assert_true(kc && vc && k && v && q && out && want && scratch);
                for (size_t t = 0; t < n_all; t++) {
                    for (uint64_t i = 0; i < kv_dim; i++) k[i] = frand(), v[i] = frand();
                    op_kv_store(kc, vc, kv, k, v, kv_dim, t);
                }
                for (uint64_t i = 0; i < NB * ld; i++) q[i] = 2.0f * frand();
                op_cpu_avx512(simd);
                for (uint64_t pos0 = 0; pos0 <= POS0; pos0 += POS0)
                    for (uint32_t nb = 1; nb <= NB; nb++) {
                        /* head ranges that cut the groups, as threads may */
                        op_attention_rows(out, ld, q, ld, kc, vc, kv, NH, NKV, hd, pos0, nb, 0, 1, sc, 0, 0.0f, 0, scratch);
                        op_attention_rows(out, ld, q, ld, kc, vc, kv, NH, NKV, hd, pos0, nb, 1, 8, sc, 0, 0.0f, 0, scratch);
                        op_attention_rows(out, ld, q, ld, kc, vc, kv, NH, NKV, hd, pos0, nb, 8, NH, sc, 0, 0.0f, 0, scratch);
                        for (int whole = 0; whole < 2; whole++) {
                            if (whole) /* every head in one call: groups of 12 go as 8 and 4 */
                                op_attention_rows(out, ld, q, ld, kc, vc, kv, NH, NKV, hd, pos0, nb,
                                                  0, NH, sc, 0, 0.0f, 0, scratch);
                            for (uint32_t i = 0; i < nb; i++) {
                                op_attention_heads(want, q + i * ld, kc, vc, kv, NH, NKV, hd,
                                                   pos0 + i + 1, 0, NH, scratch);
                                assert_memory_equal(out + i * ld, want, NH * hd * sizeof(float));
                            }
                        }
                        /* a sliding window of w positions: row i sees positions pos0 + i - w + 1..,
                         * as the heads over the cache from there do */
                        for (uint64_t w = 1; w <= 4; w += 3) {
                            op_attention_rows(out, ld, q, ld, kc, vc, kv, NH, NKV, hd, pos0, nb, 0, NH,
                                              sc, w, 0.0f, 0, scratch);
                            for (uint32_t i = 0; i < nb; i++) {
                                const uint64_t n = pos0 + i + 1, lo = n > w ? n - w : 0;
                                op_attention_heads(want, q + i * ld, (const uint8_t *)kc + lo * kv_dim * esz,
                                                   (const uint8_t *)vc + lo * kv_dim * esz, kv, NH, NKV,
                                                   hd, n - lo, 0, NH, scratch);
                                assert_memory_equal(out + i * ld, want, NH * hd * sizeof(float));
                            }
                        }
                    }
                free(kc), free(vc), free(k), free(v), free(q), free(out), free(want), free(scratch);
            }
    op_cpu_avx512(was);
}

static void test_kv_store_bf16_rounds_to_nearest_even(void **state) {
    (void)state;
    float k[2] = {1.0f + 0x1p-8f, 1.0f + 3 * 0x1p-8f}, v[2] = {-2.0f, 0.0f};
    uint16_t kc[4] = {0}, vc[4] = {0};
    op_kv_store(kc, vc, THIN_DTYPE_BF16, k, v, 2, 1);
    assert_int_equal(kc[2], 0x3F80); /* tie goes to even */
    assert_int_equal(kc[3], 0x3F82);
    assert_int_equal(vc[2], 0xC000);
    assert_int_equal(kc[0], 0);
}

static void test_elementwise_and_argmax(void **state) {
    (void)state;
    float g[3] = {0.0f, 1.0f, -2.0f}, u[3] = {5.0f, 2.0f, 1.0f};
    op_silu_mul(g, u, 3);
    assert_float_equal(g[0], 0.0f, 0);
    assert_float_equal(g[1], 2.0 / (1.0 + exp(-1.0)), 1e-6);
    assert_float_equal(g[2], -2.0 / (1.0 + exp(2.0)), 1e-6);
    float x[4] = {1, 2, 3, 4};
    op_add(x, u, 3);
    assert_float_equal(x[0], 6.0f, 0);
    float t[5] = {1, 7, 3, 7, 7};
    assert_int_equal(op_argmax(t, 5), 1);
    t[4] = NAN;
    assert_int_equal(op_argmax(t, 5), -1);
    t[4] = 7, t[0] = -INFINITY;
    assert_int_equal(op_argmax(t, 5), -1);
    float emb[6] = {1, 2, 3, 4, 5, 6}, o[3];
    thin_wmat E = {emb, THIN_DTYPE_F32, NULL, 2, 3};
    op_embed(o, &E, 1);
    assert_float_equal(o[2], 6.0f, 0);
    op_scale(o, 0.5f, 3);
    assert_float_equal(o[2], 3.0f, 0);
    float cap[3] = {0.0f, 1.0f, -100.0f};
    op_softcap(cap, 2.0f, 3);
    assert_float_equal(cap[0], 0.0f, 0);
    assert_float_equal(cap[1], 2.0 * tanh(0.5), 1e-6);
    assert_float_equal(cap[2], -2.0f, 1e-6); /* far past the cap: the cap */
    float gg[4] = {0.0f, 1.0f, -3.0f, 10.0f}, uu[4] = {1.0f, 2.0f, 1.0f, 0.5f};
    op_gelu_tanh_mul(gg, uu, 4);
    for (int i = 0; i < 4; i++) {
        const double xg = i == 0 ? 0.0 : i == 1 ? 1.0 : i == 2 ? -3.0 : 10.0;
        const double want = 0.5 * xg * (1 + tanh(sqrt(2 / M_PI) * (xg + 0.044715 * xg * xg * xg))) * uu[i];
        assert_float_equal(gg[i], want, 1e-6 * fabs(want) + 1e-12);
    }
    assert_float_equal(gg[1], 0.8411920 * 2, 1e-6); /* gelu_tanh(1) = 0.841192 */
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_element_decoding),
        cmocka_unit_test(test_matvec_all_dtypes),
        cmocka_unit_test(test_matmat_equals_matvec),
        cmocka_unit_test(test_matvec_every_e4m3_code),
        cmocka_unit_test(test_avx512_every_e4m3_code),
        cmocka_unit_test(test_rmsnorm),
        cmocka_unit_test(test_head_rmsnorm),
        cmocka_unit_test(test_rope),
        cmocka_unit_test(test_attention_f32_and_bf16_cache),
        cmocka_unit_test(test_attention_rows_equal_one_at_a_time),
        cmocka_unit_test(test_kv_store_bf16_rounds_to_nearest_even),
        cmocka_unit_test(test_elementwise_and_argmax),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
