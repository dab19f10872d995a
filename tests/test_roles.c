/* test_roles.c — role and layer of Llama-family tensor names. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "../tools/thin-pack/roles.h"

static void check(const char *name, roles_kind kind, thin_role role, int32_t layer)
{
    thin_role r;
    int32_t l;
    roles_kind k = roles_map(name, &r, &l);
    if (k != kind || r != role || l != layer)
        fail_msg("%s: got kind %d role %d layer %d, want %d %d %d", name, k, r, l, kind, role,
                 layer);
}

static void test_layer_weights(void **state)
{
    check("model.layers.0.self_attn.q_proj.weight", ROLES_KNOWN, THIN_ROLE_Q, 0);
    check("model.layers.12.self_attn.k_proj.weight", ROLES_KNOWN, THIN_ROLE_K, 12);
    check("model.layers.3.self_attn.v_proj.weight", ROLES_KNOWN, THIN_ROLE_V, 3);
    check("model.layers.35.self_attn.o_proj.weight", ROLES_KNOWN, THIN_ROLE_O, 35);
    check("model.layers.1.mlp.gate_proj.weight", ROLES_KNOWN, THIN_ROLE_GATE, 1);
    check("model.layers.1.mlp.up_proj.weight", ROLES_KNOWN, THIN_ROLE_UP, 1);
    check("model.layers.1.mlp.down_proj.weight", ROLES_KNOWN, THIN_ROLE_DOWN, 1);
    check("model.layers.4.input_layernorm.weight", ROLES_KNOWN, THIN_ROLE_ATTN_NORM, 4);
    check("model.layers.4.post_attention_layernorm.weight", ROLES_KNOWN, THIN_ROLE_FFN_NORM, 4);
    check("model.layers.7.self_attn.q_norm.weight", ROLES_KNOWN, THIN_ROLE_Q_NORM, 7);
    check("model.layers.7.self_attn.k_norm.weight", ROLES_KNOWN, THIN_ROLE_K_NORM, 7);
    check("model.layers.2.self_attn.qkv_proj.weight", ROLES_KNOWN, THIN_ROLE_QKV, 2);
    check("model.layers.2.mlp.gate_up_proj.weight", ROLES_KNOWN, THIN_ROLE_GATE_UP, 2);
    (void)state;
}

static void test_global_weights(void **state)
{
    check("model.embed_tokens.weight", ROLES_KNOWN, THIN_ROLE_EMBEDDING, -1);
    check("model.norm.weight", ROLES_KNOWN, THIN_ROLE_FINAL_NORM, -1);
    check("lm_head.weight", ROLES_KNOWN, THIN_ROLE_LM_HEAD, -1);
    check("model.layers.0.mlp.down_proj.weight.scale", ROLES_KNOWN, THIN_ROLE_SCALE, 0);
    check("lm_head.weight.scale", ROLES_KNOWN, THIN_ROLE_SCALE, -1);
    (void)state;
}

static void test_biases_and_unknown(void **state)
{
    check("model.layers.5.self_attn.q_proj.bias", ROLES_KNOWN, THIN_ROLE_Q_BIAS, 5);
    check("model.layers.5.self_attn.k_proj.bias", ROLES_KNOWN, THIN_ROLE_K_BIAS, 5);
    check("model.layers.0.self_attn.v_proj.bias", ROLES_KNOWN, THIN_ROLE_V_BIAS, 0);
    check("model.layers.5.self_attn.o_proj.bias", ROLES_BIAS, THIN_ROLE_OTHER, 5);
    check("model.layers.5.mlp.down_proj.bias", ROLES_BIAS, THIN_ROLE_OTHER, 5);
    check("lm_head.bias", ROLES_BIAS, THIN_ROLE_OTHER, -1);
    check("model.layers.5.self_attn.q_proj.weight.bias", ROLES_UNKNOWN, THIN_ROLE_OTHER, 5);
    check("model.layers.5.self_attn.rotary_emb.inv_freq", ROLES_UNKNOWN, THIN_ROLE_OTHER, 5);
    check("model.layers.x.self_attn.q_proj.weight", ROLES_UNKNOWN, THIN_ROLE_OTHER, -1);
    check("model.layers.01.self_attn.q_proj.weight", ROLES_UNKNOWN, THIN_ROLE_OTHER, -1);
    check("model.layers.3", ROLES_UNKNOWN, THIN_ROLE_OTHER, -1);
    check("transformer.h.0.attn.c_attn.weight", ROLES_UNKNOWN, THIN_ROLE_OTHER, -1);
    check("model.embed_tokens.weightx", ROLES_UNKNOWN, THIN_ROLE_OTHER, -1);
    check("", ROLES_UNKNOWN, THIN_ROLE_OTHER, -1);
    (void)state;
}

static void test_canonical_names(void **state)
{
    char buf[128];
    assert_int_equal(roles_name(THIN_ROLE_UP, 3, buf, sizeof buf), 0);
    assert_string_equal(buf, "model.layers.3.mlp.up_proj.weight");
    assert_int_equal(roles_name(THIN_ROLE_LM_HEAD, -1, buf, sizeof buf), 0);
    assert_string_equal(buf, "lm_head.weight");
    assert_int_equal(roles_name(THIN_ROLE_Q, -1, buf, sizeof buf), -1);
    assert_int_equal(roles_name(THIN_ROLE_SCALE, 0, buf, sizeof buf), -1);
    assert_int_equal(roles_name(THIN_ROLE_V_BIAS, 7, buf, sizeof buf), 0);
    assert_string_equal(buf, "model.layers.7.self_attn.v_proj.bias");
    assert_int_equal(roles_name(THIN_ROLE_Q_BIAS, -1, buf, sizeof buf), -1);
    assert_int_equal(roles_name(THIN_ROLE_UP, 3, buf, 8), -1);
    (void)state;
}

/* Gemma's norms by family: post_attention_layernorm is the attention's output norm there, the
 * MLP's input norm elsewhere; pre/post_feedforward_layernorm are Gemma's alone. */
