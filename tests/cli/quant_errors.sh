#!/bin/sh
# thin-quant: usage errors exit 2; bad input exits 1 with a message naming the file and no output
# left; NaN/Inf in a chosen weight names the tensor.
Q="$BIN/thin-quant"; P="$BIN/thin-pack"
for tool in "$Q" "$P"; do
    [ -x "$tool" ] || { echo "SKIP: $tool not built"; exit 0; }
done
expect() {
    want=$1; shift
    "$@" > "$T/out" 2> "$T/err"; got=$?
    if [ "$got" -ne "$want" ]; then echo "exit $got, want $want: $*"; cat "$T/err"; exit 1; fi
}
"$P" -q "$FIX/stories260k" -o "$T/s.thin" || exit 1
S="$T/s.thin"; O="$T/o.thin"

expect 2 "$Q"
expect 2 "$Q" "$S" -o "$O"
grep -q "nothing to do" "$T/err" || exit 1
expect 2 "$Q" --profile fast "$S" -o "$O"
expect 2 "$Q" --profile quality --roles gate "$S" -o "$O"
expect 2 "$Q" --profile quality --layers 1-2 "$S" -o "$O"
expect 2 "$Q" --roles gate,bogus "$S" -o "$O"
expect 2 "$Q" --roles attn_norm "$S" -o "$O"
expect 2 "$Q" --layers 3-1 "$S" -o "$O"
expect 2 "$Q" --select down: "$S" -o "$O"
expect 2 "$Q" --select down:x "$S" -o "$O"
expect 2 "$Q" --profile bf16 --threads 0 "$S" -o "$O"
expect 2 "$Q" --profile bf16 --chunk-size 1000 "$S" -o "$O"
expect 2 "$Q" --profile bf16 --compress lz4 "$S" -o "$O"
expect 2 "$Q" --profile bf16 --compress zstd:23 "$S" -o "$O"
expect 2 "$Q" --profile bf16 --n-layers 0 "$S" -o "$O"
expect 2 "$Q" --profile quality --scale max "$S" -o "$O"
grep -q "scale" "$T/err" || exit 1
expect 2 "$Q" --profile bf16 --bogus "$S" -o "$O"
expect 2 "$Q" --profile bf16 "$S" "$S" -o "$O"
expect 2 "$Q" --profile bf16 "$S" --json - -o -
expect 2 "$Q" --profile bf16 "$S" -o
grep -q "Try 'thin-quant --help'" "$T/err" || exit 1
[ -e "$O" ] && { echo "output left after usage errors"; exit 1; }

# bad data
expect 1 "$Q" --profile bf16 "$T/missing.thin" -o "$O"
grep -q "missing.thin" "$T/err" || exit 1
printf 'not a thin file at all, not even close................................' > "$T/junk"
expect 1 "$Q" --profile bf16 "$T/junk" -o "$O"
head -c 100000 "$S" > "$T/cut.thin"
expect 1 "$Q" --profile bf16 "$T/cut.thin" -o "$O"
sh -c "cat '$T/cut.thin' | '$Q' --profile fp8-all - -o '$O'" 2> "$T/err" && exit 1
[ -e "$O" ] && { echo "output left after bad input"; exit 1; }

# NaN in a gate weight: a tiny SafeTensors file packed by thin-pack
H='{"model.layers.0.mlp.gate_proj.weight":{"dtype":"F32","shape":[2,2],"data_offsets":[0,16]}}'
L=$(printf %s "$H" | wc -c)
{ printf "\\$(printf %03o "$L")\\000\\000\\000\\000\\000\\000\\000"; printf %s "$H"
  printf '\000\000\200\077\000\000\300\177\000\000\000\000\000\000\000\100'; } > "$T/n.safetensors"
"$P" -q "$T/n.safetensors" -o "$T/n.thin" || exit 1
expect 1 "$Q" --roles gate "$T/n.thin" -o "$O"
grep -q "model.layers.0.mlp.gate_proj.weight has a NaN or Inf" "$T/err" || { cat "$T/err"; exit 1; }
[ -e "$O" ] && { echo "output left after NaN"; exit 1; }
sh -c "cat '$T/n.thin' | '$Q' --roles gate - -o '$O'" 2> "$T/err" && exit 1
grep -q "NaN or Inf" "$T/err" || exit 1
[ -e "$O" ] && { echo "output left after NaN from a pipe"; exit 1; }
# not chosen: copied unchanged
expect 0 "$Q" -q --roles up "$T/n.thin" -o "$O"
exit 0
