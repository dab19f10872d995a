#!/bin/sh
# The fidelity and speed report in one command: stories260K, then the random SmolLM3-3B.
#
#   bench/report.sh [OUTDIR] [report.py options...]
#
# OUTDIR defaults to $OUT when set, else ./report-out; report.md, report.json, report.log and the
# plots go there. Environment:
#   BIN          thin-* tools folder (default build/bin)
#   B            build folder, for the copy-bandwidth probe tests/cuda/test_copy_bandwidth
#                (default build); without it, torch times the copy
#   PYTHON       python with torch/transformers for the reference (default python3)
#   SMOLLM3_DIR  an existing SmolLM3 SafeTensors folder; otherwise, with torch and a GPU, one is
#                made by bench/make-smollm3.py in the work folder and deleted at the end
#   WORK         work folder for models and logits (default: a temporary folder, removed)
#   SMOLLM3=0    skip SmolLM3 (so does a --models list without it)
#   THIN_REPORT_COMMIT  the commit to record, for a copy of the tree without its own git data
#                (default: git describe --always --dirty of the checkout)
# SmolLM3 is skipped, with a note in the report, without torch or without a GPU.
set -eu
cd "$(dirname "$0")/.."
case "${1:-}" in
    ""|-*) OUTDIR=${OUT:-report-out} ;;
    *) OUTDIR=$1; shift ;;
esac
REPORT_COMMAND="bench/report.sh $OUTDIR${*:+ $*}"
export REPORT_COMMAND
BIN=${BIN:-build/bin}
B=${B:-build}
PYTHON=${PYTHON:-python3}
mkdir -p "$OUTDIR"
[ -d .carry/lib ] && export LD_LIBRARY_PATH="$PWD/.carry/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"

if [ -n "${WORK:-}" ]; then
    mkdir -p "$WORK"
else
    WORK=$(mktemp -d "${TMPDIR:-/tmp}/thin-report.XXXXXX")
    trap 'rm -rf "$WORK"' EXIT INT TERM
fi

gpu=0
if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then gpu=1; fi
torch_gpu=0
if "$PYTHON" -c 'import sys, torch, transformers; sys.exit(0 if torch.cuda.is_available() else 1)' \
        >/dev/null 2>&1; then torch_gpu=1; fi

smollm3=${SMOLLM3_DIR:-}
want_smollm3=${SMOLLM3:-1}
case " $* " in *" --models "*|*" --models="*) case "$*" in *smollm3*) ;; *) want_smollm3=0 ;; esac ;; esac
if [ "$want_smollm3" = 0 ]; then
    smollm3=
elif [ -z "$smollm3" ] && [ "$gpu" = 1 ] && [ "$torch_gpu" = 1 ]; then
    if [ -f bench/make-smollm3.py ]; then
        echo "report.sh: making the random SmolLM3-3B (bench/make-smollm3.py)" >&2
        t0=$(date +%s)
        if "$PYTHON" bench/make-smollm3.py "$WORK/smollm3" >&2; then
            echo "report.sh: made in $(( $(date +%s) - t0 )) s" >&2
            smollm3=$WORK/smollm3
        else
            echo "report.sh: bench/make-smollm3.py failed: SmolLM3 skipped" >&2
        fi
    else
        echo "report.sh: bench/make-smollm3.py is missing: SmolLM3 skipped" >&2
    fi
elif [ -z "$smollm3" ]; then
    echo "report.sh: no GPU with torch here: SmolLM3 skipped (set SMOLLM3_DIR to use a folder)" >&2
fi

set -- --bin "$BIN" --out "$OUTDIR" --work "$WORK/run" --python "$PYTHON" "$@"
if [ "$gpu" = 1 ] && [ -x "$B/tests/cuda/test_copy_bandwidth" ]; then
    bw=$("$B/tests/cuda/test_copy_bandwidth" 2>/dev/null | awk '/^copy_bandwidth_GBps /{print $2}')
    if [ -n "$bw" ]; then set -- --bandwidth "$bw" --bandwidth-source \
        "device-to-device copy, read + write bytes ($B/tests/cuda/test_copy_bandwidth)" "$@"; fi
fi
if [ -n "$smollm3" ]; then set -- --smollm3 "$smollm3" "$@"; fi
rc=0
"$PYTHON" bench/report.py "$@" || rc=$?
[ -f "$OUTDIR/report.json" ] || exit "$rc"

if "$PYTHON" -c 'import matplotlib' >/dev/null 2>&1; then
    "$PYTHON" bench/plot.py "$OUTDIR/report.json" >/dev/null || rc=1
else
    echo "report.sh: matplotlib is not importable here: copy $OUTDIR/report.json to a machine" \
         "with matplotlib and run: python3 bench/plot.py report.json" >&2
fi
cat "$OUTDIR/report.md"
exit "$rc"
