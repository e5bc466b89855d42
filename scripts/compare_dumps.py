#!/usr/bin/python3
"""Compares the --dump-grads / --dump-params folders of two amp-run runs.

Usage: compare_dumps.py CPU_DIR OTHER_DIR --precision fp32|fp16|bf16
           [--plan STEP.plan --steps N] [--label TEXT]

Both folders must hold the same .npy files (one per parameter). For each
array, err = max|other - cpu| / max|cpu| must not exceed the tolerance of the
step's precision (see docs/cuda.md, "Tolerances"):
    fp32 1e-4, fp16 2e-2, bf16 5e-2
The backends round the same values to the same types, but sum in other orders
(cuBLAS against oneDNN, parallel reductions), and low-precision activations
turn a one-ulp difference into gradient differences of that order.

Noise. The last step's gradients (<dir>/../grads next to each folder) decide
which elements are rounding noise. With L the step's largest gradient
element, an element of a gradient is noise when it is
  - small: max(|cpu|, |other|) < 1% of L,
  - apart: |other - cpu| > r * max(|cpu|, |other|), where gradients that do
    not cancel agree to an ulp or two; r = 1%, but at least 8 ulps of the
    precision: 1% for fp32 and fp16 (2^-10), 8 * 2^-7 = 6.25% for bf16 (a bf16
    value whose terms cancel to an eighth of their size already differs by
    1% after one rounding of its inputs, 2^-9),
  - and apart by a rounding-sized amount: |other - cpu| <= tolerance * L;
or when it is no larger than the largest difference among its gradient's
noise elements (it cannot be told from that noise: the key-bias element of
attention on which the runs happened to agree). A gradient whose elements are
all below 0.1% of L, with a noise element, is noise as a whole. These are the
places where a gradient vanishes analytically and sums of rounded terms
cancel: a convolution bias before BatchNormalization or InstanceNormalization,
the key bias of attention. Noise elements are left out of the gradients and
of the parameters (relative to its own largest element such a gradient is all
noise, and AdamW turns noise into +-lr steps whose signs no two
implementations share), and running statistics, which the resulting
activations move, are then skipped.

AdamW (--plan names it, --steps > 1; without them every run is judged as
SGD). Its first update of an element is lr * sign(gradient), whatever the
gradient's size, so an element whose first gradient is rounding noise -- which
the last step's gradients no longer show -- takes a first step of random sign
and ends about 2 * lr from the other run (decoder fp16 on an H200: up.weight
element 349, first gradient 8e-7 on the CPU against 1.1e-2 in its tensor,
1.98 lr apart), and the steps after it start from other parameters. So, for AdamW,
where the run shows that it turns noise into steps -- the parameter of a
noise element more than lr apart: rounding moves an AdamW update by a small
fraction of lr unless it flips the update's sign -- a few parameter elements
beyond the tolerance are
accepted as moved by noise when within 2.5 * lr (one step of the other sign
and half a step for the steps after it), and a few elements of the last
step's gradients beyond the tolerance when within twice it. "A few": at most
a quarter of an array (one element at least); more are no accident of
noise, and the array is judged as it is.

At most 5% of the gradient elements may be left out or accepted as moved
where they differ beyond the tolerance (noise elements within it hide
nothing): the gradients that vanish analytically and a few AdamW flips fit,
an error spread over a tensor does not. Prints one line per array; exits 1
on failure.
"""
import argparse
import os
import re
import sys

import numpy as np

TOL = {"fp32": 1e-4, "fp16": 2e-2, "bf16": 5e-2}
# How far apart (relative to the larger of the two values) a small gradient
# element must be to be noise: 1%, but at least 8 ulps of the precision.
NOISE_APART = {"fp32": 1e-2, "fp16": 1e-2, "bf16": 8 * 2.0 ** -7}
SHARE = 0.05  # of the gradient elements that may be left out beyond the tolerance
ISOLATED = 0.25  # of an array that AdamW noise may have moved (one element at least)
FLIP = 2.5  # lr: one AdamW step of the other sign, and half a step for the steps after it


def load(d):
    return {f[:-4]: np.load(os.path.join(d, f)).astype(np.float64)
            for f in sorted(os.listdir(d)) if f.endswith(".npy")}


def read_optimizer(plan):
    """(kind, lr) from the optimizer pass's description in the plan's info."""
    with open(plan, "rb") as f:
        data = f.read()
    m = re.search(rb"(sgd|adamw)\(lr=([0-9.eE+-]+)", data)
    if not m:
        sys.exit("compare_dumps.py: %s names no optimizer (no 'sgd(lr=' or 'adamw(lr=')" % plan)
    return m.group(1).decode(), float(m.group(2))


