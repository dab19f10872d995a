#!/bin/sh
# thin-inspect --stats on stories260K: figures against Python's from the SafeTensors source and
# from the quality file's FP8 codes and scales; file, stream and compressed file alike; filters;
# JSON; a model holding NaN (exit 1, one line per tensor); usage errors.
set -u
P="$BIN/thin-pack"
Q="$BIN/thin-quant"
I="$BIN/thin-inspect"
S="$FIX/stories260k"
fail() { echo "FAIL: $*"; exit 1; }
"$P" -q "$S" -o "$T/s.thin" || fail "pack"
"$P" -q --compress zstd "$S" -o "$T/z.thin" || fail "pack zstd"
"$Q" -q --profile quality "$T/s.thin" -o "$T/q.thin" 2>/dev/null || fail "quant"
"$I" --stats "$T/s.thin" >"$T/s.txt" || fail "--stats"
# 47 untied tensors of 1,040,128 F32 bytes
grep -q '^47 tensors, 260032 values: 260032 finite, 0 NaN, 0 infinite' "$T/s.txt" ||
    fail "totals: $(tail -2 "$T/s.txt")"
grep -q '^lm_head.weight  *F32  *tied to model.embed_tokens.weight$' "$T/s.txt" || fail "tied row"
# a stream and a compressed file give the same figures (the first line names the input)
"$I" --stats - <"$T/s.thin" | tail -n +2 | cmp -s - "$(tail -n +2 "$T/s.txt" >"$T/s.body"; echo "$T/s.body")" ||
    fail "stream figures differ"
"$I" --stats "$T/z.thin" | tail -n +2 | cmp -s - "$T/s.body" || fail "compressed file figures differ"
"$I" --stats --threads 1 "$T/s.thin" | tail -n +2 | cmp -s - "$T/s.body" || fail "--threads 1 differs"
# filters
[ "$("$I" --stats --role gate "$T/s.thin" | grep -c '^model\.layers\.[0-4]\.mlp\.gate_proj')" -eq 5 ] ||
    fail "--role gate"
