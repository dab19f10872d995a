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
    snprintf(tmpdir, sizeof tmpdir, "/tmp/thin-test-pack.XXXXXX");
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

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_f32_file_round_trip),
        cmocka_unit_test(test_bf16_file_and_zstd),
        cmocka_unit_test(test_convert_to_bf16_matches_reference),
        cmocka_unit_test(test_roles_sections_and_tied_head),
        cmocka_unit_test(test_malformed_leaves_nothing),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
