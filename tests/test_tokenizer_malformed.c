/*
 * test_tokenizer_malformed.c — the readers of outside bytes return errors, never crash: every
 * truncation and many byte corruptions of a small GGUF vocabulary, hand-made bad GGUF headers,
 * and bad or unsupported tokenizer.json files (run under SAN=1 to check memory safety).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "../tools/thin-run/tokenizer.h"
#include "tok_test_util.h"

/* A tiny GGUF writer for hand-made vocabularies. */
typedef struct gw {
    unsigned char b[8192];
    size_t n;
} gw;

static void w_raw(gw *w, const void *p, size_t n)
{
    assert_true(w->n + n <= sizeof w->b);
    memcpy(w->b + w->n, p, n);
    w->n += n;
}
static void w_u32(gw *w, uint32_t v) { unsigned char b[4] = {v, v >> 8, v >> 16, v >> 24}; w_raw(w, b, 4); }
static void w_u64(gw *w, uint64_t v) { w_u32(w, (uint32_t)v); w_u32(w, (uint32_t)(v >> 32)); }
static void w_str(gw *w, const char *s) { w_u64(w, strlen(s)); w_raw(w, s, strlen(s)); }
static void w_key(gw *w, const char *k, uint32_t type) { w_str(w, k); w_u32(w, type); }

/* "llama" vocab: <unk> <s> </s>, the 256 byte pieces, then a few merges' worth of pieces. */
static void small_spm(gw *w, uint64_t n_kv_extra)
{
    static const char *pieces[] = {"\xE2\x96\x81", "a", "b", "ab", "\xE2\x96\x81" "ab"};
    uint32_t n = 3 + 256 + 5;
    w->n = 0;
    w_raw(w, "GGUF", 4);
    w_u32(w, 3);
    w_u64(w, 0);
    w_u64(w, 5 + n_kv_extra);
    w_key(w, "tokenizer.ggml.model", 8);
    w_str(w, "llama");
    w_key(w, "tokenizer.ggml.tokens", 9);
    w_u32(w, 8);
    w_u64(w, n);
    w_str(w, "<unk>");
    w_str(w, "<s>");
    w_str(w, "</s>");
    for (int i = 0; i < 256; i++) {
        char p[8];
        snprintf(p, sizeof p, "<0x%02X>", i);
        w_str(w, p);
    }
    for (int i = 0; i < 5; i++)
        w_str(w, pieces[i]);
    w_key(w, "tokenizer.ggml.scores", 9);
    w_u32(w, 6);
    w_u64(w, n);
    for (uint32_t i = 0; i < n; i++) {
        float f = -(float)i;
        w_raw(w, &f, 4);
    }
    w_key(w, "tokenizer.ggml.token_type", 9);
    w_u32(w, 5);
    w_u64(w, n);
    for (uint32_t i = 0; i < n; i++)
        w_u32(w, i == 0 ? 2 : i < 3 ? 3 : i < 259 ? 6 : 1);
    w_key(w, "tokenizer.ggml.bos_token_id", 4);
    w_u32(w, 1);
}

static void test_gguf_small_vocab_works(void **state)
{
    gw w;
    tok *t;
    char err[256];
    int32_t *ids;
    size_t n;
    small_spm(&w, 0);
    assert_int_equal(tok_load_gguf(&t, w.b, w.n, err, sizeof err), 0);
    assert_int_equal(tok_encode(t, "ab", 2, 1, 0, &ids, &n, err, sizeof err), 0);
    assert_int_equal(n, 2);
    assert_int_equal(ids[0], 1);
    assert_int_equal(ids[1], 263); /* "▁ab" */
    free(ids);
    assert_int_equal(tok_encode(t, "c", 1, 0, 0, &ids, &n, err, sizeof err), 0);
    assert_int_equal(n, 2); /* "▁" then byte fallback of "c" */
    assert_int_equal(ids[1], 3 + 'c');
    free(ids);
    tok_free(t);
}

static void test_gguf_every_truncation_fails(void **state)
{
    gw w;
    tok *t;
    char err[256];
    small_spm(&w, 0);
    for (size_t len = 0; len < w.n; len++) {
        unsigned char *copy = malloc(len ? len : 1); /* exact size, so ASan sees overreads */
        memcpy(copy, w.b, len);
        assert_int_equal(tok_load_gguf(&t, copy, len, err, sizeof err), -1);
        assert_null(t);
        free(copy);
    }
}

static void test_gguf_corruptions_do_not_crash(void **state)
{
    gw w;
    tok *t;
    char err[256];
    static const unsigned char vals[] = {0x00, 0x01, 0x7F, 0x80, 0xFF};
    small_spm(&w, 0);
    unsigned char *copy = malloc(w.n);
    for (size_t at = 0; at < w.n; at += (at < 600 ? 1 : 7))
        for (size_t v = 0; v < sizeof vals; v++) {
            memcpy(copy, w.b, w.n);
            copy[at] = vals[v];
            if (tok_load_gguf(&t, copy, w.n, err, sizeof err) == 0) {
                int32_t *ids;
                size_t n;
                assert_int_equal(tok_encode(t, " a b ab", 7, 1, 1, &ids, &n, err, sizeof err), 0);
                free(ids);
                tok_free(t);
            }
        }
    free(copy);
}

static void expect_gguf_error(gw *w, const char *what)
{
    tok *t;
    char err[256] = "";
    assert_int_equal(tok_load_gguf(&t, w->b, w->n, err, sizeof err), -1);
    assert_non_null(strstr(err, what));
}

