#!/usr/bin/env python3
"""Makes a random SmolLM3-3B with the exact architecture and tensor names (no tokenizer).

    python3 bench/make-smollm3.py DIR [--transformers-decode N]

SmolLM3Config() defaults (vocab 128256, hidden 2048, intermediate 11008, 36 layers, 16 heads,
4 KV heads, RoPE skipped on every 4th layer, tied embeddings), torch.manual_seed(0), built on CUDA
in bfloat16 and written with save_pretrained: DIR/model.safetensors (6.15 GB) and config.json.
An existing DIR/model.safetensors is reused. With --transformers-decode N the model's own greedy
decode speed (a plain loop with its KV cache, batch 1, N tokens after a 16-token prompt of ids
1..16) is printed as 'transformers_decode_tok_s VALUE'.
"""
import argparse
import os
import sys
import time

import torch
from transformers import SmolLM3Config, SmolLM3ForCausalLM


def make_smollm3():
    cfg = SmolLM3Config()
    with torch.device("cuda"):
        return SmolLM3ForCausalLM(cfg).to(torch.bfloat16)


def build(path, make, name):
    if os.path.exists(os.path.join(path, "model.safetensors")):
        print(f"{name}: reusing {path}", file=sys.stderr)
        return None
    torch.manual_seed(0)
    model = make()
    os.makedirs(path, exist_ok=True)
    model.save_pretrained(path)
    return model


@torch.no_grad()
def decode_speed(model, n):
    model.eval()
    ids = torch.arange(1, 17, device="cuda").unsqueeze(0)
    out = model(input_ids=ids, use_cache=True)
    past, nxt = out.past_key_values, out.logits[:, -1].argmax(-1, keepdim=True)
    for _ in range(4):  # warm-up steps, not timed
        out = model(input_ids=nxt, past_key_values=past, use_cache=True)
        past, nxt = out.past_key_values, out.logits[:, -1].argmax(-1, keepdim=True)
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(n):
        out = model(input_ids=nxt, past_key_values=past, use_cache=True)
        past, nxt = out.past_key_values, out.logits[:, -1].argmax(-1, keepdim=True)
    torch.cuda.synchronize()
    return n / (time.perf_counter() - t0)


def main(make=make_smollm3, cls=SmolLM3ForCausalLM, name="make-smollm3", doc=__doc__):
    ap = argparse.ArgumentParser(description=doc.splitlines()[0])
    ap.add_argument("dir")
    ap.add_argument("--transformers-decode", type=int, default=0, metavar="N")
    a = ap.parse_args()
    model = build(a.dir, make, name)
    if a.transformers_decode > 0:
        if model is None:
            model = cls.from_pretrained(a.dir, dtype=torch.bfloat16).to("cuda")
        print(f"transformers_decode_tok_s {decode_speed(model, a.transformers_decode):.2f}")


if __name__ == "__main__":
    main()
