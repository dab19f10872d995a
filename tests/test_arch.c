/* test_arch.c — config.json -> hparams and execution tape (SPEC.md §8, §10). */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "../tools/thin-pack/arch.h"

/* A fake tensor set: object name -> shape array. */
static int lookup(void *user, const char *name, uint32_t *rank, uint64_t shape[THIN_MAX_RANK])
{
    const json_t *s = json_object_get(user, name);
    if (!s)
        return 0;
    *rank = (uint32_t)json_array_size(s);
    for (size_t i = 0; i < *rank; i++)
        shape[i] = (uint64_t)json_integer_value(json_array_get(s, i));
    return 1;
}

static char last_warning[512];
static int n_warnings;
static void on_warn(void *user, const char *msg)
{
    snprintf(last_warning, sizeof last_warning, "%s", msg);
    n_warnings++;
    (void)user;
}

static void put(json_t *set, const char *name, long long r, long long c)
{
    json_object_set_new(set, name, c ? json_pack("[II]", r, c) : json_pack("[I]", r));
}

/* Tensors of a Llama-family model with the given sizes. */
static json_t *llama_tensors(int layers, long long d, long long f, long long heads, long long kv,
                             long long hd, long long vocab, int lm_head, int qk_norm)
{
    json_t *s = json_object();
    char n[128];
    put(s, "model.embed_tokens.weight", vocab, d);
    put(s, "model.norm.weight", d, 0);
    if (lm_head)
        put(s, "lm_head.weight", vocab, d);
    for (int l = 0; l < layers; l++) {
#define P(suffix, r, c) (snprintf(n, sizeof n, "model.layers.%d." suffix, l), put(s, n, r, c))
        P("input_layernorm.weight", d, 0);
        P("post_attention_layernorm.weight", d, 0);
        P("self_attn.q_proj.weight", heads * hd, d);
        P("self_attn.k_proj.weight", kv * hd, d);
        P("self_attn.v_proj.weight", kv * hd, d);
        P("self_attn.o_proj.weight", d, heads * hd);
        P("mlp.gate_proj.weight", f, d);
        P("mlp.up_proj.weight", f, d);
        P("mlp.down_proj.weight", d, f);
        if (qk_norm) {
            P("self_attn.q_norm.weight", hd, 0);
            P("self_attn.k_norm.weight", hd, 0);
        }
#undef P
    }
    return s;
}

static const char stories_config[] =
    "{\"architectures\": [\"LlamaForCausalLM\"], \"model_type\": \"llama\", \"hidden_size\": 64,"
    " \"intermediate_size\": 172, \"num_hidden_layers\": 5, \"num_attention_heads\": 8,"
    " \"num_key_value_heads\": 4, \"head_dim\": 8, \"vocab_size\": 512,"
    " \"max_position_embeddings\": 512, \"rms_norm_eps\": 1e-05, \"rope_theta\": 10000.0,"
    " \"rope_scaling\": null, \"hidden_act\": \"silu\", \"bos_token_id\": 1,"
    " \"eos_token_id\": 2, \"tie_word_embeddings\": true}";

static json_t *op(const arch_model *m, size_t i)
{
    return json_array_get(json_object_get(m->tape, "ops"), i);
}
static const char *field(const json_t *o, const char *k)
{
    return json_string_value(json_object_get(o, k));
}
static size_t n_ops(const arch_model *m)
{
    return json_array_size(json_object_get(m->tape, "ops"));
}

/* arch_build on cfg and set packs the model without a tape, its last warning naming `why` with
 * the hyperparameters kept (why NULL: the hyperparameters may be refused too). */
static void expect_no_tape(const json_t *cfg, json_t *set, const char *why)
{
    arch_model m;
    assert_int_equal(arch_build(cfg, lookup, set, on_warn, NULL, &m), 0);
    assert_null(m.tape);
    if (why && !strstr(last_warning, why))
        fail_msg("warning '%s' does not name '%s'", last_warning, why);
    if (why)
        assert_non_null(m.hparams);
    arch_model_free(&m);
}

