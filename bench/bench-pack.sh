#!/bin/sh
# Times thin-pack against cat and sha256sum on the same random SafeTensors model and prints a
# Markdown table. The model (about BENCH_GIB GiB, default 4) is made in BENCH_DIR (default a new
# folder under ${TMPDIR:-/tmp}) and deleted afterwards. Every tool reads the file from the page
# cache: one warm-up read comes first, and the file should fit in memory.
#   BENCH_GIB=2 sh bench/bench-pack.sh        (after `make`)
set -eu
BIN=${BIN:-build/bin}
GIB=${BENCH_GIB:-4}
DIR=${BENCH_DIR:-$(mktemp -d "${TMPDIR:-/tmp}/thin-bench.XXXXXX")}
trap 'rm -rf "$DIR"' EXIT INT TERM
python3 "$(dirname "$0")/make-random-safetensors.py" "$DIR/model" --gib "$GIB" >/dev/null
F="$DIR/model/model.safetensors"
BYTES=$(wc -c <"$F")
cat "$F" >/dev/null
now() { date +%s.%N; }
row() { # label command...
    label=$1; shift
    t0=$(now); "$@"; t1=$(now)
    awk -v l="$label" -v a="$t0" -v b="$t1" -v n="$BYTES" \
        'BEGIN { s = b - a; printf "| %s | %.2f | %.2f |\n", l, s, n / s / 1073741824 }'
}
echo "Input: $(awk -v n="$BYTES" 'BEGIN { printf "%.2f GiB", n / 1073741824 }') BF16 SafeTensors," \
     "$(nproc) cores, $(uname -m)"
echo
echo "| command | seconds | GiB/s |"
echo "| --- | ---: | ---: |"
row "cat FILE > /dev/null" sh -c "cat '$F' >/dev/null"
row "sha256sum FILE" sh -c "sha256sum '$F' >/dev/null"
row "openssl dgst -sha256 FILE (SHA-NI, one core)" sh -c "openssl dgst -sha256 '$F' >/dev/null"
row "thin-pack DIR > /dev/null" sh -c "'$BIN/thin-pack' -q '$DIR/model' >/dev/null"
row "thin-pack DIR -o FILE.thin" sh -c "'$BIN/thin-pack' -q '$DIR/model' -o '$DIR/out.thin'"
cat "$DIR/out.thin" >/dev/null
row "thin-inspect --verify FILE.thin" sh -c "'$BIN/thin-inspect' -q --verify '$DIR/out.thin' >/dev/null"
rm -f "$DIR/out.thin"
row "thin-pack --compress zstd:1 DIR > /dev/null" \
    sh -c "'$BIN/thin-pack' -q --compress zstd:1 '$DIR/model' >/dev/null"
