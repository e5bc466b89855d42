#!/usr/bin/env bash
# gpu-check.sh: everything that needs an NVIDIA GPU, on a machine that has one.
#
#   1. builds ampc with the CUDA backend (-DAMPC_ENABLE_CUDA=ON) into BUILD_DIR;
#   2. runs the whole test suite there: the GPU tests (CudaDevice.* unit tests,
#      test/runtime/cuda-device.test) run instead of being skipped;
#   3. end to end, for every fixture (mlp, cnn, transformer) and precision
#      (fp32, fp16, bf16), with AdamW and with SGD: compiles the training step,
#      trains STEPS steps with --backend=cuda and with --backend=cpu, dumps
#      gradients and parameters, and compares every dumped array
#      (scripts/compare_dumps.py; tolerances in docs/cuda.md);
#   4. runs the benchmarks: CUDA step times (with and without CUDA graphs) and
#      bench/run.py (the CPU against PyTorch) when bench/ exists.
#
# Usage: scripts/gpu-check.sh [BUILD_DIR]   (default: build-gpu)
# Environment: STEPS (default 5), JOBS (default: all cores), SKIP_BUILD=1,
# SKIP_TESTS=1, SKIP_BENCH=1. Results go to BUILD_DIR/gpu-check/; the last line
# says whether every check passed; the exit status is non-zero otherwise.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=$(realpath -m "${1:-$root/build-gpu}")
steps=${STEPS:-5}
jobs=${JOBS:-$(nproc)}
out=$build/gpu-check
py=/usr/bin/python3
failures=()

fail() { failures+=("$1"); echo "gpu-check: FAILED: $1"; }

if ! command -v nvidia-smi >/dev/null || ! nvidia-smi -L 2>/dev/null | grep -q GPU; then
  echo "gpu-check: no NVIDIA GPU on this machine (nvidia-smi lists none); nothing to check"
  exit 1
fi
nvidia-smi -L

# 1. Build.
if [[ -z "${SKIP_BUILD:-}" ]]; then
  cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DAMPC_ENABLE_CUDA=ON \
    >/dev/null || { echo "gpu-check: cmake failed"; exit 1; }
  ninja -C "$build" -j "$jobs" || { echo "gpu-check: the build failed"; exit 1; }
fi
bin=$build/bin
mkdir -p "$out"

# 2. The test suite, GPU tests included.
if [[ -z "${SKIP_TESTS:-}" ]]; then
  $py "$root/scripts/run_tests.py" "$build" | tee "$out/tests.txt" || fail "test suite"
fi

# 3. CUDA against the CPU, end to end.
echo "== CUDA against the CPU: $steps steps, every dumped gradient and parameter"
for model in mlp cnn transformer; do
  inputs=$root/test/fixtures/$model/inputs
  for precision in fp32 fp16 bf16; do
    for optimizer in adamw sgd; do
      tag=$model.$precision.$optimizer
      dir=$out/$tag
      rm -rf "$dir" && mkdir -p "$dir"
      extra=()
      # fp16: start the loss scale low enough that no compared step overflows.
      [[ $precision == fp16 ]] && extra=(--loss-scale-init=1024)
      if ! "$bin/amp-opt" "$root/test/fixtures/$model/model.onnx" --train --precision=$precision \
          --optimizer=$optimizer "${extra[@]}" --emit=plan -o "$dir/step.plan"; then
        fail "$tag: amp-opt"
        continue
      fi
      ok=1
      for backend in cpu cuda; do
        if ! "$bin/amp-run" "$dir/step.plan" --backend=$backend --steps "$steps" --quiet \
            --feed "input=$inputs/input.npy" --feed "target=$inputs/target.npy" \
            --dump-grads "$dir/$backend/grads" --dump-params "$dir/$backend/params" \
            --metrics "$dir/$backend/metrics.jsonl" >"$dir/$backend.log" 2>&1; then
          fail "$tag: amp-run --backend=$backend ($(tail -1 "$dir/$backend.log"))"
          ok=0
        fi
      done
      [[ $ok == 1 ]] || continue
      for what in grads params; do
        $py "$root/scripts/compare_dumps.py" "$dir/cpu/$what" "$dir/cuda/$what" \
          --precision $precision --plan "$dir/step.plan" --steps "$steps" --label "$tag $what" \
          >"$dir/compare-$what.txt"
        status=$?
        grep -v '^ok' "$dir/compare-$what.txt"
        echo "$tag $what: $(grep -c '^ok' "$dir/compare-$what.txt") arrays within tolerance"
        [[ $status == 0 ]] || fail "$tag $what differ (see $dir/compare-$what.txt)"
      done
    done
  done
