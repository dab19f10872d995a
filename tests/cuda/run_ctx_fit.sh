#!/bin/sh
# thin-run's context on a GPU that cannot hold the default's KV cache (THIN_CUDA_KV_MEM stands in
# for a small GPU): by default it takes as many positions as fit, with a note, and generates; an
# explicit --ctx that does not fit is refused with the count that would, a non-zero exit, nothing on stdout.
# stories260K's KV cache in BF16: 5 layers of 4 KV heads of 8 dims, 640 bytes a position, 512 in all.
set -e
"$BIN/thin-pack" -q "$FIX/stories260k" -o "$T/s.thin"
export THIN_CUDA_KV_MEM=200000 # 312 positions
"$BIN/thin-run" "$T/s.thin" --device cuda --kv-dtype bf16 --ids "1 403 407" -n 8 -t 0 --ignore-eos \
    --json >"$T/fit.json" 2>"$T/fit.err"
cat "$T/fit.err"
grep -q "context of 312 positions" "$T/fit.err"
grep -q '"ctx": 312' "$T/fit.json"
# generating past it stops at the context with a note that says why it is that short
"$BIN/thin-run" "$T/s.thin" --device cuda --kv-dtype bf16 --ids "1 403 407" -n 400 -t 0 --ignore-eos \
    >"$T/full.txt" 2>"$T/full.err"
cat "$T/full.err"
grep -q "reached the context limit of 312 positions (as many positions as fit in the GPU's memory)" "$T/full.err"
rc=0
"$BIN/thin-run" "$T/s.thin" --device cuda --kv-dtype bf16 --ctx 512 --ids "1 403 407" -n 8 -t 0 \
    >"$T/big.out" 2>"$T/big.err" || rc=$?
cat "$T/big.err"
[ "$rc" != 0 ]
[ ! -s "$T/big.out" ]
grep -q "s.thin: cuda backend: the KV cache of 512 positions .*--ctx 312 or less" "$T/big.err"
[ "$(wc -l <"$T/big.err")" = 1 ]
# within the cap, an explicit --ctx is taken as given, without a note
"$BIN/thin-run" "$T/s.thin" --device cuda --kv-dtype bf16 --ctx 300 --ids "1 403 407" -n 8 -t 0 \
    --ignore-eos --json >"$T/ok.json" 2>"$T/ok.err"
if grep -q "context of" "$T/ok.err"; then exit 1; fi
echo ok
