/*
 * cuda_backend.h — C additions to the CUDA backend's contract (tools/thin-run/backend.h holds the
 * session functions): the session's last error message, the device description, and a
 * device-to-device copy bandwidth probe for reporting speeds against the memory limit.
 */
#ifndef THIN_CUDA_BACKEND_H
#define THIN_CUDA_BACKEND_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct cuda_session cuda_session;

/* Message of the last failure on the session ("" when none): "file:line: call: CUDA error". */
const char *cuda_session_error(const cuda_session *s);

/* Weight bytes the session holds on the device (padding included). */
uint64_t cuda_session_weight_bytes(const cuda_session *s);

/* Writes the name of device 0 ("NVIDIA H200, 132 SMs, 139.8 GiB") into buf; 0 or -1. */
int cuda_device_describe(char *buf, size_t len);

/* Measures device-to-device copy bandwidth with cudaMemcpy over `bytes` (read + write bytes counted,
 * best of several runs) into *bytes_per_s. 0, or -1 with a message in err. */
int cuda_copy_bandwidth(size_t bytes, double *bytes_per_s, char *err, size_t errlen);

#ifdef __cplusplus
}
#endif
#endif /* THIN_CUDA_BACKEND_H */
