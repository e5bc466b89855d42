#!/usr/bin/env bash
# Issue #16's benchmark (bench/dist.py): data-parallel training step time, scaling efficiency and
# communication share at 1, 2 and 4 ranks (mpirun amp-run) on the bench MLP and GPT, side by side
# with PyTorch DDP (gloo) from PyPI (scripts/torch-venv.sh). Needs a Release build with MPI
# (scripts/build.sh) and Open MPI's mpirun; more ranks than cores oversubscribe.
# Usage: bench/dist.sh [--steps 20] [--warmup 5] [--ranks 1,2,4] [--models wide_mlp,gpt]
#        [--out bench/out/dist] [--skip-torch]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
python=$("$root/scripts/torch-venv.sh" torch onnx onnxscript)
unset OPENBLAS_CORETYPE
exec "$python" "$root/bench/dist.py" "$@"
