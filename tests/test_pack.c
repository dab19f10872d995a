/* test_pack.c — thin-pack's job end to end on stories260K: every tensor read back from the .thin
 * file equals the SafeTensors bytes; roles, layers, tied lm_head, sections; malformed inputs
 * leave no output. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "../tools/thin-pack/pack.h"
#include "../tools/thin-pack/safetensors.h"
#include "../tools/thin-pack/source.h"
#include "cli.h"

static char tmpdir[256];
static char fix[512];

static int setup(void **state)
{
    const char *tmp = getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
    snprintf(tmpdir, sizeof tmpdir, "%.200s/thin-test-pack.XXXXXX", tmp);
    if (!mkdtemp(tmpdir))
        return -1;
    snprintf(fix, sizeof fix, "%s/stories260k", getenv("FIX") ? getenv("FIX") : "fixtures");
    cli_init("test_pack");
    cli_set_quiet(1);
    cli_progress_mode(0);
    (void)state;
    return 0;
}

static int teardown(void **state)
{
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    (void)state;
    return system(cmd);
}

static int pack(const char *input, const char *out, int to_bf16, thin_codec codec)
{
    pack_options o;
    memset(&o, 0, sizeof o);
    o.input = input;
    o.output = out;
    o.to_bf16 = to_bf16;
    o.writer.codec = codec;
    o.writer.chunk_size = 16384; /* several chunks for the bigger tensors */
    return pack_run(&o);
}

/* Compares every tensor of a SafeTensors file with the .thin file's (converted by `convert`). */
static void compare(const char *st_path, const char *thin_path, const char *expect_path)
{
    source_map src, want;
    st_header h, hw;
    char err[512];
    assert_int_equal(source_map_open(&src, st_path, err, sizeof err), 0);
    assert_int_equal(st_parse_memory(src.data, src.size, st_path, &h, err, sizeof err), 0);
    assert_int_equal(source_map_open(&want, expect_path, err, sizeof err), 0);
    assert_int_equal(st_parse_memory(want.data, want.size, expect_path, &hw, err, sizeof err), 0);
    thin_file *f = thin_file_new();
    assert_int_equal(thin_file_open(f, thin_path, THIN_OPEN_VERIFY), THIN_OK);
    assert_int_equal(thin_file_tensor_count(f), h.n_tensors + 1); /* + tied lm_head */
    for (size_t i = 0; i < hw.n_tensors; i++) {
        const st_tensor *t = &hw.tensors[i];
        thin_tensor_info ti;
        assert_int_equal(thin_file_find(f, t->name, &ti), THIN_OK);
        assert_int_equal(ti.dtype, t->dtype);
        assert_int_equal(ti.nbytes, t->end - t->begin);
        uint8_t *buf = malloc(ti.nbytes);
        assert_int_equal(thin_file_tensor_read(f, ti.index, buf, ti.nbytes, 1), THIN_OK);
        if (memcmp(buf, want.data + hw.data_start + t->begin, ti.nbytes) != 0)
            fail_msg("tensor %s differs from %s", t->name, expect_path);
        free(buf);
    }
    thin_file_free(f);
    st_header_free(&h);
    st_header_free(&hw);
    source_map_close(&src);
    source_map_close(&want);
}

static void test_f32_file_round_trip(void **state)
{
    char in[600], out[300];
    snprintf(in, sizeof in, "%s/model.safetensors", fix);
    snprintf(out, sizeof out, "%s/f32.thin", tmpdir);
    assert_int_equal(pack(in, out, 0, THIN_CODEC_NONE), 0);
    compare(in, out, in);
    (void)state;
}

static void test_bf16_file_and_zstd(void **state)
{
    char in[600], out[300];
    snprintf(in, sizeof in, "%s/model-bf16.safetensors", fix);
    snprintf(out, sizeof out, "%s/bf16.thin", tmpdir);
    assert_int_equal(pack(in, out, 0, THIN_CODEC_ZSTD), 0);
    compare(in, out, in);
    (void)state;
}

static void test_convert_to_bf16_matches_reference(void **state)
{
    char in[600], ref[600], out[300];
    snprintf(in, sizeof in, "%s/model.safetensors", fix);
    snprintf(ref, sizeof ref, "%s/model-bf16.safetensors", fix);
    snprintf(out, sizeof out, "%s/cvt.thin", tmpdir);
    assert_int_equal(pack(fix, out, 1, THIN_CODEC_NONE), 0);
    compare(in, out, ref);
    (void)state;
}

