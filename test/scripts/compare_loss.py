#!/usr/bin/python3
"""Compare the loss amp-run wrote for a step (--metrics) with torch's saved loss.

Usage: compare_loss.py METRICS.jsonl EXPECTED.npy TOL [--step N]
Exits 1 if |ours - torch| > TOL * max(1, |torch|); prints both.
"""
import argparse
import json
import sys

import numpy as np


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("metrics")
    ap.add_argument("expected")
    ap.add_argument("tol", type=float)
    ap.add_argument("--step", type=int, default=1)
    args = ap.parse_args()
    with open(args.metrics) as f:
        rows = [json.loads(line) for line in f if line.strip()]
    ours = float(rows[args.step - 1]["loss"])
    torch_loss = float(np.load(args.expected))
    err = abs(ours - torch_loss)
    ok = err <= args.tol * max(1.0, abs(torch_loss))
    print("step %d loss %.7g, torch %.7g, difference %.2e %s" %
          (args.step, ours, torch_loss, err, "ok" if ok else "EXCEEDS %g" % args.tol))
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
