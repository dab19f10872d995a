/*
 * Tests of the plan compiler (tools/thin-run/plan.c): a tiny one-layer Llama written with the
 * libthin writer, its tape compiled, broken in various ways, and run on the CPU backend.
 */
#include <jansson.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "../tools/thin-run/exec_cpu.h"
#include "../tools/thin-run/plan.h"

enum { VOCAB = 16, DIM = 8, FFN = 12, HEADS = 2, KV_HEADS = 1, HD = 4 };

typedef struct wspec {
    const char *name;
    thin_role role;
    int32_t layer;
    uint64_t rows, cols; /* rows 0: a vector of cols */
} wspec;

static const wspec weights[] = {
    {"model.embed_tokens.weight", THIN_ROLE_EMBEDDING, -1, VOCAB, DIM},
    {"model.layers.0.input_layernorm.weight", THIN_ROLE_ATTN_NORM, 0, 0, DIM},
    {"model.layers.0.self_attn.q_proj.weight", THIN_ROLE_Q, 0, HEADS * HD, DIM},
    {"model.layers.0.self_attn.k_proj.weight", THIN_ROLE_K, 0, KV_HEADS * HD, DIM},
    {"model.layers.0.self_attn.v_proj.weight", THIN_ROLE_V, 0, KV_HEADS * HD, DIM},
    {"model.layers.0.self_attn.o_proj.weight", THIN_ROLE_O, 0, DIM, HEADS * HD},
    {"model.layers.0.post_attention_layernorm.weight", THIN_ROLE_FFN_NORM, 0, 0, DIM},
    {"model.layers.0.mlp.gate_proj.weight", THIN_ROLE_GATE, 0, FFN, DIM},
    {"model.layers.0.mlp.up_proj.weight", THIN_ROLE_UP, 0, FFN, DIM},
    {"model.layers.0.mlp.down_proj.weight", THIN_ROLE_DOWN, 0, DIM, FFN},
    {"model.norm.weight", THIN_ROLE_FINAL_NORM, -1, 0, DIM},
};
#define N_WEIGHTS (sizeof weights / sizeof weights[0])
#define W(i) weights[i].name

static json_t *op(const char *kind, const char *w, const char *in, const char *out) {
    json_t *o = json_pack("{ss}", "op", kind);
    if (w) json_object_set_new(o, "w", json_string(w));
    if (in) json_object_set_new(o, "in", json_string(in));
    if (out) json_object_set_new(o, "out", json_string(out));
    return o;
}

/* The SPEC §10 tape of the tiny model. */
static json_t *tape(void) {
    json_t *ops = json_array();
    json_array_append_new(ops, op("embed", W(0), NULL, "x"));
    json_array_append_new(ops, op("rmsnorm", W(1), "x", "h"));
    json_array_append_new(ops, op("linear", W(2), "h", "q"));
    json_array_append_new(ops, op("linear", W(3), "h", "k"));
    json_array_append_new(ops, op("linear", W(4), "h", "v"));
    for (int i = 0; i < 2; i++)
        json_array_append_new(ops, json_pack("{ss ss si sf si}", "op", "rope", "in", i ? "k" : "q",
                                             "head_dim", HD, "theta", 10000.0, "layer", 0));
    json_array_append_new(ops, json_pack("{ss ss ss ss ss si si si si}", "op", "attention", "q",
                                         "q", "k", "k", "v", "v", "out", "att", "layer", 0,
                                         "n_heads", HEADS, "n_kv_heads", KV_HEADS, "head_dim", HD));
    json_array_append_new(ops, op("linear", W(5), "att", "h"));
    json_array_append_new(ops, op("add", NULL, "h", "x"));
    json_array_append_new(ops, op("rmsnorm", W(6), "x", "h"));
    json_array_append_new(ops, op("linear", W(7), "h", "g"));
    json_array_append_new(ops, op("linear", W(8), "h", "u"));
    json_array_append_new(ops, op("silu_mul", NULL, "u", "g"));
    json_array_append_new(ops, op("linear", W(9), "g", "h"));
    json_array_append_new(ops, op("add", NULL, "h", "x"));
    json_array_append_new(ops, op("rmsnorm", W(10), "x", "h"));
    json_array_append_new(ops, op("linear", "lm_head.weight", "h", "logits"));
    return json_pack("{si s{si si si si si si si si si} so}", "version", 1, "buffers", "x", DIM,
                     "h", DIM, "q", HEADS * HD, "k", KV_HEADS * HD, "v", KV_HEADS * HD, "att",
                     HEADS * HD, "g", FFN, "u", FFN, "logits", VOCAB, "ops", ops);
}

static const char *hparams =
    "{\"architecture\": \"LlamaForCausalLM\", \"family\": \"llama\", \"hparams\": {"
    "\"vocab_size\": 16, \"hidden_size\": 8, \"intermediate_size\": 12, \"n_layers\": 1,"
    "\"n_heads\": 2, \"n_kv_heads\": 1, \"head_dim\": 4, \"max_position_embeddings\": 32,"
    "\"rms_norm_eps\": 1e-5, \"rope_theta\": 10000.0, \"bos_token_id\": 1,"
    "\"eos_token_id\": [2, 3]}}";

/* How to write the file: which tape, codec, F8 for the q projection (with or without scale). */
typedef struct variant {
    json_t *tape;      /* stolen; NULL = no tape section */
    thin_codec codec;
    int fp8_q;         /* 1: q_proj as F8_E4M3 with a scale, 2: without */
    const char *runtime;
    int k_bias;        /* 1: a k bias tensor (model.layers.0.self_attn.k_proj.bias), 2: of zeros */
} variant;

static float value(size_t i, size_t k) { return (float)sin(0.37 * (double)(i * 131 + k)) * 0.5f; }

