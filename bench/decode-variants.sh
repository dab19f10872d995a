#!/bin/sh
# Decode speed of thin-run's CUDA backend under environment variants, side by side in one run,
# with a kernel timeline of one decode token per model and variant (builds nothing).
#
#   bench/decode-variants.sh [OUTDIR]    (OUTDIR: $OUT when set, else ./decode-variants-out)
#
# Makes (or reuses) the random SmolLM3-3B as bench/bench-gpu.sh does (BF16, and FP8 with
# --profile quality; or the random Qwen2.5-1.5B / Qwen3-1.7B of bench/make-qwen.py: models q2, q2q,
# q3, q3q; or its Qwen3-30B-A3B-shaped mixture of experts, 4 layers: m3, m3q), then
# for each model in MODELS and each variant in VARIANTS (';'-separated
# lists of VAR=value words, '-' for the defaults; a word RUN=path runs that thin-run binary instead
# of BIN's, to compare builds) decodes 128 tokens after a prompt of the ids 1..PROMPT_LEN (default 16;
# from 256 positions on, the decode takes the long-context attention path)
# REPEAT times and keeps the best tokens/s, also as a share of the bandwidth limit
# (weight bytes / the device-to-device copy bandwidth of tests/cuda/test_copy_bandwidth). With
# TRACE=N and binaries built with the timeline probes (make B=build-trace CUDA_TRACE=1, then
# BIN=build-trace/bin) each first run also records the timeline of decode token N
# (THIN_CUDA_TRACE) and bench/trace-summary.py prints where its time went; the probes cost a few
# per cent, so speeds are best compared in a build without them.
# Environment: BIN, B, WORK as bench-gpu.sh; MODELS (default "s3 s3q"; also q2, q2q, q3, q3q, m3, m3q); VARIANTS; REPEAT (3);
# DECODE_ARGS, thin-run's choice of the next token (default "-t 0", greedy; e.g. "-t 0.8 --top-p
# 0.95 --seed 1" for sampling, whose ids then compare across variants for the same seed).
set -u
cd "$(dirname "$0")/.." || exit 1
OUTDIR=${1:-${OUT:-decode-variants-out}}
BIN=${BIN:-build/bin}
B=${B:-build}
WORK=${WORK:-/tmp/thin-bench-gpu}
MODELS=${MODELS:-s3 s3q}
VARIANTS=${VARIANTS:--}
REPEAT=${REPEAT:-3}
TRACE=${TRACE:-0}
DECODE_ARGS=${DECODE_ARGS:--t 0}
mkdir -p "$OUTDIR" "$WORK"
[ -d .carry/lib ] && export LD_LIBRARY_PATH="$PWD/.carry/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
. bench/variants-lib.sh

BW=$("$B/tests/cuda/test_copy_bandwidth" 2>/dev/null | awk '/copy_bandwidth_GBps/{print $2}')
# the models MODELS names and WORK lacks: s3 / s3q (SmolLM3-3B, BF16 / quality FP8), q2 / q2q
# (Qwen2.5-1.5B, with q/k/v biases), q3 / q3q (Qwen3-1.7B, with q/k norms), m3 / m3q (Qwen3-30B-A3B's
# layer, 4 layers: 128 experts, top 8)
needs() { for want; do case " $MODELS " in *" $want "*) return 0 ;; esac; done; return 1; }
if needs s3 s3q && [ ! -f "$WORK/s3.thin" ]; then
    PYTHONUNBUFFERED=1 python3 bench/make-smollm3.py "$WORK/smollm3" >/dev/null 2>&1 || exit 1
    "$BIN/thin-pack" -q "$WORK/smollm3" \
        --tokenizer fixtures/tokenizer-vectors/ggml-vocab-llama-bpe.gguf -o "$WORK/s3.thin" || exit 1
fi
for n in 2 3 3moe; do
    m=q$n; [ $n = 3moe ] && m=m3
    if needs $m ${m}q && [ ! -f "$WORK/$m.thin" ]; then
        PYTHONUNBUFFERED=1 python3 bench/make-qwen.py qwen$n "$WORK/qwen$n" >/dev/null 2>&1 || exit 1
        "$BIN/thin-pack" -q "$WORK/qwen$n" -o "$WORK/$m.thin" || exit 1
    fi
done
for m in s3 q2 q3 m3; do
    if needs "${m}q" && [ ! -f "$WORK/${m}q.thin" ]; then
        "$BIN/thin-quant" -q --profile quality "$WORK/$m.thin" -o "$WORK/${m}q.thin" || exit 1
    fi
done

PROMPT_LEN=${PROMPT_LEN:-16}
PROMPT=$(seq -s ' ' 1 "$PROMPT_LEN")
TABLE=$OUTDIR/variants.txt
printf '%-6s %-44s %9s %7s  %s\n' model variant "tok/s" "limit" "ids as the first variant" | tee "$TABLE"
decode_variant() {
    best=0
    r=0
    while [ $r -lt "$REPEAT" ]; do
        tr=; [ $r = 0 ] && [ "$TRACE" -gt 0 ] && \
            tr="THIN_CUDA_TRACE=$TRACE THIN_CUDA_TRACE_FILE=$OUTDIR/trace-$m-$vi.csv"
        env $envw $tr "$run" "$WORK/$m.thin" --no-verify --device cuda --ctx 1024 \
            --ids "$PROMPT" -n 128 $DECODE_ARGS --ignore-eos --json >"$OUTDIR/$m-$vi.json" 2>"$OUTDIR/$m-$vi.err"
        d=$(jget "$OUTDIR/$m-$vi.json" decode_tok_s)
        [ -n "$d" ] && best=$(python3 -c "import sys;print(max(float(sys.argv[1]),float(sys.argv[2])))" "$best" "$d")
        [ $r = 0 ] && cp "$OUTDIR/$m-$vi.json" "$OUTDIR/$m-$vi-first.json"
        r=$((r + 1))
    done
    wb=$(jget "$OUTDIR/$m-$vi.json" weight_bytes)
    lim=$(python3 -c "import sys;print(f'{float(sys.argv[1])*float(sys.argv[2])/(float(sys.argv[3])*1e9):.0%}')" "$best" "${wb:-0}" "${BW:-0}" 2>/dev/null)
    same=-
    if [ -n "$first" ]; then
        same=$(same_ids "$first" "$OUTDIR/$m-$vi-first.json")
    else
        first=$OUTDIR/$m-$vi-first.json
    fi
    printf '%-6s %-44s %9.1f %7s  %s\n' "$m" "$v" "$best" "${lim:-?}" "$same" | tee -a "$TABLE"
    if [ -f "$OUTDIR/trace-$m-$vi.csv" ]; then
        { echo "== $m, $v: timeline of decode token $TRACE"; python3 bench/trace-summary.py "$OUTDIR/trace-$m-$vi.csv"; } \
            >>"$OUTDIR/traces.txt" 2>&1
    fi
}
for_each_variant decode_variant
[ -f "$OUTDIR/traces.txt" ] && cat "$OUTDIR/traces.txt"
echo "== decode tok/s (copy bandwidth ${BW:-?} GB/s)"
cat "$TABLE"
exit 0