static void test_stories_tape(void **state)
{
    json_t *cfg = json_loads(stories_config, 0, NULL);
    json_t *set = llama_tensors(5, 64, 172, 8, 4, 8, 512, 0, 0);
    arch_model m;
    n_warnings = 0;
    assert_int_equal(arch_build(cfg, lookup, set, on_warn, NULL, &m), 0);
    assert_int_equal(n_warnings, 0);
    assert_string_equal(m.family, "llama");
    assert_string_equal(m.architecture, "LlamaForCausalLM");
    assert_int_equal(m.tie_lm_head, 1);
    assert_non_null(m.tape);
    assert_int_equal(n_ops(&m), 1 + 5 * 15 + 2);
    const json_t *hp = m.hparams;
    assert_int_equal(json_integer_value(json_object_get(hp, "n_layers")), 5);
    assert_int_equal(json_integer_value(json_object_get(hp, "n_kv_heads")), 4);
    assert_int_equal(json_integer_value(json_array_get(json_object_get(hp, "eos_token_id"), 0)), 2);
    assert_true(json_is_null(json_object_get(hp, "rope_scaling")));
    const json_t *bufs = json_object_get(m.tape, "buffers");
    assert_int_equal(json_integer_value(json_object_get(bufs, "k")), 32);
    assert_int_equal(json_integer_value(json_object_get(bufs, "g")), 172);
    assert_int_equal(json_integer_value(json_object_get(bufs, "logits")), 512);
    assert_string_equal(field(op(&m, 0), "op"), "embed");
    const char *layer0[] = {"rmsnorm", "linear", "linear", "linear", "rope", "rope", "attention",
                            "linear", "add", "rmsnorm", "linear", "linear", "silu_mul",
                            "linear", "add"};
    for (size_t i = 0; i < 15; i++)
        assert_string_equal(field(op(&m, 1 + i), "op"), layer0[i]);
    assert_string_equal(field(op(&m, 1), "w"), "model.layers.0.input_layernorm.weight");
    assert_string_equal(field(op(&m, 8), "split"), "row");
    assert_string_equal(field(op(&m, 13), "out"), "g");
    assert_string_equal(field(op(&m, 76), "w"), "model.norm.weight");
    assert_string_equal(field(op(&m, 77), "w"), "lm_head.weight");
    assert_string_equal(field(op(&m, 77), "out"), "logits");
    assert_null(json_object_get(op(&m, 77), "layer"));
    arch_model_free(&m);
    json_decref(set);
    json_decref(cfg);
    (void)state;
}

static size_t count_rope(const arch_model *m, int layer)
{
    size_t n = 0;
    for (size_t i = 0; i < n_ops(m); i++)
        if (strcmp(field(op(m, i), "op"), "rope") == 0 &&
            json_integer_value(json_object_get(op(m, i), "layer")) == layer)
            n++;
    return n;
}

static void test_smollm3_no_rope_layers(void **state)
{
    json_t *cfg = json_pack("{s[s] si si si si si si sf sf sb}", "architectures",
                            "SmolLM3ForCausalLM", "hidden_size", 32, "intermediate_size", 64,
                            "num_hidden_layers", 8, "num_attention_heads", 4,
                            "num_key_value_heads", 2, "vocab_size", 100, "rms_norm_eps", 1e-6,
                            "rope_theta", 2e6, "tie_word_embeddings", 1);
    json_t *set = llama_tensors(8, 32, 64, 4, 2, 8, 100, 0, 0);
    arch_model m;
    assert_int_equal(arch_build(cfg, lookup, set, on_warn, NULL, &m), 0);
    assert_non_null(m.tape);
    assert_string_equal(m.family, "smollm3");
    for (int l = 0; l < 8; l++)
        assert_int_equal(count_rope(&m, l), (l == 3 || l == 7) ? 0 : 2);
    const json_t *nr = json_object_get(m.hparams, "no_rope_layers");
    assert_int_equal(json_array_size(nr), 8);
    assert_int_equal(json_integer_value(json_array_get(nr, 3)), 0);
    assert_int_equal(n_ops(&m), 1 + 8 * 15 - 2 * 2 + 2);
    arch_model_free(&m);
    /* explicit list wins over the interval */
    json_object_set_new(cfg, "no_rope_layers", json_pack("[iiiiiiii]", 0, 1, 1, 1, 1, 1, 1, 1));
    assert_int_equal(arch_build(cfg, lookup, set, on_warn, NULL, &m), 0);
    assert_int_equal(count_rope(&m, 0), 0);
    assert_int_equal(count_rope(&m, 3), 2);
    arch_model_free(&m);
    json_decref(set);
    json_decref(cfg);
    (void)state;
}

static double rope_theta_of(const arch_model *m)
{
    for (size_t i = 0; i < n_ops(m); i++)
        if (strcmp(field(op(m, i), "op"), "rope") == 0)
            return json_number_value(json_object_get(op(m, i), "theta"));
    return -1.0;
}

/* transformers 5 writes "rope_parameters" instead of rope_theta / rope_scaling; with neither, the
 * family's default base applies (SmolLM3: 2e6). */
