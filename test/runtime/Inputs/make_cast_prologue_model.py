"""Writes block.onnx and x.npy: x (4 x 32 x 48) -> LayerNorm -> Linear(48, 48)
-> / 8 (attention's scale) -> Softmax over its 48 columns (a multiple of 16:
the AVX-512 rows) ->
Linear(48, 48) -> residual Add -> LayerNorm -> Linear(48, 16), the mean square
as the loss. Compiled in bf16, each LayerNormalizationGrad's and the
SoftmaxGrad's dY is the fp32 widening of a bf16 GEMM gradient, and the
SoftmaxGrad's result is divided by 8 and cast to bf16 for the GEMM's."""
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

rng = np.random.default_rng(11)
D = 48


def init(name, shape, scale):
    return numpy_helper.from_array(rng.normal(0, scale, shape).astype(np.float32), name)


inits = [init("w1", (D, D), 0.3), init("w2", (D, D), 0.3), init("w3", (D, 16), 0.3),
         numpy_helper.from_array(np.ones(D, np.float32), "g1"),
         numpy_helper.from_array(np.zeros(D, np.float32), "b1"),
         numpy_helper.from_array(np.ones(D, np.float32), "g2"),
         numpy_helper.from_array(np.zeros(D, np.float32), "b2")]
nodes = [helper.make_node("Constant", [], ["scale"],
                          value=numpy_helper.from_array(np.array(8.0, np.float32), "scale")),
         helper.make_node("LayerNormalization", ["x", "g1", "b1"], ["n1"], axis=-1),
         helper.make_node("MatMul", ["n1", "w1"], ["h"]),
         helper.make_node("Div", ["h", "scale"], ["hs"]),
         helper.make_node("Softmax", ["hs"], ["p"], axis=-1),
         helper.make_node("MatMul", ["p", "w2"], ["o"]),
         helper.make_node("Add", ["o", "x"], ["r"]),
         helper.make_node("LayerNormalization", ["r", "g2", "b2"], ["n2"], axis=-1),
         helper.make_node("MatMul", ["n2", "w3"], ["y"]),
         helper.make_node("Mul", ["y", "y"], ["yy"]),
         helper.make_node("ReduceMean", ["yy"], ["loss"], keepdims=0)]
graph = helper.make_graph(nodes, "block",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 32, D])],
                          [helper.make_tensor_value_info("loss", TensorProto.FLOAT, [])], inits)
m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
onnx.checker.check_model(m)
out = sys.argv[1] if len(sys.argv) > 1 else "."
onnx.save(m, "%s/block.onnx" % out)
np.save("%s/x.npy" % out, rng.normal(0, 1.0, (4, 32, D)).astype(np.float32))
