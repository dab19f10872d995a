#!/bin/sh
# The stories260K pipeline under valgrind memcheck: pack, inspect --verify (file and stream),
# quant, and a few generated tokens on the CPU. Any memory error or definite leak fails.
# Skipped (with a note) in a sanitizer build or without valgrind. PCRE2's JIT-compiled matcher
# (the tokenizer's pre-tokenizer regex) runs from anonymous memory where memcheck cannot see which
# bytes it defined: conditional jumps in code outside any named object are suppressed; everything
# else counts. The CUDA build's thin-run runs under memcheck as it is (--device cpu).
set -u
if ! command -v valgrind >/dev/null 2>&1; then
    echo "note: valgrind not installed: skipped"; exit 0
fi
if ldd "$BIN/thin-pack" 2>/dev/null | grep -q 'libasan\|libtsan'; then
    echo "note: sanitizer build: valgrind cannot run it: skipped"; exit 0
fi
printf '{\n   pcre2-jit-code\n   Memcheck:Cond\n   obj:???\n}\n' >"$T/jit.supp"
VG="valgrind -q --error-exitcode=99 --leak-check=full --errors-for-leak-kinds=definite"
VG="$VG --suppressions=$T/jit.supp"
FAILS=0
vg() { # vg NAME CMD...: runs CMD under memcheck; exit 99 is a memcheck error
    name=$1; shift
    $VG "$@" 2>"$T/vg.err"; rc=$?
    if [ $rc -eq 99 ] || grep -q '^==[0-9]*== ' "$T/vg.err"; then
        echo "FAIL: $name: memcheck"; cat "$T/vg.err"; FAILS=$((FAILS + 1))
    elif [ $rc -ne 0 ]; then
        echo "FAIL: $name: exit $rc"; cat "$T/vg.err"; FAILS=$((FAILS + 1))
    fi
}

S="$FIX/stories260k"
vg pack "$BIN/thin-pack" -q --chunk-size 64K "$S" -o "$T/s.thin"
vg inspect "$BIN/thin-inspect" --verify --tape -q --threads 2 "$T/s.thin" >/dev/null
"$BIN/thin-pack" -q --chunk-size 64K --compress zstd "$S" -o "$T/z.thin" || exit 1
$VG "$BIN/thin-inspect" --verify -q --threads 2 - <"$T/z.thin" >/dev/null 2>"$T/vg.err" ||
    { echo "FAIL: inspect stream"; cat "$T/vg.err"; FAILS=$((FAILS + 1)); }
vg quant "$BIN/thin-quant" -q -p quality --threads 2 "$T/s.thin" -o "$T/q.thin"
vg run "$BIN/thin-run" "$T/q.thin" --device cpu --threads 2 -p "Once upon a time" -n 6 -t 0 \
    >/dev/null
vg run-ids "$BIN/thin-run" "$T/s.thin" --device cpu --threads 2 --ids "1 403 407" -n 4 -t 0 \
    --json >/dev/null
[ -s "$T/q.thin" ] || { echo "FAIL: no quantized file"; FAILS=$((FAILS + 1)); }
[ "$FAILS" -eq 0 ]
