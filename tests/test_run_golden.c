/*
 * End-to-end tests of the CPU backend on stories260K against llama2.c's golden outputs
 * (fixtures/stories260k/golden, see its README): the model is packed with thin-pack's packing job,
 * compiled into a plan and run position by position.
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "../tools/thin-compare/compare.h"
#include "../tools/thin-pack/pack.h"
#include "../tools/thin-run/exec_cpu.h"
#include "../tools/thin-run/plan.h"
#include "../tools/thin-run/run_util.h"

#define VOCAB 512
#define POSITIONS 200

typedef struct fixture {
    char dir[512];
    char f32_path[600], bf16_path[600];
} fixture;

static int pack_to(const char *input, const char *out, int bf16) {
    pack_options o = {.input = input, .output = out, .to_bf16 = bf16};
    return pack_run(&o);
}

static int setup(void **state) {
    static fixture fx;
    const char *fix = getenv("FIX");
    snprintf(fx.dir, sizeof fx.dir, "%s/stories260k", fix ? fix : "fixtures");
    char st[600];
    snprintf(st, sizeof st, "%s/model.safetensors", fx.dir);
    const char *tmp = getenv("TMPDIR");
    snprintf(fx.f32_path, sizeof fx.f32_path, "%s/test_run_golden.%d.f32.thin", tmp ? tmp : "/tmp",
             (int)getpid());
    snprintf(fx.bf16_path, sizeof fx.bf16_path, "%s/test_run_golden.%d.bf16.thin",
             tmp ? tmp : "/tmp", (int)getpid());
    if (pack_to(st, fx.f32_path, 0) || pack_to(st, fx.bf16_path, 1)) return -1;
    *state = &fx;
    return 0;
}

static int teardown(void **state) {
    fixture *fx = *state;
    unlink(fx->f32_path);
    unlink(fx->bf16_path);
    return 0;
}

/* A model opened and compiled, with a CPU session over the whole context. */
typedef struct model {
    thin_file *f;
    plan p;
    cpu_session *s;
} model;

static void model_open(model *m, const char *path, thin_dtype kv) {
    char err[512];
    m->f = thin_file_new();
    assert_non_null(m->f);
    assert_int_equal(thin_file_open(m->f, path, THIN_OPEN_VERIFY), THIN_OK);
    if (plan_build(&m->p, m->f, kv, err, sizeof err) != THIN_OK) fail_msg("plan: %s", err);
    if (cpu_session_create(&m->s, &m->p, m->p.hp.max_pos, 2, err, sizeof err))
        fail_msg("session: %s", err);
}

static void model_close(model *m) {
    cpu_session_free(m->s);
    plan_free(&m->p);
    thin_file_free(m->f);
}

/* Reads line `key` of a golden .ids file into ids. */
static size_t golden_ids(const fixture *fx, const char *name, const char *key, int32_t *ids,
                         size_t cap) {
    char path[700], *text, err[256];
    size_t len, n = 0;
    int32_t *parsed;
    snprintf(path, sizeof path, "%s/golden/%s.ids", fx->dir, name);
    assert_int_equal(read_whole(path, &text, &len), 0);
    char *line = strstr(text, key);
    assert_non_null(line);
    line += strlen(key);
    line[strcspn(line, "\n")] = '\0';
    assert_int_equal(ids_parse(line, VOCAB, &parsed, &n, err, sizeof err), 0);
    assert_true(n <= cap);
    memcpy(ids, parsed, n * sizeof *ids);
    free(parsed);
    free(text);
    return n;
}

/* Greedy run as llama2.c does it: force the prompt, then feed back the argmax, 200 positions. */
static void check_greedy(const fixture *fx, model *m, const char *name) {
    int32_t prompt[POSITIONS + 1], want[POSITIONS + 1], got[POSITIONS + 1];
    size_t np = golden_ids(fx, name, "prompt ", prompt, POSITIONS);
    size_t nw = golden_ids(fx, name, "sequence ", want, POSITIONS + 1);
    assert_int_equal(nw, POSITIONS + 1);
    memcpy(got, prompt, np * sizeof *got);
    for (uint32_t pos = 0; pos < POSITIONS; pos++) {
        int32_t next;
        assert_int_equal(cpu_session_forward(m->s, &got[pos], 1, pos, NULL, &next), 0);
        if (pos + 1 >= np) got[pos + 1] = next;
    }
    for (size_t i = 0; i < nw; i++)
        if (got[i] != want[i]) fail_msg("%s: id %zu is %d, golden %d", name, i, got[i], want[i]);
}

