/*
 * test_quant_select.c — thin-quant's profiles and --roles/--layers/--select rules on a synthetic
 * model description: which tensors become FP8, which BF16, which are copied.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdlib.h>
#include <string.h>

#include "../tools/thin-quant/select.h"
#include "thin.h"

static thin_tensor_info tensor(thin_role role, int32_t layer, thin_dtype dtype, uint32_t rank)
{
    thin_tensor_info t;
    memset(&t, 0, sizeof t);
    t.name = "t";
    t.role = role;
    t.layer = layer;
    t.dtype = dtype;
    t.rank = rank;
    t.shape[0] = 64;
    t.shape[1] = rank > 1 ? 32 : 0;
    return t;
}

static tq_selection *sel_new(void)
{
    tq_selection *s = malloc(sizeof *s);
    assert_non_null(s);
    tq_selection_init(s);
    return s;
}

static tq_action act(const tq_selection *s, thin_role role, int32_t layer, thin_dtype dt,
                     uint32_t rank, uint32_t n_layers)
{
    thin_tensor_info t = tensor(role, layer, dt, rank);
    return tq_select(s, &t, n_layers, NULL);
}

static void test_profile_names(void **state)
{
    tq_profile p;
    assert_int_equal(tq_profile_parse("quality", &p), 0);
    assert_int_equal(p, TQ_PROFILE_QUALITY);
    assert_int_equal(tq_profile_parse("fp8-all", &p), 0);
    assert_int_equal(p, TQ_PROFILE_FP8_ALL);
    assert_int_equal(tq_profile_parse("bf16", &p), 0);
    assert_int_equal(p, TQ_PROFILE_BF16);
    assert_int_equal(tq_profile_parse("fast", &p), -1);
    assert_int_equal(tq_profile_parse("", &p), -1);
    assert_string_equal(tq_profile_name(TQ_PROFILE_FP8_ALL), "fp8-all");
    assert_string_equal(tq_profile_name(TQ_PROFILE_NONE), "none");
}

/* quality on 36 layers: gate/up everywhere, down in 2-33, other matrices to BF16. */
static void test_quality_profile(void **state)
{
    tq_selection *s = sel_new();
    s->profile = TQ_PROFILE_QUALITY;
    assert_true(tq_selection_needs_layer_count(s));
    assert_true(tq_selection_runtime_bf16(s));
    for (int32_t l = 0; l < 36; l++) {
        assert_int_equal(act(s, THIN_ROLE_GATE, l, THIN_DTYPE_BF16, 2, 36), TQ_ACTION_FP8);
        assert_int_equal(act(s, THIN_ROLE_UP, l, THIN_DTYPE_F32, 2, 36), TQ_ACTION_FP8);
        tq_action want = (l >= 2 && l <= 33) ? TQ_ACTION_FP8 : TQ_ACTION_COPY;
        assert_int_equal(act(s, THIN_ROLE_DOWN, l, THIN_DTYPE_BF16, 2, 36), want);
        want = (l >= 2 && l <= 33) ? TQ_ACTION_FP8 : TQ_ACTION_BF16;
        assert_int_equal(act(s, THIN_ROLE_DOWN, l, THIN_DTYPE_F32, 2, 36), want);
        assert_int_equal(act(s, THIN_ROLE_Q, l, THIN_DTYPE_BF16, 2, 36), TQ_ACTION_COPY);
        assert_int_equal(act(s, THIN_ROLE_O, l, THIN_DTYPE_F16, 2, 36), TQ_ACTION_BF16);
        assert_int_equal(act(s, THIN_ROLE_ATTN_NORM, l, THIN_DTYPE_F32, 1, 36), TQ_ACTION_COPY);
    }
    assert_int_equal(act(s, THIN_ROLE_EMBEDDING, -1, THIN_DTYPE_F32, 2, 36), TQ_ACTION_BF16);
    assert_int_equal(act(s, THIN_ROLE_LM_HEAD, -1, THIN_DTYPE_F32, 2, 36), TQ_ACTION_BF16);
    assert_int_equal(act(s, THIN_ROLE_FINAL_NORM, -1, THIN_DTYPE_F32, 1, 36), TQ_ACTION_COPY);
    /* 5 layers: the middle is layer 2 alone; 4 layers: no middle */
    for (int32_t l = 0; l < 5; l++)
        assert_int_equal(act(s, THIN_ROLE_DOWN, l, THIN_DTYPE_BF16, 2, 5),
                         l == 2 ? TQ_ACTION_FP8 : TQ_ACTION_COPY);
    for (int32_t l = 0; l < 4; l++)
        assert_int_equal(act(s, THIN_ROLE_DOWN, l, THIN_DTYPE_BF16, 2, 4), TQ_ACTION_COPY);
    /* already-FP8 gate: copied, with a reason */
    thin_tensor_info t = tensor(THIN_ROLE_GATE, 0, THIN_DTYPE_F8_E4M3, 2);
    const char *why = NULL;
    assert_int_equal(tq_select(s, &t, 36, &why), TQ_ACTION_COPY);
    assert_non_null(why);
    /* scale tensors are never touched */
    assert_int_equal(act(s, THIN_ROLE_SCALE, 0, THIN_DTYPE_F32, 1, 36), TQ_ACTION_COPY);
    free(s);
}

