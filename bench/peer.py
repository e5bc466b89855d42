"""ampc against current PyTorch on the CPU (issue #12): training step time, side by side.

For each model of bench/peer_models.py: exports it with ampc.export, compiles fp32 and bf16
AdamW plans, times amp-run (median step after warm-up, from --metrics), and times torch eager
and torch.compile on the same weights, batch, optimizer and thread count, fp32 and bf16
(torch.autocast on the CPU). Prints a markdown table with the ratios; run through
bench/peer.sh, which makes the venv with torch from PyPI. The benchmark only: tests never
need torch.

The host's speed drifts by 20-30% over minutes, so the three are timed in --rounds
interleaved rounds (ampc, eager, compiled, the order rotating from round to round), each a
median of --steps steps after --warmup; the table gives each one's median over the rounds and
the median over the rounds of ampc / best torch within a round.
"""
import argparse
import copy
import json
import os
import statistics
import subprocess
import sys
import time
import warnings

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(ROOT, "python"))
import ampc  # noqa: E402
import peer_models  # noqa: E402


class TorchRunner:
    """A copy of the model with its AdamW optimizer (compiled once with torch.compile),
    timed again and again: the median step of each call, after its warm-up steps."""

    def __init__(self, model, args, precision, compiled):
        self.m = copy.deepcopy(model).train()
        self.opt = torch.optim.AdamW(self.m.parameters(), lr=1e-3)
        self.args, self.precision = args, precision
        if compiled:
            self.m = torch.compile(self.m)

    def step(self):
        self.opt.zero_grad(set_to_none=True)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=self.precision == "bf16"):
            loss = self.m(*self.args)
        loss.backward()
        self.opt.step()

    def time(self, steps, warmup):
        times = []
        for i in range(steps + warmup):
            t0 = time.perf_counter()
            self.step()
            if i >= warmup:
                times.append(time.perf_counter() - t0)
        return statistics.median(times)


def ampc_compile(bin_dir, onnx_path, precision, out):
    plan = os.path.join(out, os.path.basename(onnx_path)[:-5] + "." + precision + ".plan")
    subprocess.run([os.path.join(bin_dir, "amp-opt"), onnx_path, "--train", "--optimizer=adamw",
                    "--lr=1e-3", "--precision=" + precision, "-o", plan], check=True,
                   stderr=subprocess.DEVNULL)
    return plan


def ampc_time(bin_dir, plan, data, threads, steps, warmup):
    metrics = plan + ".jsonl"
    subprocess.run([os.path.join(bin_dir, "amp-run"), plan, "--backend=cpu", "--threads",
                    str(threads), "--steps", str(steps + warmup), "--quiet", "--data", data,
                    "--metrics", metrics], check=True, stdout=subprocess.DEVNULL)
    rows = [json.loads(line) for line in open(metrics)]
    return statistics.median(r["seconds"] for r in rows[warmup:])


def interleaved(timers, rounds):
    """Runs every timer once a round, the order rotating from round to round; returns the
    list of each one's times."""
    times = [[] for _ in timers]
    for r in range(rounds):
        for k in range(len(timers)):
            i = (k + r) % len(timers)
            times[i].append(timers[i]())
    return times


# Operators that run in oneDNN's GEMM and convolution primitives.
ONEDNN_OPS = ("MatMul", "Gemm", "Conv", "ampc.ConvGrad")


def step_profile(bin_dir, plan, data, threads, steps):
    """The step's milliseconds by operator (AMPC_CPU_PROFILE) and their total."""
    env = dict(os.environ, AMPC_CPU_PROFILE="1")
    out = subprocess.run([os.path.join(bin_dir, "amp-run"), plan, "--backend=cpu", "--threads",
                          str(threads), "--steps", str(steps), "--quiet", "--data", data],
                         check=True, capture_output=True, text=True, env=env)
    out = out.stdout + out.stderr
    section = out.split("profile of program 'step'")[1]
    # "profile of program 'step': 54.264 ms per run over 30 runs"
    total = float(section.split(":", 1)[1].split()[0])
    by_op = {}
    for line in section.split("by step:")[0].splitlines():
        parts = line.split()
        # "   103.681 ms  64.8%    75 x MatMul"
        if len(parts) >= 6 and parts[1] == "ms" and parts[4] == "x":
            by_op[parts[5]] = float(parts[0])
    return total, by_op


