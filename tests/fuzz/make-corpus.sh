#!/bin/sh
# Regenerates the seed corpora in tests/fuzz/corpus/<target>/ from the fixtures and a tiny
# synthetic model (tiny_model.py), with the tools of a normal build (B, default build).
# Run from the repository root after `make`. Seeds stay small (about 100 KB per target).
set -eu
B=${B:-build}
C=tests/fuzz/corpus
W=$(mktemp -d "${TMPDIR:-/tmp}/thin-corpus.XXXXXX")
trap 'rm -rf "$W"' EXIT
S=fixtures/stories260k
for t in thin_open thin_stream inspect_stats safetensors arch tok_hf tok_gguf quant_input plan; do
    rm -rf "$C/fuzz_$t"; mkdir -p "$C/fuzz_$t"
done

# .thin seeds: a one-layer model with a tape (vocab 64, no tokenizer), F32 and zstd, and FP8.
python3 tests/fuzz/tiny_model.py "$W/m" --hidden 8 --vocab 64 --inter 16 --no-tokenizer
"$B/bin/thin-pack" -q --chunk-size 4K "$W/m" -o "$W/f32.thin"
"$B/bin/thin-pack" -q --chunk-size 4K --compress zstd "$W/m" -o "$W/zstd.thin"
"$B/bin/thin-quant" -q -p fp8-all "$W/f32.thin" -o "$W/fp8.thin"
cp "$W/zstd.thin" "$C/fuzz_thin_open/tiny-zstd.thin"
cp "$W/fp8.thin" "$C/fuzz_thin_open/tiny-fp8.thin"
cp "$W/f32.thin" "$C/fuzz_thin_stream/tiny-f32.thin"
cp "$W/zstd.thin" "$C/fuzz_thin_stream/tiny-zstd.thin"
cp "$W/f32.thin" "$C/fuzz_quant_input/tiny-f32.thin"
for v in f32 zstd fp8; do cp "$W/$v.thin" "$C/fuzz_inspect_stats/tiny-$v.thin"; done

cp "$W/fp8.thin" "$C/fuzz_plan/tiny-fp8.thin"
# the family fixtures' tapes: bias ops (Qwen2), row ranges of fused weights (Phi-3), Gemma 3's
# offsets, scales, windows and GELU, FP8
for f in qwen2 phi3 gemma3; do
    "$B/bin/thin-pack" -q "fixtures/$f-tiny" | "$B/bin/thin-quant" -q -p fp8-all - -o "$C/fuzz_plan/$f-fp8.thin"
done
# a mixture's moe op: per-expert names with a shared expert, and rows of stacked experts in FP8
python3 -B fixtures/qwen2-tiny/make.py "$W/stacked" --qwen3-moe --stacked >/dev/null
"$B/bin/thin-pack" -q fixtures/qwen2-moe-tiny | "$B/bin/thin-quant" -q -p fp8-all - -o "$C/fuzz_plan/qwen2-moe-fp8.thin"
"$B/bin/thin-pack" -q "$W/stacked" | "$B/bin/thin-quant" -q -p fp8-all - -o "$C/fuzz_plan/qwen3-moe-stacked-fp8.thin"

