#!/usr/bin/python3
"""Models for the benchmarks (not committed: generated into OUTDIR).

  wide_mlp.onnx       1024 -> 1024 -> 1024 -> 1024 -> 10 MLP, batch 256, cross entropy
  deep_chain.onnx     a generated graph of about 10,000 nodes (compile-time benchmark)
  chain_<n>.onnx      the same family at other sizes, to check linear growth
  conv_net.onnx       three 3x3 convolutions 64 -> 128 -> 128 -> 64 on 32x32, batch 8, MSE
                      (with conv_input.npy, conv_target.npy: bf16 convolutions, --bf16-conv)
  residual_mlp_<n>.onnx  a generated residual MLP of n nodes, 12,000 parameters at 10,000
  gpt2_small.onnx     GPT-2 small sized decoder (12 layers, d=768, 12 heads, vocab 50257, tied
                      head, 124M parameters), seq 128, batch 4, and its .npz; only with --gpt2
                      (500 MB; exported by ampc.export, so run it with a current torch:
                      $(scripts/torch-venv.sh torch onnx) bench/make_models.py OUT --gpt2)
  gpt2_medium.onnx    GPT-2 medium sized (24 layers, d=1024, 16 heads, 355M parameters); --gpt2

Usage: /usr/bin/python3 bench/make_models.py OUTDIR [--gpt2]
"""
import os
import sys

import numpy as np
import onnx
import torch
import torch.nn as nn
import torch.nn.functional as F
from onnx import TensorProto, helper, numpy_helper


class WideMLP(nn.Module):
    def __init__(self, width=1024, depth=3, classes=10):
        super().__init__()
        layers = [nn.Linear(width, width) for _ in range(depth)]
        self.hidden = nn.ModuleList(layers)
        self.out = nn.Linear(width, classes)

    def forward(self, x, target):
        for layer in self.hidden:
            x = F.relu(layer(x))
        return F.cross_entropy(self.out(x), target)


def export_wide_mlp(path):
    torch.manual_seed(0)
    model = WideMLP()
    x = torch.randn(256, 1024)
    t = torch.randint(0, 10, (256,))
    torch.onnx.export(model, (x, t), path, input_names=["input", "target"], output_names=["loss"],
                      opset_version=17, training=torch.onnx.TrainingMode.TRAINING,
                      do_constant_folding=False)


class ConvNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.c1 = nn.Conv2d(64, 128, 3, padding=1)
        self.c2 = nn.Conv2d(128, 128, 3, padding=1)
        self.c3 = nn.Conv2d(128, 64, 3, padding=1)

    def forward(self, x, target):
        y = self.c3(F.relu(self.c2(F.relu(self.c1(x)))))
        return ((y - target) ** 2).mean()


def export_conv_net(outdir):
    torch.manual_seed(0)
    x = torch.randn(8, 64, 32, 32)
    t = torch.randn(8, 64, 32, 32)
    torch.onnx.export(ConvNet(), (x, t), os.path.join(outdir, "conv_net.onnx"),
                      input_names=["input", "target"], output_names=["loss"], opset_version=17,
                      training=torch.onnx.TrainingMode.TRAINING, do_constant_folding=False)
    np.save(os.path.join(outdir, "conv_input.npy"), x.numpy())
    np.save(os.path.join(outdir, "conv_target.npy"), t.numpy())


