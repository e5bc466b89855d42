"""Writes ffn_div.onnx and ffn_mul.onnx, a transformer's feed-forward block with
an exact GELU in the two forms exporters write (x / sqrt 2 as torch.onnx at
opset 17; x * (1 / sqrt 2) as the Gelu-20 expansion), x (8 x 12 x 40) ->
Linear(40, 200) -> GELU -> Linear(200, 40), the mean as the loss, and x.npy;
also ffn_tall.onnx (x / sqrt 2) and x_tall.npy with x of 8 x 37 x 40: 296 rows,
five blocks of column sums (the last one partial). 200 columns are not a
multiple of 16: the fused kernels' row tails run."""
import math
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

rng = np.random.default_rng(5)
W1 = rng.normal(0, 0.3, (200, 40)).astype(np.float32)
B1 = rng.normal(0, 0.5, 200).astype(np.float32)
W2 = rng.normal(0, 0.1, (40, 200)).astype(np.float32)


def const(name, value):
    return helper.make_node("Constant", [], [name], value=numpy_helper.from_array(
        np.array(value, dtype=np.float32), name))


def model(form, rows=12):
    inits = [numpy_helper.from_array(W1, "w1"), numpy_helper.from_array(B1, "b1"),
             numpy_helper.from_array(W2, "w2")]
    nodes = [const("one", 1.0), const("half", 0.5),
             helper.make_node("Transpose", ["w1"], ["w1t"], perm=[1, 0]),
             helper.make_node("MatMul", ["x", "w1t"], ["h"]),
             helper.make_node("Add", ["h", "b1"], ["a"])]
    if form == "div":
        nodes += [const("c", math.sqrt(2.0)), helper.make_node("Div", ["a", "c"], ["s"])]
    else:
        nodes += [const("c", 1 / math.sqrt(2.0)), helper.make_node("Mul", ["a", "c"], ["s"])]
    nodes += [helper.make_node("Erf", ["s"], ["e"]),
              helper.make_node("Add", ["e", "one"], ["p"]),
              helper.make_node("Mul", ["a", "p"], ["q"]),
              helper.make_node("Mul", ["q", "half"], ["g"]),
              helper.make_node("Transpose", ["w2"], ["w2t"], perm=[1, 0]),
              helper.make_node("MatMul", ["g", "w2t"], ["y"]),
              helper.make_node("ReduceMean", ["y"], ["loss"], keepdims=0)]
    graph = helper.make_graph(nodes, "ffn_" + form,
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [8, rows, 40])],
                              [helper.make_tensor_value_info("loss", TensorProto.FLOAT, [])], inits)
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx.checker.check_model(m)
    return m


out = sys.argv[1] if len(sys.argv) > 1 else "."
for form in ("div", "mul"):
    onnx.save(model(form), "%s/ffn_%s.onnx" % (out, form))
np.save("%s/x.npy" % out, rng.normal(0, 1.5, (8, 12, 40)).astype(np.float32))
onnx.save(model("div", rows=37), "%s/ffn_tall.onnx" % out)
np.save("%s/x_tall.npy" % out, rng.normal(0, 1.5, (8, 37, 40)).astype(np.float32))
