#!/bin/sh
# Mixtures of experts, each against its fixture's own float64 forward pass
# (fixtures/qwen2-tiny/make.py --qwen3-moe / --mixtral / --qwen2-moe / --olmoe): the router and the experts
# tagged (role router, an expert index on each expert's weights), one moe op a sparse layer, the
# teacher-forced logits within 1e-4 with an F32 KV cache, whole and split over 2 and 4 devices
# (each holding a slice of every expert's inner dims); a prompt's rows routed expert by expert give
# the bits of the same tokens run in shorter batches; the quality profile puts the experts' gate
# and up in FP8; experts stacked as transformers 5 saves them run as one tensor an expert does.
set -e
# moe FIXTURE MOE_OPS TAPE_LINE SHARDS...
moe() {
    name=$1 Q="$FIX/$1" count=$2 line=$3
    shift 3
    "$BIN/thin-pack" -q "$Q" -o "$T/m.thin"
    "$BIN/thin-inspect" --tape "$T/m.thin" > "$T/tape.txt"
    test "$(grep -c ' moe ' "$T/tape.txt")" -eq "$count"
    grep -q "$line" "$T/tape.txt"
    "$BIN/thin-inspect" --json "$T/m.thin" > "$T/m.json"
    grep -q '"role": "router"' "$T/m.json"
    [ "${STACKED:-0}" = 1 ] || grep -q '"expert": 3' "$T/m.json"
    "$BIN/thin-run" "$T/m.thin" --device cpu --kv-dtype f32 --score "$Q/ids.txt" --out "$T/f32.f32"
    echo "$name:"
    "$BIN/thin-compare" "$Q/logits.f32" "$T/f32.f32" --vocab 96 --summary --max-abs 1e-4 --min-top1 1
    for n in "$@"; do
        "$BIN/thin-run" "$T/m.thin" --device cpu --kv-dtype f32 --shards $n --score "$Q/ids.txt" \
            --out "$T/s$n.f32"
        "$BIN/thin-compare" "$Q/logits.f32" "$T/s$n.f32" --vocab 96 --max-abs 1e-4 --min-top1 1 > /dev/null
    done
    # row p of the 12-row prompt = the last row of a prompt of its first p + 1 ids, bit for bit
    : > "$T/rows.f32"
    for p in 1 2 3 4 5 6 7 8 9 10 11 12; do
        head -n $p "$Q/ids.txt" | "$BIN/thin-run" "$T/m.thin" --device cpu --kv-dtype f32 --score - |
            tail -c 384 >> "$T/rows.f32"
    done
    cmp "$T/f32.f32" "$T/rows.f32"
}
moe qwen3-moe-tiny 1 'moe  *L0 .*router=model.layers.0.mlp.gate.weight top_k=2 norm_topk=true gate=\[4: "model.layers.0.mlp.experts.0.gate_proj.weight"' 2 4
# Qwen3-MoE's mlp_only_layers: layer 1 keeps its dense MLP
grep -q 'linear  *L1 .*mlp.gate_proj.weight in=h out=g' "$T/tape.txt"
"$BIN/thin-inspect" "$T/m.thin" | grep -q '^  mixture of 4 experts, 2 a token (weights renormalized), expert ffn 32, in 1 of 2 layers$'
"$BIN/thin-inspect" "$T/m.thin" | grep -q '^model.layers.0.mlp.experts.3.up_proj.weight  *up  *0 .* expert 3$'
# the quality profile: the experts' gate and up in FP8 with their row scales, the router in BF16
"$BIN/thin-quant" -q --profile quality "$T/m.thin" -o "$T/mq.thin"
"$BIN/thin-inspect" "$T/mq.thin" > "$T/mq.txt"
grep -q '^model.layers.0.mlp.experts.2.gate_proj.weight  *gate  *0 F8_E4M3 .* expert 2$' "$T/mq.txt"
grep -q '^model.layers.0.mlp.experts.2.gate_proj.weight.scale  *scale ' "$T/mq.txt"
grep -q '^model.layers.0.mlp.gate.weight  *router  *0 BF16 ' "$T/mq.txt"
"$BIN/thin-run" "$T/mq.thin" --device cpu --score "$FIX/qwen3-moe-tiny/ids.txt" --out "$T/q.f32"
echo "qwen3-moe-tiny, quality profile:"
"$BIN/thin-compare" "$FIX/qwen3-moe-tiny/logits.f32" "$T/q.f32" --vocab 96 --summary --min-cosine 0.9999
moe mixtral-tiny 2 'moe  *L1 .*router=model.layers.1.block_sparse_moe.gate.weight top_k=2 norm_topk=true gate=.* up=\[4: "model.layers.1.block_sparse_moe.experts.0.w3.weight"' 2
# Qwen2-MoE: its q, k and v biases, the top-k weights as they are, a shared expert (every token's,
# scaled by the sigmoid of its own gate) after the routed ones; split over 2 devices too
moe qwen2-moe-tiny 2 'moe  *L1 .*norm_topk=false .* shared=\["model.layers.1.mlp.shared_expert.gate_proj.weight","model.layers.1.mlp.shared_expert.up_proj.weight","model.layers.1.mlp.shared_expert.down_proj.weight"\] shared_gate=model.layers.1.mlp.shared_expert_gate.weight' 2
grep -q 'bias  *L0 .*k_proj.bias' "$T/tape.txt"
# Granite's MoE: Granite's multipliers, the experts stacked in block_sparse_moe.input_linear /
# output_linear with the router block_sparse_moe.router.layer
STACKED=1 moe granitemoe-tiny 2 'moe  *L1 .*router=model.layers.1.block_sparse_moe.router.layer.weight top_k=2 norm_topk=true gate=\[4: \["model.layers.1.block_sparse_moe.input_linear.weight",0,32\]' 2
grep -q 'add  *in=h out=x scale=0.59' "$T/tape.txt"
"$BIN/thin-inspect" "$T/m.thin" | grep -q '^model.layers.0.block_sparse_moe.input_linear.weight  *gate_up  *0 F32  *\[4, 64, 64\]'
# GLM-4.5: DeepSeek-V3's routing (sigmoid scores, the correction bias for the choice, groups, the
# routed scale), an ungated shared expert, layer 0 dense, half of each head rotated, q/k/v biases
moe glm4-moe-tiny 1 'moe  *L1 .*scoring=sigmoid score_bias=model.layers.1.mlp.gate.e_score_correction_bias n_group=2 topk_group=1 routed_scale=2.5' 2
grep -q 'shared=\["model.layers.1.mlp.shared_experts.gate_proj.weight"' "$T/tape.txt"
grep -q 'rope  *L0 .*rot_dim=8' "$T/tape.txt"
"$BIN/thin-inspect" "$T/m.thin" | grep -q '^model.layers.1.mlp.gate.e_score_correction_bias  *router  *1 F32  *\[4\]'
# OLMoE: q and k normalized whole (no split over devices), its top-k weights as they are
moe olmoe-tiny 2 'moe  *L0 .*top_k=2 norm_topk=false'
grep -q 'rmsnorm  *L0 .*self_attn.q_norm.weight in=q out=q' "$T/tape.txt"
# experts stacked as transformers 5 saves them (mlp.experts.gate_up_proj [4, 64, 64], down_proj
# [4, 64, 32], the router mlp.gate): rows of the stacked tensors in the tape, the same bits as one
# tensor an expert, also in FP8 (one scale a row of the stack)
for m in qwen3-moe mixtral; do
    python3 -B "$FIX/qwen2-tiny/make.py" "$T/st-$m" --$m --stacked > /dev/null
    cmp "$T/st-$m/logits.f32" "$FIX/$m-tiny/logits.f32"
    "$BIN/thin-pack" -q "$T/st-$m" -o "$T/st.thin"
    "$BIN/thin-pack" -q "$FIX/$m-tiny" -o "$T/pe.thin"
    "$BIN/thin-inspect" --tape "$T/st.thin" |
        grep -q 'moe  *L0 .*router=model.layers.0.mlp.gate.weight .*gate=\[4: \["model.layers.0.mlp.experts.gate_up_proj",0,32\] .. \["model.layers.0.mlp.experts.gate_up_proj",192,224\]\] up=\[4: \["model.layers.0.mlp.experts.gate_up_proj",32,64\] .* down=\[4: \["model.layers.0.mlp.experts.down_proj",0,64\] .. \["model.layers.0.mlp.experts.down_proj",192,256\]\]'
    for f in st pe; do
        "$BIN/thin-run" "$T/$f.thin" --device cpu --kv-dtype f32 --score "$FIX/$m-tiny/ids.txt" --out "$T/$f.f32"
        "$BIN/thin-quant" -q --profile quality "$T/$f.thin" -o "$T/${f}q.thin"
        "$BIN/thin-run" "$T/${f}q.thin" --device cpu --score "$FIX/$m-tiny/ids.txt" --out "$T/${f}q.f32"
    done
    cmp "$T/st.f32" "$T/pe.f32"
    cmp "$T/stq.f32" "$T/peq.f32"
    "$BIN/thin-inspect" "$T/stq.thin" | grep -q '^model.layers.0.mlp.experts.gate_up_proj.scale  *scale  *0 F32  *\[256\]'
