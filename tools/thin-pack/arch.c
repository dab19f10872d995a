/* arch.c — config.json -> model hyperparameters and execution tape (see arch.h, SPEC.md §8, §10). */
#include "arch.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "roles.h"

typedef struct hp {
    int64_t vocab, hidden, inter, n_layers, n_heads, n_kv, head_dim, max_pos;
    int64_t rot_dim;      /* the leading dims of each head that RoPE rotates (partial_rotary_factor) */
    double eps, theta;
    json_t *rope_scaling; /* owned reference, NULL or JSON null when absent */
    int tie;
    unsigned char *rope;  /* n_layers flags: 1 = the layer applies RoPE */
    unsigned char *bias;  /* n_layers masks of the biases present: 1 q, 2 k, 4 v (Qwen2) */
    unsigned char *fused; /* n_layers masks of the fused weights: 1 qkv_proj, 2 gate_up_proj (Phi-3) */
    /* Gemma 3 */
    int gemma;            /* 1: Gemma's layer (norms counted from 1, four a layer, GELU MLP) */
    unsigned char *sliding; /* n_layers flags: 1 = the layer's attention slides over `window` */
    int64_t window;       /* sliding_window */
    double local_theta;   /* the sliding layers' RoPE base (unscaled) */
    double attn_scale;    /* the attention's scale: Gemma's query_pre_attn_scalar^-1/2, Granite's
                             attention_multiplier; 0: 1/sqrt(head_dim), left out of the tape */
    double embed_scale;   /* the embedding's factor: Gemma's sqrt(hidden_size), Granite's
                             embedding_multiplier where not 1; 0: none */
    int no_tape;          /* a reason not to write a tape was already told (bad layer_types) */
    int gemma3;           /* Gemma 3: q/k norms, the sliding layers' own RoPE base */
    int olmo2;            /* OLMo 2: no input norms, the attention's and the MLP's outputs
                             normalized (as Gemma's post-norms), q and k normalized whole */
    int post_norms;       /* Gemma or OLMo 2: the o and down outputs normalized before their adds */
    const char *family;
    double attn_softcap, logit_softcap; /* Gemma 2's soft caps (0: none) */
    /* Granite: residual_multiplier and 1 / logits_scaling (0 where the family has none) */
    double res_mult, logit_mult;
    const char *pre, *head; /* ctx's tensor prefix and LM head name */
    int qk_whole;         /* OLMo 2, OLMoE: q and k normalized whole, not per head */
    /* a mixture of experts (Mixtral, Qwen3-MoE, OLMoE) */
    int64_t n_experts, top_k, moe_inter; /* 0 experts: no mixture */
    int norm_topk;        /* the top-k weights renormalized to sum to 1 */
    int64_t shared_inter; /* the shared expert's intermediate size (0: none): Qwen2-MoE's, its
                             output scaled by sigmoid(shared_expert_gate · x), or GLM-4.5's
                             shared experts (n_shared_experts × moe_intermediate_size), not gated */
    int glm;              /* GLM-4.5: DeepSeek-V3's routing (sigmoid scores, a correction bias for
                             the choice, groups, routed_scaling_factor) */
    int64_t n_group, topk_group;
    double routed_scale;
    unsigned char *sparse;/* n_layers flags: 1 = the layer's MLP is the mixture, 2 + k = with its
                             experts stacked as stacked_names[k] names them */
} hp;

/* Experts stacked, each layer's in two tensors, [E, 2 I, hidden] (each expert's gate rows, then its
 * up rows) and [E, hidden, I], with a router [E, hidden]: as transformers 5 saves every mixture,
 * and as Granite's MoE is held. Names after "<prefix>layers.<L>.". */
static const struct {
    const char *router, *gate_up, *down;
} stacked_names[] = {
    {"mlp.gate.weight", "mlp.experts.gate_up_proj", "mlp.experts.down_proj"},
    {"block_sparse_moe.router.layer.weight", "block_sparse_moe.input_linear.weight",
     "block_sparse_moe.output_linear.weight"},
};
#define N_STACKED (sizeof stacked_names / sizeof stacked_names[0])

typedef struct ctx {
    const json_t *config;
    const char *family;
    const char *pre;      /* the text model's tensor prefix: "model.", or a multimodal
                             checkpoint's "language_model.model." / "model.language_model." */
    const char *head;     /* the LM head's name: "lm_head.weight" or "language_model.lm_head.weight" */
    arch_lookup_fn lookup;
    void *user;
    arch_warn_fn warn;
    void *warn_user;
} ctx;

/* The name of the tensor of `role` in layer l (-1: global) under the family's naming, with the
 * text model's prefix pre instead of "model." and head as the LM head's name. */
static int tname(const char *family, const char *pre, const char *head, thin_role role, int32_t l,
                 char *buf, size_t cap)
{
    char canon[160];
    int n;
    if (role == THIN_ROLE_LM_HEAD)
        n = snprintf(buf, cap, "%s", head);
    else if (roles_name_family(family, role, l, canon, sizeof canon))
        return -1;
    else
        n = strncmp(canon, "model.", 6) ? snprintf(buf, cap, "%s", canon)
                                         : snprintf(buf, cap, "%s%s", pre, canon + 6);
    return n < 0 || (size_t)n >= cap ? -1 : 0;
}

