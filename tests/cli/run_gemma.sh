#!/bin/sh
# A Gemma-3-shaped model (fixtures/gemma3-tiny): its norms take the roles of Gemma's four a layer
# (attn_post_norm and ffn_post_norm beside attn_norm and ffn_norm), and its tape carries what
# Gemma computes beyond Llama: norm weights counted from 1, the embedding scaled by sqrt(hidden),
# q/k norms, the attention scaled by query_pre_attn_scalar^-1/2, the sliding layers' window and
# their own unscaled RoPE base, a GELU (tanh) gated MLP. The teacher-forced logits match the
# fixture's float64 reference within 1e-4 on the CPU (F32 KV cache), whole and split over 2
# devices; a BF16 KV cache and the quality profile stay close; Gemma 2's soft caps of the scores
# and the logits (fixtures/gemma2-tiny) match its reference too; a window wider than the sequence
# changes the logits; the same model as a multimodal checkpoint (Gemma3ForConditionalGeneration:
# the text model's tensors under language_model.model. or model.language_model., a vision tower
# beside them, text_config leaving defaults out) gives the same logits; an archive whose
# config.json comes after the weights, or a config with Gemma 2's soft caps, packs without a tape
# and says why.
set -e
G="$FIX/gemma3-tiny"
"$BIN/thin-pack" -q "$G" -o "$T/g.thin"
"$BIN/thin-inspect" "$T/g.thin" > "$T/list.txt"
grep -q '^tape: 60 ops, 9 buffers, sliding window of 4 positions on 2 of 3 layers$' "$T/list.txt"
grep -q '^model.layers.1.post_attention_layernorm.weight  *attn_post_norm  *1 ' "$T/list.txt"
grep -q '^model.layers.1.pre_feedforward_layernorm.weight  *ffn_norm  *1 ' "$T/list.txt"
grep -q '^model.layers.2.post_feedforward_layernorm.weight  *ffn_post_norm  *2 ' "$T/list.txt"
"$BIN/thin-inspect" --tape "$T/g.thin" > "$T/tape.txt"
grep -q 'embed .*scale=8.48528' "$T/tape.txt"
test "$(grep -c 'gelu_tanh_mul' "$T/tape.txt")" -eq 3
test "$(grep -c 'offset=1.0' "$T/tape.txt")" -eq 19 # 4 norms and 2 head norms a layer, the final one
grep -q 'attention  *L0 .* scale=0.2236.* window=4$' "$T/tape.txt"
grep -q 'attention  *L1 .* scale=0.2236[0-9]*$' "$T/tape.txt"
grep -q 'rope  *L2 .*theta=10000.0 scaling=null' "$T/tape.txt"
grep -q 'rope  *L1 .*theta=1000000.0 scaling={"factor":2.0,"rope_type":"linear"}' "$T/tape.txt"
grep -q 'rmsnorm  *L0 .*post_attention_layernorm.weight in=h out=h' "$T/tape.txt"
"$BIN/thin-run" "$T/g.thin" --device cpu --kv-dtype f32 --score "$G/ids.txt" --out "$T/f32.f32"
"$BIN/thin-compare" "$G/logits.f32" "$T/f32.f32" --vocab 96 --summary --max-abs 1e-4 --min-top1 1
"$BIN/thin-run" "$T/g.thin" --device cpu --kv-dtype f32 --shards 2 --score "$G/ids.txt" --out "$T/s2.f32"
"$BIN/thin-compare" "$G/logits.f32" "$T/s2.f32" --vocab 96 --max-abs 1e-4 --min-top1 1 > /dev/null
"$BIN/thin-run" "$T/g.thin" --device cpu --kv-dtype bf16 --score "$G/ids.txt" --out "$T/b16.f32"
echo "BF16 KV cache:"
"$BIN/thin-compare" "$G/logits.f32" "$T/b16.f32" --vocab 96 --summary --min-cosine 0.9999
"$BIN/thin-quant" -q --profile quality "$T/g.thin" -o "$T/q.thin"
"$BIN/thin-run" "$T/q.thin" --device cpu --score "$G/ids.txt" --out "$T/q.f32"
echo "quality profile:"
"$BIN/thin-compare" "$G/logits.f32" "$T/q.f32" --vocab 96 --summary --min-cosine 0.99
# greedy decoding token by token gives the ids that the teacher-forced logits pick
"$BIN/thin-run" "$T/g.thin" --device cpu --kv-dtype f32 --ids "2 17 42 5 88 63" -n 6 -t 0 --ignore-eos \
    --json > "$T/gen.json"
