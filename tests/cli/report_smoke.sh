#!/bin/sh
# The report pipeline on stories260K, CPU only, without torch: every profile is packed, scored and
# timed by the thin-* tools and compared with the F32 profile; report.json and report.md must hold
# every profile's rows, and plot.py --markdown-only must rebuild the same report.md from the JSON.
set -eu
R=$(cd "$(dirname "$0")/../.." && pwd)
PY=${PYTHON:-python3}

"$PY" "$R/bench/report.py" --bin "$BIN" --fixtures "$FIX" --out "$T/out" --work "$T/work" \
    --device cpu --models stories260k --no-torch --prompt-len 8 --decode-tokens 16 \
    --prefill-len 64 --repeat 1 -q

test -s "$T/out/report.json"
test -s "$T/out/report.md"
for p in bf16 quality fp8-all; do
    grep -q "^| $p | thin-run f32 | 200 |" "$T/out/report.md"
done
for p in f32 bf16 quality fp8-all; do
    grep -q "^| thin-run | $p | cpu |" "$T/out/report.md"
done
grep -q "^| f32 | llama2.c run.c F32 (golden) | 200 |" "$T/out/report.md"

"$PY" - "$T/out/report.json" <<'EOF'
import json, sys
rep = json.load(open(sys.argv[1]))
assert rep["schema"] == "thin-report/1", rep["schema"]
(m,) = rep["models"]
assert m["key"] == "stories260k" and m["vocab"] == 512 and m["positions"] == 200
fid = {(f["profile"], f["reference"]): f for f in m["fidelity"]}
for p in ("bf16", "quality", "fp8-all"):
    f = fid[(p, "thin-run f32")]
    assert "error" not in f, f
    assert len(f["cos_per_position"]) == 200
    assert 0.9 < f["cos_min"] <= f["cos_mean"] <= 1.0 + 1e-9, f
    assert 0.0 <= f["top1_agreement"] <= 1.0, f
assert fid[("bf16", "thin-run f32")]["target"] == 0.9999
assert fid[("quality", "thin-run f32")]["target"] == 0.998
g = fid[("f32", "llama2.c run.c F32 (golden)")]
assert g["cos_min"] > 0.99999 and g["top1_agreement"] == 1.0, g
speed = {s["profile"]: s for s in m["speed"]}
for p in ("f32", "bf16", "quality", "fp8-all"):
    s = speed[p]
    assert s["runtime"] == "thin-run" and "error" not in s, s
    assert s["decode_tokens_per_s"] > 0 and s["prefill_tokens_per_s"] > 0, s
    assert s["file_bytes"] > 0, s
    assert s["start_to_first_s"] >= s["load_s"] > 0, s
EOF

mkdir "$T/md"
"$PY" "$R/bench/plot.py" --markdown-only -o "$T/md" "$T/out/report.json" >/dev/null
cmp "$T/out/report.md" "$T/md/report.md"

# A usage error exits 2.
st=0; "$PY" "$R/bench/report.py" --models nosuchmodel >/dev/null 2>&1 || st=$?
test "$st" -eq 2
