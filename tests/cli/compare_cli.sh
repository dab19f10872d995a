#!/bin/sh
# thin-compare: identical dumps agree fully; mismatched or bad inputs exit 1; usage errors 2.
G="$FIX/stories260k/golden"
C="$BIN/thin-compare"
expect() {
    want=$1; shift
    "$@" > "$T/out" 2> "$T/err"; got=$?
    if [ "$got" -ne "$want" ]; then echo "exit $got, want $want: $*"; cat "$T/err"; exit 1; fi
}
expect 0 "$C" "$G/once_upon_a_time.logits_all.f32" "$G/once_upon_a_time.logits_all.f32" \
    --vocab 512 --json --min-cosine 1 --max-abs 0 --min-top1 1
grep -q '"positions": 200' "$T/out" || exit 1
grep -q '"top1_agree": 200' "$T/out" || exit 1
grep -q '"pass": true' "$T/out" || exit 1
# row 0 of the long dump is the empty prompt's logits
head -c 2048 "$G/once_upon_a_time.logits_all.f32" > "$T/row0.f32"
expect 0 "$C" "$T/row0.f32" "$G/empty_prompt.logits_after_prompt.f32" --vocab 512 --max-abs 0
grep -q "^     0  1.000000000" "$T/out" || exit 1
# different logits: lily's first row against once's
expect 1 "$C" "$G/lily_and_tom.logits_after_prompt.f32" "$T/row0.f32" --vocab 512 --min-top1 1
expect 1 "$C" "$T/row0.f32" "$G/once_upon_a_time.logits_all.f32" --vocab 512
grep -q "rows" "$T/err" || exit 1
head -c 1000 "$T/row0.f32" > "$T/part.f32"
expect 1 "$C" "$T/part.f32" "$T/part.f32" --vocab 512
expect 1 "$C" "$T/missing.f32" "$T/row0.f32" --vocab 512
expect 2 "$C" "$T/row0.f32" "$T/row0.f32"
expect 2 "$C" "$T/row0.f32" --vocab 512
expect 0 "$C" --help
# stdin as one of the inputs
"$C" - "$T/row0.f32" --vocab 512 --summary < "$T/row0.f32" > "$T/out" || exit 1
grep -q "top-1 agreement  1/1" "$T/out" || exit 1
echo ok
