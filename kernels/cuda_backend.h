/*
 * cuda_backend.h — C additions to the CUDA backend's contract (tools/thin-run/backend.h holds the
 * session functions): the session's last error message, the device description, a
 * device-to-device copy bandwidth probe for reporting speeds against the memory limit, and a read
 * bandwidth probe in the decode matvec's access pattern.
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

/* Read bandwidth of one kernel that streams `bytes` of rows of row_bytes (a multiple of 16) the way
 * the decode matvec does (a warp per row, rows r, r + all warps, ...; 16-byte loads, 8 per lane in
 * flight, nothing written), with blocks_per_sm blocks of 8 warps on every SM. Launches rotate over
 * copies of the data that together exceed L2. *single: bytes / the fastest launch timed alone
 * (launch and ramp included); *stream: bytes / the mean launch of a back-to-back sequence. 0, or
 * -1 with a message in err. */
int cuda_read_bandwidth(size_t bytes, uint32_t row_bytes, int blocks_per_sm, double *single, double *stream,
                        char *err, size_t errlen);

/* The same reads as a sequence of kernels, one per matrix (bytes[i] in rows of row_bytes[i]),
 * launched back to back (pdl: with programmatic dependent launch, as the decode does), reps
 * times after one untimed pass; *seconds: the time of one pass, which for the matrices of a
 * decode token bounds the per-op kernels' token rate from the reads alone. Every matrix has its
 * own memory. 0, or -1 with a message in err. */
int cuda_read_sequence(const uint64_t *bytes, const uint32_t *row_bytes, int n, int reps, int blocks_per_sm,
                       int pdl, double *seconds, char *err, size_t errlen);

/* What a latency-bound read costs while weights stream: one warp chases a dependent chain of
 * 4-byte loads, near (a 16 KiB table kept in L2, as the decode's x staging and its activations)
 * or far (a 256 MiB table, nearly every hop from memory, as its norm weights and older K/V
 * rows), in a block on an SM of its own, while other warps stream a large buffer in the matvec's
 * pattern (16-byte loads, `inflight` of them per lane, 1..8; `warps` warps a block, 8 or 24), or
 * with bulk set through bulk copies (`inflight` rows of 4 KiB a warp in flight, into shared
 * memory, at most CUDA_LOAD_LATENCY_SMEM bytes a block). mode: bit 0, every other SM streams;
 * bit 1, the chasing warp's own SM streams (its other warps); 0 neither.
 * *ns: the mean nanoseconds a hop; *gbps: what the streaming warps read over the launch (0 when
 * none stream). 0, or -1 with a message in err. */
#define CUDA_LOAD_LATENCY_SMEM (160 * 1024) /* shared memory a probe block has (bulk: the rings) */
int cuda_load_latency(int mode, int inflight, int warps, int far, int bulk, double *ns, double *gbps, char *err,
                      size_t errlen);

#ifdef __cplusplus
}
#endif
#endif /* THIN_CUDA_BACKEND_H */
