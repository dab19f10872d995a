/*
 * select.h — which tensors thin-quant turns into FP8 E4M3, which into BF16 and which it copies:
 * the named profiles and the explicit --roles / --layers / --select choices.
 *
 * Profiles (n = number of layers of the model):
 *   quality  FP8: gate and up in every layer, down in the middle layers [2, n - 2), every layer
 *            but the first two and the last two (36 layers give 2-33; 4 or fewer, none). Every
 *            other matrix (rank >= 2) stored as F64, F32 or
 *            F16 becomes BF16 (q, k, v, o, embedding, lm_head, ...); 1-D tensors (norms, biases)
 *            keep their dtype. The runtime section records kv_cache_dtype BF16.
 *   fp8-all  FP8: every linear layer (q k v o qkv gate up gate_up down, and lm_head unless it is
 *            tied to the embedding); the embedding and everything else are copied unchanged.
 *   bf16     no FP8; matrices stored as F64, F32 or F16 become BF16.
 * Without a profile, --roles/--layers choose the FP8 tensors: a tensor is chosen when its role is
 * in --roles (default: the per-layer linear roles q k v o qkv gate up gate_up down) and its layer
 * is in --layers (default: all); --layers does not apply to global tensors (embedding, lm_head),
 * which are chosen by naming their role in --roles. Nothing else changes.
 * --select ROLES[:RANGES] (repeatable) chooses the layers of those roles, replacing the profile's
 * or --roles/--layers rule for them: "down:9-26", "gate,up:0-5,30-", "lm_head" (no ranges: every
 * layer, and global tensors of that role), "down:none" (no tensor of that role).
 * Only rank-2 F32, F16 or BF16 tensors that are not tied can become FP8; others chosen by the rule
 * are left to the BF16 rule or copied, with the reason recorded.
 */
#ifndef THIN_QUANT_SELECT_H
#define THIN_QUANT_SELECT_H

#include <stddef.h>
#include <stdint.h>

#include "thin.h"

#define TQ_MAX_LAYERS 4096 /* layers that ranges can name: 0 .. TQ_MAX_LAYERS-1 */

typedef enum tq_profile {
    TQ_PROFILE_NONE = 0,
    TQ_PROFILE_QUALITY,
    TQ_PROFILE_FP8_ALL,
    TQ_PROFILE_BF16,
} tq_profile;

typedef enum tq_action {
    TQ_ACTION_COPY = 0, /* same dtype and bytes */
    TQ_ACTION_FP8,      /* E4M3 with a per-row scale tensor */
    TQ_ACTION_BF16,     /* narrowed to BF16 */
} tq_action;

/* A per-role rule from --select. */
typedef struct tq_role_rule {
    int given;                          /* --select named this role */
    int all;                            /* no ranges: every layer and the global tensor */
    unsigned char layers[TQ_MAX_LAYERS];/* bitmap when !all */
} tq_role_rule;

typedef struct tq_selection {
    tq_profile profile;
    uint32_t roles;                     /* bitmask (1 << thin_role) from --roles; 0 = not given */
    int layers_given;
    unsigned char layers[TQ_MAX_LAYERS];/* --layers bitmap */
    tq_role_rule rule[THIN_ROLE_COUNT_];/* --select rules */
} tq_selection;

/* Clears a selection (no profile, nothing chosen). */
void tq_selection_init(tq_selection *s);
/* Parses a profile name ("quality", "fp8-all", "bf16"). Returns 0 or -1. */
int tq_profile_parse(const char *name, tq_profile *out);
/* Name of a profile ("quality", ...; "none" for TQ_PROFILE_NONE). */
const char *tq_profile_name(tq_profile p);
/* Parses --roles "gate,up,down" into s->roles. Returns 0, or -1 with a message in err. */
int tq_selection_roles(tq_selection *s, const char *arg, char *err, size_t errlen);
/* Parses --layers "2-33,35" into s->layers. Returns 0, or -1 with a message in err. */
int tq_selection_layers(tq_selection *s, const char *arg, char *err, size_t errlen);
/* Parses one --select "ROLES[:RANGES|:none]". Returns 0, or -1 with a message in err. */
int tq_selection_select(tq_selection *s, const char *arg, char *err, size_t errlen);
/* Checks the combination: a profile excludes --roles/--layers; without a profile something must
 * be chosen. Returns 0, or -1 with a message in err. */
int tq_selection_check(const tq_selection *s, char *err, size_t errlen);
/* Whether choosing needs the model's layer count (the quality profile's down rule). */
int tq_selection_needs_layer_count(const tq_selection *s);
/* Whether the profile records kv_cache_dtype BF16 in the runtime section. */
int tq_selection_runtime_bf16(const tq_selection *s);

/* Decides what happens to tensor t of a model with n_layers layers. *why (if not NULL) is set to
 * a short static reason when the rule chose the tensor for FP8 but it cannot be, else NULL.
 * Tied entries are always TQ_ACTION_COPY (they follow their target). */
tq_action tq_select(const tq_selection *s, const thin_tensor_info *t, uint32_t n_layers,
                    const char **why);

/* Writes a bitmap [0, n) as ranges "0-3,7,9-12" into out (NUL-terminated, truncated to cap). */
void tq_format_ranges(const unsigned char *sel, size_t n, char *out, size_t cap);

#endif /* THIN_QUANT_SELECT_H */
