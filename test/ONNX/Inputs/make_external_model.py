"""Writes OUT/inline.onnx and OUT/external.onnx, the same model: its weight
(128 KB, above the importer's threshold for values kept out of the proto)
lies in OUT/weights.bin at offset 2^32 + 64 of a sparse file, its bias and a
Reshape's shape (small values, inlined by the importer) in the same file,
and OUT/lying.onnx claims a length for the weight that its dims do not need.
Usage: make_external_model.py OUT"""
import os
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

out = sys.argv[1]
rng = np.random.default_rng(3)
w = rng.standard_normal((256, 128)).astype(np.float32)
b = rng.standard_normal(128).astype(np.float32)
shape = np.array([8, 64], dtype=np.int64)


def graph(inits):
    nodes = [helper.make_node("MatMul", ["x", "w"], ["h"]),
             helper.make_node("Add", ["h", "b"], ["y"]),
             helper.make_node("Reshape", ["y", "shape"], ["z"]),
             helper.make_node("ReduceSumSquare", ["z"], ["loss"], keepdims=0)]
    return helper.make_graph(nodes, "external", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 256])],
                             [helper.make_tensor_value_info("loss", TensorProto.FLOAT, [])], inits)


def save(name, inits):
    model = helper.make_model(graph(inits), opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, os.path.join(out, name))


save("inline.onnx", [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b"),
                     numpy_helper.from_array(shape, "shape")])

offsets = {"w": 2**32 + 64, "b": 2**32 + 64 + w.nbytes, "shape": 2**32 + 64 + w.nbytes + b.nbytes}
with open(os.path.join(out, "weights.bin"), "wb") as f:
    for name, value in (("w", w), ("b", b), ("shape", shape)):
        f.seek(offsets[name])
        f.write(value.tobytes())


def external(name, value, length=None):
    t = TensorProto()
    t.name = name
    t.data_type = TensorProto.INT64 if value.dtype == np.int64 else TensorProto.FLOAT
    t.dims.extend(value.shape)
    t.data_location = TensorProto.EXTERNAL
    for k, v in (("location", "weights.bin"), ("offset", str(offsets[name])),
                 ("length", str(value.nbytes if length is None else length))):
        e = t.external_data.add()
        e.key, e.value = k, v
    return t


save("external.onnx", [external("w", w), external("b", b), external("shape", shape)])
save("lying.onnx", [external("w", w, length=2**40), external("b", b), external("shape", shape)])
