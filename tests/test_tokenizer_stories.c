/*
 * test_tokenizer_stories.c — stories260K's tokenizer.json (+ tokenizer_config.json): all 819
 * cases of golden/tokenizer_cases.jsonl must encode to `sentencepiece_ids` (no BOS, no special
 * parsing) and decode back to the text under sentencepiece's whitespace rules; the golden runs'
 * prompts must encode to their prompt ids and their sequences (after BOS) decode to run.c's
 * output without its final newline.
 */
#include <jansson.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "../tools/thin-run/tokenizer.h"
#include "tok_test_util.h"

static int setup(void **state)
{
    size_t jl, cl;
    char err[256] = "";
    char *json = fixture_read("stories260k/tokenizer.json", &jl);
    char *cfg = fixture_read("stories260k/tokenizer_config.json", &cl);
    tok *t = NULL;
    if (!json || !cfg || tok_load_hf(&t, json, jl, cfg, cl, err, sizeof err)) {
        fprintf(stderr, "load: %s\n", err);
        free(json);
        free(cfg);
        return -1;
    }
    free(json);
    free(cfg);
    *state = t;
    return 0;
}

static int teardown(void **state)
{
    tok_free(*state);
    return 0;
}

static void test_stories_header(void **state)
{
    tok *t = *state;
    assert_int_equal(tok_type(t), TOK_SPM_BPE);
    assert_int_equal(tok_vocab_size(t), 512);
    assert_int_equal(tok_bos(t), 1);
    assert_int_equal(tok_eos(t), 2);
    assert_true(tok_add_bos(t));
    assert_int_equal(tok_find(t, "<unk>"), 0);
    assert_int_equal(tok_find(t, "\xE2\x96\x81t"), 259);
}

/* Appends src[0..n) to dst with sentencepiece's remove_extra_whitespaces and decode rules:
 * leading spaces dropped, runs of spaces made one, trailing spaces and "▁" dropped, "▁" shown
 * as a space, and the output's leading spaces dropped. */
static size_t expected_decode(const char *s, size_t n, char *out)
{
    char *norm = malloc(3 * n + 4);
    size_t k = 0, i = 0, m = 0;
    while (i < n && s[i] == ' ')
        i++;
    for (; i < n; i++) {
        if (s[i] == ' ' && i > 0 && s[i - 1] == ' ')
            continue;
        if (s[i] == ' ') {
            memcpy(norm + k, "\xE2\x96\x81", 3);
            k += 3;
        } else
            norm[k++] = s[i];
    }
    while (k >= 3 && !memcmp(norm + k - 3, "\xE2\x96\x81", 3))
        k -= 3;
    for (i = 0; i < k;) {
        if (k - i >= 3 && !memcmp(norm + i, "\xE2\x96\x81", 3)) {
            if (m)
                out[m++] = ' ';
            i += 3;
        } else
            out[m++] = norm[i++];
    }
    free(norm);
    return m;
}

static void check_case(tok *t, json_t *line, int lineno)
{
    json_t *text = json_object_get(line, "text"), *want = json_object_get(line, "sentencepiece_ids");
    const char *s = json_string_value(text);
    size_t len = json_string_length(text), n;
    int32_t *ids;
    char err[256];
    assert_non_null(s);
    assert_int_equal(tok_encode(t, s, len, 0, 0, &ids, &n, err, sizeof err), 0);
    int same = n == json_array_size(want);
    for (size_t i = 0; same && i < n; i++)
        same = ids[i] == json_integer_value(json_array_get(want, i));
    if (!same) {
        fprintf(stderr, "line %d \"%s\": got", lineno, s);
        for (size_t i = 0; i < n; i++)
            fprintf(stderr, " %d", ids[i]);
        fprintf(stderr, "\n");
        fail();
    }
    char *dec, *exp = malloc(3 * len + 4);
    size_t dlen, elen = expected_decode(s, len, exp);
    assert_int_equal(tok_decode(t, ids, n, &dec, &dlen), 0);
    if (dlen != elen || memcmp(dec, exp, dlen))
        fprintf(stderr, "line %d: decode \"%s\" expected \"%.*s\"\n", lineno, dec, (int)elen, exp);
    assert_int_equal(dlen, elen);
    assert_memory_equal(dec, exp, dlen);
    free(dec);
    free(exp);
    free(ids);
}

