#!/bin/sh
# thin-inspect on stories260K: roles and layers, filters, tape, JSON, stream input, usage errors.
set -u
P="$BIN/thin-pack"
I="$BIN/thin-inspect"
S="$FIX/stories260k"
fail() { echo "FAIL: $*"; exit 1; }
"$P" -q "$S" -o "$T/s.thin" || fail "pack"
"$I" "$T/s.thin" >"$T/list" || fail "list"
grep -q '^model: LlamaForCausalLM (llama)' "$T/list" || fail "model line"
grep -q 'layers 5, hidden 64, ffn 172, heads 8 / kv 4, head_dim 8, vocab 512' "$T/list" ||
    fail "hparams line"
grep -q '^model.layers.2.self_attn.k_proj.weight  *k  *2 F32  *\[32, 64\]  *8192  *8192  *1$' \
    "$T/list" || fail "k row"
grep -q '^model.layers.4.post_attention_layernorm.weight  *ffn_norm  *4 ' "$T/list" || fail "ffn_norm"
grep -q '^model.embed_tokens.weight  *embedding  *-1 ' "$T/list" || fail "embedding row"
grep -q '^lm_head.weight  *lm_head  *-1 .*tied to model.embed_tokens.weight' "$T/list" ||
    fail "tied lm_head row"
grep -q '^  F32  *47 tensors  *1040128 bytes 100.00%' "$T/list" || fail "dtype summary"
grep -q '^  gate  *5 tensors  *220160 bytes' "$T/list" || fail "role summary"
# filters
[ "$("$I" --role q "$T/s.thin" | grep -c '^model\.layers\.[0-4]\.self_attn\.q_proj')" -eq 5 ] ||
    fail "--role q"
[ "$("$I" --layer 2 "$T/s.thin" | grep -c '^model\.layers\.2\.')" -eq 9 ] || fail "--layer 2"
"$I" --layer 2 "$T/s.thin" | grep -q '^model\.layers\.1\.' && fail "--layer 2 shows layer 1"
[ "$("$I" --layer -1 --json "$T/s.thin" | grep -c '"layer": -1')" -eq 3 ] || fail "--layer -1"
"$I" --dtype bf16 "$T/s.thin" | grep -q '^model\.' && fail "--dtype bf16 matched F32"
# tape: 1 + 5 * 15 + 2 ops
"$I" --tape "$T/s.thin" >"$T/tape" || fail "--tape"
[ "$(grep -c '^ *[0-9][0-9]*  ' "$T/tape")" -eq 78 ] || fail "78 tape ops"
[ "$(grep -c ' rope ' "$T/tape")" -eq 10 ] || fail "10 rope ops"
grep -q 'linear .*w=lm_head.weight in=h out=logits split=col' "$T/tape" || fail "lm_head op"
# JSON
"$I" --json "$T/s.thin" >"$T/j" || fail "--json"
for k in '"schema": 1' '"tape_ops": 78' '"family": "llama"' '"by_role"' '"by_dtype"' \
         '"tied_to": "model.embed_tokens.weight"' '"total_bytes": 1040128' '"format": "hf"'; do
    grep -q "$k" "$T/j" || fail "JSON lacks $k"
done
# a stream: thin-pack dir | thin-inspect -
"$P" -q "$S" | "$I" - >"$T/slist" || fail "stream listing"
grep -q "^stdin: 48 tensors, 3 blobs, $(wc -c <"$T/s.thin") bytes" "$T/slist" ||
    fail "stream header: $(head -1 "$T/slist")"
"$I" --json - <"$T/s.thin" | grep -q "\"size\": $(wc -c <"$T/s.thin")," || fail "stream JSON size"
"$P" -q "$S" | "$I" --verify - | grep -q '^verified' || fail "stream verify"
"$P" -q "$S" | "$I" --extract model.norm.weight - >"$T/norm.s" || fail "stream extract"
"$I" --extract model.norm.weight "$T/s.thin" | cmp -s - "$T/norm.s" || fail "stream extract bytes"
[ "$(wc -c <"$T/norm.s")" -eq 256 ] || fail "norm size"
# usage and data errors
"$I" >/dev/null 2>&1; [ $? -eq 2 ] || fail "no input: exit 2"
"$I" --role nope "$T/s.thin" >/dev/null 2>&1; [ $? -eq 2 ] || fail "bad role: exit 2"
"$I" --layer x "$T/s.thin" >/dev/null 2>&1; [ $? -eq 2 ] || fail "bad layer: exit 2"
"$I" --help | grep -q '^Usage: thin-inspect' || fail "--help"
"$I" --version | grep -q '^thin-inspect ' || fail "--version"
"$I" --extract nope "$T/s.thin" >/dev/null 2>"$T/err"; [ $? -eq 1 ] || fail "unknown tensor exit"
grep -q "no tensor named 'nope'" "$T/err" || fail "unknown tensor message"
"$I" "$S/model.safetensors" >/dev/null 2>&1; [ $? -eq 1 ] || fail "not a .thin file: exit 1"
exit 0
