#!/bin/sh
# bench-container.sh — throughput of the .thin container core next to cat and sha256sum.
# Builds bench/thin-bench-container.c against build/lib/libthin.a, writes a SIZE_GB (default 4)
# file of random BF16 tensors in BENCH_DIR (default /tmp), and prints a Markdown table of GB/s for:
# write (hash + write + fsync + rename), open + verify (mmap, all cores), stream read (one pass from
# a pipe, hashing), `cat FILE > /dev/null` and `sha256sum FILE` on the same bytes. The file is
# removed at the end. Numbers are with a warm page cache: the file was just written.
set -eu
SIZE_GB=${SIZE_GB:-4}
DIR=${BENCH_DIR:-/tmp}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
CC=${CC:-cc}
make -C "$ROOT" -s build/lib/libthin.a
BIN=$(mktemp "$DIR/thin-bench.XXXXXX")
FILE="$BIN.thin"
trap 'rm -f "$BIN" "$FILE"' EXIT INT TERM
"$CC" -std=c11 -O2 -D_GNU_SOURCE -I"$ROOT/libthin" -o "$BIN" "$ROOT/bench/thin-bench-container.c" \
    "$ROOT/build/lib/libthin.a" -ljansson -lzstd -lcrypto -lm -pthread

now() { date +%s.%N; }
rate() { awk -v b="$1" -v s="$2" 'BEGIN { printf "%.2f", b / s / 1e9 }'; }
timed() { # prints seconds taken by the command
    t0=$(now); "$@" >/dev/null; t1=$(now); awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.6f", b - a }'
}

MIB=$((SIZE_GB * 1024))
set -- $("$BIN" write "$FILE" "$MIB"); w_s=$1; w_b=$2
bytes=$(stat -c %s "$FILE")
set -- $("$BIN" verify "$FILE"); v_s=$1
set -- $(cat "$FILE" | "$BIN" stream); s_s=$1
c_s=$(timed cat "$FILE")
h_s=$(timed sha256sum "$FILE")

echo "| operation ($SIZE_GB GiB file, $(nproc) cores) | seconds | GB/s |"
echo "| --- | ---: | ---: |"
printf '| thin write (SHA-256, write, fsync, rename) | %.2f | %s |\n' "$w_s" "$(rate "$w_b" "$w_s")"
printf '| thin open + verify (mmap, all cores) | %.2f | %s |\n' "$v_s" "$(rate "$bytes" "$v_s")"
printf '| thin stream read from a pipe (one pass) | %.2f | %s |\n' "$s_s" "$(rate "$bytes" "$s_s")"
printf '| cat FILE > /dev/null | %.2f | %s |\n' "$c_s" "$(rate "$bytes" "$c_s")"
printf '| sha256sum FILE | %.2f | %s |\n' "$h_s" "$(rate "$bytes" "$h_s")"
