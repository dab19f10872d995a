#!/bin/sh
# Corruption through the tools: a tiny packed model (tape + tokenizer, 4 KiB chunks) with one
# byte flipped at sampled offsets (file header, records, descriptors, payloads, padding, manifest,
# trailer) is refused by `thin-inspect --verify` (file and stream) and by thin-run's load, which
# names --no-verify; with --no-verify thin-run may run or refuse, but never crashes.
# Every offset is covered by the library-level test test_hard_corrupt.
set -u
FAILS=0
fail() { echo "FAIL: $*"; FAILS=$((FAILS + 1)); }

python3 "$FIX/../tests/fuzz/tiny_model.py" "$T/m" || exit 1
"$BIN/thin-pack" -q --chunk-size 4K "$T/m" -o "$T/good.thin" || exit 1
"$BIN/thin-inspect" --verify "$T/good.thin" >/dev/null ||
    { echo "intact file fails verify"; exit 1; }
"$BIN/thin-run" "$T/good.thin" --device cpu -p "Once" -n 2 -t 0 >/dev/null ||
    { echo "intact file does not run"; exit 1; }
size=$(wc -c <"$T/good.thin")

flip() { # flip IN OUT OFFSET: copy with the byte at OFFSET xor 0x10
    python3 -c 'import sys
d=bytearray(open(sys.argv[1],"rb").read()); o=int(sys.argv[3]); d[o]^=0x10
open(sys.argv[2],"wb").write(d)' "$1" "$2" "$3"
}

# Offsets: the file header, the first records and descriptor, 17 spread over the file, the
# manifest's region and the trailer.
offsets="0 9 13 20 30 59 60 64 70 80 100 120 130 200 4096 4100 8192 8300"
i=1; while [ $i -le 17 ]; do offsets="$offsets $((size * i / 18))"; i=$((i + 1)); done
offsets="$offsets $((size - 2000)) $((size - 600)) $((size - 200)) $((size - 64)) $((size - 40))"
offsets="$offsets $((size - 8)) $((size - 1))"
n=0; caught=0
for off in $offsets; do
    n=$((n + 1))
    flip "$T/good.thin" "$T/bad.thin" "$off"
    ok=1
    "$BIN/thin-inspect" --verify -q "$T/bad.thin" >/dev/null 2>"$T/err"
    rc=$?; [ $rc -eq 1 ] || { fail "offset $off: thin-inspect --verify exit $rc"; ok=0; }
    [ -s "$T/err" ] || { fail "offset $off: no message"; ok=0; }
    "$BIN/thin-inspect" --verify -q - <"$T/bad.thin" >/dev/null 2>&1
    rc=$?; [ $rc -eq 1 ] || { fail "offset $off: stream verify exit $rc"; ok=0; }
    "$BIN/thin-run" "$T/bad.thin" --device cpu -p "Once" -n 2 -t 0 >/dev/null 2>"$T/err"
    rc=$?; [ $rc -eq 1 ] || { fail "offset $off: thin-run load exit $rc"; ok=0; }
    "$BIN/thin-run" "$T/bad.thin" --device cpu --no-verify -p "Once" -n 2 -t 0 \
        >/dev/null 2>"$T/err"
    rc=$?; [ $rc -le 1 ] || { fail "offset $off: thin-run --no-verify exit $rc"; ok=0; }
    [ $ok -eq 1 ] && caught=$((caught + 1))
done
# A checksum error (payload byte) names the way out.
flip "$T/good.thin" "$T/bad.thin" 4100
"$BIN/thin-run" "$T/bad.thin" --device cpu -p "Once" -n 2 -t 0 >/dev/null 2>"$T/err"
grep -q -- "--no-verify" "$T/err" || fail "the checksum error does not mention --no-verify"
echo "detected $caught of $n sampled flips ($((100 * caught / n))%), file of $size bytes"
[ "$FAILS" -eq 0 ]
