/*
 * test_regressions.c — every input kept in fixtures/regressions/<target>/ (crashes, leaks and hangs
 * found by fuzzing, each fixed) and every seed in tests/fuzz/corpus/<target>/ goes through the
 * same entry point as the fuzz target of that name, in the normal (and the sanitizer) test build.
 * The fuzz targets' sources are included here with their entry points renamed.
 */
#include <dirent.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#define LLVMFuzzerTestOneInput regress_thin_open
#include "fuzz/fuzz_thin_open.c"
#undef LLVMFuzzerTestOneInput
#define LLVMFuzzerTestOneInput regress_thin_stream
#include "fuzz/fuzz_thin_stream.c"
#undef LLVMFuzzerTestOneInput
#define LLVMFuzzerTestOneInput regress_safetensors
#include "fuzz/fuzz_safetensors.c"
#undef LLVMFuzzerTestOneInput
#define LLVMFuzzerTestOneInput regress_arch
#include "fuzz/fuzz_arch.c"
#undef LLVMFuzzerTestOneInput
#define LLVMFuzzerTestOneInput regress_tok_hf
#include "fuzz/fuzz_tok_hf.c"
#undef LLVMFuzzerTestOneInput
#define LLVMFuzzerTestOneInput regress_tok_gguf
#include "fuzz/fuzz_tok_gguf.c"
#undef LLVMFuzzerTestOneInput
#define LLVMFuzzerTestOneInput regress_quant_input
#include "fuzz/fuzz_quant_input.c"
#undef LLVMFuzzerTestOneInput
#define LLVMFuzzerTestOneInput regress_plan
#include "fuzz/fuzz_plan.c"
#undef LLVMFuzzerTestOneInput

typedef int (*regress_fn)(const uint8_t *data, size_t size);

static uint8_t *regress_slurp(const char *path, size_t *len)
{
    FILE *fp = fopen(path, "rb");
    if (!fp) return NULL;
    uint8_t *buf = NULL;
    size_t cap = 0, n = 0, got;
    do {
        if (n == cap) {
            uint8_t *nb = realloc(buf, cap = cap ? 2 * cap : 65536);
            if (!nb) break;
            buf = nb;
        }
        got = fread(buf + n, 1, cap - n, fp);
        n += got;
    } while (got > 0);
    fclose(fp);
    *len = n;
    return buf;
}

/* Feeds every regular file of dir to fn (each as an exact-size copy, so ASan sees over-reads).
 * Returns the number of files. */
static int regress_dir(const char *dir, regress_fn fn)
{
    DIR *d = opendir(dir);
    if (!d) return 0;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.') continue;
        char path[4096];
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        size_t len = 0;
        uint8_t *buf = regress_slurp(path, &len);
        assert_non_null(buf);
        uint8_t *exact = malloc(len ? len : 1);
        assert_non_null(exact);
        memcpy(exact, buf, len);
        free(buf);
        print_message("  %s (%zu bytes)\n", path, len);
        fn(exact, len);
        free(exact);
        n++;
    }
    closedir(d);
    return n;
}

static void regress_target(const char *target, regress_fn fn)
{
    char dir[256];
    snprintf(dir, sizeof dir, "tests/fuzz/corpus/%s", target);
    int seeds = regress_dir(dir, fn);
    assert_true(seeds > 0); /* run from the repository root, as run-tests.sh does */
    snprintf(dir, sizeof dir, "fixtures/regressions/%s", target);
    regress_dir(dir, fn);
}

static void test_thin_open_inputs(void **state)
{
    (void)state;
    regress_target("fuzz_thin_open", regress_thin_open);
}
static void test_thin_stream_inputs(void **state)
{
    (void)state;
    regress_target("fuzz_thin_stream", regress_thin_stream);
}
static void test_safetensors_inputs(void **state)
{
    (void)state;
    regress_target("fuzz_safetensors", regress_safetensors);
}
static void test_arch_inputs(void **state)
{
    (void)state;
    regress_target("fuzz_arch", regress_arch);
}
static void test_tok_hf_inputs(void **state)
{
    (void)state;
    regress_target("fuzz_tok_hf", regress_tok_hf);
}
static void test_tok_gguf_inputs(void **state)
{
    (void)state;
    regress_target("fuzz_tok_gguf", regress_tok_gguf);
}
static void test_quant_input_inputs(void **state)
{
    (void)state;
    regress_target("fuzz_quant_input", regress_quant_input);
}
static void test_plan_inputs(void **state)
{
    (void)state;
    regress_target("fuzz_plan", regress_plan);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_thin_open_inputs),   cmocka_unit_test(test_thin_stream_inputs),
        cmocka_unit_test(test_safetensors_inputs), cmocka_unit_test(test_arch_inputs),
        cmocka_unit_test(test_tok_hf_inputs),      cmocka_unit_test(test_tok_gguf_inputs),
        cmocka_unit_test(test_quant_input_inputs), cmocka_unit_test(test_plan_inputs),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
