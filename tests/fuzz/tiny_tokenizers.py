#!/usr/bin/env python3
"""Writes small tokenizer seeds for the fuzz corpora on stdout.

  tiny_tokenizers.py hf-bytelevel              a byte-level BPE tokenizer.json (GPT-2 byte map)
  tiny_tokenizers.py gguf-llama TOKENIZER.JSON a vocab-only GGUF (SentencePiece) of that vocab
  tiny_tokenizers.py gguf-gpt2                 a vocab-only GGUF (byte-level BPE, pre "gpt2")
"""
import json
import struct
import sys

MERGES = [("Ġ", "t"), ("h", "e"), ("Ġt", "he"), ("i", "n"), ("Ġ", "a"), ("o", "n")]


def byte_chars():
    bs = list(range(33, 127)) + list(range(161, 173)) + list(range(174, 256))
    cs, n = bs[:], 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return [chr(c) for _, c in sorted(zip(bs, cs))]


def bytelevel_vocab():
    vocab = byte_chars()
    for a, b in MERGES:
        vocab.append(a + b)
    return vocab + ["<|endoftext|>"]


def hf_bytelevel():
    vocab = bytelevel_vocab()
    end = len(vocab) - 1
    tj = {"version": "1.0", "truncation": None, "padding": None,
          "added_tokens": [{"id": end, "content": "<|endoftext|>", "single_word": False,
                            "lstrip": False, "rstrip": False, "normalized": False,
                            "special": True}],
          "normalizer": None,
          "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False,
                            "trim_offsets": True, "use_regex": True},
          "post_processor": {"type": "ByteLevel", "add_prefix_space": True,
                             "trim_offsets": False, "use_regex": True},
          "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True,
                      "use_regex": True},
          "model": {"type": "BPE", "dropout": None, "unk_token": None,
                    "continuing_subword_prefix": None, "end_of_word_suffix": None,
                    "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
                    "vocab": {t: i for i, t in enumerate(vocab)},
                    "merges": ["%s %s" % m for m in MERGES]}}
    cfg = {"bos_token": "<|endoftext|>", "eos_token": "<|endoftext|>",
           "chat_template": "{% for m in messages %}{{ m['content'] }}{% endfor %}"}
    out = json.dumps(tj).encode() + b"\0" + json.dumps(cfg).encode()
    sys.stdout.buffer.write(out)


def gstr(s):
    b = s.encode()
    return struct.pack("<Q", len(b)) + b


def kv(key, typ, payload):
    return gstr(key) + struct.pack("<I", typ) + payload


def arr(item_type, items):
    body = b""
    for it in items:
        if item_type == 8:
            body += gstr(it)
        elif item_type == 6:
            body += struct.pack("<f", it)
        else:
            body += struct.pack("<i", it)
    return struct.pack("<IQ", item_type, len(items)) + body


def gguf(pairs):
    return b"GGUF" + struct.pack("<IQQ", 3, 0, len(pairs)) + b"".join(pairs)


def gguf_llama(path):
    model = json.load(open(path))["model"]
    vocab = sorted(model["vocab"].items(), key=lambda kv_: kv_[1])
    tokens = [t for t, _ in vocab]
    types = [2 if i == 0 else 3 if i < 3 else 6 if t.startswith("<0x") else 1
             for i, t in enumerate(tokens)]
    scores = [0.0 if ty != 1 else -float(i) for i, ty in enumerate(types)]
    pairs = [kv("general.architecture", 8, gstr("llama")),
             kv("tokenizer.ggml.model", 8, gstr("llama")),
             kv("tokenizer.ggml.tokens", 9, arr(8, tokens)),
             kv("tokenizer.ggml.scores", 9, arr(6, scores)),
             kv("tokenizer.ggml.token_type", 9, arr(5, types)),
             kv("tokenizer.ggml.bos_token_id", 4, struct.pack("<I", 1)),
             kv("tokenizer.ggml.eos_token_id", 4, struct.pack("<I", 2)),
             kv("tokenizer.ggml.unknown_token_id", 4, struct.pack("<I", 0)),
             kv("tokenizer.ggml.add_bos_token", 7, b"\1"),
             kv("tokenizer.ggml.add_space_prefix", 7, b"\1")]
    sys.stdout.buffer.write(gguf(pairs))


def gguf_gpt2():
    tokens = bytelevel_vocab()
    types = [1] * (len(tokens) - 1) + [3]
    pairs = [kv("tokenizer.ggml.model", 8, gstr("gpt2")),
             kv("tokenizer.ggml.pre", 8, gstr("gpt2")),
             kv("tokenizer.ggml.tokens", 9, arr(8, tokens)),
             kv("tokenizer.ggml.token_type", 9, arr(5, types)),
             kv("tokenizer.ggml.merges", 9, arr(8, ["%s %s" % m for m in MERGES])),
             kv("tokenizer.ggml.bos_token_id", 4, struct.pack("<I", len(tokens) - 1)),
             kv("tokenizer.ggml.eos_token_id", 4, struct.pack("<I", len(tokens) - 1)),
             kv("tokenizer.chat_template", 8, gstr("{{ messages[0]['content'] }}"))]
    sys.stdout.buffer.write(gguf(pairs))


if __name__ == "__main__":
    cmd = sys.argv[1]
    if cmd == "hf-bytelevel":
        hf_bytelevel()
    elif cmd == "gguf-llama":
        gguf_llama(sys.argv[2])
    elif cmd == "gguf-gpt2":
        gguf_gpt2()
    else:
        sys.exit("unknown seed kind " + cmd)
