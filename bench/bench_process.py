"""What the bench/ scripts share: running a configuration as its own process with its peak
memory, and naming the machine."""
import os
import subprocess
import sys
import time


def run_with_usage(command, env=None):
    """Runs `command` (in `env`, or this environment); returns (stdout, its own rusage from wait4,
    wall seconds)."""
    started = time.monotonic()
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    # Read everything first, then reap with wait4 to get this child's own rusage.
    out = process.stdout.read()
    err = process.stderr.read()
    _, status, usage = os.wait4(process.pid, 0)
    wall = time.monotonic() - started
    code = os.waitstatus_to_exitcode(status)
    if code != 0:
        sys.exit(f"{' '.join(command[:3])} … failed ({code}): {err[-2000:]}")
    return out, usage, wall


def run_measured(command, env=None):
    """Runs `command`; returns (stdout, peak resident bytes of that process, from wait4)."""
    out, usage, _ = run_with_usage(command, env)
    return out, usage.ru_maxrss * 1024


# PyTorch 1.13 frees its CPU tensors after use, and glibc gives memory above its mmap threshold
# back, so every step's large tensors are fresh pages, faulted in 4 KiB at a time where the
# kernel's THP mode is "madvise". With this tunable (glibc 2.35+) malloc advises huge pages for
# what it maps, as PyTorch's CPU tuning guides advise: PyTorch at its best, beside as it comes.
PYTORCH_HUGE_PAGES = "glibc.malloc.hugetlb=1"


def huge_pages_environment():
    return {**os.environ, "GLIBC_TUNABLES": PYTORCH_HUGE_PAGES}


def blas():
    """The BLAS behind Debian's libblas.so.3, which Debian's torch calls for fp32 matrix products
    (linear layers, bmm; its convolutions go to oneDNN). The reference (netlib) BLAS is some 50
    times slower than OpenBLAS there: a PyTorch peer with it is no peer, so it is named."""
    path = os.path.realpath("/usr/lib/x86_64-linux-gnu/libblas.so.3")
    if "openblas" in path:
        return "OpenBLAS" + (" (OpenMP)" if "openmp" in path else " (pthreads)" if "pthread" in path else "")
    if "blis" in path:
        return "BLIS"
    if "mkl" in path:
        return "MKL"
    return "reference BLAS (slow: install libopenblas0-openmp)" if os.path.exists(path) else "none"


def machine():
    """'<CPU model>, <cores> cores (<widest ISA>), PyTorch's BLAS <name>' from /proc/cpuinfo."""
    with open("/proc/cpuinfo") as f:
        text = f.read()
    cpu = next((line.split(":", 1)[1].strip() for line in text.splitlines() if line.startswith("model name")), "?")
    flags = set(next((line.split(":", 1)[1].split() for line in text.splitlines() if line.startswith("flags")), []))
    # AMX changes bf16 by several times (oneDNN's avx512_core_amx kernels): name it.
    isa = ("AVX-512 with AVX512-BF16 and AMX" if {"avx512_bf16", "amx_bf16"} <= flags
           else "AVX-512 with AVX512-BF16" if "avx512_bf16" in flags
           else "AVX-512" if "avx512f" in flags else "AVX2")
    which = blas()
    if which.startswith("reference"):
        print(f"warning: PyTorch's fp32 matrix products run on the {which}", file=sys.stderr)
    return f"{cpu}, {os.cpu_count()} cores ({isa}), PyTorch's BLAS {which}"
