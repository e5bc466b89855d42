"""Issue #16's benchmark: data-parallel training step time and scaling at 1, 2 and 4 ranks.

For each model of bench/peer_models.py named by --models (the bench MLP and the GPT by default):
exports it with ampc.export at the per-rank batch, compiles one AdamW (lr 1e-3) plan with
--data-parallel, and trains it with W ranks (`mpirun -np W amp-run ... --threads 1`; W = 1 runs
the same plan without mpirun), reading rank 0's --metrics: the median step after warm-up. A
second run with AMPC_CPU_PROFILE=1 gives the share of the step that rank 0 spends in
ampc.AllReduce (the gradient buckets' communication, waiting for the slower ranks included).
Beside it, PyTorch DistributedDataParallel (gloo, one thread a rank, processes made by
torch.multiprocessing) trains the same model (same seed, same weights) on the same shards of the
same global batch with AdamW lr 1e-3; its communication share is estimated as
(DDP step - no_sync step) / DDP step, the no_sync step being the same step without the gradient
all-reduce.

The per-rank batch is fixed (weak scaling): the global batch is W x --batch-<model>, and the
scaling efficiency is the throughput at W over W x the throughput at 1, i.e. t(1) / t(W).
Prints one markdown table. Run through bench/dist.sh (torch from PyPI in a venv); needs Open MPI
(mpirun) and an ampc build with MPI. More ranks than cores oversubscribe the machine: the
efficiency then measures contention, not communication.
Usage: bench/dist.sh [--build build] [--out bench/out/dist] [--ranks 1,2,4]
       [--models wide_mlp,gpt] [--steps 20] [--warmup 5] [--batch-wide_mlp 64] [--batch-gpt 4]
       [--skip-torch]
"""
import argparse
import copy
import json
import os
import re
import shlex
import socket
import statistics
import subprocess
import sys
import time
import warnings

import numpy as np
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(ROOT, "python"))
import ampc  # noqa: E402
import peer_models  # noqa: E402

BATCH = {"wide_mlp": 64, "gpt": 4, "resnet20": 16}  # per rank


# --- ampc ---------------------------------------------------------------------------------------

def ampc_command(a, plan, data, ranks, steps, metrics, extra_env=None, stderr_dir=None):
    """amp-run on `ranks` ranks; with stderr_dir, each rank's stderr goes to stderr_dir/rank.R."""
    run = [os.path.join(a.build, "bin", "amp-run"), plan, "--backend=cpu", "--threads", "1",
           "--data", data, "--steps", str(steps), "--quiet", "--metrics", metrics]
    if ranks == 1:
        return run
    cmd = ["mpirun", "--allow-run-as-root", "--oversubscribe", "--bind-to", "none",
           "-np", str(ranks)]
    for k in (extra_env or {}):
        cmd += ["-x", k]
    if stderr_dir:
        # Every rank's own stderr file (Open MPI sets OMPI_COMM_WORLD_RANK in each rank).
        wrapped = "exec %s 2> %s/rank.$OMPI_COMM_WORLD_RANK" % (
            " ".join(shlex.quote(x) for x in run), shlex.quote(stderr_dir))
        return cmd + ["bash", "-c", wrapped]
    return cmd + run


