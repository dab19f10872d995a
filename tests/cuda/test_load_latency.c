/*
 * test_load_latency.c — what a latency-bound read costs while weights stream in the matvec's
 * pattern: a dependent chain of 4-byte loads through a table in L2 (near: the decode's x staging,
 * its activations) or in memory (far: its norm weights, older K/V rows), alone, with every other
 * SM streaming, with only its own SM streaming, and with both, for 1 to 8 16-byte loads per lane
 * in flight and 8 or 24 streaming warps a block, and with the rows streamed by bulk copies into
 * shared memory instead (1 to 4 rows of 4 KiB a warp in flight). Whether the streams slow the
 * chain through the memory system as a whole or through the requests queued on its own SM, how
 * the cost grows with the bytes in flight, and whether bulk copies reach the bandwidth with less
 * in flight, decide where the decode's chain of small reads may run beside the weight stream.
 * Prints one line per case ("load_latency table mode warps inflight ns_per_hop
 * stream_GBps case"). Checks that the probe works. Exits 0 with a note when no GPU.
 */
#include <stdio.h>

#include "../../tools/thin-run/backend.h"
#include "cuda_backend.h"

int main(void) {
    if (!cuda_backend_available()) {
        printf("test_load_latency: no CUDA device: skipped\n");
        return 0;
    }
    static const char *what[] = {"alone", "other SMs stream", "own SM streams", "all SMs stream"};
    static const int inflight[] = {1, 2, 4, 8};
    int fails = 0;
    printf("load_latency  table  mode  warps  inflight  ns_per_hop  stream_GBps  case\n");
    for (int bulk = 0; bulk < 2; bulk++)
        for (int far = 0; far < 2; far++)
            for (int mode = 0; mode < 4; mode++)
                for (int warps = 8; warps <= 24; warps += 16)
                    for (size_t i = 0; i < sizeof inflight / sizeof *inflight; i++) {
                        if (mode == 0 && (bulk || i > 0 || warps > 8)) break; /* nothing streams: one line */
                        if (!bulk && warps == 24 && inflight[i] < 4) continue;
                        if (bulk && (mode == 2 || (size_t)warps * inflight[i] * 4096 > CUDA_LOAD_LATENCY_SMEM))
                            continue;
                        char err[256];
                        double ns = 0.0, gbps = 0.0;
                        if (cuda_load_latency(mode, inflight[i], warps, far, bulk, &ns, &gbps, err, sizeof err)) {
                            printf("FAIL  %s\n", err);
                            fails++;
                            continue;
                        }
                        printf("load_latency  %5s  %4d  %5d  %8d  %10.1f  %11.1f  %s%s\n", far ? "far" : "near", mode,
                               mode ? warps : 0, mode ? inflight[i] : 0, ns, gbps, what[mode],
                               bulk ? ", bulk copies (inflight: 4 KiB rows a warp)" : "");
                        if (!(ns > 0.0) || (mode && !(gbps > 0.0))) {
                            printf("FAIL  mode %d: no latency or no stream measured\n", mode);
                            fails++;
                        }
                    }
    char err[256];
    double ns, gbps;
    if (cuda_load_latency(4, 8, 8, 0, 0, &ns, &gbps, err, sizeof err) == 0 ||
        cuda_load_latency(1, 3, 8, 0, 0, &ns, &gbps, err, sizeof err) == 0 ||
        cuda_load_latency(1, 8, 24, 0, 1, &ns, &gbps, err, sizeof err) == 0) {
        printf("FAIL  bad arguments accepted\n");
        fails++;
    }
    printf("%s  load latency probe\n", fails ? "FAIL" : "ok  ");
    return fails ? 1 : 0;
}
