#!/usr/bin/env bash
# The GPU kit's runtime-only build (scripts/gpu-kit.sh puts this file in the kit's src/ as
# build-runtime.sh): builds amp-run with the CUDA backend from the kit's sources with nothing
# but cmake, a C++ compiler and nvcc; protobuf, onnx_proto and zlib come from src/deps.
# Usage: build-runtime.sh BUILD_DIR   (prints the path of the amp-run it built)
set -euo pipefail
src=$(cd "$(dirname "$0")" && pwd)
build=${1:?usage: build-runtime.sh BUILD_DIR}
deps=$src/deps
nvcc=${CUDACXX:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}
[[ -x $nvcc ]] || { echo "build-runtime: no nvcc (set CUDACXX)" >&2; exit 1; }
generator=()
command -v ninja >/dev/null && generator=(-G Ninja)
# protoc and the libraries it links come from deps/.
export LD_LIBRARY_PATH=$deps/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
cmake -S "$src" -B "$build" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release \
  -DAMPC_RUNTIME_ONLY=ON -DAMPC_ENABLE_CUDA=ON -DCMAKE_CUDA_COMPILER="$nvcc" \
  -DCMAKE_PREFIX_PATH="$deps" \
  -DProtobuf_PROTOC_EXECUTABLE="$deps/bin/protoc" -DProtobuf_INCLUDE_DIR="$deps/include" \
  -DProtobuf_LIBRARY="$deps/lib/libprotobuf.so" -DZLIB_ROOT="$deps" >&2
cmake --build "$build" --parallel "$(nproc)" >&2
echo "$build/bin/amp-run"
