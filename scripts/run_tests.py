#!/usr/bin/python3
"""Runs every ampc test binary and the lit suite; prints one summary line.

Usage: scripts/run_tests.py BUILD_DIR
The last line of output is "N passed, N failed, N skipped".
"""
import os
import re
import subprocess
import sys

LIT = "/usr/lib/llvm-14/build/utils/lit/lit.py"


def run(cmd, env=None):
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    return proc.returncode, proc.stdout


def gtest(binary):
    """Runs a GoogleTest binary; returns (passed, failed, skipped)."""
    code, out = run([binary, "--gtest_color=no"])
    counts = {"PASSED": 0, "FAILED": 0, "SKIPPED": 0}
    for key, n in re.findall(r"^\[\s+(PASSED|FAILED|SKIPPED)\s+\] (\d+) tests?", out, re.M):
        counts[key] = int(n)
    # Show failures and anything printed outside gtest's own lines (tables).
    for line in out.splitlines():
        if line.startswith("[  FAILED  ]") or not line.startswith("[") and line.strip() \
                and not line.startswith("Running main") and not line.startswith("Note:"):
            print("  " + line)
    failed = counts["FAILED"]
    if code != 0 and failed == 0:
        print("  %s exited with status %d" % (os.path.basename(binary), code))
        failed = 1
    return counts["PASSED"], failed, counts["SKIPPED"]


def lit(build):
    code, out = run([sys.executable, LIT, "-sv", "--no-progress-bar", os.path.join(build, "test")])
    counts = {}
    for key, n in re.findall(r"^\s+(Passed|Failed|Unsupported|Skipped|Expectedly Failed|"
                             r"Unexpectedly Passed|Unresolved|Timed Out)\s*:\s*(\d+)", out, re.M):
        counts[key] = int(n)
    for line in out.splitlines():
        if line.startswith(("FAIL:", "UNRESOLVED:", "TIMEOUT:", "XPASS:")) or "*** TEST" in line:
            print("  " + line)
    passed = counts.get("Passed", 0) + counts.get("Expectedly Failed", 0)
    failed = sum(counts.get(k, 0) for k in ("Failed", "Unexpectedly Passed", "Unresolved",
                                             "Timed Out"))
    skipped = counts.get("Unsupported", 0) + counts.get("Skipped", 0)
    if code != 0 and failed == 0:
        print(out[-3000:])
        failed = 1
    return passed, failed, skipped


def main():
    build = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else "build")
    bindir = os.path.join(build, "bin")
    total = [0, 0, 0]
    suites = [("unit tests", lambda: gtest(os.path.join(bindir, "ampc-unittests"))),
              ("ONNX node tests", lambda: gtest(os.path.join(bindir, "ampc-nodetests")))]
    for extra in sorted(os.listdir(bindir)):
        if extra.startswith("ampc-") and extra.endswith("-tests"):
            path = os.path.join(bindir, extra)
            suites.append((extra, lambda path=path: gtest(path)))
    suites.append(("lit suite", lambda: lit(build)))
    for name, fn in suites:
        print("== %s" % name, flush=True)
        p, f, s = fn()
        print("   %d passed, %d failed, %d skipped" % (p, f, s), flush=True)
        total = [total[0] + p, total[1] + f, total[2] + s]
    print("%d passed, %d failed, %d skipped" % tuple(total))
    return 1 if total[1] else 0


if __name__ == "__main__":
    sys.exit(main())
