#!/bin/sh
# thin-run's exit codes and messages: usage errors 2, bad data 1.
S="$FIX/stories260k"
"$BIN/thin-pack" -q "$S/model.safetensors" -o "$T/s.thin" || exit 1
R="$BIN/thin-run"
expect() { # expected-status command...
    want=$1; shift
    "$@" > "$T/out" 2> "$T/err"; got=$?
    if [ "$got" -ne "$want" ]; then echo "exit $got, want $want: $*"; cat "$T/err"; exit 1; fi
}
expect 0 "$R" --help
expect 0 "$R" --version
expect 2 "$R"
expect 2 "$R" "$T/s.thin" --temperature -1
expect 2 "$R" "$T/s.thin" --kv-dtype f16
expect 2 "$R" "$T/s.thin" -p a --ids "1 2"
expect 2 "$R" "$T/s.thin" --bogus
expect 1 "$R" "$T/missing.thin" -p hi
grep -q "missing.thin" "$T/err" || exit 1
expect 1 "$R" "$T/s.thin" --ids "1 9999"
grep -q "9999" "$T/err" || exit 1
expect 1 "$R" "$T/s.thin" --ctx 4 -p "Once upon a time there was"
grep -q "context" "$T/err" || exit 1
expect 1 "$R" "$T/s.thin" --ctx 100000
# the generation stops at the context limit with a note
expect 0 "$R" "$T/s.thin" --ctx 10 -t 0
grep -q "context limit" "$T/err" || exit 1
# stop strings end the text before them
expect 0 "$R" "$T/s.thin" -t 0 --stop "Lily"
printf 'Once upon a time, there was a little girl named \n' | cmp - "$T/out" || exit 1
# a file read from stdin runs the same
cat "$T/s.thin" | "$R" - --ids "1 403" -t 0 -n 3 > "$T/pipe.txt" || exit 1
"$R" "$T/s.thin" --ids "1 403" -t 0 -n 3 | cmp - "$T/pipe.txt" || exit 1
# a corrupted weight fails the checksum on load unless --no-verify
cp "$T/s.thin" "$T/bad.thin"
off=$(( $(wc -c < "$T/s.thin") / 2 ))
printf '\377\377\377\377' | dd of="$T/bad.thin" bs=1 seek="$off" conv=notrunc 2>/dev/null
expect 1 "$R" "$T/bad.thin" --ids 1 -n 1
# (the checksums are checked beside the backend's load: one line, the checksum's, no output)
[ "$(wc -l < "$T/err")" -eq 1 ] && grep -q "bad.thin: .*SHA-256 mismatch.*--no-verify" "$T/err" || { cat "$T/err"; exit 1; }
[ ! -s "$T/out" ] || exit 1
expect 1 "$R" "$T/bad.thin" --ids 1 -n 1 --json -q
[ "$(wc -l < "$T/err")" -eq 1 ] && [ ! -s "$T/out" ] || exit 1
# a tokenizer that does not fit the model is told; with a failing checksum too, the checksum alone
"$BIN/thin-pack" -q "$S/model.safetensors" --tokenizer "$FIX/tokenizer-vectors/ggml-vocab-llama-bpe.gguf" \
    -o "$T/tk.thin" || exit 1