static void test_rope_parameters(void **state)
{
    json_t *cfg = json_pack("{s[s] si si si si si si sf}", "architectures", "SmolLM3ForCausalLM",
                            "hidden_size", 32, "intermediate_size", 64, "num_hidden_layers", 4,
                            "num_attention_heads", 4, "num_key_value_heads", 2, "vocab_size", 100,
                            "rms_norm_eps", 1e-6);
    json_t *set = llama_tensors(4, 32, 64, 4, 2, 8, 100, 0, 0);
    arch_model m;
    assert_int_equal(arch_build(cfg, lookup, set, on_warn, NULL, &m), 0);
    assert_true(rope_theta_of(&m) == 2e6);
    arch_model_free(&m);
    json_object_set_new(cfg, "rope_parameters", json_pack("{sf ss}", "rope_theta", 5e6,
                                                          "rope_type", "default"));
    assert_int_equal(arch_build(cfg, lookup, set, on_warn, NULL, &m), 0);
    assert_true(rope_theta_of(&m) == 5e6);
    assert_true(json_is_null(json_object_get(m.hparams, "rope_scaling")));
    arch_model_free(&m);
    json_object_set_new(cfg, "rope_parameters",
                        json_pack("{s{sf ss sf}}", "full_attention", "rope_theta", 5e5,
                                  "rope_type", "llama3", "factor", 8.0));
    assert_int_equal(arch_build(cfg, lookup, set, on_warn, NULL, &m), 0);
    assert_true(rope_theta_of(&m) == 5e5);
    for (size_t i = 0; i < n_ops(&m); i++)
        if (strcmp(field(op(&m, i), "op"), "rope") == 0)
            assert_string_equal(json_string_value(json_object_get(
                                    json_object_get(op(&m, i), "scaling"), "rope_type")), "llama3");
    arch_model_free(&m);
    /* a bad base: the model still packs, with no tape */
    json_object_set_new(cfg, "rope_parameters", json_pack("{ss}", "rope_theta", "big"));
    expect_no_tape(cfg, set, NULL);
    json_decref(set);
    json_decref(cfg);
    (void)state;
}

/* The rope op's scaling of a LongRoPE config: Phi-3's top-level original_max_position_embeddings
 * and the factor max_position_embeddings / original join the object (old "su" name too); an
 * object that has them keeps its own; transformers 5's rope_parameters form the same. */
static const json_t *rope_scaling_of(const arch_model *m)
{
    for (size_t i = 0; i < n_ops(m); i++)
        if (strcmp(field(op(m, i), "op"), "rope") == 0)
            return json_object_get(op(m, i), "scaling");
    return NULL;
}

static void test_longrope_scaling(void **state)
{
    json_t *cfg = json_pack("{s[s] si si si si si si si si sb}", "architectures", "LlamaForCausalLM",
                            "hidden_size", 32, "intermediate_size", 64, "num_hidden_layers", 2,
                            "num_attention_heads", 4, "num_key_value_heads", 2, "vocab_size", 100,
                            "max_position_embeddings", 131072,
                            "original_max_position_embeddings", 4096, "tie_word_embeddings", 1);
    json_t *set = llama_tensors(2, 32, 64, 4, 2, 8, 100, 0, 0);
    const char *types[] = {"longrope", "su"};
    arch_model m;
    for (int t = 0; t < 2; t++) {
        json_object_set_new(cfg, "rope_scaling", json_pack("{ss s[ffff] s[ffff]}", "type", types[t],
                                                           "short_factor", 1.0, 1.0, 1.1, 1.2,
                                                           "long_factor", 1.0, 2.0, 4.0, 8.0));
        assert_int_equal(arch_build(cfg, lookup, set, on_warn, NULL, &m), 0);
        assert_non_null(m.tape);
        const json_t *sc = rope_scaling_of(&m);
        assert_int_equal(json_integer_value(json_object_get(sc, "original_max_position_embeddings")),
                         4096);
        assert_true(json_real_value(json_object_get(sc, "factor")) == 32.0);
        assert_int_equal(json_array_size(json_object_get(sc, "long_factor")), 4);
        sc = json_object_get(m.hparams, "rope_scaling");
        assert_true(json_real_value(json_object_get(sc, "factor")) == 32.0);
        arch_model_free(&m);
    }
    /* the config's own rope_scaling object is left as it was */
    assert_null(json_object_get(json_object_get(cfg, "rope_scaling"), "factor"));
    json_object_set_new(json_object_get(cfg, "rope_scaling"), "factor", json_real(16.0));
    json_object_set_new(json_object_get(cfg, "rope_scaling"), "original_max_position_embeddings",
                        json_integer(8192));
    assert_int_equal(arch_build(cfg, lookup, set, on_warn, NULL, &m), 0);
    const json_t *sc = rope_scaling_of(&m);
    assert_int_equal(json_integer_value(json_object_get(sc, "original_max_position_embeddings")),
                     8192);
    assert_true(json_real_value(json_object_get(sc, "factor")) == 16.0);
    arch_model_free(&m);
    json_object_del(cfg, "rope_scaling");
    json_object_set_new(cfg, "rope_parameters",
                        json_pack("{sf ss s[ffff] s[ffff] si}", "rope_theta", 1e4, "rope_type",
                                  "longrope", "short_factor", 1.0, 1.0, 1.1, 1.2, "long_factor",
                                  1.0, 2.0, 4.0, 8.0, "original_max_position_embeddings", 4096));
    assert_int_equal(arch_build(cfg, lookup, set, on_warn, NULL, &m), 0);
    sc = rope_scaling_of(&m);
    assert_string_equal(json_string_value(json_object_get(sc, "rope_type")), "longrope");
    assert_true(json_real_value(json_object_get(sc, "factor")) == 32.0);
    arch_model_free(&m);
    json_decref(set);
    json_decref(cfg);
    (void)state;
}