static void add_weight(thin_writer *w, size_t i, const variant *v) {
    const wspec *s = &weights[i];
    uint64_t n = (s->rows ? s->rows : 1) * s->cols;
    thin_tensor_desc d = {s->name, s->role, s->layer, THIN_DTYPE_F32, s->rows ? 2 : 1,
                          {s->rows ? s->rows : s->cols, s->cols}, NULL, NULL, 0, 0};
    float *f = malloc(n * sizeof *f);
    for (uint64_t k = 0; k < n; k++) f[k] = s->rows ? value(i, k) : 1.0f + value(i, k) * 0.1f;
    if (i == 2 && v->fp8_q) {
        uint8_t *q = malloc(n);
        float scale[HEADS * HD];
        for (uint64_t k = 0; k < n; k++) q[k] = thin_f32_to_e4m3(f[k] * 256.0f);
        for (int r = 0; r < HEADS * HD; r++) scale[r] = 1.0f / 256.0f;
        d.dtype = THIN_DTYPE_F8_E4M3;
        d.scale = v->fp8_q == 1 ? "q.scale" : NULL;
        assert_int_equal(thin_writer_add_tensor(w, &d, q), THIN_OK);
        thin_tensor_desc sd = {"q.scale", THIN_ROLE_SCALE, 0, THIN_DTYPE_F32, 1, {HEADS * HD},
                               NULL, NULL, 0, 0};
        if (v->fp8_q == 1) assert_int_equal(thin_writer_add_tensor(w, &sd, scale), THIN_OK);
        free(q);
    } else {
        assert_int_equal(thin_writer_add_tensor(w, &d, f), THIN_OK);
    }
    free(f);
}

static void write_model(const char *path, variant v) {
    thin_writer *w = thin_writer_new();
    thin_writer_options o = {0, v.codec, 0, 1};
    assert_int_equal(thin_writer_open(w, path, &o), THIN_OK);
    for (size_t i = 0; i < N_WEIGHTS; i++) add_weight(w, i, &v);
    if (v.k_bias) {
        float b[KV_HEADS * HD];
        for (int k = 0; k < KV_HEADS * HD; k++) b[k] = v.k_bias == 1 ? value(99, (size_t)k) : 0.0f;
        thin_tensor_desc d = {"model.layers.0.self_attn.k_proj.bias", THIN_ROLE_K_BIAS, 0,
                              THIN_DTYPE_F32, 1, {KV_HEADS * HD}, NULL, NULL, 0, 0};
        assert_int_equal(thin_writer_add_tensor(w, &d, b), THIN_OK);
    }
    /* a router of 2 experts, and the MLP's weights as 2 identical experts stacked as transformers
     * 5 saves them (gate_up [2, 2 FFN, DIM], down [2, DIM, FFN]); only the moe tapes read them */
    float rt[2 * DIM], gu[2 * 2 * FFN * DIM], dn[2 * DIM * FFN];
    for (int k = 0; k < 2 * DIM; k++) rt[k] = value(98, (size_t)k);
    for (int e = 0; e < 2; e++) {
        for (int k = 0; k < 2 * FFN * DIM; k++) gu[e * 2 * FFN * DIM + k] = value(k < FFN * DIM ? 7 : 8, (size_t)(k % (FFN * DIM)));
        for (int k = 0; k < DIM * FFN; k++) dn[e * DIM * FFN + k] = value(9, (size_t)k);
    }
    thin_tensor_desc rd = {"model.layers.0.mlp.gate.weight", THIN_ROLE_ROUTER, 0, THIN_DTYPE_F32, 2, {2, DIM}, NULL, NULL, 0, 0};
    thin_tensor_desc gd = {"model.layers.0.mlp.experts.gate_up_proj", THIN_ROLE_GATE_UP, 0, THIN_DTYPE_F32, 3,
                           {2, 2 * FFN, DIM}, NULL, NULL, 0, 0};
    thin_tensor_desc dd = {"model.layers.0.mlp.experts.down_proj", THIN_ROLE_DOWN, 0, THIN_DTYPE_F32, 3,
                           {2, DIM, FFN}, NULL, NULL, 0, 0};
    assert_int_equal(thin_writer_add_tensor(w, &rd, rt), THIN_OK);
    assert_int_equal(thin_writer_add_tensor(w, &gd, gu), THIN_OK);
    assert_int_equal(thin_writer_add_tensor(w, &dd, dn), THIN_OK);
    thin_tensor_desc lm = {"lm_head.weight", THIN_ROLE_LM_HEAD, -1, THIN_DTYPE_F32, 2,
                           {VOCAB, DIM}, NULL, "model.embed_tokens.weight", 0, 0};
    assert_int_equal(thin_writer_begin_tensor(w, &lm), THIN_OK);
    assert_int_equal(thin_writer_end_tensor(w), THIN_OK);
    assert_int_equal(thin_writer_set_section(w, "model", hparams), THIN_OK);
    if (v.tape) {
        char *t = json_dumps(v.tape, 0);
        assert_int_equal(thin_writer_set_section(w, "tape", t), THIN_OK);
        free(t);
        json_decref(v.tape);
    }
    if (v.runtime) assert_int_equal(thin_writer_set_section(w, "runtime", v.runtime), THIN_OK);
    assert_int_equal(thin_writer_finish(w, NULL), THIN_OK);
    thin_writer_free(w);
}

typedef struct built {
    char path[256];
    thin_file *f;
    plan p;
    thin_status st;
    char err[512];
} built;

static void build(built *b, variant v, thin_dtype kv) {
    snprintf(b->path, sizeof b->path, "%s/test_plan.%d.thin", getenv("TMPDIR") ? getenv("TMPDIR")
                                                                                : "/tmp",
             (int)getpid());
    write_model(b->path, v);
    b->f = thin_file_new();
    assert_int_equal(thin_file_open(b->f, b->path, 0), THIN_OK);
    b->st = plan_build(&b->p, b->f, kv, b->err, sizeof b->err);
}

static void unbuild(built *b) {
    plan_free(&b->p);
    thin_file_free(b->f);
    unlink(b->path);
}

