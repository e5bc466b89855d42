"""Issue #13's benchmark: compile time and memory on large graphs and GPT-2 sized models.

Run by bench/scale.sh (a current PyTorch from PyPI in a venv). Prints markdown tables:
  1. amp-opt --train --precision=fp16 --optimizer=adamw on the generated residual MLPs of
     5k/10k/20k/40k nodes: best wall time of --repeat runs, peak memory, ratio per doubling;
     then 10k against 20k nodes, --pairs runs of each alternating, each phase's wall time from
     --time-passes: medians per phase and the total's ratio pair by pair (this host's speed
     drifts by more than the 5% the goal allows, so sizes are compared minute by minute);
  2. amp-opt on GPT-2 small and medium in fp32, bf16, fp16: wall time, peak memory, plan size;
  3. one training step of GPT-2 small: amp-run (fp32, bf16) against PyTorch eager (fp32, bf16
     autocast), AdamW, same weights, batch and threads: median step time, peak resident memory.
Models are generated with a fixed seed into --out when missing (never committed).
Usage: bench/scale.sh [--build build] [--out bench/out] [--threads 2] [--repeat 3] [--steps 4]
       [--pairs 15] [--skip-medium] [--skip-torch]
"""
import argparse
import json
import re
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections import defaultdict

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path[:0] = [HERE, os.path.join(ROOT, "test", "fixtures")]
import make_models  # noqa: E402

SIZES = (5000, 10000, 20000, 40000)


