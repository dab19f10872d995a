#!/bin/sh
# stories260K on the GPU against the CPU backend and llama2.c's golden runs:
#  1. F32 weights and KV cache: the greedy text of two golden runs, byte for byte;
#  2. F32 and BF16 weights (BF16 KV cache): 100 greedy ids after each of two prompts, the CPU's;
#  3. teacher-forced logits of the golden sequence (201 positions, through the prefill) against
#     the CPU's: min centered cosine over every position, F32, BF16 and the quality profile;
#  4. compute-sanitizer --tool memcheck (where it is installed) on decodes through the attention +
#     o kernel, the cluster attention kernel after a 300-token prompt, the quality profile's FP8
#     kernels and the device draw.
set -e
S="$FIX/stories260k"
G="$S/golden"
"$BIN/thin-pack" -q "$S/model.safetensors" -o "$T/f32.thin"
"$BIN/thin-quant" -q --profile bf16 "$T/f32.thin" -o "$T/bf16.thin"
"$BIN/thin-quant" -q --profile quality "$T/f32.thin" -o "$T/quality.thin"

run() { "$BIN/thin-run" "$T/f32.thin" --device cuda --kv-dtype f32 -t 0 --echo "$@"; }
run -p "Once upon a time" -n 196 > "$T/once.txt"
cmp "$T/once.txt" "$G/once_upon_a_time.txt"
run -p "Lily and Tom" -n 196 > "$T/lily.txt"
cmp "$T/lily.txt" "$G/lily_and_tom.txt"

ids() { # FILE DEVICE PROMPT: the generated ids, comma-separated
    "$BIN/thin-run" "$1" --device "$2" --kv-dtype bf16 --ids "$3" -n 100 -t 0 --ignore-eos --json |
        tr -d ' \n' | sed 's/.*"ids":\[\([0-9,]*\)\].*/\1/'
}
for f in f32 bf16; do
    for p in "1 403 407 261 378" "1 317 269 274 287"; do
        c=$(ids "$T/$f.thin" cpu "$p")
        d=$(ids "$T/$f.thin" cuda "$p")
        [ -n "$c" ] && [ "$c" = "$d" ] || { echo "$f, prompt $p: GPU ids $d, CPU ids $c"; exit 1; }
    done
done

sed -n 's/^sequence //p' "$G/once_upon_a_time.ids" > "$T/seq"
for f in f32 bf16 quality; do
    "$BIN/thin-run" "$T/$f.thin" --device cpu --kv-dtype f32 --score "$T/seq" --out "$T/$f-cpu.f32"
    "$BIN/thin-run" "$T/$f.thin" --device cuda --kv-dtype f32 --score "$T/seq" --out "$T/$f-gpu.f32"
    min=0.9999; [ $f = f32 ] && min=0.99999
    echo "$f, GPU against CPU:"
    "$BIN/thin-compare" --summary --min-cosine $min "$T/$f-cpu.f32" "$T/$f-gpu.f32" --vocab 512
done

san=$(command -v compute-sanitizer || echo "${CUDA_HOME:-/usr/local/cuda}/bin/compute-sanitizer")
if [ ! -x "$san" ]; then
    echo "compute-sanitizer not found: memcheck left out"
    exit 0
fi
mc() { "$san" --tool memcheck --error-exitcode 9 "$BIN/thin-run" "$@" --device cuda --ignore-eos > /dev/null; }
mc "$T/bf16.thin" --ids "1 403 407 261 378" -n 70 -t 0
mc "$T/bf16.thin" --ids "1 $(seq -s ' ' 2 300)" -n 8 -t 0
mc "$T/quality.thin" --ids "1 403 407 261 378" -n 24 -t 0
mc "$T/bf16.thin" --ids "1 403 407 261 378" -n 24 -t 0.8 --top-p 0.9 --seed 7
echo ok