static void test_qwen3_head_norms_and_scaling(void **state)
{
    json_t *cfg = json_pack("{s[s] si si si si si si si sb s{ss sf}}", "architectures",
                            "Qwen3ForCausalLM", "hidden_size", 32, "intermediate_size", 64,
                            "num_hidden_layers", 2, "num_attention_heads", 4,
                            "num_key_value_heads", 2, "head_dim", 16, "vocab_size", 50,
                            "tie_word_embeddings", 0, "rope_scaling", "rope_type", "llama3",
                            "factor", 8.0);
    json_t *set = llama_tensors(2, 32, 64, 4, 2, 16, 50, 1, 1);
    arch_model m;
    assert_int_equal(arch_build(cfg, lookup, set, on_warn, NULL, &m), 0);
    assert_non_null(m.tape);
    assert_int_equal(m.tie_lm_head, 0);
    assert_int_equal(n_ops(&m), 1 + 2 * 17 + 2);
    assert_string_equal(field(op(&m, 5), "op"), "head_rmsnorm");
    assert_string_equal(field(op(&m, 5), "w"), "model.layers.0.self_attn.q_norm.weight");
    assert_int_equal(json_integer_value(json_object_get(op(&m, 5), "head_dim")), 16);
    assert_string_equal(field(op(&m, 7), "op"), "rope");
    const json_t *sc = json_object_get(op(&m, 7), "scaling");
    assert_string_equal(json_string_value(json_object_get(sc, "rope_type")), "llama3");
    assert_int_equal(json_integer_value(json_object_get(json_object_get(m.tape, "buffers"),
                                                        "q")), 64);
    arch_model_free(&m);
    json_decref(set);
    json_decref(cfg);
    (void)state;
}

/* Gemma 3's tensors: the Llama set with q/k norms, plus its pre- and post-feedforward norms. */
static json_t *gemma_tensors(int layers)
{
    json_t *s = llama_tensors(layers, 32, 64, 4, 2, 16, 50, 0, 1);
    char n[128];
    for (int l = 0; l < layers; l++) {
        snprintf(n, sizeof n, "model.layers.%d.pre_feedforward_layernorm.weight", l);
        put(s, n, 32, 0);
        snprintf(n, sizeof n, "model.layers.%d.post_feedforward_layernorm.weight", l);
        put(s, n, 32, 0);
    }
    return s;
}

/* The ops of kind `name` in layer l, in order, into out (at most 8); returns their count. */
static int ops_of(const arch_model *m, const char *name, int l, const json_t **out)
{
    int k = 0;
    for (size_t i = 0; i < n_ops(m) && k < 8; i++)
        if (!strcmp(field(op(m, i), "op"), name) &&
            json_integer_value(json_object_get(op(m, i), "layer")) == l)
            out[k++] = op(m, i);
    return k;
}

/* Gemma 3: layer_types (here as transformers 5 writes them, with rope_parameters per layer type),
 * the window and local base on the sliding layers, scaling on the full ones only, the four norms
 * with offset 1, the embedding's and the attention's scales, gelu_tanh_mul; sliding_window_pattern
 * when layer_types is absent; refusals that keep the hyperparameters. */
