#!/bin/sh
# bench/carry-libs.sh: the libraries the build's binaries load, without the C runtime, copied
# into CARRY_DIR once (a second run copies nothing); a build folder without binaries is refused.
set -eu
R=$(cd "$(dirname "$0")/../.." && pwd)
B=$(dirname "$BIN")
CARRY_DIR="$T/lib" sh "$R/bench/carry-libs.sh" "$B" >"$T/first"
cat "$T/first"
# thin-inspect loads libzstd and libjansson; the C library stays the machine's
test -f "$T/lib/libzstd.so.1"
test -f "$T/lib/libjansson.so.4"
grep -q '^libzstd.so.1$' "$T/first"
if ls "$T/lib" | grep -q '^libc\.so'; then exit 1; fi
CARRY_DIR="$T/lib" sh "$R/bench/carry-libs.sh" "$B" >"$T/second"
[ ! -s "$T/second" ]
rc=0
CARRY_DIR="$T/lib2" sh "$R/bench/carry-libs.sh" "$T/nothing" >"$T/out" 2>"$T/err" || rc=$?
[ "$rc" = 1 ]
grep -q "no binaries" "$T/err"
[ ! -e "$T/lib2" ]
echo ok
