/*
 * test_hard_corrupt.c — every single-byte change of a small packed model is detected.
 *
 * A one-layer Llama with an execution tape (vocab 64, hidden 8) is written as SafeTensors +
 * config.json and packed by thin-pack's job with 4 KiB chunks (plain and zstd). Then, for every
 * byte offset, one bit of that byte is flipped (bit offset % 8) and the copy must be refused by
 * thin_file_open_memory or by thin_file_verify: the share detected is printed and must be 100%.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

#include "../tools/common/cli.h"
#include "../tools/thin-pack/pack.h"
#include "thin_test_util.h"

#define HC_HIDDEN 8
#define HC_VOCAB 64
#define HC_INTER 16
#define HC_KV 4 /* rows of k_proj and v_proj: 1 KV head x head_dim 4 */

/* Every byte; every 7th under the sanitizers (several times slower), which still reaches every
 * kind of region: headers, records, descriptors, payloads, padding, manifest, trailer. */
#if defined(__SANITIZE_ADDRESS__)
#define HC_STRIDE 7
#else
#define HC_STRIDE 1
#endif

typedef struct hc_tensor {
    const char *name;
    uint64_t rows, cols; /* cols 0: 1-D */
} hc_tensor;

static const hc_tensor hc_tensors[] = {
    {"model.embed_tokens.weight", HC_VOCAB, HC_HIDDEN},
    {"model.layers.0.input_layernorm.weight", HC_HIDDEN, 0},
    {"model.layers.0.self_attn.q_proj.weight", HC_HIDDEN, HC_HIDDEN},
    {"model.layers.0.self_attn.k_proj.weight", HC_KV, HC_HIDDEN},
    {"model.layers.0.self_attn.v_proj.weight", HC_KV, HC_HIDDEN},
    {"model.layers.0.self_attn.o_proj.weight", HC_HIDDEN, HC_HIDDEN},
    {"model.layers.0.post_attention_layernorm.weight", HC_HIDDEN, 0},
    {"model.layers.0.mlp.gate_proj.weight", HC_INTER, HC_HIDDEN},
    {"model.layers.0.mlp.up_proj.weight", HC_INTER, HC_HIDDEN},
    {"model.layers.0.mlp.down_proj.weight", HC_HIDDEN, HC_INTER},
    {"model.norm.weight", HC_HIDDEN, 0},
};
#define HC_N (sizeof hc_tensors / sizeof hc_tensors[0])

static const char hc_config[] =
    "{\"architectures\": [\"LlamaForCausalLM\"], \"model_type\": \"llama\", \"hidden_size\": 8,"
    " \"intermediate_size\": 16, \"num_hidden_layers\": 1, \"num_attention_heads\": 2,"
    " \"num_key_value_heads\": 1, \"head_dim\": 4, \"vocab_size\": 64,"
    " \"max_position_embeddings\": 64, \"rms_norm_eps\": 1e-05, \"rope_theta\": 10000.0,"
    " \"hidden_act\": \"silu\", \"bos_token_id\": 1, \"eos_token_id\": 2,"
    " \"tie_word_embeddings\": true}\n";

static void hc_write(const char *path, const void *data, size_t n)
{
    FILE *fp = fopen(path, "wb");
    assert_non_null(fp);
    assert_int_equal(fwrite(data, 1, n, fp), n);
    assert_int_equal(fclose(fp), 0);
}