"$I" --stats --role gate "$T/s.thin" | grep -q '^model\.layers\.[0-4]\.mlp\.up_proj' && fail "--role gate shows up"
# against Python: the source's F32 values, the quality file's codes times their row scales
"$I" --stats --json "$T/s.thin" >"$T/s.json" || fail "--stats --json"
"$I" --stats --json "$T/q.thin" >"$T/q.json" || fail "quality --stats --json"
"$I" --extract model.layers.1.mlp.gate_proj.weight "$T/q.thin" >"$T/gate.q" || fail "extract codes"
"$I" --extract model.layers.1.mlp.gate_proj.weight.scale "$T/q.thin" >"$T/gate.s" || fail "extract scale"
python3 - "$S/model.safetensors" "$T/s.json" "$T/q.json" "$T/gate.q" "$T/gate.s" <<'PY' || fail "Python's figures"
import json, math, struct, sys
st, sj, qj, codes, scales = sys.argv[1:]
raw = open(st, "rb").read()
n = struct.unpack("<Q", raw[:8])[0]
head = json.loads(raw[8:8 + n])
def values(name):
    e = head[name]["data_offsets"]
    b = raw[8 + n + e[0]:8 + n + e[1]]
    return struct.unpack("<%df" % (len(b) // 4), b)
def e4m3(c):
    s, e, m = c >> 7, (c >> 3) & 15, c & 7
    v = (m / 8) * 2.0 ** -6 if e == 0 else (1 + m / 8) * 2.0 ** (e - 7)
    return -v if s else v
def figures(v):
    k = len(v); mean = sum(v) / k; ms = sum(x * x for x in v) / k
    return {"elements": k, "min": min(v), "max": max(v), "mean": mean, "rms": math.sqrt(ms),
            "std": math.sqrt(max(ms - mean * mean, 0)), "zero": sum(1 for x in v if x == 0)}
def check(listing, name, want, dequantized):
    got = next(t["stats"] for t in json.load(open(listing))["tensors"] if t["name"] == name)
    assert got["dequantized"] == dequantized, (name, got)
    assert got["nan"] == 0 and got["inf"] == 0 and got["finite"] == want["elements"], (name, got)
    for k, w in want.items():
        assert abs(got[k] - w) <= 1e-9 * max(1.0, abs(w)), (name, k, got[k], w)
for name in ("model.norm.weight", "model.layers.2.self_attn.k_proj.weight", "model.embed_tokens.weight"):
    check(sj, name, figures(values(name)), False)
c = open(codes, "rb").read()
sc = struct.unpack("<%df" % (len(open(scales, "rb").read()) // 4), open(scales, "rb").read())
cols = len(c) // len(sc)
check(qj, "model.layers.1.mlp.gate_proj.weight",
      figures([e4m3(b) * sc[i // cols] for i, b in enumerate(c)]), True)
PY
grep -q '"stats": null' "$T/s.json" || fail "tied entry's stats not null"
# NaN weights: the figures still print, one line per tensor on stderr, exit 1
mkdir "$T/nan" && cp "$S"/*.json "$S/tok512.model" "$T/nan/" 2>/dev/null
python3 - "$S/model.safetensors" "$T/nan/model.safetensors" <<'PY' || fail "NaN model"
import json, struct, sys
b = bytearray(open(sys.argv[1], "rb").read())
n = struct.unpack("<Q", b[:8])[0]
h = json.loads(b[8:8 + n])
for name, k in (("model.norm.weight", 3), ("model.layers.1.mlp.up_proj.weight", 1)):
    s = h[name]["data_offsets"][0]
    b[8 + n + s:8 + n + s + 4 * k] = struct.pack("<f", float("nan")) * k
s = h["model.layers.0.self_attn.q_proj.weight"]["data_offsets"][0]
b[8 + n + s:8 + n + s + 4] = struct.pack("<f", float("-inf"))
open(sys.argv[2], "wb").write(b)
PY
"$P" -q "$T/nan" -o "$T/nan.thin" || fail "pack NaN model"
"$I" --stats "$T/nan.thin" >"$T/out" 2>"$T/err"; [ $? -eq 1 ] || fail "NaN model: exit 1"
[ "$(wc -l <"$T/err")" -eq 3 ] || fail "NaN model: 3 lines on stderr: $(cat "$T/err")"
grep -q "nan.thin: tensor 'model.norm.weight' holds 3 NaN and 0 infinite values" "$T/err" || fail "norm line"
grep -q "tensor 'model.layers.0.self_attn.q_proj.weight' holds 0 NaN and 1 infinite values" "$T/err" ||
    fail "q line"
grep -q '^model.norm.weight  *F32  *64 .* 3  *0  *0$' "$T/out" || fail "norm row: $(grep model.norm "$T/out")"
"$I" --stats --json - <"$T/nan.thin" >"$T/out" 2>"$T/err"; [ $? -eq 1 ] || fail "NaN stream JSON: exit 1"
python3 -c 'import json,sys; json.load(open(sys.argv[1]))' "$T/out" || fail "NaN JSON not whole"
"$I" --stats --role norm "$T/nan.thin" >/dev/null 2>&1 && fail "--role final_norm"
"$I" --stats --role final_norm "$T/nan.thin" >/dev/null 2>"$T/err"; [ $? -eq 1 ] || fail "final_norm: exit 1"
[ "$(wc -l <"$T/err")" -eq 1 ] || fail "a filter limits the lines"
"$I" --stats --role k "$T/nan.thin" >/dev/null 2>&1 || fail "filtered out NaN: exit 0"
# usage
"$I" --stats --tape "$T/s.thin" >/dev/null 2>&1; [ $? -eq 2 ] || fail "--stats --tape: exit 2"
"$I" --stats --tape --json "$T/s.thin" >/dev/null || fail "--stats --tape --json"
"$I" --stats --extract model.norm.weight "$T/s.thin" >/dev/null 2>&1; [ $? -eq 2 ] ||
    fail "--stats --extract: exit 2"
exit 0
