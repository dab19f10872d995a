#!/usr/bin/env python3
"""report.py: measures how close each ThinTensor profile stays to the original model, and how fast
it runs, and writes report.json and report.md.

For each model: packs the SafeTensors folder (thin-pack), makes the profiles (thin-pack --dtype
bf16, thin-quant --profile quality|fp8-all), scores a fixed id sequence teacher-forced with every
profile (thin-run --score), compares the logits with the reference (thin-compare --json), and
times prefill and decode (thin-run --json). With torch and transformers present, the reference is
transformers on the same folder (bench/ref-logits.py), which is timed too; without them, the
reference is the thin-run profile of the model's own dtype. SmolLM3 needs --smollm3 DIR and a GPU.

Standard library only (torch is used through bench/ref-logits.py, in a child process).
Exit status: 0 all measurements ran (targets may still fail: see --check-targets), 1 a measurement
failed or (with --check-targets) a target was missed, 2 usage error.
"""
import argparse
import datetime
import json
import os
import platform
import random
import shlex
import shutil
import subprocess
import sys
import tempfile
import time

sys.dont_write_bytecode = True
import report_logits  # noqa: E402
import report_md  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

# Minimum centered cosine, by (model key, profile), against the model's primary reference.
TARGETS = {
    ("stories260k", "bf16"): 0.9999,
    ("stories260k", "quality"): 0.998,
    ("smollm3", "bf16"): 0.9999,
    ("smollm3", "quality"): 0.995,
}


class StepError(Exception):
    pass


class Runner:
    """Runs commands, logging each with its time to a log file."""

    def __init__(self, log_path, verbose):
        self.log = open(log_path, "a", encoding="utf-8")
        self.verbose = verbose

    def run(self, cmd, what, env=None):
        line = " ".join(shlex.quote(c) for c in cmd)
        self.log.write("$ %s\n" % line)
        self.log.flush()
        if self.verbose:
            print("report: %s" % what, file=sys.stderr)
        t0 = time.perf_counter()
        try:
            p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
        except OSError as e:
            raise StepError("%s: cannot run %s (%s)" % (what, cmd[0], e)) from None
        dt = time.perf_counter() - t0
        err = p.stderr.decode("utf-8", "replace")
        self.log.write(err + "[exit %d, %.3f s]\n" % (p.returncode, dt))
        self.log.flush()
        if p.returncode != 0:
            tail = err.strip().splitlines()[-3:]
            raise StepError("%s: exit %d: %s" % (what, p.returncode, " / ".join(tail)))
        return p.stdout.decode("utf-8", "replace"), dt


def parse_args(argv):
    p = argparse.ArgumentParser(prog="report.py", description=__doc__.split("\n")[0])
    p.add_argument("--bin", default=os.path.join(ROOT, "build", "bin"), help="thin-* tools folder")
    p.add_argument("--fixtures", default=os.path.join(ROOT, "fixtures"))
    p.add_argument("--out", default=os.environ.get("OUT") or "report-out",
                   help="folder for report.json and report.md (default $OUT, else ./report-out)")
    p.add_argument("--work", help="folder for packed models and logits (default: a temporary "
                   "folder, removed at the end)")
    p.add_argument("--models", default="stories260k,smollm3",
                   help="comma list: stories260k, smollm3")
    p.add_argument("--smollm3", help="SmolLM3 SafeTensors folder (made by bench/make-smollm3.py)")
    p.add_argument("--device", choices=("auto", "cuda", "cpu"), default="auto")
    p.add_argument("--smollm3-on-cpu", action="store_true", help="run the --smollm3 folder even "
                   "on the CPU backend (for small stand-ins: the 3B model is far too slow there)")
    p.add_argument("--score-kv-dtype", default="f32", help="thin-run --kv-dtype when scoring "
                   "(default f32, so that the weights alone make the difference; '' = thin-run's "
                   "default)")
    p.add_argument("--speed-kv-dtype", default="", help="thin-run --kv-dtype when timing "
                   "(default: thin-run's own)")
    p.add_argument("--no-torch", action="store_true", help="never use transformers")
    p.add_argument("--no-f32-ref", action="store_true",
                   help="SmolLM3: skip the transformers float32 reference")
    p.add_argument("--python", default=sys.executable, help="python for bench/ref-logits.py")
    p.add_argument("--positions", type=int, default=64, help="SmolLM3 scored positions")
    p.add_argument("--seed", type=int, default=0, help="seed of the pseudo-random id sequences")
    p.add_argument("--prompt-len", type=int, default=16, help="decode prompt length")
    p.add_argument("--decode-tokens", type=int, default=128, help="tokens decoded")
    p.add_argument("--prefill-len", type=int, default=512, help="prefill prompt length (at most "
                   "the model's context less 16)")
    p.add_argument("--repeat", type=int, default=2, help="timed repetitions, best kept")
    p.add_argument("--bandwidth", type=float, help="device memory bandwidth in GB/s for the limit "
                   "lines (default: measured by torch on the GPU, else none)")
    p.add_argument("--bandwidth-source", default="given with --bandwidth",
                   help="how --bandwidth was measured, for the report")
    p.add_argument("--check-targets", action="store_true", help="exit 1 when a target is missed")
    p.add_argument("-q", "--quiet", action="store_true")
    a = p.parse_args(argv)
    a.models = [m.strip().lower() for m in a.models.split(",") if m.strip()]
    for m in a.models:
        if m not in ("stories260k", "smollm3"):
            p.error("unknown model %r" % m)
    for name in ("positions", "prompt_len", "decode_tokens", "prefill_len", "repeat"):
        if getattr(a, name) < 1:
            p.error("--%s must be at least 1" % name.replace("_", "-"))
    return a


