/* roles.c — tensor name -> role + layer (see roles.h). */
#include "roles.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A layer tensor's name after "model.layers.N." and before ".weight" (or ".bias"), and its role. */
typedef struct suffix_role {
    const char *suffix;
    thin_role role;
} suffix_role;

static const suffix_role layer_names[] = {
    {"self_attn.q_proj", THIN_ROLE_Q},
    {"self_attn.k_proj", THIN_ROLE_K},
    {"self_attn.v_proj", THIN_ROLE_V},
    {"self_attn.o_proj", THIN_ROLE_O},
    {"self_attn.qkv_proj", THIN_ROLE_QKV},
    {"mlp.gate_proj", THIN_ROLE_GATE},
    {"mlp.up_proj", THIN_ROLE_UP},
    {"mlp.gate_up_proj", THIN_ROLE_GATE_UP},
    {"mlp.down_proj", THIN_ROLE_DOWN},
    {"input_layernorm", THIN_ROLE_ATTN_NORM},
    {"post_attention_layernorm", THIN_ROLE_FFN_NORM},
    {"self_attn.q_norm", THIN_ROLE_Q_NORM},
    {"self_attn.k_norm", THIN_ROLE_K_NORM},
    /* Granite's MoE: its experts stacked, [E, 2 I, hidden] and [E, hidden, I], and its router */
    {"block_sparse_moe.input_linear", THIN_ROLE_GATE_UP},
    {"block_sparse_moe.output_linear", THIN_ROLE_DOWN},
    {"block_sparse_moe.router.layer", THIN_ROLE_ROUTER},
};
#define N_LAYER_NAMES (sizeof layer_names / sizeof layer_names[0])

/* Biases with a role of their own (the tape adds them after their projection; other biases
 * keep role other). */
static const suffix_role bias_names[] = {
    {"self_attn.q_proj", THIN_ROLE_Q_BIAS},
    {"self_attn.k_proj", THIN_ROLE_K_BIAS},
    {"self_attn.v_proj", THIN_ROLE_V_BIAS},
};
#define N_BIAS_NAMES (sizeof bias_names / sizeof bias_names[0])

static const struct {
    const char *stem; /* without ".weight" */
    thin_role role;
} global_names[] = {
    {"model.embed_tokens", THIN_ROLE_EMBEDDING},
    {"model.norm", THIN_ROLE_FINAL_NORM},
    {"lm_head", THIN_ROLE_LM_HEAD},
};
#define N_GLOBAL_NAMES (sizeof global_names / sizeof global_names[0])

/* Gemma's norms ("model.layers.N." + suffix + ".weight"): four a layer, the attention's and the
 * MLP's output normalized before each residual add, so post_attention_layernorm is not the MLP's
 * input norm that Llama's is (OLMo 2 names its two post-norms the same way). */
static const suffix_role gemma_names[] = {
    {"post_attention_layernorm", THIN_ROLE_ATTN_POST_NORM},
    {"pre_feedforward_layernorm", THIN_ROLE_FFN_NORM},
    {"post_feedforward_layernorm", THIN_ROLE_FFN_POST_NORM},
};
#define N_GEMMA_NAMES (sizeof gemma_names / sizeof gemma_names[0])

int roles_family_post_norms(const char *family)
{
    return family && (strcmp(family, "gemma3") == 0 || strcmp(family, "gemma2") == 0 ||
                      strcmp(family, "olmo2") == 0);
}

static int ends_with(const char *s, size_t n, const char *suffix)
{
    size_t k = strlen(suffix);
    return n >= k && memcmp(s + n - k, suffix, k) == 0;
}

static int32_t parse_index(const char *p, const char **end);

/* Parses "model.layers.N." at the start of name: returns N (>= 0) and the rest, or -1. */
static int32_t layer_prefix(const char *name, const char **rest)
{
    static const char pre[] = "model.layers.";
    const char *p;
    if (strncmp(name, pre, sizeof pre - 1) != 0)
        return -1;
    const int32_t v = parse_index(name + sizeof pre - 1, &p);
    if (v < 0 || *p != '.')
        return -1;
    *rest = p + 1;
    return v;
}

/* Role of suffix rest[0..rn) in table t of n entries, or -1. */
static int suffix_role_of(const suffix_role *t, size_t n, const char *rest, size_t rn)
{
    for (size_t i = 0; i < n; i++)
        if (strlen(t[i].suffix) == rn && memcmp(rest, t[i].suffix, rn) == 0)
            return (int)t[i].role;
    return -1;
}

/* "model.layers.<layer>.<suffix><ext>" for `role` from table t of n entries into buf: the
 * snprintf count, or -1 where the table has no such role. */
static int suffix_name(const suffix_role *t, size_t n, thin_role role, int32_t layer,
                       const char *ext, char *buf, size_t cap)
{
    for (size_t i = 0; layer >= 0 && i < n; i++)
        if (t[i].role == role)
            return snprintf(buf, cap, "model.layers.%d.%s%s", (int)layer, t[i].suffix, ext);
    return -1;
}