def ampc_run(a, plan, data, ranks, steps, metrics, profile=False, out_dir=None):
    env = dict(os.environ, OMP_NUM_THREADS="1")
    extra = {}
    if profile:
        env["AMPC_CPU_PROFILE"] = "1"
        extra["AMPC_CPU_PROFILE"] = "1"
    if os.path.exists(metrics):
        os.remove(metrics)
    stderr_dir = None
    if profile and ranks > 1:
        stderr_dir = os.path.join(out_dir, "stderr.%d" % ranks)
        os.makedirs(stderr_dir, exist_ok=True)
    cmd = ampc_command(a, plan, data, ranks, steps, metrics, extra, stderr_dir)
    r = subprocess.run(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    if r.returncode:
        raise RuntimeError("%s failed (%d): %s" % (" ".join(cmd[:8]), r.returncode,
                                                    r.stderr.strip()[-800:]))
    if stderr_dir:
        with open(os.path.join(stderr_dir, "rank.0")) as f:
            return f.read()
    return r.stderr


def median_step(metrics, warmup):
    rows = [json.loads(line) for line in open(metrics) if line.strip()]
    times = [r["seconds"] for r in rows[warmup:]] or [r["seconds"] for r in rows]
    return statistics.median(times)


def allreduce_share(profile_text):
    """The ampc.AllReduce share of the program that holds it (AMPC_CPU_PROFILE's by-operator
    lines: '  <ms> ms <pct>%  <count> x <op>'), or None."""
    share = None
    for line in profile_text.splitlines():
        m = re.match(r"\s*([\d.]+) ms\s+([\d.]+)%\s+\d+ x ampc\.AllReduce\s*$", line)
        if m:
            share = float(m.group(2)) / 100
    return share


# --- torch DDP ----------------------------------------------------------------------------------

def ddp_worker(rank, world, port, name, per_rank, steps, warmup, result):
    os.environ["OMP_NUM_THREADS"] = "1"
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method="tcp://127.0.0.1:%d" % port, rank=rank,
                            world_size=world)
    model, (x, target) = peer_models.build(name, per_rank * world)  # seeded: same on every rank
    x, target = x[rank::world].contiguous(), target[rank::world].contiguous()  # amp-run's shard
    ddp = torch.nn.parallel.DistributedDataParallel(model.train())
    opt = torch.optim.AdamW(ddp.parameters(), lr=1e-3)

    def step():
        opt.zero_grad(set_to_none=True)
        ddp(x, target).backward()
        opt.step()

    def timed(fn, n):
        times = []
        for _ in range(n):
            t0 = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t0)
        return times

    timed(step, warmup)
    synced = timed(step, steps)

    def local_step():
        with ddp.no_sync():
            step()

    dist.barrier()
    timed(local_step, min(warmup, 2))
    local = timed(local_step, steps)
    dist.barrier()
    if rank == 0:
        with open(result, "w") as f:
            json.dump({"ddp": statistics.median(synced), "no_sync": statistics.median(local)}, f)
    dist.destroy_process_group()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def torch_ddp(name, per_rank, world, steps, warmup, out):
    result = os.path.join(out, "torch_%s_%d.json" % (name, world))
    if os.path.exists(result):
        os.remove(result)
    mp.spawn(ddp_worker, args=(world, free_port(), name, per_rank, steps, warmup, result),
             nprocs=world, join=True)
    with open(result) as f:
        return json.load(f)


# --- the table ----------------------------------------------------------------------------------