static void warnf(const ctx *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void warnf(const ctx *c, const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (c->warn)
        c->warn(c->warn_user, msg);
}

const char *arch_family(const char *a)
{
    static const struct { const char *arch, *family; } t[] = {
        {"LlamaForCausalLM", "llama"},   {"MistralForCausalLM", "mistral"},
        {"SmolLM3ForCausalLM", "smollm3"}, {"Qwen2ForCausalLM", "qwen2"},
        {"Qwen3ForCausalLM", "qwen3"},   {"Phi3ForCausalLM", "phi3"},
        {"Gemma3ForCausalLM", "gemma3"}, {"Gemma3ForConditionalGeneration", "gemma3"},
        {"Gemma2ForCausalLM", "gemma2"}, {"Olmo2ForCausalLM", "olmo2"},
        {"Mistral3ForConditionalGeneration", "mistral"}, {"GraniteForCausalLM", "granite"},
        {"MixtralForCausalLM", "mixtral"}, {"Qwen3MoeForCausalLM", "qwen3_moe"},
        {"OlmoeForCausalLM", "olmoe"}, {"Qwen2MoeForCausalLM", "qwen2_moe"},
        {"GraniteMoeForCausalLM", "granitemoe"}, {"Glm4MoeForCausalLM", "glm4_moe"},
    };
    for (size_t i = 0; a && i < sizeof t / sizeof t[0]; i++)
        if (strcmp(a, t[i].arch) == 0)
            return t[i].family;
    return "unknown";
}

/* Integer member: 0 when present and in [lo, hi] (or absent with a default), else -1. */
static int get_int(const ctx *c, const char *key, int64_t lo, int64_t hi, int have_def,
                   int64_t def, int64_t *out)
{
    const json_t *v = json_object_get(c->config, key);
    if (!v || json_is_null(v)) {
        if (!have_def)
            warnf(c, "config.json: missing %s", key);
        *out = def;
        return have_def ? 0 : -1;
    }
    if (!json_is_integer(v) || json_integer_value(v) < lo || json_integer_value(v) > hi) {
        warnf(c, "config.json: %s is not an integer in [%lld, %lld]", key, (long long)lo,
              (long long)hi);
        return -1;
    }
    *out = json_integer_value(v);
    return 0;
}

static int get_real(const ctx *c, const char *key, double def, double *out)
{
    const json_t *v = json_object_get(c->config, key);
    *out = def;
    if (!v || json_is_null(v))
        return 0;
    if (!json_is_number(v) || json_number_value(v) <= 0) {
        warnf(c, "config.json: %s is not a positive number", key);
        return -1;
    }
    *out = json_number_value(v);
    return 0;
}

/* Which layers apply RoPE: SmolLM3's no_rope_layers, or its no_rope_layer_interval; else all. */
static int rope_layers(const ctx *c, hp *h)
{
    h->rope = malloc((size_t)h->n_layers);
    if (!h->rope)
        return -1;
    memset(h->rope, 1, (size_t)h->n_layers);
    if (strcmp(c->family, "smollm3") != 0)
        return 0;
    const json_t *nr = json_object_get(c->config, "no_rope_layers");
    if (json_is_array(nr)) {
        if ((int64_t)json_array_size(nr) != h->n_layers) {
            warnf(c, "config.json: no_rope_layers has %zu entries for %lld layers",
                  json_array_size(nr), (long long)h->n_layers);
            return -1;
        }
        for (int64_t l = 0; l < h->n_layers; l++) {
            const json_t *v = json_array_get(nr, (size_t)l);
            if (!json_is_integer(v) && !json_is_boolean(v)) {
                warnf(c, "config.json: no_rope_layers[%lld] is not 0 or 1", (long long)l);
                return -1;
            }
            h->rope[l] = json_is_integer(v) ? json_integer_value(v) != 0 : json_is_true(v);
        }
        return 0;
    }
    int64_t every;
    if (get_int(c, "no_rope_layer_interval", 1, 1 << 20, 1, 4, &every))
        return -1;
    for (int64_t l = 0; l < h->n_layers; l++)
        h->rope[l] = (l + 1) % every != 0;
    return 0;
}

/* The family's RoPE base when the config names none (transformers' default_theta). */
static double default_theta(const char *family)
{
    if (strcmp(family, "smollm3") == 0)
        return 2000000.0;
    if (strcmp(family, "qwen2") == 0 || strcmp(family, "qwen3") == 0 || strcmp(family, "gemma3") == 0 ||
        strcmp(family, "qwen3_moe") == 0)
        return 1000000.0;
    return 10000.0;
}

/* A new reference to the scaling object sc (NULL for NULL). LongRoPE's ("longrope", or Phi-3's
 * earlier "su") comes as a copy that holds what the runtime needs from elsewhere in the config:
 * original_max_position_embeddings (Phi-3 configs keep it at the top level) and the factor that
 * the attention factor derives from (max_position_embeddings / original when the object has
 * none), so that a later cap of the context does not change it. */
static json_t *longrope_scaling(const ctx *c, const hp *h, const json_t *sc)
{
    if (!sc)
        return NULL;
    const char *type = json_string_value(json_object_get(sc, "rope_type"));
    if (!type)
        type = json_string_value(json_object_get(sc, "type"));
    if (!json_is_object(sc) || !type || (strcmp(type, "longrope") != 0 && strcmp(type, "su") != 0))
        return json_incref((json_t *)sc);
    json_t *o = json_deep_copy(sc);
    if (!o)
        return NULL;
    json_t *orig = json_object_get(o, "original_max_position_embeddings");
    if (!orig || json_is_null(orig)) {
        orig = json_object_get(c->config, "original_max_position_embeddings");
        if (json_is_number(orig))
            json_object_set(o, "original_max_position_embeddings", orig);
    }
    const json_t *f = json_object_get(o, "factor");
    if ((!f || json_is_null(f)) && json_is_number(orig) && json_number_value(orig) > 0)
        json_object_set_new(o, "factor", json_real((double)h->max_pos / json_number_value(orig)));
    return o;
}

/* The rotated part of each head: partial_rotary_factor f (config.json's, or that of its
 * rope_parameters rp as transformers 5 writes it) rotates the first (int)(head_dim * f) dims, as
 * transformers takes it; 0 where that is not an even count of at least 2 (check_act then leaves
 * the model without a tape). */
static void read_rot_dim(const ctx *c, hp *h, const json_t *rp)
{
    const json_t *prf = json_object_get(c->config, "partial_rotary_factor");
    if (!prf && rp)
        prf = json_object_get(rp, "partial_rotary_factor");
    h->rot_dim = h->head_dim;
    if (prf && !json_is_null(prf)) {
        double f = json_number_value(prf);
        int64_t rd = json_is_number(prf) && f > 0 && f <= 1 ? (int64_t)((double)h->head_dim * f) : 0;
        h->rot_dim = rd >= 2 && rd % 2 == 0 ? rd : 0;
    }
}

/* RoPE base and scaling: transformers 5 writes one "rope_parameters" object ({"rope_theta",
 * "rope_type", scaling fields}; or one per layer type, of which "full_attention" applies), older
 * configs "rope_theta" and "rope_scaling". A rope_type other than "default" is passed on as the
 * scaling object, LongRoPE's completed by longrope_scaling. Also the rotated dims (read_rot_dim). */
static int read_rope(const ctx *c, hp *h)
{
    const json_t *rp = json_object_get(c->config, "rope_parameters");
    if (!json_is_object(rp)) {
        read_rot_dim(c, h, NULL);
        const json_t *sc = json_object_get(c->config, "rope_scaling");
        if (sc && !(h->rope_scaling = longrope_scaling(c, h, sc)))
            return -1;
        return get_real(c, "rope_theta", default_theta(c->family), &h->theta);
    }
    const json_t *full = json_object_get(rp, "full_attention");
    if (json_is_object(full))
        rp = full;
    read_rot_dim(c, h, rp);
    const json_t *t = json_object_get(rp, "rope_theta");
    h->theta = default_theta(c->family);
    if (t && !json_is_null(t)) {
        if (!json_is_number(t) || json_number_value(t) <= 0) {
            warnf(c, "config.json: rope_parameters.rope_theta is not a positive number");
            return -1;
        }
        h->theta = json_number_value(t);
    }
    const char *type = json_string_value(json_object_get(rp, "rope_type"));
    if (type && strcmp(type, "default") != 0 && !(h->rope_scaling = longrope_scaling(c, h, rp)))
        return -1;
    return 0;
}

/* A number member of the config that must be null or absent (Gemma 2's soft caps, which the
 * tape cannot express): 0, or -1 with a warning. */
static int must_be_null(const ctx *c, const char *key)
{
    const json_t *v = json_object_get(c->config, key);
    if (v && !json_is_null(v)) {
        warnf(c, "no execution tape: config.json sets %s, which the tape cannot express", key);
        return -1;
    }
    return 0;
}

/* Which layers slide over the window (h->sliding): config.json's layer_types where it has them,
 * else every layer but each every-th (every > 0), else the layers from `from` on. A layer_types the
 * tape cannot follow leaves no tape (said). */
static int read_layer_types(const ctx *c, hp *h, int64_t every, int64_t from)
{
    if (!(h->sliding = malloc((size_t)h->n_layers)))
        return -1;
    const json_t *types = json_object_get(c->config, "layer_types");
    if (types && !json_is_null(types) && (!json_is_array(types) || (int64_t)json_array_size(types) != h->n_layers)) {
        warnf(c, "no execution tape: config.json's layer_types is not a list of %lld entries",
              (long long)h->n_layers);
        h->no_tape = 1;
        return 0;
    }
    for (int64_t l = 0; l < h->n_layers; l++) {
        const char *t = json_string_value(json_array_get(types, (size_t)l));
        if (json_is_array(types) && (!t || (strcmp(t, "sliding_attention") && strcmp(t, "full_attention")))) {
            warnf(c, "no execution tape: config.json's layer_types[%lld] is neither sliding_attention "
                  "nor full_attention", (long long)l);
            h->no_tape = 1;
            return 0;
        }
        h->sliding[l] = t ? strcmp(t, "sliding_attention") == 0 : every > 0 ? (l + 1) % every != 0 : l >= from;
    }
    return 0;
}

/* Gemma: which layers slide (layer_types, else every layer but each sliding_window_pattern-th,
 * default 6 for Gemma 3, 2 for Gemma 2), the window, the attention's scale
 * query_pre_attn_scalar^-1/2 (default 256); Gemma 3's sliding layers' RoPE base
 * (rope_parameters.sliding_attention's, else rope_local_base_freq, default 1e4), Gemma 2's soft
 * caps. */
static int read_gemma(const ctx *c, hp *h)
{
    int64_t every, qpas, win;
    if (get_int(c, "sliding_window", 1, (int64_t)1 << 32, 1, 4096, &win) ||
        get_int(c, "sliding_window_pattern", 1, 1 << 16, 1, h->gemma3 ? 6 : 2, &every) ||
        get_int(c, "query_pre_attn_scalar", 1, (int64_t)1 << 32, 1, 256, &qpas))
        return -1;
    if (h->gemma3) { /* the sliding layers' own RoPE base */
        if (get_real(c, "rope_local_base_freq", 10000.0, &h->local_theta))
            return -1;
        const json_t *rp = json_object_get(json_object_get(c->config, "rope_parameters"), "sliding_attention");
        const json_t *lt = json_object_get(rp, "rope_theta");
        if (json_is_number(lt) && json_number_value(lt) > 0)
            h->local_theta = json_number_value(lt);
    } else if (get_real(c, "attn_logit_softcapping", 0, &h->attn_softcap) || /* Gemma 2's caps */
               get_real(c, "final_logit_softcapping", 0, &h->logit_softcap)) {
        return -1;
    }
    h->window = win;
    h->attn_scale = 1.0 / sqrt((double)qpas);
    h->embed_scale = sqrt((double)h->hidden);
    return read_layer_types(c, h, every, 0);
}

/* Granite's multipliers (GraniteConfig's defaults 1): the embedding's, the scores' scale in place of
 * 1/sqrt(head_dim), the residual adds' factor on the attention's and the MLP's outputs, and the
 * logits divided by logits_scaling. */
static int read_granite(const ctx *c, hp *h)
{
    double em, ls;
    if (get_real(c, "embedding_multiplier", 1.0, &em) ||
        get_real(c, "attention_multiplier", 1.0, &h->attn_scale) ||
        get_real(c, "residual_multiplier", 1.0, &h->res_mult) || get_real(c, "logits_scaling", 1.0, &ls))
        return -1; /* get_real said which is not a positive number */
    if (em != 1.0)
        h->embed_scale = em;
    h->logit_mult = 1.0 / ls;
    return 0;
}

/* A sliding attention window outside Gemma: Mistral's sliding_window (every layer), Phi-3's, and
 * Qwen2's and Qwen3's with use_sliding_window (layers from max_window_layers on, default 28), or
 * config.json's layer_types where it has them; a window as long as the context is none. */
static int read_windows(const ctx *c, hp *h)
{
    const json_t *use = json_object_get(c->config, "use_sliding_window");
    const json_t *win = json_object_get(c->config, "sliding_window");
    if (!(use ? json_is_true(use) : json_is_integer(win)) || !json_is_integer(win) ||
        json_integer_value(win) <= 0 || json_integer_value(win) >= h->max_pos)
        return 0;
    int64_t from = 0;
    if (strncmp(c->family, "qwen", 4) == 0 &&
        get_int(c, "max_window_layers", 0, (int64_t)1 << 16, 1, 28, &from))
        return -1;
    h->window = json_integer_value(win);
    return read_layer_types(c, h, 0, from);
}

/* GLM-4.5 (Glm4MoeConfig's defaults): n_routed_experts (else num_experts, 128), top 8,
 * moe_intermediate_size 1408, norm_topk_prob true, n_shared_experts 1 of moe_intermediate_size each,
 * the first first_k_dense_replace (1) layers dense, n_group / topk_group 1, routed_scaling_factor 1. */
static int read_glm_moe(const ctx *c, hp *h)
{
    int64_t shared = 1, dense = 1;
    const json_t *nt = json_object_get(c->config, "norm_topk_prob");
    h->glm = 1;
    if (get_int(c, json_object_get(c->config, "n_routed_experts") ? "n_routed_experts" : "num_experts", 1, 1 << 16,
                1, 128, &h->n_experts) ||
        get_int(c, "num_experts_per_tok", 1, h->n_experts, 1, 8, &h->top_k) ||
        get_int(c, "moe_intermediate_size", 1, (int64_t)1 << 32, 1, 1408, &h->moe_inter) ||
        get_int(c, "n_shared_experts", 0, 1 << 16, 1, 1, &shared) ||
        get_int(c, "first_k_dense_replace", 0, h->n_layers, 1, 1, &dense) ||
        get_int(c, "n_group", 1, 256, 1, 1, &h->n_group) || get_int(c, "topk_group", 1, h->n_group, 1, 1, &h->topk_group) ||
        get_real(c, "routed_scaling_factor", 1.0, &h->routed_scale))
        return -1;
    h->norm_topk = !nt || json_is_true(nt);
    h->shared_inter = shared * h->moe_inter;
    if (!(h->sparse = malloc((size_t)h->n_layers)))
        return -1;
    for (int64_t l = 0; l < h->n_layers; l++)
        h->sparse[l] = l >= dense;
    return 0;
}

/* A mixture of experts: Mixtral's num_local_experts (default 8) and top 2, renormalized (Granite's
 * MoE alike); Qwen3-MoE's num_experts (128), num_experts_per_tok (8), moe_intermediate_size (768),
 * norm_topk_prob (false) and its sparse layers (not in mlp_only_layers, and (L + 1) a multiple of
 * decoder_sparse_step, default 1); Qwen2-MoE's alike (60 experts, top 4, 1408) with a shared
 * expert of shared_expert_intermediate_size (5632); OLMoE's num_experts (64), top 8,
 * norm_topk_prob (false), every layer; GLM-4.5's (read_glm_moe). The defaults are the config
 * classes'. */
static int read_moe(const ctx *c, hp *h)
{
    if (strcmp(c->family, "glm4_moe") == 0)
        return read_glm_moe(c, h);
    /* Granite's MoE: Mixtral's keys and defaults, the softmax over the top k's scores (the
     * renormalized top k of the softmax) */
    const int mixtral = strcmp(c->family, "mixtral") == 0 || strcmp(c->family, "granitemoe") == 0;
    const int q2 = strcmp(c->family, "qwen2_moe") == 0;
    const int qwen = q2 || strcmp(c->family, "qwen3_moe") == 0;
    int64_t step = 1;
    if (get_int(c, mixtral ? "num_local_experts" : "num_experts", 1, 1 << 16, 1,
                mixtral ? 8 : q2 ? 60 : qwen ? 128 : 64, &h->n_experts) ||
        get_int(c, "num_experts_per_tok", 1, h->n_experts, 1, mixtral ? 2 : q2 ? 4 : 8, &h->top_k) ||
        (qwen && get_int(c, "moe_intermediate_size", 1, (int64_t)1 << 32, 1, q2 ? 1408 : 768, &h->moe_inter)) ||
        (q2 && get_int(c, "shared_expert_intermediate_size", 1, (int64_t)1 << 32, 1, 5632, &h->shared_inter)) ||
        (qwen && get_int(c, "decoder_sparse_step", 1, 1 << 16, 1, 1, &step)))
        return -1;
    if (!qwen)
        h->moe_inter = h->inter;
    const json_t *nt = json_object_get(c->config, "norm_topk_prob");
    h->norm_topk = mixtral || json_is_true(nt);
    if (!(h->sparse = malloc((size_t)h->n_layers)))
        return -1;
    for (int64_t l = 0; l < h->n_layers; l++)
        h->sparse[l] = (l + 1) % step == 0;
    const json_t *only = qwen ? json_object_get(c->config, "mlp_only_layers") : NULL;
    if (only && !json_is_null(only) && !json_is_array(only)) {
        warnf(c, "config.json: mlp_only_layers is not a list");
        return -1;
    }
    for (size_t i = 0; i < json_array_size(only); i++) {
        const json_t *v = json_array_get(only, i);
        if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) >= h->n_layers) {
            warnf(c, "config.json: mlp_only_layers[%zu] is not a layer index", i);
            return -1;
        }
        h->sparse[json_integer_value(v)] = 0;
    }
    return 0;
}

