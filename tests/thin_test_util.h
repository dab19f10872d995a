/*
 * thin_test_util.h — helpers shared by the container tests (static functions only): temporary
 * folders, deterministic data, a standard sample file, whole-file reads.
 */
#ifndef THIN_TEST_UTIL_H
#define THIN_TEST_UTIL_H

#include <dirent.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "thin.h"

/* A fresh folder under TMPDIR; removed (flat) by tu_rmdir. */
static inline char *tu_mkdtemp(void)
{
    const char *t = getenv("TMPDIR");
    char *p = malloc(4096);
    snprintf(p, 4096, "%s/thin-test.XXXXXX", t && *t ? t : "/tmp");
    if (!mkdtemp(p)) {
        free(p);
        return NULL;
    }
    return p;
}

static inline int tu_count_entries(const char *dir)
{
    DIR *d = opendir(dir);
    int n = 0;
    struct dirent *e;
    while (d && (e = readdir(d)))
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) n++;
    if (d) closedir(d);
    return n;
}

static inline void tu_rmdir(char *dir)
{
    DIR *d = opendir(dir);
    struct dirent *e;
    char p[4400];
    while (d && (e = readdir(d))) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
        snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
        unlink(p);
    }
    if (d) closedir(d);
    rmdir(dir);
    free(dir);
}

static inline char *tu_path(const char *dir, const char *name)
{
    char *p = malloc(strlen(dir) + strlen(name) + 2);
    sprintf(p, "%s/%s", dir, name);
    return p;
}

/* Deterministic bytes (xorshift64*). */
static inline void tu_fill(void *buf, size_t n, uint64_t seed)
{
    uint8_t *p = buf;
    uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;
    for (size_t i = 0; i < n; i++) {
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        p[i] = (uint8_t)((x * 0x2545F4914F6CDD1Dull) >> 56);
    }
}

/* Compressible bytes: small values. */
static inline void tu_fill_low(void *buf, size_t n, uint64_t seed)
{
    tu_fill(buf, n, seed);
    for (size_t i = 0; i < n; i++) ((uint8_t *)buf)[i] &= 3;
}

static inline uint8_t *tu_read_file(const char *path, size_t *len)
{
    *len = 0;
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    *len = 0;
    uint8_t *b = malloc(n > 0 ? (size_t)n : 1);
    *len = fread(b, 1, (size_t)n, f);
    fclose(f);
    return b;
}

static inline int tu_write_file(const char *path, const void *data, size_t len)
{
    FILE *f = fopen(path, "wb");
    if (!f) return -1;
    size_t w = fwrite(data, 1, len, f);
    return fclose(f) == 0 && w == len ? 0 : -1;
}

/* ---- the sample file: a few tensors of several dtypes, a scale link, a tied entry, an empty
 * tensor, a blob and a section ---- */
#define TU_N 6
typedef struct tu_sample {
    thin_tensor_desc d[TU_N];
    uint8_t *data[TU_N];
    size_t nbytes[TU_N];
    uint8_t *blob;
    size_t blob_len;
} tu_sample;

static inline thin_tensor_desc tu_desc(const char *name, thin_role role, int32_t layer,
                                       thin_dtype dt, uint32_t rank, uint64_t d0, uint64_t d1)
{
    thin_tensor_desc d = {.name = name, .role = role, .layer = layer, .dtype = dt, .rank = rank};
    d.shape[0] = d0;
    d.shape[1] = d1;
    return d;
}

