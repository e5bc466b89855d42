#!/usr/bin/python3
"""Compares the --dump-grads / --dump-params folders of two amp-run runs.

Usage: compare_dumps.py CPU_DIR OTHER_DIR --precision fp32|fp16|bf16 [--label TEXT]

Both folders must hold the same .npy files (one per parameter). For each
array, err = max|other - cpu| / max|cpu| must not exceed the tolerance of the
step's precision (see docs/cuda.md, "Tolerances"):
    fp32 1e-4, fp16 2e-2, bf16 5e-2
The backends round the same values to the same types, but sum in other orders
(cuBLAS against oneDNN, parallel reductions), and low-precision activations
turn a one-ulp difference into gradient differences of that order.

Gradient elements that are rounding noise -- small (below 1% of the largest
gradient) and more than 1% apart between the runs, where gradients that do not
cancel agree far more closely: where a gradient vanishes analytically and sums
of rounded terms cancel, as for a convolution bias before BatchNormalization
or the key bias of attention -- are left out of gradients and parameters
alike (relative to its own largest element such a gradient is all noise, and
AdamW turns noise into +-lr steps whose signs no two implementations share),
and running statistics, which the resulting activations move, are then
skipped; a gradient that is all below 0.1% of the largest one with such an
element is left out whole (its noise of earlier steps moved the parameter
too). At most 5% of the elements may be left out. The gradients are read
from <dir>/../grads next to each params folder. Prints one line per array;
exits 1 on failure.
"""
import argparse
import os
import sys

import numpy as np

TOL = {"fp32": 1e-4, "fp16": 2e-2, "bf16": 5e-2}


def load(d):
    return {f[:-4]: np.load(os.path.join(d, f)).astype(np.float64)
            for f in sorted(os.listdir(d)) if f.endswith(".npy")}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("cpu")
    ap.add_argument("other")
    ap.add_argument("--precision", default="fp32", choices=sorted(TOL))
    ap.add_argument("--label", default="")
    args = ap.parse_args()
    a, b = load(args.cpu), load(args.other)
    if sorted(a) != sorted(b) or not a:
        print("FAIL %s: the folders hold different arrays: %s vs %s" % (args.label, sorted(a), sorted(b)))
        return 1
    masks = {}
    total = 0
    # The gradients of the same runs decide which elements are noise.
    gcpu = os.path.join(os.path.dirname(os.path.normpath(args.cpu)), "grads")
    goth = os.path.join(os.path.dirname(os.path.normpath(args.other)), "grads")
    if os.path.isdir(gcpu) and os.path.isdir(goth):
        ga, gb = load(gcpu), load(goth)
        largest = max((np.abs(g).max() for g in ga.values() if g.size), default=0.0)
        total = sum(g.size for g in ga.values())
        for k in ga:
            if k in gb and ga[k].shape == gb[k].shape:
                big = np.maximum(np.abs(ga[k]), np.abs(gb[k]))
                noise = (big < 1e-2 * largest) & (np.abs(ga[k] - gb[k]) > 1e-2 * big)
                if noise.any() and big.max() < 1e-3 * largest:
                    noise[:] = True  # all of it is noise, of earlier steps too
                if noise.any():
                    masks[k] = noise
    tol = TOL[args.precision]
    failed = 0
    left_out = sum(int(m.sum()) for m in masks.values())
    if total and left_out > 0.05 * total:
        # A few noise elements are expected; many would hide real differences.
        print("FAIL %s: %d of %d gradient elements are noise, more than 5%%" % (args.label, left_out, total))
        failed += 1
    for k in sorted(a):
        if masks and "running_" in k:
            print("skip %s %s: running statistics follow the activations that noise moves" % (args.label, k))
            continue
        x, y = b[k], a[k]
        if x.shape != y.shape:
            print("FAIL %s %s: shapes %s vs %s" % (args.label, k, x.shape, y.shape))
            failed += 1
            continue
        keep = ~masks.get(k, np.zeros(y.shape, dtype=bool))
        ref = np.abs(y[keep]).max() if keep.any() else 0.0
        diff = np.abs(x[keep] - y[keep]).max() if keep.any() else 0.0
        finite = np.isfinite(x).all() == np.isfinite(y).all()
        err = diff / ref if ref > 0 else diff
        ok = err <= tol and finite
        failed += not ok
        print("%s %s %s: error %.2e (tolerance %.0e)%s" % (
            "ok  " if ok else "FAIL", args.label, k, err, tol,
            ", %d noise elements left out" % (~keep).sum() if (~keep).any() else ""))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
