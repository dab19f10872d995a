/*
 * backend_cuda.c — the CUDA backend (kernels/cuda_backend.cu) wrapped as backend_ops. Built only
 * when the CUDA backend is part of the build (THIN_RUN_CUDA, see backend.h).
 */
#include "backend.h"

#ifdef THIN_RUN_CUDA
static int be_create(void **sess, const plan *p, uint32_t max_ctx, unsigned threads, char *err,
                     size_t errlen) {
    (void)threads;
    return cuda_session_create((cuda_session **)sess, p, max_ctx, err, errlen);
}

static int be_forward(void *sess, const int32_t *tokens, uint32_t n, uint32_t pos, float *logits,
                      int32_t *argmax) {
    return cuda_session_forward(sess, tokens, n, pos, logits, argmax);
}

static void be_free(void *sess) { cuda_session_free(sess); }

const backend_ops backend_cuda = {"cuda", be_create, be_forward, be_free};
#else
/* Keeps the translation unit non-empty in CPU-only builds. */
typedef int backend_cuda_unused;
#endif
