#!/bin/sh
# The CUDA backend on the Qwen2-shaped fixture (q, k and v biases as ops of their own): its
# teacher-forced logits match the fixture's float64 reference, F32 weights and KV cache, and its
# greedy ids equal the CPU's.
set -e
Q="$FIX/qwen2-tiny"
"$BIN/thin-pack" -q "$Q" -o "$T/q.thin"
"$BIN/thin-run" "$T/q.thin" --device cuda --kv-dtype f32 --score "$Q/ids.txt" --out "$T/gpu.f32"
"$BIN/thin-compare" "$Q/logits.f32" "$T/gpu.f32" --vocab 96 --summary --max-abs 1e-3 --min-top1 1
for d in cpu cuda; do
    "$BIN/thin-run" "$T/q.thin" --device $d --ids "1 17 42 5" -n 24 -t 0 --ignore-eos --json \
        > "$T/$d.json"
    sed -n '/"ids"/,/]/p' "$T/$d.json" | tr -d ' \n' > "$T/$d.ids"
done
cmp "$T/cpu.ids" "$T/cuda.ids"
echo ok
