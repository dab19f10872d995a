#!/usr/bin/env python3
"""Makes a random Qwen2.5-1.5B with the exact architecture and tensor names (no tokenizer).

    python3 bench/make-qwen2.py DIR [--transformers-decode N]

Qwen2Config with Qwen2.5-1.5B's shape (vocab 151936, hidden 1536, intermediate 8960, 28 layers,
12 heads, 2 KV heads, q/k/v biases, RoPE theta 1e6, tied embeddings), torch.manual_seed(0), built
on CUDA in bfloat16 and written with save_pretrained: DIR/model.safetensors (3.09 GB) and
config.json. The q/k/v biases are drawn like the weights (transformers starts them at zero), so
that they take part in the logits. Otherwise as bench/make-smollm3.py, whose code it runs.
"""
import importlib.util
import os

import torch
from transformers import Qwen2Config, Qwen2ForCausalLM

_spec = importlib.util.spec_from_file_location(
    "make_smollm3", os.path.join(os.path.dirname(os.path.abspath(__file__)), "make-smollm3.py"))
base = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(base)


def make_qwen2():
    cfg = Qwen2Config(vocab_size=151936, hidden_size=1536, intermediate_size=8960, num_hidden_layers=28,
                      num_attention_heads=12, num_key_value_heads=2, max_position_embeddings=32768,
                      rope_theta=1000000.0, rms_norm_eps=1e-6, tie_word_embeddings=True)
    with torch.device("cuda"):
        model = Qwen2ForCausalLM(cfg).to(torch.bfloat16)
        with torch.no_grad():
            for layer in model.model.layers:
                for proj in (layer.self_attn.q_proj, layer.self_attn.k_proj, layer.self_attn.v_proj):
                    proj.bias.normal_(0.0, cfg.initializer_range)
    return model


if __name__ == "__main__":
    base.main(make_qwen2, Qwen2ForCausalLM, "make-qwen2", __doc__)
