#!/usr/bin/env bash
# The GPU kit's one command (scripts/gpu-kit.sh copies this file into the kit as run.sh;
# docs/cuda.md, "The GPU kit"). On a machine with a GPU, the CUDA toolkit and python3 with
# numpy (and torch for the timings):
#
#   bash KIT/run.sh [--rebuild]     checks, then timings; one table last
#   bash KIT/run.sh --cpu-half      what a machine without a GPU checks: the libraries
#                                   resolve, every plan loads and trains on the CPU, and the
#                                   comparison accepts those results against the kit's dumps
#
# 1. The binaries: bin/amp-run and bin/ampc-unittests from binaries.tar.xz, their libraries
#    in lib/ (RPATH); where they cannot run, or with --rebuild, amp-run is built from
#    src.tar.xz (the runtime-only configuration: cmake, a C++ compiler and nvcc).
# 2. Checks: every plan in checks/ trained STEPS steps with --backend=cuda, every gradient
#    and parameter against the CPU backend's (compare_dumps.py, docs/cuda.md's tolerances);
#    the same with --cuda-graph=false gives the same bits; the GPU unit tests (CudaDevice.*,
#    cuDNN's convolutions among them). cuDNN: the toolkit's, else PyTorch's wheel.
# 3. Timings (bench/, when the kit has it): each model's step with amp-run against PyTorch
#    AMP (autocast + GradScaler) on the same GPU, weights, batch and optimizer.
# Results under KIT/results (RESULTS to change); exit status 0 only when every check passed.
set -uo pipefail
kit=$(cd "$(dirname "$0")" && pwd)
mode=gpu rebuild=
for a in "$@"; do
  case $a in
    --cpu-half) mode=cpu ;;
    --rebuild) rebuild=1 ;;
    *) echo "run.sh: unknown argument $a" >&2; exit 2 ;;
  esac
done
res=${RESULTS:-$kit/results}
rm -rf "$res" && mkdir -p "$res"
py=${PYTHON:-python3}
failures=() rows=()
fail() { failures+=("$1"); echo "run.sh: FAILED: $1"; }
row() { rows+=("$1"); }
if ! $py -c "import numpy" 2>/dev/null; then
  echo "run.sh: $py cannot import numpy (set PYTHON to a python3 with numpy)"
  exit 1
fi

# cuBLAS: the toolkit's, else the one PyTorch's wheels bring.
if ! ldconfig -p 2>/dev/null | grep -q libcublas.so.13 && [[ ! -e /usr/local/cuda/lib64/libcublas.so.13 ]]; then
  wheel=$($py -c "import nvidia.cublas, os; print(os.path.dirname(nvidia.cublas.__file__))" 2>/dev/null)
  [[ -n $wheel ]] && export LD_LIBRARY_PATH=$wheel/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
fi

# cuDNN (convolutions; without it amp-run uses im2col + cuBLAS and says so): the toolkit's,
# else the nvidia-cudnn wheel PyTorch brings, named by AMPC_CUDNN_PATH (its folder on
# LD_LIBRARY_PATH too, where libcudnn.so.9 finds its sub-libraries).
if [[ -z ${AMPC_CUDNN_PATH:-} ]] && ! ldconfig -p 2>/dev/null | grep -q libcudnn.so.9 &&
    [[ ! -e /usr/local/cuda/lib64/libcudnn.so.9 ]]; then
  wheel=$($py -c "import nvidia.cudnn, os; print(os.path.dirname(nvidia.cudnn.__file__))" 2>/dev/null)
  if [[ -n $wheel && -e $wheel/lib/libcudnn.so.9 ]]; then
    export AMPC_CUDNN_PATH=$wheel/lib/libcudnn.so.9
    export LD_LIBRARY_PATH=$wheel/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  fi
fi
echo "cuDNN: ${AMPC_CUDNN_PATH:-libcudnn.so.9 through the loader or /usr/local/cuda/lib64}"

# Python unpacks (its lzma module): a bare machine may have no xz.
unpack() { $py -c "import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2])" "$1" "$2"; }

# 1. Binaries.
unpack "$kit/binaries.tar.xz" "$res" || { echo "run.sh: cannot unpack binaries.tar.xz"; exit 1; }
unpack "$kit/src.tar.xz" "$res" || { echo "run.sh: cannot unpack src.tar.xz"; exit 1; }
amprun=$res/bin/amp-run
# The binaries' RPATH finds lib/; a library with a RUNPATH of its own (Open MPI's
# libmpi) looks for its dependencies only there and in LD_LIBRARY_PATH.
export LD_LIBRARY_PATH=$res/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
missing=$(ldd "$res/bin/amp-run" "$res/bin/ampc-unittests" 2>&1 | grep "not found" | sort -u)
if [[ -n $missing ]]; then
  fail "libraries not found: $(echo "$missing" | awk '{print $1}' | tr '\n' ' ')"