static void test_gemma3(void **state)
{
    (void)state;
    json_t *cfg = json_pack(
        "{s[s] si si si si si si si sb si si s[sss] s{s{ss sf sf} s{ss sf}} ss sn}", "architectures",
        "Gemma3ForCausalLM", "hidden_size", 32, "intermediate_size", 64, "num_hidden_layers", 3,
        "num_attention_heads", 4, "num_key_value_heads", 2, "head_dim", 16, "vocab_size", 50,
        "tie_word_embeddings", 1, "sliding_window", 512, "query_pre_attn_scalar", 64, "layer_types",
        "sliding_attention", "full_attention", "sliding_attention", "rope_parameters",
        "full_attention", "rope_type", "linear", "factor", 8.0, "rope_theta", 1e6,
        "sliding_attention", "rope_type", "default", "rope_theta", 5e3, "hidden_activation",
        "gelu_pytorch_tanh", "final_logit_softcapping");
    json_t *set = gemma_tensors(3);
    arch_model m;
    n_warnings = 0;
    assert_int_equal(arch_build(cfg, lookup, set, on_warn, NULL, &m), 0);
    if (!m.tape)
        fail_msg("no tape: %s", last_warning);
    assert_string_equal(m.family, "gemma3");
    const json_t *o[8];
    assert_int_equal(ops_of(&m, "attention", 0, o), 1);
    assert_int_equal(json_integer_value(json_object_get(o[0], "window")), 512);
    assert_float_equal(json_real_value(json_object_get(o[0], "scale")), 0.125, 1e-12);
    assert_int_equal(ops_of(&m, "attention", 1, o), 1);
    assert_null(json_object_get(o[0], "window"));
    assert_int_equal(ops_of(&m, "rope", 2, o), 2);
    assert_float_equal(json_real_value(json_object_get(o[0], "theta")), 5e3, 0);
    assert_true(json_is_null(json_object_get(o[0], "scaling")));
    assert_int_equal(ops_of(&m, "rope", 1, o), 2);
    assert_float_equal(json_real_value(json_object_get(o[0], "theta")), 1e6, 0);
    assert_string_equal(json_string_value(json_object_get(json_object_get(o[0], "scaling"), "rope_type")),
                        "linear");
    assert_int_equal(ops_of(&m, "rmsnorm", 1, o), 4);
    static const char *const norms[4] = {"input_layernorm", "post_attention_layernorm",
                                         "pre_feedforward_layernorm", "post_feedforward_layernorm"};
    for (int i = 0; i < 4; i++) {
        assert_non_null(strstr(field(o[i], "w"), norms[i]));
        assert_float_equal(json_real_value(json_object_get(o[i], "offset")), 1.0, 0);
    }
    assert_string_equal(field(o[1], "in"), "h");
    assert_string_equal(field(o[3], "out"), "h");
    assert_int_equal(ops_of(&m, "head_rmsnorm", 0, o), 2);
    assert_float_equal(json_real_value(json_object_get(o[1], "offset")), 1.0, 0);
    int gelu = 0, silu = 0;
    for (size_t i = 0; i < n_ops(&m); i++)
        gelu += !strcmp(field(op(&m, i), "op"), "gelu_tanh_mul"), silu += !strcmp(field(op(&m, i), "op"), "silu_mul");
    assert_int_equal(gelu, 3);
    assert_int_equal(silu, 0);
    assert_float_equal(json_real_value(json_object_get(op(&m, 0), "scale")), sqrt(32.0), 1e-12);
    arch_model_free(&m);
    /* the pattern instead of layer_types: every 2nd layer full */
    json_object_del(cfg, "layer_types");
    json_object_set_new(cfg, "sliding_window_pattern", json_integer(2));
    assert_int_equal(arch_build(cfg, lookup, set, on_warn, NULL, &m), 0);
    assert_int_equal(ops_of(&m, "attention", 2, o), 1);
    assert_int_equal(json_integer_value(json_object_get(o[0], "window")), 512);
    assert_int_equal(ops_of(&m, "attention", 1, o), 1);
    assert_null(json_object_get(o[0], "window"));
    arch_model_free(&m);
    /* refusals: the hyperparameters stay, the tape goes */
    json_object_set_new(cfg, "final_logit_softcapping", json_real(30.0));
    expect_no_tape(cfg, set, "final_logit_softcapping");
    json_object_set_new(cfg, "final_logit_softcapping", json_null());
    json_object_set_new(cfg, "hidden_activation", json_string("gelu"));
    expect_no_tape(cfg, set, "hidden_activation");
    json_object_set_new(cfg, "hidden_activation", json_string("gelu_pytorch_tanh"));
    json_object_set_new(cfg, "layer_types", json_pack("[ss]", "sliding_attention", "full_attention"));
    expect_no_tape(cfg, set, "layer_types");
    json_object_del(cfg, "layer_types");
    json_object_del(set, "model.layers.1.post_feedforward_layernorm.weight");
    expect_no_tape(cfg, set, "model.layers.1.post_feedforward_layernorm.weight is missing");
    json_decref(set);
    json_decref(cfg);
}

