/*
 * fuzz_plan.c — thin-run's plan compiler on an arbitrary .thin image: open (no verify, as
 * --no-verify does), then plan_build with each KV dtype, buffer lookups, the split check over 0-4
 * devices, plan_free.
 */
#include <stdint.h>
#include <string.h>

#include "../../tools/thin-run/plan.h"

#include "fuzz_thin_fix.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void plan_one(const uint8_t *data, size_t size)
{
    static const thin_dtype kv[] = {THIN_DTYPE_INVALID, THIN_DTYPE_F32, THIN_DTYPE_BF16};
    thin_file *f = thin_file_new();
    if (!f) return;
    if (thin_file_open_memory(f, data, size, "fuzz.thin", 0) == THIN_OK) {
        for (size_t i = 0; i < sizeof kv / sizeof kv[0]; i++) {
            plan p;
            char err[512];
            memset(&p, 0, sizeof p);
            if (plan_build(&p, f, kv[i], err, sizeof err) == THIN_OK) {
                (void)plan_buf(&p, "logits");
                (void)plan_buf(&p, "x");
                for (uint32_t n = 0; n <= 4; n++) /* the split check, --shards */
                    (void)plan_check_split(&p, n, err, sizeof err);
                plan_free(&p);
            }
        }
    }
    thin_file_free(f);
}

/* Each input runs as given, then with its checksums made consistent (fuzz_thin_fix.h). */
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    plan_one(data, size);
    uint8_t *fixed = fuzz_thin_fix(data, size);
    if (fixed) plan_one(fixed, size);
    free(fixed);
    return 0;
}
