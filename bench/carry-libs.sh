#!/bin/sh
# Copies the shared libraries that a build's binaries load into .carry/lib, for running them on a
# machine that lacks some of those libraries (a bare GPU machine without libarchive, cmocka or
# libutf8proc, say): the GPU benchmarks (bench-gpu.sh, decode-variants.sh, prefill-variants.sh,
# kernel-times.sh, report.sh) put .carry/lib first on LD_LIBRARY_PATH when it exists.
#
#   bench/carry-libs.sh [B]    (B: the build folder, default build; reads B/bin and B/tests/cuda)
#
# CARRY_DIR names another destination (default .carry/lib, from the repository root).
# The C and C++ runtimes, the dynamic loader and the CUDA driver stay out: they belong to the
# machine. Prints each library copied; exits non-zero when a binary names a library ldd cannot find.
set -u
cd "$(dirname "$0")/.." || exit 1
B=${1:-build}
D=${CARRY_DIR:-.carry/lib}
bins=$(for f in "$B"/bin/* "$B"/tests/cuda/test_*; do
    [ -f "$f" ] && [ -x "$f" ] && case "$f" in *.o|*.d) ;; *) echo "$f" ;; esac
done)
[ -n "$bins" ] || { echo "carry-libs: $B: no binaries in $B/bin or $B/tests/cuda" >&2; exit 1; }
mkdir -p "$D" || exit 1
# one ldd a binary, each line led by the binary's path
listing=$(for f in $bins; do ldd "$f" 2>/dev/null | sed "s|^|$f |"; done)
missing=$(printf '%s\n' "$listing" | awk '$3 == "=>" && $4 == "not" {print "carry-libs: " $1 ": " $2 " not found"}')
rc=0
[ -z "$missing" ] || { printf '%s\n' "$missing" >&2; rc=1; }
printf '%s\n' "$listing" | awk '$3 == "=>" && $4 ~ /^\// {print $2, $4}' | sort -u | while read -r name path; do
    case "$name" in
        libc.so*|libm.so*|libpthread.so*|libdl.so*|librt.so*|ld-linux*|libgcc_s.so*|libstdc++.so*|libcuda.so*) continue ;;
    esac
    [ -f "$D/$name" ] && cmp -s "$path" "$D/$name" && continue
    cp -L "$path" "$D/$name" && echo "$name"
done
exit $rc
