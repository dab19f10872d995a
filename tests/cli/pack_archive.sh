#!/bin/sh
# thin-pack reads stories260K from a file, a folder, a tar, tar.gz, tar.zst and zip of the folder
# and from stdin; every tensor comes out with the same bytes as the SafeTensors source.
set -u
P="$BIN/thin-pack"
I="$BIN/thin-inspect"
S="$FIX/stories260k"
fail() { echo "FAIL: $*"; exit 1; }
mkdir "$T/m" && cp "$S/config.json" "$S/model.safetensors" "$S/tokenizer.json" \
    "$S/tokenizer_config.json" "$T/m/" || fail "copy"
"$P" -q "$S/model.safetensors" -o "$T/ref.thin" || fail "pack file"
"$I" --verify "$T/ref.thin" >/dev/null || fail "verify ref"

tensors=$("$I" --json "$T/ref.thin" | grep '"name": "model\.\|"name": "lm_head' |
          sed 's/.*"name": "\([^"]*\)".*/\1/')
[ "$(echo "$tensors" | wc -l)" -eq 48 ] || fail "48 tensors expected, got: $tensors"

# Source bytes of a tensor: data_offsets from the SafeTensors header, then dd.
hlen=$(od -An -t u8 -N8 "$S/model.safetensors" | tr -d ' ')
head -c $((8 + hlen)) "$S/model.safetensors" | tail -c "$hlen" >"$T/header.json"
slice() { # name -> raw bytes on stdout
    offs=$(tr -d ' \n' <"$T/header.json" | grep -o "\"$1\":{[^}]*}" |
           sed 's/.*"data_offsets":\[\([0-9]*\),\([0-9]*\)\].*/\1 \2/')
    set -- $offs
    tail -c +$((8 + hlen + $1 + 1)) "$S/model.safetensors" | head -c $(($2 - $1))
}
for t in $tensors; do
    [ "$t" = lm_head.weight ] && continue
    slice "$t" >"$T/want"
    "$I" --extract "$t" "$T/ref.thin" >"$T/got" || fail "extract $t"
    cmp -s "$T/want" "$T/got" || fail "tensor $t differs from the source bytes"
done

same_tensors() { # file.thin label
    for t in $tensors; do
        [ "$t" = lm_head.weight ] && continue
        "$I" --extract "$t" "$1" >"$T/got" || fail "$2: extract $t"
        "$I" --extract "$t" "$T/ref.thin" >"$T/want"
        cmp -s "$T/want" "$T/got" || fail "$2: tensor $t differs"
    done
    "$I" --verify "$1" >/dev/null || fail "$2: verify"
    "$I" "$1" | grep -q '^tape: 78 ops' || fail "$2: tape"
    "$I" "$1" | grep -q '^tokenizer: hf' || fail "$2: tokenizer"
}

"$P" -q "$T/m" -o "$T/dir.thin" || fail "pack folder"
same_tensors "$T/dir.thin" folder
(cd "$T" && tar -cf m.tar m) || fail "tar"
"$P" -q "$T/m.tar" -o "$T/tar.thin" || fail "pack tar"
same_tensors "$T/tar.thin" tar
(cd "$T" && tar -czf m.tar.gz m) || fail "tar.gz"
"$P" -q "$T/m.tar.gz" -o "$T/tgz.thin" || fail "pack tar.gz"
same_tensors "$T/tgz.thin" tar.gz
if command -v zstd >/dev/null 2>&1; then
    (cd "$T" && tar -cf - m | zstd -q -o m.tar.zst) || fail "tar.zst"
    "$P" -q "$T/m.tar.zst" -o "$T/zst.thin" || fail "pack tar.zst"
    same_tensors "$T/zst.thin" tar.zst
    "$P" -q - -o "$T/zst-stdin.thin" <"$T/m.tar.zst" || fail "pack tar.zst from stdin"
    same_tensors "$T/zst-stdin.thin" "tar.zst on stdin"
else
    echo "SKIP: zstd not installed, no tar.zst test"
fi
if command -v zip >/dev/null 2>&1; then
    (cd "$T" && zip -q -r m.zip m) || fail "zip"
    "$P" -q "$T/m.zip" -o "$T/zip.thin" || fail "pack zip"
    same_tensors "$T/zip.thin" zip
else
    echo "SKIP: zip not installed, no zip test"
fi
"$P" -q - <"$S/model.safetensors" >"$T/stdin.thin" || fail "pack from stdin"
for t in model.norm.weight model.layers.4.mlp.down_proj.weight; do
    "$I" --extract "$t" "$T/stdin.thin" | cmp -s - "$(slice "$t" >"$T/w"; echo "$T/w")" ||
        fail "stdin: $t differs"
done
# the BF16 file packs with its bytes kept
"$P" -q "$S/model-bf16.safetensors" -o "$T/bf16.thin" || fail "pack bf16"
"$I" --dtype BF16 "$T/bf16.thin" | grep -q '^  BF16 *48 tensors\|^  BF16 *47 tensors' ||
    fail "bf16 dtypes"
exit 0