/* Runs 3 positions and returns the last logits. */
static void run3(const plan *p, float *logits) {
    cpu_session *s;
    char err[256];
    int32_t ids[3] = {1, 5, 9};
    assert_int_equal(cpu_session_create(&s, p, 32, 1, err, sizeof err), 0);
    float all[3 * VOCAB];
    assert_int_equal(cpu_session_forward(s, ids, 3, 0, all, NULL), 0);
    memcpy(logits, all + 2 * VOCAB, sizeof all / 3);
    int32_t bad = VOCAB;
    assert_int_equal(cpu_session_forward(s, &bad, 1, 3, NULL, NULL), -1);
    assert_int_equal(cpu_session_forward(s, ids, 1, 32, NULL, NULL), -1);
    cpu_session_free(s);
}

static void test_good_tape_compiles_and_runs(void **state) {
    (void)state;
    built b;
    build(&b, (variant){tape(), THIN_CODEC_NONE, 0, "{\"kv_cache_dtype\": \"F32\"}", 0},
          THIN_DTYPE_INVALID);
    if (b.st != THIN_OK) fail_msg("%s", b.err);
    assert_int_equal(b.p.n_ops, 18);
    assert_int_equal(b.p.kv_dtype, THIN_DTYPE_F32);
    assert_int_equal(b.p.hp.vocab_size, VOCAB);
    assert_int_equal(b.p.hp.bos_id, 1);
    assert_int_equal(b.p.hp.eos_ids[0], 2);
    assert_int_equal(b.p.hp.eos_ids[1], 3);
    assert_int_equal(b.p.hp.eos_ids[2], -1);
    /* the tied lm_head reads the embedding's bytes; counted once, whole */
    assert_ptr_equal(b.p.ops[17].w.data, b.p.ops[0].w.data);
    uint64_t total = 0;
    for (size_t i = 0; i < N_WEIGHTS; i++)
        total += (weights[i].rows ? weights[i].rows : 1) * weights[i].cols * 4;
    assert_int_equal(b.p.weight_bytes, total);
    assert_int_equal(b.p.ops[2].split, PLAN_SPLIT_NONE);
    assert_int_equal(b.p.ops[5].n_heads, HEADS);
    float logits[VOCAB];
    run3(&b.p, logits);
    for (int i = 0; i < VOCAB; i++) assert_true(isfinite(logits[i]));
    unbuild(&b);
}

static void test_zstd_and_fp8_weights_run_close(void **state) {
    (void)state;
    float ref[VOCAB], z[VOCAB], q[VOCAB];
    built b;
    build(&b, (variant){tape(), THIN_CODEC_NONE, 0, NULL, 0}, THIN_DTYPE_F32);
    assert_int_equal(b.st, THIN_OK);
    assert_int_equal(b.p.kv_dtype, THIN_DTYPE_F32);
    run3(&b.p, ref);
    unbuild(&b);
    build(&b, (variant){tape(), THIN_CODEC_ZSTD, 0, NULL, 0}, THIN_DTYPE_F32);
    if (b.st != THIN_OK) fail_msg("%s", b.err);
    run3(&b.p, z);
    unbuild(&b);
    assert_memory_equal(ref, z, sizeof ref);
    build(&b, (variant){tape(), THIN_CODEC_NONE, 1, NULL, 0}, THIN_DTYPE_F32);
    if (b.st != THIN_OK) fail_msg("%s", b.err);
    assert_int_equal(b.p.ops[2].w.dtype, THIN_DTYPE_F8_E4M3);
    assert_non_null(b.p.ops[2].w.scale);
    run3(&b.p, q);
    unbuild(&b);
    for (int i = 0; i < VOCAB; i++) assert_float_equal(q[i], ref[i], 0.05);
}

static void expect_error(json_t *t, thin_status want, const char *needle, int fp8_q) {
    built b;
    build(&b, (variant){t, THIN_CODEC_NONE, fp8_q, NULL, 0}, THIN_DTYPE_BF16);
    if (b.st != want) fail_msg("status %d, want %d: %s", b.st, want, b.err);
    if (!strstr(b.err, needle)) fail_msg("message '%s' lacks '%s'", b.err, needle);
    unbuild(&b);
}

