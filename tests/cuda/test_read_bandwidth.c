/*
 * test_read_bandwidth.c — what one kernel can read in the decode matvec's access pattern, for the
 * matrix sizes of a SmolLM3-3B decode step (o, q/k/v, FP8 down, BF16 down / FP8 gate+up, BF16
 * gate+up, LM head), short (4 KiB) and long (22 KiB) rows, and 1 to 3 blocks of 8 warps per SM:
 * the ceiling each decode step's matvec is measured against. Prints one line per case
 * ("read_bandwidth MB row_bytes blocks_per_sm alone_GBps back_to_back_GBps") and checks that the
 * probe works. Exits 0 with a note when no GPU.
 */
#include <stdio.h>

#include "../../tools/thin-run/backend.h"
#include "cuda_backend.h"

int main(void) {
    if (!cuda_backend_available()) {
        printf("test_read_bandwidth: no CUDA device: skipped\n");
        return 0;
    }
    static const double mb[] = {8.4, 12.6, 22.5, 45.1, 90.2, 525.3};
    static const unsigned rb[] = {4096, 22016};
    int fails = 0;
    double top = 0.0;
    printf("read_bandwidth      MB  row_bytes  blocks/SM  alone_GBps  back_to_back_GBps\n");
    for (size_t i = 0; i < sizeof mb / sizeof *mb; i++)
        for (size_t j = 0; j < 2; j++)
            for (int bps = 1; bps <= 3; bps++) {
                char err[256];
                double alone = 0.0, b2b = 0.0;
                if (cuda_read_bandwidth((size_t)(mb[i] * 1e6), rb[j], bps, &alone, &b2b, err, sizeof err)) {
                    printf("FAIL  %s\n", err);
                    fails++;
                    continue;
                }
                printf("read_bandwidth %7.1f  %9u  %9d  %10.1f  %17.1f\n", mb[i], rb[j], bps, alone / 1e9,
                       b2b / 1e9);
                top = alone > top ? alone : top;
            }
    int ok = !fails && top > 1e11;
    printf("%s  read probe ran every case, fastest above 100 GB/s\n", ok ? "ok  " : "FAIL");
    return ok ? 0 : 1;
}
