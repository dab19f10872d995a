/*
 * test_tokenizer_vectors.c — llama.cpp's tokenizer test vectors (fixtures/tokenizer-vectors):
 * the 46 strings of each .inp encoded without BOS and without special-token parsing must give
 * the ids of the .out exactly, for the Llama-3 byte-level BPE and the Llama-2 SentencePiece
 * vocabularies; every string must decode back to itself.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>
#include <cmocka.h>

#include "../tools/thin-run/tokenizer.h"
#include "tok_test_util.h"

#define SEP "\n__ggml_vocab_test__\n"

typedef struct vec {
    tok *t;
    char *inp, *outp;
    size_t inp_len, out_len;
} vec;

static int setup_vocab(void **state, const char *name)
{
    char rel[256];
    size_t len;
    char err[256] = "";
    vec *v = calloc(1, sizeof *v);
    snprintf(rel, sizeof rel, "tokenizer-vectors/%s", name);
    char *gguf = fixture_read(rel, &len);
    if (!v || !gguf)
        return -1;
    int rc = tok_load_gguf(&v->t, gguf, len, err, sizeof err);
    free(gguf);
    if (rc) {
        fprintf(stderr, "load %s: %s\n", name, err);
        return -1;
    }
    snprintf(rel, sizeof rel, "tokenizer-vectors/%s.inp", name);
    v->inp = fixture_read(rel, &v->inp_len);
    snprintf(rel, sizeof rel, "tokenizer-vectors/%s.out", name);
    v->outp = fixture_read(rel, &v->out_len);
    if (!v->inp || !v->outp)
        return -1;
    *state = v;
    return 0;
}

static int setup_bpe(void **state) { return setup_vocab(state, "ggml-vocab-llama-bpe.gguf"); }
static int setup_spm(void **state) { return setup_vocab(state, "ggml-vocab-llama-spm.gguf"); }

static int teardown(void **state)
{
    vec *v = *state;
    if (v) {
        tok_free(v->t);
        free(v->inp);
        free(v->outp);
        free(v);
    }
    return 0;
}

/* Parses one .out line ("  9906 1917") into ids; returns the count. */
static size_t parse_line(const char *line, size_t len, int32_t *ids, size_t cap)
{
    size_t n = 0;
    char buf[4096];
    if (len >= sizeof buf)
        return (size_t)-1;
    memcpy(buf, line, len);
    buf[len] = 0;
    for (char *p = buf, *end; *p; p = end) {
        long v = strtol(p, &end, 10);
        if (end == p)
            break;
        if (n < cap)
            ids[n] = (int32_t)v;
        n++;
    }
    return n;
}

static void check_all(vec *v)
{
    const char *in = v->inp, *in_end = v->inp + v->inp_len;
    const char *out = v->outp, *out_end = v->outp + v->out_len;
    int n_cases = 0;
    char err[256];
    while (in < in_end) {
        const char *sep = strstr(in, SEP);
        assert_non_null(sep);
        const char *nl = memchr(out, '\n', (size_t)(out_end - out));
        assert_non_null(nl);
        int32_t want[512];
        size_t n_want = parse_line(out, (size_t)(nl - out), want, 512);
        int32_t *ids;
        size_t n_ids;
        assert_int_equal(tok_encode(v->t, in, (size_t)(sep - in), 0, 0, &ids, &n_ids, err,
                                    sizeof err), 0);
        if (n_ids != n_want || memcmp(ids, want, n_ids * sizeof *ids)) {
            fprintf(stderr, "case %d \"%.*s\": got", n_cases, (int)(sep - in), in);
            for (size_t i = 0; i < n_ids; i++)
                fprintf(stderr, " %d", ids[i]);
            fprintf(stderr, "\n  want %.*s\n", (int)(nl - out), out);
            fail();
        }
        char *text;
        size_t tlen;
        assert_int_equal(tok_decode(v->t, ids, n_ids, &text, &tlen), 0);
        assert_int_equal(tlen, (size_t)(sep - in));
        assert_memory_equal(text, in, tlen);
        free(text);
        free(ids);
        n_cases++;
        in = sep + strlen(SEP);
        out = nl + 1;
    }
    assert_int_equal(n_cases, 46);
    assert_true(out == out_end);
}