static void test_stories_819_cases(void **state)
{
    size_t len;
    char *data = fixture_read("stories260k/golden/tokenizer_cases.jsonl", &len);
    assert_non_null(data);
    int n = 0;
    for (char *p = data, *nl; *p; p = nl + 1) {
        nl = strchr(p, '\n');
        assert_non_null(nl);
        json_error_t je;
        json_t *line = json_loadb(p, (size_t)(nl - p), 0, &je);
        assert_non_null(line);
        check_case(*state, line, ++n);
        json_decref(line);
    }
    assert_int_equal(n, 819);
    free(data);
}

/* stories260K's tokenizer.json with its whitespace normalizer replaced by a Metaspace
 * pre-tokenizer and decoder of the given prepend scheme and split (the form of newer SentencePiece
 * conversions, such as Mistral's). */
static tok *load_metaspace(const char *scheme, int split)
{
    size_t jl;
    char *text = fixture_read("stories260k/tokenizer.json", &jl);
    assert_non_null(text);
    json_t *root = json_loadb(text, jl, 0, NULL);
    free(text);
    assert_non_null(root);
    json_object_set_new(root, "normalizer", json_null());
    json_object_set_new(root, "pre_tokenizer",
                        json_pack("{ss ss ss sb}", "type", "Metaspace", "replacement", "\xE2\x96\x81",
                                  "prepend_scheme", scheme, "split", split));
    json_object_set_new(root, "decoder",
                        json_pack("{ss [{ss ss ss sb} {ss} {ss}]}", "type", "Sequence", "decoders",
                                  "type", "Metaspace", "replacement", "\xE2\x96\x81",
                                  "prepend_scheme", scheme, "split", split, "type", "ByteFallback",
                                  "type", "Fuse"));
    char *j = json_dumps(root, 0);
    json_decref(root);
    tok *t = NULL;
    char err[256] = "";
    if (tok_load_hf(&t, j, strlen(j), NULL, 0, err, sizeof err))
        fail_msg("load: %s", err);
    free(j);
    return t;
}

/* The Metaspace form gives sentencepiece's ids and decode for every golden case that the
 * original's extra whitespace rules (leading, trailing and repeated spaces, trailing "▁") leave
 * alone, split or not; with "first", text after a special token gets no "▁", with "always" it does. */
static void test_stories_metaspace(void **state)
{
    size_t len;
    char *data = fixture_read("stories260k/golden/tokenizer_cases.jsonl", &len);
    assert_non_null(data);
    for (int v = 0; v < 3; v++) {
        tok *t = load_metaspace(v == 2 ? "first" : "always", v != 1);
        int n = 0, checked = 0;
        for (char *p = data, *nl; *p; p = nl + 1) {
            nl = strchr(p, '\n');
            assert_non_null(nl);
            json_t *line = json_loadb(p, (size_t)(nl - p), 0, NULL);
            const char *s = json_string_value(json_object_get(line, "text"));
            const size_t sl = strlen(s);
            n++;
            if (sl && s[0] != ' ' && s[sl - 1] != ' ' && !strstr(s, "  ") &&
                !strstr(s, "\xE2\x96\x81")) {
                check_case(t, line, n);
                checked++;
            }
            json_decref(line);
        }
        assert_true(checked > 400);
        const char *sp = "<s>Once upon", *plain = "Once upon";
        int32_t *a, *b;
        size_t na, nb;
        char err[256];
        assert_int_equal(tok_encode(t, sp, strlen(sp), 0, 1, &a, &na, err, sizeof err), 0);
        assert_int_equal(tok_encode(*state, plain, strlen(plain), 0, 0, &b, &nb, err, sizeof err), 0);
        assert_int_equal(a[0], 1);
        /* the original's ids of "Once upon" start with "▁Once": "always" gives them after <s> */
        assert_int_equal(v == 2 ? na - 1 != nb || memcmp(a + 1, b, nb * sizeof *b) != 0
                                : na - 1 == nb && memcmp(a + 1, b, nb * sizeof *b) == 0,
                         1);
        free(a);
        free(b);
        tok_free(t);
    }
    free(data);
}