static void test_gemma_family(void **state)
{
    thin_role r;
    int32_t l, e;
    assert_int_equal(roles_map_family("gemma3", "model.layers.4.post_attention_layernorm.weight", &r, &l, &e), ROLES_KNOWN);
    assert_int_equal(r, THIN_ROLE_ATTN_POST_NORM);
    assert_int_equal(l, 4);
    assert_int_equal(roles_map_family("gemma3", "model.layers.0.pre_feedforward_layernorm.weight", &r, &l, &e), ROLES_KNOWN);
    assert_int_equal(r, THIN_ROLE_FFN_NORM);
    assert_int_equal(roles_map_family("gemma3", "model.layers.2.post_feedforward_layernorm.weight", &r, &l, &e), ROLES_KNOWN);
    assert_int_equal(r, THIN_ROLE_FFN_POST_NORM);
    assert_int_equal(l, 2);
    assert_int_equal(roles_map_family("gemma3", "model.layers.2.mlp.up_proj.weight", &r, &l, &e), ROLES_KNOWN);
    assert_int_equal(r, THIN_ROLE_UP);
    assert_int_equal(roles_map_family("gemma3", "model.norm.weight", &r, &l, &e), ROLES_KNOWN);
    assert_int_equal(r, THIN_ROLE_FINAL_NORM);
    assert_int_equal(roles_map_family("gemma3", "model.layers.2.post_feedforward_layernorm.bias", &r, &l, &e), ROLES_UNKNOWN);
    assert_int_equal(roles_map_family("llama", "model.layers.4.post_attention_layernorm.weight", &r, &l, &e), ROLES_KNOWN);
    assert_int_equal(r, THIN_ROLE_FFN_NORM);
    assert_int_equal(roles_map_family(NULL, "model.layers.0.pre_feedforward_layernorm.weight", &r, &l, &e), ROLES_UNKNOWN);
    assert_int_equal(roles_map_family("gemma3", "lm_head.weight", &r, &l, &e), ROLES_KNOWN);
    char buf[128];
    assert_int_equal(roles_name_family("gemma3", THIN_ROLE_FFN_NORM, 1, buf, sizeof buf), 0);
    assert_string_equal(buf, "model.layers.1.pre_feedforward_layernorm.weight");
    assert_int_equal(roles_name_family("gemma3", THIN_ROLE_ATTN_POST_NORM, 1, buf, sizeof buf), 0);
    assert_string_equal(buf, "model.layers.1.post_attention_layernorm.weight");
    assert_int_equal(roles_name_family("qwen3", THIN_ROLE_FFN_NORM, 1, buf, sizeof buf), 0);
    assert_string_equal(buf, "model.layers.1.post_attention_layernorm.weight");
    assert_int_equal(roles_name_family("gemma3", THIN_ROLE_FFN_POST_NORM, 1, buf, 10), -1);
    assert_string_equal(thin_role_name(THIN_ROLE_FFN_POST_NORM), "ffn_post_norm");
    (void)state;
}

