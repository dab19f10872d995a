/*
 * fuzz_tok_gguf.c — the GGUF vocabulary reader (tokenizer.ggml.* keys) on arbitrary bytes; a
 * tokenizer that loads is used: encode, decode, streaming decode, piece lookups.
 */
#include "fuzz_tok_common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    tok *t = NULL;
    char err[512];
    if (tok_load_gguf(&t, data, size, err, sizeof err) == 0 && t) {
        fuzz_tok_use(t, data + size / 2, size - size / 2);
        tok_free(t);
    }
    return 0;
}
