#!/usr/bin/env bash
# The sanitizer suite and the fuzzers (issue #15): builds ampc with clang, ASan, UBSan and
# libFuzzer's instrumentation into build-fuzz/ (AMPC_FUZZ=ON), runs every test under the
# sanitizers, then each libFuzzer target of test/fuzz from its seed corpus
# (test/fuzz/corpus/<target> and the regression inputs of test/reliability; new inputs go to
# build-fuzz/corpus/<target>) for a fixed number of executions with a fixed seed, about a
# minute each here, so that CI's runs are repeatable. FUZZ_SCALE multiplies the counts
# (FUZZ_SCALE=20 for the million-execution runs of docs/fuzzing.md); FUZZ_SEED sets the seed.
# A crash, hang, leak or sanitizer report fails the run; its input is left in build-fuzz/.
# Ends with one line "N passed, N failed, N skipped".
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${AMPC_FUZZ_BUILD_DIR:-$root/build-fuzz}
scale=${FUZZ_SCALE:-1}
seed=${FUZZ_SEED:-1}
# Executions per target for about a minute on this 2-core machine (docs/fuzzing.md).
declare -A runs=([onnx]=40000 [onnxtxt]=400000 [plan]=150000 [npy]=5000000 [npz]=2000000
                 [checkpoint]=40000)
"$root/scripts/setup.sh" || exit 1
need=()
for p in clang-14 libclang-rt-14-dev libomp-14-dev; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || need+=("$p")
done
if [ ${#need[@]} -gt 0 ]; then
  echo "fuzz: installing ${need[*]}"
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO=sudo
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null || exit 1
fi
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DAMPC_FUZZ=ON \
  -DAMPC_ENABLE_CUDA=OFF -DCMAKE_C_COMPILER=clang-14 -DCMAKE_CXX_COMPILER=clang++-14 >/dev/null || exit 1
ninja -C "$build" || exit 1

export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1:allocator_may_return_null=1
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
# The sanitizer suite: every unit, node and lit test of the normal build.
/usr/bin/python3 "$root/scripts/run_tests.py" "$build" | tee "$build/tests.log"
read -r passed failed skipped < <(tail -1 "$build/tests.log" |
  sed -E 's/^([0-9]+) passed, ([0-9]+) failed(, ([0-9]+) skipped)?$/\1 \2 \4/')
passed=${passed:-0}; failed=${failed:-1}; skipped=${skipped:-0}

echo "== fuzzers: seed $seed, scale $scale"
for target in onnx onnxtxt plan npy npz checkpoint; do
  corpus=$build/corpus/$target
  mkdir -p "$corpus" "$build/artifacts/$target"
  dict=()
  [ -f "$root/test/fuzz/$target.dict" ] && dict=(-dict="$root/test/fuzz/$target.dict")
  log=$build/fuzz-$target.log
  if "$build/bin/ampc-fuzz-$target" -runs=$((${runs[$target]} * scale)) -seed="$seed" \
      -max_total_time=$((600 * scale)) -timeout=10 -rss_limit_mb=1024 \
      -malloc_limit_mb=1024 -print_final_stats=1 "${dict[@]}" \
      -artifact_prefix="$build/artifacts/$target/" "$corpus" "$root/test/fuzz/corpus/$target" \
      "$root/test/reliability/Inputs" \
      >"$log" 2>&1; then
    executed=$(grep -o "stat::number_of_executed_units: *[0-9]*" "$log" | grep -o "[0-9]*$")
    echo "  PASS ampc-fuzz-$target: ${executed:-?} executions, no crash"
    passed=$((passed + 1))
  else
    echo "  FAIL ampc-fuzz-$target: $(grep -m1 -E 'ERROR|SUMMARY|deadly' "$log")"
    echo "       the input is in $build/artifacts/$target/, the log in $log"
    failed=$((failed + 1))
  fi
done
echo "$passed passed, $failed failed, $skipped skipped"
[ "$failed" -eq 0 ]
