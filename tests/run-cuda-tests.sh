#!/bin/sh
# Runs the GPU parity tests in $B/tests/cuda (each prints its own checks and exits 0 on success)
# and the GPU CLI scripts tests/cuda/*.sh.
B=${B:-build}
pass=0; fail=0
for t in "$B"/tests/cuda/test_*; do
    [ -x "$t" ] || continue
    case "$t" in *.d|*.o) continue;; esac
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
