#!/bin/sh
# Prefill speed of thin-run's CUDA backend under environment variants, side by side in one run,
# optionally with Nsight Compute's kernel times of each prefill summed by kernel name (builds
# nothing).
#
#   bench/prefill-variants.sh [OUTDIR]    (OUTDIR: $OUT when set, else ./prefill-variants-out)
#
# Makes (or reuses) the random SmolLM3-3B as bench/decode-variants.sh does (s3: BF16, s3q:
# --profile quality, s3f: --profile fp8-all), then for each model in MODELS and each variant in
# VARIANTS (';'-separated lists of VAR=value words, '-' for the defaults; RUN=path runs that
# thin-run binary instead of BIN's) runs a prompt of LEN ids (1..LEN) and 8 greedy tokens in a
# process of its own, REPEAT times, and prints each run's prefill tokens/s, time to first token
# (so each figure is a process's first prefill), load seconds, the two together (from start to the
# first token), whether the load prepared the prompt (--json prepared) and whether its ids equal
# the first variant's. The load skips the checksums (--no-verify) unless VERIFY=1.
# With NCU=1 (and ncu on the PATH) each model and variant is also run once under
# `ncu --metrics gpu__time_duration.sum` and its kernels' times are summed by name (the warm-up's
# decode kernels included).
# Environment: BIN, B, WORK as bench/decode-variants.sh; MODELS (default "s3 s3q"; any other model
# bench/decode-variants.sh has made in WORK, e.g. q3 or m3); VARIANTS;
# REPEAT (2); LEN (512); NCU (0); VERIFY (0).
set -u
cd "$(dirname "$0")/.." || exit 1
OUTDIR=${1:-${OUT:-prefill-variants-out}}
BIN=${BIN:-build/bin}
WORK=${WORK:-/tmp/thin-bench-gpu}
MODELS=${MODELS:-s3 s3q}
VARIANTS=${VARIANTS:--}
REPEAT=${REPEAT:-2}
LEN=${LEN:-512}
NCU=${NCU:-0}
VERIFY=${VERIFY:-0}
VFLAG=--no-verify
[ "$VERIFY" = 1 ] && VFLAG=--verify
mkdir -p "$OUTDIR" "$WORK"
. bench/variants-lib.sh
[ -d .carry/lib ] && export LD_LIBRARY_PATH="$PWD/.carry/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"

PYTHONUNBUFFERED=1 python3 bench/make-smollm3.py "$WORK/smollm3" >/dev/null 2>&1 || exit 1
[ -f "$WORK/s3.thin" ] || "$BIN/thin-pack" -q "$WORK/smollm3" \
    --tokenizer fixtures/tokenizer-vectors/ggml-vocab-llama-bpe.gguf -o "$WORK/s3.thin" || exit 1
for m in $MODELS; do
    case $m in
    s3q) [ -f "$WORK/s3q.thin" ] || "$BIN/thin-quant" -q --profile quality "$WORK/s3.thin" -o "$WORK/s3q.thin" || exit 1 ;;
    s3f) [ -f "$WORK/s3f.thin" ] || "$BIN/thin-quant" -q --profile fp8-all "$WORK/s3.thin" -o "$WORK/s3f.thin" || exit 1 ;;
    esac
done
seq 1 "$LEN" | tr '\n' ' ' >"$OUTDIR/ids.txt"

TABLE=$OUTDIR/variants.txt
printf '%-5s %-36s %4s %13s %9s %7s %12s %8s  %s\n' model variant run "prefill tok/s" "TTFT ms" "load s" \
    "load+TTFT s" prepared "ids as the first variant" | tee "$TABLE"
prefill_variant() {
    r=0
    while [ $r -lt "$REPEAT" ]; do
        out=$OUTDIR/$m-$vi-$r.json
        env $envw "$run" "$WORK/$m.thin" $VFLAG --device cuda --ids-file "$OUTDIR/ids.txt" -n 8 -t 0 \
            --ignore-eos --json >"$out" 2>"$OUTDIR/$m-$vi-$r.err"
        same=-
        if [ -n "$first" ]; then
            same=$(same_ids "$first" "$out")
        else
            first=$out
        fi
        python3 - "$out" "$m" "$v" "$r" "$same" <<'PY' | tee -a "$TABLE"
import json, sys
f, m, v, r, same = sys.argv[1:]
try:
    d = json.load(open(f))
    prep = {True: "yes", False: "no"}.get(d.get("prepared"), "-")  # absent before the field existed
    print(f"{m:5} {v:36} {r:>4} {d['prefill_tok_s']:13.1f} {1e3 * d['ttft_s']:9.1f} {d['load_s']:7.3f} "
          f"{d['load_s'] + d['ttft_s']:12.3f} {prep:>8}  {same}")
except (OSError, ValueError, KeyError):
    print(f"{m:5} {v:36} {r:>4} {'failed':>13} {'':9} {'':7} {'':12} {'':8}  (see {f[:-5]}.err)")
PY
        r=$((r + 1))
    done
    if [ "$NCU" = 1 ] && command -v ncu >/dev/null; then
        env $envw timeout 300 ncu --csv --print-units base --clock-control none --cache-control none \
            --metrics gpu__time_duration.sum "$run" "$WORK/$m.thin" --no-verify --device cuda \
            --ids-file "$OUTDIR/ids.txt" -n 1 -t 0 -q >"$OUTDIR/ncu-$m-$vi.csv" 2>"$OUTDIR/ncu-$m-$vi.err"
        python3 - "$OUTDIR/ncu-$m-$vi.csv" "$m, $v" <<'PY' >>"$OUTDIR/kernels.txt"
import collections, csv, sys
rows = [r for r in csv.reader(open(sys.argv[1])) if len(r) > 10]
if not rows:
    print(f"== {sys.argv[2]}: no kernel times (see the .err file)")
    sys.exit(0)
hdr, rows = rows[0], rows[1:]
ix = {k: hdr.index(k) for k in ("Kernel Name", "Grid Size", "Metric Value")}
agg = collections.defaultdict(lambda: [0.0, 0, set()])
for r in rows:
    a = agg[r[ix["Kernel Name"]].split("(")[0][:60]]
    a[0] += float(r[ix["Metric Value"]].replace(",", "")) / 1e3
    a[1] += 1
    a[2].add(r[ix["Grid Size"]])
tot = sum(a[0] for a in agg.values())
print(f"== {sys.argv[2]}: {tot:.1f} us of kernel time in {sum(a[1] for a in agg.values())} kernels")
for n, a in sorted(agg.items(), key=lambda x: -x[1][0])[:14]:
    print(f"{a[0]:10.1f} us {a[1]:5d}x  {n}  grids {' '.join(sorted(a[2])[:3])}")
PY
    fi
}
for_each_variant prefill_variant
[ -f "$OUTDIR/kernels.txt" ] && cat "$OUTDIR/kernels.txt"
echo "== prefill of $LEN tokens, a process's first"
cat "$TABLE"
exit 0