def noise_masks(ga, gb, precision):
    """The noise elements of the gradients (see the docstring), and L."""
    largest = max((np.abs(g).max() for g in ga.values() if g.size), default=0.0)
    tol, apart = TOL[precision], NOISE_APART[precision]
    masks = {}
    for k in ga:
        if k not in gb or ga[k].shape != gb[k].shape:
            continue
        big = np.maximum(np.abs(ga[k]), np.abs(gb[k]))
        diff = np.abs(ga[k] - gb[k])
        noise = (big < 1e-2 * largest) & (diff > apart * big) & (diff <= tol * largest)
        if not noise.any():
            continue
        noise |= big <= diff[noise].max()  # as small as the noise: cannot be told from it
        if big.max() < 1e-3 * largest:
            noise[:] = True  # all of it is noise, of earlier steps too
        masks[k] = noise
    return masks, largest


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("cpu")
    ap.add_argument("other")
    ap.add_argument("--precision", default="fp32", choices=sorted(TOL))
    ap.add_argument("--plan", help="the step's plan: its optimizer and learning rate")
    ap.add_argument("--steps", type=int, default=0, help="the steps both runs trained")
    ap.add_argument("--label", default="")
    args = ap.parse_args()
    a, b = load(args.cpu), load(args.other)
    if sorted(a) != sorted(b) or not a:
        print("FAIL %s: the folders hold different arrays: %s vs %s" % (args.label, sorted(a), sorted(b)))
        return 1
    tol = TOL[args.precision]
    what = os.path.basename(os.path.normpath(args.cpu))

    def sibling(d, name):
        return os.path.join(os.path.dirname(os.path.normpath(d)), name)

    masks, largest, total = {}, 0.0, 0
    # The gradients of the same runs decide which elements are noise.
    if os.path.isdir(sibling(args.cpu, "grads")) and os.path.isdir(sibling(args.other, "grads")):
        ga, gb = load(sibling(args.cpu, "grads")), load(sibling(args.other, "grads"))
        masks, largest = noise_masks(ga, gb, args.precision)
        total = sum(g.size for g in ga.values())

    adamw, lr, apart = False, 0.0, False
    if args.plan and args.steps > 1:
        kind, lr = read_optimizer(args.plan)
        adamw = kind == "adamw"
    if adamw and os.path.isdir(sibling(args.cpu, "params")) and os.path.isdir(sibling(args.other, "params")):
        pa, pb = load(sibling(args.cpu, "params")), load(sibling(args.other, "params"))
        # Noise elements more than lr apart: this model's AdamW did turn noise
        # into steps (their gradients are noise at every step).
        apart = any((np.abs(pa[k] - pb[k])[masks[k]] > lr).any() for k in masks
                    if k in pa and k in pb and pa[k].shape == pb[k].shape == masks[k].shape)

    failed = 0
    beyond = 0  # elements left out or accepted as moved where they differ beyond the tolerance
    lines = []
    for k in sorted(a):
        if masks and "running_" in k:
            lines.append("skip %s %s: running statistics follow the activations that noise moves" % (args.label, k))
            continue
        x, y = b[k], a[k]
        if x.shape != y.shape:
            lines.append("FAIL %s %s: shapes %s vs %s" % (args.label, k, x.shape, y.shape))
            failed += 1
            continue
        left = masks.get(k, np.zeros(y.shape, dtype=bool))
        keep = ~left
        ref = np.abs(y[keep]).max() if keep.any() else 0.0
        diff = np.abs(x - y)
        over = diff > tol * ref if ref > 0 else diff > 0
        moved = np.zeros(y.shape, dtype=bool)
        if apart and what == "params":
            moved = keep & over & (diff <= FLIP * lr)
        elif apart and what == "grads":
            moved = keep & over & (diff <= 2 * tol * ref)
        if moved.sum() > max(1, ISOLATED * y.size):
            moved[:] = False  # not a few elements struck by noise: judged as they are
        beyond += int((left & over).sum() + moved.sum())
        judged = keep & ~moved
        d = diff[judged].max() if judged.any() else 0.0
        finite = np.isfinite(x).all() == np.isfinite(y).all()
        err = d / ref if ref > 0 else d
        ok = err <= tol and finite
        failed += not ok
        lines.append("%s %s %s: error %.2e (tolerance %.0e)%s%s" % (
            "ok  " if ok else "FAIL", args.label, k, err, tol,
            ", %d noise elements left out" % left.sum() if left.any() else "",
            ", %d moved by AdamW noise (up to %.2e)" % (moved.sum(), diff[moved].max()) if moved.any() else ""))
    if total and beyond > SHARE * total:
        # A few are expected; many would hide real differences.
        print("FAIL %s: %d of %d gradient elements are left out or moved beyond the tolerance, "
              "more than 5%%" % (args.label, beyond, total))
        failed += 1
    elif beyond:
        print("ok   %s: %d of %d gradient elements left out or moved beyond the tolerance "
              "(at most 5%%)" % (args.label, beyond, total))
    print("\n".join(lines))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