# ---- environment ----

def have_torch(python):
    code = "import torch, transformers; print(int(torch.cuda.is_available()))"
    try:
        p = subprocess.run([python, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    except OSError:
        return None
    if p.returncode != 0:
        return None
    return {"cuda": p.stdout.strip() == b"1"}


def gpu_name():
    try:
        p = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"],
                           stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    except OSError:
        return None
    if p.returncode != 0 or not p.stdout.strip():
        return None
    return p.stdout.decode().strip().splitlines()[0]


def tool_version(tool):
    try:
        p = subprocess.run([tool, "--version"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    except OSError:
        return None
    return p.stdout.decode("utf-8", "replace").strip().splitlines()[0] if p.stdout else None


def git_commit():
    """The checkout's commit (with -dirty for local changes), or $THIN_REPORT_COMMIT when set (for
    a copy of the tree whose git data is not its own)."""
    if os.environ.get("THIN_REPORT_COMMIT"):
        return os.environ["THIN_REPORT_COMMIT"]
    try:
        p = subprocess.run(["git", "-C", ROOT, "describe", "--always", "--dirty", "--abbrev=7"],
                           stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    except OSError:
        return None
    return p.stdout.decode().strip() or None


def write_ids(path, ids):
    with open(path, "w", encoding="ascii") as f:
        f.write(" ".join(str(i) for i in ids) + "\n")


def read_config(folder):
    with open(os.path.join(folder, "config.json"), encoding="utf-8") as f:
        cfg = json.load(f)
    text = cfg.get("text_config", cfg)
    return int(text["vocab_size"]), int(text.get("max_position_embeddings", 1 << 30))


def folder_bytes(folder):
    return sum(os.path.getsize(os.path.join(folder, n)) for n in os.listdir(folder)
               if n.endswith(".safetensors") and n != "model-bf16.safetensors")


# ---- the models ----

def model_specs(args, torch_info):
    """The models to measure: (spec list, skipped list)."""
    specs, skipped = [], []
    fix = args.fixtures
    if "stories260k" in args.models:
        src = os.path.join(fix, "stories260k")
        with open(os.path.join(src, "golden", "once_upon_a_time.ids"), encoding="ascii") as f:
            seq = f.read().split("\n")
        ids = [int(t) for t in next(s for s in seq if s.startswith("sequence ")).split()[1:]]
        specs.append({
            "key": "stories260k", "name": "stories260K", "source": src, "native": "f32",
            "profiles": ["f32", "bf16", "quality", "fp8-all"], "ids": ids[:200],
            "ids_what": "the golden `once_upon_a_time` sequence, 200 positions",
            "golden": os.path.join(src, "golden", "once_upon_a_time.logits_all.f32"),
            "refs": ["float32", "bfloat16"], "speed_ref": "float32", "pack_extra": []})
    if "smollm3" in args.models:
        src = args.smollm3
        if not src or not os.path.isfile(os.path.join(src, "config.json")):
            skipped.append({"model": "SmolLM3-3B", "why": "no SmolLM3 folder (make it with "
                            "bench/make-smollm3.py on a GPU machine with torch)"})
        elif args.device != "cuda" and not args.smollm3_on_cpu:
            skipped.append({"model": "SmolLM3-3B", "why": "no GPU: the 3B model is not run on "
                            "the CPU backend here"})
        else:
            refs = ["bfloat16"] + ([] if args.no_f32_ref else ["float32"])
            # make-smollm3.py writes no tokenizer: the Llama-3 vocabulary has the same 128256 ids.
            gguf = os.path.join(fix, "tokenizer-vectors", "ggml-vocab-llama-bpe.gguf")
            extra = ["--tokenizer", gguf] if (os.path.isfile(gguf) and not os.path.isfile(
                os.path.join(src, "tokenizer.json"))) else []
            specs.append({
                "key": "smollm3", "name": "SmolLM3-3B (random weights)", "source": src,
                "native": "bf16", "profiles": ["bf16", "quality", "fp8-all"], "ids": None,
                "ids_what": "%d pseudo-random ids (seed %d)" % (args.positions, args.seed),
                "golden": None, "refs": refs, "speed_ref": "bfloat16", "pack_extra": extra})
    if not torch_info:
        for s in specs:
            s["refs"], s["speed_ref"] = [], None
    return specs, skipped


def pack_input(folder):
    """The folder's model.safetensors when it is the one weights file, else the folder."""
    f = os.path.join(folder, "model.safetensors")
    return f if os.path.isfile(f) else folder


def make_profiles(run, args, spec, work):
    """Packs and quantizes; returns {profile: info} with paths, sizes and commands."""
    b = args.bin
    key, src = spec["key"], pack_input(spec["source"])
    path = {p: os.path.join(work, "%s-%s.thin" % (key, p)) for p in spec["profiles"]}
    base = path[spec["native"]]
    cmds = {}
    for p in spec["profiles"]:
        if p == spec["native"] and p != "bf16":
            cmds[p] = [os.path.join(b, "thin-pack")] + spec["pack_extra"] + [src, "-o", path[p]]
        elif p == "bf16":
            cmds[p] = [os.path.join(b, "thin-pack"), "--dtype", "bf16"] + spec["pack_extra"] + [
                src, "-o", path[p]]
        else:
            cmds[p] = [os.path.join(b, "thin-quant"), "--profile", p, base, "-o", path[p],
                       "--json", path[p] + ".json"]
    order = [spec["native"]] + [p for p in spec["profiles"] if p != spec["native"]]
    info = {}
    for p in order:
        _, dt = run.run(cmds[p], "%s: make profile %s" % (spec["name"], p))
        info[p] = {"name": p, "path": path[p], "file_bytes": os.path.getsize(path[p]),
                   "make_s": dt, "make_cmd": shown_cmd(cmds[p], work)}
        qj = path[p] + ".json"
        if os.path.exists(qj):
            with open(qj, encoding="utf-8") as f:
                info[p]["quant"] = json.load(f)
    return [info[p] for p in spec["profiles"]]


def shown_cmd(cmd, work):
    """The command as a reader would type it: tool by name, work files by name, sources relative."""
    out = [os.path.basename(cmd[0])]
    for c in cmd[1:]:
        if c.startswith(work + os.sep):
            c = os.path.relpath(c, work)
        elif c.startswith(ROOT + os.sep):
            c = os.path.relpath(c, ROOT)
        out.append(shlex.quote(c))
    return " ".join(out)


# ---- thin-run ----

def thin_run_base(args, path, kv_dtype):
    cmd = [os.path.join(args.bin, "thin-run"), path, "--device", args.device]
    if kv_dtype:
        cmd += ["--kv-dtype", kv_dtype]
    return cmd


def thin_score(run, args, prof, ids_path, out):
    cmd = thin_run_base(args, prof["path"], args.score_kv_dtype) + ["--score", ids_path,
                                                                    "--out", out]
    _, dt = run.run(cmd, "thin-run --score %s" % prof["name"])
    return dt


def thin_generate(run, args, path, ids, n):
    cmd = thin_run_base(args, path, args.speed_kv_dtype) + [
        "--ids", " ".join(map(str, ids)), "--max-tokens", str(n), "--temperature", "0", "--json"]
    out, _ = run.run(cmd, "thin-run --json %d+%d" % (len(ids), n))
    try:
        doc = json.loads(out)
    except ValueError:
        raise StepError("thin-run --json printed no JSON object") from None
    if not isinstance(doc, dict):
        raise StepError("thin-run --json printed no JSON object")
    return doc


def thin_speed(run, args, prof, speed_ids, prefill_len):
    """Best-of-repeat prefill and decode figures of thin-run for one profile."""
    best = {}
    for _ in range(args.repeat):
        doc = thin_generate(run, args, prof["path"], speed_ids[:prefill_len], 1)
        keep_max(best, "prefill_tokens_per_s", doc.get("prefill_tok_s"))
        keep_min(best, "load_s", doc.get("load_s"))
        # whether the prompt's one-time costs were paid during the load (beside the checksums)
        best["prefill_prepared"] = bool(doc.get("prepared")) or best.get("prefill_prepared", False)
        doc = thin_generate(run, args, prof["path"], speed_ids[:args.prompt_len],
                            args.decode_tokens)
        keep_max(best, "decode_tokens_per_s", doc.get("decode_tok_s"))
        keep_min(best, "ttft_s", doc.get("ttft_s"))
        keep_min(best, "load_s", doc.get("load_s"))
        keep_min(best, "start_to_first_s", doc.get("start_to_first_s"))
        for k in ("device", "threads", "kv_dtype", "weight_bytes", "generated_tokens", "stop"):
            best[k] = doc.get(k)
    for k in ("prefill_tokens_per_s", "decode_tokens_per_s"):
        if best.get(k) is None:
            raise StepError("thin-run --json gave no %s" % k)
    return best


def keep_max(d, k, v):
    if isinstance(v, (int, float)) and (d.get(k) is None or v > d[k]):
        d[k] = float(v)


def keep_min(d, k, v):
    if isinstance(v, (int, float)) and (d.get(k) is None or v < d[k]):
        d[k] = float(v)


# ---- transformers ----

def ref_run(run, args, spec, dtype, ids_path, out, speed_ids_path):
    cmd = [args.python, os.path.join(HERE, "ref-logits.py"), "--model", spec["source"],
           "--dtype", dtype, "--device", args.ref_device, "--ids", ids_path, "--out", out]
    if speed_ids_path:
        cmd += ["--speed", "--speed-ids", speed_ids_path, "--prompt-len", str(args.prompt_len),
                "--tokens", str(args.decode_tokens), "--prefill-len", str(spec["prefill_len"]),
                "--repeat", str(args.repeat)]
        if args.ref_device == "cuda" and args.bandwidth is None:
            cmd.append("--membw")
    text, _ = run.run(cmd, "transformers %s %s" % (spec["name"], dtype))
    try:
        return json.loads(text)
    except ValueError:
        raise StepError("ref-logits.py printed no JSON object") from None


# ---- fidelity ----

def compare(run, args, ref, test, vocab):
    """thin-compare --json: overall figures and the centered cosine of every position."""
    out, _ = run.run([os.path.join(args.bin, "thin-compare"), ref, test, "--vocab", str(vocab),
                      "--json"], "thin-compare %s" % os.path.basename(test))
    try:
        doc = json.loads(out)
        res = {"positions": doc["positions"], "cos_min": doc["cosine_min"],
               "cos_min_position": doc.get("cosine_min_position"), "cos_mean": doc["cosine_mean"],
               "top1_agreement": doc["top1_share"], "max_abs_diff": doc["max_abs_diff"],
               "nonfinite_positions": doc.get("nonfinite_positions")}
        per = [r["cosine"] for r in doc.get("rows", [])]
    except (ValueError, KeyError, TypeError) as e:
        raise StepError("thin-compare --json: unexpected output (%s)" % e) from None
    if len(per) != res["positions"]:
        per = report_logits.centered_cos_rows(ref, test, vocab)
    res["cos_per_position"] = per
    return res


def fidelity_row(run, args, spec, prof, ref_name, ref_path, test_path, vocab, primary):
    row = {"profile": prof, "reference": ref_name}
    tgt = TARGETS.get((spec["key"], prof)) if primary else None
    row["target"] = tgt
    try:
        row.update(compare(run, args, ref_path, test_path, vocab))
    except StepError as e:
        row["error"] = str(e)
        return row
    if tgt is not None:
        row["pass"] = row["cos_min"] is not None and row["cos_min"] >= tgt
    return row


# ---- one model ----

def measure_model(run, args, spec, work):
    vocab, max_pos = read_config(spec["source"])
    rng = random.Random(args.seed)
    if spec["ids"] is None:
        spec["ids"] = [rng.randrange(vocab) for _ in range(args.positions)]
    spec["prefill_len"] = max(1, min(args.prefill_len, max_pos - 16))
    srng = random.Random(args.seed + 1)
    speed_ids = [srng.randrange(3, vocab) for _ in range(max(spec["prefill_len"], args.prompt_len))]
    m = {"key": spec["key"], "name": spec["name"], "source": os.path.relpath(spec["source"], ROOT)
         if spec["source"].startswith(ROOT) else spec["source"],
         "source_bytes": folder_bytes(spec["source"]), "vocab": vocab, "max_pos": max_pos,
         "ids_what": spec["ids_what"], "positions": len(spec["ids"]), "ids": spec["ids"],
         "speed_settings": {"prefill_len": spec["prefill_len"], "prompt_len": args.prompt_len,
                            "decode_tokens": args.decode_tokens, "repeat": args.repeat},
         "fidelity": [], "speed": [], "notes": [], "references": []}
    ids_path = os.path.join(work, spec["key"] + ".ids")
    speed_ids_path = os.path.join(work, spec["key"] + "-speed.ids")
    write_ids(ids_path, spec["ids"])
    write_ids(speed_ids_path, speed_ids)
    profs = make_profiles(run, args, spec, work)
    m["profiles"] = [{k: v for k, v in p.items() if k != "path"} for p in profs]
    logits = {}
    for p in profs:
        logits[p["name"]] = os.path.join(work, "%s-%s.f32" % (spec["key"], p["name"]))
        thin_score(run, args, p, ids_path, logits[p["name"]])
    refs = measure_refs(run, args, spec, m, ids_path, speed_ids_path, work)
    fidelity_rows(run, args, spec, m, refs, logits, vocab)
    for p, pm in zip(profs, m["profiles"]):
        s = {"runtime": "thin-run", "profile": p["name"], "file_bytes": p["file_bytes"]}
        try:
            s.update(thin_speed(run, args, p, speed_ids, spec["prefill_len"]))
        except StepError as e:
            s["error"] = str(e)
        pm["weight_bytes"] = s.get("weight_bytes")
        if s.get("generated_tokens") is not None and s["generated_tokens"] < args.decode_tokens:
            m["notes"].append("thin-run %s decoded %d of %d tokens (stop: %s)." % (
                p["name"], s["generated_tokens"], args.decode_tokens, s.get("stop")))
        if s.get("prefill_prepared"):
            m["notes"].append("thin-run %s prepared the %d-token prompt during the load, beside the "
                              "checksums (its kernels' first loads and GEMM choices: `\"prepared\": "
                              "true`), so its prefill figure leaves them out." % (p["name"], spec["prefill_len"]))
        m["speed"].append(s)
    return m


def measure_refs(run, args, spec, m, ids_path, speed_ids_path, work):
    """Runs the transformers references; returns [(name, logits path, primary)]."""
    refs = []
    if not spec["refs"]:
        native = spec["native"]
        m["notes"].append("torch/transformers absent: the reference is thin-run's %s profile "
                          "(%s); no transformers timings." % (native, native.upper()))
        refs.append(("thin-run " + native, os.path.join(work, "%s-%s.f32" % (spec["key"], native)),
                     True, native))
        return refs
    for i, dt in enumerate(spec["refs"]):
        name = "transformers " + ("F32" if dt == "float32" else "BF16")
        out = os.path.join(work, "%s-ref-%s.f32" % (spec["key"], dt))
        timed = dt == spec["speed_ref"]
        doc = ref_run(run, args, spec, dt, ids_path, out, speed_ids_path if timed else None)
        m["references"].append({k: v for k, v in doc.items() if k not in ("logits", "speed")})
        refs.append((name, out, i == 0, None))
        if timed:
            sp = doc["speed"]
            row = {"runtime": "transformers", "profile": "f32" if dt == "float32" else "bf16",
                   "device": doc.get("device"),
                   "file_bytes": m["source_bytes"], "load_s": doc.get("load_s"),
                   "prefill_tokens_per_s": sp["prefill_tokens_per_s"],
                   "decode_tokens_per_s": sp["decode_tokens_per_s"], "ttft_s": sp.get("ttft_s"),
                   "weight_bytes": m["source_bytes"]}
            m["speed"].append(row)
            if sp.get("device_copy_bytes_per_s"):
                m["device_copy_bytes_per_s"] = sp["device_copy_bytes_per_s"]
    return refs


def fidelity_rows(run, args, spec, m, refs, logits, vocab):
    for ref_name, ref_path, primary, skip in refs:
        for p in spec["profiles"]:
            if p == skip:
                continue
            m["fidelity"].append(fidelity_row(run, args, spec, p, ref_name, ref_path, logits[p],
                                              vocab, primary))
    names = [r[0] for r in refs]
    if "transformers BF16" in names and "transformers F32" in names:
        bf = refs[names.index("transformers BF16")][1]
        f32 = refs[names.index("transformers F32")][1]
        m["fidelity"].append(fidelity_row(run, args, spec, "transformers BF16", "transformers F32",
                                          f32, bf, vocab, False))
    if spec.get("golden") and spec["native"] in logits:
        m["fidelity"].append(fidelity_row(run, args, spec, spec["native"], "llama2.c run.c F32 "
                                          "(golden)", spec["golden"], logits[spec["native"]],
                                          vocab, False))


# ---- the report ----

def add_limits(rep):
    bw = rep.get("bandwidth_bytes_per_s")
    for m in rep["models"]:
        for s in m["speed"]:
            wb = s.get("weight_bytes")
            s["bandwidth_limit_tokens_per_s"] = bw / wb if bw and wb else None


def main(argv):
    args = parse_args(argv)
    for tool in ("thin-pack", "thin-quant", "thin-run", "thin-compare"):
        if not os.access(os.path.join(args.bin, tool), os.X_OK):
            print("report.py: %s not found in %s (build with make)" % (tool, args.bin),
                  file=sys.stderr)
            return 1
    gpu = gpu_name()
    if args.device == "auto":
        args.device = "cuda" if gpu else "cpu"
    torch_info = None if args.no_torch else have_torch(args.python)
    args.ref_device = "cuda" if torch_info and torch_info["cuda"] else "cpu"
    os.makedirs(args.out, exist_ok=True)
    work = args.work or tempfile.mkdtemp(prefix="thin-report.")
    os.makedirs(work, exist_ok=True)
    try:
        return measure_all(args, torch_info, gpu, work)
    finally:
        if not args.work:
            shutil.rmtree(work, ignore_errors=True)


def measure_all(args, torch_info, gpu, work):
    run = Runner(os.path.join(args.out, "report.log"), not args.quiet)
    rep = {"schema": "thin-report/1",
           "created": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
           "host": {"hostname": platform.node(), "device": args.device, "gpu": gpu,
                    "cpu": platform.processor() or platform.machine()},
           "thin_version": tool_version(os.path.join(args.bin, "thin-run")),
           "git_commit": git_commit(), "torch": bool(torch_info),
           "score_kv_dtype": args.score_kv_dtype or "thin-run default",
           "speed_kv_dtype": args.speed_kv_dtype or "thin-run default",
           "command": os.environ.get("REPORT_COMMAND") or
           "python3 bench/report.py " + " ".join(shlex.quote(a) for a in sys.argv[1:]),
           "models": [], "skipped": [], "errors": []}
    specs, rep["skipped"] = model_specs(args, torch_info)
    for spec in specs:
        try:
            rep["models"].append(measure_model(run, args, spec, work))
        except (StepError, OSError, KeyError, ValueError) as e:
            rep["errors"].append("%s: %s" % (spec["name"], e))
            rep["skipped"].append({"model": spec["name"], "why": "failed: %s" % e})
    if args.bandwidth:
        rep["bandwidth_bytes_per_s"] = args.bandwidth * 1e9
        rep["bandwidth_source"] = args.bandwidth_source
    else:
        bws = [m["device_copy_bytes_per_s"] for m in rep["models"]
               if m.get("device_copy_bytes_per_s")]
        rep["bandwidth_bytes_per_s"] = max(bws) if bws else None
        rep["bandwidth_source"] = "1 GiB device-to-device copy timed with torch, read + write bytes"
    add_limits(rep)
    write_report(rep, args.out)
    return exit_status(rep, args)


def write_report(rep, out):
    for name, text in (("report.json", json.dumps(rep, indent=1) + "\n"),
                       ("report.md", report_md.render(rep) + "\n")):
        tmp = os.path.join(out, name + ".tmp")
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(tmp, os.path.join(out, name))


def exit_status(rep, args):
    errs = list(rep["errors"])
    missed = 0
    for m in rep["models"]:
        for r in m["fidelity"] + m["speed"]:
            if r.get("error"):
                errs.append("%s %s: %s" % (m["name"], r.get("profile"), r["error"]))
            if r.get("target") is not None and not r.get("pass"):
                missed += 1
    for e in errs:
        print("report.py: %s" % e, file=sys.stderr)
    print(report_md.summary_lines(rep)[0], file=sys.stderr)
    if errs:
        return 1
    return 1 if (args.check_targets and missed) else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
