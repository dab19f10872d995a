#!/bin/sh
# bench-quant.sh — thin-quant throughput on a random BF16 model next to `cat` of the same file.
#
#   bench/bench-quant.sh [SIZE_GIB] [DIR]     (defaults: 2 GiB in ${TMPDIR:-/tmp})
#
# Builds a small generator against build/lib/libthin.a, writes a Llama-shaped random BF16 .thin
# of about SIZE_GIB (hidden 2048, FFN 8192; layers added until the size is reached), then times:
# cat (page cache warm), thin-quant fp8-all file -> file, quality file -> file, fp8-all through a
# pipe, and the bf16 profile (a plain copy of BF16 data). Prints a Markdown table of GB/s
# (input bytes / wall seconds); the /dev/null row leaves out the output disk writes and fsync.
# Everything it writes is removed at the end.
set -eu
SIZE=${1:-2}
DIR=${2:-${TMPDIR:-/tmp}}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BIN="$ROOT/build/bin"
[ -x "$BIN/thin-quant" ] && [ -f "$ROOT/build/lib/libthin.a" ] || { echo "run make first" >&2; exit 1; }
W=$(mktemp -d "$DIR/bench-quant.XXXXXX")
trap 'rm -rf "$W"' EXIT INT TERM

cat > "$W/gen.c" <<'CEOF'
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "thin.h"
enum { HID = 2048, FFN = 8192 };
static uint64_t s = 88172645463325252ull;
static void fill(uint16_t *b, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        s ^= s << 13; s ^= s >> 7; s ^= s << 17;
        float f = ((float)(s >> 40) / 16777216.0f - 0.5f) * 0.1f;
        b[i] = thin_f32_to_bf16(f);
    }
}
static int add(thin_writer *w, const char *name, thin_role role, int layer, uint64_t r, uint64_t c,
               uint16_t *buf)
{
    thin_tensor_desc d = {.name = name, .role = role, .layer = layer, .dtype = THIN_DTYPE_BF16,
                          .rank = 2, .shape = {r, c}};
    fill(buf, r * c);
    return thin_writer_add_tensor(w, &d, buf) != THIN_OK;
}
int main(int argc, char **argv)
{
    double gib = atof(argv[2]);
    uint64_t per_layer = (uint64_t)3 * HID * FFN * 2 + (uint64_t)4 * HID * HID * 2;
    int layers = (int)(gib * 1073741824.0 / (double)per_layer + 0.5);
    if (layers < 1) layers = 1;
    uint16_t *buf = malloc((size_t)HID * FFN * 2);
    thin_writer *w = thin_writer_new();
    thin_writer_options o = {0};
    if (!buf || !w || thin_writer_open(w, argv[1], &o) != THIN_OK) return 1;
    char m[128];
    snprintf(m, sizeof m, "{\"family\":\"llama\",\"hparams\":{\"n_layers\":%d}}", layers);
    thin_writer_set_section(w, "model", m);
    static const struct { const char *n; thin_role r; int big; int out_rows; } t[] = {
        {"q", THIN_ROLE_Q, 0, 1}, {"k", THIN_ROLE_K, 0, 1}, {"v", THIN_ROLE_V, 0, 1},
        {"o", THIN_ROLE_O, 0, 1}, {"gate", THIN_ROLE_GATE, 1, 1}, {"up", THIN_ROLE_UP, 1, 1},
        {"down", THIN_ROLE_DOWN, 1, 0}};
    for (int l = 0; l < layers; l++)
        for (int k = 0; k < 7; k++) {
            char name[64];
            snprintf(name, sizeof name, "layers.%d.%s", l, t[k].n);
            uint64_t r = t[k].big ? (t[k].out_rows ? FFN : HID) : HID;
            uint64_t c = t[k].big ? (t[k].out_rows ? HID : FFN) : HID;
            if (add(w, name, t[k].r, l, r, c, buf)) return 1;
        }
    if (thin_writer_finish(w, NULL) != THIN_OK) { fprintf(stderr, "%s\n", thin_writer_error(w)); return 1; }
    thin_writer_free(w);
    printf("%d\n", layers);
    return 0;
}
CEOF
cc -O2 -march=x86-64-v3 -I"$ROOT/libthin" -o "$W/gen" "$W/gen.c" "$ROOT/build/lib/libthin.a" \
   -ljansson -lzstd -lcrypto -lm -pthread
LAYERS=$("$W/gen" "$W/model.thin" "$SIZE")
BYTES=$(stat -c %s "$W/model.thin")
now() { date +%s.%N; }
# time_it LABEL CMD...: runs CMD (sh -c), prints a table row
time_it() {
    label=$1; shift
    t0=$(now); sh -c "$*"; t1=$(now)
    awk -v l="$label" -v b="$BYTES" -v a="$t0" -v z="$t1" \
        'BEGIN { s = z - a; printf "| %-36s | %8.2f | %7.2f |\n", l, s, b / s / 1e9 }'
}
cat "$W/model.thin" > /dev/null   # warm the page cache
echo "model: $LAYERS layers, $BYTES bytes (BF16), $(nproc) cores"
echo
echo "| command                              |        s |    GB/s |"
echo "| ------------------------------------ | -------: | ------: |"
time_it "cat > /dev/null" "cat '$W/model.thin' > /dev/null"
time_it "cat > file" "cat '$W/model.thin' > '$W/copy.thin'"
rm -f "$W/copy.thin"
time_it "thin-quant --profile fp8-all (file)" "'$BIN/thin-quant' -q --profile fp8-all '$W/model.thin' -o '$W/q.thin'"
rm -f "$W/q.thin"
time_it "thin-quant --profile fp8-all > /dev/null" "'$BIN/thin-quant' -q --profile fp8-all '$W/model.thin' > /dev/null"
time_it "thin-quant --profile fp8-all --threads 1" "'$BIN/thin-quant' -q --profile fp8-all --threads 1 '$W/model.thin' -o '$W/q.thin'"
rm -f "$W/q.thin"
time_it "thin-quant --profile quality (file)" "'$BIN/thin-quant' -q --profile quality '$W/model.thin' -o '$W/q.thin'"
rm -f "$W/q.thin"
time_it "cat | thin-quant --profile fp8-all -" "cat '$W/model.thin' | '$BIN/thin-quant' -q --profile fp8-all - -o '$W/q.thin'"
rm -f "$W/q.thin"
time_it "thin-quant --profile bf16 (copy)" "'$BIN/thin-quant' -q --profile bf16 '$W/model.thin' -o '$W/q.thin'"