static void test_bad_tapes_are_refused(void **state) {
    (void)state;
    json_t *t = tape();
    json_array_append_new(json_object_get(t, "ops"), op("gelu", NULL, "x", "x"));
    expect_error(t, THIN_E_UNSUPPORTED, "unknown op 'gelu'", 0);
    t = tape(); /* a soft cap without its cap, or a negative one */
    json_array_append_new(json_object_get(t, "ops"), op("softcap", NULL, "logits", NULL));
    expect_error(t, THIN_E_BAD_MANIFEST, "softcap without a cap", 0);
    t = tape();
    json_t *sc = op("softcap", NULL, "logits", NULL);
    json_object_set_new(sc, "cap", json_real(-1.0));
    json_array_append_new(json_object_get(t, "ops"), sc);
    expect_error(t, THIN_E_BAD_MANIFEST, "cap is not a positive number", 0);
    t = tape(); /* a scale op without its factor; an add whose scale is not positive (Granite's) */
    json_array_append_new(json_object_get(t, "ops"), op("scale", NULL, "logits", NULL));
    expect_error(t, THIN_E_BAD_MANIFEST, "scale without a factor", 0);
    t = tape();
    json_t *ad = op("add", NULL, "h", "x");
    json_object_set_new(ad, "scale", json_real(0.0));
    json_array_append_new(json_object_get(t, "ops"), ad);
    expect_error(t, THIN_E_BAD_MANIFEST, "scale is not a positive number", 0);
    t = tape(); /* an attention window of 0 */
    json_object_set_new(json_array_get(json_object_get(t, "ops"), 7), "window", json_integer(0));
    expect_error(t, THIN_E_BAD_MANIFEST, "window is not a positive integer", 0);
    t = tape(); /* q projection writing into a buffer of the wrong size */
    json_object_set_new(json_array_get(json_object_get(t, "ops"), 2), "out", json_string("k"));
    expect_error(t, THIN_E_SHAPE, "q_proj", 0);
    t = tape();
    json_object_set_new(json_array_get(json_object_get(t, "ops"), 3), "w", json_string("nope"));
    expect_error(t, THIN_E_NOT_FOUND, "'nope'", 0);
    t = tape(); /* a norm vector where a matrix belongs */
    json_object_set_new(json_array_get(json_object_get(t, "ops"), 3), "w", json_string(W(1)));
    expect_error(t, THIN_E_BAD_MANIFEST, "role attn_norm", 0);
    t = tape();
    json_object_set_new(json_array_get(json_object_get(t, "ops"), 2), "in", json_string("zz"));
    expect_error(t, THIN_E_BAD_MANIFEST, "'in'", 0);
    t = tape();
    json_object_del(json_object_get(t, "buffers"), "logits");
    expect_error(t, THIN_E_BAD_MANIFEST, "logits", 0);
    t = tape(); /* the attention op removed: layer 0 has no cache owner */
    json_array_remove(json_object_get(t, "ops"), 7);
    expect_error(t, THIN_E_BAD_MANIFEST, "attention", 0);
    t = tape();
    json_object_set_new(t, "version", json_integer(2));
    expect_error(t, THIN_E_UNSUPPORTED, "version", 0);
    expect_error(NULL, THIN_E_NOT_FOUND, "tape", 0);
    expect_error(tape(), THIN_E_BAD_MANIFEST, "without a scale", 2);
    /* rows of a larger weight (a fused one's part): refused past its end or of another size than
     * the output */
    t = tape();
    json_object_set_new(json_array_get(json_object_get(t, "ops"), 3), "rows", json_pack("[ii]", 6, 10));
    expect_error(t, THIN_E_SHAPE, "no rows 6..10", 0);
    t = tape();
    json_object_set_new(json_array_get(json_object_get(t, "ops"), 3), "rows", json_pack("[ii]", 0, 3));
    expect_error(t, THIN_E_BAD_MANIFEST, "rows", 0);
}

/* The tape with a LongRoPE scaling object (head_dim 4: two factors each) on both rope ops; sc is
 * stolen. */
static json_t *tape_longrope(json_t *sc) {
    json_t *t = tape();
    for (int i = 5; i <= 6; i++)
        json_object_set(json_array_get(json_object_get(t, "ops"), i), "scaling", sc);
    json_decref(sc);
    return t;
}

static json_t *longrope(void) {
    return json_pack("{ss s[ff] s[ff] si sf}", "rope_type", "longrope", "short_factor", 1.0, 1.5,
                     "long_factor", 2.0, 4.0, "original_max_position_embeddings", 16, "factor", 2.0);
}

/* LongRoPE: both tables built, the long one for the model's 32 positions (past the original 16)
 * and the short one once plan_set_ctx fits the plan to 16; cos and sin scaled by
 * sqrt(1 + ln 2 / ln 16); bad factor lists refused. */
static void test_longrope(void **state) {
    (void)state;
    built b;
    build(&b, (variant){tape_longrope(longrope()), THIN_CODEC_NONE, 0, NULL, 0}, THIN_DTYPE_F32);
    if (b.st != THIN_OK) fail_msg("%s", b.err);
    const plan_op *r = &b.p.ops[5];
    assert_int_equal(r->kind, PLAN_ROPE);
    assert_ptr_equal(r->inv_freq, r->longrope[1]);
    assert_float_equal(r->longrope[0][1], 1.0 / (1.5 * 100.0), 1e-9);
    assert_float_equal(r->longrope[1][0], 0.5, 1e-9);
    assert_float_equal(r->longrope[1][1], 1.0 / 400.0, 1e-9);
    assert_float_equal(r->rope_scale, sqrt(1.0 + log(2.0) / log(16.0)), 1e-6);
    assert_int_equal(plan_default_ctx(&b.p), 16); /* the short factors' reach, not the model's 32 */
    float lg[VOCAB], sh[VOCAB], lg2[VOCAB];
    run3(&b.p, lg);
    plan_set_ctx(&b.p, 16);
    assert_ptr_equal(r->inv_freq, r->longrope[0]);
    assert_ptr_equal(b.p.ops[6].inv_freq, b.p.ops[6].longrope[0]);
    run3(&b.p, sh);
    plan_set_ctx(&b.p, 0);
    assert_ptr_equal(r->inv_freq, r->longrope[1]);
    run3(&b.p, lg2);
    assert_memory_equal(lg, lg2, sizeof lg);
    double d = 0;
    for (int i = 0; i < VOCAB; i++) d = fmax(d, fabs((double)lg[i] - sh[i]));
    assert_true(d > 1e-6); /* the same table gives the same bits (lg2), the other moves them */
    unbuild(&b);
    json_t *sc = longrope();
    json_object_del(sc, "factor"); /* the factor defaults to 32 / 16 positions */
    build(&b, (variant){tape_longrope(sc), THIN_CODEC_NONE, 0, NULL, 0}, THIN_DTYPE_F32);
    if (b.st != THIN_OK) fail_msg("%s", b.err);
    assert_float_equal(b.p.ops[5].rope_scale, sqrt(1.0 + log(2.0) / log(16.0)), 1e-6);
    unbuild(&b);
    sc = longrope();
    json_object_del(sc, "original_max_position_embeddings");
    expect_error(tape_longrope(sc), THIN_E_BAD_MANIFEST, "original_max_position_embeddings", 0);
    sc = longrope();
    json_array_append_new(json_object_get(sc, "short_factor"), json_real(2.0));
    expect_error(tape_longrope(sc), THIN_E_BAD_MANIFEST, "short_factor is not a list", 0);
    sc = longrope();
    json_array_set_new(json_object_get(sc, "long_factor"), 1, json_real(-1.0));
    expect_error(tape_longrope(sc), THIN_E_BAD_MANIFEST, "long_factor[1]", 0);
    sc = longrope();
    json_object_set_new(sc, "attention_factor", json_string("x"));
    expect_error(tape_longrope(sc), THIN_E_BAD_MANIFEST, "attention_factor", 0);
}