def onednn_share(total, by_op):
    """Fraction of the step in oneDNN's GEMMs and convolutions."""
    return sum(ms for op, ms in by_op.items() if op in ONEDNN_OPS) / total


def ceiling(bin_dir, plan, threads):
    """GEMM and convolution FLOPs, the oneDNN GEMM ceiling and the machine's peak."""
    out = subprocess.run([os.path.join(bin_dir, "ampc-bench-gemm-ceiling"), plan, str(threads)],
                         check=True, capture_output=True, text=True).stdout
    return json.loads(out)


def print_bounds(rows):
    """What the hardware allows: the step's GEMMs alone, at the speed oneDNN runs each of
    them in isolation (the GEMM ceiling), and its GEMM and convolution FLOPs at the best
    rate of a large oneDNN GEMM (the peak) and, for fp32, at the rate of FMA instructions
    alone (which no fp32 GEMM beats), against the goal of 0.7x the best torch."""
    # The peak: the best of every measurement of the run (a noisy machine only
    # ever makes a measurement slower).
    peaks = {k: max(r["c"][k] for r in rows)
             for k in ("peak_gflops_f32", "peak_gflops_bf16", "fma_peak_gflops_f32")}
    native_bf16 = rows[0]["c"]["bf16_native"]
    print("\nGEMM and convolution work against this machine (oneDNN peak: %.0f GFLOP/s fp32, "
          "%.0f GFLOP/s bf16 native; fp32 FMA instructions alone: %.0f GFLOP/s; bf16 steps "
          "run %s):\n" %
          (peaks["peak_gflops_f32"], peaks["peak_gflops_bf16"], peaks["fma_peak_gflops_f32"],
           "natively" if native_bf16 else "on fp32 copies"))
    print("| model | precision | GEMM + conv GFLOP | at peak ms | fp32 at FMA peak ms | "
          "GEMM ceiling ms | AdamW MB | 0.7 x best torch ms | left for the rest ms | "
          "ampc in oneDNN | ampc / bound |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        c = r["c"]
        native = r["precision"] == "bf16" and c["bf16_native"]
        peak = peaks["peak_gflops_bf16" if native else "peak_gflops_f32"]
        gflop = c["gemm_gflop"] + c["conv_gflop"]
        at_peak = gflop / peak * 1e3
        # A step is no faster than its GEMMs alone plus its convolutions at peak.
        bound = c["gemm_ceiling_ms"] + c["conv_gflop"] / peak * 1e3
        r["bound"] = bound
        goal = 0.7 * r["best"] * 1e3
        # No fp32 GEMM beats the FMA instructions alone (bf16 runs on other units).
        fma = peaks["fma_peak_gflops_f32"]
        at_fma = "-" if native or not fma else "%.1f" % (gflop / fma * 1e3)
        print("| %s | %s | %.2f | %.1f | %s | %.1f | %.0f | %.1f | %.1f | %.0f%% | %.2f |" %
              (r["model"], r["precision"], gflop, at_peak, at_fma, c["gemm_ceiling_ms"],
               c["optimizer_bytes"] / 1e6, goal, goal - bound, 100 * r["share"], r["ampc"] * 1e3 / bound))
    print_optimizer_floor(rows)


def print_optimizer_floor(rows):
    """What the optimizer's bytes leave for the GEMMs: the AdamW steps' bytes read and
    rewritten once with no arithmetic (the floor, measured by ampc-bench-gemm-ceiling),
    against the time ampc's steps spend in oneDNN and the bound of the table above (the GEMM
    ceiling plus the convolutions at peak). Even with every other step free, the share in
    oneDNN is at most oneDNN / (oneDNN + floor), and the step at least (bound + floor) / bound
    times that bound. The bounds take the warm floor, which holds for any step; the cold one
    (caches flushed first) is what state larger than the last-level cache costs every step."""
    print("\nThe optimizer's bytes against the GEMMs (AdamW floor: the same bytes read and "
          "written back once, no arithmetic, best of 7, warm and with the caches flushed):\n")
    print("| model | precision | AdamW MB | AdamW floor ms | cold floor ms | ampc AdamW ms | "
          "ampc in oneDNN ms | in oneDNN at most | step / bound at least |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        c = r["c"]
        floor = c["optimizer_floor_ms"]
        onednn = r["onednn_ms"]
        at_most = onednn / (onednn + floor) if onednn + floor > 0 else 0
        least = (r["bound"] + floor) / r["bound"] if r["bound"] > 0 else float("nan")
        print("| %s | %s | %.0f | %.2f | %.2f | %.2f | %.1f | %.0f%% | %.2f |" %
              (r["model"], r["precision"], c["optimizer_bytes"] / 1e6, floor,
               c["optimizer_floor_cold_ms"], r["adamw_ms"], onednn, 100 * at_most, least))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--out", default=os.path.join(ROOT, "bench", "out"))
    ap.add_argument("--models", default=",".join(peer_models.NAMES))
    ap.add_argument("--no-compile", action="store_true", help="skip torch.compile")
    ap.add_argument("--rounds", type=int, default=3,
                    help="interleaved rounds of ampc, torch eager and torch.compile")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    os.makedirs(args.out, exist_ok=True)
    bin_dir = os.path.join(args.build, "bin")
    print("torch %s, %d threads, AdamW; each: median of %d steps after %d warm-up steps, "
          "median of %d interleaved rounds (ms); the ratio: median over the rounds of ampc / "
          "best torch in the round\n" %
          (torch.__version__, args.threads, args.steps, args.warmup, args.rounds))
    print("| model | precision | ampc | torch eager | torch.compile | ampc / best torch |")
    print("|---|---|---|---|---|---|")
    ampc_ms = {}
    bounds = []
    for name in args.models.split(","):
        model, batch = peer_models.build(name)
        path = os.path.join(args.out, "peer_%s.onnx" % name)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            ampc.export(copy.deepcopy(model), batch, path)
        data = path[:-5] + ".npz"
        np.savez(data, x=batch[0].numpy(), target=batch[1].numpy())
        for precision in ("fp32", "bf16"):
            plan = ampc_compile(bin_dir, path, precision, args.out)
            eager_runner = TorchRunner(model, batch, precision, False)
            timers = [lambda: ampc_time(bin_dir, plan, data, args.threads, args.steps, args.warmup),
                      lambda: eager_runner.time(args.steps, args.warmup)]
            if not args.no_compile:
                try:
                    comp_runner = TorchRunner(model, batch, precision, True)
                    comp_runner.time(1, 1)  # compiles here, or fails
                    timers.append(lambda: comp_runner.time(args.steps, args.warmup))
                except Exception as e:  # torch.compile needs a C++ toolchain; say so
                    print("torch.compile failed: %s" % str(e).splitlines()[0][:120], file=sys.stderr)
            times = interleaved(timers, args.rounds)
            ours, eager = statistics.median(times[0]), statistics.median(times[1])
            comp = statistics.median(times[2]) if len(times) > 2 else float("nan")
            ratio = statistics.median(times[0][r] / min(ts[r] for ts in times[1:])
                                      for r in range(args.rounds))
            print("  %s %s rounds (ms): %s" % (name, precision, "; ".join(
                " ".join("%.1f" % (t * 1e3) for t in ts) for ts in times)), file=sys.stderr)
            ampc_ms[(name, precision)] = ours
            best = min(t for t in (eager, comp) if t == t)
            print("| %s | %s | %.1f | %.1f | %.1f | %.2f |" % (name, precision, ours * 1e3, eager * 1e3,
                                                           comp * 1e3, ratio))
            sys.stdout.flush()
            total, by_op = step_profile(bin_dir, plan, data, args.threads, 6)
            share = onednn_share(total, by_op)
            bounds.append({"model": name, "precision": precision, "ampc": ours, "best": best,
                           "share": share, "onednn_ms": share * ours * 1e3,
                           "adamw_ms": by_op.get("ampc.AdamW", 0.0),
                           "c": ceiling(bin_dir, plan, args.threads)})
    print_bounds(bounds)
    print()
    for name in args.models.split(","):
        if (name, "fp32") in ampc_ms and (name, "bf16") in ampc_ms:
            print("%s: ampc bf16 is %.2fx faster than ampc fp32" %
                  (name, ampc_ms[(name, "fp32")] / ampc_ms[(name, "bf16")]))


if __name__ == "__main__":
    main()
