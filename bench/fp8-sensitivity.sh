#!/bin/sh
# fp8-sensitivity.sh — where thin-quant's FP8 fidelity loss comes from, and how sensitive each
# model is to a weight error of known size. CPU only; prints short tables.
#
#   bench/fp8-sensitivity.sh [--layers N] [--positions P] [--eps "E1 E2 ..."] [--seeds K]
#                            [--no-stories] [--no-random]
#
# Measure: teacher-forced logits (thin-run --device cpu --kv-dtype f32 --score) against those of
# the unquantized model computed the same way (stories260K: its F32 weights; the random model: its
# BF16 weights), compared by thin-compare: the minimum, and the mean, over positions of the
# full-vocabulary centered-logit cosine.
#
# stories260K (fixtures/stories260k, the 200 golden positions):
#   1. one role in FP8 at a time (thin-quant --roles R [--layers L]), in each layer and in all,
#      with the absmax and with the mse row scale;
#   2. the bf16, quality and fp8-all profiles with each scale rule;
#   3. the quality profile's FP8 tensors (gate and up everywhere, down in the middle layers) given
#      instead a random relative error of RMS eps (bench/perturb-safetensors.py), averaged over
#      --seeds seeds (default 3).
# A random SmolLM3-shaped model (bench/make-random-init.c: transformers' initialisation with a
# fixed generator, seed 0; hidden 2048, intermediate 11008, 16 heads, 4 KV heads, vocab 128256,
# --layers N, default 8; P pseudo-random ids from Python's random.Random(0), default 64, as
# bench/report.py): the quality profile with each rule, each of its FP8 roles alone (mse), and
# its FP8 tensors perturbed by each eps (seed 1). --layers 36 (the real depth) needs about 17 GB
# in WORK at a time and takes about 25 minutes on 2 cores with --eps "0.0115 0.026".
#
# The last column, (1 - min cos) / rel^2, is the loss per squared relative weight error: about
# constant for a model when the loss is what the error's size alone predicts (the perturbations),
# and what FP8 rows are compared with.
#
# Environment: BIN (thin-* tools, default build/bin), WORK (work folder, default a temporary one
# in $TMPDIR, removed at the end), CC (default cc), PYTHON (default python3, standard library).
set -eu
cd "$(dirname "$0")/.."
LAYERS=8 POSITIONS=64 EPS="0.005 0.01 0.015 0.02 0.026" SEEDS=3 STORIES=1 RANDOM_MODEL=1
while [ $# -gt 0 ]; do
    case "$1" in
        --layers) LAYERS=$2; shift 2 ;;
        --positions) POSITIONS=$2; shift 2 ;;
        --eps) EPS=$2; shift 2 ;;
        --seeds) SEEDS=$2; shift 2 ;;
        --no-stories) STORIES=0; shift ;;
        --no-random) RANDOM_MODEL=0; shift ;;
        -h|--help) sed -n '2,/^set -eu/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
        *) echo "fp8-sensitivity.sh: unknown option $1" >&2; exit 2 ;;
    esac
done
BIN=${BIN:-build/bin}
CC=${CC:-cc}
PYTHON=${PYTHON:-python3}
for t in thin-pack thin-quant thin-run thin-compare; do
    [ -x "$BIN/$t" ] || { echo "fp8-sensitivity.sh: $BIN/$t is missing (run make)" >&2; exit 1; }
done
"$BIN/thin-quant" --help | grep -q -- "--scale" ||
    { echo "fp8-sensitivity.sh: $BIN/thin-quant has no --scale option" >&2; exit 1; }
if [ -n "${WORK:-}" ]; then
    mkdir -p "$WORK"
    W=$WORK
else
    W=$(mktemp -d "${TMPDIR:-/tmp}/fp8-sens.XXXXXX")
    trap 'rm -rf "$W"' EXIT INT TERM
fi