grep -q '"generated_tokens": 6' "$T/gen.json"
# a sliding layer's ring of K/V rows (2 x (window + 32) rows, here forced: the default takes it
# where that is fewer than the context's) gives the bits of whole caches past its wrap at 36
python3 -c "import random; r = random.Random(5); print('\n'.join(str(r.randrange(96)) for _ in range(64)))" > "$T/ids64.txt"
for m in force 0; do
    THIN_CPU_RING=$m "$BIN/thin-run" "$T/g.thin" --device cpu --kv-dtype f32 --score "$T/ids64.txt" --out "$T/ring_$m.f32"
    THIN_CPU_RING=$m "$BIN/thin-run" "$T/g.thin" --device cpu --ids "2 17 42 5" -n 56 -t 0 --ignore-eos --json |
        sed -n '/"ids"/,/]/p' > "$T/ring_$m.ids"
done
cmp "$T/ring_force.f32" "$T/ring_0.f32"
cmp "$T/ring_force.ids" "$T/ring_0.ids"
# the window matters: one wider than the sequence gives other logits
mkdir "$T/wide"
cp "$G/model.safetensors" "$T/wide/"
sed 's/"sliding_window": 4/"sliding_window": 64/' "$G/config.json" > "$T/wide/config.json"
"$BIN/thin-pack" -q "$T/wide" -o "$T/w.thin"
"$BIN/thin-run" "$T/w.thin" --device cpu --kv-dtype f32 --score "$G/ids.txt" --out "$T/w.f32"
if "$BIN/thin-compare" "$G/logits.f32" "$T/w.f32" --vocab 96 --max-abs 1e-2 > /dev/null 2>&1; then
    echo "the sliding window changed nothing" >&2
    exit 1
fi
# the multimodal forms: renamed tensors, a vision tower kept with role other, text_config
for pre in language_model.model. model.language_model.; do
    rm -rf "$T/mm" && mkdir "$T/mm"
    case $pre in language_model.*) vision=vision_tower.vision_model.embeddings.patch_embedding.weight ;;
                 *) vision=model.vision_tower.vision_model.embeddings.patch_embedding.weight ;; esac
    python3 "$(dirname "$0")/multimodal.py" "$G" "$T/mm" "$pre" Gemma3ForConditionalGeneration \
        gemma3_text "$vision" rms_norm_eps,rope_local_base_freq,hidden_activation,bos_token_id,eos_token_id \
        '{"model_type": "gemma3", "vision_config": {"model_type": "siglip_vision_model"}, "bos_token_id": 2, "eos_token_id": [1, 106]}'
    "$BIN/thin-pack" "$T/mm" -o "$T/mm.thin" 2> "$T/mmerr.txt"
    grep -q '1 tensor of a vision tower and its projector kept with role other' "$T/mmerr.txt"
    if grep -q 'outside the Llama family naming' "$T/mmerr.txt"; then echo "the vision tower named unknown" >&2; exit 1; fi
    "$BIN/thin-inspect" "$T/mm.thin" > "$T/mm.txt"
    grep -q "^${pre}layers.1.post_attention_layernorm.weight  *attn_post_norm  *1 " "$T/mm.txt"
    grep -q 'vision_tower.vision_model.embeddings.patch_embedding.weight  *other' "$T/mm.txt"
    case $pre in language_model.*) head=language_model.lm_head.weight ;; *) head=lm_head.weight ;; esac
    grep -q "^$head  *lm_head " "$T/mm.txt" # tied to ${pre}embed_tokens.weight
    "$BIN/thin-run" "$T/mm.thin" --device cpu --kv-dtype f32 --score "$G/ids.txt" --out "$T/mm.f32"
    "$BIN/thin-compare" "$G/logits.f32" "$T/mm.f32" --vocab 96 --max-abs 1e-4 --min-top1 1 > /dev/null