/* A mixture of experts' weights after "model.layers.N.": the router's stem and the experts'
 * prefix, then "<E>." and one of the three projections' names (Qwen3-MoE's and OLMoE's, then
 * Mixtral's). */
static const struct {
    const char *router, *experts, *proj[3]; /* gate, up, down */
} moe_names[] = {
    {"mlp.gate", "mlp.experts.", {"gate_proj", "up_proj", "down_proj"}},
    {"block_sparse_moe.gate", "block_sparse_moe.experts.", {"w1", "w3", "w2"}},
};
static const thin_role moe_roles[3] = {THIN_ROLE_GATE, THIN_ROLE_UP, THIN_ROLE_DOWN};
#define N_MOE_NAMES (sizeof moe_names / sizeof moe_names[0])

/* Parses a decimal number without leading zeros at p, up to INT32_MAX / 2: the number and *end
 * after it, or -1. */
static int32_t parse_index(const char *p, const char **end)
{
    if (*p < '0' || *p > '9' || (p[0] == '0' && p[1] >= '0' && p[1] <= '9'))
        return -1;
    long v = 0;
    while (*p >= '0' && *p <= '9') {
        v = v * 10 + (*p++ - '0');
        if (v > INT32_MAX / 2)
            return -1;
    }
    *end = p;
    return (int32_t)v;
}

/* Qwen2-MoE's shared expert beside the routed ones, and the gate that scales its output. */
static const suffix_role shared_names[] = {
    {"mlp.shared_expert.gate_proj", THIN_ROLE_GATE},
    {"mlp.shared_expert.up_proj", THIN_ROLE_UP},
    {"mlp.shared_expert.down_proj", THIN_ROLE_DOWN},
    {"mlp.shared_expert_gate", THIN_ROLE_ROUTER},
    /* GLM-4.5's (DeepSeek-V3's naming): shared experts, plural, without a gate */
    {"mlp.shared_experts.gate_proj", THIN_ROLE_GATE},
    {"mlp.shared_experts.up_proj", THIN_ROLE_UP},
    {"mlp.shared_experts.down_proj", THIN_ROLE_DOWN},
};
#define N_SHARED_NAMES (sizeof shared_names / sizeof shared_names[0])

/* A layer's parameters named without ".weight": experts stacked as transformers 5 saves them
 * ([E, 2 I, hidden] and [E, hidden, I]), and DeepSeek-V3's and GLM-4.5's router bias, which only
 * the choice of experts adds. */
static const suffix_role bare_names[] = {
    {"mlp.experts.gate_up_proj", THIN_ROLE_GATE_UP},
    {"mlp.experts.down_proj", THIN_ROLE_DOWN},
    {"mlp.gate.e_score_correction_bias", THIN_ROLE_ROUTER},
};
#define N_BARE_NAMES (sizeof bare_names / sizeof bare_names[0])

/* Role of a layer's mixture-of-experts weight rest[0..rn) (router, or an expert's gate, up or
 * down, with *expert set; a shared expert's, without), or -1. */
static int moe_role(const char *rest, size_t rn, int32_t *expert)
{
    const int sh = suffix_role_of(shared_names, N_SHARED_NAMES, rest, rn);
    if (sh >= 0)
        return sh;
    for (size_t i = 0; i < N_MOE_NAMES; i++) {
        if (strlen(moe_names[i].router) == rn && memcmp(rest, moe_names[i].router, rn) == 0)
            return THIN_ROLE_ROUTER;
        const size_t k = strlen(moe_names[i].experts);
        const char *p;
        if (rn <= k || memcmp(rest, moe_names[i].experts, k) != 0)
            continue;
        const int32_t e = parse_index(rest + k, &p);
        if (e < 0 || p >= rest + rn || *p != '.')
            continue;
        p++;
        for (int j = 0; j < 3; j++)
            if (strlen(moe_names[i].proj[j]) == (size_t)(rest + rn - p) &&
                memcmp(p, moe_names[i].proj[j], (size_t)(rest + rn - p)) == 0) {
                *expert = e;
                return moe_roles[j];
            }
    }
    return -1;
}

/* Role of "stem" (a name without its last component), or -1; *expert: the expert of an
 * expert's weight, else -1. */
static int stem_role(const char *stem, size_t n, int32_t *layer, int32_t *expert)
{
    const char *rest;
    *layer = -1;
    *expert = -1;
    for (size_t i = 0; i < N_GLOBAL_NAMES; i++)
        if (strlen(global_names[i].stem) == n && memcmp(stem, global_names[i].stem, n) == 0)
            return global_names[i].role;
    int32_t l = layer_prefix(stem, &rest);
    if (l < 0)
        return -1;
    *layer = l;
    const size_t rn = n - (size_t)(rest - stem);
    const int r = suffix_role_of(layer_names, N_LAYER_NAMES, rest, rn);
    return r >= 0 ? r : moe_role(rest, rn, expert);
}

