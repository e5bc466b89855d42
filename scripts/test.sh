#!/usr/bin/env bash
# The test command: sets up, builds and runs every test (unit tests, ONNX node
# tests, the lit suite), then the sanitizer suite and the fuzzers
# (scripts/fuzz.sh: a clang ASan + UBSan build, every test again under the
# sanitizers, each libFuzzer target about a minute; AMPC_SKIP_FUZZ=1 skips
# them). Ends with one line "N passed, N failed, N skipped"; exits non-zero
# when anything failed.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
"$root/scripts/build.sh" || exit 1
counts() { sed -nE 's/^([0-9]+) passed, ([0-9]+) failed(, ([0-9]+) skipped)?$/\1 \2 \4/p' | tail -1; }
build=${AMPC_BUILD_DIR:-$root/build}
/usr/bin/python3 "$root/scripts/run_tests.py" "$build" | tee "$build/tests.log"
main=$(counts <"$build/tests.log")
read -r passed failed skipped <<<"${main:-0 1 0}"
skipped=${skipped:-0}
if [ -z "${AMPC_SKIP_FUZZ:-}" ]; then
  echo "== sanitizer suite and fuzzers (scripts/fuzz.sh)"
  "$root/scripts/fuzz.sh" 2>&1 | tee "$build/fuzz.log"
  fuzz=$(counts <"$build/fuzz.log")
  read -r p f s <<<"${fuzz:-0 1 0}"
  passed=$((passed + p)); failed=$((failed + f)); skipped=$((skipped + ${s:-0}))
fi
echo "$passed passed, $failed failed, $skipped skipped"
[ "$failed" -eq 0 ]
