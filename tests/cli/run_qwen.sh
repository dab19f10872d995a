#!/bin/sh
# Qwen-shaped models, each against its fixture's own float64 forward pass
# (fixtures/qwen2-tiny/make.py): the tape carries the family's ops after the three products, and
# the teacher-forced logits match within 1e-4 with an F32 KV cache, whole and split over devices;
# a BF16 KV cache stays close.
#   Qwen2 (q, k and v biases, grouped-query attention, RoPE base 1e6, tied embeddings): each bias
#   added after the three products; split over 2 and 4 devices.
#   Qwen3 (per-head RMSNorms of q and k before the rotation): q and k normalized after the
#   products, before the rope; split over 2 devices; heads of 16 and of 32 dims; and with YaRN's
#   rope scaling, whose logits differ from the unscaled model's and whose context may be asked
#   for up to YaRN's reach, past max_position_embeddings (the default).
#   OLMo 2 (the same weights with its post-norms and whole q/k norms), and the Llama form as
#   Mistral 3's multimodal checkpoint holds its text model.
#   Qwen2 with use_sliding_window: its window in the tape.
#   Granite (the Llama layer with its four multipliers).
set -e
# family FIXTURE OP COUNT TAPE_LINE ROLE SHARDS...: the checks above for one fixture
family() {
    Q="$FIX/$1" op=$2 count=$3 line=$4 role=$5
    shift 5
    "$BIN/thin-pack" -q "$Q" -o "$T/q.thin"
    "$BIN/thin-inspect" --tape "$T/q.thin" > "$T/tape.txt"
    test "$(grep -c " $op " "$T/tape.txt")" -eq "$count"
    grep -q "$line" "$T/tape.txt"
    "$BIN/thin-inspect" --json "$T/q.thin" | grep -q "\"role\": \"$role\""
    "$BIN/thin-run" "$T/q.thin" --device cpu --kv-dtype f32 --score "$Q/ids.txt" --out "$T/f32.f32"
    "$BIN/thin-compare" "$Q/logits.f32" "$T/f32.f32" --vocab 96 --summary --max-abs 1e-4 --min-top1 1
    for n in "$@"; do
        "$BIN/thin-run" "$T/q.thin" --device cpu --kv-dtype f32 --shards $n --score "$Q/ids.txt" \
            --out "$T/s$n.f32"
        "$BIN/thin-compare" "$Q/logits.f32" "$T/s$n.f32" --vocab 96 --max-abs 1e-4 --min-top1 1 > /dev/null
    done
    "$BIN/thin-run" "$T/q.thin" --device cpu --kv-dtype bf16 --score "$Q/ids.txt" --out "$T/b16.f32"
    echo "BF16 KV cache:"
    "$BIN/thin-compare" "$Q/logits.f32" "$T/b16.f32" --vocab 96 --summary --min-cosine 0.9999
}
family qwen2-tiny bias 6 'bias .* w=model.layers.1.self_attn.v_proj.bias out=v' k_bias 2 4
family qwen3-tiny head_rmsnorm 4 \
    'head_rmsnorm .* w=model.layers.1.self_attn.k_norm.weight in=k head_dim=16' q_norm 2
family qwen3-hd32 head_rmsnorm 4 \
    'head_rmsnorm .* w=model.layers.1.self_attn.k_norm.weight in=k head_dim=32' q_norm 2
family qwen3-yarn head_rmsnorm 4 'rope .*in=k head_dim=16 .*"rope_type":"yarn"' q_norm 2
if "$BIN/thin-compare" "$FIX/qwen3-tiny/logits.f32" "$T/f32.f32" --vocab 96 --max-abs 1e-2 > /dev/null 2>&1; then
    echo "yarn changed nothing" >&2
    exit 1
fi
# OLMo 2: no input norms, post-norms of the attention's and the MLP's outputs, q and k normalized
# whole (their norm needs the whole vector: no split over devices, which says so)
O="$FIX/olmo2-tiny"
"$BIN/thin-pack" -q "$O" -o "$T/o.thin"
"$BIN/thin-inspect" --tape "$T/o.thin" > "$T/otape.txt"
grep -q 'linear  *L0 .*q_proj.weight in=x out=q' "$T/otape.txt"
grep -q 'rmsnorm  *L0 .*self_attn.q_norm.weight in=q out=q' "$T/otape.txt"
grep -q 'rmsnorm  *L1 .*post_feedforward_layernorm.weight in=h out=h' "$T/otape.txt"
if grep -q input_layernorm "$T/otape.txt"; then echo "OLMo 2 has no input norms" >&2; exit 1; fi
"$BIN/thin-inspect" "$T/o.thin" | grep -q 'post_attention_layernorm.weight  *attn_post_norm'
"$BIN/thin-run" "$T/o.thin" --device cpu --kv-dtype f32 --score "$O/ids.txt" --out "$T/o.f32"
echo "OLMo 2:"
"$BIN/thin-compare" "$O/logits.f32" "$T/o.f32" --vocab 96 --summary --max-abs 1e-4 --min-top1 1
if "$BIN/thin-run" "$T/o.thin" --device cpu --shards 2 --score "$O/ids.txt" --out "$T/o2.f32" 2> "$T/err.txt"; then
    echo "OLMo 2 split over 2 devices" >&2; exit 1
