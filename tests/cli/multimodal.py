#!/usr/bin/env python3
"""Writes a text model folder (config.json, model.safetensors) as a multimodal checkpoint holds
its text model, for the CLI tests:

    python3 tests/cli/multimodal.py SRC DST PREFIX ARCH TEXT_TYPE VISION_TENSOR [DROP,KEYS] [TOP]

the tensors renamed PREFIX + their name after "model." (PREFIX "language_model.model." or
"model.language_model."), one small F32 tensor VISION_TENSOR beside them (a vision tower's), and a
config.json {"architectures": [ARCH], "text_config": SRC's config without its architectures and
the DROP keys, with model_type TEXT_TYPE} with the keys of the JSON object TOP at its top level.
"""
import json
import struct
import sys


def main():
    src, dst, pre, arch, text_type, vision = sys.argv[1:7]
    drop = sys.argv[7].split(",") if len(sys.argv) > 7 and sys.argv[7] else []
    top = json.loads(sys.argv[8]) if len(sys.argv) > 8 else {}
    d = open(src + "/model.safetensors", "rb").read()
    n = struct.unpack("<Q", d[:8])[0]
    hdr, body = json.loads(d[8:8 + n]), d[8 + n:]
    out, blobs, off = {}, [], 0
    for name, t in sorted(hdr.items(), key=lambda kv: kv[1]["data_offsets"][0]):
        b = body[t["data_offsets"][0]:t["data_offsets"][1]]
        new = pre + name[len("model."):] if name.startswith("model.") else name
        out[new] = {"dtype": t["dtype"], "shape": t["shape"], "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    v = struct.pack("<4f", 1, 2, 3, 4)
    out[vision] = {"dtype": "F32", "shape": [4], "data_offsets": [off, off + len(v)]}
    blobs.append(v)
    h = json.dumps(out).encode()
    h += b" " * (-len(h) % 8)
    with open(dst + "/model.safetensors", "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))
    cfg = json.load(open(src + "/config.json"))
    text = {k: v for k, v in cfg.items() if k != "architectures" and k not in drop}
    text["model_type"] = text_type
    config = {"architectures": [arch], "text_config": text}
    config.update(top)
    with open(dst + "/config.json", "w") as f:
        json.dump(config, f)


if __name__ == "__main__":
    main()
