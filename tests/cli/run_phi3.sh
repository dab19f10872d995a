#!/bin/sh
# A Phi-3-shaped model (fused qkv_proj and gate_up_proj): its tape reads q, k and v (gate and up)
# as row ranges of the fused weight, and the teacher-forced logits match the fixture's float64
# reference within 1e-4 (F32 KV cache), whole and split over 2 devices; the quality profile puts
# the fused gate/up in FP8 with per-row scales and stays close. With LongRoPE (Phi-3-mini-128k's and
# Phi-3.5-mini's rope_scaling), a context of up to original_max_position_embeddings (the default
# context of such a model) takes the short factors and a longer one the long factors, each
# matching its float64 reference; so does Phi-4-mini's form, LongRoPE on the first half of each
# head (partial_rotary_factor), with heads of 16 and of 32 dims.
set -e
P="$FIX/phi3-tiny"
"$BIN/thin-pack" -q "$P" -o "$T/p.thin"
"$BIN/thin-inspect" --tape "$T/p.thin" > "$T/tape.txt"
grep -q 'w=model.layers.1.self_attn.qkv_proj.weight in=h out=k split=col rows=\[64,96\]' "$T/tape.txt"
grep -q 'w=model.layers.0.mlp.gate_up_proj.weight in=h out=u split=col rows=\[128,256\]' "$T/tape.txt"
"$BIN/thin-run" "$T/p.thin" --device cpu --kv-dtype f32 --score "$P/ids.txt" --out "$T/f32.f32"
"$BIN/thin-compare" "$P/logits.f32" "$T/f32.f32" --vocab 96 --summary --max-abs 1e-4 --min-top1 1
"$BIN/thin-run" "$T/p.thin" --device cpu --kv-dtype f32 --shards 2 --score "$P/ids.txt" \
    --out "$T/s2.f32"
"$BIN/thin-compare" "$P/logits.f32" "$T/s2.f32" --vocab 96 --max-abs 1e-4 --min-top1 1 > /dev/null
"$BIN/thin-quant" -q --profile quality "$T/p.thin" -o "$T/q.thin"
"$BIN/thin-inspect" "$T/q.thin" | grep -q 'gate_up_proj.weight  *gate_up  *0 F8_E4M3'
"$BIN/thin-run" "$T/q.thin" --device cpu --kv-dtype f32 --score "$P/ids.txt" --out "$T/q.f32"
echo "quality profile (FP8 gate_up):"
"$BIN/thin-compare" "$P/logits.f32" "$T/q.f32" --vocab 96 --summary --min-cosine 0.9999 --min-top1 1
R="$FIX/phi3-longrope"
"$BIN/thin-pack" -q "$R" -o "$T/r.thin"
"$BIN/thin-inspect" --json "$T/r.thin" | grep -q '"original_max_position_embeddings": 16'
"$BIN/thin-run" "$T/r.thin" --device cpu --kv-dtype f32 --score "$R/ids.txt" --out "$T/rs.f32"
echo "longrope, short factors (the default context, 16 positions):"
"$BIN/thin-compare" "$R/logits.f32" "$T/rs.f32" --vocab 96 --summary --max-abs 1e-4 --min-top1 1
"$BIN/thin-run" "$T/r.thin" --device cpu --kv-dtype f32 --ctx 64 --score "$R/ids.txt" --out "$T/rl.f32"
echo "longrope, long factors (--ctx 64):"
"$BIN/thin-compare" "$R/logits-long.f32" "$T/rl.f32" --vocab 96 --summary --max-abs 1e-4 --min-top1 1
"$BIN/thin-run" "$T/r.thin" --device cpu --kv-dtype f32 --ctx 17 --shards 2 --score "$R/ids.txt" \
    --out "$T/rl2.f32"
"$BIN/thin-compare" "$R/logits-long.f32" "$T/rl2.f32" --vocab 96 --max-abs 1e-4 --min-top1 1 > /dev/null
if "$BIN/thin-compare" "$R/logits.f32" "$T/rl.f32" --vocab 96 --max-abs 1e-2 > /dev/null 2>&1; then
    echo "the long factors changed nothing" >&2
    exit 1
fi
# the default context is full after 16 positions, and says how to get the model's 64
seq 1 20 > "$T/ids20.txt"
if "$BIN/thin-run" "$T/r.thin" --device cpu --score "$T/ids20.txt" --out "$T/x.f32" 2> "$T/err.txt"; then
    echo "20 ids ran in a context of 16" >&2
    exit 1
fi
grep -q 'more than the context of 16 positions (the default; --ctx allows up to 64)' "$T/err.txt"
for f in "phi4-tiny 16 8" "phi4-hd32 32 16"; do
    set -- $f
    R="$FIX/$1"
    "$BIN/thin-pack" -q "$R" -o "$T/r4.thin"
    "$BIN/thin-inspect" --tape "$T/r4.thin" | grep -q "rope .*in=k head_dim=$2 .*rot_dim=$3"
    for c in "16 logits.f32" "64 logits-long.f32"; do
        set -- $c
        "$BIN/thin-run" "$T/r4.thin" --device cpu --kv-dtype f32 --ctx "$1" --score "$R/ids.txt" \
            --out "$T/r4.f32"
        echo "partial rotary ($(basename "$R")), --ctx $1:"
        "$BIN/thin-compare" "$R/$2" "$T/r4.f32" --vocab 96 --summary --max-abs 1e-4 --min-top1 1
    done
done
echo ok
