/*
 * test_read_bandwidth.c — what one kernel can read in the decode matvec's access pattern, for the
 * matrix sizes of a SmolLM3-3B decode step (o, q/k/v, FP8 down, BF16 down / FP8 gate+up, BF16
 * gate+up, LM head), short (4 KiB) and long (22 KiB) rows, and 1 to 3 blocks of 8 warps per SM:
 * the ceiling each decode step's matvec is measured against. Prints one line per case
 * ("read_bandwidth MB row_bytes blocks_per_sm alone_GBps back_to_back_GBps"). Then the reads of a
 * whole SmolLM3-3B decode token (36 layers of q/k/v, o, gate/up, down, then the LM head; BF16, and
 * the quality profile's FP8 gate/up and layers 2-33 down) as one kernel per matrix, with and
 * without programmatic dependent launch: the tokens/s the per-op kernels could reach if their
 * arithmetic and attention cost nothing ("read_sequence profile pdl blocks_per_sm tok_s GBps").
 * Checks that the probes work. Exits 0 with a note when no GPU.
 */
#include <stdint.h>
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
    /* one decode token's matrices, SmolLM3-3B: hidden 2048, 16 + 4 + 4 heads of 128, FFN 11008 */
    enum { LAYERS = 36, N = LAYERS * 4 + 1 };
    static uint64_t bytes[N];
    static uint32_t rowb[N];
    for (int fp8 = 0; fp8 <= 1; fp8++) {
        uint64_t total = 0;
        for (int l = 0; l < LAYERS; l++) {
            const int fdown = fp8 && l >= 2 && l < LAYERS - 2;
            const uint64_t b[4] = {3072ull * 4096, 2048ull * 4096, 22016ull * (fp8 ? 2048 : 4096),
                                   2048ull * (fdown ? 11008 : 22016)};
            const uint32_t r[4] = {4096, 4096, fp8 ? 2048u : 4096u, fdown ? 11008u : 22016u};
            for (int k = 0; k < 4; k++) {
                bytes[4 * l + k] = b[k];
                rowb[4 * l + k] = r[k];
                total += b[k];
            }
        }
        bytes[N - 1] = 128256ull * 4096;
        rowb[N - 1] = 4096;
        total += bytes[N - 1];
        for (int pdl = 0; pdl <= 1; pdl++)
            for (int bps = 2; bps <= 3; bps++) {
                char err[256];
                double sec = 0.0;
                if (cuda_read_sequence(bytes, rowb, N, 10, bps, pdl, &sec, err, sizeof err)) {
                    printf("FAIL  %s\n", err);
                    fails++;
                    continue;
                }
                printf("read_sequence %-7s pdl %d  blocks/SM %d  %7.1f tok/s  %7.1f GB/s\n", fp8 ? "quality" : "bf16",
                       pdl, bps, 1.0 / sec, (double)total / sec / 1e9);
            }
    }
    int ok = !fails && top > 1e11;
    printf("%s  read probes ran every case, fastest above 100 GB/s\n", ok ? "ok  " : "FAIL");
    return ok ? 0 : 1;
}
