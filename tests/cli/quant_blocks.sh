#!/bin/sh
# thin-quant on tensors larger than one 16 MiB block, whose blocks end inside a chunk: the output
# is the same bytes for any --threads, with the default chunk size and with one that does not
# divide the block (FP8 rows and plain copies), and it verifies.
Q="$BIN/thin-quant"; P="$BIN/thin-pack"
for tool in "$Q" "$P"; do
    [ -x "$tool" ] || { echo "SKIP: $tool not built"; exit 0; }
done
command -v python3 >/dev/null 2>&1 || { echo "SKIP: no python3"; exit 0; }
fail() { echo "FAIL: $*"; [ -f "$T/err" ] && cat "$T/err"; exit 1; }
# down_proj [1024, 8200] BF16 is 16.8 MB: blocks of 1023 rows, 8,388,600 FP8 bytes, 2 chunks less 8
python3 "$(dirname "$0")/../../bench/make-random-safetensors.py" "$T/m" --preset llama-1b \
    --layers 1 --hidden 1024 --intermediate 8200 --heads 8 --kv-heads 8 --vocab 256 \
    > /dev/null || fail "generator"
"$P" -q "$T/m" -o "$T/m.thin" 2> "$T/err" || fail "thin-pack"
for t in 1 2 3; do
    "$Q" -q --threads $t --roles down "$T/m.thin" -o "$T/d$t.thin" || fail "fp8 threads $t"
    "$Q" -q --threads $t --roles down --chunk-size 12K "$T/m.thin" -o "$T/c$t.thin" ||
        fail "fp8 12K threads $t"
    "$Q" -q --threads $t --profile bf16 --chunk-size 12K "$T/m.thin" -o "$T/b$t.thin" ||
        fail "copy 12K threads $t"
done
for t in 2 3; do
    cmp -s "$T/d1.thin" "$T/d$t.thin" || fail "FP8 output with --threads $t differs"
    cmp -s "$T/c1.thin" "$T/c$t.thin" || fail "FP8 output (12K chunks) with --threads $t differs"
    cmp -s "$T/b1.thin" "$T/b$t.thin" || fail "copy (12K chunks) with --threads $t differs"
done
if [ -x "$BIN/thin-inspect" ]; then
    "$BIN/thin-inspect" --verify "$T/d2.thin" > /dev/null 2>&1 || fail "verify"
fi
exit 0
