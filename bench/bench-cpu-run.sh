#!/bin/sh
# bench-cpu-run.sh — CPU decode and prefill speed of thin-run on a Llama-shaped model with random
# BF16 weights (about 0.8 GiB), next to the machine's memcpy bandwidth.
#
#   sh bench/bench-cpu-run.sh [BIN_DIR]      (default build/bin; needs python3 and cc)
#
# Decode on a CPU is bound by reading every weight once per token, so the effective bandwidth
# (weight bytes × tokens/s) is compared with what memcpy reaches. Files go to a temporary folder
# under ${TMPDIR:-/tmp} and are deleted afterwards.
set -e
BIN=${1:-build/bin}
W=$(mktemp -d "${TMPDIR:-/tmp}/thin-bench.XXXXXX")
trap 'rm -rf "$W"' EXIT INT TERM
TOKENS=${TOKENS:-48}

# ---- model: config.json + model.safetensors (BF16 values in [-0.05, 0.05]) ----
python3 - "$W" <<'PY'
import json, os, random, struct, sys
d = sys.argv[1]
H, F, L, NH, NKV, HD, V = 2048, 5632, 8, 16, 4, 128, 32000
cfg = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": H,
       "intermediate_size": F, "num_hidden_layers": L, "num_attention_heads": NH,
       "num_key_value_heads": NKV, "head_dim": HD, "vocab_size": V,
       "max_position_embeddings": 2048, "rms_norm_eps": 1e-5, "rope_theta": 10000.0,
       "tie_word_embeddings": True, "bos_token_id": 1, "eos_token_id": 2,
       "torch_dtype": "bfloat16"}
json.dump(cfg, open(os.path.join(d, "config.json"), "w"))
shapes = {"model.embed_tokens.weight": [V, H], "model.norm.weight": [H]}
for l in range(L):
    p = "model.layers.%d." % l
    shapes.update({p + "input_layernorm.weight": [H], p + "post_attention_layernorm.weight": [H],
                   p + "self_attn.q_proj.weight": [NH * HD, H],
                   p + "self_attn.k_proj.weight": [NKV * HD, H],
                   p + "self_attn.v_proj.weight": [NKV * HD, H],
                   p + "self_attn.o_proj.weight": [H, NH * HD],
                   p + "mlp.gate_proj.weight": [F, H], p + "mlp.up_proj.weight": [F, H],
                   p + "mlp.down_proj.weight": [H, F]})
rnd = random.Random(1)
block = b"".join(struct.pack("<f", rnd.uniform(-0.05, 0.05))[2:] for _ in range(1 << 19))
ones = struct.pack("<f", 1.0)[2:] * H
header, off = {}, 0
for name in sorted(shapes):
    n = 1
    for s in shapes[name]: n *= s
    header[name] = {"dtype": "BF16", "shape": shapes[name], "data_offsets": [off, off + 2 * n]}
    off += 2 * n
h = json.dumps(header).encode()
h += b" " * (-len(h) % 8)
with open(os.path.join(d, "model.safetensors"), "wb") as f:
    f.write(struct.pack("<Q", len(h)) + h)
    for name in sorted(shapes):
        nb = header[name]["data_offsets"][1] - header[name]["data_offsets"][0]
        if len(shapes[name]) == 1:
            f.write(ones)
            continue
        while nb > 0:
            f.write(block[:min(nb, len(block))])
            nb -= len(block)
PY
"$BIN/thin-pack" -q "$W/model.safetensors" -o "$W/m.thin"
rm -f "$W/model.safetensors"

