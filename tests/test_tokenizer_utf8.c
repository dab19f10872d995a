/*
 * test_tokenizer_utf8.c — the streaming decoder: it never emits half a UTF-8 character, turns
 * bytes that cannot form one into U+FFFD (at once when they cannot be completed, at flush when
 * the text ends inside one), prints nothing for control tokens, and refuses a too-small buffer.
 * Byte pieces come from the Llama-2 vocabulary (<0xNN> tokens).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "../tools/thin-run/tokenizer.h"
#include "tok_test_util.h"

#define FFFD "\xEF\xBF\xBD"

static int setup(void **state)
{
    size_t len;
    char err[256] = "";
    char *g = fixture_read("tokenizer-vectors/ggml-vocab-llama-spm.gguf", &len);
    tok *t = NULL;
    int rc = g ? tok_load_gguf(&t, g, len, err, sizeof err) : -1;
    free(g);
    if (rc)
        fprintf(stderr, "load: %s\n", err);
    *state = t;
    return rc;
}

static int teardown(void **state)
{
    tok_free(*state);
    return 0;
}

static int32_t byte_tok(const tok *t, unsigned b)
{
    char name[8];
    snprintf(name, sizeof name, "<0x%02X>", b);
    int32_t id = tok_find(t, name);
    assert_true(id >= 0);
    return id;
}

/* Pushes each id and collects the output; checks nothing half-made comes out in between. */
static size_t run(tok_decoder *d, const int32_t *ids, size_t n, int flush, char *out)
{
    size_t total = 0, k;
    char buf[256];
    for (size_t i = 0; i < n; i++) {
        assert_int_equal(tok_decoder_push(d, ids[i], buf, sizeof buf, &k), 0);
        memcpy(out + total, buf, k);
        total += k;
    }
    if (flush) {
        assert_int_equal(tok_decoder_flush(d, buf, sizeof buf, &k), 0);
        memcpy(out + total, buf, k);
        total += k;
    }
    out[total] = 0;
    return total;
}

static void test_utf8_waits_for_whole_char(void **state)
{
    tok *t = *state;
    tok_decoder d;
    char buf[64];
    size_t k;
    tok_decoder_init(&d, t);
    int32_t e4 = byte_tok(t, 0xE4), b8 = byte_tok(t, 0xB8), ad = byte_tok(t, 0xAD);
    assert_int_equal(tok_decoder_push(&d, e4, buf, sizeof buf, &k), 0);
    assert_int_equal(k, 0);
    assert_int_equal(tok_decoder_push(&d, b8, buf, sizeof buf, &k), 0);
    assert_int_equal(k, 0);
    assert_int_equal(tok_decoder_push(&d, ad, buf, sizeof buf, &k), 0);
    assert_int_equal(k, 3);
    assert_memory_equal(buf, "\xE4\xB8\xAD", 3);
    /* a 4-byte emoji, one byte at a time */
    const unsigned char emoji[4] = {0xF0, 0x9F, 0x98, 0x80};
    for (int i = 0; i < 4; i++) {
        assert_int_equal(tok_decoder_push(&d, byte_tok(t, emoji[i]), buf, sizeof buf, &k), 0);
        assert_int_equal(k, i == 3 ? 4 : 0);
    }
    assert_memory_equal(buf, emoji, 4);
}

static void test_utf8_invalid_runs(void **state)
{
    tok *t = *state;
    tok_decoder d;
    char out[256];
    int32_t a = tok_find(t, "a");
    assert_true(a >= 0);
    /* lead byte followed by a plain letter: U+FFFD, then the letter */
    int32_t s1[] = {a, byte_tok(t, 0xE4), a};
    tok_decoder_init(&d, t);
    assert_int_equal(run(&d, s1, 3, 1, out), 1 + 3 + 1);
    assert_string_equal(out, "a" FFFD "a");
    /* lone continuation, overlong lead, surrogate: each bad part one U+FFFD */
    int32_t s2[] = {byte_tok(t, 0x80), byte_tok(t, 0xC0), byte_tok(t, 0xED), byte_tok(t, 0xA0)};
    tok_decoder_init(&d, t);
    run(&d, s2, 4, 1, out);
    assert_string_equal(out, FFFD FFFD FFFD FFFD);
    /* the text ends inside a character: U+FFFD at flush, not before */
    int32_t s3[] = {a, byte_tok(t, 0xE4), byte_tok(t, 0xB8)};
    tok_decoder_init(&d, t);
    assert_int_equal(run(&d, s3, 3, 0, out), 1);
    char buf[8];
    size_t k;
    assert_int_equal(tok_decoder_flush(&d, buf, sizeof buf, &k), 0);
    assert_int_equal(k, 3);
    assert_memory_equal(buf, FFFD, 3);
    assert_int_equal(tok_decoder_flush(&d, buf, sizeof buf, &k), 0);
    assert_int_equal(k, 0);
}

static void test_utf8_control_tokens_print_nothing(void **state)
{
    tok *t = *state;
    tok_decoder d;
    char out[256];
    int32_t hello = tok_find(t, "\xE2\x96\x81Hello");
    assert_true(hello >= 0);
    int32_t s[] = {tok_bos(t), hello, tok_eos(t), 0 /* <unk> */};
    tok_decoder_init(&d, t);
    run(&d, s, 4, 1, out);
    assert_string_equal(out, "Hello"); /* the dummy-prefix space is dropped too */
    const char *p;
    size_t len;
    assert_int_equal(tok_piece(t, tok_bos(t), &p, &len), 0);
    assert_int_equal(len, 3);
    assert_memory_equal(p, "<s>", 3);
    assert_int_equal(tok_piece(t, hello, &p, &len), 0);
    assert_int_equal(len, 6);
    assert_memory_equal(p, " Hello", 6);
}

static void test_utf8_bad_ids_and_small_buffers(void **state)
{
    tok *t = *state;
    tok_decoder d;
    char buf[4];
    size_t k;
    tok_decoder_init(&d, t);
    assert_int_equal(tok_decoder_push(&d, -1, buf, sizeof buf, &k), -1);
    assert_int_equal(tok_decoder_push(&d, (int32_t)tok_vocab_size(t), buf, sizeof buf, &k), -1);
    assert_int_equal(tok_decoder_push(&d, tok_find(t, "a"), buf, sizeof buf, &k), -1);
    char *text;
    size_t len;
    int32_t bad[] = {5, 99999};
    assert_int_equal(tok_decode(t, bad, 2, &text, &len), -1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_utf8_waits_for_whole_char),
        cmocka_unit_test(test_utf8_invalid_runs),
        cmocka_unit_test(test_utf8_control_tokens_print_nothing),
        cmocka_unit_test(test_utf8_bad_ids_and_small_buffers),
    };
    return cmocka_run_group_tests_name("utf8-stream", tests, setup, teardown);
}
