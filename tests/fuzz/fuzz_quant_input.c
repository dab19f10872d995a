/*
 * fuzz_quant_input.c — thin-quant's input path on arbitrary .thin bytes, as stdin: once as a pipe
 * (the one-pass stream mode) and once as a regular file (the mapped mode). Every item is viewed
 * block by block, then the manifest and digest. The whole rewrite (fp8-all, into a scratch
 * folder) runs on the file mode too.
 */
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "../../tools/thin-quant/input.h"
#include "../../tools/thin-quant/rewrite.h"

#include "fuzz_thin_fix.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define QUANT_PIPE_MAX ((size_t)1 << 20)

static char quant_dir[64];

static void quant_cleanup(void)
{
    rmdir(quant_dir);
}

/* Puts the bytes on stdin: a pipe holding them all when as_pipe, else a memfd. Returns 0 or -1. */
static int quant_stdin(const uint8_t *data, size_t size, int as_pipe)
{
    int fds[2];
    if (as_pipe) {
        if (pipe(fds) != 0) return -1;
        if (fcntl(fds[1], F_SETPIPE_SZ, (int)QUANT_PIPE_MAX) < (int)size) {
            close(fds[0]);
            close(fds[1]);
            return -1;
        }
    } else if ((fds[0] = fds[1] = memfd_create("fuzz-quant", 0)) < 0)
        return -1;
    int ok = size == 0 || write(fds[1], data, size) == (ssize_t)size;
    if (as_pipe) close(fds[1]);
    else ok = ok && lseek(fds[0], 0, SEEK_SET) == 0;
    ok = ok && dup2(fds[0], 0) == 0;
    close(fds[0]);
    return ok ? 0 : -1;
}

static void quant_read_input(void)
{
    tq_input in;
    if (tq_input_open(&in, "-", 0) == 0) {
        tq_item kind;
        thin_tensor_info info;
        while (tq_input_next(&in, &kind, &info) == 0 && kind != TQ_ITEM_END) {
            const unsigned char *p;
            size_t step = 1 + info.nbytes % 3000;
            for (uint64_t done = 0; done < info.nbytes; done += step) {
                size_t n = info.nbytes - done < step ? (size_t)(info.nbytes - done) : step;
                if (tq_input_view(&in, n, &p) != 0) break;
                (void)((const volatile unsigned char *)p)[n - 1];
            }
        }
        const char *json;
        size_t len;
        if (tq_input_manifest(&in, &json, &len) == 0) (void)tq_input_digest(&in);
    }
    tq_input_close(&in);
}

static void quant_rewrite(void)
{
    char out[128];
    snprintf(out, sizeof out, "%s/out.thin", quant_dir);
    tq_selection sel;
    tq_selection_init(&sel);
    sel.profile = TQ_PROFILE_FP8_ALL;
    tq_options o = {.input = "-", .output = out, .sel = &sel, .threads = 1,
                    .wopt = {.chunk_size = 4096, .threads = 1}};
    tq_report rep;
    tq_report_init(&rep);
    (void)tq_rewrite(&o, &rep);
    tq_report_free(&rep);
    unlink(out);
}

static void quant_one(const uint8_t *data, size_t size)
{
    if (!quant_dir[0]) {
        const char *t = getenv("TMPDIR");
        snprintf(quant_dir, sizeof quant_dir, "%s/fuzz-quant.XXXXXX", t && *t ? t : "/tmp");
        if (strlen(quant_dir) >= sizeof quant_dir - 1 || !mkdtemp(quant_dir)) return;
        atexit(quant_cleanup);
    }
    if (size <= QUANT_PIPE_MAX && quant_stdin(data, size, 1) == 0) quant_read_input();
    if (quant_stdin(data, size, 0) == 0) {
        quant_read_input();
        if (lseek(0, 0, SEEK_SET) == 0) quant_rewrite();
    }
}

/* Each input runs as given, then with its checksums made consistent (fuzz_thin_fix.h). */
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    quant_one(data, size);
    uint8_t *fixed = fuzz_thin_fix(data, size);
    if (fixed) quant_one(fixed, size);
    free(fixed);
    return 0;
}
