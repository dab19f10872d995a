/*
 * fuzz_tok_common.h — what both tokenizer fuzz targets do with a tokenizer that loaded: encode a
 * few texts (with and without special-token parsing), decode every id, stream-decode a sequence,
 * look up pieces. Included by fuzz_tok_hf.c and fuzz_tok_gguf.c only.
 */
#ifndef FUZZ_TOK_COMMON_H
#define FUZZ_TOK_COMMON_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../../tools/thin-run/tokenizer.h"

static void fuzz_tok_decode_ids(const tok *t, const int32_t *ids, size_t n)
{
    char *text = NULL;
    size_t len = 0;
    if (tok_decode(t, ids, n, &text, &len) == 0) free(text);
    size_t cap = 3 * (tok_max_piece(t) + 4);
    char *out = malloc(cap);
    if (!out) return;
    tok_decoder d;
    tok_decoder_init(&d, t);
    size_t got;
    for (size_t i = 0; i < n; i++) (void)tok_decoder_push(&d, ids[i], out, cap, &got);
    (void)tok_decoder_flush(&d, out, cap, &got);
    free(out);
}

static void fuzz_tok_use(const tok *t, const uint8_t *text, size_t len)
{
    static const char *const samples[] = {
        "Hello world", " Once upon a time, there was a little girl.\n\n",
        "<|im_start|>user\nhi<|im_end|>", "\xe2\x96\x81\xff\xfe caf\xc3\xa9 \xf0\x9f\x98\x80 123",
    };
    (void)tok_type(t);
    (void)tok_bos(t);
    (void)tok_eos(t);
    (void)tok_add_bos(t);
    (void)tok_find(t, "<|im_end|>");
    (void)tok_chat_template(t);
    uint32_t v = tok_vocab_size(t);
    for (uint32_t id = 0; id < v && id < 4096; id++) {
        const char *b;
        size_t n;
        (void)tok_piece(t, (int32_t)id, &b, &n);
    }
    int32_t probe[] = {-1, (int32_t)v, 0, (int32_t)v - 1, INT32_MAX};
    fuzz_tok_decode_ids(t, probe, sizeof probe / sizeof probe[0]);
    char err[256];
    for (size_t s = 0; s <= sizeof samples / sizeof samples[0]; s++) {
        const char *x = s < 4 ? samples[s] : (const char *)text;
        size_t xl = s < 4 ? strlen(samples[s]) : (len > 256 ? 256 : len);
        int32_t *ids = NULL;
        size_t n = 0;
        if (tok_encode(t, x, xl, 1, (int)(s & 1), &ids, &n, err, sizeof err) == 0)
            fuzz_tok_decode_ids(t, ids, n);
        free(ids);
    }
}

#endif /* FUZZ_TOK_COMMON_H */