static void test_golden_greedy_ids_f32(void **state) {
    fixture *fx = *state;
    model m;
    model_open(&m, fx->f32_path, THIN_DTYPE_F32);
    check_greedy(fx, &m, "once_upon_a_time");
    check_greedy(fx, &m, "lily_and_tom");
    check_greedy(fx, &m, "empty_prompt");
    model_close(&m);
}

/* Teacher-forced logits of the golden sequence, all 200 positions in one call. */
static float *score_all(model *m, const int32_t *seq) {
    float *out = malloc((size_t)POSITIONS * VOCAB * sizeof *out);
    assert_non_null(out);
    assert_int_equal(cpu_session_forward(m->s, seq, POSITIONS, 0, out, NULL), 0);
    return out;
}

/* score_all of the model at path with a KV cache of kv, run as a split over `shards` devices. */
static float *score_file(const char *path, thin_dtype kv, uint32_t shards, const int32_t *seq) {
    model m;
    char err[512];
    model_open(&m, path, kv);
    if (shards > 1) {
        cpu_session_free(m.s);
        m.p.shards = shards;
        if (cpu_session_create(&m.s, &m.p, m.p.hp.max_pos, 2, err, sizeof err))
            fail_msg("session: %s", err);
    }
    float *out = score_all(&m, seq);
    model_close(&m);
    return out;
}

static float *golden_logits(const fixture *fx) {
    char path[700], *data;
    size_t len;
    snprintf(path, sizeof path, "%s/golden/once_upon_a_time.logits_all.f32", fx->dir);
    assert_int_equal(read_whole(path, &data, &len), 0);
    assert_int_equal(len, (size_t)POSITIONS * VOCAB * sizeof(float));
    return (float *)data;
}

/* Infinity where a value of a is not finite (fmax alone would drop a NaN). */
static double max_abs_diff(const float *a, const float *b, size_t n) {
    double mx = 0;
    for (size_t i = 0; i < n; i++) {
        if (!isfinite(a[i])) return INFINITY;
        mx = fmax(mx, fabs((double)a[i] - b[i]));
    }
    return mx;
}

static void test_golden_logits_f32(void **state) {
    fixture *fx = *state;
    int32_t seq[POSITIONS + 1];
    golden_ids(fx, "once_upon_a_time", "sequence ", seq, POSITIONS + 1);
    float *ref = golden_logits(fx);
    float *got = score_file(fx->f32_path, THIN_DTYPE_F32, 1, seq);
    double d32 = max_abs_diff(got, ref, (size_t)POSITIONS * VOCAB);
    free(got);
    got = score_file(fx->f32_path, THIN_DTYPE_BF16, 1, seq);
    double d16 = max_abs_diff(got, ref, (size_t)POSITIONS * VOCAB);
    printf("F32 weights: max |logit - golden| = %.3g with an F32 KV cache, %.3g with BF16\n", d32,
           d16);
    assert_true(d32 <= 1e-4);
    assert_true(d16 <= 0.5);
    free(got);
    free(ref);
}

static void test_bf16_weights_track_f32(void **state) {
    fixture *fx = *state;
    int32_t seq[POSITIONS + 1];
    golden_ids(fx, "once_upon_a_time", "sequence ", seq, POSITIONS + 1);
    float *ref = golden_logits(fx);
    model m;
    model_open(&m, fx->bf16_path, THIN_DTYPE_F32);
    assert_int_equal(m.p.weight_bytes, 260032 * 2);
    float *got = score_all(&m, seq);
    model_close(&m);
    compare_summary s;
    compare_summary_init(&s);
    for (size_t p = 0; p < POSITIONS; p++) {
        compare_row r;
        compare_rows(ref + p * VOCAB, got + p * VOCAB, VOCAB, &r);
        compare_summary_add(&s, &r, p);
    }
    printf("BF16 weights vs golden F32: centered cosine min %.7f mean %.7f, top-1 %llu/200, "
           "max abs %.3g\n",
           s.cosine_min, compare_summary_mean(&s), (unsigned long long)s.top1_agree, s.max_abs);
    assert_true(s.cosine_min >= 0.9999);
    assert_true(s.top1_agree >= 198);
    free(got);
    free(ref);
}

/* The model run as a split over 2 and 4 devices would run it (plan.shards: o and down summed
 * from per-device partial products): the same model to within the summation order, against the
 * golden logits as tightly as the whole run, and the same greedy ids; 3 devices do not divide its
 * q rows, 8 its 172 gate rows. */