static json_t *yarn(void) {
    return json_pack("{ss sf si sf}", "rope_type", "yarn", "factor", 4.0,
                     "original_max_position_embeddings", 16, "beta_slow", 0.01);
}

/* YaRN (head_dim 4, theta 1e4: frequencies 1 and 1e-2): with beta_slow 0.01 the ramp runs over
 * dims [0, 2] (ends rounded outwards), so the first frequency stays, the second is half
 * interpolated; unrounded ("truncate": false) the ramp ends at 4 ln(16 / (0.02 pi)) / (2 ln 1e4);
 * cos and sin scaled by 0.1 ln 4 + 1, or by mscale's ratio; the original context defaults to the
 * model's 32 positions; "dynamic" is no table; bad members are refused. */
static void test_yarn(void **state) {
    (void)state;
    built b;
    build(&b, (variant){tape_longrope(yarn()), THIN_CODEC_NONE, 0, NULL, 0}, THIN_DTYPE_F32);
    if (b.st != THIN_OK) fail_msg("%s", b.err);
    const plan_op *r = &b.p.ops[5];
    assert_float_equal(r->inv_freq[0], 1.0, 1e-9);
    assert_float_equal(r->inv_freq[1], 0.01 * (0.5 / 4 + 0.5), 1e-9);
    assert_float_equal(r->rope_scale, 0.1 * log(4.0) + 1, 1e-6);
    assert_int_equal(plan_default_ctx(&b.p), 32);
    assert_int_equal(plan_ctx_limit(&b.p), 64); /* YaRN's reach: 4 x 16 past the model's 32 */
    float y[VOCAB], plain[VOCAB];
    run3(&b.p, y);
    unbuild(&b);
    build(&b, (variant){tape(), THIN_CODEC_NONE, 0, NULL, 0}, THIN_DTYPE_F32);
    run3(&b.p, plain);
    unbuild(&b);
    double d = 0;
    for (int i = 0; i < VOCAB; i++) d = fmax(d, fabs((double)y[i] - plain[i]));
    assert_true(d > 1e-6);
    json_t *sc = yarn();
    json_object_set_new(sc, "truncate", json_false());
    json_object_set_new(sc, "mscale", json_real(1.0));
    json_object_set_new(sc, "mscale_all_dim", json_real(0.5));
    build(&b, (variant){tape_longrope(sc), THIN_CODEC_NONE, 0, NULL, 0}, THIN_DTYPE_F32);
    if (b.st != THIN_OK) fail_msg("%s", b.err);
    const double hi = 4 * log(16 / (0.01 * 2 * M_PI)) / (2 * log(1e4)), ramp = 1 / hi;
    assert_float_equal(b.p.ops[5].inv_freq[1], 0.01 * (ramp / 4 + 1 - ramp), 1e-9);
    assert_float_equal(b.p.ops[5].rope_scale, (0.1 * log(4.0) + 1) / (0.05 * log(4.0) + 1), 1e-6);
    unbuild(&b);
    sc = yarn(); /* beta_slow 1 and the model's 32 positions: the ramp over [0, 1] */
    json_object_del(sc, "original_max_position_embeddings");
    json_object_del(sc, "beta_slow");
    json_object_set_new(sc, "type", json_string("yarn")); /* the older key */
    json_object_del(sc, "rope_type");
    build(&b, (variant){tape_longrope(sc), THIN_CODEC_NONE, 0, NULL, 0}, THIN_DTYPE_F32);
    if (b.st != THIN_OK) fail_msg("%s", b.err);
    assert_float_equal(b.p.ops[5].inv_freq[0], 1.0, 1e-9);
    assert_float_equal(b.p.ops[5].inv_freq[1], 0.01 / 4, 1e-9);
    assert_int_equal(plan_ctx_limit(&b.p), 128);
    unbuild(&b);
    build(&b, (variant){tape_longrope(json_pack("{ss sf}", "rope_type", "dynamic", "factor", 2.0)),
                        THIN_CODEC_NONE, 0, NULL, 0}, THIN_DTYPE_F32);
    if (b.st != THIN_OK) fail_msg("%s", b.err);
    assert_null(b.p.ops[5].inv_freq);
    assert_float_equal(plan_rope_scale(&b.p.ops[5]), 1.0, 0);
    unbuild(&b);
    sc = yarn();
    json_object_del(sc, "factor");
    expect_error(tape_longrope(sc), THIN_E_BAD_MANIFEST, "yarn scaling without a factor", 0);
    sc = yarn();
    json_object_set_new(sc, "truncate", json_string("no"));
    expect_error(tape_longrope(sc), THIN_E_BAD_MANIFEST, "'truncate' is not a boolean", 0);
    sc = yarn();
    json_object_set_new(sc, "beta_fast", json_real(-1));
    expect_error(tape_longrope(sc), THIN_E_BAD_MANIFEST, "'beta_fast' is not a positive number", 0);
    expect_error(tape_longrope(json_pack("{ss}", "rope_type", "ntk-by-parts")), THIN_E_UNSUPPORTED,
                 "'ntk-by-parts' is not supported", 0);
}

/* Partial rotary (Phi-4-mini): rot_dim 2 of head_dim 4 runs, with the plan's LongRoPE tables of
 * rot_dim/2 = 1 factor, and differs from whole heads; an odd rot_dim, one past head_dim, or a
 * factor list for whole heads is refused. */