static int is_moe_family(const char *family)
{
    return strcmp(family, "mixtral") == 0 || strcmp(family, "qwen3_moe") == 0 ||
           strcmp(family, "olmoe") == 0 || strcmp(family, "qwen2_moe") == 0 ||
           strcmp(family, "granitemoe") == 0 || strcmp(family, "glm4_moe") == 0;
}

static int read_hparams(const ctx *c, hp *h)
{
    const int64_t big = (int64_t)1 << 32;
    h->family = c->family;
    h->olmo2 = strcmp(c->family, "olmo2") == 0;
    h->qk_whole = h->olmo2 || strcmp(c->family, "olmoe") == 0;
    h->gemma3 = strcmp(c->family, "gemma3") == 0;
    h->post_norms = roles_family_post_norms(c->family);
    h->gemma = h->post_norms && !h->olmo2;
    if (get_int(c, "vocab_size", 1, big, 0, 0, &h->vocab) ||
        get_int(c, "hidden_size", 1, big, 0, 0, &h->hidden) ||
        get_int(c, "intermediate_size", 1, big, 0, 0, &h->inter) ||
        get_int(c, "num_hidden_layers", 1, 1 << 16, 0, 0, &h->n_layers) ||
        get_int(c, "num_attention_heads", 1, 1 << 16, 0, 0, &h->n_heads) ||
        get_int(c, "num_key_value_heads", 1, h->n_heads, 1, h->n_heads, &h->n_kv) ||
        get_int(c, "head_dim", 1, 1 << 16, 1, h->hidden / h->n_heads, &h->head_dim) ||
        get_int(c, "max_position_embeddings", 1, big, 1, 2048, &h->max_pos) ||
        get_real(c, "rms_norm_eps", 1e-6, &h->eps) || read_rope(c, h))
        return -1;
    if (h->n_heads % h->n_kv != 0) {
        warnf(c, "config.json: %lld attention heads do not divide into %lld KV heads",
              (long long)h->n_heads, (long long)h->n_kv);
        return -1;
    }
    if (h->head_dim == 0 || h->head_dim % 2 != 0) {
        warnf(c, "config.json: head_dim %lld is not a positive even number", (long long)h->head_dim);
        return -1;
    }
    const json_t *tie = json_object_get(c->config, "tie_word_embeddings");
    h->tie = tie ? json_is_true(tie) : strcmp(c->family, "smollm3") == 0;
    h->bias = calloc((size_t)h->n_layers, 1); /* filled by check_tensors */
    h->fused = calloc((size_t)h->n_layers, 1);
    if (!h->bias || !h->fused)
        return -1;
    return rope_layers(c, h) || (h->gemma ? read_gemma(c, h) : read_windows(c, h)) ||
           (strncmp(c->family, "granite", 7) == 0 && read_granite(c, h)) ||
           (is_moe_family(c->family) && read_moe(c, h));
}

