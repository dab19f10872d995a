#!/bin/sh
# thin-pack rejects each malformed SafeTensors file with its own message and leaves no output,
# from a path and from stdin.
set -u
P="$BIN/thin-pack"
M="$FIX/malformed"
fail() { echo "FAIL: $*"; exit 1; }
while IFS='|' read -r name msg; do
    [ -n "$name" ] || continue
    "$P" "$M/$name.safetensors" -o "$T/out.thin" 2>"$T/err"; rc=$?
    [ "$rc" -eq 1 ] || fail "$name: exit $rc, expected 1"
    grep -q "$name.safetensors" "$T/err" || fail "$name: message does not name the file"
    grep -q -- "$msg" "$T/err" || fail "$name: message '$(cat "$T/err")' lacks '$msg'"
    [ ! -e "$T/out.thin" ] || fail "$name: output file left"
    [ -z "$(ls -A "$T" | grep -v '^err$')" ] || fail "$name: files left: $(ls -A "$T")"
    # the same bytes on stdin (streamed; errors may come after the writer started)
    "$P" - -o "$T/out.thin" <"$M/$name.safetensors" 2>"$T/err"; rc=$?
    [ "$rc" -eq 1 ] || fail "$name on stdin: exit $rc, expected 1"
    [ ! -e "$T/out.thin" ] || fail "$name on stdin: output file left"
done <<'LIST'
overlap|overlaps tensor 'a'
gap|gap of 4 unused bytes before tensor 'b'
out-of-bounds|tensor 'b' (bytes 16..32) lies past the end
bad-dtype|tensor 'a': unknown dtype 'F7'
header-too-long|exceeds the 100000000-byte limit
bad-json|header is not valid JSON
non-utf8|not valid UTF-8
trailing-bytes|8 trailing bytes
size-mismatch|tensor 'a': size mismatch
truncated|truncated
shape-overflow|shape overflows
begin-after-end|has begin > end
duplicate-name|duplicate object key
not-object|does not start with '{'
metadata-not-string|__metadata__ member 'format' is not a string
LIST
exit 0