static void test_roles_sections_and_tied_head(void **state)
{
    char out[300];
    snprintf(out, sizeof out, "%s/dir.thin", tmpdir);
    assert_int_equal(pack(fix, out, 0, THIN_CODEC_NONE), 0);
    thin_file *f = thin_file_new();
    assert_int_equal(thin_file_open(f, out, 0), THIN_OK);
    thin_tensor_info ti;
    assert_int_equal(thin_file_find(f, "model.layers.3.mlp.down_proj.weight", &ti), THIN_OK);
    assert_int_equal(ti.role, THIN_ROLE_DOWN);
    assert_int_equal(ti.layer, 3);
    assert_int_equal(thin_file_find(f, "model.layers.0.post_attention_layernorm.weight", &ti),
                     THIN_OK);
    assert_int_equal(ti.role, THIN_ROLE_FFN_NORM);
    assert_int_equal(thin_file_find(f, "lm_head.weight", &ti), THIN_OK);
    assert_int_equal(ti.role, THIN_ROLE_LM_HEAD);
    assert_non_null(ti.tied_to);
    assert_string_equal(ti.tied_to, "model.embed_tokens.weight");
    assert_int_equal(ti.n_chunks, 0);
    assert_int_equal(thin_file_find_role(f, THIN_ROLE_FINAL_NORM, -1, &ti), THIN_OK);
    assert_string_equal(ti.name, "model.norm.weight");
    const char *js;
    assert_int_equal(thin_file_section(f, "tape", &js), THIN_OK);
    json_t *tape = json_loads(js, 0, NULL);
    assert_int_equal(json_array_size(json_object_get(tape, "ops")), 1 + 5 * 15 + 2);
    json_decref(tape);
    assert_int_equal(thin_file_section(f, "model", &js), THIN_OK);
    json_t *model = json_loads(js, 0, NULL);
    assert_string_equal(json_string_value(json_object_get(model, "family")), "llama");
    json_t *hp = json_object_get(model, "hparams");
    assert_int_equal(json_integer_value(json_object_get(hp, "n_kv_heads")), 4);
    json_t *prov = json_object_get(model, "provenance");
    assert_int_equal(strlen(json_string_value(json_object_get(prov, "source_digest"))), 64);
    json_decref(model);
    assert_int_equal(thin_file_section(f, "tokenizer", &js), THIN_OK);
    assert_non_null(strstr(js, "\"tokenizer.json\""));
    const void *data;
    size_t size;
    assert_int_equal(thin_file_blob(f, "tokenizer.json", &data, &size), THIN_OK);
    assert_int_equal(size, 15175);
    assert_int_equal(thin_file_blob(f, "config.json", &data, &size), THIN_OK);
    assert_int_equal(size, 628);
    thin_file_free(f);
    (void)state;
}

static void test_malformed_leaves_nothing(void **state)
{
    static const char *const names[] = {"overlap", "gap", "trailing-bytes", "truncated",
                                        "shape-overflow", "bad-dtype"};
    char in[700], out[300];
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        snprintf(in, sizeof in, "%s/../malformed/%s.safetensors", fix, names[i]);
        snprintf(out, sizeof out, "%s/bad.thin", tmpdir);
        assert_int_equal(pack(in, out, 0, THIN_CODEC_NONE), 1);
        assert_int_not_equal(access(out, F_OK), 0);
    }
    (void)state;
}

/* Writes tensors [from, to) of h (sorted by offset) as a SafeTensors file. */
static void write_shard(const char *path, const st_header *h, const uint8_t *data, size_t from,
                        size_t to)
{
    json_t *hdr = json_object();
    uint64_t off = 0;
    for (size_t i = from; i < to; i++) {
        const st_tensor *t = &h->tensors[i];
        json_t *shape = json_array();
        for (uint32_t k = 0; k < t->rank; k++)
            json_array_append_new(shape, json_integer((json_int_t)t->shape[k]));
        json_object_set_new(hdr, t->name,
                            json_pack("{ss so s[II]}", "dtype", thin_dtype_name(t->dtype),
                                      "shape", shape, "data_offsets", (json_int_t)off,
                                      (json_int_t)(off + t->end - t->begin)));
        off += t->end - t->begin;
    }
    char *text = json_dumps(hdr, JSON_COMPACT);
    size_t n = strlen(text), padded = (n + 7) / 8 * 8;
    uint8_t len[8];
    for (int i = 0; i < 8; i++)
        len[i] = (uint8_t)((uint64_t)padded >> (8 * i));
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    fwrite(len, 1, 8, f);
    fwrite(text, 1, n, f);
    for (size_t i = n; i < padded; i++)
        fputc(' ', f);
    for (size_t i = from; i < to; i++)
        fwrite(data + h->tensors[i].begin, 1, h->tensors[i].end - h->tensors[i].begin, f);
    fclose(f);
    free(text);
    json_decref(hdr);
}