def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--out", default=os.path.join(ROOT, "bench", "out", "dist"))
    ap.add_argument("--ranks", default="1,2,4")
    ap.add_argument("--models", default="wide_mlp,gpt")
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=5)
    for m, b in BATCH.items():
        ap.add_argument("--batch-" + m, type=int, default=b, help="per-rank batch of " + m)
    ap.add_argument("--skip-torch", action="store_true")
    a = ap.parse_args()
    a.build = os.path.abspath(a.build)
    a.out = os.path.abspath(a.out)
    os.makedirs(a.out, exist_ok=True)
    ranks = [int(r) for r in a.ranks.split(",")]
    amp_opt = os.path.join(a.build, "bin", "amp-opt")

    print("ampc data parallel (mpirun, MPI) against torch %s DDP (gloo); AdamW lr 1e-3, 1 thread a "
          "rank, fixed per-rank batch; median of %d steps after %d warm-up steps; %d cores\n"
          % (torch.__version__, a.steps, a.warmup, os.cpu_count()))
    print("| model | ranks | global batch | ampc ms/step | ampc efficiency | ampc AllReduce share "
          "| torch DDP ms/step | torch efficiency | torch comm share (est.) | ampc/torch |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    sys.stdout.flush()
    notes = []
    for name in a.models.split(","):
        per_rank = getattr(a, "batch_" + name)
        model, batch = peer_models.build(name, per_rank)
        onnx_path = os.path.join(a.out, "dist_%s_b%d.onnx" % (name, per_rank))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            ampc.export(copy.deepcopy(model), batch, onnx_path)
        plan = onnx_path[:-5] + ".plan"
        subprocess.run([amp_opt, onnx_path, "--train", "--optimizer=adamw", "--lr=1e-3",
                        "--data-parallel", "-o", plan], check=True, stderr=subprocess.DEVNULL)
        base_ampc = base_torch = None
        for w in ranks:
            # One global batch of w x per_rank samples (rank r reads samples r, r+w, ...).
            _, (x, target) = peer_models.build(name, per_rank * w)
            data = os.path.join(a.out, "dist_%s_b%d_w%d.npz" % (name, per_rank, w))
            np.savez(data, x=x.numpy(), target=target.numpy())
            metrics = os.path.join(a.out, "dist_%s_w%d.jsonl" % (name, w))
            ours = share = None
            try:
                ampc_run(a, plan, data, w, a.steps + a.warmup, metrics)
                ours = median_step(metrics, a.warmup)
                prof = ampc_run(a, plan, data, w, a.steps + a.warmup, metrics + ".prof",
                                profile=True, out_dir=a.out)
                share = allreduce_share(prof)
                with open(os.path.join(a.out, "profile_%s_w%d.txt" % (name, w)), "w") as f:
                    f.write(prof)
            except RuntimeError as e:
                notes.append("ampc %s at %d ranks: %s" % (name, w, e))
            theirs = None
            if not a.skip_torch:
                try:
                    theirs = torch_ddp(name, per_rank, w, a.steps, a.warmup, a.out)
                except Exception as e:  # say why, keep the row
                    notes.append("torch %s at %d ranks: %s" % (name, w, str(e).splitlines()[0][:200]))
            if w == 1:
                base_ampc = ours
                base_torch = theirs and theirs["ddp"]
            fmt = lambda v, f="%.1f": "-" if v is None else f % v  # noqa: E731
            eff_a = base_ampc / ours if ours and base_ampc else None
            eff_t = base_torch / theirs["ddp"] if theirs and base_torch else None
            t_share = None
            if theirs:
                t_share = max(0.0, (theirs["ddp"] - theirs["no_sync"]) / theirs["ddp"])
            ratio = ours / theirs["ddp"] if ours and theirs else None
            print("| %s | %d | %d | %s | %s | %s | %s | %s | %s | %s |" % (
                name, w, per_rank * w, fmt(ours and ours * 1e3), fmt(eff_a, "%.2f"),
                fmt(share and share * 100, "%.1f%%") if share is not None else "-",
                fmt(theirs and theirs["ddp"] * 1e3), fmt(eff_t, "%.2f"),
                fmt(t_share * 100, "%.1f%%") if t_share is not None else "-", fmt(ratio, "%.2f")))
            sys.stdout.flush()
    print()
    print("efficiency: throughput at W ranks / (W x throughput at 1 rank) = t(1) / t(W), per-rank "
          "batch fixed. ampc AllReduce share: rank 0's ampc.AllReduce time over its step "
          "(AMPC_CPU_PROFILE=1, warm-up included), waiting for slower ranks included. torch comm "
          "share: (DDP step - no_sync step) / DDP step.")
    if max(ranks) > (os.cpu_count() or 1):
        print("%d ranks on %d cores oversubscribe the machine: those rows measure contention." %
              (max(ranks), os.cpu_count()))
    for n in notes:
        print("note: " + n)


if __name__ == "__main__":
    main()
