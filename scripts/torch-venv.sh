#!/usr/bin/env bash
# Prints the python of a venv with a current PyTorch from PyPI and the given packages
# (AMPC_TORCH_VENV, default build/torch-venv), making it and installing what is missing
# first. For the scripts that need torch (fixtures, benchmarks), never the tests.
# Usage: python=$(scripts/torch-venv.sh torch onnx onnxscript [torchvision])
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
venv=${AMPC_TORCH_VENV:-$root/build/torch-venv}
unset OPENBLAS_CORETYPE
[ -x "$venv/bin/python" ] || python3 -m venv "$venv" >&2
modules=$(printf '%s\n' "$@" | sed 's/-/_/g' | paste -sd, -)
"$venv/bin/python" -c "import $modules" 2>/dev/null || "$venv/bin/pip" install -q "$@" >&2
echo "$venv/bin/python"