static void test_partial_rotary(void **state) {
    (void)state;
    json_t *t = tape();
    for (int i = 5; i <= 6; i++)
        json_object_set_new(json_array_get(json_object_get(t, "ops"), i), "rot_dim", json_integer(2));
    built b;
    build(&b, (variant){t, THIN_CODEC_NONE, 0, NULL, 0}, THIN_DTYPE_F32);
    if (b.st != THIN_OK) fail_msg("%s", b.err);
    assert_int_equal(b.p.ops[5].rot_dim, 2);
    float part[VOCAB], whole[VOCAB];
    run3(&b.p, part);
    unbuild(&b);
    build(&b, (variant){tape(), THIN_CODEC_NONE, 0, NULL, 0}, THIN_DTYPE_F32);
    assert_int_equal(b.p.ops[5].rot_dim, 4);
    assert_int_equal(plan_default_ctx(&b.p), 32); /* no LongRoPE: the model's limit */
    run3(&b.p, whole);
    unbuild(&b);
    double d = 0;
    for (int i = 0; i < VOCAB; i++) d = fmax(d, fabs((double)part[i] - whole[i]));
    assert_true(d > 1e-6);
    json_t *sc = json_pack("{ss s[f] s[f] si}", "rope_type", "longrope", "short_factor", 1.0,
                           "long_factor", 2.0, "original_max_position_embeddings", 16);
    t = tape_longrope(sc);
    for (int i = 5; i <= 6; i++)
        json_object_set_new(json_array_get(json_object_get(t, "ops"), i), "rot_dim", json_integer(2));
    build(&b, (variant){t, THIN_CODEC_NONE, 0, NULL, 0}, THIN_DTYPE_F32);
    if (b.st != THIN_OK) fail_msg("%s", b.err);
    assert_float_equal(b.p.ops[5].inv_freq[0], 0.5, 1e-9);
    unbuild(&b);
    t = tape_longrope(longrope()); /* two factors: whole heads' count */
    json_object_set_new(json_array_get(json_object_get(t, "ops"), 5), "rot_dim", json_integer(2));
    expect_error(t, THIN_E_BAD_MANIFEST, "rot_dim/2 = 1", 0);
    for (int r = 3; r <= 6; r += 3) {
        t = tape();
        json_object_set_new(json_array_get(json_object_get(t, "ops"), 6), "rot_dim", json_integer(r));
        expect_error(t, THIN_E_SHAPE, "rot_dim", 0);
    }
}

/* The tape with a bias op after the v projection adding k_proj.bias into buffer `out`. */
static json_t *tape_bias(const char *out) {
    json_t *t = tape();
    json_t *o = op("bias", "model.layers.0.self_attn.k_proj.bias", NULL, out);
    json_object_set_new(o, "layer", json_integer(0));
    json_array_insert_new(json_object_get(t, "ops"), 5, o);
    return t;
}

/* Qwen2's biases: a bias op compiles, adds its vector (a zero bias changes no bit, another moves
 * the logits), and is refused with a vector of the wrong size or a weight of another role. */
static void test_bias_op(void **state) {
    (void)state;
    float ref[VOCAB], zero[VOCAB], with[VOCAB];
    built b;
    build(&b, (variant){tape(), THIN_CODEC_NONE, 0, NULL, 0}, THIN_DTYPE_F32);
    assert_int_equal(b.st, THIN_OK);
    run3(&b.p, ref);
    unbuild(&b);
    build(&b, (variant){tape_bias("k"), THIN_CODEC_NONE, 0, NULL, 2}, THIN_DTYPE_F32);
    if (b.st != THIN_OK) fail_msg("%s", b.err);
    assert_int_equal(b.p.n_ops, 19);
    assert_int_equal(b.p.ops[5].kind, PLAN_BIAS);
    assert_int_equal(b.p.ops[5].w_role, THIN_ROLE_K_BIAS);
    assert_int_equal(b.p.ops[5].out, plan_buf(&b.p, "k"));
    run3(&b.p, zero);
    unbuild(&b);
    assert_memory_equal(ref, zero, sizeof ref);
    build(&b, (variant){tape_bias("v"), THIN_CODEC_NONE, 0, NULL, 1}, THIN_DTYPE_F32);
    if (b.st != THIN_OK) fail_msg("%s", b.err);
    run3(&b.p, with);
    unbuild(&b);
    double diff = 0;
    for (int i = 0; i < VOCAB; i++) diff = fmax(diff, fabs((double)with[i] - ref[i]));
    assert_true(diff > 1e-3);
    built e;
    build(&e, (variant){tape_bias("q"), THIN_CODEC_NONE, 0, NULL, 1}, THIN_DTYPE_F32);
    assert_int_equal(e.st, THIN_E_SHAPE);
    assert_non_null(strstr(e.err, "k_proj.bias"));
    unbuild(&e);
    json_t *t = tape_bias("x");
    json_object_set_new(json_array_get(json_object_get(t, "ops"), 5), "w", json_string(W(1)));
    build(&e, (variant){t, THIN_CODEC_NONE, 0, NULL, 1}, THIN_DTYPE_F32);
    assert_int_equal(e.st, THIN_E_BAD_MANIFEST);
    assert_non_null(strstr(e.err, "role attn_norm"));
    unbuild(&e);
}

/* The tape with the split marks of a Llama layer: q, k, v, gate, up and the LM head "col", o
 * and down "row". */
static json_t *tape_split(void) {
    json_t *t = tape(), *ops = json_object_get(t, "ops");
    const size_t col[] = {2, 3, 4, 11, 12, 17}, row[] = {8, 14};
    for (size_t i = 0; i < sizeof col / sizeof col[0]; i++)
        json_object_set_new(json_array_get(ops, col[i]), "split", json_string("col"));
    for (size_t i = 0; i < sizeof row / sizeof row[0]; i++)
        json_object_set_new(json_array_get(ops, row[i]), "split", json_string("row"));
    return t;
}

/* plan_check_split on variant t (stolen) over n devices: THIN_OK, or an error whose message has
 * needle. */
