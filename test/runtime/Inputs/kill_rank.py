"""Fault tests of data-parallel training (test/runtime/data-parallel-faults.test).

  kill_rank.py SIGNAL MPIRUN... -- AMP_RUN_ARGS...
Starts `MPIRUN amp-run AMP_RUN_ARGS` (2 ranks), waits until rank 0 has written
10 lines of --metrics metrics.jsonl, then sends SIGNAL (KILL: the rank dies;
STOP: it hangs) to rank 1, and waits at most 60 s for the whole job to end.
Prints the job's exit status class and how long it took to stop, and the
lines of the job's output that say why; exits 1 if the job hangs or exits 0.
"""
import os
import signal
import subprocess
import sys
import time


def rank_pid(rank, marker):
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            cmd = open("/proc/%s/cmdline" % pid, "rb").read().split(b"\0")
            env = open("/proc/%s/environ" % pid, "rb").read().split(b"\0")
        except OSError:
            continue
        if (cmd and cmd[0].endswith(b"amp-run") and marker.encode() in cmd and
                ("OMPI_COMM_WORLD_RANK=%d" % rank).encode() in env):
            return int(pid)
    return None


def main():
    sig = getattr(signal, "SIG" + sys.argv[1])
    split = sys.argv.index("--")
    mpirun, args = sys.argv[2:split], sys.argv[split + 1:]
    job = subprocess.Popen(mpirun + ["amp-run"] + args, stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True)
    deadline = time.time() + 60
    while time.time() < deadline and job.poll() is None:
        if os.path.exists("metrics.jsonl") and sum(1 for _ in open("metrics.jsonl")) >= 10:
            break
        time.sleep(0.05)
    pid = rank_pid(1, args[0])
    if pid is None:
        job.kill()
        sys.exit("rank 1 not found (job status %s)" % job.poll())
    os.kill(pid, sig)
    hit = time.time()
    try:
        out, _ = job.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        job.kill()
        os.kill(pid, signal.SIGKILL)
        sys.exit("the job still runs 60 s after rank 1 got %s: it hangs" % sys.argv[1])
    if sig == signal.SIGSTOP:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    took = time.time() - hit
    print("job exit: %s after %.0f s" % ("non-zero" if job.returncode else "zero", took))
    for line in out.splitlines():
        if "amp-run: error" in line or "exited on signal" in line:
            print(line.strip())
    sys.exit(0 if job.returncode else 1)


if __name__ == "__main__":
    main()
