#!/bin/sh
# The main job on the bundled model (stories260K): pack, inspect, verify, quantize, generate, compare.
set -eu
B=${B:-build}
BIN=$B/bin
W=$(mktemp -d "${TMPDIR:-/tmp}/thin-demo.XXXXXX")
trap 'rm -rf "$W"' EXIT INT TERM
M=fixtures/stories260k
step() { printf '\n== %s\n' "$*"; }

step "thin-pack $M -> stories.thin (F32 as stored) and stories-bf16.thin"
$BIN/thin-pack "$M" -o "$W/stories.thin"
$BIN/thin-pack --dtype bf16 "$M" -o "$W/stories-bf16.thin"

step "thin-inspect stories.thin"
$BIN/thin-inspect "$W/stories.thin" | tail -n 25

step "thin-inspect --verify"
$BIN/thin-inspect --verify "$W/stories.thin"

step "thin-quant --profile quality (FP8 E4M3 gate/up, middle-layer down)"
$BIN/thin-quant --profile quality "$W/stories.thin" -o "$W/stories-fp8.thin" 2>&1 | tail -n 1

step "thin-inspect --stats --role gate: the FP8 weights' values, dequantized"
$BIN/thin-inspect --stats --role gate "$W/stories-fp8.thin" | tail -n +3

step "thin-run: greedy generation from F32"
$BIN/thin-run "$W/stories.thin" -p "Once upon a time" --temperature 0 --max-tokens 120 --device cpu --echo

step "thin-run: the same prompt, quality FP8"
$BIN/thin-run "$W/stories-fp8.thin" -p "Once upon a time" --temperature 0 --max-tokens 120 --device cpu --echo

step "fidelity of BF16 and quality FP8 against F32 (teacher-forced, golden sequence)"
sed -n 's/^sequence //p' $M/golden/once_upon_a_time.ids > "$W/ids"
for v in stories stories-bf16 stories-fp8; do
    $BIN/thin-run "$W/$v.thin" --device cpu --kv-dtype f32 --score "$W/ids" --out "$W/$v.f32"
done
for v in stories-bf16 stories-fp8; do
    echo "$v:"
    $BIN/thin-compare --summary "$W/stories.f32" "$W/$v.f32" --vocab 512 | sed 's/^/    /'
done
