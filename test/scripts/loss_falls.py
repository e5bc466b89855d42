#!/usr/bin/python3
"""Exit 1 unless the loss amp-run wrote (--metrics) fell: the mean of the last
third of the steps is below the first step's loss, and every loss is finite."""
import json
import math
import sys

with open(sys.argv[1]) as f:
    losses = [float(json.loads(line)["loss"]) for line in f if line.strip()]
tail = losses[-max(1, len(losses) // 3):]
ok = len(losses) >= 2 and all(math.isfinite(x) for x in losses) and sum(tail) / len(tail) < losses[0]
print("loss %.5g -> %.5g over %d steps: %s" % (losses[0], tail[-1], len(losses),
                                               "falls" if ok else "DOES NOT FALL"))
sys.exit(0 if ok else 1)
