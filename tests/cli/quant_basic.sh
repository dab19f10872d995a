#!/bin/sh
# thin-quant on stories260K: profiles, determinism across --threads, file and pipe inputs give the
# same bytes, the report on stderr and in JSON, what each profile records in the manifest.
Q="$BIN/thin-quant"; P="$BIN/thin-pack"
for tool in "$Q" "$P"; do
    [ -x "$tool" ] || { echo "SKIP: $tool not built"; exit 0; }
done
fail() { echo "FAIL: $*"; [ -f "$T/err" ] && cat "$T/err"; exit 1; }
"$P" -q "$FIX/stories260k" -o "$T/s.thin" || fail "thin-pack"

"$Q" --help > "$T/out" || fail "--help"
grep -q "quality" "$T/out" || fail "--help text"
"$Q" --version | grep -q "^thin-quant " || fail "--version"

# quality: the table on stderr, the JSON report, FP8 gate/up everywhere and down in [2, 5 - 2) = 2
"$Q" --profile quality "$T/s.thin" -o "$T/q1.thin" --json "$T/r.json" 2> "$T/err" || fail quality
grep -q "model.layers.0.mlp.gate_proj.weight .* F32>F8" "$T/err" || fail "table gate"
grep -q "model.layers.2.mlp.down_proj.weight .* F32>F8" "$T/err" || fail "table down 2"
grep -q "model.layers.1.mlp.down_proj.weight .* F32>BF16" "$T/err" || fail "table down 1"
grep -q "model.layers.3.mlp.down_proj.weight .* F32>BF16" "$T/err" || fail "table down 3"
grep -q "11 FP8, 25 BF16, 12 copied" "$T/err" || fail "summary"
grep -q '"fp8": 11' "$T/r.json" || fail "json fp8 count"
grep -q '"rel_rms"' "$T/r.json" || fail "json rel_rms"
grep -q '"cosine"' "$T/r.json" || fail "json cosine"
grep -q '"bytes_after"' "$T/r.json" || fail "json bytes"
[ -x "$BIN/thin-inspect" ] && {
    "$BIN/thin-inspect" "$T/q1.thin" > "$T/insp" 2>&1 || fail "thin-inspect of the output"
}
# the manifest sections travel with the file: look for them in the trailer's JSON
grep -a -q '"kv_cache_dtype":"BF16"' "$T/q1.thin" || fail "runtime section"
grep -a -q '"profile":"quality"' "$T/q1.thin" || fail "quant section"
grep -a -q '"down":"2"' "$T/q1.thin" || fail "quant down layers"
grep -a -q '"architecture":"LlamaForCausalLM"' "$T/q1.thin" || fail "model section carried"
grep -a -q '"method":"fp8_e4m3_row_mse"' "$T/q1.thin" || fail "default method recorded"
grep -a -q '"scale":"mse"' "$T/q1.thin" || fail "scale option recorded"
grep -q '"method": "fp8_e4m3_row_mse"' "$T/r.json" || fail "json method"

# --scale absmax: the old rule, recorded as such; per FP8 tensor, mse's error is never above it
"$Q" -q --profile quality --scale absmax "$T/s.thin" -o "$T/a.thin" --json "$T/a.json" ||
    fail "--scale absmax"
grep -a -q '"method":"fp8_e4m3_row_absmax"' "$T/a.thin" || fail "absmax method recorded"
cmp -s "$T/a.thin" "$T/q1.thin" && fail "absmax and mse give the same file"
grep '"rel_rms"' "$T/a.json" | tr -d ' ,' | cut -d: -f2 > "$T/rel_a"
grep '"rel_rms"' "$T/r.json" | tr -d ' ,' | cut -d: -f2 > "$T/rel_m"
[ "$(wc -l < "$T/rel_a")" -eq 36 ] || fail "rel_rms count"
paste "$T/rel_a" "$T/rel_m" > "$T/rel"
awk '$2 > $1 * (1 + 1e-9) { bad = 1 } END { exit bad }' "$T/rel" || fail "mse above absmax"
# the BF16 rows are the same for both; each of the 11 FP8 tensors has less error with mse (on these
# 64-wide rows about 18% less)
awk '$2 < $1 * 0.9 { n++ } END { exit !(n == 11) }' "$T/rel" || fail "mse not lower"

# same bytes whatever the thread count, and from a pipe (copied to a temporary file for quality)
"$Q" -q --profile quality --threads 1 "$T/s.thin" -o "$T/q2.thin" || fail "threads 1"
"$Q" -q --profile quality --threads 2 "$T/s.thin" > "$T/q3.thin" || fail "threads 2 stdout"
cat "$T/s.thin" | "$Q" -q --profile quality - -o "$T/q4.thin" || fail "pipe quality"
"$P" -q "$FIX/stories260k" | "$Q" -q --profile quality - -o "$T/q5.thin" || fail "pack | quant"
for f in q2 q3 q4 q5; do cmp -s "$T/q1.thin" "$T/$f.thin" || fail "$f differs from q1"; done

# the one-pass stream reader: fp8-all needs no layer count; quality with --n-layers neither
"$Q" -q --profile fp8-all --threads 2 "$T/s.thin" -o "$T/f1.thin" || fail fp8-all
cat "$T/s.thin" | "$Q" -q --profile fp8-all --threads 1 - > "$T/f2.thin" || fail "fp8-all pipe"
cmp -s "$T/f1.thin" "$T/f2.thin" || fail "fp8-all pipe differs"
"$Q" -q --profile quality --n-layers 5 "$T/s.thin" -o "$T/n1.thin" || fail "n-layers file"
cat "$T/s.thin" | "$Q" -q --profile quality --n-layers 5 - -o "$T/n2.thin" || fail "n-layers pipe"
cmp -s "$T/n1.thin" "$T/n2.thin" || fail "n-layers pipe differs"

# compression and chunk size options; a compressed input gives the same tensors
"$Q" -q --profile bf16 --compress zstd:3 --chunk-size 64K "$T/s.thin" -o "$T/z.thin" || fail zstd
"$Q" -q --profile bf16 --compress zstd:3 --chunk-size 64K --threads 1 "$T/s.thin" -o "$T/z2.thin"
cmp -s "$T/z.thin" "$T/z2.thin" || fail "zstd output depends on threads"
"$Q" -q --select gate:0-1 --select up "$T/z.thin" -o "$T/zz.thin" || fail "compressed input"
grep -a -q '"gate":"0-1"' "$T/zz.thin" || fail "select recorded"

# explicit selection: JSON report to stdout when the .thin goes to a file
"$Q" -q --roles down --layers 2-3 "$T/s.thin" -o "$T/e.thin" --json - > "$T/e.json" || fail roles
grep -q '"fp8": 2,' "$T/e.json" || fail "explicit count"
grep -q '"copied": 46' "$T/e.json" || fail "explicit copied"
exit 0
