#!/bin/sh
# thin-inspect --verify finds a flipped byte and names the tensor and chunk (file and stream).
set -u
P="$BIN/thin-pack"
I="$BIN/thin-inspect"
S="$FIX/stories260k"
fail() { echo "FAIL: $*"; exit 1; }
"$P" -q --chunk-size 16K "$S/model.safetensors" -o "$T/s.thin" || fail "pack"
"$I" --verify "$T/s.thin" >/dev/null || fail "clean file fails --verify"
# flip one byte inside the payload of model.layers.1.mlp.up_proj.weight's second chunk
off=$(strings -n 8 "$T/s.thin" | grep -o '"name":"model.layers.1.mlp.up_proj.weight".*' |
      grep -o '"offset":[0-9]*' | sed -n 2p | cut -d: -f2)
[ -n "$off" ] || fail "chunk offset not found"
cp "$T/s.thin" "$T/bad.thin"
printf '\377' | dd of="$T/bad.thin" bs=1 seek=$((off + 10)) conv=notrunc 2>/dev/null
"$I" --verify "$T/bad.thin" >/dev/null 2>"$T/err"; rc=$?
[ "$rc" -eq 1 ] || fail "corrupt file: exit $rc"
grep -q 'model.layers.1.mlp.up_proj.weight' "$T/err" || fail "message lacks the tensor: $(cat "$T/err")"
grep -qi 'chunk 1' "$T/err" || fail "message lacks the chunk: $(cat "$T/err")"
"$I" --verify - <"$T/bad.thin" >/dev/null 2>"$T/err"; rc=$?
[ "$rc" -eq 1 ] || fail "corrupt stream: exit $rc"
exit 0