static void test_split_runs_track_whole(void **state) {
    fixture *fx = *state;
    int32_t seq[POSITIONS + 1];
    golden_ids(fx, "once_upon_a_time", "sequence ", seq, POSITIONS + 1);
    float *ref = golden_logits(fx), *whole = score_file(fx->f32_path, THIN_DTYPE_F32, 1, seq);
    model m;
    char err[512];
    model_open(&m, fx->f32_path, THIN_DTYPE_F32);
    assert_int_equal(plan_check_split(&m.p, 2, err, sizeof err), THIN_OK);
    assert_int_equal(plan_check_split(&m.p, 4, err, sizeof err), THIN_OK);
    assert_int_equal(plan_check_split(&m.p, 3, err, sizeof err), THIN_E_UNSUPPORTED);
    assert_non_null(strstr(err, "cannot split over 3 devices"));
    assert_int_equal(plan_check_split(&m.p, 8, err, sizeof err), THIN_E_UNSUPPORTED);
    assert_non_null(strstr(err, "gate_proj.weight, layer 0): its rows (172) do not divide"));
    model_close(&m);
    for (uint32_t n = 2; n <= 4; n += 2) {
        float *split = score_file(fx->f32_path, THIN_DTYPE_F32, n, seq);
        const double dw = max_abs_diff(split, whole, (size_t)POSITIONS * VOCAB);
        const double dg = max_abs_diff(split, ref, (size_t)POSITIONS * VOCAB);
        printf("%u devices: max |logit - whole run| = %.3g, |logit - golden| = %.3g\n", n, dw, dg);
        assert_true(dw > 0 && dw <= 1e-4); /* the partial sums do change the last bits */
        assert_true(dg <= 1e-4);
        for (size_t p = 0; p < POSITIONS; p++)
            assert_int_equal(op_argmax(split + p * VOCAB, VOCAB), op_argmax(whole + p * VOCAB, VOCAB));
        free(split);
    }
    free(whole);
    free(ref);
}

/* A prompt runs in batches (each linear reading its weights once per batch): its logits must be
 * those of the same tokens run one at a time, bit for bit, for every weight and cache dtype. */
static void test_batched_equals_token_by_token(void **state) {
    fixture *fx = *state;
    int32_t seq[POSITIONS + 1];
    golden_ids(fx, "once_upon_a_time", "sequence ", seq, POSITIONS + 1);
    const char *paths[] = {fx->f32_path, fx->bf16_path};
    const thin_dtype kvs[] = {THIN_DTYPE_F32, THIN_DTYPE_BF16};
    enum { N = 77 }; /* two batches of 32 and a part one */
    float *one = malloc((size_t)N * VOCAB * sizeof *one);
    assert_non_null(one);
    for (int f = 0; f < 2; f++)
        for (int k = 0; k < 2; k++) {
            model m;
            model_open(&m, paths[f], kvs[k]);
            float *all = malloc((size_t)N * VOCAB * sizeof *all);
            int32_t am[N], am1;
            assert_non_null(all);
            assert_int_equal(cpu_session_forward(m.s, seq, N, 0, all, am), 0);
            assert_memory_equal(cpu_session_logits(m.s), all + (size_t)(N - 1) * VOCAB,
                                VOCAB * sizeof(float));
            for (uint32_t p = 0; p < N; p++) {
                assert_int_equal(cpu_session_forward(m.s, &seq[p], 1, p, one + (size_t)p * VOCAB, &am1), 0);
                assert_int_equal(am1, am[p]);
            }
            assert_memory_equal(all, one, (size_t)N * VOCAB * sizeof(float));
            /* and a batch that starts past position 0 (a later turn of a chat) */
            assert_int_equal(cpu_session_forward(m.s, seq + 11, 13, 11, all, NULL), 0);
            assert_memory_equal(all, one + (size_t)11 * VOCAB, (size_t)13 * VOCAB * sizeof(float));
            /* a prompt run without logits or ids computes the last row's logits alone: the same */
            assert_int_equal(cpu_session_forward(m.s, seq, N, 0, NULL, NULL), 0);
            assert_memory_equal(cpu_session_logits(m.s), one + (size_t)(N - 1) * VOCAB,
                                VOCAB * sizeof(float));
            assert_int_equal(cpu_session_forward(m.s, seq, 32, 0, NULL, NULL), 0); /* a whole batch */
            assert_memory_equal(cpu_session_logits(m.s), one + (size_t)31 * VOCAB, VOCAB * sizeof(float));
            free(all);
            model_close(&m);
        }
    free(one);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_golden_greedy_ids_f32),
        cmocka_unit_test(test_golden_logits_f32),
        cmocka_unit_test(test_bf16_weights_track_f32),
        cmocka_unit_test(test_batched_equals_token_by_token),
        cmocka_unit_test(test_split_runs_track_whole),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