expect 1 "$R" "$T/tk.thin" -p "Once" -n 1
[ "$(wc -l < "$T/err")" -eq 1 ] && grep -q "tk.thin: the tokenizer has 128256 tokens, the model 512" "$T/err" || exit 1
cp "$T/tk.thin" "$T/tkbad.thin"
printf '\377\377\377\377' | dd of="$T/tkbad.thin" bs=1 seek="$off" conv=notrunc 2>/dev/null
expect 1 "$R" "$T/tkbad.thin" -p "Once" -n 1
[ "$(wc -l < "$T/err")" -eq 1 ] && grep -q "SHA-256 mismatch" "$T/err" || { cat "$T/err"; exit 1; }
# a usage error about the run (not the file) is told at once, whatever the checksums say
expect 1 "$R" "$T/bad.thin" --ctx 100000 --ids 1
grep -q "exceeds the model's limit" "$T/err" || exit 1
"$R" "$T/bad.thin" --no-verify --ids 1 -n 1 -t 0 >/dev/null 2>&1
[ $? -le 1 ] || exit 1
# same seed, same sample
"$R" "$T/s.thin" -t 1 --seed 5 -n 30 > "$T/a.txt" || exit 1
"$R" "$T/s.thin" -t 1 --seed 5 -n 30 --threads 1 | cmp - "$T/a.txt" || exit 1
# --shards: a split the heads allow runs on the CPU (same greedy ids here); others are refused
"$R" "$T/s.thin" --device cpu --ids "1 403" -t 0 -n 20 > "$T/whole.txt" || exit 1
"$R" "$T/s.thin" --shards 2 --ids "1 403" -t 0 -n 20 | cmp - "$T/whole.txt" || exit 1
"$R" "$T/s.thin" --shards 4 --ids 1 -t 0 -n 2 --json | grep -q '"shards": 4' || exit 1
# --json tells the context the session holds: --ctx, else the model's limit (512)
"$R" "$T/s.thin" --ctx 100 --ids 1 -t 0 -n 2 --json | grep -q '"ctx": 100' || exit 1
"$R" "$T/s.thin" --ids 1 -t 0 -n 2 --json | grep -q '"ctx": 512' || exit 1
expect 1 "$R" "$T/s.thin" --shards 3 --ids 1 -n 1
grep -q "s.thin: cannot split over 3 devices: tape op .*: its rows (64) do not divide" "$T/err" || exit 1
expect 2 "$R" "$T/s.thin" --shards 0
expect 2 "$R" "$T/s.thin" --shards 2 --device cuda
# a model packed without a tape: thin-run says what thin-pack said
mkdir "$T/gelu"
cp "$FIX/qwen2-tiny/model.safetensors" "$T/gelu/"
sed 's/"hidden_act": "silu"/"hidden_act": "gelu"/' "$FIX/qwen2-tiny/config.json" > "$T/gelu/config.json"
"$BIN/thin-pack" -q "$T/gelu" -o "$T/gelu.thin" 2> /dev/null || exit 1
expect 1 "$R" "$T/gelu.thin" --device cpu --ids 1 -n 1
grep -q 'gelu.thin: no execution tape: hidden_act is not "silu"' "$T/err" || exit 1
"$BIN/thin-inspect" "$T/gelu.thin" | grep -q '^tape: none (no execution tape: hidden_act is not "silu")$' || exit 1
# --device cuda either runs (a GPU build on a GPU) or says why not, with exit 1
"$R" "$T/s.thin" --device cuda --ids 1 -n 1 > "$T/out" 2> "$T/err"; got=$?
if [ "$got" -ne 0 ]; then [ "$got" -eq 1 ] && grep -q "cuda" "$T/err" || exit 1; fi
echo ok
# weights that make the logits NaN (the final norm's weights NaN; thin-pack keeps what it is
# given): the CPU backend reports that the logits are not finite, one line naming the model,
# instead of choosing id 0 over and over (sampling found no candidate there: test_sampler)
if command -v python3 >/dev/null 2>&1; then
    mkdir "$T/nan" && cp "$S"/*.json "$S/tok512.model" "$T/nan/" 2>/dev/null
    python3 - "$S/model.safetensors" "$T/nan/model.safetensors" <<'PY' || exit 1
import json, struct, sys
b = bytearray(open(sys.argv[1], "rb").read())
n = struct.unpack("<Q", b[:8])[0]
s, e = json.loads(b[8:8 + n])["model.norm.weight"]["data_offsets"]
b[8 + n + s:8 + n + e] = struct.pack("<f", float("nan")) * ((e - s) // 4)
open(sys.argv[2], "wb").write(b)
PY
    "$BIN/thin-pack" -q "$T/nan" -o "$T/nan.thin" || exit 1
    for t in 0.8 0; do
        expect 1 "$R" "$T/nan.thin" --device cpu -p "Once" -n 4 -t $t --seed 1
        grep -q "nan.thin: .*the logits hold NaN or infinity" "$T/err" || { cat "$T/err"; exit 1; }
        [ "$(wc -l <"$T/err")" -eq 1 ] || { cat "$T/err"; exit 1; }
        [ -s "$T/out" ] && { echo "text from NaN logits: $(cat "$T/out")"; exit 1; }
    done
    expect 1 "$R" "$T/nan.thin" --device cpu -p "Once" -n 4 -t 0 --json
    [ -s "$T/out" ] && { echo "JSON from NaN logits"; exit 1; }
fi
exit 0
