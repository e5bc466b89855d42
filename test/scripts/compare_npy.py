#!/usr/bin/python3
"""Compare the .npy files of two folders: largest |a - b| / largest |b| per tensor.

Usage: compare_npy.py OURS REFERENCE TOL [--tol-for PATTERN=TOL ...]
                      [--skip-noise GRADS_DIR] [--skip PATTERN ...]
Every file of REFERENCE must exist in OURS (other files of OURS are ignored).
--skip-noise GRADS: leave out elements whose reference gradient (GRADS/<name>.npy)
is below 1e-6 of the largest gradient of the model (analytically vanishing
gradients that AdamW turns into noise-signed steps; see docs/training.md).
Prints one line per tensor and exits 1 if any exceeds its tolerance.
"""
import argparse
import fnmatch
import os
import sys

import numpy as np


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("ours")
    ap.add_argument("reference")
    ap.add_argument("tol", type=float)
    ap.add_argument("--tol-for", action="append", default=[])
    ap.add_argument("--skip", action="append", default=[])
    ap.add_argument("--skip-noise")
    args = ap.parse_args()
    tols = [(p.split("=")[0], float(p.split("=")[1])) for p in args.tol_for]
    noise = {}
    if args.skip_noise:
        grads = {f: np.load(os.path.join(args.skip_noise, f)) for f in os.listdir(args.skip_noise)}
        largest = max(float(np.abs(g).max()) for g in grads.values())
        noise = {f: np.abs(g) < 1e-6 * largest for f, g in grads.items()}
    failed = 0
    files = sorted(f for f in os.listdir(args.reference) if f.endswith(".npy"))
    if not files:
        print("no reference files in", args.reference)
        return 1
    for f in files:
        if any(fnmatch.fnmatch(f, p) for p in args.skip):
            print("%-40s skipped" % f)
            continue
        path = os.path.join(args.ours, f)
        if not os.path.exists(path):
            print("%-40s MISSING in %s" % (f, args.ours))
            failed += 1
            continue
        a = np.load(path).astype(np.float64)
        b = np.load(os.path.join(args.reference, f)).astype(np.float64)
        if a.shape != b.shape:
            print("%-40s shape %s, expected %s" % (f, a.shape, b.shape))
            failed += 1
            continue
        keep = ~noise[f] if f in noise else np.ones(b.shape, bool)
        ref = np.abs(b[keep]).max() if keep.any() else 0.0
        diff = np.abs(a - b)[keep].max() if keep.any() else 0.0
        err = diff / ref if ref > 0 else diff
        tol = args.tol
        for pattern, t in tols:
            if fnmatch.fnmatch(f, pattern):
                tol = t
        ok = err <= tol
        failed += not ok
        print("%-40s %.3e %s (tolerance %.0e)" % (f, err, "ok" if ok else "FAIL", tol))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
