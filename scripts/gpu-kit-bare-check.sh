#!/usr/bin/env bash
# gpu-kit-bare-check.sh KIT_DIR: proves, without a GPU, that the GPU kit (scripts/gpu-kit.sh)
# needs nothing of this machine. In a bare Debian 12 root (the one ../shared/tools/fresh-machine
# uses) with only the kit folder copied in:
#   1. the CPU half: with python3 and numpy installed (what the GPU machine has), `run.sh
#      --cpu-half`: the kit's libraries resolve, every plan loads and trains on the CPU, and the
#      comparison accepts the results against the kit's dumps;
#   2. the runtime-only build: with cmake, g++ and ninja installed and the CUDA toolkit bound in
#      read-only at /usr/local/cuda (no Debian -dev package anywhere; python3 from step 1
#      unpacks the sources, as the kit's run.sh does: the root has no xz), the kit's
#      src/build-runtime.sh builds amp-run; it starts, and without a GPU says so.
# Needs root (chroot, mounts) and the network (apt-get in the root). Exit 0 when both pass.
set -uo pipefail
kit=$(cd "${1:?usage: scripts/gpu-kit-bare-check.sh KIT_DIR}" && pwd)
root_repo=$(cd "$(dirname "$0")/.." && pwd)
base=/tmp/fresh-machine-base.tar
if [[ ! -s $base ]]; then
  # fresh-machine builds the bare root once and keeps it in $base.
  (cd "$root_repo" && ../shared/tools/fresh-machine true) >/dev/null || { echo "no bare root"; exit 2; }
fi
root=$(mktemp -d /tmp/kit-bare.XXXXXX)
cleanup() {
  for m in usr/local/cuda dev/pts dev proc; do umount "$root/$m" 2>/dev/null; done
  rm -rf --one-file-system "$root"
}
trap cleanup EXIT
tar -C "$root" -xf "$base" || exit 2
cp -a "$kit" "$root/kit"
cp /etc/resolv.conf "$root/etc/"
mount -t proc proc "$root/proc" && mount --bind /dev "$root/dev" && mount --bind /dev/pts "$root/dev/pts" || exit 2
in_root() {
  chroot "$root" /usr/bin/env -i PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    HOME=/root DEBIAN_FRONTEND=noninteractive /bin/bash -c "$1" </dev/null
}
status=0

echo "== 1. the kit's CPU half in a bare root (python3 and numpy only)"
in_root "apt-get update -qq && apt-get install -y -qq --no-install-recommends python3 python3-numpy >/dev/null" ||
  { echo "apt-get failed"; exit 2; }
if in_root "bash /kit/run.sh --cpu-half"; then
  echo "kit-bare-check: the CPU half passed"
else
  echo "kit-bare-check: FAILED: the CPU half"
  status=1
fi

echo "== 2. the runtime-only build: cmake, g++, ninja and the CUDA toolkit, nothing else"
in_root "apt-get install -y -qq --no-install-recommends cmake g++ ninja-build >/dev/null" ||
  { echo "apt-get failed"; exit 2; }
mkdir -p "$root/usr/local/cuda"
mount --bind -o ro /usr/local/cuda "$root/usr/local/cuda" || exit 2
build='rm -rf /tmp/src && python3 -c "import tarfile; tarfile.open(\"/kit/src.tar.xz\").extractall(\"/tmp\")" && amprun=$(bash /tmp/src/build-runtime.sh /tmp/rb) &&
  echo "built $amprun" && ldd "$amprun" | grep -v "not found" >/dev/null && ! ldd "$amprun" | grep "not found" &&
  "$amprun" --version && out=$("$amprun" /kit/checks/mlp.fp32.adamw/step.plan --backend=cuda 2>&1);
  echo "$out"; echo "$out" | grep -q "no CUDA device available" &&
  out=$("$amprun" /kit/checks/mlp.fp32.adamw/step.plan --backend=cpu 2>&1); echo "$out";
  echo "$out" | grep -q "no CPU backend"'
if in_root "$build"; then
  echo "kit-bare-check: the runtime-only build passed"
else
  echo "kit-bare-check: FAILED: the runtime-only build"
  status=1
fi
exit $status