static inline void tu_sample_init(tu_sample *s, size_t scale_big)
{
    memset(s, 0, sizeof *s);
    s->d[0] = tu_desc("model.embed_tokens.weight", THIN_ROLE_EMBEDDING, -1, THIN_DTYPE_BF16, 2, 64, 32);
    s->d[1] = tu_desc("model.layers.0.self_attn.q_proj.weight", THIN_ROLE_Q, 0, THIN_DTYPE_F32, 2,
                      40, 300 * scale_big);
    s->d[2] = tu_desc("model.layers.0.mlp.gate_proj.weight", THIN_ROLE_GATE, 0, THIN_DTYPE_F8_E4M3,
                      2, 16, 100);
    s->d[2].scale = "model.layers.0.mlp.gate_proj.weight.scale";
    s->d[3] = tu_desc("model.layers.0.mlp.gate_proj.weight.scale", THIN_ROLE_SCALE, 0,
                      THIN_DTYPE_F32, 1, 16, 0);
    s->d[4] = tu_desc("empty", THIN_ROLE_OTHER, -1, THIN_DTYPE_F32, 2, 0, 5);
    s->d[5] = tu_desc("lm_head.weight", THIN_ROLE_LM_HEAD, -1, THIN_DTYPE_BF16, 2, 64, 32);
    s->d[5].tied_to = "model.embed_tokens.weight";
    for (int i = 0; i < TU_N; i++) {
        size_t n = thin_dtype_size(s->d[i].dtype);
        for (uint32_t k = 0; k < s->d[i].rank; k++) n *= s->d[i].shape[k];
        s->nbytes[i] = n;
        s->data[i] = malloc(n + 1);
        if (i % 2) tu_fill(s->data[i], n, (uint64_t)i + 1);
        else tu_fill_low(s->data[i], n, (uint64_t)i + 1);
    }
    s->blob_len = 10000;
    s->blob = malloc(s->blob_len);
    for (size_t i = 0; i < s->blob_len; i++) s->blob[i] = (uint8_t)("{\"tok\": 12}\n"[i % 12]);
}

static inline void tu_sample_free(tu_sample *s)
{
    for (int i = 0; i < TU_N; i++) free(s->data[i]);
    free(s->blob);
}

/* The container tests' fixture: a scratch folder, a file path in it and a sample model. */
typedef struct tu_fx {
    char *dir, *path;
    tu_sample s;
} tu_fx;

/* cmocka setup: *state becomes a tu_fx whose path is dir/file and whose sample has scale_big. */
static inline int tu_fx_setup(void **state, const char *file, size_t scale_big)
{
    tu_fx *f = calloc(1, sizeof *f);
    if (!f)
        return -1;
    f->dir = tu_mkdtemp();
    f->path = tu_path(f->dir, file);
    tu_sample_init(&f->s, scale_big);
    *state = f;
    return f->dir ? 0 : -1;
}

/* cmocka teardown of tu_fx_setup: removes the folder and frees everything. */
static inline int tu_fx_teardown(void **state)
{
    tu_fx *f = *state;
    tu_sample_free(&f->s);
    free(f->path);
    tu_rmdir(f->dir);
    free(f);
    return 0;
}

/* Writes the sample through an opened writer; returns the first error. */
static inline thin_status tu_sample_write(thin_writer *w, const tu_sample *s)
{
    thin_status st = thin_writer_set_section(w, "model", "{\"family\":\"llama\",\"n\":[1,2]}");
    for (int i = 0; !st && i < TU_N; i++) {
        if (i == 3) st = thin_writer_add_blob(w, "tokenizer.json", s->blob, s->blob_len);
        if (!st) st = thin_writer_add_tensor(w, &s->d[i], s->d[i].tied_to ? NULL : s->data[i]);
    }
    return st ? st : thin_writer_finish(w, NULL);
}

/* Writes the sample to path with the given options. */
static inline thin_status tu_sample_save(const char *path, const tu_sample *s, thin_codec codec,
                                         size_t chunk, unsigned threads)
{
    thin_writer_options o = {.chunk_size = chunk, .codec = codec, .threads = threads};
    thin_writer *w = thin_writer_new();
    thin_status st = thin_writer_open(w, path, &o);
    if (!st) st = tu_sample_write(w, s);
    if (st) fprintf(stderr, "writer: %s\n", thin_writer_error(w));
    thin_writer_free(w);
    return st;
}

#endif
