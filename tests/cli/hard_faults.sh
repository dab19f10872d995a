#!/bin/sh
# Faults while writing and reading:
#  - thin-pack and thin-quant killed with SIGKILL in the middle of writing leave the target absent
#    (or, when it existed, intact); the temporary file (".NAME.XXXXXXXX.tmp" beside the target) is
#    the only thing left, as nothing can remove it after SIGKILL or a power loss;
#  - a full disk (/dev/full as -o target or as stdout, and a 1 MiB tmpfs when mounting is
#    permitted) and a closed stdout give a message and exit 1, and leave no output behind;
#  - streaming a model through a pipe takes bounded memory: `thin-inspect --verify -` and
#    `thin-quant -` run under an address-space limit (ulimit -v) below the model's size.
set -u
FAILS=0
fail() { echo "FAIL: $*"; FAILS=$((FAILS + 1)); }
TM="$FIX/../tests/fuzz/tiny_model.py"

# A ~300 MB model (vocab 64000 x hidden 1152 F32 embedding) and a tiny one.
python3 "$TM" "$T/big" --vocab 64000 --hidden 1152 --inter 64 --heads 4 --kv-heads 2 \
    --no-tokenizer || exit 1
python3 "$TM" "$T/tiny" || exit 1
"$BIN/thin-pack" -q "$T/big" -o "$T/big.thin" || exit 1
"$BIN/thin-pack" -q --chunk-size 4K "$T/tiny" -o "$T/tiny.thin" || exit 1
big=$(wc -c <"$T/big.thin")

# kill_mid OUTDIR CMD...: starts CMD, SIGKILLs it once a temporary file appears in OUTDIR.
kill_mid() {
    dir=$1; shift
    "$@" 2>/dev/null &
    pid=$!
    i=0
    while [ $i -lt 2000 ]; do
        ls -a "$dir" | grep -q '^\..*\.tmp$' && break
        kill -0 $pid 2>/dev/null || break
        sleep 0.005; i=$((i + 1))
    done
    kill -9 $pid 2>/dev/null
    wait $pid 2>/dev/null
    return 0
}

# check_target PATH BEFORE: PATH is absent (BEFORE empty) or identical to BEFORE, or, if the tool
# won the race and finished, a complete file that verifies.
check_target() {
    if [ ! -e "$1" ]; then
        [ -z "$2" ] || fail "$1: the previous file is gone"
    elif [ -n "$2" ] && cmp -s "$1" "$2"; then
        :
    elif "$BIN/thin-inspect" --verify -q "$1" >/dev/null 2>&1; then
        echo "note: $1 was finished before the kill"
    else
        fail "$1: partial file left at the target"
    fi
}

for tool in pack quant; do
    for case in absent present; do
        d="$T/kill-$tool-$case"; mkdir -p "$d"; before=""
        if [ $case = present ]; then cp "$T/tiny.thin" "$d/out.thin"; before="$T/tiny.thin"; fi
        if [ $tool = pack ]; then kill_mid "$d" "$BIN/thin-pack" -q "$T/big" -o "$d/out.thin"
        else kill_mid "$d" "$BIN/thin-quant" -q -p fp8-all "$T/big.thin" -o "$d/out.thin"; fi
        check_target "$d/out.thin" "$before"
        ls -a "$d" | grep '\.tmp$' | sed "s|^|left after SIGKILL ($tool, $case): |"
    done
done

# Full disk and closed stdout: exit 1 with a message, nothing left behind.
full() { # full NAME CMD...: CMD must exit 1 with a message
    "$@" 2>"$T/err"; rc=$?
    [ $rc -eq 1 ] || fail "$1: exit $rc, expected 1"
    grep -q . "$T/err" || fail "$1: no message"
}
full "$BIN/thin-pack" -q "$T/tiny" -o /dev/full
full "$BIN/thin-quant" -q -p fp8-all "$T/tiny.thin" -o /dev/full
"$BIN/thin-pack" -q "$T/tiny" -o - >/dev/full 2>"$T/err"; rc=$?
[ $rc -eq 1 ] && grep -q . "$T/err" || fail "thin-pack to a full stdout: exit $rc"
"$BIN/thin-quant" -q -p fp8-all "$T/tiny.thin" >/dev/full 2>"$T/err"; rc=$?
[ $rc -eq 1 ] && grep -q . "$T/err" || fail "thin-quant to a full stdout: exit $rc"
"$BIN/thin-inspect" --extract model.norm.weight "$T/tiny.thin" >/dev/full 2>"$T/err"; rc=$?
[ $rc -eq 1 ] && grep -q . "$T/err" || fail "thin-inspect --extract to a full stdout: exit $rc"
"$BIN/thin-inspect" "$T/tiny.thin" >/dev/full 2>"$T/err"; rc=$?
[ $rc -eq 1 ] && grep -q . "$T/err" || fail "thin-inspect listing to a full stdout: exit $rc"
"$BIN/thin-pack" -q "$T/tiny" -o - >&- 2>"$T/err"; rc=$?
[ $rc -eq 1 ] && grep -q . "$T/err" || fail "thin-pack to a closed stdout: exit $rc"
"$BIN/thin-run" "$T/tiny.thin" --device cpu -p Once -n 2 -t 0 >&- 2>"$T/err"; rc=$?
[ $rc -eq 1 ] && grep -q . "$T/err" || fail "thin-run to a closed stdout: exit $rc"
[ ! -e /dev/.full.*.tmp ] 2>/dev/null || fail "a temporary file was left in /dev"
[ -c /dev/full ] || fail "/dev/full is no longer a device"

mkdir -p "$T/small"
if mount -t tmpfs -o size=1m tmpfs "$T/small" 2>/dev/null; then
    full "$BIN/thin-pack" -q "$T/big" -o "$T/small/out.thin"
    full "$BIN/thin-quant" -q -p fp8-all "$T/big.thin" -o "$T/small/out.thin"
    [ -z "$(ls -A "$T/small")" ] || fail "files left on the full tmpfs: $(ls -A "$T/small")"
    umount "$T/small"
else
    echo "note: mounting a tmpfs is not permitted here: the small-filesystem case is skipped"
fi

# Bounded memory: a pipe of $big bytes through tools limited to 200 MB of address space.
if ldd "$BIN/thin-inspect" 2>/dev/null | grep -q 'libasan\|libtsan'; then
    echo "note: sanitizer build: the address-space limit case is skipped"
else
    lim=200000
    [ "$big" -gt $((lim * 1024)) ] || fail "the model ($big bytes) is not larger than the limit"
    (ulimit -v $lim; cat "$T/big.thin" | "$BIN/thin-inspect" --verify -q --threads 2 - \
        >/dev/null) || fail "thin-inspect --verify - under ulimit -v $lim"
    (ulimit -v $lim; cat "$T/big.thin" |
        "$BIN/thin-quant" -q -p fp8-all --threads 2 - -o "$T/q.thin") ||
        fail "thin-quant - under ulimit -v $lim"
    "$BIN/thin-inspect" --verify -q "$T/q.thin" >/dev/null || fail "the streamed quant output"
    echo "streamed $big bytes under ulimit -v $lim KiB"
fi
[ "$FAILS" -eq 0 ]
