#!/bin/sh
# Runs the GPU tests in $B/tests/cuda, one per tests/cuda/test_*.c (each prints its own checks and
# exits 0 on success), and the GPU CLI scripts tests/cuda/*.sh.
B=${B:-build}
pass=0; fail=0
# One binary per tests/cuda/test_*.c; a missing one is a failure, not a skip.
for c in tests/cuda/test_*.c; do
    [ -f "$c" ] || continue
    t="$B/tests/cuda/$(basename "$c" .c)"
    if [ ! -x "$t" ]; then
        fail=$((fail + 1)); echo "FAIL  $t: not built (make check-cuda builds it)"; continue
    fi
    if "$t"; then pass=$((pass + 1)); echo "PASS  $t"; else fail=$((fail + 1)); echo "FAIL  $t"; fi
done
# and the GPU CLI scripts, with BIN, FIX and T as tests/run-tests.sh gives them
for s in tests/cuda/*.sh; do
    [ -f "$s" ] || continue
    T=$(mktemp -d "${TMPDIR:-/tmp}/thin-cuda.XXXXXX")
    if BIN="$PWD/$B/bin" FIX="$PWD/fixtures" T="$T" sh "$s" >"$T.log" 2>&1; then
        pass=$((pass + 1)); echo "PASS  $s"
    else fail=$((fail + 1)); echo "FAIL  $s"; cat "$T.log"; fi
    rm -rf "$T" "$T.log"
done
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