# cosine REF.f32 VOCAB MODEL IDS: "MIN MEAN" of MODEL's teacher-forced logits against REF.
cosine() {
    "$BIN/thin-run" "$3" --device cpu --kv-dtype f32 --score "$4" --out "$W/t.f32" 2> "$W/err" ||
        { cat "$W/err" >&2; return 1; }
    "$BIN/thin-compare" "$1" "$W/t.f32" --vocab "$2" --json |
        awk -F'[:,]' '/"cosine_min"/ {m = $2} /"cosine_mean"/ {a = $2}
                      END {printf "%.6f %.6f\n", m, a}'
}
# fp8_rel JSON: relative RMS error over the FP8 tensors of a thin-quant --json report.
fp8_rel() {
    "$PYTHON" -c 'import json, sys
t = [e for e in json.load(open(sys.argv[1]))["tensors"] if e["action"] == "fp8"]
print("%.5f" % (sum(e["rel_rms"] ** 2 for e in t) / len(t)) ** 0.5 if t else "-")' "$1"
}
row() { printf "%-22s %-7s %-8s %-9s %-9s %s\n" "$@"; }
# k REL MIN: (1 - MIN) / REL^2, the loss per squared relative weight error ("-" without REL)
k() { echo "$1 $2" | awk '$1 + 0 > 0 {printf "%.1f", (1 - $2) / ($1 * $1); exit} {print "-"}'; }

if [ "$STORIES" = 1 ]; then
    S=fixtures/stories260k
    sed -n 's/^sequence //p' "$S/golden/once_upon_a_time.ids" | tr ' ' '\n' | head -n 200 \
        > "$W/s.ids"
    "$BIN/thin-pack" -q "$S/model.safetensors" -o "$W/s.thin"
    "$BIN/thin-run" "$W/s.thin" --device cpu --kv-dtype f32 --score "$W/s.ids" --out "$W/s.f32"
    NL=$(sed -n 's/.*"num_hidden_layers": *\([0-9]*\).*/\1/p' "$S/config.json")
    LO=2 HI=$((NL - 3)) # the quality profile's down layers, [2, n - 2)
    echo "stories260K: one role in FP8 (min centered cosine over 200 positions; reference: the F32"
    echo "weights computed in F32; layers 0-$((NL - 1)))"
    printf "%-7s %-5s" scale role
    l=0; while [ $l -lt "$NL" ]; do printf " %-9s" "L$l"; l=$((l + 1)); done; printf " %s\n" all
    for sc in absmax mse; do
        for r in q k v o gate up down; do
            printf "%-7s %-5s" $sc $r
            l=0
            while [ $l -le "$NL" ]; do
                if [ $l -lt "$NL" ]; then set -- --layers $l; else set --; fi
                "$BIN/thin-quant" -q --scale $sc --roles $r "$@" "$W/s.thin" -o "$W/x.thin"
                c=$(cosine "$W/s.f32" 512 "$W/x.thin" "$W/s.ids")
                printf " %-9s" "${c% *}"
                [ $l -lt "$NL" ] || echo "$sc $r $c" >> "$W/all.txt"
                l=$((l + 1))
            done
            printf "\n"
        done
    done
    echo
    echo "stories260K: one role in FP8 in all layers, min and mean centered cosine"
    printf "%-5s %-9s %-9s %-9s %-9s\n" role "absmax" "" "mse" ""
    printf "%-5s %-9s %-9s %-9s %-9s\n" "" min mean min mean
    for r in q k v o gate up down; do
        printf "%-5s %s %s\n" $r "$(awk -v r=$r '$1 == "absmax" && $2 == r {printf "%-9s %-9s", $3, $4}' \
            "$W/all.txt")" "$(awk -v r=$r '$1 == "mse" && $2 == r {printf "%-9s %-9s", $3, $4}' \
            "$W/all.txt")"
    done
    rm -f "$W/all.txt"
    echo
    echo "stories260K: profiles (FP8 rel. RMS: over the FP8 tensors)"
    row profile scale "FP8 rel" "min cos" "mean cos" "(1-min)/rel^2"
    "$BIN/thin-pack" -q --dtype bf16 "$S/model.safetensors" -o "$W/x.thin"
    set -- $(cosine "$W/s.f32" 512 "$W/x.thin" "$W/s.ids")
    row bf16 - - "$1" "$2" -
    for p in quality fp8-all; do
        for sc in absmax mse; do
            "$BIN/thin-quant" -q --scale $sc --profile $p "$W/s.thin" -o "$W/x.thin" \
                --json "$W/x.json"
            rel=$(fp8_rel "$W/x.json")
            set -- $(cosine "$W/s.f32" 512 "$W/x.thin" "$W/s.ids")
            row "$p" $sc "$rel" "$1" "$2" "$(k "$rel" "$1")"
        done
    done
    echo
    echo "stories260K: the quality profile's FP8 tensors (gate, up, down:$LO-$HI) with a random"
    echo "relative error of RMS eps instead, F32 elsewhere (mean over $SEEDS seeds)"
    row "eps" "" "rel RMS" "min cos" "mean cos" "(1-min)/rel^2"
    for e in $EPS; do
        sum_min=0 sum_mean=0 rel=
        k=1
        while [ $k -le "$SEEDS" ]; do
            rm -rf "$W/p"
            rel=$("$PYTHON" bench/perturb-safetensors.py "$S" "$W/p" --eps "$e" --seed $k \
                --roles "gate,up,down:$LO-$HI" | sed 's/.*RMS //')
            "$BIN/thin-pack" -q "$W/p" -o "$W/x.thin"
            set -- $(cosine "$W/s.f32" 512 "$W/x.thin" "$W/s.ids")
            sum_min=$(echo "$sum_min $1" | awk '{print $1 + $2}')
            sum_mean=$(echo "$sum_mean $2" | awk '{print $1 + $2}')
            k=$((k + 1))
        done
        m=$(echo "$sum_min $SEEDS" | awk '{printf "%.6f", $1 / $2}')
        row "$e" "" "$rel" "$m" "$(echo "$sum_mean $SEEDS" | awk '{printf "%.6f", $1 / $2}')" \
            "$(k "$rel" "$m")"
    done
    rm -rf "$W/p" "$W/x.thin" "$W/x.json"
    echo
