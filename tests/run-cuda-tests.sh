#!/bin/sh
# Runs the GPU parity tests in $B/tests/cuda (each prints its own checks and exits 0 on success).
B=${B:-build}
pass=0; fail=0
for t in "$B"/tests/cuda/test_*; do
    [ -x "$t" ] || continue
    case "$t" in *.d|*.o) continue;; esac
    if "$t"; then pass=$((pass + 1)); echo "PASS  $t"; else fail=$((fail + 1)); echo "FAIL  $t"; fi
done
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