static void expect_split(json_t *t, uint32_t n, const char *needle) {
    built b;
    build(&b, (variant){t, THIN_CODEC_NONE, 0, NULL, 0}, THIN_DTYPE_F32);
    if (b.st != THIN_OK) fail_msg("%s", b.err);
    char err[512] = "";
    const thin_status st = plan_check_split(&b.p, n, err, sizeof err);
    if (!needle && st != THIN_OK) fail_msg("%u devices: %s", n, err);
    if (needle && (st == THIN_OK || !strstr(err, needle)))
        fail_msg("%u devices: status %d, message '%s' lacks '%s'", n, st, err, needle);
    unbuild(&b);
}

/* Sets op i's split ("col", "row", or NULL for none). */
static json_t *set_split(json_t *t, size_t i, const char *split) {
    json_t *o = json_array_get(json_object_get(t, "ops"), i);
    if (split) json_object_set_new(o, "split", json_string(split));
    else json_object_del(o, "split");
    return t;
}

static void test_split_over_devices(void **state) {
    (void)state;
    expect_split(tape_split(), 1, NULL);
    expect_split(tape(), 2, NULL); /* nothing split: every device computes everything */
    /* two query heads, one KV head: one query head a device, the KV head on both */
    expect_split(tape_split(), 2, NULL);
    /* four devices: RoPE holds each q head on two of them, the attention wants them divided */
    expect_split(tape_split(), 4, "tape op 7 (attention, layer 0): its query heads (2) do not divide");
    json_t *t;
    /* with q, k and v whole (every device runs the attention), the MLP's marks are checked */
    t = set_split(set_split(set_split(tape_split(), 2, NULL), 3, NULL), 4, NULL);
    expect_split(set_split(t, 8, NULL), 2, NULL);
    t = set_split(set_split(set_split(tape_split(), 2, NULL), 3, NULL), 4, NULL);
    expect_split(t, 2, "tape op 8 (linear model.layers.0.self_attn.o_proj.weight): a row split's "
                       "input is whole");
    t = set_split(set_split(set_split(tape_split(), 2, NULL), 3, NULL), 4, NULL);
    expect_split(set_split(t, 8, "col"), 2, "tape op 9 (add): one operand is divided");
    t = set_split(set_split(set_split(tape_split(), 2, NULL), 3, NULL), 4, NULL);
    expect_split(set_split(set_split(t, 8, NULL), 11, NULL), 2, "tape op 13 (silu_mul): one operand is divided");
    t = set_split(set_split(set_split(tape_split(), 2, NULL), 3, NULL), 4, NULL);
    expect_split(set_split(t, 8, NULL), 3, "tape op 17 (linear model.embed_tokens.weight): its rows (16) do not");
    /* a split that names neither way */
    expect_error(set_split(tape_split(), 2, "diag"), THIN_E_BAD_MANIFEST, "split is neither", 0);
    t = tape_split();
    json_object_set_new(json_array_get(json_object_get(t, "ops"), 2), "split", json_integer(1));
    expect_error(t, THIN_E_BAD_MANIFEST, "split is neither", 0);
}

/* The tape with its MLP (ops 11-14) as a mixture of 2 experts, each the MLP's own weights: by name
 * (stacked 0) or as rows of the stacked tensors (1). */
static json_t *tape_moe(int stacked, int top_k, int norm) {
    json_t *t = tape(), *ops = json_object_get(t, "ops"), *l[3];
    for (int i = 0; i < 4; i++) json_array_remove(ops, 11);
    for (int j = 0; j < 3; j++) {
        l[j] = json_array();
        for (int e = 0; e < 2; e++)
            json_array_append_new(l[j], !stacked ? json_string(W(7 + j))
                                        : j < 2 ? json_pack("[sii]", "model.layers.0.mlp.experts.gate_up_proj",
                                                            (2 * e + j) * FFN, (2 * e + j + 1) * FFN)
                                                : json_pack("[sii]", "model.layers.0.mlp.experts.down_proj", e * DIM,
                                                            (e + 1) * DIM));
    }
    json_array_insert_new(ops, 11, json_pack("{ss ss ss si ss si sb so so so}", "op", "moe", "in", "h", "out", "h",
                                             "layer", 0, "router", "model.layers.0.mlp.gate.weight", "top_k",
                                             top_k, "norm_topk", norm, "gate", l[0], "up", l[1], "down", l[2]));
    return t;
}

/* A mixture of two experts that are both the MLP: with top_k 1 (weight 1) the dense model's
 * logits bit for bit, by name and by rows of stacked tensors; with both experts (renormalized) the
 * same within rounding; malformed mixtures refused. */
