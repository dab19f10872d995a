#!/usr/bin/env python3
"""ref-logits.py: the transformers reference for ThinTensor's fidelity and speed report.

Logits mode (--out): loads a Hugging Face SafeTensors folder with transformers, runs one causal,
teacher-forced forward pass over the whole id sequence and writes the logits as raw float32
little-endian rows [positions][vocab], the format of `thin-run --score --out`.

Speed mode (--speed): measures greedy decoding with the KV cache (a plain loop, one token a
forward pass, N tokens after a P-token prompt) and the prefill of an L-token prompt, with a
warm-up first and the device synchronized around every timed region, and prints one JSON object
on stdout. Both modes may be given in one call (the model is loaded once).

  --dtype float32   loads the weights and computes in float32 (the original weights, upcast)
  --dtype bfloat16  native bfloat16 compute (the "BF16 reference")

Exit status: 0 success, 1 failure (bad model, ids out of range...), 2 usage error.
"""
import argparse
import json
import os
import random
import sys
import time


def parse_args(argv):
    p = argparse.ArgumentParser(prog="ref-logits.py",
                                description="transformers reference logits and speed")
    p.add_argument("--model", required=True, help="Hugging Face folder (config.json + SafeTensors)")
    p.add_argument("--ids", help="file of whitespace-separated token ids to score")
    p.add_argument("--out", help="teacher-forced logits (F32 LE rows [positions][vocab])")
    p.add_argument("--dtype", choices=("float32", "bfloat16"), default="float32")
    p.add_argument("--device", choices=("cuda", "cpu"), default=None,
                   help="default: cuda when available, else cpu")
    p.add_argument("--attn", default=None, help="attn_implementation (eager, sdpa...); default: "
                   "the transformers default")
    p.add_argument("--speed", action="store_true", help="measure decode and prefill tokens/s")
    p.add_argument("--prompt-len", type=int, default=16, help="speed: decode prompt length P")
    p.add_argument("--tokens", type=int, default=128, help="speed: tokens decoded N")
    p.add_argument("--prefill-len", type=int, default=512, help="speed: prefill prompt length L")
    p.add_argument("--repeat", type=int, default=2, help="speed: timed repetitions (best kept)")
    p.add_argument("--speed-ids", help="speed: prompt ids file (cycled); default: the --ids file, "
                   "else seeded pseudo-random ids")
    p.add_argument("--seed", type=int, default=0, help="speed: seed of the pseudo-random prompt")
    p.add_argument("--membw", action="store_true", help="speed: also time a 1 GiB device copy")
    a = p.parse_args(argv)
    if not a.out and not a.speed:
        p.error("nothing to do: give --out, --speed or both")
    if a.out and not a.ids:
        p.error("--out needs --ids")
    for name in ("prompt_len", "tokens", "prefill_len", "repeat"):
        if getattr(a, name) < 1:
            p.error("--%s must be at least 1" % name.replace("_", "-"))
    return a


def read_ids(path):
    with open(path, "r", encoding="ascii") as f:
        text = f.read()
    try:
        ids = [int(t) for t in text.split()]
    except ValueError as e:
        raise ValueError("%s: not a list of integers (%s)" % (path, e)) from None
    if not ids:
        raise ValueError("%s: no ids" % path)
    return ids


def load_model(torch, args):
    from transformers import AutoModelForCausalLM
    kw = {"dtype": torch.float32 if args.dtype == "float32" else torch.bfloat16}
    if args.attn:
        kw["attn_implementation"] = args.attn
    sync(torch, args.device)
    t0 = time.perf_counter()
    model = AutoModelForCausalLM.from_pretrained(args.model, **kw)
    if args.dtype == "float32":
        model = model.float()
    model = model.to(args.device).eval()
    sync(torch, args.device)
    return model, time.perf_counter() - t0


def sync(torch, device):
    if device == "cuda":
        torch.cuda.synchronize()


def check_ids(ids, vocab, what):
    bad = [i for i in ids if i < 0 or i >= vocab]
    if bad:
        raise ValueError("%s: id %d outside the vocabulary [0, %d)" % (what, bad[0], vocab))


def write_f32_rows(tensor, path):
    """Writes a 2-D float tensor as raw float32 little-endian, row-major."""
    t = tensor.detach().float().contiguous().cpu()
    try:
        import numpy  # torch's .numpy() needs it
        data = numpy.ascontiguousarray(t.numpy()).astype("<f4", copy=False).tobytes()
    except ImportError:
        import array
        arr = array.array("f", t.flatten().tolist())
        if sys.byteorder != "little":
            arr.byteswap()
        data = arr.tobytes()
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(data)
    os.replace(tmp, path)


def logits_mode(torch, model, args, vocab):
    ids = read_ids(args.ids)
    check_ids(ids, vocab, args.ids)
    x = torch.tensor([ids], dtype=torch.long, device=args.device)
    with torch.no_grad():
        logits = model(input_ids=x, use_cache=False).logits[0]
    if logits.shape[0] != len(ids):
        raise RuntimeError("model returned %d rows for %d ids" % (logits.shape[0], len(ids)))
    write_f32_rows(logits[:, :vocab], args.out)
    return {"positions": len(ids), "vocab": vocab, "out": args.out}


