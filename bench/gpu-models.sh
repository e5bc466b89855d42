#!/usr/bin/env bash
# Makes the GPU kit's bench plans (bench/gpu_models.py) with torch from PyPI
# (scripts/torch-venv.sh); scripts/gpu-kit.sh then carries bench/out/gpu.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
python=$("$root/scripts/torch-venv.sh" torch onnx onnxscript)
unset OPENBLAS_CORETYPE
exec "$python" "$root/bench/gpu_models.py" "$@"
