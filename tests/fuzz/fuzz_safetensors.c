/*
 * fuzz_safetensors.c — thin-pack's SafeTensors parser on arbitrary bytes: the whole-image path
 * (prefix, header, tiling, data size) and the streaming path (prefix with an unknown size, then
 * the header bytes alone, then the data-size check), as an archive or stdin source uses it.
 */
#include <stdint.h>
#include <string.h>

#include "../../tools/thin-pack/safetensors.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void st_fuzz_use(const st_header *h)
{
    for (size_t i = 0; i < h->n_tensors; i++) {
        const st_tensor *t = &h->tensors[i];
        if (st_header_find(h, t->name) < 0) __builtin_trap();
        (void)st_dtype_size(t->dtype);
    }
    (void)st_header_find(h, "model.embed_tokens.weight");
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char err[512];
    st_header h;
    memset(&h, 0, sizeof h);
    if (st_parse_memory(data, size, "fuzz.safetensors", &h, err, sizeof err) == 0)
        st_fuzz_use(&h);
    st_header_free(&h);

    uint64_t n;
    if (size < 8 || st_parse_prefix(data, ST_SIZE_UNKNOWN, &n, err, sizeof err) != 0) return 0;
    if (n > size - 8) return 0;
    memset(&h, 0, sizeof h);
    if (st_parse_header((const char *)data + 8, (size_t)n, "stdin", &h, err, sizeof err) == 0) {
        st_fuzz_use(&h);
        (void)st_check_data_size(&h, size - 8 - n, "stdin", err, sizeof err);
    }
    st_header_free(&h);
    return 0;
}
