"""check_gelu.py FORM TYPE GRADS_DIR X.npy: the gradient of w2 written by
amp-run --dump-grads is the GELU of x as the step computed it, the gradient
of b its derivative (checked the same way, with 8 fp32 units of 1 + |x|). It must be
what PyTorch's GELU gives, computed in fp32 and rounded once to TYPE (bf16
or fp16): the exact GELU within one unit in the last place of TYPE, plus
what fp32 loses in 1 + erf (or 1 + tanh): 8 fp32 units of 1, times x / 2.
Rounded to TYPE at every operation, 1 + erf alone is off by up to half a
unit of TYPE at 1 (2^-9 in bf16), so that check fails where x < 0. Prints
the largest error as a share of the allowed one; exits 1 above 1."""
import math
import sys

import numpy as np

form, dtype, grads, xfile = sys.argv[1:5]
x = np.load(xfile).astype(np.float64).reshape(-1)
k = math.sqrt(2 / math.pi)
if form == "erf":
    value = [0.5 * v * (1 + math.erf(v / math.sqrt(2))) for v in x]
    slope = [0.5 * (1 + math.erf(v / math.sqrt(2))) + v * math.exp(-v * v / 2) / math.sqrt(2 * math.pi)
             for v in x]
else:
    t = [math.tanh(k * (v + 0.044715 * v ** 3)) for v in x]
    value = [0.5 * v * (1 + tv) for v, tv in zip(x, t)]
    slope = [0.5 * (1 + tv) + 0.5 * v * (1 - tv * tv) * k * (1 + 3 * 0.044715 * v * v)
             for v, tv in zip(x, t)]
mant = 8 if dtype == "bf16" else 11  # significant bits
tiny = 2.0 ** -133 if dtype == "bf16" else 2.0 ** -24  # the smallest subnormal


def check(name, got, exact, fp32_loss):
    ulp = np.maximum(2.0 ** (np.floor(np.log2(np.maximum(np.abs(exact), 1e-300))) - (mant - 1)),
                     tiny)
    err = np.abs(got - exact) / (ulp + fp32_loss * 8 * 2.0 ** -24)
    err[np.isnan(err)] = np.inf
    worst = int(np.argmax(err))
    print("%s %s %s: largest error %.3f of the allowed at x = %g (got %.6g, exact %.6g)" %
          (form, dtype, name, err[worst], x[worst], got[worst], exact[worst]))
    return err[worst] <= 1.0


ok = check("value", np.load(grads + "/w2.npy").astype(np.float64).reshape(-1), np.array(value),
           np.abs(x) / 2)
ok = check("slope", np.load(grads + "/b.npy").astype(np.float64).reshape(-1), np.array(slope),
           1 + np.abs(x)) and ok
sys.exit(0 if ok else 1)
