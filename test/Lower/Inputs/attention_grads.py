"""Checks amp-run's dumped gradients of transpose-of-matmul-result.onnxtxt's
weights against numpy in fp64: q, k, v = x Wq, x Wk, x Wv; p = softmax(q k^T
scale) over the last axis; o = p v; loss = mean(o^2). The weights are read
from the model file.
Usage: attention_grads.py MODEL.onnxtxt X.npy GRAD_DIR"""
import re
import sys

import numpy as np

text = open(sys.argv[1]).read()


def weight(name):
    values = re.search(r"float\[8,8\] %s = \{([^}]*)\}" % name, text).group(1)
    return np.array([float(v) for v in values.split(",")]).reshape(8, 8)


wq, wk, wv = weight("wq"), weight("wk"), weight("wv")
scale = 0.35355339
x = np.load(sys.argv[2]).astype(np.float64)
q, k, v = x @ wq, x @ wk, x @ wv
s = q @ k.transpose(0, 2, 1) * scale
e = np.exp(s - s.max(axis=-1, keepdims=True))
p = e / e.sum(axis=-1, keepdims=True)
o = p @ v
do = 2 * o / o.size
dp = do @ v.transpose(0, 2, 1)
dv = p.transpose(0, 2, 1) @ do
ds = p * (dp - (dp * p).sum(axis=-1, keepdims=True)) * scale
dq = ds @ k
dk = ds.transpose(0, 2, 1) @ q
expected = {"wq": np.einsum("bij,bik->jk", x, dq), "wk": np.einsum("bij,bik->jk", x, dk),
            "wv": np.einsum("bij,bik->jk", x, dv)}
for name, want in expected.items():
    got = np.load("%s/%s.npy" % (sys.argv[3], name)).astype(np.float64)
    assert got.shape == want.shape, (name, got.shape)
    err = np.abs(got - want).max() / np.abs(want).max()
    assert err < 1e-5, "%s: relative error %g" % (name, err)
print("gradients match")