def save_generated(path, name, nodes, inits, last, width):
    """A generated graph with input [8, width] and the mean of `last` as its loss."""
    nodes.append(helper.make_node("ReduceMean", [last], ["loss"], keepdims=0))
    graph = helper.make_graph(nodes, name,
                              [helper.make_tensor_value_info("input", TensorProto.FLOAT, [8, width])],
                              [helper.make_tensor_value_info("loss", TensorProto.FLOAT, [])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, path)


def chain_model(path, blocks):
    """A residual chain: each block is MatMul, Add, Relu, Mul, Add (5 nodes)."""
    rng = np.random.default_rng(0)
    width = 16
    nodes, inits = [], []
    prev = "input"
    for i in range(blocks):
        w = numpy_helper.from_array((rng.normal(size=(width, width)) * 0.05).astype(np.float32), "w%d" % i)
        b = numpy_helper.from_array(np.zeros(width, np.float32), "b%d" % i)
        s = numpy_helper.from_array(np.full(width, 0.5, np.float32), "s%d" % i)
        inits += [w, b, s]
        nodes += [
            helper.make_node("MatMul", [prev, "w%d" % i], ["m%d" % i]),
            helper.make_node("Add", ["m%d" % i, "b%d" % i], ["a%d" % i]),
            helper.make_node("Relu", ["a%d" % i], ["r%d" % i]),
            helper.make_node("Mul", ["r%d" % i, "s%d" % i], ["p%d" % i]),
            helper.make_node("Add", ["p%d" % i, prev], ["h%d" % i]),
        ]
        prev = "h%d" % i
    save_generated(path, "chain", nodes, inits, prev, width)


def residual_mlp(path, blocks, width=16):
    """A residual MLP with many small parameters (issue #13's compile-time graph): each
    block is Gemm(w, b), Mul(g), Add(c), PRelu(slope), Add(residual): 5 nodes, 5 parameters."""
    rng = np.random.default_rng(0)
    nodes, inits = [], []
    prev = "input"
    for i in range(blocks):
        params = {
            "w%d" % i: (rng.normal(size=(width, width)) * 0.05).astype(np.float32),
            "b%d" % i: np.zeros(width, np.float32),
            "g%d" % i: np.ones(width, np.float32),
            "c%d" % i: np.zeros(width, np.float32),
            "slope%d" % i: np.full(width, 0.1, np.float32),
        }
        inits += [numpy_helper.from_array(v, k) for k, v in params.items()]
        nodes += [
            helper.make_node("Gemm", [prev, "w%d" % i, "b%d" % i], ["m%d" % i]),
            helper.make_node("Mul", ["m%d" % i, "g%d" % i], ["s%d" % i]),
            helper.make_node("Add", ["s%d" % i, "c%d" % i], ["a%d" % i]),
            helper.make_node("PRelu", ["a%d" % i, "slope%d" % i], ["r%d" % i]),
            helper.make_node("Add", ["r%d" % i, prev], ["h%d" % i]),
        ]
        prev = "h%d" % i
    save_generated(path, "residual_mlp", nodes, inits, prev, width)


GPT2_SIZES = {"small": dict(layers=12, d=768, heads=12), "medium": dict(layers=24, d=1024, heads=16)}


def export_gpt2(path, size, seq=128, batch=4):
    """A GPT-2-sized decoder with its loss, seed 0, exported by ampc.export (python/ampc) with
    the torch this runs under (scripts/torch-venv.sh's for bench/peer.sh)."""
    here = os.path.dirname(os.path.abspath(__file__))
    sys.path[:0] = [os.path.join(here, "..", "test", "fixtures"), os.path.join(here, "..", "python")]
    import ampc
    import torch2_models
    torch.manual_seed(0)
    model = torch2_models.Decoder(vocab=50257, seq=seq, **GPT2_SIZES[size])
    x = torch.randint(0, 50257, (batch, seq))
    target = torch.roll(x, -1, 1)
    ampc.export(model, (x, target), path)
    np.savez(path.replace(".onnx", ".npz"), x=x.numpy(), target=target.numpy())


def main():
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    out = args[0] if args else "bench/out"
    os.makedirs(out, exist_ok=True)
    if "--gpt2" in sys.argv:
        for size in GPT2_SIZES:
            export_gpt2(os.path.join(out, "gpt2_%s.onnx" % size), size)
        print("GPT-2 models written to", out)
        return
    export_wide_mlp(os.path.join(out, "wide_mlp.onnx"))
    export_conv_net(out)
    for blocks in (250, 500, 1000, 2000, 4000, 8000):
        chain_model(os.path.join(out, "chain_%d.onnx" % (blocks * 5 + 1)), blocks)
    for nodes in (5000, 10000, 20000, 40000):
        residual_mlp(os.path.join(out, "residual_mlp_%d.onnx" % nodes), nodes // 5)
    print("models written to", out)


if __name__ == "__main__":
    main()