/* A mixture of experts' router and experts (Qwen3-MoE's and OLMoE's names, Mixtral's). */
static void check_expert(const char *name, roles_kind kind, thin_role role, int32_t layer,
                         int32_t expert)
{
    thin_role r;
    int32_t l, e;
    roles_kind k = roles_map_expert(name, &r, &l, &e);
    if (k != kind || r != role || l != layer || e != expert)
        fail_msg("%s: got kind %d role %d layer %d expert %d, want %d %d %d %d", name, k, r, l, e,
                 kind, role, layer, expert);
}

static void test_experts(void **state)
{
    check_expert("model.layers.3.mlp.gate.weight", ROLES_KNOWN, THIN_ROLE_ROUTER, 3, -1);
    check_expert("model.layers.3.mlp.experts.0.gate_proj.weight", ROLES_KNOWN, THIN_ROLE_GATE, 3, 0);
    check_expert("model.layers.3.mlp.experts.127.up_proj.weight", ROLES_KNOWN, THIN_ROLE_UP, 3, 127);
    check_expert("model.layers.0.mlp.experts.12.down_proj.weight", ROLES_KNOWN, THIN_ROLE_DOWN, 0, 12);
    check_expert("model.layers.1.block_sparse_moe.gate.weight", ROLES_KNOWN, THIN_ROLE_ROUTER, 1, -1);
    check_expert("model.layers.1.block_sparse_moe.experts.7.w1.weight", ROLES_KNOWN, THIN_ROLE_GATE, 1, 7);
    check_expert("model.layers.1.block_sparse_moe.experts.7.w3.weight", ROLES_KNOWN, THIN_ROLE_UP, 1, 7);
    check_expert("model.layers.1.block_sparse_moe.experts.7.w2.weight", ROLES_KNOWN, THIN_ROLE_DOWN, 1, 7);
    check_expert("model.layers.1.mlp.experts.7.gate_proj.weight.scale", ROLES_KNOWN, THIN_ROLE_SCALE, 1, -1);
    check_expert("model.layers.1.mlp.gate_proj.weight", ROLES_KNOWN, THIN_ROLE_GATE, 1, -1);
    /* not an expert: a leading zero, no number, another projection, a bias */
    check_expert("model.layers.1.mlp.experts.07.up_proj.weight", ROLES_UNKNOWN, THIN_ROLE_OTHER, 1, -1);
    check_expert("model.layers.1.mlp.experts.x.up_proj.weight", ROLES_UNKNOWN, THIN_ROLE_OTHER, 1, -1);
    check_expert("model.layers.1.mlp.experts.2.w1.weight", ROLES_UNKNOWN, THIN_ROLE_OTHER, 1, -1);
    check_expert("model.layers.1.mlp.experts.2.up_proj.bias", ROLES_BIAS, THIN_ROLE_OTHER, 1, -1);
    check_expert("model.layers.1.mlp.gate.bias", ROLES_BIAS, THIN_ROLE_OTHER, 1, -1);
    /* Qwen2-MoE's shared expert and its gate */
    check_expert("model.layers.2.mlp.shared_expert.up_proj.weight", ROLES_KNOWN, THIN_ROLE_UP, 2, -1);
    check_expert("model.layers.2.mlp.shared_expert.down_proj.weight", ROLES_KNOWN, THIN_ROLE_DOWN, 2, -1);
    check_expert("model.layers.2.mlp.shared_expert_gate.weight", ROLES_KNOWN, THIN_ROLE_ROUTER, 2, -1);
    /* stacked, as transformers 5 saves them */
    check_expert("model.layers.4.mlp.experts.gate_up_proj", ROLES_KNOWN, THIN_ROLE_GATE_UP, 4, -1);
    check_expert("model.layers.4.mlp.experts.down_proj", ROLES_KNOWN, THIN_ROLE_DOWN, 4, -1);
    check_expert("model.layers.4.mlp.experts.up_proj", ROLES_UNKNOWN, THIN_ROLE_OTHER, 4, -1);
    /* GLM-4.5's router bias and shared experts */
    check_expert("model.layers.3.mlp.gate.e_score_correction_bias", ROLES_KNOWN, THIN_ROLE_ROUTER, 3, -1);
    check_expert("model.layers.3.mlp.shared_experts.down_proj.weight", ROLES_KNOWN, THIN_ROLE_DOWN, 3, -1);
    /* Granite's MoE, stacked under its own names */
    check_expert("model.layers.5.block_sparse_moe.input_linear.weight", ROLES_KNOWN, THIN_ROLE_GATE_UP, 5, -1);
    check_expert("model.layers.5.block_sparse_moe.output_linear.weight", ROLES_KNOWN, THIN_ROLE_DOWN, 5, -1);
    check_expert("model.layers.5.block_sparse_moe.router.layer.weight", ROLES_KNOWN, THIN_ROLE_ROUTER, 5, -1);
    thin_role r;
    int32_t l, e;
    assert_int_equal(roles_map_family("mixtral", "language_model.model.layers.2.block_sparse_moe.experts.3.w2.weight",
                                      &r, &l, &e), ROLES_KNOWN);
    assert_true(r == THIN_ROLE_DOWN && l == 2 && e == 3);
    char buf[128];
    assert_int_equal(roles_moe_name("mixtral", THIN_ROLE_UP, 2, 5, buf, sizeof buf), 0);
    assert_string_equal(buf, "model.layers.2.block_sparse_moe.experts.5.w3.weight");
    assert_int_equal(roles_moe_name("qwen3_moe", THIN_ROLE_DOWN, 2, 5, buf, sizeof buf), 0);
    assert_string_equal(buf, "model.layers.2.mlp.experts.5.down_proj.weight");
    assert_int_equal(roles_moe_name("qwen3_moe", THIN_ROLE_ROUTER, 4, -1, buf, sizeof buf), 0);
    assert_string_equal(buf, "model.layers.4.mlp.gate.weight");
    assert_int_equal(roles_moe_name("qwen3_moe", THIN_ROLE_Q, 4, 1, buf, sizeof buf), -1);
    assert_int_equal(roles_moe_name("qwen3_moe", THIN_ROLE_UP, 4, 1, buf, 12), -1);
    assert_string_equal(thin_role_name(THIN_ROLE_ROUTER), "router");
    (void)state;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_layer_weights),
        cmocka_unit_test(test_experts),
        cmocka_unit_test(test_global_weights),
        cmocka_unit_test(test_biases_and_unknown),
        cmocka_unit_test(test_gemma_family),
        cmocka_unit_test(test_canonical_names),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
