#!/usr/bin/env python3
"""Writes a small synthetic Llama model folder: model.safetensors (F32), config.json and, unless
--no-tokenizer, the stories260K tokenizer files (vocab 512). Used by the fuzz seed corpus and the
hardening CLI tests. Weights are deterministic small values.

usage: tiny_model.py OUTDIR [--hidden 16] [--layers 1] [--vocab 512] [--inter 32] [--no-tokenizer]
"""
import argparse
import json
import math
import os
import shutil
import struct

HERE = os.path.dirname(os.path.abspath(__file__))
STORIES = os.path.join(HERE, "..", "..", "fixtures", "stories260k")


def tensors(hidden, layers, vocab, inter, heads, kv_heads):
    head_dim = hidden // heads
    out = [("model.embed_tokens.weight", [vocab, hidden])]
    for l in range(layers):
        p = "model.layers.%d." % l
        out += [(p + "input_layernorm.weight", [hidden]),
                (p + "self_attn.q_proj.weight", [heads * head_dim, hidden]),
                (p + "self_attn.k_proj.weight", [kv_heads * head_dim, hidden]),
                (p + "self_attn.v_proj.weight", [kv_heads * head_dim, hidden]),
                (p + "self_attn.o_proj.weight", [hidden, heads * head_dim]),
                (p + "post_attention_layernorm.weight", [hidden]),
                (p + "mlp.gate_proj.weight", [inter, hidden]),
                (p + "mlp.up_proj.weight", [inter, hidden]),
                (p + "mlp.down_proj.weight", [hidden, inter])]
    out.append(("model.norm.weight", [hidden]))
    return out


def values(n, seed, norm):
    """n F32 values: ones (+ a little) for norms, else a repeating pattern of small weights."""
    period = 997
    pat = [(1.0 if norm else 0.0) + 0.05 * math.sin(seed * 7.1 + i * 0.37) for i in range(period)]
    block = struct.pack("<%df" % period, *pat)
    reps, rest = divmod(n, period)
    return block * reps + block[: rest * 4]


def write_safetensors(path, specs):
    header, offset = {}, 0
    for name, shape in specs:
        size = 4 * math.prod(shape)
        header[name] = {"dtype": "F32", "shape": shape, "data_offsets": [offset, offset + size]}
        offset += size
    raw = json.dumps(header, separators=(",", ":")).encode()
    raw += b" " * (-len(raw) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(raw)))
        f.write(raw)
        for i, (name, shape) in enumerate(specs):
            f.write(values(math.prod(shape), i, name.endswith("norm.weight")))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("outdir")
    ap.add_argument("--hidden", type=int, default=16)
    ap.add_argument("--layers", type=int, default=1)
    ap.add_argument("--vocab", type=int, default=512)
    ap.add_argument("--inter", type=int, default=32)
    ap.add_argument("--heads", type=int, default=2)
    ap.add_argument("--kv-heads", type=int, default=1)
    ap.add_argument("--no-tokenizer", action="store_true")
    a = ap.parse_args()
    os.makedirs(a.outdir, exist_ok=True)
    specs = tensors(a.hidden, a.layers, a.vocab, a.inter, a.heads, a.kv_heads)
    write_safetensors(os.path.join(a.outdir, "model.safetensors"), specs)
    config = {
        "architectures": ["LlamaForCausalLM"], "model_type": "llama",
        "hidden_size": a.hidden, "intermediate_size": a.inter, "num_hidden_layers": a.layers,
        "num_attention_heads": a.heads, "num_key_value_heads": a.kv_heads,
        "head_dim": a.hidden // a.heads, "vocab_size": a.vocab, "max_position_embeddings": 64,
        "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "hidden_act": "silu",
        "bos_token_id": 1, "eos_token_id": 2, "tie_word_embeddings": True,
        "torch_dtype": "float32",
    }
    with open(os.path.join(a.outdir, "config.json"), "w") as f:
        json.dump(config, f, indent=1)
    if not a.no_tokenizer:
        for name in ("tokenizer.json", "tokenizer_config.json"):
            shutil.copy(os.path.join(STORIES, name), os.path.join(a.outdir, name))


if __name__ == "__main__":
    main()