static void test_quality_with_select_override(void **state)
{
    tq_selection *s = sel_new();
    char err[256];
    s->profile = TQ_PROFILE_QUALITY;
    assert_int_equal(tq_selection_select(s, "down:0-1,30-", err, sizeof err), 0);
    assert_false(tq_selection_needs_layer_count(s));
    assert_int_equal(tq_selection_check(s, err, sizeof err), 0);
    assert_int_equal(act(s, THIN_ROLE_DOWN, 0, THIN_DTYPE_BF16, 2, 36), TQ_ACTION_FP8);
    assert_int_equal(act(s, THIN_ROLE_DOWN, 9, THIN_DTYPE_BF16, 2, 36), TQ_ACTION_COPY);
    assert_int_equal(act(s, THIN_ROLE_DOWN, 35, THIN_DTYPE_BF16, 2, 36), TQ_ACTION_FP8);
    assert_int_equal(tq_selection_select(s, "gate,up:none", err, sizeof err), 0);
    assert_int_equal(act(s, THIN_ROLE_GATE, 3, THIN_DTYPE_BF16, 2, 36), TQ_ACTION_COPY);
    assert_int_equal(act(s, THIN_ROLE_UP, 3, THIN_DTYPE_F32, 2, 36), TQ_ACTION_BF16);
    assert_int_equal(tq_selection_select(s, "lm_head", err, sizeof err), 0);
    assert_int_equal(act(s, THIN_ROLE_LM_HEAD, -1, THIN_DTYPE_F32, 2, 36), TQ_ACTION_FP8);
    free(s);
}

static void test_fp8_all_profile(void **state)
{
    tq_selection *s = sel_new();
    s->profile = TQ_PROFILE_FP8_ALL;
    assert_false(tq_selection_needs_layer_count(s));
    assert_false(tq_selection_runtime_bf16(s));
    thin_role lin[] = {THIN_ROLE_Q, THIN_ROLE_K, THIN_ROLE_V, THIN_ROLE_O, THIN_ROLE_QKV,
                       THIN_ROLE_GATE, THIN_ROLE_UP, THIN_ROLE_GATE_UP, THIN_ROLE_DOWN};
    for (size_t i = 0; i < sizeof lin / sizeof lin[0]; i++)
        for (int32_t l = 0; l < 4; l++)
            assert_int_equal(act(s, lin[i], l, THIN_DTYPE_BF16, 2, 4), TQ_ACTION_FP8);
    assert_int_equal(act(s, THIN_ROLE_LM_HEAD, -1, THIN_DTYPE_BF16, 2, 4), TQ_ACTION_FP8);
    assert_int_equal(act(s, THIN_ROLE_EMBEDDING, -1, THIN_DTYPE_F32, 2, 4), TQ_ACTION_COPY);
    assert_int_equal(act(s, THIN_ROLE_FFN_NORM, 1, THIN_DTYPE_F32, 1, 4), TQ_ACTION_COPY);
    assert_int_equal(act(s, THIN_ROLE_OTHER, 1, THIN_DTYPE_F32, 2, 4), TQ_ACTION_COPY);
    thin_tensor_info t = tensor(THIN_ROLE_LM_HEAD, -1, THIN_DTYPE_BF16, 2);
    t.tied_to = "model.embed_tokens.weight";
    assert_int_equal(tq_select(s, &t, 4, NULL), TQ_ACTION_COPY);
    t = tensor(THIN_ROLE_Q, 0, THIN_DTYPE_I8, 2);
    const char *why = NULL;
    assert_int_equal(tq_select(s, &t, 4, &why), TQ_ACTION_COPY);
    assert_non_null(why);
    t = tensor(THIN_ROLE_Q, 0, THIN_DTYPE_F32, 3);
    assert_int_equal(tq_select(s, &t, 4, &why), TQ_ACTION_COPY);
    assert_non_null(why);
    free(s);
}

