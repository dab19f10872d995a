/*
 * test_copy_bandwidth.c — measures the device-to-device copy bandwidth (read + write bytes) that
 * speeds are reported against, and checks that the probe works. Prints
 * "copy_bandwidth_GBps <value>" for bench/bench-gpu.sh. Exits 0 with a note when no GPU.
 */
#include <stdio.h>

#include "../../tools/thin-run/backend.h"
#include "cuda_backend.h"

int main(void) {
    if (!cuda_backend_available()) {
        printf("test_copy_bandwidth: no CUDA device: skipped\n");
        return 0;
    }
    char err[256];
    double bps = 0.0;
    if (cuda_copy_bandwidth((size_t)1 << 30, &bps, err, sizeof err)) {
        printf("FAIL  copy bandwidth: %s\n", err);
        return 1;
    }
    printf("copy_bandwidth_GBps %.1f\n", bps / 1e9);
    int ok = bps > 1e11;
    printf("%s  device-to-device copy above 100 GB/s\n", ok ? "ok  " : "FAIL");
    return ok ? 0 : 1;
}
