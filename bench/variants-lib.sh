# shellcheck shell=sh disable=SC2034
# Sourced by bench/decode-variants.sh, bench/prefill-variants.sh and bench/bench-gpu.sh: the loop
# over models and environment variants, and the reading of thin-run's --json output.
#
# for_each_variant FN: for each model m of MODELS whose $WORK/$m.thin exists and each variant v
# of VARIANTS (';'-separated lists of VAR=value words, '-' for the defaults; a word RUN=path runs
# that thin-run binary instead of $BIN's) calls FN with m, v, vi (the variant's number, from 1),
# envw (its VAR=value words) and run (the thin-run binary) set. first is empty at a model's first
# variant and keeps what FN sets it to until the model's last.
for_each_variant() {
    for m in $MODELS; do
        [ -f "$WORK/$m.thin" ] || continue
        first=
        vi=0
        echo "$VARIANTS" | tr ';' '\n' | while read -r v; do
            [ -n "$v" ] || continue
            vi=$((vi + 1))
            envw=
            run=$BIN/thin-run
            for wd in $v; do
                case $wd in -) ;; RUN=*) run=${wd#RUN=} ;; *) envw="$envw $wd" ;; esac
            done
            "$1"
        done
    done
}

# same_ids A B: 'same' when thin-run's --json outputs A and B hold the same ids, else 'DIFFER'.
same_ids() {
    python3 -c "import json,sys;a,b=(json.load(open(f))['ids'] for f in sys.argv[1:]);print('same' if a==b else 'DIFFER')" \
        "$1" "$2" 2>/dev/null
}

# jget FILE KEY: one value of thin-run's --json output FILE (empty when it has none).
jget() {
    python3 -c "import json,sys;print(json.load(open(sys.argv[1]))[sys.argv[2]])" "$1" "$2" 2>/dev/null
}