/* A folder with model.safetensors split in two shards and an index; `wrong` misplaces one. */
static void make_sharded(const char *dir, int wrong, int with_index)
{
    char in[600], path[700];
    source_map src;
    st_header h;
    char err[512];
    snprintf(in, sizeof in, "%s/model.safetensors", fix);
    assert_int_equal(source_map_open(&src, in, err, sizeof err), 0);
    assert_int_equal(st_parse_memory(src.data, src.size, in, &h, err, sizeof err), 0);
    mkdir(dir, 0755);
    size_t half = h.n_tensors / 2;
    const uint8_t *data = src.data + h.data_start;
    snprintf(path, sizeof path, "%s/model-00001-of-00002.safetensors", dir);
    write_shard(path, &h, data, 0, half + (with_index ? 0 : 1)); /* no index: one duplicate */
    snprintf(path, sizeof path, "%s/model-00002-of-00002.safetensors", dir);
    write_shard(path, &h, data, half, h.n_tensors);
    json_t *wm = json_object();
    for (size_t i = 0; i < h.n_tensors; i++)
        json_object_set_new(wm, h.tensors[i].name,
                            json_string(i < half ? "model-00001-of-00002.safetensors"
                                                 : "model-00002-of-00002.safetensors"));
    if (wrong)
        json_object_set_new(wm, h.tensors[0].name, json_string("model-00002-of-00002.safetensors"));
    json_t *idx = json_pack("{s{sI} so}", "metadata", "total_size", (json_int_t)h.data_size,
                            "weight_map", wm);
    snprintf(path, sizeof path, "%s/model.safetensors.index.json", dir);
    if (with_index)
        assert_int_equal(json_dump_file(idx, path, 0), 0);
    json_decref(idx);
    char cmd[1800];
    snprintf(cmd, sizeof cmd, "cp '%s/config.json' '%s/tokenizer.json' '%s/'", fix, fix, dir);
    assert_int_equal(system(cmd), 0);
    st_header_free(&h);
    source_map_close(&src);
}

static void test_sharded_index_and_folder(void **state)
{
    char dir[300], in[600], out[300], idx[400];
    snprintf(dir, sizeof dir, "%s/sharded", tmpdir);
    make_sharded(dir, 0, 1);
    snprintf(in, sizeof in, "%s/model.safetensors", fix);
    snprintf(out, sizeof out, "%s/sharded.thin", tmpdir);
    assert_int_equal(pack(dir, out, 0, THIN_CODEC_NONE), 0);
    compare(in, out, in);
    snprintf(idx, sizeof idx, "%s/model.safetensors.index.json", dir);
    assert_int_equal(pack(idx, out, 0, THIN_CODEC_NONE), 0);
    compare(in, out, in);
    (void)state;
}

static void test_sharded_errors(void **state)
{
    char dir[300], out[300];
    snprintf(out, sizeof out, "%s/bad-shards.thin", tmpdir);
    snprintf(dir, sizeof dir, "%s/wrong-index", tmpdir);
    make_sharded(dir, 1, 1);
    assert_int_equal(pack(dir, out, 0, THIN_CODEC_NONE), 1);
    assert_int_not_equal(access(out, F_OK), 0);
    snprintf(dir, sizeof dir, "%s/duplicate", tmpdir);
    make_sharded(dir, 0, 0);
    assert_int_equal(pack(dir, out, 0, THIN_CODEC_NONE), 1);
    assert_int_not_equal(access(out, F_OK), 0);
    (void)state;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_f32_file_round_trip),
        cmocka_unit_test(test_bf16_file_and_zstd),
        cmocka_unit_test(test_convert_to_bf16_matches_reference),
        cmocka_unit_test(test_roles_sections_and_tied_head),
        cmocka_unit_test(test_malformed_leaves_nothing),
        cmocka_unit_test(test_sharded_index_and_folder),
        cmocka_unit_test(test_sharded_errors),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
