/*
 * fuzz_thin_open.c — the random-access reader on arbitrary bytes: thin_file_open_memory, then
 * every accessor: sections, tensor infos and chunks, verify, each tensor read (with and without
 * checksums), zero-copy data and every blob. Any crash, leak or sanitizer report is a bug.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "thin.h"

#include "fuzz_thin_fix.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void open_read_tensors(thin_file *f)
{
    uint32_t n = thin_file_tensor_count(f);
    for (uint32_t i = 0; i < n; i++) {
        thin_tensor_info ti;
        if (thin_file_tensor(f, i, &ti) != THIN_OK) continue;
        thin_tensor_info byname;
        (void)thin_file_find(f, ti.name, &byname);
        (void)thin_file_find_role(f, ti.role, ti.layer, &byname);
        for (uint32_t j = 0; j < ti.n_chunks; j++) {
            thin_chunk_info ci;
            (void)thin_file_chunk(f, i, j, &ci);
        }
        const void *p;
        if (thin_file_tensor_data(f, i, &p) == THIN_OK && ti.nbytes)
            (void)((const volatile uint8_t *)p)[ti.nbytes - 1];
        if (ti.nbytes > ((uint64_t)64 << 20)) continue; /* the reader refuses such files anyway */
        void *buf = malloc(ti.nbytes ? ti.nbytes : 1);
        if (!buf) continue;
        (void)thin_file_tensor_read(f, i, buf, ti.nbytes, 1);
        (void)thin_file_tensor_read(f, i, buf, ti.nbytes, 0);
        (void)thin_file_verify_tensor(f, i);
        free(buf);
    }
}

static void open_read_blobs(thin_file *f)
{
    uint32_t n = thin_file_blob_count(f);
    for (uint32_t i = 0; i < n; i++) {
        const char *name = thin_file_blob_name(f, i);
        const void *p;
        size_t len;
        if (name && thin_file_blob(f, name, &p, &len) == THIN_OK && len)
            (void)((const volatile uint8_t *)p)[len - 1];
    }
}

static void open_one(const uint8_t *data, size_t size)
{
    static const char *const keys[] = {"model", "tape", "tokenizer", "quant", "runtime", "x"};
    thin_file *f = thin_file_new();
    if (!f) return;
    if (thin_file_open_memory(f, data, size, "fuzz.thin", 0) == THIN_OK) {
        const char *json;
        size_t len;
        uint16_t major, minor;
        thin_file_version(f, &major, &minor);
        (void)thin_file_digest(f);
        (void)thin_file_manifest(f, &json, &len);
        for (size_t k = 0; k < sizeof keys / sizeof keys[0]; k++)
            (void)thin_file_section(f, keys[k], &json);
        open_read_tensors(f);
        open_read_blobs(f);
        (void)thin_file_verify(f, 1, NULL, NULL);
    }
    (void)strlen(thin_file_error(f));
    thin_file_free(f);
    /* With verification while opening (the path thin-run takes). */
    f = thin_file_new();
    if (f) (void)thin_file_open_memory(f, data, size, "fuzz.thin", THIN_OPEN_VERIFY);
    thin_file_free(f);
}

/* Each input runs as given, then with its checksums made consistent (fuzz_thin_fix.h). */
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    open_one(data, size);
    uint8_t *fixed = fuzz_thin_fix(data, size);
    if (fixed) open_one(fixed, size);
    free(fixed);
    return 0;
}
