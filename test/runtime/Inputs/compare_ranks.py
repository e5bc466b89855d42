"""Data-parallel tests (test/runtime/data-parallel.test): a W-rank run against one process.

  compare_ranks.py params ONE_DIR RANKS_DIR TOL
      every parameter dump of the W-rank job equals the single process's within
      max|ranks - one| <= TOL * max|one| (per array); prints "params match"
  compare_ranks.py skipped ONE.jsonl RANKS.jsonl
      the same steps were skipped (loss-scale overflow) in both; prints them
  compare_ranks.py overflow-data SRC.npz OUT.npz INDEX
      SRC's data set with sample INDEX of 'input' set to inf (its gradients overflow)
  compare_ranks.py fixture-data INPUTS_DIR OUT.npz N
      a data set of N samples like a fixture's input.npy / target.npy (seeded):
      floats normal, integers in the range the fixture's own take
"""
import json
import os
import sys

import numpy as np


def params(one, ranks, tol):
    names = sorted(f for f in os.listdir(one) if f.endswith(".npy"))
    assert names and names == sorted(f for f in os.listdir(ranks) if f.endswith(".npy")), names
    for n in names:
        a, b = np.load(os.path.join(one, n)), np.load(os.path.join(ranks, n))
        err = float(np.max(np.abs(a.astype(np.float64) - b))) / max(float(np.max(np.abs(a))), 1e-30)
        if not err <= tol:
            sys.exit("%s differs: relative error %.3g > %g" % (n, err, tol))
    print("params match")


def skipped(one, ranks):
    def read(path):
        return [json.loads(line)["skipped"] for line in open(path)]
    a, b = read(one), read(ranks)
    if a != b:
        sys.exit("skipped steps differ: one process %s, ranks %s" % (a, b))
    print("skipped steps:", [i + 1 for i, s in enumerate(a) if s])


def overflow_data(src, out, index):
    d = dict(np.load(src))
    d["input"] = d["input"].copy()
    d["input"][index] = np.inf
    np.savez(out, **d)


def fixture_data(inputs, out, n):
    rng = np.random.default_rng(5)
    d = {}
    for name in ("input", "target"):
        a = np.load(os.path.join(inputs, name + ".npy"))
        shape = (n,) + a.shape[1:]
        if np.issubdtype(a.dtype, np.integer):
            d[name] = rng.integers(0, int(a.max()) + 1, size=shape).astype(a.dtype)
        else:
            d[name] = rng.normal(size=shape).astype(a.dtype)
    np.savez(out, **d)


if __name__ == "__main__":
    what = sys.argv[1]
    if what == "fixture-data":
        fixture_data(sys.argv[2], sys.argv[3], int(sys.argv[4]))
        sys.exit(0)
    if what == "params":
        params(sys.argv[2], sys.argv[3], float(sys.argv[4]))
    elif what == "skipped":
        skipped(sys.argv[2], sys.argv[3])
    else:
        overflow_data(sys.argv[2], sys.argv[3], int(sys.argv[4]))
