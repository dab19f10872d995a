#!/bin/sh
# Runs every unit-test executable in $B/tests and every CLI test script in tests/cli.
# Each CLI script gets BIN (tool folder), FIX (fixtures folder) and T (a fresh temporary folder)
# and passes by exiting 0. The closing line counts executables and scripts: "N passed, N failed".
B=${B:-build}
pass=0; fail=0; failed=""
for t in "$B"/tests/test_*; do
    [ -x "$t" ] || continue
    if "$t" >"$t.log" 2>&1; then pass=$((pass + 1)); echo "PASS  $t"
    else fail=$((fail + 1)); failed="$failed $t"; echo "FAIL  $t"; cat "$t.log"; fi
done
for s in tests/cli/*.sh; do
    [ -f "$s" ] || continue
    T=$(mktemp -d "${TMPDIR:-/tmp}/thin-cli.XXXXXX")
    if BIN="$PWD/$B/bin" FIX="$PWD/fixtures" T="$T" sh "$s" >"$T.log" 2>&1; then
        pass=$((pass + 1)); echo "PASS  $s"
    else fail=$((fail + 1)); failed="$failed $s"; echo "FAIL  $s"; cat "$T.log"; fi
    rm -rf "$T" "$T.log"
done
[ -n "$failed" ] && echo "failed:$failed"
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
