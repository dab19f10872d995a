#!/bin/sh
# Runs each fuzz target for FUZZ_SECONDS with its seed corpus (tests/fuzz/corpus/NAME, copied to a
# scratch folder so the repository is never written). Any crash, leak or sanitizer report fails;
# the inputs that caused it are kept in FUZZ_ARTIFACTS/NAME/ (default build-fuzz/artifacts) to be
# added to fixtures/regressions/NAME/ once fixed.
secs=${FUZZ_SECONDS:-60}
keep=${FUZZ_ARTIFACTS:-build-fuzz/artifacts}
fail=0; pass=0
for bin in "$@"; do
    name=$(basename "$bin")
    work=$(mktemp -d "${TMPDIR:-/tmp}/thin-fuzz.XXXXXX")
    mkdir -p "$work/corpus"
    [ -d "tests/fuzz/corpus/$name" ] && cp -r "tests/fuzz/corpus/$name/." "$work/corpus/"
    echo "fuzz $name for ${secs}s"
    if "$bin" -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 -artifact_prefix="$work/" \
        -print_final_stats=0 "$work/corpus" >"$work/log" 2>&1; then
        pass=$((pass + 1)); echo "PASS  $name ($(grep -c . "$work/log") log lines)"
    else
        fail=$((fail + 1)); echo "FAIL  $name"; tail -n 60 "$work/log"
        mkdir -p "$keep/$name"
        for a in "$work"/crash-* "$work"/leak-* "$work"/timeout-* "$work"/oom-*; do
            [ -f "$a" ] && cp "$a" "$keep/$name/" && echo "kept $keep/$name/$(basename "$a")"
        done
    fi
    rm -rf "$work"
done
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