done
# an expert's weight missing: packed without a tape, saying which
mkdir "$T/broken"
python3 - "$FIX/mixtral-tiny" "$T/broken" <<'EOF'
import json, shutil, struct, sys
src, dst = sys.argv[1], sys.argv[2]
shutil.copy(src + "/config.json", dst)
with open(src + "/model.safetensors", "rb") as f:
    n = struct.unpack("<Q", f.read(8))[0]
    h = json.loads(f.read(n))
    data = f.read()
del h["model.layers.1.block_sparse_moe.experts.2.w2.weight"]
out, blobs = {}, []
for k, v in sorted(h.items(), key=lambda kv: kv[1]["data_offsets"][0] if kv[0] != "__metadata__" else -1):
    if k == "__metadata__":
        continue
    b0, b1 = v["data_offsets"]
    off = sum(len(x) for x in blobs)
    blobs.append(data[b0:b1])
    out[k] = dict(v, data_offsets=[off, off + b1 - b0])
b = json.dumps(out).encode()
b += b" " * (-len(b) % 8)
with open(dst + "/model.safetensors", "wb") as f:
    f.write(struct.pack("<Q", len(b)) + b + b"".join(blobs))
EOF
"$BIN/thin-pack" "$T/broken" -o "$T/broken.thin" 2> "$T/err.txt"
grep -q 'no execution tape: tensor model.layers.1.block_sparse_moe.experts.2.w2.weight is missing' "$T/err.txt"
echo ok
