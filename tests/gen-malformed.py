#!/usr/bin/env python3
"""Writes the malformed SafeTensors files of fixtures/malformed/ (plain python3, no numpy).

Each file breaks one rule of the format; fixtures/malformed/README.md says which, and
tests/cli/pack_malformed.sh checks that thin-pack rejects each with its own message.
Usage: python3 tests/gen-malformed.py [OUTDIR]   (default fixtures/malformed)
"""
import json
import os
import struct
import sys


def header_bytes(obj):
    text = obj if isinstance(obj, (bytes, str)) else json.dumps(obj, separators=(",", ":"))
    raw = text.encode("utf-8") if isinstance(text, str) else text
    return raw + b" " * (-len(raw) % 8)


def image(obj, data, prefix_len=None):
    h = header_bytes(obj)
    n = len(h) if prefix_len is None else prefix_len
    return struct.pack("<Q", n) + h + data


def t(dtype, shape, begin, end):
    return {"dtype": dtype, "shape": shape, "data_offsets": [begin, end]}


DATA = bytes(range(32))
GOOD = {"__metadata__": {"format": "pt"}, "a": t("F32", [2, 2], 0, 16), "b": t("F32", [4], 16, 32)}

CASES = {
    "overlap": image({"a": t("F32", [2, 2], 0, 16), "b": t("F32", [4], 8, 24)}, DATA[:24]),
    "gap": image({"a": t("F32", [2, 2], 0, 16), "b": t("F32", [4], 20, 36)}, DATA + DATA[:4]),
    "out-of-bounds": image({"a": t("F32", [2, 2], 0, 16), "b": t("F32", [4], 16, 32)}, DATA[:16]),
    "bad-dtype": image({"a": t("F7", [2, 2], 0, 16), "b": t("F32", [4], 16, 32)}, DATA),
    "header-too-long": struct.pack("<Q", 200_000_000) + header_bytes(GOOD) + DATA,
    "bad-json": image('{"a": {"dtype": "F32", "shape": [2, 2], "data_offsets": [0, 16]', DATA[:16]),
    "non-utf8": image(b'{"a\xff": {"dtype": "F32", "shape": [2, 2], "data_offsets": [0, 16]}}',
                      DATA[:16]),
    "trailing-bytes": image(GOOD, DATA + b"\0" * 8),
    "size-mismatch": image({"a": t("F32", [2, 3], 0, 16), "b": t("F32", [4], 16, 32)}, DATA),
    "truncated": image(GOOD, DATA)[:40],
    "shape-overflow": image({"a": t("F32", [1 << 40, 1 << 40], 0, 16),
                             "b": t("F32", [4], 16, 32)}, DATA),
    "begin-after-end": image({"a": t("F32", [0], 16, 0), "b": t("F32", [4], 16, 32)}, DATA),
    "duplicate-name": image('{"a": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]}, '
                            '"a": {"dtype": "F32", "shape": [4], "data_offsets": [16, 32]}}', DATA),
    "not-object": image("[1, 2, 3]", b""),
    "metadata-not-string": image({"__metadata__": {"format": 1}, "a": t("F32", [8], 0, 32)}, DATA),
}


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join("fixtures", "malformed")
    os.makedirs(out, exist_ok=True)
    for name, blob in sorted(CASES.items()):
        with open(os.path.join(out, name + ".safetensors"), "wb") as f:
            f.write(blob)


if __name__ == "__main__":
    main()
