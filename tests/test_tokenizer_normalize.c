/*
 * test_tokenizer_normalize.c — the Unicode normalization forms of a tokenizer.json normalizer
 * (Qwen2 and Qwen3 tokenizers use NFC): composed and decomposed spellings of a text give the same
 * ids under NFC, NFD splits them, NFKC folds compatibility characters, and bytes that are not
 * UTF-8 pass through to byte fallback.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "../tools/thin-run/tokenizer.h"

/* A SentencePiece-style BPE: e, U+0301 (combining acute), é, f, i, fi, the ligature U+FB01, and
 * the byte pieces <0xFF> and <0x80>; the normalizer is `form` (a JSON value). */
static tok *load(const char *form)
{
    char json[1024];
    snprintf(json, sizeof json,
             "{\"normalizer\": %s, \"model\": {\"type\": \"BPE\", \"byte_fallback\": true, "
             "\"vocab\": {\"<unk>\": 0, \"e\": 1, \"\\u0301\": 2, \"\\u00e9\": 3, \"f\": 4, "
             "\"i\": 5, \"fi\": 6, \"<0xFF>\": 7, \"\\ufb01\": 8, \"<0x80>\": 9}, "
             "\"merges\": [\"f i\"]}}",
             form);
    tok *t = NULL;
    char err[256] = "";
    if (tok_load_hf(&t, json, strlen(json), NULL, 0, err, sizeof err))
        fail_msg("load: %s", err);
    return t;
}

/* Encodes text and checks the ids. */
static void expect(const tok *t, const char *text, const int32_t *want, size_t n)
{
    int32_t *ids = NULL;
    size_t k = 0;
    char err[256] = "";
    if (tok_encode(t, text, strlen(text), 0, 0, &ids, &k, err, sizeof err))
        fail_msg("encode: %s", err);
    if (k != n)
        fail_msg("'%s': %zu ids, want %zu", text, k, n);
    for (size_t i = 0; i < n; i++)
        assert_int_equal(ids[i], want[i]);
    free(ids);
}

#define E_ACUTE_DECOMPOSED "e\xCC\x81"
#define E_ACUTE "\xC3\xA9"
#define FI_LIGATURE "\xEF\xAC\x81"

static void test_nfc(void **state)
{
    (void)state;
    tok *t = load("{\"type\": \"NFC\"}");
    expect(t, E_ACUTE, (const int32_t[]){3}, 1);
    expect(t, E_ACUTE_DECOMPOSED, (const int32_t[]){3}, 1);
    expect(t, FI_LIGATURE, (const int32_t[]){8}, 1); /* no compatibility folding */
    /* bytes that are not UTF-8 between and after runs: each run composed, each byte to byte
     * fallback (a stray continuation byte is one symbol; 0xFF, as a lead byte, ends the text) */
    expect(t, E_ACUTE_DECOMPOSED "\x80" E_ACUTE_DECOMPOSED "\xFF", (const int32_t[]){3, 9, 3, 7}, 4);
    tok_free(t);
}

static void test_nfd_nfkc_nfkd_and_none(void **state)
{
    (void)state;
    tok *t = load("{\"type\": \"NFD\"}");
    expect(t, E_ACUTE, (const int32_t[]){1, 2}, 2);
    tok_free(t);
    t = load("{\"type\": \"Sequence\", \"normalizers\": [{\"type\": \"NFKC\"}]}");
    expect(t, FI_LIGATURE, (const int32_t[]){6}, 1);
    expect(t, E_ACUTE_DECOMPOSED, (const int32_t[]){3}, 1);
    tok_free(t);
    t = load("{\"type\": \"NFKD\"}");
    expect(t, FI_LIGATURE E_ACUTE, (const int32_t[]){6, 1, 2}, 3);
    tok_free(t);
    t = load("null");
    expect(t, E_ACUTE_DECOMPOSED, (const int32_t[]){1, 2}, 2);
    expect(t, FI_LIGATURE, (const int32_t[]){8}, 1);
    tok_free(t);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_nfc),
        cmocka_unit_test(test_nfd_nfkc_nfkd_and_none),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
