#!/bin/sh
# thin-run --chat: refused without a chat template; with a ChatML template the prompt is rendered
# (special-token text parsed) and generation runs.
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
# --chat needs a text prompt
set +e
$BIN/thin-run "$T/chat.thin" --device cpu --chat --ids "1 2" 2>/dev/null
[ $? -eq 2 ] || { echo "--chat with --ids should be a usage error"; exit 1; }
echo ok