roles_kind roles_map_expert(const char *name, thin_role *role, int32_t *layer, int32_t *expert)
{
    size_t n = strlen(name);
    const char *rest;
    int32_t l = layer_prefix(name, &rest), e;
    *role = THIN_ROLE_OTHER;
    *layer = l;
    *expert = -1;
    int r = l >= 0 ? suffix_role_of(bare_names, N_BARE_NAMES, rest, strlen(rest)) : -1;
    if (r >= 0) {
        *role = (thin_role)r;
        return ROLES_KNOWN;
    }
    if (ends_with(name, n, ".weight.scale")) {
        r = stem_role(name, n - strlen(".weight.scale"), &l, &e);
        if (r >= 0 && r != THIN_ROLE_SCALE) {
            *role = THIN_ROLE_SCALE;
            return ROLES_KNOWN;
        }
        return ROLES_UNKNOWN;
    }
    if (ends_with(name, n, ".weight")) {
        r = stem_role(name, n - strlen(".weight"), &l, &e);
        if (r >= 0) {
            *role = (thin_role)r;
            *expert = e;
            return ROLES_KNOWN;
        }
        return ROLES_UNKNOWN;
    }
    if (ends_with(name, n, ".bias") && stem_role(name, n - strlen(".bias"), &l, &e) >= 0) {
        if (l < 0)
            return ROLES_BIAS;
        r = suffix_role_of(bias_names, N_BIAS_NAMES, rest, n - strlen(".bias") - (size_t)(rest - name));
        if (r < 0)
            return ROLES_BIAS;
        *role = (thin_role)r;
        return ROLES_KNOWN;
    }
    return ROLES_UNKNOWN;
}

roles_kind roles_map(const char *name, thin_role *role, int32_t *layer)
{
    int32_t e;
    return roles_map_expert(name, role, layer, &e);
}

int roles_name(thin_role role, int32_t layer, char *buf, size_t cap)
{
    int n = -1;
    for (size_t i = 0; i < N_GLOBAL_NAMES; i++)
        if (global_names[i].role == role)
            n = snprintf(buf, cap, "%s.weight", global_names[i].stem);
    if (n < 0)
        n = suffix_name(layer_names, N_LAYER_NAMES, role, layer, ".weight", buf, cap);
    if (n < 0)
        n = suffix_name(bias_names, N_BIAS_NAMES, role, layer, ".bias", buf, cap);
    return n < 0 || (size_t)n >= cap ? -1 : 0;
}

roles_kind roles_map_family(const char *family, const char *name, thin_role *role, int32_t *layer,
                            int32_t *expert)
{
    *expert = -1;
    /* a multimodal checkpoint's text model (Gemma 3's, Mistral 3's): its names as the text-only
     * model's, whatever the family */
    static const char *const prefixes[][2] = {{"language_model.model.", "model."},
                                              {"model.language_model.", "model."},
                                              {"language_model.lm_head.", "lm_head."}};
    for (size_t i = 0; i < sizeof prefixes / sizeof prefixes[0]; i++) {
        const size_t k = strlen(prefixes[i][0]);
        if (strncmp(name, prefixes[i][0], k) == 0 && strlen(name + k) < 200) {
            char plain[216];
            snprintf(plain, sizeof plain, "%s%s", prefixes[i][1], name + k);
            return roles_map_family(family, plain, role, layer, expert);
        }
    }
    const char *rest;
    const size_t n = strlen(name);
    const int32_t l = roles_family_post_norms(family) && ends_with(name, n, ".weight")
                          ? layer_prefix(name, &rest) : -1;
    const int r = l < 0 ? -1
                        : suffix_role_of(gemma_names, N_GEMMA_NAMES, rest,
                                         n - strlen(".weight") - (size_t)(rest - name));
    if (r < 0)
        return roles_map_expert(name, role, layer, expert);
    *role = (thin_role)r;
    *layer = l;
    return ROLES_KNOWN;
}

int roles_name_family(const char *family, thin_role role, int32_t layer, char *buf, size_t cap)
{
    const int n = roles_family_post_norms(family)
                      ? suffix_name(gemma_names, N_GEMMA_NAMES, role, layer, ".weight", buf, cap) : -1;
    if (n < 0)
        return roles_name(role, layer, buf, cap);
    return (size_t)n >= cap ? -1 : 0;
}

int roles_moe_name(const char *family, thin_role role, int32_t layer, int32_t expert, char *buf,
                   size_t cap)
{
    const int m = family && strcmp(family, "mixtral") == 0; /* block_sparse_moe.*, w1/w3/w2 */
    int n = -1;
    if (layer < 0)
        return -1;
    if (role == THIN_ROLE_ROUTER)
        n = snprintf(buf, cap, "model.layers.%d.%s.weight", (int)layer, moe_names[m].router);
    for (int j = 0; expert >= 0 && j < 3; j++)
        if (role == moe_roles[j])
            n = snprintf(buf, cap, "model.layers.%d.%s%d.%s.weight", (int)layer,
                         moe_names[m].experts, (int)expert, moe_names[m].proj[j]);
    return n < 0 || (size_t)n >= cap ? -1 : 0;
}
