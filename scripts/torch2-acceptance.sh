#!/usr/bin/env bash
# Runs scripts/torch2_acceptance.py (full-size PyTorch 2.x models through ampc) in a venv
# with a current torch and torchvision from PyPI (AMPC_TORCH_VENV, default build/torch-venv).
# Needs amp-opt and amp-run in build/bin (scripts/build.sh).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
venv=${AMPC_TORCH_VENV:-$root/build/torch-venv}
unset OPENBLAS_CORETYPE
if [ ! -x "$venv/bin/python" ]; then
  python3 -m venv "$venv"
fi
"$venv/bin/python" -c "import torch, torchvision, onnx, onnxscript" 2>/dev/null ||
  "$venv/bin/pip" install -q torch torchvision onnx onnxscript
exec "$venv/bin/python" "$root/scripts/torch2_acceptance.py"
