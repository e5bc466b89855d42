#!/usr/bin/env bash
# Sets up the dependencies, then configures and builds ampc into build/.
# AMPC_BUILD_DIR and AMPC_BUILD_TYPE override the defaults (build, Release).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
"$root/scripts/setup.sh"
build=${AMPC_BUILD_DIR:-$root/build}
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE="${AMPC_BUILD_TYPE:-Release}" >/dev/null
ninja -C "$build" "$@"