# SafeTensors: the tiny model and the small malformed fixtures.
cp "$W/m/model.safetensors" "$C/fuzz_safetensors/tiny.safetensors"
for f in fixtures/malformed/*.safetensors; do
    [ "$(wc -c <"$f")" -le 4096 ] && cp "$f" "$C/fuzz_safetensors/"
done

# config.json, NUL, then the tensors as a SafeTensors header (name -> shape).
header() { python3 -c 'import json,struct,sys
d=open(sys.argv[1],"rb").read(); n=struct.unpack("<Q",d[:8])[0]
sys.stdout.write(json.dumps(json.loads(d[8:8+n]),separators=(",",":")))' "$1"; }
{ cat "$S/config.json"; printf '\0'; header "$S/model.safetensors"; } >"$C/fuzz_arch/stories"
{ cat "$W/m/config.json"; printf '\0'; header "$W/m/model.safetensors"; } >"$C/fuzz_arch/tiny"
sed 's/LlamaForCausalLM/Qwen3ForCausalLM/' "$W/m/config.json" >"$W/qwen3.json"
{ cat "$W/qwen3.json"; printf '\0'; header "$W/m/model.safetensors"; } >"$C/fuzz_arch/qwen3"
sed 's/LlamaForCausalLM/SmolLM3ForCausalLM/' "$W/m/config.json" |
    sed 's/"tie_word_embeddings"/"no_rope_layers": [1], "tie_word_embeddings"/' >"$W/smol.json"
{ cat "$W/smol.json"; printf '\0'; header "$W/m/model.safetensors"; } >"$C/fuzz_arch/smollm3"
{ cat fixtures/qwen2-tiny/config.json; printf '\0'; header fixtures/qwen2-tiny/model.safetensors; } >"$C/fuzz_arch/qwen2"
{ cat fixtures/phi3-tiny/config.json; printf '\0'; header fixtures/phi3-tiny/model.safetensors; } >"$C/fuzz_arch/phi3"
{ cat fixtures/qwen3-tiny/config.json; printf '\0'; header fixtures/qwen3-tiny/model.safetensors; } >"$C/fuzz_arch/qwen3-norms"
{ cat fixtures/gemma3-tiny/config.json; printf '\0'; header fixtures/gemma3-tiny/model.safetensors; } >"$C/fuzz_arch/gemma3"
{ cat fixtures/gemma2-tiny/config.json; printf '\0'; header fixtures/gemma2-tiny/model.safetensors; } >"$C/fuzz_arch/gemma2"
{ cat fixtures/olmo2-tiny/config.json; printf '\0'; header fixtures/olmo2-tiny/model.safetensors; } >"$C/fuzz_arch/olmo2"
# mixtures of experts: one tensor an expert (Qwen3-MoE with a dense layer, Mixtral's names,
# Qwen2-MoE's shared expert) and stacked as transformers 5 saves them
for f in qwen3-moe mixtral qwen2-moe glm4-moe granitemoe; do
    { cat "fixtures/$f-tiny/config.json"; printf '\0'; header "fixtures/$f-tiny/model.safetensors"; } >"$C/fuzz_arch/$f"
done
{ cat "$W/stacked/config.json"; printf '\0'; header "$W/stacked/model.safetensors"; } >"$C/fuzz_arch/qwen3-moe-stacked"

# tokenizer.json, NUL, tokenizer_config.json; and a tiny byte-level BPE tokenizer.
{ cat "$S/tokenizer.json"; printf '\0'; cat "$S/tokenizer_config.json"; } >"$C/fuzz_tok_hf/stories"
python3 tests/fuzz/tiny_tokenizers.py hf-bytelevel >"$C/fuzz_tok_hf/bytelevel"
# Unicode normalization forms (NFC then NFKD), byte fallback, an added token that needs them.
printf '%s' '{"normalizer": {"type": "Sequence", "normalizers": [{"type": "NFC"}, {"type": "NFKD"}]}, "model": {"type": "BPE", "byte_fallback": true, "vocab": {"<unk>": 0, "e": 1, "\u0301": 2, "\u00e9": 3, "f": 4, "i": 5, "fi": 6, "<0xFF>": 7, "\ufb01": 8, "<0x80>": 9}, "merges": ["f i"]}, "added_tokens": [{"id": 10, "content": "e\u0301\u00e9\ufb01", "special": false}]}' >"$C/fuzz_tok_hf/normalize"
# Gemma's normalizer and String Split pre-tokenizer, and a Regex one merged with the next piece.
printf '%s' '{"normalizer": {"type": "Replace", "pattern": {"String": " "}, "content": "\u2581"}, "pre_tokenizer": {"type": "Sequence", "pretokenizers": [{"type": "Split", "pattern": {"String": " "}, "behavior": "MergedWithPrevious", "invert": false}, {"type": "Split", "pattern": {"Regex": "[.,]"}, "behavior": "MergedWithNext", "invert": false}]}, "decoder": {"type": "Sequence", "decoders": [{"type": "Replace", "pattern": {"String": "\u2581"}, "content": " "}, {"type": "ByteFallback"}, {"type": "Fuse"}]}, "model": {"type": "BPE", "byte_fallback": true, "vocab": {"<unk>": 0, "\u2581": 1, "a": 2, "\u2581a": 3, ".": 4, "<0xFF>": 5}, "merges": ["\u2581 a"]}}' >"$C/fuzz_tok_hf/gemma-split"
# the Metaspace pre-tokenizer and decoder (prepend to the first segment, split at "▁").
printf '%s' '{"pre_tokenizer": {"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "first", "split": true}, "decoder": {"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "first"}, "model": {"type": "BPE", "byte_fallback": true, "vocab": {"<unk>": 0, "\u2581": 1, "a": 2, "\u2581a": 3, "b": 4, "<0xFF>": 5}, "merges": ["\u2581 a"]}, "added_tokens": [{"id": 6, "content": "<s>", "special": true}]}' >"$C/fuzz_tok_hf/metaspace"

# GGUF vocabularies: SentencePiece (the stories260K vocabulary) and GPT-2 style byte-level BPE.
python3 tests/fuzz/tiny_tokenizers.py gguf-llama "$S/tokenizer.json" >"$C/fuzz_tok_gguf/llama.gguf"
python3 tests/fuzz/tiny_tokenizers.py gguf-gpt2 >"$C/fuzz_tok_gguf/gpt2.gguf"
du -sh "$C"/*
