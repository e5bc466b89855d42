#!/usr/bin/python3
"""Trains a fixture with and without the cast-cache pass and checks that the
parameters come out bitwise equal. Usage: FIXTURES NAME PRECISION OPTIMIZER EXTRA_FLAGS"""
import os
import subprocess
import sys

import numpy as np

fixtures, name, precision, optimizer, extra = sys.argv[1:6]
model = os.path.join(fixtures, name, "model.onnx")
inputs = os.path.join(fixtures, name, "inputs")
tag = "%s-%s-%s" % (name, precision, optimizer)
steps = 6
flags = extra.split()
dumps = []
for variant, more in (("cached", []), ("cast", ["--no-cast-cache"])):
    plan = "%s-%s.plan" % (tag, variant)
    subprocess.run(["amp-opt", model, "--train", "--precision=" + precision,
                    "--optimizer=" + optimizer, "-o", plan] + flags + more, check=True)
    text = subprocess.run(["amp-opt", model, "--train", "--precision=" + precision,
                           "--optimizer=" + optimizer, "--emit=plan-text"] + flags + more,
                          check=True, stdout=subprocess.PIPE, text=True).stdout
    copies = sum(1 for line in text.splitlines()
                 if " state " in line and line.rstrip().endswith("." + precision + "'"))
    if variant == "cached" and copies == 0:
        sys.exit("%s: the plan keeps no %s parameter copy" % (tag, precision))
    if variant == "cast" and copies != 0:
        sys.exit("%s: --no-cast-cache still keeps %d copies" % (tag, copies))
    if variant == "cached":
        cached = copies
    out = "%s-%s-params" % (tag, variant)
    subprocess.run(["amp-run", plan, "--feed", "input=" + os.path.join(inputs, "input.npy"),
                    "--feed", "target=" + os.path.join(inputs, "target.npy"), "--steps",
                    str(steps), "--threads", "2", "--backend=cpu", "--quiet", "--dump-params", out],
                   check=True)
    dumps.append(out)
files = sorted(os.listdir(dumps[0]))
assert files == sorted(os.listdir(dumps[1])), "different parameters dumped"
for f in files:
    a, b = np.load(os.path.join(dumps[0], f)), np.load(os.path.join(dumps[1], f))
    if a.tobytes() != b.tobytes():
        sys.exit("%s: %s differs with the cast cache (largest difference %g)"
                 % (tag, f, float(np.abs(a.astype(np.float64) - b).max())))
print("%s %s %s %s: %d parameters bitwise equal after %d steps; cached copies: %d"
      % (name, precision, optimizer, extra, len(files), steps, cached))