static json_t *id_list(const json_t *v)
{
    if (json_is_integer(v))
        return json_pack("[O]", v);
    if (json_is_array(v))
        return json_deep_copy(v);
    return json_array();
}

static json_t *hparams_json(const ctx *c, const hp *h)
{
    json_t *bos = json_object_get(c->config, "bos_token_id");
    json_t *o = json_pack(
        "{sI sI sI sI sI sI sI sI sf sf sO sb sO so}", "vocab_size", (json_int_t)h->vocab,
        "hidden_size", (json_int_t)h->hidden, "intermediate_size", (json_int_t)h->inter,
        "n_layers", (json_int_t)h->n_layers, "n_heads", (json_int_t)h->n_heads, "n_kv_heads",
        (json_int_t)h->n_kv, "head_dim", (json_int_t)h->head_dim, "max_position_embeddings",
        (json_int_t)h->max_pos, "rms_norm_eps", h->eps, "rope_theta", h->theta, "rope_scaling",
        h->rope_scaling ? h->rope_scaling : json_null(), "tie_word_embeddings", h->tie,
        "bos_token_id", json_is_integer(bos) ? bos : json_null(), "eos_token_id",
        id_list(json_object_get(c->config, "eos_token_id")));
    if (o && strcmp(c->family, "smollm3") == 0) {
        json_t *nr = json_array();
        for (int64_t l = 0; nr && l < h->n_layers; l++)
            json_array_append_new(nr, json_integer(h->rope[l]));
        json_object_set_new(o, "no_rope_layers", nr);
    }
    if (o && h->n_experts) {
        json_t *sp = json_array();
        for (int64_t l = 0; sp && l < h->n_layers; l++)
            json_array_append_new(sp, json_integer(h->sparse[l]));
        json_object_set_new(o, "n_experts", json_integer(h->n_experts));
        json_object_set_new(o, "n_experts_per_tok", json_integer(h->top_k));
        json_object_set_new(o, "moe_intermediate_size", json_integer(h->moe_inter));
        json_object_set_new(o, "norm_topk_prob", json_boolean(h->norm_topk));
        json_object_set_new(o, "moe_layers", sp);
        if (h->shared_inter)
            json_object_set_new(o, "shared_expert_intermediate_size", json_integer(h->shared_inter));
    }
    return o;
}

/* The name of expert e's weight of `role` (e < 0: the router's) in layer l under the family's
 * naming and the text model's prefix pre. */
static int moe_tname(const char *family, const char *pre, thin_role role, int32_t l, int32_t e,
                     char *buf, size_t cap)
{
    char canon[192];
    if (roles_moe_name(family, role, l, e, canon, sizeof canon))
        return -1;
    const int n = snprintf(buf, cap, "%s%s", pre, canon + 6); /* after "model." */
    return n < 0 || (size_t)n >= cap ? -1 : 0;
}

static int expect_name(const ctx *c, const char *name, uint64_t rows, uint64_t cols);

/* "<pre>layers.<l>.<suffix>": a layer's tensor by its name after the layer prefix. */
static void layer_tname(const char *pre, int32_t l, const char *suffix, char *buf, size_t cap)
{
    snprintf(buf, cap, "%slayers.%d.%s", pre, (int)l, suffix);
}

/* Layer l's shared expert weight j (0 gate, 1 up, 2 down; 3 Qwen2-MoE's gate on its output):
 * Qwen2-MoE's mlp.shared_expert.*, or GLM-4.5's mlp.shared_experts.* (which has no gate). */
static void shared_tname(const char *pre, int glm, int32_t l, int j, char *buf, size_t cap)
{
    static const char *const qwen[4] = {"mlp.shared_expert.gate_proj.weight", "mlp.shared_expert.up_proj.weight",
                                        "mlp.shared_expert.down_proj.weight", "mlp.shared_expert_gate.weight"};
    static const char *const glm4[3] = {"mlp.shared_experts.gate_proj.weight", "mlp.shared_experts.up_proj.weight",
                                        "mlp.shared_experts.down_proj.weight"};
    layer_tname(pre, l, glm ? glm4[j] : qwen[j], buf, cap);
}

/* GLM-4.5's router bias, added to the scores for the choice of experts only. */
static const char score_bias_suffix[] = "mlp.gate.e_score_correction_bias";

/* Looks tensor `name` up into rank and shape, or says it is missing and returns -1. */
static int lookup_or_warn(const ctx *c, const char *name, uint32_t *rank, uint64_t shape[THIN_MAX_RANK])
{
    if (c->lookup(c->user, name, rank, shape))
        return 0;
    warnf(c, "no execution tape: tensor %s is missing", name);
    return -1;
}

/* Checks that tensor `role` of `layer` exists with the expected 1-D or 2-D shape. */
static int expect(const ctx *c, thin_role role, int32_t layer, uint64_t rows, uint64_t cols)
{
    char name[128];
    if (tname(c->family, c->pre, c->head, role, layer, name, sizeof name))
        snprintf(name, sizeof name, "%s", thin_role_name(role));
    return expect_name(c, name, rows, cols);
}