static void test_moe_op(void **state) {
    (void)state;
    float ref[VOCAB], got[VOCAB];
    built b;
    build(&b, (variant){tape(), THIN_CODEC_NONE, 0, NULL, 0}, THIN_DTYPE_F32);
    assert_int_equal(b.st, THIN_OK);
    run3(&b.p, ref);
    unbuild(&b);
    for (int stacked = 0; stacked < 2; stacked++)
        for (int k = 1; k <= 2; k++) {
            build(&b, (variant){tape_moe(stacked, k, 1), THIN_CODEC_NONE, 0, NULL, 0}, THIN_DTYPE_F32);
            if (b.st != THIN_OK) fail_msg("%s", b.err);
            const plan_op *o = &b.p.ops[11];
            assert_int_equal(o->kind, PLAN_MOE);
            assert_int_equal(o->n_experts, 2);
            assert_int_equal(o->top_k, k);
            assert_int_equal(o->moe_inter, FFN);
            assert_int_equal(o->w_role, THIN_ROLE_ROUTER);
            run3(&b.p, got);
            unbuild(&b);
            if (k == 1)
                assert_memory_equal(got, ref, sizeof ref);
            for (int i = 0; i < VOCAB; i++) assert_float_equal(got[i], ref[i], 1e-5);
        }
    json_t *t = tape_moe(0, 3, 1);
    expect_error(t, THIN_E_BAD_MANIFEST, "top_k 3 exceeds its 2 experts", 0);
    t = tape_moe(0, 1, 1);
    json_array_remove(json_object_get(json_array_get(json_object_get(t, "ops"), 11), "up"), 0);
    expect_error(t, THIN_E_BAD_MANIFEST, "moe 'up' is not a list of one name per expert", 0);
    t = tape_moe(0, 1, 1);
    json_object_set_new(json_array_get(json_object_get(t, "ops"), 11), "router", json_string(W(7)));
    expect_error(t, THIN_E_BAD_MANIFEST, "role gate, unfit", 0);
    t = tape_moe(0, 1, 1);
    json_object_del(json_array_get(json_object_get(t, "ops"), 11), "layer");
    expect_error(t, THIN_E_BAD_MANIFEST, "moe without a layer", 0);
    t = tape_moe(0, 1, 1);
    json_object_set_new(json_array_get(json_object_get(t, "ops"), 11), "norm_topk", json_integer(1));
    expect_error(t, THIN_E_BAD_MANIFEST, "norm_topk is not a boolean", 0);
    t = tape_moe(0, 1, 1); /* an up weight in a gate's place: its role */
    json_array_set_new(json_object_get(json_array_get(json_object_get(t, "ops"), 11), "gate"), 1, json_string(W(8)));
    expect_error(t, THIN_E_BAD_MANIFEST, "role up, unfit", 0);
    t = tape_moe(1, 1, 1); /* rows of a stack: past its end, of another count, not a triple */
    json_array_set_new(json_object_get(json_array_get(json_object_get(t, "ops"), 11), "down"), 1,
                       json_pack("[sii]", "model.layers.0.mlp.experts.down_proj", 12, 20));
    expect_error(t, THIN_E_SHAPE, "no rows 12..20", 0);
    t = tape_moe(1, 1, 1);
    json_array_set_new(json_object_get(json_array_get(json_object_get(t, "ops"), 11), "up"), 0,
                       json_pack("[sii]", "model.layers.0.mlp.experts.gate_up_proj", 12, 20));
    expect_error(t, THIN_E_SHAPE, "are not 12 rows", 0);
    t = tape_moe(1, 1, 1);
    json_array_set_new(json_object_get(json_array_get(json_object_get(t, "ops"), 11), "up"), 0,
                       json_pack("[si]", "model.layers.0.mlp.experts.gate_up_proj", 12));
    expect_error(t, THIN_E_BAD_MANIFEST, "neither a name nor [name, first, end]", 0);
    /* a shared expert (the MLP again) beside the routed ones: with weight 1 (no gate) the routed
     * sum plus the MLP; malformed ones refused */
    t = tape_moe(0, 1, 1);
    json_object_set_new(json_array_get(json_object_get(t, "ops"), 11), "shared", json_pack("[sss]", W(7), W(8), W(9)));
    built sb;
    build(&sb, (variant){t, THIN_CODEC_NONE, 0, NULL, 0}, THIN_DTYPE_F32);
    if (sb.st != THIN_OK) fail_msg("%s", sb.err);
    assert_int_equal(sb.p.ops[11].shared_inter, FFN);
    assert_null(sb.p.ops[11].shared_gate.data);
    run3(&sb.p, got);
    unbuild(&sb);
    int differs = 0;
    for (int i = 0; i < VOCAB; i++) differs |= got[i] != ref[i] && isfinite(got[i]);
    assert_true(differs);
    t = tape_moe(0, 1, 1);
    json_object_set_new(json_array_get(json_object_get(t, "ops"), 11), "shared", json_pack("[ss]", W(7), W(8)));
    expect_error(t, THIN_E_BAD_MANIFEST, "moe shared is not [gate, up, down]", 0);
    t = tape_moe(0, 1, 1);
    json_object_set_new(json_array_get(json_object_get(t, "ops"), 11), "shared_gate",
                        json_string("model.layers.0.mlp.gate.weight"));
    expect_error(t, THIN_E_BAD_MANIFEST, "shared_gate without a shared expert", 0);
    /* DeepSeek-V3's routing: two identical experts with sigmoid scores, top 1 in 2 groups of 1, its
     * weight renormalized to 1: the dense model's bits again; bad scoring, groups, bias refused */
    t = tape_moe(0, 1, 1);
    json_t *mo = json_array_get(json_object_get(t, "ops"), 11);
    json_object_set_new(mo, "scoring", json_string("sigmoid"));
    json_object_set_new(mo, "n_group", json_integer(1));
    build(&sb, (variant){t, THIN_CODEC_NONE, 0, NULL, 0}, THIN_DTYPE_F32);
    if (sb.st != THIN_OK) fail_msg("%s", sb.err);
    assert_true(sb.p.ops[11].moe_sigmoid);
    run3(&sb.p, got);
    unbuild(&sb);
    assert_memory_equal(got, ref, sizeof ref);
    t = tape_moe(0, 1, 1);
    json_object_set_new(json_array_get(json_object_get(t, "ops"), 11), "scoring", json_string("relu"));
    expect_error(t, THIN_E_BAD_MANIFEST, "scoring is neither", 0);
    t = tape_moe(0, 2, 1); /* 2 groups of 1, one chosen: too few experts for top 2 */
    json_object_set_new(json_array_get(json_object_get(t, "ops"), 11), "n_group", json_integer(2));
    expect_error(t, THIN_E_BAD_MANIFEST, "groups (2, 1 chosen) do not fit 2 experts and top_k 2", 0);
    t = tape_moe(0, 1, 1); /* a correction bias of the wrong length */
    json_object_set_new(json_array_get(json_object_get(t, "ops"), 11), "score_bias", json_string(W(1)));
    expect_error(t, THIN_E_BAD_MANIFEST, "role attn_norm", 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_moe_op),
        cmocka_unit_test(test_good_tape_compiles_and_runs),
        cmocka_unit_test(test_zstd_and_fp8_weights_run_close),
        cmocka_unit_test(test_bias_op),
        cmocka_unit_test(test_longrope),
        cmocka_unit_test(test_yarn),
        cmocka_unit_test(test_partial_rotary),
        cmocka_unit_test(test_bad_tapes_are_refused),
        cmocka_unit_test(test_split_over_devices),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
