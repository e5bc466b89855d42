#!/usr/bin/env bash
# ampc against current PyTorch (eager and torch.compile) on the CPU: bench/peer.py in a venv
# with torch from PyPI (AMPC_TORCH_VENV, default build/torch-venv). Needs a Release build.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
venv=${AMPC_TORCH_VENV:-$root/build/torch-venv}
unset OPENBLAS_CORETYPE
[ -x "$venv/bin/python" ] || python3 -m venv "$venv"
"$venv/bin/python" -c "import torch, onnx" 2>/dev/null || "$venv/bin/pip" install -q torch onnx onnxscript
exec "$venv/bin/python" "$root/bench/peer.py" "$@"