/* Qwen2: q, k and v biases, each added after all three products of its layer. */
static void test_qwen2_biases(void **state)
{
    json_t *cfg = json_pack("{s[s] si si si si si si sb sf}", "architectures", "Qwen2ForCausalLM",
                            "hidden_size", 32, "intermediate_size", 64, "num_hidden_layers", 2,
                            "num_attention_heads", 4, "num_key_value_heads", 2, "vocab_size", 50,
                            "tie_word_embeddings", 1, "rms_norm_eps", 1e-6);
    json_t *set = llama_tensors(2, 32, 64, 4, 2, 8, 50, 0, 0);
    for (int l = 0; l < 2; l++) {
        char n[96];
        snprintf(n, sizeof n, "model.layers.%d.self_attn.q_proj.bias", l);
        json_object_set_new(set, n, json_pack("[i]", 32));
        snprintf(n, sizeof n, "model.layers.%d.self_attn.k_proj.bias", l);
        json_object_set_new(set, n, json_pack("[i]", 16));
        snprintf(n, sizeof n, "model.layers.%d.self_attn.v_proj.bias", l);
        json_object_set_new(set, n, json_pack("[i]", 16));
    }
    arch_model m;
    assert_int_equal(arch_build(cfg, lookup, set, on_warn, NULL, &m), 0);
    assert_non_null(m.tape);
    assert_int_equal(n_ops(&m), 1 + 2 * 18 + 2);
    assert_string_equal(field(op(&m, 4), "w"), "model.layers.0.self_attn.v_proj.weight");
    static const char *const want[3][2] = {{"model.layers.0.self_attn.q_proj.bias", "q"},
                                           {"model.layers.0.self_attn.k_proj.bias", "k"},
                                           {"model.layers.0.self_attn.v_proj.bias", "v"}};
    for (int i = 0; i < 3; i++) {
        assert_string_equal(field(op(&m, 5 + i), "op"), "bias");
        assert_string_equal(field(op(&m, 5 + i), "w"), want[i][0]);
        assert_string_equal(field(op(&m, 5 + i), "out"), want[i][1]);
        assert_int_equal(json_integer_value(json_object_get(op(&m, 5 + i), "layer")), 0);
    }
    assert_string_equal(field(op(&m, 8), "op"), "rope");
    /* the same model with the biases of layer 1 only: layer 0's block has none */
    json_object_del(set, "model.layers.0.self_attn.q_proj.bias");
    json_object_del(set, "model.layers.0.self_attn.k_proj.bias");
    json_object_del(set, "model.layers.0.self_attn.v_proj.bias");
    arch_model_free(&m);
    assert_int_equal(arch_build(cfg, lookup, set, on_warn, NULL, &m), 0);
    assert_non_null(m.tape);
    assert_int_equal(n_ops(&m), 1 + 2 * 15 + 3 + 2);
    assert_string_equal(field(op(&m, 5), "op"), "rope");
    arch_model_free(&m);
    json_decref(set);
    json_decref(cfg);
    (void)state;
}

/* Phi-3: fused qkv_proj and gate_up_proj, read as row ranges; refused with separate
 * projections beside them, or with RoPE on part of each head. */
