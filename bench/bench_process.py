"""What the bench/ scripts share: running a configuration as its own process with its peak
memory, and naming the machine."""
import os
import subprocess
import sys


def run_measured(command):
    """Runs `command`; returns (stdout, peak resident bytes of that process, from wait4)."""
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    # Read everything first, then reap with wait4 to get this child's own rusage.
    out = process.stdout.read()
    err = process.stderr.read()
    _, status, usage = os.wait4(process.pid, 0)
    code = os.waitstatus_to_exitcode(status)
    if code != 0:
        sys.exit(f"{' '.join(command[:3])} … failed ({code}): {err[-2000:]}")
    return out, usage.ru_maxrss * 1024


def machine():
    """'<CPU model>, <cores> cores (<widest ISA>)' from /proc/cpuinfo."""
    with open("/proc/cpuinfo") as f:
        text = f.read()
    cpu = next((line.split(":", 1)[1].strip() for line in text.splitlines() if line.startswith("model name")), "?")
    isa = "AVX-512 with AVX512-BF16" if "avx512_bf16" in text else ("AVX-512" if "avx512f" in text else "AVX2")
    return f"{cpu}, {os.cpu_count()} cores ({isa})"