/* Checks that tensor `name` exists with the expected 1-D or 2-D shape. */
static int expect_name(const ctx *c, const char *name, uint64_t rows, uint64_t cols)
{
    uint32_t rank = 0;
    uint64_t shape[THIN_MAX_RANK];
    if (lookup_or_warn(c, name, &rank, shape))
        return -1;
    int ok = cols == 0 ? rank == 1 && shape[0] == rows
                       : rank == 2 && shape[0] == rows && shape[1] == cols;
    if (!ok) {
        warnf(c, "no execution tape: tensor %s has shape %s[%llu, %llu], config.json implies "
              "[%llu%s%llu]", name, rank == 2 ? "" : "(rank mismatch) ",
              (unsigned long long)(rank > 0 ? shape[0] : 0),
              (unsigned long long)(rank > 1 ? shape[1] : 0), (unsigned long long)rows,
              cols ? ", " : "", (unsigned long long)cols);
        return -1;
    }
    return 0;
}

/* Whether layer `layer` has the tensor "<prefix>layers.<layer>." + suffix. */
static int has_name(const ctx *c, const char *suffix, int32_t layer)
{
    char name[192];
    uint32_t rank;
    uint64_t shape[THIN_MAX_RANK];
    layer_tname(c->pre, layer, suffix, name, sizeof name);
    return c->lookup(c->user, name, &rank, shape);
}

/* Layer-level features: q/k norms, the q, k, v biases present (*bias: 1 q, 2 k, 4 v) and the
 * fused weights (*fused: 1 qkv_proj, 2 gate_up_proj), or -1 for what the tape cannot express. */
static int check_layer_features(const ctx *c, int32_t l, int *qk_norm, unsigned char *bias,
                                unsigned char *fused)
{
    static const char *const qkv_bias[] = {"self_attn.q_proj.bias",
                                           "self_attn.k_proj.bias",
                                           "self_attn.v_proj.bias"};
    static const char *const other_bias[] = {
        "self_attn.o_proj.bias", "mlp.gate_proj.bias",
        "mlp.up_proj.bias", "mlp.down_proj.bias",
        "self_attn.qkv_proj.bias", "mlp.gate_up_proj.bias",
    };
    for (size_t i = 0; i < sizeof other_bias / sizeof other_bias[0]; i++)
        if (has_name(c, other_bias[i], l)) {
            warnf(c, "no execution tape: layer %d has o-projection or MLP biases, which the tape "
                  "cannot express", (int)l);
            return -1;
        }
    *bias = 0;
    for (int i = 0; i < 3; i++)
        if (has_name(c, qkv_bias[i], l))
            *bias |= (unsigned char)(1u << i);
    *fused = (unsigned char)(has_name(c, "self_attn.qkv_proj.weight", l) |
                             has_name(c, "mlp.gate_up_proj.weight", l) << 1);
    if (((*fused & 1) && (*bias || has_name(c, "self_attn.q_proj.weight", l))) ||
        ((*fused & 2) && has_name(c, "mlp.gate_proj.weight", l))) {
        warnf(c, "no execution tape: layer %d has both fused and separate projections", (int)l);
        return -1;
    }
    int qn = has_name(c, "self_attn.q_norm.weight", l);
    int kn = has_name(c, "self_attn.k_norm.weight", l);
    const int needs = strcmp(c->family, "gemma3") == 0 || strcmp(c->family, "olmo2") == 0 ||
                      strcmp(c->family, "olmoe") == 0 || strcmp(c->family, "qwen3_moe") == 0;
    const int may = strcmp(c->family, "qwen3") == 0 || strcmp(c->family, "glm4_moe") == 0; /* use_qk_norm */
    if (qn != kn || (qn && !may && !needs) || (!qn && needs)) {
        warnf(c, "no execution tape: layer %d has q/k norms the %s family does not use", (int)l,
              c->family);
        return -1;
    }
    *qk_norm = qn;
    return 0;
}

/* Checks that tensor `name` exists as [a, b, d3]. */
static int expect_3d(const ctx *c, const char *name, uint64_t a, uint64_t b, uint64_t d3)
{
    uint32_t rank = 0;
    uint64_t shape[THIN_MAX_RANK];
    if (lookup_or_warn(c, name, &rank, shape))
        return -1;
    if (rank != 3 || shape[0] != a || shape[1] != b || shape[2] != d3) {
        warnf(c, "no execution tape: tensor %s is not [%llu, %llu, %llu] as config.json implies", name,
              (unsigned long long)a, (unsigned long long)b, (unsigned long long)d3);
        return -1;
    }
    return 0;
}

/* A sparse layer's router [experts, hidden] and every expert's gate and up [moe_inter, hidden] and
 * down [hidden, moe_inter], one tensor each, or stacked as transformers 5 holds them (sparse[l]
 * becomes 2). */
static int check_experts(const ctx *c, hp *h, int32_t l)
{
    char name[192];
    const uint64_t d = (uint64_t)h->hidden, f = (uint64_t)h->moe_inter, ne = (uint64_t)h->n_experts;
    /* Qwen2-MoE's shared expert and its gate; GLM-4.5's shared experts (no gate) */
    for (int j = 0; h->shared_inter && j < (h->glm ? 3 : 4); j++) {
        const uint64_t s = (uint64_t)h->shared_inter;
        shared_tname(c->pre, h->glm, l, j, name, sizeof name);
        if (expect_name(c, name, j == 3 ? 1 : j == 2 ? d : s, j == 2 ? s : d))
            return -1;
    }
    if (h->glm) { /* the router's bias for the choice */
        layer_tname(c->pre, l, score_bias_suffix, name, sizeof name);
        if (expect_name(c, name, ne, 0))
            return -1;
    }
    for (size_t k = 0; k < N_STACKED; k++) {
        if (!has_name(c, stacked_names[k].gate_up, l) && !has_name(c, stacked_names[k].down, l))
            continue;
        h->sparse[l] = (unsigned char)(2 + k);
        layer_tname(c->pre, l, stacked_names[k].router, name, sizeof name);
        if (expect_name(c, name, ne, d))
            return -1;
        layer_tname(c->pre, l, stacked_names[k].gate_up, name, sizeof name);
        if (expect_3d(c, name, ne, 2 * f, d))
            return -1;
        layer_tname(c->pre, l, stacked_names[k].down, name, sizeof name);
        return expect_3d(c, name, ne, d, f);
    }
    if (moe_tname(c->family, c->pre, THIN_ROLE_ROUTER, l, -1, name, sizeof name) ||
        expect_name(c, name, (uint64_t)h->n_experts, d))
        return -1;
    for (int32_t e = 0; e < h->n_experts; e++)
        for (int j = 0; j < 3; j++) {
            static const thin_role r[3] = {THIN_ROLE_GATE, THIN_ROLE_UP, THIN_ROLE_DOWN};
            if (moe_tname(c->family, c->pre, r[j], l, e, name, sizeof name) ||
                expect_name(c, name, j == 2 ? d : f, j == 2 ? f : d))
                return -1;
        }
    return 0;
}

