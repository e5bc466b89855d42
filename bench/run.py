#!/usr/bin/python3
"""ampc benchmarks: step time against PyTorch, memory plans, compile time.

Usage: /usr/bin/python3 bench/run.py [--build build] [--threads 2] [--steps 30] [--out bench/out]
Needs a Release build (scripts/build.sh) and Debian's python3-torch. Prints markdown
tables (docs/benchmarks.md holds the figures of the last run and how they were made).
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import time

import numpy as np

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
FIXTURES = os.path.join(ROOT, "test", "fixtures")


def run(cmd, **kw):
    return subprocess.run(cmd, check=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          text=True, **kw).stdout


def model_path(name, out):
    if name == "wide_mlp":
        return os.path.join(out, "wide_mlp.onnx")
    return os.path.join(FIXTURES, name, "model.onnx")


def feeds(name, out):
    if name != "wide_mlp":
        d = os.path.join(FIXTURES, name, "inputs")
        return ["--feed", "input=" + os.path.join(d, "input.npy"),
                "--feed", "target=" + os.path.join(d, "target.npy")]
    rng = np.random.default_rng(0)
    np.save(os.path.join(out, "wide_input.npy"), rng.normal(size=(256, 1024)).astype(np.float32))
    np.save(os.path.join(out, "wide_target.npy"), rng.integers(0, 10, size=(256,)).astype(np.int64))
    return ["--feed", "input=" + os.path.join(out, "wide_input.npy"),
            "--feed", "target=" + os.path.join(out, "wide_target.npy")]


def compile_plan(b, name, precision, out):
    plan = os.path.join(out, "%s.%s.plan" % (name, precision))
    t0 = time.perf_counter()
    run([os.path.join(b, "amp-opt"), model_path(name, out), "--train", "--optimizer=adamw",
         "--precision=" + precision, "-o", plan])
    seconds = time.perf_counter() - t0
    text = run([os.path.join(b, "amp-opt"), model_path(name, out), "--train", "--optimizer=adamw",
                "--precision=" + precision, "--emit=plan-text"])
    return plan, seconds, text


def ampc_step(b, plan, name, threads, steps, out):
    metrics = plan + ".metrics.jsonl"
    run([os.path.join(b, "amp-run"), plan, "--backend=cpu", "--threads", str(threads), "--steps",
         str(steps + 3), "--quiet", "--metrics", metrics] + feeds(name, out))
    rows = [json.loads(line) for line in open(metrics)]
    return statistics.median(r["seconds"] for r in rows[3:])


def torch_step(name, precision, threads, steps):
    out = run(["/usr/bin/python3", os.path.join(ROOT, "bench", "torch_step.py"), name, precision,
               str(threads), str(steps)], env=dict(os.environ, OMP_NUM_THREADS=str(threads)))
    return float(out.strip().splitlines()[-1])


def memory(text):
    m = re.search(r"arena: (\d+) bytes, lower bound (\d+) bytes \(peak live\), unplanned (\d+) bytes", text)
    a = re.search(r"activations: (\d+) bytes", text)
    t = re.search(r"temporaries: (\d+) bytes", text)
    return int(m.group(1)), int(m.group(2)), int(m.group(3)), int(a.group(1)), int(t.group(1))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--out", default=os.path.join(ROOT, "bench", "out"))
    args = ap.parse_args()
    b = os.path.join(args.build, "bin")
    os.makedirs(args.out, exist_ok=True)
    run(["/usr/bin/python3", os.path.join(ROOT, "bench", "make_models.py"), args.out])

    print("## Training step time (AdamW, CPU, %d threads, median of %d steps)\n" % (args.threads, args.steps))
    print("| model | precision | ampc s/step | PyTorch s/step | PyTorch / ampc |")
    print("|---|---|---|---|---|")
    mem_rows, compile_rows, step = [], [], {}
    for name in ["mlp", "cnn", "transformer", "wide_mlp"]:
        for precision in ["fp32", "bf16", "fp16"]:
            plan, seconds, text = compile_plan(b, name, precision, args.out)
            compile_rows.append((name, precision, seconds))
            mem_rows.append((name, precision) + memory(text))
            if precision == "fp16":
                continue
            ours = ampc_step(b, plan, name, args.threads, args.steps, args.out)
            theirs = torch_step(name, precision, args.threads, args.steps)
            step[(name, precision)] = ours
            print("| %s | %s | %.5f | %.5f | %.2fx |" % (name, precision, ours, theirs, theirs / ours))
        sys.stdout.flush()
    wide = step[("wide_mlp", "fp32")] / step[("wide_mlp", "bf16")]
    print("\nwide_mlp: the bf16 plan is %.2fx faster than the fp32 plan\n" % wide)

    print("## Memory plans (AdamW training step)\n")
    print("| model | precision | arena bytes | lower bound (peak live) | arena / lower bound | unplanned (sum of buffers) | temporaries | activations kept for backward |")
    print("|---|---|---|---|---|---|---|---|")
    acts = {}
    for name, precision, arena, lower, unplanned, act, temps in mem_rows:
        acts[(name, precision)] = act
        print("| %s | %s | %d | %d | %.3f | %d | %d | %d |" % (name, precision, arena, lower, arena / lower,
                                                            unplanned, temps, act))
    print()
    for name in ["mlp", "cnn", "transformer", "wide_mlp"]:
        if acts.get((name, "fp32")) and acts.get((name, "fp16")):
            print("%s: fp16 activations are %.3fx the fp32 plan's" % (name, acts[(name, "fp16")] / acts[(name, "fp32")]))

    print("\n## Compile time of amp-opt --train --emit=plan\n")
    print("| model | precision | seconds |")
    print("|---|---|---|")
    for name, precision, seconds in compile_rows:
        print("| %s | %s | %.3f |" % (name, precision, seconds))
    print("\n| generated graph | nodes | seconds |")
    print("|---|---|---|")
    for nodes in (1251, 2501, 5001, 10001, 20001, 40001):
        path = os.path.join(args.out, "chain_%d.onnx" % nodes)
        t0 = time.perf_counter()
        run([os.path.join(b, "amp-opt"), path, "--train", "--optimizer=sgd", "-o",
             os.path.join(args.out, "chain.plan")])
        print("| chain | %d | %.3f |" % (nodes, time.perf_counter() - t0))
        sys.stdout.flush()


if __name__ == "__main__":
    main()
