/*
 * fuzz_tok_hf.c — the tokenizer.json (+ tokenizer_config.json) loader on arbitrary bytes.
 * Input: tokenizer.json bytes, then optionally a NUL byte and tokenizer_config.json bytes. A
 * tokenizer that loads is used: encode, decode, streaming decode, piece lookups.
 */
#include "fuzz_tok_common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const uint8_t *sep = memchr(data, 0, size);
    size_t json_len = sep ? (size_t)(sep - data) : size;
    const char *cfg = sep ? (const char *)sep + 1 : NULL;
    size_t cfg_len = sep ? size - json_len - 1 : 0;
    tok *t = NULL;
    char err[512];
    if (tok_load_hf(&t, (const char *)data, json_len, cfg, cfg_len, err, sizeof err) == 0 && t) {
        fuzz_tok_use(t, data, json_len);
        tok_free(t);
    }
    return 0;
}