static int check_tensors(const ctx *c, hp *h, int *qk_norm, int *tie_lm_head)
{
    uint64_t qd = (uint64_t)h->n_heads * (uint64_t)h->head_dim;
    uint64_t kvd = (uint64_t)h->n_kv * (uint64_t)h->head_dim;
    uint64_t d = (uint64_t)h->hidden, f = (uint64_t)h->inter, hd = (uint64_t)h->head_dim;
    int any_qk = -1;
    for (int32_t l = 0; l < h->n_layers; l++) {
        int qk;
        if (check_layer_features(c, l, &qk, &h->bias[l], &h->fused[l]))
            return -1;
        if (any_qk >= 0 && qk != any_qk) {
            warnf(c, "no execution tape: q/k norms present in some layers only");
            return -1;
        }
        any_qk = qk;
        const int fq = h->fused[l] & 1, fg = h->fused[l] & 2;
        if ((!h->olmo2 && expect(c, THIN_ROLE_ATTN_NORM, l, d, 0)) ||
            (fq ? expect(c, THIN_ROLE_QKV, l, qd + 2 * kvd, d)
                : expect(c, THIN_ROLE_Q, l, qd, d) || expect(c, THIN_ROLE_K, l, kvd, d) ||
                      expect(c, THIN_ROLE_V, l, kvd, d)) ||
            expect(c, THIN_ROLE_O, l, d, qd) || (!h->olmo2 && expect(c, THIN_ROLE_FFN_NORM, l, d, 0)) ||
            (h->sparse && h->sparse[l]
                 ? check_experts(c, h, l)
                 : (fg ? expect(c, THIN_ROLE_GATE_UP, l, 2 * f, d)
                       : expect(c, THIN_ROLE_GATE, l, f, d) || expect(c, THIN_ROLE_UP, l, f, d)) ||
                       expect(c, THIN_ROLE_DOWN, l, d, f)) ||
            (qk && (expect(c, THIN_ROLE_Q_NORM, l, h->qk_whole ? qd : hd, 0) ||
                    expect(c, THIN_ROLE_K_NORM, l, h->qk_whole ? kvd : hd, 0))) ||
            ((h->bias[l] & 1) && expect(c, THIN_ROLE_Q_BIAS, l, qd, 0)) ||
            ((h->bias[l] & 2) && expect(c, THIN_ROLE_K_BIAS, l, kvd, 0)) ||
            ((h->bias[l] & 4) && expect(c, THIN_ROLE_V_BIAS, l, kvd, 0)) ||
            (h->post_norms && (expect(c, THIN_ROLE_ATTN_POST_NORM, l, d, 0) ||
                                        expect(c, THIN_ROLE_FFN_POST_NORM, l, d, 0))))
            return -1;
        if (h->post_norms && (h->bias[l] || h->fused[l])) {
            warnf(c, "no execution tape: layer %d of a %s model has biases or fused projections",
                  (int)l, h->family);
            return -1;
        }
    }
    *qk_norm = any_qk == 1;
    if (expect(c, THIN_ROLE_EMBEDDING, -1, (uint64_t)h->vocab, d) ||
        expect(c, THIN_ROLE_FINAL_NORM, -1, d, 0))
        return -1;
    uint32_t rank;
    uint64_t shape[THIN_MAX_RANK];
    *tie_lm_head = 0;
    if (!c->lookup(c->user, c->head, &rank, shape)) {
        if (!h->tie) {
            warnf(c, "no execution tape: no %s and tie_word_embeddings is false", c->head);
            return -1;
        }
        *tie_lm_head = 1;
        return 0;
    }
    return expect(c, THIN_ROLE_LM_HEAD, -1, (uint64_t)h->vocab, d);
}

/* ---- tape ---- */

static int push(json_t *ops, json_t *op)
{
    return op ? json_array_append_new(ops, op) : -1;
}

/* x += h, times Granite's residual_multiplier where it has one */
static int push_add(json_t *ops, const hp *h)
{
    json_t *op = json_pack("{ss ss ss}", "op", "add", "in", "h", "out", "x");
    if (op && h->res_mult > 0 && h->res_mult != 1.0)
        json_object_set_new(op, "scale", json_real(h->res_mult));
    return push(ops, op);
}

/* A linear of the weight of `role`, or of its rows [r0, r1) when r1 > 0 (one part of a fused
 * weight). */
static int push_linear_rows(json_t *ops, const hp *h, thin_role role, int32_t l, const char *in,
                            const char *out, const char *split, int64_t r0, int64_t r1)
{
    char w[160];
    if (tname(h->family, h->pre, h->head, role, l, w, sizeof w))
        return -1;
    json_t *op = json_pack("{ss ss ss ss ss}", "op", "linear", "w", w, "in", in, "out", out,
                           "split", split);
    if (op && l >= 0)
        json_object_set_new(op, "layer", json_integer(l));
    if (op && r1 > 0)
        json_object_set_new(op, "rows", json_pack("[II]", (json_int_t)r0, (json_int_t)r1));
    return push(ops, op);
}

static int push_linear(json_t *ops, const hp *h, thin_role role, int32_t l, const char *in,
                       const char *out, const char *split)
{
    return push_linear_rows(ops, h, role, l, in, out, split, 0, 0);
}

static int push_norm_of(json_t *ops, const hp *h, thin_role role, int32_t l, const char *in,
                        const char *out)
{
    char w[160];
    if (tname(h->family, h->pre, h->head, role, l, w, sizeof w))
        return -1;
    json_t *op = json_pack("{ss ss ss ss sf}", "op", "rmsnorm", "w", w, "in", in, "out", out,
                           "eps", h->eps);
    if (op && l >= 0)
        json_object_set_new(op, "layer", json_integer(l));
    if (op && h->gemma) /* Gemma's norm weights count from 1 */
        json_object_set_new(op, "offset", json_real(1.0));
    return push(ops, op);
}

static int push_rmsnorm(json_t *ops, const hp *h, thin_role role, int32_t l)
{
    return push_norm_of(ops, h, role, l, "x", "h");
}

static int push_rope(json_t *ops, const hp *h, int32_t l, const char *buf)
{
    /* Gemma 3's sliding layers rotate at their own base, unscaled */
    const int local = h->gemma3 && h->sliding[l];
    json_t *op = json_pack("{ss ss sI sf si}", "op", "rope", "in", buf, "head_dim",
                           (json_int_t)h->head_dim, "theta", local ? h->local_theta : h->theta,
                           "layer", (int)l);
    if (op && h->rot_dim < h->head_dim)
        json_object_set_new(op, "rot_dim", json_integer(h->rot_dim));
    if (op && json_is_object(h->rope_scaling)) /* null: none, rather than the hparams' */
        json_object_set_new(op, "scaling", local ? json_null() : json_deep_copy(h->rope_scaling));
    return push(ops, op);
}

static int push_attention_block(json_t *ops, const hp *h, int32_t l, int qk_norm)
{
    char w[160];
    const int64_t qd = h->n_heads * h->head_dim, kvd = h->n_kv * h->head_dim;
    /* OLMo 2: no input norm, the products read the residual itself */
    const char *in = h->olmo2 ? "x" : "h";
    int rc = (!h->olmo2 && push_rmsnorm(ops, h, THIN_ROLE_ATTN_NORM, l)) ||
             (h->fused[l] & 1
                  ? push_linear_rows(ops, h, THIN_ROLE_QKV, l, in, "q", "col", 0, qd) ||
                        push_linear_rows(ops, h, THIN_ROLE_QKV, l, in, "k", "col", qd, qd + kvd) ||
                        push_linear_rows(ops, h, THIN_ROLE_QKV, l, in, "v", "col", qd + kvd,
                                         qd + 2 * kvd)
                  : push_linear(ops, h, THIN_ROLE_Q, l, in, "q", "col") ||
                        push_linear(ops, h, THIN_ROLE_K, l, in, "k", "col") ||
                        push_linear(ops, h, THIN_ROLE_V, l, in, "v", "col"));
    /* the biases after all three products, so that a runtime can still group q, k and v */
    static const thin_role bias_role[3] = {THIN_ROLE_Q_BIAS, THIN_ROLE_K_BIAS, THIN_ROLE_V_BIAS};
    static const char *const bias_buf[3] = {"q", "k", "v"};
    for (int i = 0; !rc && i < 3; i++) {
        if (!(h->bias[l] & (1u << i)))
            continue;
        rc = tname(h->family, h->pre, h->head, bias_role[i], l, w, sizeof w) ||
             push(ops, json_pack("{ss ss ss si}", "op", "bias", "w", w, "out", bias_buf[i],
                                 "layer", (int)l));
    }
    /* OLMo 2 normalizes q and k whole (weights of q's and k's size), Qwen3 and Gemma 3 per head */
    for (int i = 0; !rc && qk_norm && h->qk_whole && i < 2; i++)
        rc = push_norm_of(ops, h, i ? THIN_ROLE_K_NORM : THIN_ROLE_Q_NORM, l, i ? "k" : "q", i ? "k" : "q");
    for (int i = 0; !rc && qk_norm && !h->qk_whole && i < 2; i++) {
        if ((rc = tname(h->family, h->pre, h->head, i ? THIN_ROLE_K_NORM : THIN_ROLE_Q_NORM, l, w, sizeof w)))
            break;
        json_t *op = json_pack("{ss ss ss sI sf si}", "op", "head_rmsnorm", "w", w, "in",
                               i ? "k" : "q", "head_dim", (json_int_t)h->head_dim, "eps", h->eps,
                               "layer", (int)l);
        if (op && h->gemma)
            json_object_set_new(op, "offset", json_real(1.0));
        rc = push(ops, op);
    }
    if (!rc && h->rope[l])
        rc = push_rope(ops, h, l, "q") || push_rope(ops, h, l, "k");
    json_t *att = rc ? NULL
                     : json_pack("{ss ss ss ss ss si sI sI sI}", "op", "attention", "q", "q", "k",
                                 "k", "v", "v", "out", "att", "layer", (int)l, "n_heads",
                                 (json_int_t)h->n_heads, "n_kv_heads", (json_int_t)h->n_kv,
                                 "head_dim", (json_int_t)h->head_dim);
    if (att && h->attn_scale > 0) /* query_pre_attn_scalar's scale, Granite's multiplier */
        json_object_set_new(att, "scale", json_real(h->attn_scale));
    if (att && h->sliding && h->sliding[l]) /* the sliding layers' window */
        json_object_set_new(att, "window", json_integer(h->window));
    if (att && h->gemma && h->attn_softcap > 0) /* Gemma 2's cap on the scores */
        json_object_set_new(att, "softcap", json_real(h->attn_softcap));
    return rc || push(ops, att) || push_linear(ops, h, THIN_ROLE_O, l, "att", "h", "row") ||
           (h->post_norms && push_norm_of(ops, h, THIN_ROLE_ATTN_POST_NORM, l, "h", "h")) ||
           push_add(ops, h);
}

