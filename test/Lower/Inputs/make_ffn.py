"""Writes ffn.onnx: a transformer's feed-forward block as PyTorch exports it,
x (16 x 64 x 64) -> Linear(64, 256) -> exact GELU -> Linear(256, 64), the mean
as the loss. Its activations (16 x 64 x 256) are above the fusion's 64 KiB
"large" threshold, so the lowering's lifetime rule applies to them."""
import math
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

rng = np.random.default_rng(3)


def const(name, value):
    return helper.make_node("Constant", [], [name], value=numpy_helper.from_array(
        np.array(value, dtype=np.float32), name))


inits = [numpy_helper.from_array(rng.normal(0, 0.1, (256, 64)).astype(np.float32), "w1"),
         numpy_helper.from_array(np.zeros(256, np.float32), "b1"),
         numpy_helper.from_array(rng.normal(0, 0.1, (64, 256)).astype(np.float32), "w2"),
         numpy_helper.from_array(np.zeros(64, np.float32), "b2")]
nodes = [const("sqrt2", math.sqrt(2.0)), const("one", 1.0), const("half", 0.5),
         helper.make_node("Transpose", ["w1"], ["w1t"], perm=[1, 0]),
         helper.make_node("MatMul", ["x", "w1t"], ["h"]),
         helper.make_node("Add", ["h", "b1"], ["a"]),
         helper.make_node("Div", ["a", "sqrt2"], ["s"]),
         helper.make_node("Erf", ["s"], ["e"]),
         helper.make_node("Add", ["e", "one"], ["p"]),
         helper.make_node("Mul", ["a", "p"], ["q"]),
         helper.make_node("Mul", ["q", "half"], ["g"]),
         helper.make_node("Transpose", ["w2"], ["w2t"], perm=[1, 0]),
         helper.make_node("MatMul", ["g", "w2t"], ["y0"]),
         helper.make_node("Add", ["y0", "b2"], ["y"]),
         helper.make_node("ReduceMean", ["y"], ["loss"], keepdims=0)]
graph = helper.make_graph(nodes, "ffn",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [16, 64, 64])],
                          [helper.make_tensor_value_info("loss", TensorProto.FLOAT, [])], inits)
m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
onnx.checker.check_model(m)
onnx.save(m, (sys.argv[1] if len(sys.argv) > 1 else ".") + "/ffn.onnx")
