#!/bin/sh
# Writes Mistral 3's multimodal checkpoint (Mistral Small 3.1's form) for the CLI and GPU tests:
# the Llama of fixtures/qwen2-tiny/make.py --no-bias under language_model.model., its config in
# text_config, one small vision tensor beside it; with that Llama's ids.txt and float64 logits.f32,
# which the checkpoint's text model must reproduce.
#
#   sh tests/make-mistral3.sh FIX DIR    (FIX: the fixtures folder; DIR: created)
set -e
FIX=$1
DIR=$2
rm -rf "$DIR.llama"
python3 -B "$FIX/qwen2-tiny/make.py" "$DIR.llama" --no-bias > /dev/null
mkdir -p "$DIR"
python3 "$(dirname "$0")/cli/multimodal.py" "$DIR.llama" "$DIR" language_model.model. \
    Mistral3ForConditionalGeneration mistral multi_modal_projector.linear_1.weight "" \
    '{"model_type": "mistral3", "vision_config": {"model_type": "pixtral"}}'
cp "$DIR.llama/ids.txt" "$DIR.llama/logits.f32" "$DIR/"
rm -rf "$DIR.llama"