/* A sparse layer's mixture: moe(h -> h) with the router and the experts' weights by name, or, for
 * stacked experts, by [name, first row, end row] of the stacked tensor seen as a matrix (expert e's
 * gate: rows [2 e I, (2 e + 1) I) of gate_up_proj, its up the next I, its down rows
 * [e hidden, (e + 1) hidden) of down_proj). */
static int push_moe(json_t *ops, const hp *h, int32_t l)
{
    char w[192], gu[192], dn[192];
    json_t *names[3] = {json_array(), json_array(), json_array()};
    static const thin_role r[3] = {THIN_ROLE_GATE, THIN_ROLE_UP, THIN_ROLE_DOWN};
    const int stacked = h->sparse[l] >= 2;
    const size_t k = stacked ? h->sparse[l] - 2u : 0;
    const json_int_t f = (json_int_t)h->moe_inter, d = (json_int_t)h->hidden;
    layer_tname(h->pre, l, stacked_names[k].gate_up, gu, sizeof gu);
    layer_tname(h->pre, l, stacked_names[k].down, dn, sizeof dn);
    int rc = !names[0] || !names[1] || !names[2];
    for (int32_t e = 0; !rc && e < h->n_experts; e++)
        for (int j = 0; !rc && j < 3; j++)
            rc = stacked ? json_array_append_new(names[j], j == 2 ? json_pack("[sII]", dn, e * d, (e + 1) * d)
                                                                  : json_pack("[sII]", gu, (2 * e + j) * f, (2 * e + j + 1) * f))
                         : moe_tname(h->family, h->pre, r[j], l, e, w, sizeof w) ||
                               json_array_append_new(names[j], json_string(w));
    json_t *op = NULL;
    if (stacked)
        layer_tname(h->pre, l, stacked_names[k].router, w, sizeof w);
    if (!rc && (stacked || !moe_tname(h->family, h->pre, THIN_ROLE_ROUTER, l, -1, w, sizeof w)))
        op = json_pack("{ss ss ss si ss sI sb sO sO sO}", "op", "moe", "in", "h", "out", "h",
                       "layer", (int)l, "router", w, "top_k", (json_int_t)h->top_k, "norm_topk",
                       h->norm_topk, "gate", names[0], "up", names[1], "down", names[2]);
    if (op && h->shared_inter) { /* Qwen2-MoE's shared expert, scaled by sigmoid(shared_gate · in);
                                    GLM-4.5's shared experts as they are */
        char sn[3][192];
        for (int j = 0; j < 3; j++)
            shared_tname(h->pre, h->glm, l, j, sn[j], sizeof sn[j]);
        json_object_set_new(op, "shared", json_pack("[sss]", sn[0], sn[1], sn[2]));
        if (!h->glm) {
            shared_tname(h->pre, 0, l, 3, w, sizeof w);
            json_object_set_new(op, "shared_gate", json_string(w));
        }
    }
    if (op && h->glm) { /* DeepSeek-V3's routing */
        layer_tname(h->pre, l, score_bias_suffix, w, sizeof w);
        json_object_set_new(op, "scoring", json_string("sigmoid"));
        json_object_set_new(op, "score_bias", json_string(w));
        json_object_set_new(op, "n_group", json_integer(h->n_group));
        json_object_set_new(op, "topk_group", json_integer(h->topk_group));
        if (h->routed_scale != 1.0)
            json_object_set_new(op, "routed_scale", json_real(h->routed_scale));
    }
    for (int j = 0; j < 3; j++)
        json_decref(names[j]);
    return push(ops, op);
}

static int push_mlp_block(json_t *ops, const hp *h, int32_t l)
{
    const int64_t f = h->inter;
    if (h->sparse && h->sparse[l])
        return push_rmsnorm(ops, h, THIN_ROLE_FFN_NORM, l) || push_moe(ops, h, l) || push_add(ops, h);
    const char *in = h->olmo2 ? "x" : "h"; /* OLMo 2: no input norm */
    return (!h->olmo2 && push_rmsnorm(ops, h, THIN_ROLE_FFN_NORM, l)) ||
           (h->fused[l] & 2 ? push_linear_rows(ops, h, THIN_ROLE_GATE_UP, l, in, "g", "col", 0, f) ||
                                  push_linear_rows(ops, h, THIN_ROLE_GATE_UP, l, in, "u", "col", f, 2 * f)
                            : push_linear(ops, h, THIN_ROLE_GATE, l, in, "g", "col") ||
                                  push_linear(ops, h, THIN_ROLE_UP, l, in, "u", "col")) ||
           push(ops, json_pack("{ss ss ss}", "op", h->gemma ? "gelu_tanh_mul" : "silu_mul", "in", "u",
                               "out", "g")) ||
           push_linear(ops, h, THIN_ROLE_DOWN, l, "g", "h", "row") ||
           (h->post_norms && push_norm_of(ops, h, THIN_ROLE_FFN_POST_NORM, l, "h", "h")) ||
           push_add(ops, h);
}

static json_t *build_tape(const hp *h, int qk_norm)
{
    json_int_t qd = (json_int_t)(h->n_heads * h->head_dim);
    json_int_t kvd = (json_int_t)(h->n_kv * h->head_dim);
    json_t *ops = json_array();
    json_t *tape = json_pack("{si s{sI sI sI sI sI sI sI sI sI} so}", "version", 1, "buffers",
                             "x", (json_int_t)h->hidden, "h", (json_int_t)h->hidden, "q", qd,
                             "k", kvd, "v", kvd, "att", qd, "g", (json_int_t)h->inter, "u",
                             (json_int_t)h->inter, "logits", (json_int_t)h->vocab, "ops", ops);
    if (!tape)
        return NULL;
    char ew[160];
    snprintf(ew, sizeof ew, "%sembed_tokens.weight", h->pre);
    json_t *emb = json_pack("{ss ss ss}", "op", "embed", "w", ew, "out", "x");
    if (emb && h->embed_scale > 0) /* Gemma's sqrt(hidden_size), Granite's embedding_multiplier */
        json_object_set_new(emb, "scale", json_real(h->embed_scale));
    int rc = push(ops, emb);
    for (int32_t l = 0; !rc && l < h->n_layers; l++)
        rc = push_attention_block(ops, h, l, qk_norm) || push_mlp_block(ops, h, l);
    rc = rc || push_rmsnorm(ops, h, THIN_ROLE_FINAL_NORM, -1) ||
         push_linear(ops, h, THIN_ROLE_LM_HEAD, -1, "h", "logits", "col") ||
         (h->logit_softcap > 0 && push(ops, json_pack("{ss ss sf}", "op", "softcap", "in", "logits", "cap",
                                                      h->logit_softcap))) ||
         (h->logit_mult > 0 && h->logit_mult != 1.0 && /* Granite's logits / logits_scaling */
          push(ops, json_pack("{ss ss sf}", "op", "scale", "in", "logits", "factor", h->logit_mult)));
    if (rc) {
        json_decref(tape);
        return NULL;
    }
    return tape;
}