fi
grep -q 'q_norm.weight, layer 0): its input is divided over the devices' "$T/err.txt"
# Mistral 3's multimodal checkpoint (Mistral Small 3.1's form, tests/make-mistral3.sh): the Llama
# model of make.py --no-bias under language_model.model., its config in text_config, a vision
# tower beside it; its logits are the Llama's
sh "$(dirname "$0")/../make-mistral3.sh" "$FIX" "$T/m3"
"$BIN/thin-pack" -q "$T/m3" -o "$T/m3.thin"
"$BIN/thin-inspect" "$T/m3.thin" > "$T/m3.txt"
grep -q '^model: Mistral3ForConditionalGeneration (mistral)' "$T/m3.txt"
grep -q '^language_model.model.layers.1.post_attention_layernorm.weight  *ffn_norm  *1 ' "$T/m3.txt"
grep -q '^language_model.lm_head.weight  *lm_head ' "$T/m3.txt"
grep -q '^multi_modal_projector.linear_1.weight  *other ' "$T/m3.txt"
"$BIN/thin-run" "$T/m3.thin" --device cpu --kv-dtype f32 --score "$T/m3/ids.txt" --out "$T/m3.f32"
echo "Mistral 3 (multimodal checkpoint's text model):"
"$BIN/thin-compare" "$T/m3/logits.f32" "$T/m3.f32" --vocab 96 --summary --max-abs 1e-4 --min-top1 1
# YaRN's reach (factor 4 x 16) is the model's limit, past its max_position_embeddings of 32
"$BIN/thin-run" "$T/q.thin" --device cpu --ctx 64 --kv-dtype f32 --score "$FIX/qwen3-yarn/ids.txt" --out "$T/y64.f32"
cmp "$T/f32.f32" "$T/y64.f32"
if "$BIN/thin-run" "$T/q.thin" --device cpu --ctx 65 --ids 1 -n 1 2> "$T/err.txt"; then
    echo "--ctx 65 ran" >&2
    exit 1
fi
grep -q "exceeds the model's limit of 64 positions" "$T/err.txt"
seq 1 33 > "$T/ids33.txt"
if "$BIN/thin-run" "$T/q.thin" --device cpu --score "$T/ids33.txt" --out "$T/x.f32" 2> "$T/err.txt"; then
    echo "33 ids ran in the default context of 32" >&2
    exit 1
fi
grep -q 'the context of 32 positions (the default; --ctx allows up to 64)' "$T/err.txt"
# Granite: its multipliers as the embedding's scale, the attention's scale, the residual adds'
# scale and a scale op on the logits; split over 2 devices
family granite-tiny add 4 'add  *in=h out=x scale=0.59999' o 2
grep -q 'embed .*scale=2.5$' "$T/tape.txt"
grep -q 'attention  *L1 .*scale=0.2000' "$T/tape.txt"
grep -q 'scale  *in=logits factor=0.3333' "$T/tape.txt"
# Qwen2 with use_sliding_window (a window of 5 from layer max_window_layers = 1 on): the window
# goes into the tape and the context stays the model's; the logits of the first 5 positions are
# the full-attention model's, later ones are not
Q="$FIX/qwen2-tiny"
mkdir -p "$T/sw"
cp "$Q/model.safetensors" "$T/sw/"
sed 's/"max_position_embeddings": 64,/"max_position_embeddings": 64, "sliding_window": 5, "use_sliding_window": true, "max_window_layers": 1,/' \
    "$Q/config.json" > "$T/sw/config.json"
"$BIN/thin-pack" -q "$T/sw" -o "$T/sw.thin"
"$BIN/thin-inspect" "$T/sw.thin" | grep -q '^tape: .*sliding window of 5 positions on 1 of 2 layers$'
"$BIN/thin-pack" -q "$Q" -o "$T/full.thin"
for m in sw full; do
    "$BIN/thin-run" "$T/$m.thin" --device cpu --kv-dtype f32 --ctx 64 --score "$Q/ids.txt" --out "$T/$m.f32"
    head -c 1920 "$T/$m.f32" > "$T/$m.head"
    tail -c +1921 "$T/$m.f32" > "$T/$m.tail"
done
"$BIN/thin-compare" "$T/full.head" "$T/sw.head" --vocab 96 --summary --max-abs 1e-6 > /dev/null
if "$BIN/thin-compare" "$T/full.tail" "$T/sw.tail" --vocab 96 --summary --max-abs 1e-3 > /dev/null 2>&1; then
    echo "the window changed nothing past it" >&2
    exit 1
fi
echo ok
