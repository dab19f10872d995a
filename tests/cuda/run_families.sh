#!/bin/sh
# The CUDA backend on the small family fixtures: Qwen2's q, k and v biases (in the q/k/v step's epilogue),
# Qwen3's q and k norms (in the rope kernel), Qwen3 with YaRN (its frequency table and factor),
# Gemma 3 (norms counted from 1 and the attention's scale folded into the uploaded norm weights,
# the scaled embedding, the GELU gate, its sliding layers' window), Gemma 2 (soft caps, the
# attention's scale in the attention kernels), Granite (its multipliers), the six mixtures of experts
# (routing, shared experts, stacked experts),
# Phi-3's fused qkv_proj and gate_up_proj (row ranges of one weight), Phi-3 with LongRoPE (its
# short table at a context of 16 positions, its long one above; cos and sin scaled by the
# attention factor) and Phi-4-mini's form of it (on the first half of each head); Qwen3 and
# Phi-4-mini with heads of 32 dims as well, whose decode runs the attention + o kernel; Mistral 3's
# multimodal checkpoint (its text model). Each one's teacher-forced logits match the fixture's
# float64 reference (F32 weights and KV cache), and its greedy ids equal the CPU's.
set -e
# family FIXTURE [CTX LOGITS]...: the checks above, the logits at each context (0: the model's);
# FIXTURE is a folder of fixtures/ or an absolute path.
family() {
    case "$1" in /*) Q=$1 ;; *) Q="$FIX/$1" ;; esac
    shift
    "$BIN/thin-pack" -q "$Q" -o "$T/m.thin"
    echo "$(basename "$Q"):"
    while [ $# -ge 2 ]; do
        c=; [ "$1" = 0 ] || c="--ctx $1"
        "$BIN/thin-run" "$T/m.thin" --device cuda --kv-dtype f32 $c --score "$Q/ids.txt" \
            --out "$T/gpu.f32"
        "$BIN/thin-compare" "$Q/$2" "$T/gpu.f32" --vocab 96 --summary --max-abs 1e-3 --min-top1 1
        shift 2
    done
    for d in cpu cuda; do
        "$BIN/thin-run" "$T/m.thin" --device $d --ids "1 17 42 5" -n 24 -t 0 --ignore-eos --json \
            > "$T/$d.json"
        sed -n '/"ids"/,/]/p' "$T/$d.json" | tr -d ' \n' > "$T/$d.ids"
    done
    cmp "$T/cpu.ids" "$T/cuda.ids"
}
# steps NAME LABEL KIND: the decode's per-step profile of the model family() packed last has a
# step labelled LABEL and none of kind KIND
steps() {
    THIN_CUDA_PROFILE=1 "$BIN/thin-run" "$T/m.thin" --device cuda --ids "1 17 42 5" -n 4 -t 0 --ignore-eos \
        >/dev/null 2>"$T/prof.txt"
    grep -q "^$2 " "$T/prof.txt"
    if grep -q "^$3 " "$T/prof.txt"; then echo "$1: a $3 step of its own"; exit 1; fi
}
family qwen2-tiny 0 logits.f32
# its decode step takes the biases into the q/k/v step (bias, rope and KV store in the matvec's
# epilogue): the per-step profile names no bias step of its own
steps qwen2-tiny "norm+q+k+v+bias+rope+kv" bias
family qwen3-tiny 0 logits.f32
# its q and k norms run in the rope kernel, before it rotates: no head_rmsnorm step of its own
steps qwen3-tiny "attention+head_norms+rope+kv" head_rmsnorm
family qwen3-yarn 0 logits.f32
# OLMo 2: its post-norms and whole q/k norms as rmsnorm steps of their own (the kernels every
# model runs)
family olmo2-tiny 0 logits.f32
family phi3-tiny 0 logits.f32
family phi3-longrope 16 logits.f32 64 logits-long.f32
family phi4-tiny 16 logits.f32 64 logits-long.f32
# heads of 32 dims: the decode runs the attention + o kernel (heads of 16 take the grouped kernel),
# which takes Qwen3's head norms and Phi-4-mini's partial rotation itself instead of a rope kernel
family qwen3-hd32 0 logits.f32
family phi4-hd32 16 logits.f32 64 logits-long.f32
# Gemma 3: the fixture (a window of 4 positions on its sliding layers, a context of 64) gives its
# float64 logits and the CPU's ids
family gemma3-tiny 0 logits.f32
# Gemma 2: its soft caps on the scores and the logits, its query_pre_attn_scalar (20, head_dim 24,
# no q norm to carry it) applied by the attention kernels, windows of 4
family gemma2-tiny 0 logits.f32
# Granite: its embedding, attention, residual and logit multipliers (the residual adds as add
# steps of their own, the logits scaled before the device's argmax)
family granite-tiny 0 logits.f32
steps granite-tiny add softcap
steps granite-tiny scale softcap
# mixtures of experts (moe.cu): every family's fixture (softmax and sigmoid routing with groups,
# shared experts gated and not, stacked experts, Granite's multipliers) against its float64
# logits, greedy ids GPU = CPU
for m in qwen3-moe mixtral qwen2-moe olmoe granitemoe glm4-moe; do family $m-tiny 0 logits.f32; done
steps glm4-moe-tiny moe silu_mul
# Mistral 3's multimodal checkpoint (Mistral Small 3.1's form, tests/make-mistral3.sh): its text
# model's logits are those of the Llama inside it
sh "$(dirname "$0")/../make-mistral3.sh" "$FIX" "$T/mistral3"
family "$T/mistral3" 0 logits.f32
echo ok