static void test_gguf_bad_headers(void **state)
{
    gw w;
    small_spm(&w, 0);
    memcpy(w.b, "GGUG", 4);
    expect_gguf_error(&w, "magic");
    small_spm(&w, 0);
    w.b[4] = 1;
    expect_gguf_error(&w, "version");
    small_spm(&w, 1); /* one more key announced than present */
    expect_gguf_error(&w, "past the end");
    small_spm(&w, 1); /* a repeated key */
    w_key(&w, "tokenizer.ggml.bos_token_id", 4);
    w_u32(&w, 1);
    expect_gguf_error(&w, "repeated");
    small_spm(&w, 1); /* nested array */
    w_key(&w, "x", 9);
    w_u32(&w, 9);
    w_u64(&w, 1);
    expect_gguf_error(&w, "array");
    small_spm(&w, 1); /* huge array count */
    w_key(&w, "y", 9);
    w_u32(&w, 4);
    w_u64(&w, UINT64_MAX / 2);
    expect_gguf_error(&w, "past the end");
    small_spm(&w, 1); /* bos out of range */
    w.n -= 4 + 4 + 8 + strlen("tokenizer.ggml.bos_token_id");
    w_key(&w, "tokenizer.ggml.bos_token_id", 4);
    w_u32(&w, 100000);
    w_key(&w, "z", 4);
    w_u32(&w, 0);
    expect_gguf_error(&w, "bos_token_id");
}

static void expect_hf_error(const char *json, const char *what)
{
    tok *t = (tok *)1;
    char err[256] = "";
    assert_int_equal(tok_load_hf(&t, json, strlen(json), NULL, 0, err, sizeof err), -1);
    assert_null(t);
    if (!strstr(err, what))
        fprintf(stderr, "message \"%s\" lacks \"%s\"\n", err, what);
    assert_non_null(strstr(err, what));
}

#define VOCAB "\"vocab\": {\"a\": 0, \"b\": 1, \"ab\": 2}"

static void test_hf_bad_inputs(void **state)
{
    expect_hf_error("", "tokenizer.json");
    expect_hf_error("{\"model\": ", "tokenizer.json");
    expect_hf_error("[]", "tokenizer.json");
    expect_hf_error("{}", "model");
    expect_hf_error("{\"model\": {\"type\": \"Unigram\", \"vocab\": []}}", "Unigram");
    expect_hf_error("{\"model\": {\"type\": \"BPE\"}}", "vocab");
    expect_hf_error("{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": -1}, \"merges\": []}}",
                    "vocab id");
    expect_hf_error("{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 9999999}, \"merges\": []}}",
                    "vocab id");
    expect_hf_error("{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 5000}, \"merges\": []}}",
                    "sparse");
    expect_hf_error("{\"model\": {\"type\": \"BPE\", " VOCAB ", \"merges\": {}}}", "merges");
    expect_hf_error("{\"model\": {\"type\": \"BPE\", " VOCAB ", \"merges\": [3]}}", "merge 0");
    expect_hf_error("{\"normalizer\": {\"type\": \"BertNormalizer\"}, \"model\": {\"type\": "
                    "\"BPE\", " VOCAB ", \"merges\": []}}", "BertNormalizer");
    expect_hf_error("{\"pre_tokenizer\": {\"type\": \"Metaspace\"}, \"model\": {\"type\": \"BPE\", "
                    VOCAB ", \"merges\": []}}", "Metaspace");
    expect_hf_error("{\"normalizer\": {\"type\": \"Replace\", \"pattern\": {\"Regex\": \"(\"}, "
                    "\"content\": \"\"}, \"model\": {\"type\": \"BPE\", " VOCAB ", \"merges\": []}}",
                    "regex");
    expect_hf_error("{\"added_tokens\": [{\"id\": \"x\"}], \"model\": {\"type\": \"BPE\", " VOCAB
                    ", \"merges\": []}}", "added token");
    expect_hf_error("{\"model\": {\"type\": \"BPE\", \"dropout\": 0.1, " VOCAB ", \"merges\": []}}",
                    "dropout");
    expect_hf_error("{\"model\": {\"type\": \"BPE\", \"unk_token\": \"<unk>\", " VOCAB
                    ", \"merges\": []}}", "unk_token");
    /* byte-level vocabularies must cover every byte */
    expect_hf_error("{\"pre_tokenizer\": {\"type\": \"ByteLevel\", \"use_regex\": false}, "
                    "\"model\": {\"type\": \"BPE\", " VOCAB ", \"merges\": []}}", "byte");
}

static void test_hf_truncations_fail(void **state)
{
    size_t len = 0;
    char *json = fixture_read("stories260k/tokenizer.json", &len);
    assert_non_null(json);
    tok *t;
    char err[256];
    for (size_t cut = 0; cut < len; cut += 97) {
        char *copy = malloc(cut ? cut : 1);
        memcpy(copy, json, cut);
        assert_int_equal(tok_load_hf(&t, copy, cut, NULL, 0, err, sizeof err), -1);
        free(copy);
    }
    const char *bad_cfg = "{\"add_bos_token\": ";
    assert_int_equal(tok_load_hf(&t, json, len, bad_cfg, strlen(bad_cfg), err, sizeof err), -1);
    assert_non_null(strstr(err, "tokenizer_config.json"));
    free(json);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gguf_small_vocab_works),
        cmocka_unit_test(test_gguf_every_truncation_fails),
        cmocka_unit_test(test_gguf_corruptions_do_not_crash),
        cmocka_unit_test(test_gguf_bad_headers),
        cmocka_unit_test(test_hf_bad_inputs),
        cmocka_unit_test(test_hf_truncations_fail),
    };
    return cmocka_run_group_tests_name("tokenizer-malformed", tests, NULL, NULL);
}
