#!/usr/bin/env bash
# The test command: sets up, builds and runs every test (unit tests, ONNX node
# tests, the lit suite). Ends with one line "N passed, N failed, N skipped";
# exits non-zero when anything failed.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
"$root/scripts/build.sh"
exec /usr/bin/python3 "$root/scripts/run_tests.py" "${AMPC_BUILD_DIR:-$root/build}"