/* With parse_special, the literal "<s>" becomes BOS, as in Hugging Face tokenizers. */
static void test_stories_parse_special(void **state)
{
    const char *s = "<s> is not special", *rest = "is not special";
    int32_t *a, *b;
    size_t na, nb;
    char err[256];
    assert_int_equal(tok_encode(*state, s, strlen(s), 0, 1, &a, &na, err, sizeof err), 0);
    assert_int_equal(tok_encode(*state, rest, strlen(rest), 1, 0, &b, &nb, err, sizeof err), 0);
    assert_int_equal(na, nb);
    assert_memory_equal(a, b, na * sizeof *a);
    assert_int_equal(a[0], 1);
    free(a);
    free(b);
}

/* Reads the ids after `label` on its line of a golden .ids file. */
static size_t read_ids(const char *data, const char *label, int32_t *ids, size_t cap)
{
    const char *p = strstr(data, label);
    size_t n = 0;
    assert_non_null(p);
    p += strlen(label);
    while (*p == ' ') {
        char *end;
        long v = strtol(p, &end, 10);
        if (end == p)
            break;
        assert_true(n < cap);
        ids[n++] = (int32_t)v;
        p = end;
    }
    return n;
}

static void check_golden(tok *t, const char *name, const char *prompt)
{
    char rel[256], err[256];
    size_t len, tlen, n, np;
    int32_t seq[512], pr[64];
    snprintf(rel, sizeof rel, "stories260k/golden/%s.ids", name);
    char *ids = fixture_read(rel, &len);
    snprintf(rel, sizeof rel, "stories260k/golden/%s.txt", name);
    char *txt = fixture_read(rel, &tlen);
    assert_non_null(ids);
    assert_non_null(txt);
    n = read_ids(ids, "sequence", seq, 512);
    np = read_ids(ids, "prompt", pr, 64);
    assert_true(n > 1 && seq[0] == 1);
    char *dec;
    size_t dlen;
    assert_int_equal(tok_decode(t, seq + 1, n - 1, &dec, &dlen), 0);
    assert_true(tlen > 0 && txt[tlen - 1] == '\n');
    assert_int_equal(dlen, tlen - 1);
    assert_memory_equal(dec, txt, dlen);
    free(dec);
    int32_t *enc;
    size_t ne;
    assert_int_equal(tok_encode(t, prompt, strlen(prompt), 1, 0, &enc, &ne, err, sizeof err), 0);
    assert_int_equal(ne, np);
    assert_memory_equal(enc, pr, np * sizeof *enc);
    free(enc);
    free(ids);
    free(txt);
}

static void test_stories_golden_decode(void **state)
{
    check_golden(*state, "once_upon_a_time", "Once upon a time");
    check_golden(*state, "lily_and_tom", "Lily and Tom");
    check_golden(*state, "empty_prompt", "");
    check_golden(*state, "doc_default", "");
}

/* The streaming decoder gives the same text as the whole-sequence decode, BOS printing nothing. */
static void test_stories_stream_matches(void **state)
{
    tok *t = *state;
    size_t len;
    int32_t seq[512];
    char *ids = fixture_read("stories260k/golden/lily_and_tom.ids", &len);
    assert_non_null(ids);
    size_t n = read_ids(ids, "sequence", seq, 512), total = 0, k;
    char out[8192], buf[64];
    tok_decoder d;
    tok_decoder_init(&d, t);
    for (size_t i = 0; i < n; i++) {
        assert_int_equal(tok_decoder_push(&d, seq[i], buf, sizeof buf, &k), 0);
        assert_true(total + k < sizeof out);
        memcpy(out + total, buf, k);
        total += k;
    }
    assert_int_equal(tok_decoder_flush(&d, buf, sizeof buf, &k), 0);
    assert_int_equal(k, 0);
    char *dec;
    size_t dlen;
    assert_int_equal(tok_decode(t, seq + 1, n - 1, &dec, &dlen), 0);
    assert_int_equal(total, dlen);
    assert_memory_equal(out, dec, dlen);
    free(dec);
    free(ids);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_stories_header),
        cmocka_unit_test(test_stories_819_cases),
        cmocka_unit_test(test_stories_parse_special),
        cmocka_unit_test(test_stories_metaspace),
        cmocka_unit_test(test_stories_golden_decode),
        cmocka_unit_test(test_stories_stream_matches),
    };
    return cmocka_run_group_tests_name("stories260k", tests, setup, teardown);
}