fi

if [ "$RANDOM_MODEL" = 1 ]; then
    "$CC" -O2 -std=c11 -o "$W/make-random-init" bench/make-random-init.c -lm
    "$PYTHON" -c 'import random, sys
r = random.Random(0)
print("\n".join(str(r.randrange(128256)) for _ in range(int(sys.argv[1]))))' "$POSITIONS" \
        > "$W/r.ids"
    LO=2 HI=$((LAYERS - 3)) # the quality profile's down layers, [2, n - 2)
    DOWN="down:$LO-$HI"
    [ "$HI" -ge "$LO" ] || DOWN=
    t0=$(date +%s)
    "$W/make-random-init" "$W/m" --layers "$LAYERS" > /dev/null
    "$BIN/thin-pack" -q "$W/m/model.safetensors" -o "$W/r.thin" 2> /dev/null
    rm -rf "$W/m"
    "$BIN/thin-run" "$W/r.thin" --device cpu --kv-dtype f32 --score "$W/r.ids" --out "$W/r.f32"
    echo "random SmolLM3-shaped model, $LAYERS layers, $POSITIONS positions (reference: its BF16"
    echo "weights computed in F32)"
    row what scale "FP8 rel" "min cos" "mean cos" "(1-min)/rel^2"
    for sc in absmax mse; do
        "$BIN/thin-quant" -q --scale $sc --profile quality "$W/r.thin" -o "$W/x.thin" \
            --json "$W/x.json"
        rel=$(fp8_rel "$W/x.json")
        set -- $(cosine "$W/r.f32" 128256 "$W/x.thin" "$W/r.ids")
        row "quality" $sc "$rel" "$1" "$2" "$(k "$rel" "$1")"
    done
    for sel in gate up ${DOWN:+"$DOWN"}; do
        "$BIN/thin-quant" -q --scale mse --select "$sel" \
            "$W/r.thin" -o "$W/x.thin" --json "$W/x.json"
        rel=$(fp8_rel "$W/x.json")
        set -- $(cosine "$W/r.f32" 128256 "$W/x.thin" "$W/r.ids")
        row "only $sel" mse "$rel" "$1" "$2" "$(k "$rel" "$1")"
    done
    rm -f "$W/x.thin" "$W/x.json"
    for e in $EPS; do
        rel=$("$W/make-random-init" "$W/m" --layers "$LAYERS" --perturb "$e" \
            --perturb-roles "gate,up${DOWN:+,$DOWN}" | sed 's/.*RMS //')
        "$BIN/thin-pack" -q "$W/m/model.safetensors" -o "$W/x.thin" 2> /dev/null
        rm -rf "$W/m"
        set -- $(cosine "$W/r.f32" 128256 "$W/x.thin" "$W/r.ids")
        row "quality set, eps $e" - "$rel" "$1" "$2" "$(k "$rel" "$1")"
        rm -f "$W/x.thin"
    done
    echo "($(( $(date +%s) - t0 )) s)"
fi
