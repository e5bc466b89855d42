#!/usr/bin/env bash
# Runs scripts/torch2_acceptance.py (full-size PyTorch 2.x models through ampc) with a current
# torch and torchvision from PyPI (scripts/torch-venv.sh). Needs build/bin (scripts/build.sh).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
python=$("$root/scripts/torch-venv.sh" torch torchvision onnx onnxscript)
unset OPENBLAS_CORETYPE
exec "$python" "$root/scripts/torch2_acceptance.py"
