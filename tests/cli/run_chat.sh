#!/bin/sh
# thin-run --chat: refused without a chat template; with a ChatML template the prompt is rendered
# (special-token text parsed) and generation runs, the template read from tokenizer_config.json,
# chat_template.jinja or chat_template.json.
set -eu
M=$FIX/stories260k
$BIN/thin-pack -q "$M/model.safetensors" -o "$T/plain.thin"
if $BIN/thin-run "$T/plain.thin" --device cpu --chat -p "hi" -n 5 2>"$T/err"; then
    echo "--chat without a template should fail"; exit 1
fi
grep -q "no supported chat template" "$T/err"

mkdir "$T/m"
cp "$M/config.json" "$M/model.safetensors" "$M/tokenizer.json" "$T/m/"
python3 - "$M/tokenizer_config.json" "$T/m/tokenizer_config.json" <<'PY'
import json, sys
c = json.load(open(sys.argv[1]))
c["chat_template"] = ("{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' + "
                      "message['content'] + '<|im_end|>' + '\n'}}{% endfor %}"
                      "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}")
json.dump(c, open(sys.argv[2], "w"))
PY
$BIN/thin-pack -q "$T/m" -o "$T/chat.thin"
$BIN/thin-run "$T/chat.thin" --device cpu --chat --system "Be brief." -p "Tell a story" -n 8 -t 0 --json >"$T/out.json"
python3 - "$T/out.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
assert d["prompt_tokens"] > 10, d["prompt_tokens"]   # the rendered template, not 2-3 tokens
assert d["generated_tokens"] == 8, d
PY
# the template in a file of its own (chat_template.jinja, or a processor's chat_template.json),
# tokenizer_config.json without one: the same prompt
for f in jinja json; do
    rm -rf "$T/m2" && mkdir "$T/m2"
    cp "$M/config.json" "$M/model.safetensors" "$M/tokenizer.json" "$M/tokenizer_config.json" "$T/m2/"
    python3 - "$T/m/tokenizer_config.json" "$T/m2" "$f" <<'PY'
import json, sys
tpl = json.load(open(sys.argv[1]))["chat_template"]
if sys.argv[3] == "jinja":
    open(sys.argv[2] + "/chat_template.jinja", "w").write(tpl)
else:
    json.dump({"chat_template": tpl}, open(sys.argv[2] + "/chat_template.json", "w"))
PY
    $BIN/thin-pack -q "$T/m2" -o "$T/chat2.thin"
    $BIN/thin-run "$T/chat2.thin" --device cpu --chat --system "Be brief." -p "Tell a story" -n 8 -t 0 --json >"$T/out2.json"
    grep '"prompt_tokens"' "$T/out.json" > "$T/n1"
    grep '"prompt_tokens"' "$T/out2.json" > "$T/n2"
    cmp "$T/n1" "$T/n2"
done
# a chat_template.json without its string: the tokenizer is refused, naming it
rm -rf "$T/m3" && mkdir "$T/m3"
cp "$M/config.json" "$M/model.safetensors" "$M/tokenizer.json" "$M/tokenizer_config.json" "$T/m3/"
echo '{"template": "x"}' > "$T/m3/chat_template.json"
$BIN/thin-pack -q "$T/m3" -o "$T/chat3.thin"
if $BIN/thin-run "$T/chat3.thin" --device cpu -p "hi" -n 1 2>"$T/err"; then
    echo "a chat_template.json without its string was taken"; exit 1
fi
grep -q 'chat_template.json holds no "chat_template" string' "$T/err"
# --chat needs a text prompt
set +e
$BIN/thin-run "$T/chat.thin" --device cpu --chat --ids "1 2" 2>/dev/null
[ $? -eq 2 ] || { echo "--chat with --ids should be a usage error"; exit 1; }
echo ok
