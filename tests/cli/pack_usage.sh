#!/bin/sh
# thin-pack: --help/--version exit 0 on stdout; usage errors exit 2 with a hint on stderr.
set -u
P="$BIN/thin-pack"
fail() { echo "FAIL: $*"; exit 1; }
expect() { # expected-status command...
    want=$1; shift
    "$@" >"$T/out" 2>"$T/err"; got=$?
    [ "$got" -eq "$want" ] || fail "$* exited $got, expected $want: $(cat "$T/err")"
}
expect 0 "$P" --help; grep -q '^Usage: thin-pack' "$T/out" || fail "--help text"
expect 0 "$P" --version; grep -q '^thin-pack [0-9]' "$T/out" || fail "--version text"
expect 2 "$P"; grep -q "no input given" "$T/err" || fail "no input message"
grep -q "Try 'thin-pack --help'" "$T/err" || fail "usage hint"
expect 2 "$P" a b
expect 2 "$P" --bogus "$FIX/stories260k"
expect 2 "$P" --dtype f8 "$FIX/stories260k" -o "$T/x.thin"
expect 2 "$P" --compress lz4 "$FIX/stories260k" -o "$T/x.thin"
expect 2 "$P" --compress zstd:99 "$FIX/stories260k" -o "$T/x.thin"
for c in zstd:0 zstd:23 zstd: zstdx zstd:3x; do
    expect 2 "$P" --compress "$c" "$FIX/stories260k" -o "$T/x.thin"
    grep -q "is not none, zstd or zstd:1..22" "$T/err" || fail "--compress $c message"
done
expect 2 "$P" --chunk-size 1000 "$FIX/stories260k" -o "$T/x.thin"
expect 2 "$P" --threads 0 "$FIX/stories260k" -o "$T/x.thin"
expect 2 "$P" -o
[ ! -e "$T/x.thin" ] || fail "a usage error left an output file"
# data errors exit 1
expect 1 "$P" "$T/missing" -o "$T/x.thin"
grep -q "missing" "$T/err" || fail "missing input not named"
expect 1 "$P" "$FIX/tokenizer-vectors/ggml-vocab-llama-spm.gguf" -o "$T/x.thin"
grep -q "GGUF" "$T/err" || fail "GGUF input message"
printf 'hello world, not a model at all' > "$T/junk"
expect 1 "$P" "$T/junk" -o "$T/x.thin"
grep -q "not a SafeTensors file" "$T/err" || fail "junk message: $(cat "$T/err")"
[ ! -e "$T/x.thin" ] || fail "a failed pack left an output file"
ls -a "$T" | grep -q '\.tmp' && fail "temporary file left behind"
exit 0
