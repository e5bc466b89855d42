#!/usr/bin/env bash
# gpu-kit.sh OUT_DIR: everything a GPU machine needs to check and time ampc's CUDA backend in
# one `device` call (docs/cuda.md, "The GPU kit"), made here, where the compiler and every
# library are. The GPU machine has the CUDA toolkit, cmake, ninja and python3 with torch and
# numpy, and none of Debian's -dev packages; OUT_DIR holds:
#
#   run.sh            the one command there: `bash KIT/run.sh` (or `--cpu-half`, what a
#                     machine without a GPU can check: see kit-run.sh)
#   binaries.tar.xz   bin/amp-run, bin/ampc-unittests (built with CUDA; RPATH $ORIGIN/../lib)
#                     and lib/, every shared library they need that a bare machine lacks
#                     (no CUDA library: the CUDA runtime is linked statically, cuBLAS opened
#                     at run time)
#   src.tar.xz        the runtime-only build (AMPC_RUNTIME_ONLY: amp-run with the CUDA
#                     backend) with its few dependencies (protobuf, onnx_proto, zlib: headers,
#                     libraries, protoc) under deps/, for when the binaries do not run there;
#                     also test/fixtures, which the GPU unit tests read
#   checks/           per fixture (mlp, cnn, transformer, gpt, decoder), precision (fp32, fp16,
#                     bf16) and optimizer (sgd, adamw): the plan, and the CPU backend's
#                     gradients and parameters after STEPS steps; feeds/ with the inputs
#   bench/            bench models' plans at a batch that fills a GPU, with what PyTorch needs
#                     to run the same model (bench/gpu_peer.py), when bench/gpu-models.sh made them
#   compare_dumps.py  the comparison (tolerances: docs/cuda.md)
#
# Environment: STEPS (default 5). Needs a built tree (scripts/build.sh) with the CUDA backend.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
out=${1:?usage: scripts/gpu-kit.sh OUT_DIR}
steps=${STEPS:-5}
build=${AMPC_BUILD_DIR:-$root/build}
bin=$build/bin

"$root/scripts/build.sh" >/dev/null
if "$bin/amp-run" --backend=cuda /dev/null 2>&1 | grep -q "built without the CUDA backend"; then
  echo "gpu-kit: $build has no CUDA backend (no nvcc found at configure time)" >&2
  exit 1
fi
rm -rf "$out" && mkdir -p "$out"
out=$(cd "$out" && pwd)
stage=$(mktemp -d /tmp/gpu-kit.XXXXXX)
trap 'rm -rf "$stage"' EXIT

# Libraries a bare machine lacks: everything ldd resolves except the C and C++ runtimes,
# which every Linux with a compiler has (and newer ones run older binaries).
system_lib() { [[ $1 =~ ^(linux-vdso|ld-linux|libc\.|libm\.|libdl\.|libpthread\.|librt\.|libstdc\+\+|libgcc_s) ]]; }
mkdir -p "$stage/binaries/bin" "$stage/binaries/lib"
cp "$bin/amp-run" "$bin/ampc-unittests" "$stage/binaries/bin/"
ldd "$bin/amp-run" "$bin/ampc-unittests" | awk '/=>/ {print $1, $3}' | sort -u |
  while read -r name path; do
    system_lib "$name" && continue
    [[ -f $path ]] || { echo "gpu-kit: $name not found" >&2; exit 1; }
    cp -L "$path" "$stage/binaries/lib/$name"
  done
tar -C "$stage/binaries" -cJf "$out/binaries.tar.xz" bin lib

# The runtime-only sources and their dependencies.
src=$stage/src
mkdir -p "$src/tools" "$src/test" "$src/deps/include/onnx" "$src/deps/lib" "$src/deps/bin"
cp "$root/CMakeLists.txt" "$src/"
cp -r "$root/runtime" "$src/"
cp -r "$root/tools/amp-run" "$src/tools/"
cp -r "$root/test/fixtures" "$src/test/"
cp -r /usr/include/google "$src/deps/include/"
cp /usr/include/onnx/*.h "$src/deps/include/onnx/"
cp /usr/include/zlib.h /usr/include/zconf.h "$src/deps/include/"
for lib in libprotobuf.so.32 libprotoc.so.32 libonnx_proto.so.1 libz.so.1; do
  # awk reads all of ldconfig's output: exiting early would kill ldconfig with
  # SIGPIPE, which pipefail turns into a failure.
  path=$(ldconfig -p | awk -v l="$lib" '$1 == l && /x86-64/ && !p {p = $NF} END {print p}')
  [[ -n $path ]] || { echo "gpu-kit: $lib not found" >&2; exit 1; }
  cp -L "$path" "$src/deps/lib/$lib"
  ln -s "$lib" "$src/deps/lib/${lib%%.so*}.so"
done
cp /usr/bin/protoc "$src/deps/bin/"
cp "$root/scripts/kit-build-runtime.sh" "$src/build-runtime.sh"
tar -C "$stage" -cJf "$out/src.tar.xz" src

# Plans and the CPU's results.
mkdir -p "$out/checks/feeds"
for model in mlp cnn transformer gpt decoder; do
  mkdir -p "$out/checks/feeds/$model"
  cp "$root/test/fixtures/$model/inputs/"*.npy "$out/checks/feeds/$model/"
  for precision in fp32 fp16 bf16; do
    for optimizer in sgd adamw; do
      dir=$out/checks/$model.$precision.$optimizer
      mkdir -p "$dir"
      extra=()
      # fp16: a loss scale low enough that no compared step overflows.
      [[ $precision == fp16 ]] && extra=(--loss-scale-init=1024)
      "$bin/amp-opt" "$root/test/fixtures/$model/model.onnx" --train --precision=$precision \
        --optimizer=$optimizer "${extra[@]}" -o "$dir/step.plan"
      "$bin/amp-run" "$dir/step.plan" --backend=cpu --threads 2 --steps "$steps" --quiet \
        --feed "input=$out/checks/feeds/$model/input.npy" \
        --feed "target=$out/checks/feeds/$model/target.npy" \
        --dump-grads "$dir/cpu/grads" --dump-params "$dir/cpu/params"
    done
  done
done
echo "$steps" >"$out/checks/steps"

# Bench models, when bench/gpu-models.sh has made them (they need a current PyTorch).
if [[ -f $root/bench/out/gpu/models.json ]]; then
  cp -r "$root/bench/out/gpu" "$out/bench"
  cp "$root/bench/gpu_peer.py" "$root/bench/peer_models.py" "$root/bench/make_models.py" \
    "$root/test/fixtures/torch2_models.py" "$out/bench/"
fi

cp "$root/scripts/compare_dumps.py" "$out/"
cp "$root/scripts/kit-run.sh" "$out/run.sh"
chmod +x "$out/run.sh"
echo "gpu-kit: $out ($(du -sh "$out" | cut -f1)); on the GPU machine: bash $(basename "$out")/run.sh"
