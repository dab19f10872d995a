#!/bin/sh
# Per-kernel GPU times of one decode token of the random SmolLM3-3B, from Nsight Compute.
#
#   bench/kernel-times.sh [OUTDIR]       (OUTDIR: $OUT when set, else ./kernel-times-out)
#
# Makes (or reuses) the model as bench/bench-gpu.sh does, packs it BF16 and quantizes it with
# --profile quality, then profiles every kernel of a short greedy run with ncu (no clock or cache
# control, so the figures are the kernels' own durations at the GPU's clocks, without the overlap
# programmatic dependent launch gives between neighbours) and sums the last decode token's kernels
# per step of a layer: time, DRAM bytes read and GB/s. Environment: BIN, B, WORK as bench-gpu.sh;
# MODELS (default "s3 s3q"); RUNENV: extra VAR=value words for thin-run (e.g. THIN_CUDA_FUSE=0).
set -u
cd "$(dirname "$0")/.."
OUTDIR=${1:-${OUT:-kernel-times-out}}
BIN=${BIN:-build/bin}
WORK=${WORK:-/tmp/thin-bench-gpu}
MODELS=${MODELS:-s3 s3q}
mkdir -p "$OUTDIR" "$WORK"
[ -d .carry/lib ] && export LD_LIBRARY_PATH="$PWD/.carry/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
command -v ncu >/dev/null || { echo "kernel-times: ncu not found" >&2; exit 1; }
PYTHONUNBUFFERED=1 python3 bench/make-smollm3.py "$WORK/smollm3" >/dev/null 2>&1 || exit 1
[ -f "$WORK/s3.thin" ] || "$BIN/thin-pack" -q "$WORK/smollm3" \
    --tokenizer fixtures/tokenizer-vectors/ggml-vocab-llama-bpe.gguf -o "$WORK/s3.thin" || exit 1
[ -f "$WORK/s3q.thin" ] || "$BIN/thin-quant" -q --profile quality "$WORK/s3.thin" -o "$WORK/s3q.thin" || exit 1
for m in $MODELS; do
    env ${RUNENV:-} timeout 300 ncu --csv --print-units base --clock-control none --cache-control none \
        --metrics gpu__time_duration.sum,dram__bytes_read.sum \
        "$BIN/thin-run" "$WORK/$m.thin" --no-verify --device cuda --ctx 1024 \
        --ids "1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16" -n 3 -t 0 --ignore-eos -q \
        >"$OUTDIR/ncu-$m.csv" 2>"$OUTDIR/ncu-$m.err"
    python3 - "$OUTDIR/ncu-$m.csv" "$m" <<'PY'
import csv, sys, collections
rows = [r for r in csv.reader(open(sys.argv[1])) if len(r) > 10]
hdr = rows[0]; rows = rows[1:]
ix = {k: hdr.index(k) for k in ("ID", "Kernel Name", "Grid Size", "Metric Name", "Metric Value")}
k = collections.OrderedDict()
for r in rows:
    d = k.setdefault(int(r[ix["ID"]]), {"name": r[ix["Kernel Name"]].split("(")[0], "grid": r[ix["Grid Size"]]})
    d[r[ix["Metric Name"]]] = float(r[ix["Metric Value"]].replace(",", ""))
ks = list(k.values())
emb = [i for i, d in enumerate(ks) if "embed" in d["name"]]
tok = ks[emb[-1]:]  # the last token's kernels (it starts with the embedding gather)
n_layer_k = 5
body = tok[1:]
layers = (len(body) - 3) // n_layer_k
slots = ["q/k/v+rope+kv", "attention", "o+add", "gate/up+silu", "down+add"]
agg = collections.OrderedDict((s, [0.0, 0.0, 0]) for s in ["embed"] + slots + ["lm_head", "argmax"])
def add(s, d):
    a = agg[s]; a[0] += d.get("gpu__time_duration.sum", 0) / 1e3; a[1] += d.get("dram__bytes_read.sum", 0); a[2] += 1
add("embed", tok[0])
for i, d in enumerate(body[: layers * n_layer_k]):
    add(slots[i % n_layer_k], d)
for d in body[layers * n_layer_k:]:
    add("lm_head" if "matvec" in d["name"] else "argmax", d)
print(f"== {sys.argv[2]}: ncu kernel times of one decode token ({len(tok)} kernels, {layers} layers)")
print(f"{'step':16} {'kernels':>7} {'us/token':>9} {'us/each':>8} {'MB read':>8} {'GB/s':>6}")
tot = [0.0, 0.0]
for s, (us, b, n) in agg.items():
    if not n: continue
    tot[0] += us; tot[1] += b
    print(f"{s:16} {n:7d} {us:9.1f} {us / n:8.2f} {b / 1e6:8.1f} {b / us / 1e3 if us else 0:6.0f}")
print(f"{'sum':16} {len(tok):7d} {tot[0]:9.1f} {'':8} {tot[1] / 1e6:8.1f} {tot[1] / tot[0] / 1e3:6.0f}")
print("first layer:", ", ".join(f"{d['name'][:28]} {d['grid']} {d.get('gpu__time_duration.sum', 0) / 1e3:.2f}us" for d in body[:5]))
PY
done
