"""Writes gelu_erf.onnx and gelu_tanh.onnx, the two GELUs PyTorch exports
(exact: x (1 + erf(x / sqrt 2)) / 2; tanh: x (1 + tanh(sqrt(2/pi) (x +
0.044715 x^3))) / 2), each between two MatMuls, and x.npy: one row of 1024
values from -8 to 8 that bf16 and fp16 hold exactly.

h = MatMul(x, I) + b is x itself (b is zeros); loss = ReduceSum(MatMul(gelu(h),
w2)) with w2 a column of ones, so the gradient of w2 is gelu(h) as the step
computed and rounded it, and the gradient of b is gelu'(h) (check_gelu.py
compares both with the exact values)."""
import math
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

N = 1024


def const(name, value):
    """A Constant node (not an initializer: amp-opt would train it)."""
    return helper.make_node("Constant", [], [name], value=numpy_helper.from_array(
        np.array(value, dtype=np.float32), name))


def model(form):
    inits = [numpy_helper.from_array(np.ones((N, 1), np.float32), "w2"),
             numpy_helper.from_array(np.zeros(N, np.float32), "b")]
    nodes = [const("w1", np.eye(N)), const("half", 0.5), const("one", 1.0),
             helper.make_node("MatMul", ["x", "w1"], ["xw"]),
             helper.make_node("Add", ["xw", "b"], ["h"])]
    if form == "erf":
        nodes += [const("sqrt2", math.sqrt(2.0)),
                  helper.make_node("Div", ["h", "sqrt2"], ["s"]),
                  helper.make_node("Erf", ["s"], ["e"])]
    else:
        nodes += [const("c3", 0.044715), const("k", math.sqrt(2.0 / math.pi)),
                  helper.make_node("Mul", ["h", "h"], ["h2"]),
                  helper.make_node("Mul", ["h2", "h"], ["h3"]),
                  helper.make_node("Mul", ["h3", "c3"], ["t3"]),
                  helper.make_node("Add", ["h", "t3"], ["inner"]),
                  helper.make_node("Mul", ["inner", "k"], ["s"]),
                  helper.make_node("Tanh", ["s"], ["e"])]
    nodes += [helper.make_node("Add", ["e", "one"], ["p"]),
              helper.make_node("Mul", ["h", "p"], ["q"]),
              helper.make_node("Mul", ["q", "half"], ["g"]),
              helper.make_node("MatMul", ["g", "w2"], ["y"]),
              helper.make_node("ReduceSum", ["y"], ["loss"], keepdims=0)]
    graph = helper.make_graph(nodes, "gelu_" + form,
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, N])],
                              [helper.make_tensor_value_info("loss", TensorProto.FLOAT, [])], inits)
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx.checker.check_model(m)
    return m


out = sys.argv[1] if len(sys.argv) > 1 else "."
for form in ("erf", "tanh"):
    onnx.save(model(form), "%s/gelu_%s.onnx" % (out, form))
# Values with 8 significant bits at most (exact in bf16 and fp16), dense near 0
# and out to -8, where the exact GELU is below 1e-14.
x = np.linspace(-8, 8, N).astype(np.float32)
x = (np.round(x * 32) / 32).astype(np.float32)
np.save("%s/x.npy" % out, x.reshape(1, N))
