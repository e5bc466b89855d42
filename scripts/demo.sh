#!/usr/bin/env bash
# The main job on the bundled example: set up, build, compile the fixture MLP
# into a bf16 training plan and train it with amp-run on its data set.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
"$root/scripts/build.sh"
bin="${AMPC_BUILD_DIR:-$root/build}/bin"
out="${AMPC_BUILD_DIR:-$root/build}/demo"
mkdir -p "$out"
model="$root/test/fixtures/mlp/model.onnx"

echo "== amp-opt: compile the training step (bf16 autocast, AdamW)"
"$bin/amp-opt" "$model" --train --precision=bf16 --optimizer=adamw --lr=0.005 -o "$out/mlp.plan"
"$bin/amp-opt" "$model" --train --precision=bf16 --optimizer=adamw --lr=0.005 --emit=report |
  grep -E "^autocast:|^loss-scale:|^optimizer:"
"$bin/amp-opt" "$model" --train --precision=bf16 --optimizer=adamw --lr=0.005 --emit=plan-text |
  grep -E "^program|^arena"

echo "== amp-run: train on test/fixtures/mlp/train.npz"
"$bin/amp-run" "$out/mlp.plan" --data "$root/test/fixtures/mlp/train.npz" --shuffle --seed 1 \
  --steps 1500 --metrics "$out/metrics.jsonl" --checkpoint "$out/checkpoint" \
  --checkpoint-every 500 --export-onnx "$out/mlp-trained.onnx"
echo "== wrote $out/mlp-trained.onnx, metrics in $out/metrics.jsonl"
