/*
 * fuzz_arch.c — config.json to model section and tape (thin-pack's arch_build) on arbitrary bytes.
 *
 * Input: config.json bytes, then optionally a NUL byte and a JSON object standing for the tensors
 * the file will hold, {"name": {"shape": [d0, ...]}, ...} (a SafeTensors header has that form), so
 * the tape checks against tensor names and shapes are reached too.
 */
#include <jansson.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../../tools/thin-pack/arch.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int arch_fuzz_lookup(void *user, const char *name, uint32_t *rank,
                       uint64_t shape[THIN_MAX_RANK])
{
    json_t *shp = json_object_get(json_object_get((json_t *)user, name), "shape");
    size_t n = json_array_size(shp);
    if (!json_object_get((json_t *)user, name) || n > THIN_MAX_RANK) return 0;
    for (size_t i = 0; i < n; i++) {
        json_int_t d = json_integer_value(json_array_get(shp, i));
        shape[i] = d < 0 ? 0 : (uint64_t)d;
    }
    *rank = (uint32_t)n;
    return 1;
}

static void arch_fuzz_warn(void *user, const char *msg)
{
    (void)user;
    (void)strlen(msg);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const uint8_t *sep = memchr(data, 0, size);
    size_t cfg_len = sep ? (size_t)(sep - data) : size;
    json_t *config = json_loadb((const char *)data, cfg_len, JSON_REJECT_DUPLICATES, NULL);
    json_t *tensors = NULL;
    if (sep) tensors = json_loadb((const char *)sep + 1, size - cfg_len - 1, 0, NULL);
    if (!tensors) tensors = json_object();
    if (config && tensors) {
        arch_model m;
        memset(&m, 0, sizeof m);
        if (arch_build(config, arch_fuzz_lookup, tensors, arch_fuzz_warn, NULL, &m) == 0) {
            if (m.tape) {
                char *s = json_dumps(m.tape, JSON_COMPACT);
                free(s);
            }
            arch_model_free(&m);
        }
        if (json_is_object(config)) {
            json_t *a = json_array_get(json_object_get(config, "architectures"), 0);
            if (json_is_string(a)) (void)arch_family(json_string_value(a));
        }
    }
    json_decref(config);
    json_decref(tensors);
    return 0;
}