done

# 4. Benchmarks.
if [[ -z "${SKIP_BENCH:-}" ]]; then
  echo "== CUDA step time (AdamW, median of 50 steps after 5 warm-up steps)"
  bench=$out/bench
  mkdir -p "$bench"
  models=(mlp cnn transformer)
  if [[ -f $root/bench/make_models.py ]] && $py "$root/bench/make_models.py" "$bench" >/dev/null; then
    $py -c "import numpy as np, sys; r = np.random.default_rng(0); \
np.save(sys.argv[1] + '/wide_input.npy', r.normal(size=(256, 1024)).astype(np.float32)); \
np.save(sys.argv[1] + '/wide_target.npy', r.integers(0, 10, size=(256,)).astype(np.int64))" "$bench"
    models+=(wide_mlp)
  fi
  printf "| model | precision | graph s/step | no graph s/step | cpu s/step |\n|---|---|---|---|---|\n"
  for model in "${models[@]}"; do
    if [[ $model == wide_mlp ]]; then
      onnx=$bench/wide_mlp.onnx
      feeds=(--feed "input=$bench/wide_input.npy" --feed "target=$bench/wide_target.npy")
    else
      onnx=$root/test/fixtures/$model/model.onnx
      feeds=(--feed "input=$root/test/fixtures/$model/inputs/input.npy"
             --feed "target=$root/test/fixtures/$model/inputs/target.npy")
    fi
    for precision in fp32 bf16 fp16; do
      plan=$bench/$model.$precision.plan
      "$bin/amp-opt" "$onnx" --train --precision=$precision --optimizer=adamw -o "$plan" || {
        fail "bench $model $precision: amp-opt"; continue; }
      row="| $model | $precision"
      for run in "--backend=cuda" "--backend=cuda --cuda-graph=false" "--backend=cpu"; do
        metrics=$bench/$model.$precision.$(echo "$run" | tr -dc 'a-z').jsonl
        # shellcheck disable=SC2086
        if "$bin/amp-run" "$plan" $run --steps 55 --quiet "${feeds[@]}" --metrics "$metrics" \
            >/dev/null 2>"$metrics.err"; then
          row+=" | $($py -c "import json, statistics, sys; \
s = [json.loads(l)['seconds'] for l in open(sys.argv[1])][5:]; print('%.6f' % statistics.median(s))" "$metrics")"
        else
          row+=" | failed"
          fail "bench $model $precision $run: $(tail -1 "$metrics.err")"
        fi
      done
      echo "$row |"
    done
  done
  "$bin/amp-run" "$bench/cnn.fp16.plan" --backend=cuda --steps 3 --quiet \
    --feed "input=$root/test/fixtures/cnn/inputs/input.npy" \
    --feed "target=$root/test/fixtures/cnn/inputs/target.npy" --profile "$bench/cnn.fp16.trace.json" \
    && echo "profile of one cnn fp16 step: $bench/cnn.fp16.trace.json (chrome://tracing, ui.perfetto.dev)" \
    || fail "profile"
  if [[ -f $root/bench/run.py ]]; then
    if $py -c "import torch" 2>/dev/null; then
      echo "== bench/run.py (CPU against PyTorch)"
      $py "$root/bench/run.py" --build "$build" --out "$bench/cpu" || fail "bench/run.py"
    else
      echo "gpu-check: skipping bench/run.py: python3-torch is not installed"
    fi
  fi
fi

if ((${#failures[@]})); then
  echo "gpu-check: ${#failures[@]} check(s) failed:"
  printf '  %s\n' "${failures[@]}"
  exit 1
fi
echo "gpu-check: all checks passed"
