"""The GPU kit's timings (run by the kit's run.sh on the GPU machine; docs/cuda.md): for each
bench model of bench/gpu_models.py, in bf16 and fp16, amp-run's step (--backend=cuda, CUDA
graphs on) against PyTorch AMP on the same GPU: the same model (bench/peer_models.py), the
plan's own initial weights, the same batch and AdamW (lr 1e-3), `torch.autocast` with a
`GradScaler` for fp16, as a PyTorch AMP user writes it. Median step time after warm-up
(amp-run: its --metrics; torch: CUDA-synchronised wall time), and the share of amp-run's step
spent in GEMM and convolution launches (its --profile trace). Writes OUT/table.md.
"""
import argparse
import json
import lzma
import os
import shutil
import statistics
import subprocess
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)


def make_data(spec, path):
    rng = np.random.default_rng(0)
    arrays = {}
    for name, s in spec["inputs"].items():
        if "high" in s:
            arrays[name] = rng.integers(0, s["high"], size=s["shape"]).astype(s["dtype"])
        else:
            arrays[name] = rng.normal(size=s["shape"]).astype(s["dtype"])
    np.savez(path, **arrays)
    return arrays


def run(cmd):
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if p.returncode:
        raise RuntimeError("%s: %s" % (" ".join(cmd[:2]), p.stdout.strip().splitlines()[-1:]))
    return p.stdout


def ampc_step(amp_run, plan, data, steps, warmup, out):
    metrics = plan + ".jsonl"
    run([amp_run, plan, "--backend=cuda", "--data", data, "--steps", str(steps + warmup),
         "--quiet", "--metrics", metrics])
    rows = [json.loads(line) for line in open(metrics)]
    trace = plan + ".trace.json"
    run([amp_run, plan, "--backend=cuda", "--data", data, "--steps", "3", "--quiet",
         "--profile", trace])
    events = json.load(open(trace))["traceEvents"]
    total = sum(e["dur"] for e in events)
    heavy = sum(e["dur"] for e in events
                if "gemm" in e["cat"].lower() or e["name"].split(" ")[0] in ("Conv", "ampc.ConvGrad"))
    return statistics.median(r["seconds"] for r in rows[warmup:]), heavy / max(total, 1e-9)


def initial_weights(amp_run, plan, data, out):
    d = os.path.join(out, "initial")
    shutil.rmtree(d, ignore_errors=True)
    run([amp_run, plan, "--backend=cuda", "--data", data, "--steps", "0", "--quiet",
         "--dump-params", d])
    return {f[:-4]: np.load(os.path.join(d, f)) for f in os.listdir(d) if f.endswith(".npy")}


def torch_step(name, spec, arrays, weights, precision, steps, warmup):
    import torch
    import peer_models
    model, _ = peer_models.build(name, spec["batch"])
    state = model.state_dict()
    loaded = 0
    for k, v in weights.items():
        if k in state and tuple(state[k].shape) == v.shape:
            state[k] = torch.from_numpy(v)
            loaded += 1
    model.load_state_dict(state)
    model = model.cuda().train()
    x, target = (torch.from_numpy(arrays[k]).cuda() for k in ("x", "target"))
    dtype = torch.bfloat16 if precision == "bf16" else torch.float16
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    scaler = torch.amp.GradScaler("cuda", enabled=precision == "fp16")
    times = []
    for i in range(steps + warmup):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=dtype):
            loss = model(x, target)
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        torch.cuda.synchronize()
        if i >= warmup:
            times.append(time.perf_counter() - t0)
    return statistics.median(times), loaded


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--kit", required=True)
    ap.add_argument("--amp-run", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--warmup", type=int, default=5)
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    bench = os.path.join(a.kit, "bench")
    models = json.load(open(os.path.join(bench, "models.json")))
    lines = ["| model (batch) | precision | ampc ms/step | torch AMP ms/step | ampc / torch | "
             "GEMM+conv share of ampc's step |", "|---|---|---|---|---|---|"]
    failed = False
    for name, spec in models.items():
        data = os.path.join(a.out, name + ".npz")
        arrays = make_data(spec, data)
        for precision in ("bf16", "fp16"):
            plan = os.path.join(a.out, "%s.%s.plan" % (name, precision))
            with lzma.open(os.path.join(bench, os.path.basename(plan) + ".xz")) as src, \
                    open(plan, "wb") as dst:
                shutil.copyfileobj(src, dst)
            try:
                ours, share = ampc_step(a.amp_run, plan, data, a.steps, a.warmup, a.out)
                weights = initial_weights(a.amp_run, plan, data, a.out)
                theirs, loaded = torch_step(name, spec, arrays, weights, precision, a.steps,
                                            a.warmup)
                print("%s %s: torch got %d of %d parameters from the plan" %
                      (name, precision, loaded, len(weights)))
                lines.append("| %s (%d) | %s | %.2f | %.2f | %.2f | %.0f%% |" %
                             (name, spec["batch"], precision, ours * 1e3, theirs * 1e3,
                              ours / theirs, share * 100))
            except Exception as e:  # one model's failure is reported, the others still run
                failed = True
                print("%s %s: %s" % (name, precision, e))
                lines.append("| %s (%d) | %s | failed | | | |" % (name, spec["batch"], precision))
            sys.stdout.flush()
    table = "\n".join(lines) + "\n"
    open(os.path.join(a.out, "table.md"), "w").write(table)
    print(table)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
