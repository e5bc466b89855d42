#!/usr/bin/python3
"""PyTorch's training step time on the CPU, for comparison with amp-run.

Times forward + backward + optimizer.step() of the same models ampc compiles
(the fixtures and the wide MLP), with torch.autocast(cpu, bfloat16) for bf16.
Usage: /usr/bin/python3 bench/torch_step.py MODEL(mlp|cnn|transformer|wide_mlp) fp32|bf16 THREADS STEPS
Prints: median seconds per step.
"""
import os
import statistics
import sys
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "test", "fixtures"))
import make_fixtures  # noqa: E402
sys.path.insert(0, os.path.dirname(__file__))
import make_models  # noqa: E402


def build(name):
    torch.manual_seed(0)
    if name == "wide_mlp":
        model = make_models.WideMLP()
        batch = (torch.randn(256, 1024), torch.randint(0, 10, (256,)))
    else:
        factory = {"mlp": make_fixtures.MLP, "cnn": make_fixtures.CNN,
                   "transformer": make_fixtures.TransformerBlock}[name]
        model = factory()
        batch = make_fixtures.make_batch(name, torch.Generator().manual_seed(0))
    return model, batch


def main():
    name, precision, threads, steps = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    torch.set_num_threads(threads)
    model, batch = build(name)
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    times = []
    for i in range(steps + 3):
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        if precision == "bf16":
            with torch.autocast("cpu", dtype=torch.bfloat16):
                loss = model(*batch)
        else:
            loss = model(*batch)
        loss.backward()
        opt.step()
        if i >= 3:
            times.append(time.perf_counter() - t0)
    print("%.6f" % statistics.median(times))


if __name__ == "__main__":
    main()