fi
if ! "$amprun" --version >/dev/null 2>&1 || [[ -n $rebuild ]]; then
  [[ -n $rebuild ]] || fail "the kit's amp-run does not run here: $("$amprun" --version 2>&1 | tail -1)"
  echo "== building amp-run from the kit's sources (runtime-only configuration)"
  if amprun=$(bash "$res/src/build-runtime.sh" "$res/build" 2>"$res/build.log"); then
    row "runtime-only build | ok | $amprun"
  else
    fail "runtime-only build (see $res/build.log)"
    tail -20 "$res/build.log"
    amprun=$res/bin/amp-run
  fi
fi
"$amprun" --version || { fail "no amp-run runs here"; }
echo "libraries: $(ls "$res/lib" | tr '\n' ' ')"

# 2. Checks.
steps=$(cat "$kit/checks/steps")
backend=cuda
[[ $mode == cpu ]] && backend=cpu
checked=0 passed=0
for dir in "$kit"/checks/*.*.*/; do
  tag=$(basename "$dir")
  model=${tag%%.*} rest=${tag#*.} precision=${rest%%.*}
  feeds=(--feed "input=$kit/checks/feeds/$model/input.npy" --feed "target=$kit/checks/feeds/$model/target.npy")
  work=$res/checks/$tag
  mkdir -p "$work"
  checked=$((checked + 1))
  ok=1
  runs=("$backend:--cuda-graph=true")
  [[ $mode == gpu ]] && runs+=("nograph:--cuda-graph=false")
  for r in "${runs[@]}"; do
    name=${r%%:*} flag=${r#*:}
    if ! "$amprun" "$dir/step.plan" --backend=$backend $flag --threads 2 --steps "$steps" --quiet \
        "${feeds[@]}" --dump-grads "$work/$name/grads" --dump-params "$work/$name/params" \
        >"$work/$name.log" 2>&1; then
      fail "$tag: amp-run --backend=$backend $flag: $(tail -1 "$work/$name.log")"
      ok=0
    fi
  done
  [[ $ok == 1 ]] || continue
  for what in grads params; do
    if ! $py "$kit/compare_dumps.py" "$dir/cpu/$what" "$work/$backend/$what" --precision "$precision" \
        --plan "$dir/step.plan" --steps "$steps" --label "$tag $what" >"$work/compare-$what.txt" 2>&1; then
      fail "$tag $what: $(grep -v '^ok\|^skip' "$work/compare-$what.txt" | head -3 | tr '\n' ' ')"
      ok=0
    fi
    if [[ $mode == gpu ]] && ! diff -rq "$work/cuda/$what" "$work/nograph/$what" >/dev/null; then
      fail "$tag $what: CUDA graphs on and off give different bits"
      ok=0
    fi
  done
  [[ $ok == 1 ]] && passed=$((passed + 1))
done
row "checks ($backend against the kit's CPU dumps, $steps steps) | $passed/$checked passed |"

if [[ $mode == gpu ]]; then
  AMPC_SOURCE_DIR=$res/src "$res/bin/ampc-unittests" --gtest_filter='CudaDevice.*:CudaEmulation.*:CudaFused*:CublasLoader.*:CudnnLoader.*:CudnnConv.*:CublasLt*:CudaGemm*:Nccl*' \
    >"$res/unittests.txt" 2>&1
  status=$?
  row "GPU unit tests | $(grep -E '^\[  (PASSED|FAILED)  \]' "$res/unittests.txt" | tr '\n' ' ') |"
  [[ $status == 0 ]] || fail "GPU unit tests (see $res/unittests.txt)"
fi

# 3. Timings.
if [[ $mode == gpu && -d $kit/bench ]]; then
  echo "== timings: amp-run against PyTorch AMP"
  $py "$kit/bench/gpu_peer.py" --kit "$kit" --amp-run "$amprun" --out "$res/bench" \
    >"$res/bench.txt" 2>&1 || fail "timings (see $res/bench.txt)"
  cat "$res/bench.txt"
fi

echo
echo "| what | result | detail |"
echo "|---|---|---|"
for r in "${rows[@]}"; do echo "| $r |"; done
[[ -f $res/bench/table.md ]] && cat "$res/bench/table.md"
if [[ ${#failures[@]} -eq 0 ]]; then
  echo "run.sh: every check passed ($mode)"
  exit 0
fi
echo "run.sh: ${#failures[@]} failed ($mode): ${failures[*]}"
exit 1
