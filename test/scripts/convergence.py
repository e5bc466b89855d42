#!/usr/bin/python3
"""Convergence check: the fixture MLP trained with amp-opt / amp-run on a
synthetic classification set reaches at least 90% test accuracy in fp32, bf16
and fp16 (dynamic loss scaling), and the final losses of bf16 and fp16 are
within 10% of fp32's.

Usage: convergence.py WORKDIR FIXTURES   (amp-opt and amp-run on PATH)
"""
import json
import os
import subprocess
import sys

import numpy as np

STEPS = 900
BATCH = 8  # the fixture MLP's batch


def make_data(work):
    """Four Gaussian classes in 16 dimensions, means on a simplex, overlapping."""
    rng = np.random.default_rng(1234)
    means = rng.normal(size=(4, 16)) * 0.7
    def sample(n):
        y = rng.integers(0, 4, size=n)
        x = means[y] + rng.normal(size=(n, 16))
        return x.astype(np.float32), y.astype(np.int64)
    x, y = sample(4096)
    tx, ty = sample(1024)
    np.savez(os.path.join(work, "train.npz"), input=x, target=y)
    return tx, ty


def accuracy(params, x, y):
    h = x
    for layer in ("fc1", "fc2"):
        h = np.maximum(h @ params[layer + ".weight"].T + params[layer + ".bias"], 0)
    logits = h @ params["fc3.weight"].T + params["fc3.bias"]
    return float((logits.argmax(axis=1) == y).mean())


def train(work, fixtures, precision):
    plan = os.path.join(work, precision + ".plan")
    subprocess.run(["amp-opt", os.path.join(fixtures, "mlp", "model.onnx"), "--train",
                    "--precision=" + precision, "--optimizer=adamw", "--lr=0.005", "-o", plan],
                   check=True)
    metrics = os.path.join(work, precision + ".jsonl")
    params = os.path.join(work, precision + "-params")
    subprocess.run(["amp-run", plan, "--data", os.path.join(work, "train.npz"), "--shuffle",
                    "--seed", "7", "--steps", str(STEPS), "--backend=cpu", "--quiet",
                    "--metrics", metrics, "--dump-params", params], check=True)
    rows = [json.loads(l) for l in open(metrics)]
    final = float(np.mean([r["loss"] for r in rows[-150:]]))
    skipped = sum(r["skipped"] for r in rows)
    weights = {f[:-4]: np.load(os.path.join(params, f)) for f in os.listdir(params)}
    return final, weights, skipped, rows[-1]["loss_scale"]


def main():
    work, fixtures = sys.argv[1], sys.argv[2]
    os.makedirs(work, exist_ok=True)
    tx, ty = make_data(work)
    results = {}
    for precision in ("fp32", "bf16", "fp16"):
        results[precision] = train(work, fixtures, precision)
    ok = True
    base = results["fp32"][0]
    for precision, (loss, weights, skipped, scale) in results.items():
        acc = accuracy(weights, tx, ty)
        ratio = loss / base
        good = acc >= 0.9 and (precision == "fp32" or abs(ratio - 1) <= 0.1)
        ok = ok and good
        print("%s: test accuracy %.3f, final loss %.4f (%.3f of fp32), %d skipped steps, "
              "loss scale %s %s" % (precision, acc, loss, ratio, skipped, scale,
                                     "ok" if good else "FAIL"))
    print("convergence ok" if ok else "convergence FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
