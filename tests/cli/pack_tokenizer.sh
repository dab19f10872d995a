#!/bin/sh
# thin-pack --tokenizer: a vocab-only GGUF is kept whole as blob tokenizer.gguf; a tokenizer.json
# (with tokenizer_config.json beside it) replaces the folder's; anything else is refused.
set -u
P="$BIN/thin-pack"
I="$BIN/thin-inspect"
S="$FIX/stories260k"
G="$FIX/tokenizer-vectors/ggml-vocab-llama-spm.gguf"
fail() { echo "FAIL: $*"; exit 1; }
"$P" -q --tokenizer "$G" "$S/model.safetensors" -o "$T/g.thin" || fail "pack with GGUF"
"$I" "$T/g.thin" | grep -q '^tokenizer: gguf' || fail "tokenizer kind"
"$I" --json "$T/g.thin" >"$T/j"
grep -q '"blob": "tokenizer.gguf"' "$T/j" || fail "tokenizer section"
size=$(wc -c <"$G")
grep -A2 '"name": "tokenizer.gguf"' "$T/j" | grep -q "\"nbytes\": $size" || fail "GGUF blob size"
grep -q '"name": "tokenizer.json"' "$T/j" && fail "folder tokenizer.json kept next to the GGUF"
mkdir "$T/tok" && cp "$S/tokenizer.json" "$S/tokenizer_config.json" "$T/tok/"
"$P" -q --tokenizer "$T/tok/tokenizer.json" "$S/model-bf16.safetensors" -o "$T/h.thin" ||
    fail "pack with tokenizer.json"
"$I" --json "$T/h.thin" | grep -q '"tokenizer_config": "tokenizer_config.json"' ||
    fail "tokenizer_config picked up"
printf 'GGUF\003\0\0\0' >"$T/bad.gguf"
"$P" -q --tokenizer "$T/bad.gguf" "$S" -o "$T/x.thin" 2>"$T/err"; rc=$?
[ "$rc" -eq 1 ] || fail "truncated GGUF: exit $rc"
grep -q 'GGUF' "$T/err" || fail "truncated GGUF message"
"$P" -q --tokenizer "$S/model.safetensors" "$S" -o "$T/x.thin" 2>/dev/null; rc=$?
[ "$rc" -eq 1 ] || fail "non-tokenizer: exit $rc"
[ ! -e "$T/x.thin" ] || fail "output left"
exit 0
