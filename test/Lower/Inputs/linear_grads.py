"""Checks amp-run's dumped gradients of transpose-folding.onnxtxt's (and
cast-states.onnxtxt's) weights against numpy: y = (x W1^T) W2^T,
loss = mean((y - t)^2). With --bf16 (a bf16 plan whose weight copies are
converted at load) they must be numpy's fp64 gradients within bf16's error:
copies of zeros or garbage would give gradients unrelated to these.
Usage: linear_grads.py X.npy T.npy GRAD_DIR [--bf16]"""
import sys

import numpy as np

bf16 = "--bf16" in sys.argv[4:]
x, t = np.load(sys.argv[1]).astype(np.float64), np.load(sys.argv[2]).astype(np.float64)
w1 = np.array([0.5, -0.1, 0.2, 0.0, 0.3, 0.4, -0.2, 0.1, -0.3, 0.2, 0.6, -0.4, 0.1, 0.0, -0.5,
               0.7]).reshape(4, 4)
w2 = np.array([0.1, -0.2, 0.3, 0.4, -0.5, 0.6, 0.7, -0.8, 0.9, 1.0, -1.1, 1.2]).reshape(3, 4)
h = x @ w1.T
dy = 2 * (h @ w2.T - t) / t.size
dh = dy @ w2
expected = {"w1": np.einsum("bij,bik->jk", dh, x), "w2": np.einsum("bij,bik->jk", dy, h)}
for name, want in expected.items():
    got = np.load("%s/%s.npy" % (sys.argv[3], name)).astype(np.float64)
    assert got.shape == want.shape, (name, got.shape)
    if bf16:
        rel = np.abs(got - want).max() / np.abs(want).max()
        assert rel < 2e-2, "%s: relative error %g" % (name, rel)
    else:
        err = np.abs(got - want).max()
        assert err < 1e-6, "%s: max error %g" % (name, err)
print("bf16 gradients match" if bf16 else "gradients match")
