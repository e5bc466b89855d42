"""Checks amp-run's dumped gradients of transpose-folding.onnxtxt's weights
against numpy: y = (x W1^T) W2^T, loss = mean((y - t)^2).
Usage: linear_grads.py X.npy T.npy GRAD_DIR"""
import sys

import numpy as np

x, t = np.load(sys.argv[1]).astype(np.float64), np.load(sys.argv[2]).astype(np.float64)
w1 = np.array([0.5, -0.1, 0.2, 0.0, 0.3, 0.4, -0.2, 0.1, -0.3, 0.2, 0.6, -0.4, 0.1, 0.0, -0.5,
               0.7]).reshape(4, 4)
w2 = np.array([0.1, -0.2, 0.3, 0.4, -0.5, 0.6, 0.7, -0.8, 0.9, 1.0, -1.1, 1.2]).reshape(3, 4)
h = x @ w1.T
dy = 2 * (h @ w2.T - t) / t.size
dh = dy @ w2
expected = {"w1": np.einsum("bij,bik->jk", dh, x), "w2": np.einsum("bij,bik->jk", dy, h)}
for name, want in expected.items():
    got = np.load("%s/%s.npy" % (sys.argv[3], name))
    assert got.shape == want.shape, (name, got.shape)
    err = np.abs(got - want).max()
    assert err < 1e-6, "%s: max error %g" % (name, err)
print("gradients match")
