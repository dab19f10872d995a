/*
 * roles.h — role and layer of a tensor from its Hugging Face name (Llama family naming, as used
 * by Llama, Mistral, SmolLM3, Qwen2 and Qwen3).
 */
#ifndef THIN_PACK_ROLES_H
#define THIN_PACK_ROLES_H

#include <stdint.h>

#include "thin.h"

typedef enum roles_kind {
    ROLES_KNOWN = 0,   /* a weight the tape knows (role set) */
    ROLES_BIAS = 1,    /* a bias of o, gate, up or down: role other, the tape cannot use it */
    ROLES_UNKNOWN = 2, /* a name outside the family's naming: role other */
} roles_kind;

/* Maps a name to its role and layer (-1 for global tensors, or when no layer number is found).
 * "model.layers.N.self_attn.q_proj.weight" -> q, N; "model.norm.weight" -> final_norm, -1; a name
 * ending in ".weight.scale" after a known weight -> scale with that weight's layer;
 * "model.layers.N.self_attn.q_proj.bias" (k, v alike) -> q_bias, N. */
roles_kind roles_map(const char *name, thin_role *role, int32_t *layer);

/* roles_map, also naming a mixture of experts' weights: "model.layers.N.mlp.gate.weight" (or
 * Mixtral's "block_sparse_moe.gate") -> router, N; "model.layers.N.mlp.experts.E.up_proj.weight"
 * (Mixtral's "block_sparse_moe.experts.E.w3"; gate_proj / w1, down_proj / w2 alike) -> up, N, with
 * *expert = E; a layer's experts stacked as transformers 5 holds them,
 * "model.layers.N.mlp.experts.gate_up_proj" / "...down_proj" (no ".weight") -> gate_up / down, N;
 * *expert = -1 for every name but a single expert's. */
roles_kind roles_map_expert(const char *name, thin_role *role, int32_t *layer, int32_t *expert);

/* Name of the tensor of `role` in `layer` under Llama naming ("model.layers.3.mlp.up_proj.weight",
 * "model.layers.3.self_attn.q_proj.bias"),
 * written into buf. Returns 0, or -1 for a role without a canonical name or a short buffer. */
int roles_name(thin_role role, int32_t layer, char *buf, size_t cap);

/* Whether `family` (arch_family's name, or NULL) names its norms as Gemma does (Gemma 2 and 3,
 * OLMo 2: post_attention_layernorm normalizes the attention's output). */
int roles_family_post_norms(const char *family);

/* roles_map for a model of `family` (NULL: not known), a multimodal checkpoint's text model
 * (language_model.model.*, model.language_model.*, language_model.lm_head.*) named as the text-only
 * model's; Gemma's (and OLMo 2's) post_attention_layernorm is
 * attn_post_norm, pre_feedforward_layernorm ffn_norm and post_feedforward_layernorm
 * ffn_post_norm; other names and families as roles_map. */
roles_kind roles_map_family(const char *family, const char *name, thin_role *role, int32_t *layer,
                            int32_t *expert);

/* roles_name for a model of `family`: Gemma's norms under Gemma's names. */
int roles_name_family(const char *family, thin_role role, int32_t layer, char *buf, size_t cap);

/* The name of layer `layer`'s router (role router, expert ignored) or of expert `expert`'s gate,
 * up or down weight, as `family` names them (Mixtral: block_sparse_moe.*, w1 / w3 / w2; others
 * mlp.gate, mlp.experts.E.gate_proj ...), into buf: 0, or -1 for another role or a short buffer. */
int roles_moe_name(const char *family, thin_role role, int32_t layer, int32_t expert, char *buf,
                   size_t cap);

#endif /* THIN_PACK_ROLES_H */