static void test_llama3_bpe_vectors(void **state)
{
    vec *v = *state;
    assert_int_equal(tok_type(v->t), TOK_BYTE_BPE);
    assert_int_equal(tok_vocab_size(v->t), 128256);
    assert_int_equal(tok_bos(v->t), 128000);
    assert_int_equal(tok_eos(v->t), 128001);
    check_all(v);
}

static void test_llama2_spm_vectors(void **state)
{
    vec *v = *state;
    assert_int_equal(tok_type(v->t), TOK_SPM_BPE);
    assert_int_equal(tok_vocab_size(v->t), 32000);
    assert_int_equal(tok_bos(v->t), 1);
    assert_int_equal(tok_eos(v->t), 2);
    assert_true(tok_add_bos(v->t));
    check_all(v);
}

/* Special tokens become their ids only when parse_special is set. */
static void test_llama3_special_tokens(void **state)
{
    vec *v = *state;
    char err[256];
    int32_t *ids;
    size_t n;
    const char *s = "<|begin_of_text|>Hello";
    assert_int_equal(tok_encode(v->t, s, strlen(s), 0, 1, &ids, &n, err, sizeof err), 0);
    assert_int_equal(n, 2);
    assert_int_equal(ids[0], 128000);
    assert_int_equal(ids[1], 9906);
    free(ids);
    assert_int_equal(tok_encode(v->t, s, strlen(s), 1, 0, &ids, &n, err, sizeof err), 0);
    assert_true(n > 3);
    assert_int_equal(ids[0], 128000);
    assert_true(ids[1] != 128000);
    free(ids);
    assert_int_equal(tok_find(v->t, "<|end_of_text|>"), 128001);
    assert_int_equal(tok_find(v->t, "Hello"), 9906);
}

/* A few KB must encode in well under a millisecond per KB. */
static void test_encode_speed(void **state)
{
    vec *v = *state;
    char err[256];
    struct timespec a, b;
    int32_t *ids;
    size_t n;
    clock_gettime(CLOCK_MONOTONIC, &a);
    for (int rep = 0; rep < 20; rep++) {
        assert_int_equal(tok_encode(v->t, v->inp, v->inp_len, 1, 0, &ids, &n, err, sizeof err), 0);
        free(ids);
    }
    clock_gettime(CLOCK_MONOTONIC, &b);
    double ms_per_kb = ((double)(b.tv_sec - a.tv_sec) * 1e3 + (double)(b.tv_nsec - a.tv_nsec) / 1e6)
                       / 20.0 / ((double)v->inp_len / 1024.0);
    fprintf(stderr, "encode: %.3f ms per KB\n", ms_per_kb);
#if defined(__SANITIZE_ADDRESS__)
    assert_true(ms_per_kb < 50.0); /* sanitizer builds are many times slower */
#else
    assert_true(ms_per_kb < 1.0);
#endif
}

int main(void)
{
    const struct CMUnitTest bpe[] = {
        cmocka_unit_test(test_llama3_bpe_vectors),
        cmocka_unit_test(test_llama3_special_tokens),
        cmocka_unit_test(test_encode_speed),
    };
    const struct CMUnitTest spm[] = {
        cmocka_unit_test(test_llama2_spm_vectors),
        cmocka_unit_test(test_encode_speed),
    };
    int fails = cmocka_run_group_tests_name("llama3-bpe", bpe, setup_bpe, teardown);
    fails += cmocka_run_group_tests_name("llama2-spm", spm, setup_spm, teardown);
    return fails ? 1 : 0;
}