def timed(cmd):
    """Runs cmd; returns (wall seconds, peak resident bytes of the child)."""
    with tempfile.NamedTemporaryFile("r", suffix=".time") as t:
        start = time.perf_counter()
        subprocess.run(["/usr/bin/time", "-f", "%M", "-o", t.name] + cmd, check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wall = time.perf_counter() - start
        return wall, int(t.read().split()[-1]) * 1024


def best_of(cmd, repeat):
    runs = [timed(cmd) for _ in range(repeat)]
    return min(r[0] for r in runs), max(r[1] for r in runs)


def mb(n):
    return "%.0f MB" % (n / 1e6) if n < 1e9 else "%.2f GB" % (n / 1e9)


def residual_table(a, amp_opt):
    print("| nodes | seconds (best of %d) | x previous | peak memory |" % a.repeat)
    print("|---|---|---|---|")
    prev = None
    for n in SIZES:
        model = os.path.join(a.out, "residual_mlp_%d.onnx" % n)
        if not os.path.exists(model):
            make_models.residual_mlp(model, n // 5)
        wall, peak = best_of([amp_opt, model, "--train", "--precision=fp16", "--optimizer=adamw",
                              "-o", os.path.join(a.out, "residual.plan")], a.repeat)
        ratio = "%.2f" % (wall / prev) if prev else ""
        print("| %d | %.3f | %s | %s |" % (n, wall, ratio, mb(peak)))
        prev = wall


# One row of LLVM's timer table: (seconds, percent) columns, the last the wall time, then the name.
TIMER_ROW = re.compile(r"([\d.]+) \(\s*[\d.]+%\)")


def phase_times(cmd):
    """Runs cmd with --time-passes; returns {phase: wall seconds}, the sum as 'Total'."""
    err = subprocess.run(cmd + ["--time-passes"], check=True, stdout=subprocess.DEVNULL,
                         stderr=subprocess.PIPE, text=True).stderr
    times = {}
    for line in err.splitlines():
        cells = TIMER_ROW.findall(line)
        if cells:
            times[line[line.rindex("%)") + 2:].strip()] = float(cells[-1])
    if "Total" not in times:
        raise RuntimeError("no --time-passes table from: " + " ".join(cmd))
    return times


def linearity_table(a, amp_opt, small=10000, large=20000):
    """Issue #13's linearity goal, phase by phase: `large` nodes against `small`, alternating."""
    models = {}
    for n in (small, large):
        models[n] = os.path.join(a.out, "residual_mlp_%d.onnx" % n)
        if not os.path.exists(models[n]):
            make_models.residual_mlp(models[n], n // 5)
    per = {small: defaultdict(list), large: defaultdict(list)}
    ratios = []
    for i in range(a.pairs):
        got = {}
        for n in ((small, large) if i % 2 == 0 else (large, small)):
            got[n] = phase_times([amp_opt, models[n], "--train", "--precision=fp16",
                                  "--optimizer=adamw", "-o", os.path.join(a.out, "residual.plan")])
            for phase, sec in got[n].items():
                per[n][phase].append(sec)
        ratios.append(got[large]["Total"] / got[small]["Total"])
    med = statistics.median
    print("| phase (`--time-passes`, wall) | %d nodes, median s | %d nodes, median s | ratio |"
          % (small, large))
    print("|---|---|---|---|")
    phases = sorted((p for p in per[large] if p != "Total"), key=lambda p: -med(per[large][p]))
    for phase in phases + ["Total"]:
        x, y = med(per[small][phase]), med(per[large][phase])
        name = "**Total**" if phase == "Total" else phase
        print("| %s | %.4f | %.4f | %s |" % (name, x, y, "%.2f" % (y / x) if x > 0 else ""))
    q = statistics.quantiles(ratios, n=4, method="inclusive") if len(ratios) > 1 else [ratios[0]] * 3
    print("\nTotal, %d nodes over %d, pair by pair (%d pairs, sizes alternating): median %.3f, "
          "quartiles %.3f-%.3f, range %.3f-%.3f" % (large, small, len(ratios), med(ratios), q[0],
                                                     q[2], min(ratios), max(ratios)))


def gpt2_model(a, size):
    path = os.path.join(a.out, "gpt2_%s.onnx" % size)
    if not os.path.exists(path):
        make_models.export_gpt2(path, size)
    return path


def compile_table(a, amp_opt, sizes):
    print("| model (onnx bytes) | precision | seconds | peak memory | peak / model bytes | plan |")
    print("|---|---|---|---|---|---|")
    for size in sizes:
        model = gpt2_model(a, size)
        model_bytes = os.path.getsize(model)
        for prec in ("fp32", "bf16", "fp16"):
            plan = os.path.join(a.out, "gpt2_%s.%s.plan" % (size, prec))
            wall, peak = best_of([amp_opt, model, "--train", "--precision=" + prec,
                                  "--optimizer=adamw", "-o", plan], 1)
            print("| GPT-2 %s (%s) | %s | %.2f | %s | %.2f | %s |" % (
                size, mb(model_bytes), prec, wall, mb(peak), peak / model_bytes,
                mb(os.path.getsize(plan))))


def ampc_step(a, amp_run, plan, data):
    metrics = plan + ".jsonl"
    _, peak = timed([amp_run, plan, "--data", data, "--steps", str(a.steps), "--threads",
                     str(a.threads), "--quiet", "--metrics", metrics])
    with open(metrics) as f:
        seconds = [json.loads(line)["seconds"] for line in f]
    return statistics.median(seconds[1:]), peak


def torch_step_child(prec, threads, steps):
    """In a child process: PyTorch's step on GPT-2 small; prints median seconds and peak RSS."""
    import numpy as np
    import torch
    import torch2_models
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    model = torch2_models.Decoder(vocab=50257, seq=128, **make_models.GPT2_SIZES["small"])
    d = np.load(os.path.join(sys.argv[-1], "gpt2_small.npz"))
    x, target = torch.from_numpy(d["x"]), torch.from_numpy(d["target"])
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    times = []
    for _ in range(steps):
        start = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=prec == "bf16"):
            loss = model(x, target)
        loss.backward()
        opt.step()
        times.append(time.perf_counter() - start)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    print(json.dumps({"seconds": statistics.median(times[1:]), "peak": peak}))


def step_table(a, amp_run):
    data = os.path.join(a.out, "gpt2_small.npz")
    print("| GPT-2 small, batch 4, seq 128, %d threads | step seconds (median) | peak resident |"
          % a.threads)
    print("|---|---|---|")
    for prec in ("fp32", "bf16"):
        plan = os.path.join(a.out, "gpt2_small.%s.plan" % prec)
        sec, peak = ampc_step(a, amp_run, plan, data)
        print("| ampc %s | %.3f | %s |" % (prec, sec, mb(peak)))
        if a.skip_torch:
            continue
        env = dict(os.environ)
        env.pop("OPENBLAS_CORETYPE", None)
        out = subprocess.run([sys.executable, __file__, "--torch-child", prec, str(a.threads),
                              str(a.steps), a.out], check=True, stdout=subprocess.PIPE,
                             text=True, env=env).stdout
        r = json.loads(out.strip().splitlines()[-1])
        print("| PyTorch eager %s | %.3f | %s |" % (prec + (" autocast" if prec == "bf16" else ""),
                                                   r["seconds"], mb(r["peak"])))


def main():
    if "--torch-child" in sys.argv:
        i = sys.argv.index("--torch-child")
        torch_step_child(sys.argv[i + 1], int(sys.argv[i + 2]), int(sys.argv[i + 3]))
        return
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--out", default=os.path.join(ROOT, "bench", "out"))
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--pairs", type=int, default=15,
                    help="10k/20k-node compiles for the per-phase linearity table (0: skip)")
    ap.add_argument("--skip-medium", action="store_true")
    ap.add_argument("--skip-torch", action="store_true")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    amp_opt = os.path.join(a.build, "bin", "amp-opt")
    amp_run = os.path.join(a.build, "bin", "amp-run")
    print("## Residual MLP, amp-opt --train --precision=fp16 --optimizer=adamw\n")
    residual_table(a, amp_opt)
    if a.pairs > 0:
        print("\n## Linearity, 10,000 against 20,000 nodes, per phase\n")
        linearity_table(a, amp_opt)
    print("\n## GPT-2 compile, amp-opt --train --precision=P --optimizer=adamw\n")
    compile_table(a, amp_opt, ("small",) if a.skip_medium else ("small", "medium"))
    print("\n## GPT-2 small training step, AdamW\n")
    step_table(a, amp_run)


if __name__ == "__main__":
    main()
