"""The GPU kit's bench models (scripts/gpu-kit.sh; run through bench/gpu-models.sh, which makes
the venv with torch from PyPI): the models of bench/peer_models.py at batches that fill a GPU,
exported with ampc.export and compiled here to bf16 and fp16 AdamW plans (lr 1e-3), into
bench/out/gpu with models.json (the inputs' shapes and ranges and the batch), which
bench/gpu_peer.py reads on the GPU machine. No ONNX file and no data travel: the GPU side
generates the batch from a seed and gives PyTorch the plan's own initial weights (amp-run
--dump-params after 0 steps).

The weights are rounded to multiples of 2^-10 before export: the plans then compress about
fourfold in the kit (which has 60 MiB for everything), and a step's time does not depend on
the weights' values.
"""
import argparse
import copy
import json
import os
import subprocess
import sys
import warnings

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(ROOT, "python"))
import ampc  # noqa: E402
import peer_models  # noqa: E402

GPU_BATCH = {"gpt": 256, "resnet20": 512, "wide_mlp": 8192}


def spec(tensor, high=None):
    """How gpu_peer.py regenerates an input: shape, dtype, and the integer range or normal."""
    s = {"shape": list(tensor.shape), "dtype": str(tensor.dtype).replace("torch.", "")}
    if high is not None:
        s["high"] = high
    return s


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--out", default=os.path.join(ROOT, "bench", "out", "gpu"))
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    amp_opt = os.path.join(args.build, "bin", "amp-opt")
    models = {}
    for name, batch in GPU_BATCH.items():
        model, (x, target) = peer_models.build(name, batch)
        with torch.no_grad():
            for p in model.parameters():
                p.copy_(torch.round(p * 1024) / 1024)
        onnx_path = os.path.join(args.out, name + ".onnx")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            trained = ampc.export(copy.deepcopy(model), (x, target), onnx_path)
        classes = 1000 if name == "gpt" else 10
        models[name] = {
            "batch": batch,
            "inputs": {"x": spec(x, 1000 if name == "gpt" else None), "target": spec(target, classes)},
            "parameters": list(trained),
        }
        for precision in ("bf16", "fp16"):
            plan = os.path.join(args.out, "%s.%s.plan" % (name, precision))
            subprocess.run([amp_opt, onnx_path, "--train", "--optimizer=adamw", "--lr=1e-3",
                            "--precision=" + precision, "-o", plan], check=True,
                           stderr=subprocess.DEVNULL)
            subprocess.run(["xz", "-T2", "-f", plan], check=True)
        os.remove(onnx_path)
        print("gpu bench model %s: batch %d" % (name, batch))
    with open(os.path.join(args.out, "models.json"), "w") as f:
        json.dump(models, f, indent=1)


if __name__ == "__main__":
    main()
