#!/usr/bin/env bash
# Issue #13's benchmark (bench/scale.py): compile time and memory on large graphs and GPT-2
# sized models, and GPT-2 small's training step against PyTorch from PyPI
# (scripts/torch-venv.sh). Needs a Release build (scripts/build.sh) and an idle machine.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
python=$("$root/scripts/torch-venv.sh" torch onnx onnxscript)
unset OPENBLAS_CORETYPE
exec "$python" "$root/bench/scale.py" "$@"
