#!/bin/sh
# A Qwen2-shaped model (q, k and v biases, grouped-query attention, RoPE base 1e6, tied
# embeddings): its tape adds each bias after the three products, and the teacher-forced logits
# match those of the fixture's own float64 forward pass (fixtures/qwen2-tiny/make.py) within 1e-4
# with an F32 KV cache, whole and split over 2 and 4 devices; a BF16 KV cache stays close.
set -e
Q="$FIX/qwen2-tiny"
"$BIN/thin-pack" -q "$Q" -o "$T/q.thin"
"$BIN/thin-inspect" --tape "$T/q.thin" > "$T/tape.txt"
test "$(grep -c ' bias ' "$T/tape.txt")" -eq 6
grep -q 'bias .* w=model.layers.1.self_attn.v_proj.bias out=v' "$T/tape.txt"
"$BIN/thin-inspect" --json "$T/q.thin" | grep -q '"role": "k_bias"'
"$BIN/thin-run" "$T/q.thin" --device cpu --kv-dtype f32 --score "$Q/ids.txt" --out "$T/f32.f32"
"$BIN/thin-compare" "$Q/logits.f32" "$T/f32.f32" --vocab 96 --summary --max-abs 1e-4 --min-top1 1
for n in 2 4; do
    "$BIN/thin-run" "$T/q.thin" --device cpu --kv-dtype f32 --shards $n --score "$Q/ids.txt" \
        --out "$T/s$n.f32"
    "$BIN/thin-compare" "$Q/logits.f32" "$T/s$n.f32" --vocab 96 --max-abs 1e-4 --min-top1 1 > /dev/null
done
"$BIN/thin-run" "$T/q.thin" --device cpu --kv-dtype bf16 --score "$Q/ids.txt" --out "$T/b16.f32"
echo "BF16 KV cache:"
"$BIN/thin-compare" "$Q/logits.f32" "$T/b16.f32" --vocab 96 --summary --min-cosine 0.9999
echo ok
