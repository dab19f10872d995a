#!/usr/bin/env python3
"""Copies a SafeTensors model with a known relative error added to chosen weights (stdlib only).

    python3 bench/perturb-safetensors.py SRC_DIR OUT_DIR --eps E [--roles gate,up,down:1-2]
        [--seed S]

Each chosen matrix (F32 or BF16) is written as F32 values w * (1 + E * z), z an independent
standard normal from random.Random(seed): a relative weight error of RMS E, the size of the one
FP8 E4M3 rounding makes (about 0.025), without its structure. --roles is a comma list of roles
(q k v o gate up down), each with an optional layer range ("down:1-2"); default gate,up,down.
Other tensors, and the folder's .json, .model and .txt files (config, tokenizer), are copied. Meant
for small models (stories260K): pure Python, about a second per million weights. Prints the
relative RMS actually applied.
"""
import argparse
import array
import json
import math
import os
import random
import shutil
import struct
import sys

ROLES = {"q": "self_attn.q_proj", "k": "self_attn.k_proj", "v": "self_attn.v_proj",
         "o": "self_attn.o_proj", "gate": "mlp.gate_proj", "up": "mlp.up_proj",
         "down": "mlp.down_proj"}


def parse_roles(text):
    out = {}
    for item in text.split(","):
        role, _, rng = item.partition(":")
        if role not in ROLES:
            raise SystemExit("perturb-safetensors: unknown role '%s'" % role)
        lo, hi = 0, 1 << 30
        if rng:
            a, _, b = rng.partition("-")
            lo, hi = int(a), int(b) if b else int(a)
        out[role] = (lo, hi)
    return out


def chosen(name, roles):
    parts = name.split(".")
    if len(parts) < 5 or parts[:2] != ["model", "layers"]:
        return False
    layer, rest = int(parts[2]), ".".join(parts[3:-1])
    return any(ROLES[r] == rest and lo <= layer <= hi for r, (lo, hi) in roles.items())


def floats(raw, dtype):
    if dtype == "F32":
        a = array.array("f")
        a.frombytes(raw)
    elif dtype == "BF16":
        h = array.array("H")
        h.frombytes(raw)
        a = array.array("f", struct.unpack("<%df" % len(h), b"".join(
            struct.pack("<I", v << 16) for v in h)))
    else:
        raise SystemExit("perturb-safetensors: %s tensors are not supported" % dtype)
    if sys.byteorder != "little":
        a.byteswap()
    return a


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("src")
    ap.add_argument("out")
    ap.add_argument("--eps", type=float, required=True)
    ap.add_argument("--roles", default="gate,up,down")
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    roles = parse_roles(a.roles)
    src = os.path.join(a.src, "model.safetensors")
    with open(src, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    os.makedirs(a.out, exist_ok=True)
    for name in os.listdir(a.src):  # config and tokenizer files, not other weight files
        if name.endswith((".json", ".model", ".txt")) and os.path.isfile(os.path.join(a.src, name)):
            shutil.copy(os.path.join(a.src, name), os.path.join(a.out, name))
    rng = random.Random(a.seed)
    meta = {k: v for k, v in header.items() if k == "__metadata__"}
    names = sorted((k for k in header if k != "__metadata__"),
                   key=lambda k: header[k]["data_offsets"][0])
    blobs, off, e2, w2 = [], 0, 0.0, 0.0
    out_header = dict(meta)
    for k in names:
        t = header[k]
        lo, hi = t["data_offsets"]
        raw = data[lo:hi]
        dtype = t["dtype"]
        if len(t["shape"]) == 2 and chosen(k, roles):
            w = floats(raw, dtype)
            p = array.array("f", (x * (1.0 + a.eps * rng.gauss(0.0, 1.0)) for x in w))
            e2 += math.fsum((y - x) * (y - x) for x, y in zip(w, p))
            w2 += math.fsum(x * x for x in w)
            if sys.byteorder != "little":
                p.byteswap()
            raw, dtype = p.tobytes(), "F32"
        out_header[k] = {"dtype": dtype, "shape": t["shape"], "data_offsets": [off, off + len(raw)]}
        off += len(raw)
        blobs.append(raw)
    hb = json.dumps(out_header, separators=(",", ":")).encode()
    hb += b" " * (-len(hb) % 8)
    with open(os.path.join(a.out, "model.safetensors"), "wb") as f:
        f.write(struct.pack("<Q", len(hb)) + hb)
        for b in blobs:
            f.write(b)
    print("%s: perturbation relative RMS %.6f" % (a.out, math.sqrt(e2 / w2) if w2 else 0.0))


if __name__ == "__main__":
    main()