static void test_phi3_fused(void **state)
{
    json_t *cfg = json_pack("{s[s] si si si si si si sb}", "architectures", "Phi3ForCausalLM",
                            "hidden_size", 32, "intermediate_size", 64, "num_hidden_layers", 2,
                            "num_attention_heads", 4, "num_key_value_heads", 2, "vocab_size", 50,
                            "tie_word_embeddings", 0);
    json_t *set = llama_tensors(2, 32, 64, 4, 2, 8, 50, 1, 0);
    for (int l = 0; l < 2; l++) {
        char n[96];
        static const char *const sep[] = {"self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj",
                                          "mlp.gate_proj", "mlp.up_proj"};
        for (int i = 0; i < 5; i++) {
            snprintf(n, sizeof n, "model.layers.%d.%s.weight", l, sep[i]);
            json_object_del(set, n);
        }
        snprintf(n, sizeof n, "model.layers.%d.self_attn.qkv_proj.weight", l);
        json_object_set_new(set, n, json_pack("[ii]", 32 + 16 + 16, 32));
        snprintf(n, sizeof n, "model.layers.%d.mlp.gate_up_proj.weight", l);
        json_object_set_new(set, n, json_pack("[ii]", 128, 32));
    }
    arch_model m;
    assert_int_equal(arch_build(cfg, lookup, set, on_warn, NULL, &m), 0);
    assert_non_null(m.tape);
    assert_int_equal(n_ops(&m), 1 + 2 * 15 + 2);
    static const long long want[3][2] = {{0, 32}, {32, 48}, {48, 64}};
    for (int i = 0; i < 3; i++) {
        assert_string_equal(field(op(&m, 2 + i), "w"), "model.layers.0.self_attn.qkv_proj.weight");
        const json_t *r = json_object_get(op(&m, 2 + i), "rows");
        assert_int_equal(json_integer_value(json_array_get(r, 0)), want[i][0]);
        assert_int_equal(json_integer_value(json_array_get(r, 1)), want[i][1]);
    }
    assert_string_equal(field(op(&m, 12), "w"), "model.layers.0.mlp.gate_up_proj.weight");
    assert_string_equal(field(op(&m, 12), "out"), "u");
    assert_int_equal(json_integer_value(json_array_get(json_object_get(op(&m, 12), "rows"), 0)), 64);
    assert_null(json_object_get(op(&m, 8), "rows")); /* o_proj, not fused */
    arch_model_free(&m);
    /* a separate q_proj beside the fused weight */
    json_object_set_new(set, "model.layers.1.self_attn.q_proj.weight", json_pack("[ii]", 32, 32));
    expect_no_tape(cfg, set, "both fused and separate");
    json_object_del(set, "model.layers.1.self_attn.q_proj.weight");
    /* Phi-4-mini's partial rotary embedding: the first (int)(8 * 0.75) = 6 dims of a head rotate
     * (also as transformers 5's rope_parameters holds it); a factor leaving an odd count (0.2 of 8:
     * 1) leaves no tape */
    for (int form = 0; form < 2; form++) {
        if (form == 0)
            json_object_set_new(cfg, "partial_rotary_factor", json_real(0.75));
        else
            json_object_set_new(cfg, "rope_parameters", json_pack("{sf ss sf}", "rope_theta", 1e4,
                                                                  "rope_type", "default",
                                                                  "partial_rotary_factor", 0.75));
        assert_int_equal(arch_build(cfg, lookup, set, on_warn, NULL, &m), 0);
        assert_non_null(m.tape);
        int ropes = 0;
        for (size_t i = 0; i < n_ops(&m); i++)
            if (strcmp(field(op(&m, i), "op"), "rope") == 0) {
                assert_int_equal(json_integer_value(json_object_get(op(&m, i), "rot_dim")), 6);
                ropes++;
            }
        assert_int_equal(ropes, 4);
        arch_model_free(&m);
        json_object_del(cfg, "partial_rotary_factor");
        json_object_del(cfg, "rope_parameters");
    }
    json_object_set_new(cfg, "partial_rotary_factor", json_real(1.0)); /* whole heads: no field */
    assert_int_equal(arch_build(cfg, lookup, set, on_warn, NULL, &m), 0);
    assert_null(json_object_get(op(&m, 5), "rot_dim"));
    arch_model_free(&m);
    json_object_set_new(cfg, "partial_rotary_factor", json_real(0.2));
    expect_no_tape(cfg, set, "partial_rotary_factor");
    json_decref(set);
    json_decref(cfg);
    (void)state;
}

/* A sliding attention window outside Gemma goes into the tape: Mistral's sliding_window on every
 * layer, Qwen2's only with use_sliding_window and on the layers from max_window_layers on (or as
 * layer_types says); a window as long as the context is none. The context stays the model's. */
static const char *windows_of(const char *arch, const char *extra)
{
    static char out[8];
    char text[512];
    snprintf(text, sizeof text,
             "{\"architectures\": [\"%s\"], \"hidden_size\": 32, \"intermediate_size\": 64, "
             "\"num_hidden_layers\": 2, \"num_attention_heads\": 4, \"num_key_value_heads\": 2, "
             "\"vocab_size\": 50, \"max_position_embeddings\": 32768%s}", arch, extra);
    json_t *cfg = json_loads(text, 0, NULL);
    assert_non_null(cfg);
    json_t *set = llama_tensors(2, 32, 64, 4, 2, 8, 50, 1, 0);
    arch_model m;
    assert_int_equal(arch_build(cfg, lookup, set, on_warn, NULL, &m), 0);
    assert_non_null(m.tape);
    assert_int_equal(json_integer_value(json_object_get(m.hparams, "max_position_embeddings")), 32768);
    /* per layer: 'w' where its attention has a window of 4096, '-' where it has none */
    for (int l = 0; l < 2; l++) {
        const json_t *o[4];
        assert_int_equal(ops_of(&m, "attention", l, o), 1);
        const json_t *w = json_object_get(o[0], "window");
        assert_true(!w || json_integer_value(w) == 4096);
        out[l] = w ? 'w' : '-';
    }
    out[2] = 0;
    arch_model_free(&m);
    json_decref(set);
    json_decref(cfg);
    return out;
}