static void test_bf16_profile(void **state)
{
    tq_selection *s = sel_new();
    s->profile = TQ_PROFILE_BF16;
    assert_int_equal(act(s, THIN_ROLE_GATE, 0, THIN_DTYPE_F32, 2, 4), TQ_ACTION_BF16);
    assert_int_equal(act(s, THIN_ROLE_GATE, 0, THIN_DTYPE_F64, 2, 4), TQ_ACTION_BF16);
    assert_int_equal(act(s, THIN_ROLE_GATE, 0, THIN_DTYPE_BF16, 2, 4), TQ_ACTION_COPY);
    assert_int_equal(act(s, THIN_ROLE_EMBEDDING, -1, THIN_DTYPE_F16, 2, 4), TQ_ACTION_BF16);
    assert_int_equal(act(s, THIN_ROLE_OTHER, -1, THIN_DTYPE_F32, 3, 4), TQ_ACTION_BF16);
    assert_int_equal(act(s, THIN_ROLE_ATTN_NORM, 0, THIN_DTYPE_F32, 1, 4), TQ_ACTION_COPY);
    assert_int_equal(act(s, THIN_ROLE_GATE, 0, THIN_DTYPE_I32, 2, 4), TQ_ACTION_COPY);
    free(s);
}

/* Explicit --roles / --layers: exactly those tensors, nothing else changes. */
static void test_explicit_roles_and_layers(void **state)
{
    tq_selection *s = sel_new();
    char err[256];
    assert_int_equal(tq_selection_roles(s, "gate,up,lm_head", err, sizeof err), 0);
    assert_int_equal(tq_selection_layers(s, "2-3,6", err, sizeof err), 0);
    assert_int_equal(tq_selection_check(s, err, sizeof err), 0);
    assert_false(tq_selection_runtime_bf16(s));
    for (int32_t l = 0; l < 8; l++) {
        tq_action want = (l == 2 || l == 3 || l == 6) ? TQ_ACTION_FP8 : TQ_ACTION_COPY;
        assert_int_equal(act(s, THIN_ROLE_GATE, l, THIN_DTYPE_F32, 2, 8), want);
        assert_int_equal(act(s, THIN_ROLE_UP, l, THIN_DTYPE_BF16, 2, 8), want);
        assert_int_equal(act(s, THIN_ROLE_DOWN, l, THIN_DTYPE_F32, 2, 8), TQ_ACTION_COPY);
        assert_int_equal(act(s, THIN_ROLE_Q, l, THIN_DTYPE_F32, 2, 8), TQ_ACTION_COPY);
    }
    assert_int_equal(act(s, THIN_ROLE_LM_HEAD, -1, THIN_DTYPE_F32, 2, 8), TQ_ACTION_FP8);
    assert_int_equal(act(s, THIN_ROLE_EMBEDDING, -1, THIN_DTYPE_F32, 2, 8), TQ_ACTION_COPY);
    free(s);

    /* --layers alone: the per-layer linear roles in those layers */
    s = sel_new();
    assert_int_equal(tq_selection_layers(s, "1-", err, sizeof err), 0);
    assert_int_equal(act(s, THIN_ROLE_K, 0, THIN_DTYPE_F32, 2, 4), TQ_ACTION_COPY);
    assert_int_equal(act(s, THIN_ROLE_K, 3, THIN_DTYPE_F32, 2, 4), TQ_ACTION_FP8);
    assert_int_equal(act(s, THIN_ROLE_GATE_UP, 1, THIN_DTYPE_F16, 2, 4), TQ_ACTION_FP8);
    assert_int_equal(act(s, THIN_ROLE_LM_HEAD, -1, THIN_DTYPE_F32, 2, 4), TQ_ACTION_COPY);
    free(s);

    /* --roles alone: every layer */
    s = sel_new();
    assert_int_equal(tq_selection_roles(s, "down", err, sizeof err), 0);
    for (int32_t l = 0; l < 40; l++)
        assert_int_equal(act(s, THIN_ROLE_DOWN, l, THIN_DTYPE_BF16, 2, 40), TQ_ACTION_FP8);
    free(s);

    /* --select alone */
    s = sel_new();
    assert_int_equal(tq_selection_select(s, "down:9-26", err, sizeof err), 0);
    assert_int_equal(tq_selection_check(s, err, sizeof err), 0);
    assert_int_equal(act(s, THIN_ROLE_DOWN, 8, THIN_DTYPE_BF16, 2, 36), TQ_ACTION_COPY);
    assert_int_equal(act(s, THIN_ROLE_DOWN, 9, THIN_DTYPE_BF16, 2, 36), TQ_ACTION_FP8);
    assert_int_equal(act(s, THIN_ROLE_GATE, 9, THIN_DTYPE_BF16, 2, 36), TQ_ACTION_COPY);
    free(s);
}

