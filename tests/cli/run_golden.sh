#!/bin/sh
# thin-run reproduces llama2.c's greedy stories260K runs byte for byte (F32 weights, F32 KV cache):
# "-n 200" there means 200 positions counting BOS, so a 5-token prompt generates 196 tokens.
set -e
S="$FIX/stories260k"
"$BIN/thin-pack" -q "$S/model.safetensors" -o "$T/s.thin"
run() { "$BIN/thin-run" "$T/s.thin" --device cpu --kv-dtype f32 -t 0 --echo "$@"; }
run -p "Once upon a time" -n 196 > "$T/once.txt"
cmp "$T/once.txt" "$S/golden/once_upon_a_time.txt"
run -p "Lily and Tom" -n 196 > "$T/lily.txt"
cmp "$T/lily.txt" "$S/golden/lily_and_tom.txt"
run -p "" -n 200 > "$T/empty.txt"
cmp "$T/empty.txt" "$S/golden/empty_prompt.txt"
# the default run of llama2.c's doc: 256 positions, no prompt
run -n 256 > "$T/doc.txt"
cmp "$T/doc.txt" "$S/golden/doc_default.txt"
# the same ids through --ids and --json
ids=$(sed -n 's/^prompt //p' "$S/golden/lily_and_tom.ids")
"$BIN/thin-run" "$T/s.thin" --device cpu --kv-dtype f32 -t 0 --ids "$ids" -n 5 --json > "$T/j.json"
grep -q '"generated_tokens": 5' "$T/j.json"
grep -q '"stop": "max_tokens"' "$T/j.json"
grep -q '"device": "cpu"' "$T/j.json"
grep -q '"weight_bytes": 1040128' "$T/j.json"
tr -d ' \n' < "$T/j.json" | grep -q '"ids":\[382,276,337,299,322\]'
# the time from the start to the first token holds the load and the time to first token
python3 - "$T/j.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
assert d["start_to_first_s"] >= d["load_s"] + d["ttft_s"] > 0, d
PY
echo ok