done
# an archive: config.json first gives the folder's roles and tape; after the weights, no tape
tar cf "$T/first.tar" -C "$G" config.json model.safetensors
"$BIN/thin-pack" -q "$T/first.tar" -o "$T/a.thin"
"$BIN/thin-inspect" "$T/a.thin" | grep -q 'post_attention_layernorm.weight  *attn_post_norm'
"$BIN/thin-inspect" --tape "$T/a.thin" | grep -q gelu_tanh_mul
tar cf "$T/last.tar" -C "$G" model.safetensors config.json
"$BIN/thin-pack" "$T/last.tar" -o "$T/b.thin" 2> "$T/err.txt"
grep -q 'no execution tape: config.json came after the weights' "$T/err.txt"
"$BIN/thin-inspect" "$T/b.thin" | grep -q '^tape: none (no execution tape: config.json came after the weights'
# Gemma 2 (fixtures/gemma2-tiny: the same weights without q/k norms, one RoPE base, the scores and
# the logits soft-capped): its float64 logits, whole and split; without the caps they differ
R="$FIX/gemma2-tiny"
"$BIN/thin-pack" -q "$R" -o "$T/g2.thin"
"$BIN/thin-inspect" --tape "$T/g2.thin" > "$T/tape2.txt"
grep -q 'attention  *L0 .* window=4 softcap=0.5$' "$T/tape2.txt"
grep -q 'attention  *L1 .* softcap=0.5$' "$T/tape2.txt"
tail -n 1 "$T/tape2.txt" | grep -q 'softcap  *in=logits cap=2.0'
if grep -q head_rmsnorm "$T/tape2.txt"; then echo "Gemma 2 has no q/k norms" >&2; exit 1; fi
"$BIN/thin-run" "$T/g2.thin" --device cpu --kv-dtype f32 --score "$R/ids.txt" --out "$T/g2.f32"
echo "Gemma 2:"
"$BIN/thin-compare" "$R/logits.f32" "$T/g2.f32" --vocab 96 --summary --max-abs 1e-4 --min-top1 1
"$BIN/thin-run" "$T/g2.thin" --device cpu --kv-dtype f32 --shards 2 --score "$R/ids.txt" --out "$T/g22.f32"
"$BIN/thin-compare" "$R/logits.f32" "$T/g22.f32" --vocab 96 --max-abs 1e-4 --min-top1 1 > /dev/null
mkdir "$T/nocap"
cp "$R/model.safetensors" "$T/nocap/"
sed 's/"attn_logit_softcapping": 0.5/"attn_logit_softcapping": null/; s/"final_logit_softcapping": 2.0/"final_logit_softcapping": null/' \
    "$R/config.json" > "$T/nocap/config.json"
"$BIN/thin-pack" -q "$T/nocap" -o "$T/nc.thin"
if "$BIN/thin-inspect" --tape "$T/nc.thin" | grep -q softcap; then echo "null caps made a softcap" >&2; exit 1; fi
"$BIN/thin-run" "$T/nc.thin" --device cpu --kv-dtype f32 --score "$R/ids.txt" --out "$T/nc.f32"
if "$BIN/thin-compare" "$R/logits.f32" "$T/nc.f32" --vocab 96 --max-abs 1e-2 > /dev/null 2>&1; then
    echo "the soft caps changed nothing" >&2
    exit 1
fi
# Gemma 3 with Gemma 2's soft caps: no tape, and why
mkdir "$T/cap"
cp "$G/model.safetensors" "$T/cap/"
sed 's/"final_logit_softcapping": null/"final_logit_softcapping": 30.0/' "$G/config.json" > "$T/cap/config.json"
"$BIN/thin-pack" "$T/cap" -o "$T/c.thin" 2> "$T/err.txt"
grep -q 'no execution tape: config.json sets final_logit_softcapping' "$T/err.txt"
if "$BIN/thin-run" "$T/c.thin" --device cpu --ids 2 -n 1 2> "$T/err.txt"; then
    echo "a model without a tape ran" >&2
    exit 1
fi
grep -q 'final_logit_softcapping' "$T/err.txt"
echo ok
