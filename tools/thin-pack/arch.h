/*
 * arch.h — from a Hugging Face config.json to the manifest's model hyperparameters (SPEC.md §8)
 * and the execution tape (SPEC.md §10) of the Llama family: LlamaForCausalLM,
 * MistralForCausalLM, SmolLM3ForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM, Phi3ForCausalLM,
 * Granite, OLMo 2, Gemma 2 and 3 (Gemma3ForConditionalGeneration's text model too), Mistral 3's
 * text model, and the mixtures of experts MixtralForCausalLM, Qwen3MoeForCausalLM and
 * OlmoeForCausalLM.
 *
 * Pure JSON work: the tensors are seen only through a lookup callback, so the tape can be checked
 * against the tensors that will be in the file (names and shapes).
 */
#ifndef THIN_PACK_ARCH_H
#define THIN_PACK_ARCH_H

#include <jansson.h>
#include <stdint.h>

#include "thin.h"

/* Returns 1 and fills rank/shape when the file will hold a tensor of that name, else 0. */
typedef int (*arch_lookup_fn)(void *user, const char *name, uint32_t *rank,
                              uint64_t shape[THIN_MAX_RANK]);
/* Receives one warning (a full sentence without the program name). */
typedef void (*arch_warn_fn)(void *user, const char *msg);

typedef struct arch_model {
    const char *architecture; /* config architectures[0] (owned by the config), or "unknown" */
    const char *family;       /* arch_family's name: llama | smollm3 | qwen2 | ... | unknown */
    json_t *hparams;          /* SPEC §8 hparams object, or NULL when the config lacks them */
    json_t *tape;             /* SPEC §10 tape object, or NULL (unsupported; a warning said why) */
    int tie_lm_head;          /* 1: the file must record the LM head tied to the embedding */
    char embed_name[64];      /* the embedding's tensor name ("model.embed_tokens.weight", or a
                                 multimodal checkpoint's text model's) */
    char head_name[64];       /* the LM head's ("lm_head.weight", ...) */
} arch_model;

/* Family of an architecture name ("Qwen3ForCausalLM" -> "qwen3"); "unknown" if not supported. */
const char *arch_family(const char *architecture);

/* Builds hparams and tape from config (a JSON object). Never fails on a model it cannot run: it
 * leaves tape (and maybe hparams) NULL and calls warn with the reason. Returns 0, or -1 only when
 * memory runs out. Free with arch_model_free. */
int arch_build(const json_t *config, arch_lookup_fn lookup, void *user, arch_warn_fn warn,
               void *warn_user, arch_model *out);

void arch_model_free(arch_model *m);

#endif /* THIN_PACK_ARCH_H */
