#!/usr/bin/env bash
# Installs, with apt-get, whatever ampc needs to build and test that is missing.
# Does nothing when everything is there. Debian 12.
set -euo pipefail

packages=(
  cmake ninja-build g++ make pkg-config
  libonnx-dev libprotobuf-dev protobuf-compiler
  llvm-14-dev llvm-14-tools
  libgtest-dev libbenchmark-dev libdnnl-dev libsleef-dev
  # oneDNN's CMake config (dnnl-config.cmake) calls find_package(OpenCL): Debian builds it
  # with the OpenCL GPU runtime, and --no-install-recommends would skip this.
  ocl-icd-opencl-dev
  libonnx-testdata
  python3 python3-numpy python3-onnx zlib1g-dev libtinfo-dev
  libmimalloc-dev
  # Data-parallel training across processes (runtime/dist, docs/distributed.md).
  libopenmpi-dev openmpi-bin
)

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "setup: all dependencies are installed"
  exit 0
fi

echo "setup: installing ${missing[*]}"
SUDO=""
if [ "$(id -u)" -ne 0 ]; then
  SUDO="sudo"
fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
echo "setup: done"
