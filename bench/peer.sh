#!/usr/bin/env bash
# ampc against current PyTorch (eager and torch.compile) on the CPU: bench/peer.py with torch
# from PyPI (scripts/torch-venv.sh). Needs a Release build (scripts/build.sh).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
python=$("$root/scripts/torch-venv.sh" torch onnx onnxscript)
unset OPENBLAS_CORETYPE
exec "$python" "$root/bench/peer.py" "$@"