static void test_bad_options(void **state)
{
    tq_selection *s = sel_new();
    char err[256];
    assert_int_equal(tq_selection_check(s, err, sizeof err), -1); /* nothing chosen */
    assert_int_equal(tq_selection_roles(s, "gate,bogus", err, sizeof err), -1);
    assert_non_null(strstr(err, "bogus"));
    assert_int_equal(tq_selection_roles(s, "gate,,up", err, sizeof err), -1);
    assert_int_equal(tq_selection_roles(s, "attn_norm", err, sizeof err), -1);
    assert_int_equal(tq_selection_roles(s, "scale", err, sizeof err), -1);
    assert_int_equal(tq_selection_roles(s, "", err, sizeof err), -1);
    assert_int_equal(tq_selection_layers(s, "3-1", err, sizeof err), -1);
    assert_int_equal(tq_selection_layers(s, "x", err, sizeof err), -1);
    assert_int_equal(tq_selection_select(s, "down:", err, sizeof err), -1);
    assert_int_equal(tq_selection_select(s, "down:a-b", err, sizeof err), -1);
    assert_int_equal(tq_selection_select(s, ":1-2", err, sizeof err), -1);
    assert_int_equal(tq_selection_select(s, "nope:1-2", err, sizeof err), -1);
    s->profile = TQ_PROFILE_QUALITY;
    assert_int_equal(tq_selection_roles(s, "gate", err, sizeof err), 0);
    assert_int_equal(tq_selection_check(s, err, sizeof err), -1); /* profile + --roles */
    free(s);
}

static void test_format_ranges(void **state)
{
    unsigned char sel[40] = {0};
    char out[64];
    tq_format_ranges(sel, 40, out, sizeof out);
    assert_string_equal(out, "");
    for (int i = 9; i <= 26; i++)
        sel[i] = 1;
    sel[0] = sel[30] = sel[31] = 1;
    tq_format_ranges(sel, 40, out, sizeof out);
    assert_string_equal(out, "0,9-26,30-31");
    sel[39] = 1;
    tq_format_ranges(sel, 40, out, sizeof out);
    assert_string_equal(out, "0,9-26,30-31,39");
    tq_format_ranges(sel, 40, out, 6); /* truncated at a whole item */
    assert_string_equal(out, "0");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_profile_names),
        cmocka_unit_test(test_quality_profile),
        cmocka_unit_test(test_quality_with_select_override),
        cmocka_unit_test(test_fp8_all_profile),
        cmocka_unit_test(test_bf16_profile),
        cmocka_unit_test(test_explicit_roles_and_layers),
        cmocka_unit_test(test_bad_options),
        cmocka_unit_test(test_format_ranges),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