/* model.safetensors of hc_tensors (F32, small deterministic values; norms near 1). */
static void hc_write_safetensors(const char *path)
{
    char header[4096];
    size_t hl = 0;
    uint64_t off = 0;
    hl += (size_t)snprintf(header + hl, sizeof header - hl, "{");
    for (size_t i = 0; i < HC_N; i++) {
        const hc_tensor *t = &hc_tensors[i];
        uint64_t n = t->rows * (t->cols ? t->cols : 1) * 4;
        hl += (size_t)snprintf(header + hl, sizeof header - hl,
                               "%s\"%s\":{\"dtype\":\"F32\",\"shape\":[%llu%s%.0llu],"
                               "\"data_offsets\":[%llu,%llu]}", i ? "," : "", t->name,
                               (unsigned long long)t->rows, t->cols ? "," : "",
                               (unsigned long long)t->cols, (unsigned long long)off,
                               (unsigned long long)(off + n));
        off += n;
    }
    hl += (size_t)snprintf(header + hl, sizeof header - hl, "}");
    while (hl % 8) header[hl++] = ' ';
    assert_true(hl < sizeof header);
    size_t total = 8 + hl + off;
    uint8_t *img = calloc(1, total);
    assert_non_null(img);
    for (int i = 0; i < 8; i++) img[i] = (uint8_t)((uint64_t)hl >> (8 * i));
    memcpy(img + 8, header, hl);
    float *w = (float *)(img + 8 + hl); /* hl is a multiple of 8: aligned for float */
    for (size_t i = 0, k = 0; i < HC_N; i++) {
        const hc_tensor *t = &hc_tensors[i];
        uint64_t n = t->rows * (t->cols ? t->cols : 1);
        for (uint64_t j = 0; j < n; j++, k++)
            w[k] = (t->cols ? 0.0f : 1.0f) + 0.05f * (float)((k * 37 + i * 11) % 41) / 41.0f;
    }
    hc_write(path, img, total);
    free(img);
}

/* Packs the tiny model with 4 KiB chunks; returns the .thin image. */
static uint8_t *hc_pack(const char *dir, const char *codec, size_t *len)
{
    char *st = tu_path(dir, "model.safetensors"), *cfg = tu_path(dir, "config.json");
    char *out = tu_path(dir, "tiny.thin");
    hc_write_safetensors(st);
    hc_write(cfg, hc_config, sizeof hc_config - 1);
    pack_options o = {.input = dir, .output = out, .compress = codec,
                      .writer = {.chunk_size = 4096, .threads = 1,
                                 .codec = strcmp(codec, "zstd") ? THIN_CODEC_NONE
                                                                : THIN_CODEC_ZSTD}};
    assert_int_equal(pack_run(&o), 0);
    uint8_t *img = tu_read_file(out, len);
    assert_non_null(img);
    unlink(st);
    unlink(cfg);
    unlink(out);
    free(st);
    free(cfg);
    free(out);
    return img;
}

/* 1 when the flipped image is refused (open or verify), else 0. */
static int hc_detected(thin_file *f, const uint8_t *img, size_t len)
{
    if (thin_file_open_memory(f, img, len, "tiny.thin", 0) != THIN_OK) return 1;
    return thin_file_verify(f, 1, NULL, NULL) != THIN_OK;
}

static void hc_flip_every_byte(const char *codec)
{
    char *dir = tu_mkdtemp();
    assert_non_null(dir);
    size_t len;
    uint8_t *img = hc_pack(dir, codec, &len);
    tu_rmdir(dir);
    thin_file *f = thin_file_new();
    assert_int_equal(hc_detected(f, img, len), 0); /* the intact file opens and verifies */
    const char *tape;
    assert_int_equal(thin_file_section(f, "tape", &tape), THIN_OK);
    size_t caught = 0, tried = 0, first_missed = SIZE_MAX;
    for (size_t i = 0; i < len; i += HC_STRIDE, tried++) {
        uint8_t mask = (uint8_t)(1u << (i % 8));
        img[i] ^= mask;
        thin_file_free(f);
        f = thin_file_new();
        if (hc_detected(f, img, len)) caught++;
        else if (first_missed == SIZE_MAX) first_missed = i;
        img[i] ^= mask;
    }
    print_message("  %s: %zu of %zu single-byte flips detected (%.2f%%), file of %zu bytes\n",
                  codec, caught, tried, 100.0 * (double)caught / (double)tried, len);
    if (first_missed != SIZE_MAX) fail_msg("flip at offset %zu was not detected", first_missed);
    thin_file_free(f);
    free(img);
}

static void test_every_flip_detected_plain(void **state)
{
    (void)state;
    hc_flip_every_byte("none");
}

static void test_every_flip_detected_zstd(void **state)
{
    (void)state;
    hc_flip_every_byte("zstd");
}

int main(void)
{
    cli_init("thin-pack");
    cli_set_quiet(1);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_every_flip_detected_plain),
        cmocka_unit_test(test_every_flip_detected_zstd),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
