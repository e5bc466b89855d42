# lit configuration of ampc's test suite: ONNX text in, FileCheck on what the
# tools print. Each test file holds its own RUN lines.
import os

import lit.formats

config.name = "ampc"
config.test_format = lit.formats.ShTest(execute_external=True)
config.suffixes = [".onnxtxt", ".test"]
config.excludes = ["Inputs", "fixtures", "unit", "corpus", "fuzz", "CMakeLists.txt", "lit.cfg.py",
                   "lit.site.cfg.py.in"]
config.test_source_root = os.path.dirname(__file__)
config.test_exec_root = os.path.join(config.ampc_obj_root, "test")

config.environment["PATH"] = os.pathsep.join(
    [config.ampc_tools_dir, config.llvm_tools_dir, config.environment.get("PATH", "")])
# Tools print plain errors (no colour) so tests can match them.
config.environment["TERM"] = "dumb"

fixtures = os.path.join(config.ampc_src_root, "test", "fixtures")
config.substitutions.append(("%fixtures", fixtures))
config.substitutions.append(("%python", "/usr/bin/python3"))
config.substitutions.append(("%scripts", os.path.join(config.ampc_src_root, "test", "scripts")))

if config.ampc_have_cuda:
    config.available_features.add("cuda-build")

# The CPU backend's AVX-512 build with SLEEF (its transcendentals and the
# kernels of fused programs that use them) on a CPU that runs it: the flags
# useAvx512 asks for (runtime/cpu/KernelHelpers.cpp).
def _cpu_flags():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("flags"):
                    return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()
if config.ampc_have_sleef and {"avx512f", "avx512bw", "avx512vl", "avx512dq", "avx2", "f16c",
                                "fma"} <= _cpu_flags():
    config.available_features.add("avx512-sleef")

# Data-parallel tests: amp-run built with MPI and an mpirun to start ranks
# (Open MPI refuses root without --allow-run-as-root; 2 cores need
# --oversubscribe for 4 ranks).
import shutil as _shutil
if config.ampc_have_mpi and _shutil.which("mpirun"):
    config.available_features.add("mpi")
    config.substitutions.append(
        ("%mpirun", "mpirun --allow-run-as-root --oversubscribe --bind-to none"))

# A machine with an NVIDIA GPU (nvidia-smi lists one): tests of the no-GPU
# fallback are unsupported there, and tests that need a GPU require it.
import shutil
import subprocess
if shutil.which("nvidia-smi"):
    smi = subprocess.run(["nvidia-smi", "-L"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    if smi.returncode == 0 and b"GPU" in smi.stdout:
        config.available_features.add("cuda-device")