def prompt_ids(args, n, vocab):
    """n ids: the --speed-ids (else --ids) file cycled, else seeded random ids in [3, vocab)."""
    path = args.speed_ids or args.ids
    if path:
        src = read_ids(path)
        check_ids(src, vocab, path)
        return [src[i % len(src)] for i in range(n)]
    rng = random.Random(args.seed)
    return [rng.randrange(3, vocab) for _ in range(n)]


def time_prefill(torch, model, args, ids):
    x = torch.tensor([ids], dtype=torch.long, device=args.device)
    sync(torch, args.device)
    t0 = time.perf_counter()
    with torch.no_grad():
        out = model(input_ids=x, use_cache=True)
        nxt = out.logits[:, -1].argmax(-1)
    nxt.item()
    sync(torch, args.device)
    return time.perf_counter() - t0, out, nxt


def time_decode(torch, model, args, ids, n):
    """Seconds to the first token (prefill of ids), seconds for the n greedy tokens after it, and
    those tokens."""
    ttft, out, nxt = time_prefill(torch, model, args, ids)
    past = out.past_key_values
    made = []
    sync(torch, args.device)
    t0 = time.perf_counter()
    with torch.no_grad():
        for _ in range(n):
            out = model(input_ids=nxt[:, None], past_key_values=past, use_cache=True)
            past = out.past_key_values
            nxt = out.logits[:, -1].argmax(-1)
            made.append(nxt)
    sync(torch, args.device)
    dt = time.perf_counter() - t0
    return ttft, dt, [int(t.item()) for t in made]


def time_copy(torch, device):
    """Device-to-device copy bandwidth, read + write bytes per second, best of 5."""
    n = 1 << 28  # float32 elements: 1 GiB
    a = torch.empty(n, dtype=torch.float32, device=device)
    b = torch.empty_like(a)
    b.copy_(a)
    best = None
    for _ in range(5):
        sync(torch, device)
        t0 = time.perf_counter()
        b.copy_(a)
        sync(torch, device)
        dt = time.perf_counter() - t0
        best = dt if best is None else min(best, dt)
    del a, b
    return 2.0 * 4 * n / best


def speed_mode(torch, model, args, vocab, max_pos):
    if args.prompt_len + args.tokens > max_pos or args.prefill_len > max_pos:
        raise ValueError("prompt and tokens exceed max_position_embeddings %d" % max_pos)
    dec_ids = prompt_ids(args, args.prompt_len, vocab)
    pre_ids = prompt_ids(args, args.prefill_len, vocab)
    time_decode(torch, model, args, dec_ids, min(8, args.tokens))  # warm-up
    time_prefill(torch, model, args, pre_ids)
    pre = min(time_prefill(torch, model, args, pre_ids)[0] for _ in range(args.repeat))
    dec = ttft = None
    for _ in range(args.repeat):
        first, dt, made = time_decode(torch, model, args, dec_ids, args.tokens)
        dec = dt if dec is None else min(dec, dt)
        ttft = first if ttft is None else min(ttft, first)
    res = {
        "prefill_tokens": args.prefill_len, "prefill_s": pre,
        "prefill_tokens_per_s": args.prefill_len / pre,
        "decode_prompt_tokens": args.prompt_len, "decode_tokens": args.tokens, "decode_s": dec,
        "decode_tokens_per_s": args.tokens / dec, "decode_first_ids": made[:16], "ttft_s": ttft,
        "repeat": args.repeat,
    }
    if args.membw and args.device == "cuda":
        res["device_copy_bytes_per_s"] = time_copy(torch, args.device)
    return res


def main(argv):
    args = parse_args(argv)
    try:
        import torch
        import transformers
    except ImportError as e:
        print("ref-logits.py: torch and transformers are needed (%s)" % e, file=sys.stderr)
        return 1
    if args.device is None:
        args.device = "cuda" if torch.cuda.is_available() else "cpu"
    if args.device == "cuda" and not torch.cuda.is_available():
        print("ref-logits.py: --device cuda but torch sees no GPU", file=sys.stderr)
        return 1
    torch.manual_seed(0)
    try:
        model, load_s = load_model(torch, args)
        cfg = model.config
        vocab = int(cfg.vocab_size)
        max_pos = int(getattr(cfg, "max_position_embeddings", 1 << 30))
        res = {"runtime": "transformers", "transformers_version": transformers.__version__,
               "torch_version": torch.__version__, "model": args.model, "dtype": args.dtype,
               "device": args.device, "load_s": load_s,
               "attn_implementation": getattr(cfg, "_attn_implementation", None)}
        if args.device == "cuda":
            res["device_name"] = torch.cuda.get_device_name(0)
        if args.out:
            res["logits"] = logits_mode(torch, model, args, vocab)
        if args.speed:
            res["speed"] = speed_mode(torch, model, args, vocab, max_pos)
    except (OSError, ValueError, RuntimeError) as e:
        print("ref-logits.py: %s" % e, file=sys.stderr)
        return 1
    json.dump(res, sys.stdout, indent=1)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