/* The activation, and a rotated part of each head that the tape can state (read_rot_dim). */
static int check_act(const ctx *c, const hp *h)
{
    /* Gemma: hidden_activation (older configs hidden_act), the tanh form of GELU */
    const json_t *act = json_object_get(c->config, h->gemma ? "hidden_activation" : "hidden_act");
    if (h->gemma && !act)
        act = json_object_get(c->config, "hidden_act");
    if (h->no_tape)
        return -1;
    /* Gemma 3 with soft caps (Gemma 2's) and an encoder's bidirectional attention: not in the tape */
    if (h->gemma3 && (must_be_null(c, "attn_logit_softcapping") || must_be_null(c, "final_logit_softcapping")))
        return -1;
    if (strcmp(h->family, "olmoe") == 0 && must_be_null(c, "clip_qkv")) /* OLMoE's clamp of q, k, v */
        return -1;
    if (h->gemma && json_is_true(json_object_get(c->config, "use_bidirectional_attention"))) {
        warnf(c, "no execution tape: config.json asks for bidirectional attention");
        return -1;
    }
    const char *want = h->gemma ? "gelu_pytorch_tanh" : "silu";
    if ((act || h->gemma) && !(json_is_string(act) && strcmp(json_string_value(act), want) == 0)) {
        warnf(c, "no execution tape: %s is not \"%s\"", h->gemma ? "hidden_activation" : "hidden_act",
              want);
        return -1;
    }
    if (!h->rot_dim) {
        warnf(c, "no execution tape: partial_rotary_factor does not rotate an even number of "
              "dims of a head of %lld", (long long)h->head_dim);
        return -1;
    }
    return 0;
}

/* Gemma3TextConfig's defaults, which a Gemma 3 config.json (a multimodal one's text_config
 * most of all) leaves out. */
static const char gemma3_defaults[] =
    "{\"vocab_size\": 262208, \"hidden_size\": 2304, \"intermediate_size\": 9216,"
    " \"num_hidden_layers\": 26, \"num_attention_heads\": 8, \"num_key_value_heads\": 4,"
    " \"head_dim\": 256, \"hidden_activation\": \"gelu_pytorch_tanh\","
    " \"max_position_embeddings\": 131072, \"rms_norm_eps\": 1e-6, \"eos_token_id\": 1,"
    " \"bos_token_id\": 2, \"tie_word_embeddings\": true, \"rope_theta\": 1000000.0,"
    " \"query_pre_attn_scalar\": 256, \"sliding_window\": 4096, \"rope_local_base_freq\": 10000.0,"
    " \"sliding_window_pattern\": 6}";

/* Gemma2Config's defaults. */
static const char gemma2_defaults[] =
    "{\"vocab_size\": 256000, \"hidden_size\": 2304, \"intermediate_size\": 9216,"
    " \"num_hidden_layers\": 26, \"num_attention_heads\": 8, \"num_key_value_heads\": 4,"
    " \"head_dim\": 256, \"hidden_activation\": \"gelu_pytorch_tanh\","
    " \"max_position_embeddings\": 8192, \"rms_norm_eps\": 1e-6, \"eos_token_id\": 1,"
    " \"bos_token_id\": 2, \"tie_word_embeddings\": true, \"rope_theta\": 10000.0,"
    " \"query_pre_attn_scalar\": 256, \"sliding_window\": 4096, \"final_logit_softcapping\": 30.0,"
    " \"attn_logit_softcapping\": 50.0}";

/* The configuration the text model is read from: config itself, or a multimodal checkpoint's
 * text_config (Gemma 3's, Mistral 3's) with the top level's bos/eos ids where it has them; for
 * Gemma over its config class's defaults. A new reference. */
static json_t *text_config(const json_t *config, const char *family)
{
    const int g2 = strcmp(family, "gemma2") == 0, g3 = strcmp(family, "gemma3") == 0;
    const json_t *tc = json_object_get(config, "text_config");
    if (!g2 && !g3 && !json_is_object(tc))
        return json_incref((json_t *)config);
    json_t *t = g2 || g3 ? json_loads(g2 ? gemma2_defaults : gemma3_defaults, 0, NULL) : json_object();
    if (!t)
        return NULL;
    json_object_update(t, json_is_object(tc) ? (json_t *)tc : (json_t *)config);
    if (json_is_object(tc)) {
        static const char *const top[] = {"bos_token_id", "eos_token_id", "architectures"};
        for (size_t i = 0; i < sizeof top / sizeof top[0]; i++)
            if (json_object_get(config, top[i]))
                json_object_set(t, top[i], json_object_get(config, top[i]));
    }
    return t;
}

int arch_build(const json_t *config_in, arch_lookup_fn lookup, void *user, arch_warn_fn warn,
               void *warn_user, arch_model *out)
{
    memset(out, 0, sizeof *out);
    const json_t *archs = json_object_get(config_in, "architectures");
    const json_t *a0 = json_array_get(archs, 0);
    out->architecture = json_is_string(a0) ? json_string_value(a0) : "unknown";
    out->family = arch_family(out->architecture);
    json_t *config = text_config(config_in, out->family);
    if (!config)
        return -1;
    uint32_t rank;
    uint64_t shape[THIN_MAX_RANK];
    /* a multimodal checkpoint's text model: language_model.model.* (as released) or
     * model.language_model.* (as transformers 4.52 and later save it) */
    const char *pre = "model.", *head = "lm_head.weight";
    if (lookup(user, "language_model.model.embed_tokens.weight", &rank, shape))
        pre = "language_model.model.", head = "language_model.lm_head.weight";
    else if (lookup(user, "model.language_model.embed_tokens.weight", &rank, shape))
        pre = "model.language_model.";
    snprintf(out->embed_name, sizeof out->embed_name, "%sembed_tokens.weight", pre);
    snprintf(out->head_name, sizeof out->head_name, "%s", head);
    ctx c = {config, out->family, pre, head, lookup, user, warn, warn_user};
    int has_head = lookup(user, head, &rank, shape);
    int has_embed = lookup(user, out->embed_name, &rank, shape);
    out->tie_lm_head = json_is_true(json_object_get(config, "tie_word_embeddings")) &&
                       !has_head && has_embed;
    hp h;
    memset(&h, 0, sizeof h);
    h.pre = pre, h.head = head;
    int supported = strcmp(out->family, "unknown") != 0;
    if (!supported)
        warnf(&c, "architecture %s is not supported: packed without an execution tape",
              out->architecture);
    if (read_hparams(&c, &h) == 0) {
        out->tie_lm_head = h.tie && !has_head && has_embed;
        out->hparams = hparams_json(&c, &h);
        int qk = 0, tie = 0, oom = !out->hparams;
        if (!oom && supported && check_act(&c, &h) == 0 && check_tensors(&c, &h, &qk, &tie) == 0)
            oom = !(out->tape = build_tape(&h, qk));
        if (oom) {
            free(h.rope);
            free(h.bias);
            free(h.fused);
            free(h.sliding);
            free(h.sparse);
            json_decref(h.rope_scaling);
            json_decref(config);
            arch_model_free(out);
            return -1;
        }
    } else if (supported)
        warnf(&c, "no execution tape: config.json lacks the hyperparameters of %s",
              out->architecture);
    free(h.rope);
    free(h.bias);
    free(h.fused);
    free(h.sliding);
    free(h.sparse);
    json_decref(h.rope_scaling);
    json_decref(config);
    return 0;
}

void arch_model_free(arch_model *m)
{
    json_decref(m->hparams);
    json_decref(m->tape);
    memset(m, 0, sizeof *m);
}