# ---- memcpy bandwidth ----
cat > "$W/memcpy.c" <<'C'
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
int main(void) {
    size_t n = (size_t)512 << 20;
    char *a = malloc(n), *b = malloc(n);
    if (!a || !b) return 1;
    memset(a, 1, n); memset(b, 2, n);
    double best = 0;
    for (int i = 0; i < 5; i++) {
        struct timespec t0, t1;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        memcpy(i & 1 ? a : b, i & 1 ? b : a, n);
        clock_gettime(CLOCK_MONOTONIC, &t1);
        double s = (t1.tv_sec - t0.tv_sec) + (t1.tv_nsec - t0.tv_nsec) * 1e-9;
        if (n / s > best) best = n / s;
    }
    printf("%.2f\n", best / 1e9 + (a[7] + b[9]) * 0.0);
    return 0;
}
C
cc -O2 -o "$W/memcpy" "$W/memcpy.c"
MEMCPY=$("$W/memcpy")

# jget KEY: a value of the last run's thin-run --json output ($W/r.json); kv dtypes in lower case
jget() { python3 -c "import json,sys;v=json.load(open(sys.argv[1]))[sys.argv[2]];print(v.lower() if isinstance(v,str) else v)" "$W/r.json" "$1"; }
# run THREADS MODEL ARGS...: thin-run on the CPU into $W/r.json
run() { th=$1 m=$2; shift 2; "$BIN/thin-run" "$W/$m" --device cpu --no-verify --threads "$th" -t 0 --json "$@" > "$W/r.json"; }

# ---- decode runs ----
echo "model: Llama-shaped, 8 layers, hidden 2048, ffn 5632, vocab 32000, BF16, tied embeddings"
echo "memcpy: $MEMCPY GB/s copied (reads + writes = twice that in traffic)"
printf '%-8s %-8s %12s %12s %10s %14s\n' threads kv decode_tok/s weights_GB load_s effective_GB/s
for th in 1 2; do
    for kv in bf16 f32; do
        run $th m.thin --kv-dtype $kv --ids "1 100 200 300" -n "$TOKENS"
        tok=$(jget decode_tok_s) gb=$(awk "BEGIN { print $(jget weight_bytes) / 1e9 }")
        printf '%-8s %-8s %12.2f %12.3f %10.2f %14.2f\n' $th $kv "$tok" "$gb" "$(jget load_s)" \
            "$(awk "BEGIN { print $gb * $tok }")"
    done
done
# ---- the same model quantized (thin-quant --profile fp8-all): FP8 E4M3 weights, per-row scales ----
"$BIN/thin-quant" -q --profile fp8-all "$W/m.thin" -o "$W/f.thin"
printf '%-8s %-8s %16s %12s\n' threads weights decode_tok/s weights_GB
for th in 1 2; do
    run $th f.thin --ids "1 100 200 300" -n "$TOKENS"
    printf '%-8s %-8s %16.2f %12.3f\n' $th fp8 "$(jget decode_tok_s)" "$(awk "BEGIN { print $(jget weight_bytes) / 1e9 }")"
done
rm -f "$W/f.thin"
# ---- prefill: a prompt of PROMPT ids, batched (each weight read once per batch of tokens) ----
PROMPT=${PROMPT:-128}
printf '%-8s %-8s %16s\n' threads kv "prefill_tok/s($PROMPT)"
for th in 1 2; do
    run $th m.thin --ids "$(seq 1 "$PROMPT" | tr '\n' ' ')" -n 1
    printf '%-8s %-8s %16.2f\n' $th "$(jget kv_dtype)" "$(jget prefill_tok_s)"
done
# ---- a long context: a prompt of LONG ids, then 16 tokens decoded at positions LONG.. ----
LONG=${LONG:-1000}
printf '%-8s %-8s %16s %16s\n' threads kv "prefill_tok/s($LONG)" "decode_tok/s(@$LONG)"
for th in 1 2; do
    run $th m.thin --ids "$(seq 1 "$LONG" | tr '\n' ' ')" -n 16 --ignore-eos
    printf '%-8s %-8s %16.2f %16.2f\n' $th "$(jget kv_dtype)" "$(jget prefill_tok_s)" "$(jget decode_tok_s)"
done
# verify-on-load cost (thin-run's default)
"$BIN/thin-run" "$W/m.thin" --device cpu --ids 1 -n 1 -t 0 --json > "$W/r.json"
printf 'load with --verify: %.2f s\n' "$(jget load_s)"
