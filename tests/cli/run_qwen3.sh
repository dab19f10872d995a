#!/bin/sh
# A Qwen3-shaped model (per-head RMSNorms of q and k before the rotation): its tape normalizes q
# and k after the three products and before the rope, and the teacher-forced logits match those of
# the fixture's own float64 forward pass (fixtures/qwen2-tiny/make.py --qwen3) within 1e-4 with an
# F32 KV cache, whole and split over 2 devices; a BF16 KV cache stays close.
set -e
Q="$FIX/qwen3-tiny"
"$BIN/thin-pack" -q "$Q" -o "$T/q.thin"
"$BIN/thin-inspect" --tape "$T/q.thin" > "$T/tape.txt"
test "$(grep -c ' head_rmsnorm ' "$T/tape.txt")" -eq 4
grep -q 'head_rmsnorm .* w=model.layers.1.self_attn.k_norm.weight in=k head_dim=16' "$T/tape.txt"
"$BIN/thin-inspect" --json "$T/q.thin" | grep -q '"role": "q_norm"'
"$BIN/thin-run" "$T/q.thin" --device cpu --kv-dtype f32 --score "$Q/ids.txt" --out "$T/f32.f32"
"$BIN/thin-compare" "$Q/logits.f32" "$T/f32.f32" --vocab 96 --summary --max-abs 1e-4 --min-top1 1
"$BIN/thin-run" "$T/q.thin" --device cpu --kv-dtype f32 --shards 2 --score "$Q/ids.txt" --out "$T/s2.f32"
"$BIN/thin-compare" "$Q/logits.f32" "$T/s2.f32" --vocab 96 --max-abs 1e-4 --min-top1 1 > /dev/null
"$BIN/thin-run" "$T/q.thin" --device cpu --kv-dtype bf16 --score "$Q/ids.txt" --out "$T/b16.f32"
echo "BF16 KV cache:"
"$BIN/thin-compare" "$Q/logits.f32" "$T/b16.f32" --vocab 96 --summary --min-cosine 0.9999
echo ok