static void test_sliding_window(void **state)
{
    assert_string_equal(windows_of("MistralForCausalLM", ", \"sliding_window\": 4096"), "ww");
    assert_string_equal(windows_of("MistralForCausalLM", ", \"sliding_window\": null"), "--");
    assert_string_equal(windows_of("Qwen2ForCausalLM", ", \"sliding_window\": 4096, \"use_sliding_window\": false"),
                        "--");
    assert_string_equal(windows_of("Qwen2ForCausalLM", ", \"sliding_window\": 4096, \"use_sliding_window\": true"),
                        "--"); /* max_window_layers 28 by default: none of 2 */
    assert_string_equal(windows_of("Qwen2ForCausalLM", ", \"sliding_window\": 4096, \"use_sliding_window\": true, "
                                   "\"max_window_layers\": 1"), "-w");
    assert_string_equal(windows_of("Qwen3ForCausalLM", ", \"sliding_window\": 4096, \"use_sliding_window\": true, "
                                   "\"max_window_layers\": 0"), "ww");
    assert_string_equal(windows_of("Qwen2ForCausalLM", ", \"sliding_window\": 4096, \"use_sliding_window\": true, "
                                   "\"layer_types\": [\"sliding_attention\", \"full_attention\"]"), "w-");
    assert_string_equal(windows_of("LlamaForCausalLM", ", \"sliding_window\": 65536"), "--");
    (void)state;
}

static void test_no_tape_cases(void **state)
{
    json_t *cfg = json_loads(stories_config, 0, NULL);
    json_t *set = llama_tensors(5, 64, 172, 8, 4, 8, 512, 0, 0);
    arch_model m;
    /* an o-projection bias: the tape has no place for it */
    json_object_set_new(set, "model.layers.2.self_attn.o_proj.bias", json_pack("[i]", 64));
    expect_no_tape(cfg, set, "biases");
    json_object_del(set, "model.layers.2.self_attn.o_proj.bias");
    /* a q bias of the wrong size */
    json_object_set_new(set, "model.layers.2.self_attn.q_proj.bias", json_pack("[i]", 32));
    expect_no_tape(cfg, set, "model.layers.2.self_attn.q_proj.bias");
    json_object_del(set, "model.layers.2.self_attn.q_proj.bias");
    /* a shape that disagrees with config.json */
    json_object_set_new(set, "model.layers.1.self_attn.k_proj.weight", json_pack("[ii]", 64, 64));
    expect_no_tape(cfg, set, "model.layers.1.self_attn.k_proj.weight");
    json_object_set_new(set, "model.layers.1.self_attn.k_proj.weight", json_pack("[ii]", 32, 64));
    /* missing tensor */
    json_object_del(set, "model.layers.4.mlp.up_proj.weight");
    expect_no_tape(cfg, set, "model.layers.4.mlp.up_proj.weight is missing");
    /* unsupported architecture: hparams kept, no tape */
    json_object_set_new(cfg, "architectures", json_pack("[s]", "GPT2LMHeadModel"));
    assert_int_equal(arch_build(cfg, lookup, set, on_warn, NULL, &m), 0);
    assert_null(m.tape);
    assert_string_equal(m.family, "unknown");
    assert_non_null(strstr(last_warning, "not supported"));
    arch_model_free(&m);
    json_decref(set);
    json_decref(cfg);
    (void)state;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_stories_tape),
        cmocka_unit_test(test_smollm3_no_rope_layers),
        cmocka_unit_test(test_rope_parameters), cmocka_unit_test(test_longrope_scaling),
        cmocka_unit_test(test_qwen3_head_norms_and_scaling),
        cmocka_unit_test(test_qwen2_biases),
        cmocka_unit_test(test_sliding_window),
        cmocka_unit_test(test_phi3_fused),
        cmocka_unit_test(test_gemma3),
        cmocka_unit_test(test_no_tape_cases),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
