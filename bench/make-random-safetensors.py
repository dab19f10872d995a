#!/usr/bin/env python3
"""Writes a random-weight Llama-family model folder for packing benchmarks (python3 stdlib only).

    python3 bench/make-random-safetensors.py OUTDIR [--gib 4] [--preset smollm3-3b]
        [--hidden N --intermediate N --layers N --heads N --kv-heads N --vocab N]

OUTDIR receives model.safetensors (BF16, Hugging Face names) and config.json. With --gib the
number of layers is chosen so that the file is about that size (the preset's widths kept);
--layers overrides it. The data are BF16 values of magnitude about 0.004..0.03 cut from one
random block, each tensor from another offset: fast to write, never held whole in memory.
"""
import argparse
import json
import os
import struct

PRESETS = {
    # SmolLM3-3B: 36 layers, tied embeddings, no RoPE in every 4th layer
    "smollm3-3b": dict(arch="SmolLM3ForCausalLM", model_type="smollm3", hidden=2048,
                       intermediate=11008, layers=36, heads=16, kv_heads=4, vocab=128256,
                       theta=5000000.0, max_pos=65536, tie=True),
    "llama-1b": dict(arch="LlamaForCausalLM", model_type="llama", hidden=2048,
                     intermediate=8192, layers=16, heads=32, kv_heads=8, vocab=128256,
                     theta=500000.0, max_pos=131072, tie=True),
}
BLOCK = 16 << 20


def random_block():
    """BLOCK bytes of BF16 values with small random magnitudes and random signs."""
    b = bytearray(os.urandom(BLOCK))
    hi = bytes((0x3B + (i & 1)) | (i & 0x80) for i in range(256))
    b[1::2] = bytes(b[1::2]).translate(hi)
    return bytes(b + b)  # doubled, so any offset < BLOCK has BLOCK bytes after it


def tensors(p):
    d, f, hd = p["hidden"], p["intermediate"], p["hidden"] // p["heads"]
    q, kv = p["heads"] * hd, p["kv_heads"] * hd
    out = [("model.embed_tokens.weight", [p["vocab"], d])]
    for i in range(p["layers"]):
        pre = "model.layers.%d." % i
        out += [(pre + "input_layernorm.weight", [d]),
                (pre + "self_attn.q_proj.weight", [q, d]),
                (pre + "self_attn.k_proj.weight", [kv, d]),
                (pre + "self_attn.v_proj.weight", [kv, d]),
                (pre + "self_attn.o_proj.weight", [d, q]),
                (pre + "post_attention_layernorm.weight", [d]),
                (pre + "mlp.gate_proj.weight", [f, d]),
                (pre + "mlp.up_proj.weight", [f, d]),
                (pre + "mlp.down_proj.weight", [d, f])]
    out.append(("model.norm.weight", [d]))
    if not p["tie"]:
        out.append(("lm_head.weight", [p["vocab"], d]))
    return out


def nbytes(shape):
    n = 2
    for s in shape:
        n *= s
    return n


def layer_bytes(p):
    one = dict(p, layers=1)
    zero = dict(p, layers=0)
    return sum(nbytes(s) for _, s in tensors(one)) - sum(nbytes(s) for _, s in tensors(zero))


def write_model(path, p):
    header, off = {"__metadata__": {"format": "pt"}}, 0
    specs = tensors(p)
    for name, shape in specs:
        header[name] = {"dtype": "BF16", "shape": shape, "data_offsets": [off, off + nbytes(shape)]}
        off += nbytes(shape)
    raw = json.dumps(header, separators=(",", ":")).encode()
    raw += b" " * (-len(raw) % 8)
    block = random_block()
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(raw)) + raw)
        for i, (_, shape) in enumerate(specs):
            left, pos = nbytes(shape), (i * 2 * 40961) % BLOCK
            view = memoryview(block)
            while left:
                n = min(left, BLOCK)
                f.write(view[pos:pos + n])
                left -= n
    return 8 + len(raw) + off


def write_config(path, p):
    cfg = {"architectures": [p["arch"]], "model_type": p["model_type"],
           "hidden_size": p["hidden"], "intermediate_size": p["intermediate"],
           "num_hidden_layers": p["layers"], "num_attention_heads": p["heads"],
           "num_key_value_heads": p["kv_heads"], "vocab_size": p["vocab"],
           "max_position_embeddings": p["max_pos"], "rms_norm_eps": 1e-6,
           "rope_theta": p["theta"], "rope_scaling": None, "hidden_act": "silu",
           "tie_word_embeddings": p["tie"], "bos_token_id": 128000, "eos_token_id": 128012,
           "torch_dtype": "bfloat16"}
    if p["model_type"] == "smollm3":
        cfg["no_rope_layer_interval"] = 4
    with open(path, "w") as f:
        json.dump(cfg, f, indent=2)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("outdir")
    ap.add_argument("--preset", default="smollm3-3b", choices=sorted(PRESETS))
    ap.add_argument("--gib", type=float, help="approximate file size; sets the layer count")
    for k in ("hidden", "intermediate", "layers", "heads", "kv-heads", "vocab"):
        ap.add_argument("--" + k, type=int)
    a = ap.parse_args()
    p = dict(PRESETS[a.preset])
    for k in ("hidden", "intermediate", "heads", "kv_heads", "vocab"):
        if getattr(a, k) is not None:
            p[k] = getattr(a, k)
    if a.gib is not None and a.layers is None:
        fixed = sum(nbytes(s) for _, s in tensors(dict(p, layers=0)))
        p["layers"] = max(1, int((a.gib * (1 << 30) - fixed) // layer_bytes(p)))
    if a.layers is not None:
        p["layers"] = a.layers
    os.makedirs(a.outdir, exist_ok=True)
    size = write_model(os.path.join(a.outdir, "model.safetensors"), p)
    write_config(os.path.join(a.outdir, "config.json"), p)
    print("%s: %d layers, %d bytes" % (a.outdir, p["layers"], size))


if __name__ == "__main__":
    main()
