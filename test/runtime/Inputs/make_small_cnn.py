"""Writes small_cnn.onnx and its data: a residual CNN with 16 and 32
channels (a multiple of 16: the CPU backend keeps such activations in channel
blocks), batch normalization in training and in inference mode, a strided
convolution, spatial sizes that are not a multiple of 16,
a per-channel scale (a broadcast the blocked layout cannot take), max pooling
and a global mean (plain-only steps that get converted copies)."""
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

rng = np.random.default_rng(7)
inits, nodes = [], []


def init(name, array):
    inits.append(numpy_helper.from_array(array.astype(np.float32), name))
    return name


def conv(x, cin, cout, k, stride, bias, name):
    w = init(name + ".w", rng.normal(0, (2.0 / (cin * k * k)) ** 0.5, (cout, cin, k, k)))
    ins = [x, w] + ([init(name + ".b", rng.normal(0, 0.1, cout))] if bias else [])
    nodes.append(helper.make_node("Conv", ins, [name], kernel_shape=[k, k], strides=[stride] * 2,
                                  pads=[k // 2] * 4))
    return name


def bn(x, c, name, training=True):
    ins = [x, init(name + ".s", rng.uniform(0.5, 1.5, c)), init(name + ".b", rng.normal(0, 0.1, c)),
           init(name + ".m", rng.normal(0, 0.1, c)), init(name + ".v", rng.uniform(0.5, 2, c))]
    outs = [name, name + ".rm", name + ".rv"] if training else [name]
    nodes.append(helper.make_node("BatchNormalization", ins, outs, training_mode=int(training)))
    return name


def op(kind, ins, name, **attrs):
    nodes.append(helper.make_node(kind, ins, [name], **attrs))
    return name


a = op("Relu", [bn(conv("x", 3, 16, 3, 1, True, "c0"), 16, "n0")], "a")
b = op("Relu", [op("Add", [bn(conv(a, 16, 16, 3, 1, False, "c1"), 16, "n1", training=False), a], "s1")], "b")
c = op("Relu", [bn(conv(b, 16, 32, 3, 2, True, "c2"), 32, "n2")], "c")
d = op("Relu", [op("Add", [bn(conv(c, 32, 32, 3, 1, False, "c3"), 32, "n3"), c], "s3")], "d")
f = op("Relu", [bn(conv(d, 32, 32, 3, 1, True, "c5"), 32, "n5")], "r5")
f = op("Mul", [f, init("scale", rng.uniform(0.5, 1.5, (1, 32, 1, 1)))], "f")
p = op("MaxPool", [f], "p", kernel_shape=[2, 2], strides=[2, 2])
e = op("Relu", [conv(p, 32, 32, 1, 1, True, "c4")], "e")
g = op("ReduceMean", [e], "g", axes=[2, 3], keepdims=0)
fc = op("Gemm", [g, init("fc.w", rng.normal(0, 0.2, (10, 32))), init("fc.b", np.zeros(10))], "fc",
        transB=1)
nodes.append(helper.make_node("SoftmaxCrossEntropyLoss", [fc, "t"], ["loss"]))

graph = helper.make_graph(
    nodes, "small_cnn",
    [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 3, 12, 12]),
     helper.make_tensor_value_info("t", TensorProto.INT64, [4])],
    [helper.make_tensor_value_info("loss", TensorProto.FLOAT, [])], inits)
model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
onnx.checker.check_model(model)
out = sys.argv[1]
onnx.save(model, out + "/small_cnn.onnx")
np.save(out + "/x.npy", rng.normal(0, 1, (4, 3, 12, 12)).astype(np.float32))
np.save(out + "/t.npy", rng.integers(0, 10, 4).astype(np.int64))
