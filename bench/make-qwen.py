#!/usr/bin/env python3
"""Makes a random Qwen2.5-1.5B, Qwen3-1.7B or Qwen3-30B-A3B-shaped MoE with the exact architecture and tensor names (no tokenizer).

    python3 bench/make-qwen.py qwen2|qwen3|qwen3moe DIR [--transformers-decode N]

qwen2: Qwen2Config with Qwen2.5-1.5B's shape (vocab 151936, hidden 1536, intermediate 8960, 28
layers, 12 heads, 2 KV heads, q/k/v biases, RoPE theta 1e6, tied embeddings), 3.09 GB.
qwen3: Qwen3Config with Qwen3-1.7B's shape (vocab 151936, hidden 2048, intermediate 6144, 28
layers, 16 heads, 8 KV heads of 128 dims, q and k RMSNorms per head, RoPE theta 1e6, tied
embeddings), 3.44 GB.
qwen3moe: Qwen3MoeConfig with Qwen3-30B-A3B's layer (hidden 2048, 32 heads, 4 KV heads of 128
dims, q and k norms, 128 experts of 768 inner dims, top 8 renormalized, vocab 151936, RoPE theta
1e6, embeddings not tied) but 4 of its 48 layers: 6.2 GB, of which a token reads about 1.08 GB
(each layer's attention 38 MB, router 0.5 MB and 8 experts 75 MB; the LM head 622 MB).
torch.manual_seed(0), built on CUDA in bfloat16 and written with save_pretrained:
DIR/model.safetensors and config.json. The q/k/v biases are drawn like the weights and the q/k
norm weights around 1 (transformers starts them at 0 and 1), so that they take part in the
logits. Otherwise as bench/make-smollm3.py, whose code it runs.
"""
import importlib.util
import os
import sys

import torch
from transformers import (Qwen2Config, Qwen2ForCausalLM, Qwen3Config, Qwen3ForCausalLM, Qwen3MoeConfig,
                          Qwen3MoeForCausalLM)

_spec = importlib.util.spec_from_file_location(
    "make_smollm3", os.path.join(os.path.dirname(os.path.abspath(__file__)), "make-smollm3.py"))
base = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(base)

SHAPE = dict(vocab_size=151936, num_hidden_layers=28, max_position_embeddings=32768,
             rope_theta=1000000.0, rms_norm_eps=1e-6, tie_word_embeddings=True)


def make_qwen2():
    cfg = Qwen2Config(hidden_size=1536, intermediate_size=8960, num_attention_heads=12,
                      num_key_value_heads=2, **SHAPE)
    with torch.device("cuda"):
        model = Qwen2ForCausalLM(cfg).to(torch.bfloat16)
        with torch.no_grad():
            for layer in model.model.layers:
                for proj in (layer.self_attn.q_proj, layer.self_attn.k_proj, layer.self_attn.v_proj):
                    proj.bias.normal_(0.0, cfg.initializer_range)
    return model


def qk_norms_around_one(model):
    """The q and k norm weights drawn around 1 (transformers starts them at 1)."""
    with torch.no_grad():
        for layer in model.model.layers:
            for norm in (layer.self_attn.q_norm, layer.self_attn.k_norm):
                norm.weight.normal_(1.0, 0.1)
    return model


def make_qwen3():
    cfg = Qwen3Config(hidden_size=2048, intermediate_size=6144, num_attention_heads=16,
                      num_key_value_heads=8, head_dim=128, **SHAPE)
    with torch.device("cuda"):
        return qk_norms_around_one(Qwen3ForCausalLM(cfg).to(torch.bfloat16))


def make_qwen3moe():
    cfg = Qwen3MoeConfig(hidden_size=2048, num_attention_heads=32, num_key_value_heads=4, head_dim=128,
                         num_experts=128, num_experts_per_tok=8, moe_intermediate_size=768,
                         intermediate_size=6144, norm_topk_prob=True, decoder_sparse_step=1,
                         mlp_only_layers=[], vocab_size=151936, num_hidden_layers=4,
                         max_position_embeddings=32768, rope_theta=1000000.0, rms_norm_eps=1e-6,
                         tie_word_embeddings=False)
    with torch.device("cuda"):
        return qk_norms_around_one(Qwen3MoeForCausalLM(cfg).to(torch.bfloat16))


FAMILIES = {"qwen2": (make_qwen2, Qwen2ForCausalLM), "qwen3": (make_qwen3, Qwen3ForCausalLM),
            "qwen3moe": (make_qwen3moe, Qwen3MoeForCausalLM)}

if __name__ == "__main__":
    family = sys.argv.pop(1) if len(sys.argv) > 1 else ""
    if family not in FAMILIES:
        sys.exit("usage: make-qwen.py qwen2|qwen3|qwen3moe DIR [--transformers-decode N]")
    make, cls = FAMILIES[family]
    base.main(make, cls, "make-qwen", __doc__)
