#!/usr/bin/env python3
"""Where the GPU time of a profiled run goes, kernel by kernel, from Nsight Compute's CSV.

    ncu --csv --print-units base --print-kernel-base function --metrics gpu__time_duration.sum \\
        COMMAND... > LOG 2>&1
    bench/ncu_summary.py LOG [--top N]

Kernels are grouped by name (template arguments and parameters cut off), summed, and printed
as a Markdown table, largest first: launches, total milliseconds, share of all kernel time and
the mean per launch. Lines that are not ncu's CSV (the program's own output, ==PROF== notes)
are skipped, so a log that mixes them reads as it is. Exits 1 when the log holds no kernel rows.
"""
import argparse
import csv
import re
import sys
from collections import defaultdict

TIME_METRIC = "gpu__time_duration.sum"
UNIT_SECONDS = {"nsecond": 1e-9, "ns": 1e-9, "usecond": 1e-6, "us": 1e-6, "msecond": 1e-3, "ms": 1e-3,
                "second": 1.0, "s": 1.0}


def short_name(kernel):
    """The kernel's function name: no parameter list, no template arguments, no namespaces."""
    name = kernel.strip().replace("(anonymous namespace)", "anonymous")
    depth, out = 0, []
    for ch in name:  # template arguments, nested
        if ch == "<":
            depth += 1
        elif ch == ">":
            depth = max(0, depth - 1)
        elif depth == 0:
            out.append(ch)
    name = "".join(out).split("(")[0].strip()  # the parameter list
    name = name.split()[-1] if name else kernel.strip()  # a leading return type
    return name.split("::")[-1] or kernel.strip()


def kernel_times(lines):
    """(short kernel name, seconds) for each kernel row of the time metric."""
    rows = csv.reader(line for line in lines if line.startswith('"'))
    header = None
    for row in rows:
        if row and row[0] == "ID":
            header = {name: i for i, name in enumerate(row)}
            continue
        if header is None or len(row) < len(header):
            continue
        if row[header["Metric Name"]] != TIME_METRIC:
            continue
        unit = row[header["Metric Unit"]].strip()
        if unit not in UNIT_SECONDS:
            raise ValueError(f"unknown time unit {unit!r} for {TIME_METRIC}")
        value = float(row[header["Metric Value"]].replace(",", ""))
        yield short_name(row[header["Kernel Name"]]), value * UNIT_SECONDS[unit]


def summarize(lines, top):
    launches, seconds = defaultdict(int), defaultdict(float)
    for name, t in kernel_times(lines):
        launches[name] += 1
        seconds[name] += t
    total = sum(seconds.values())
    if not launches:
        return None
    order = sorted(seconds, key=lambda n: (-seconds[n], n))
    out = [f"{sum(launches.values())} kernel launches, {total * 1e3:.2f} ms of kernel time", "",
           "| kernel | launches | total ms | share | mean µs |", "|---|---|---|---|---|"]
    for name in order[:top]:
        out.append(f"| {name} | {launches[name]} | {seconds[name] * 1e3:.2f} | {100 * seconds[name] / total:.1f}% | "
                   f"{seconds[name] / launches[name] * 1e6:.1f} |")
    rest = order[top:]
    if rest:
        rest_seconds = sum(seconds[n] for n in rest)
        out.append(f"| ({len(rest)} more kernels) | {sum(launches[n] for n in rest)} | {rest_seconds * 1e3:.2f} | "
                   f"{100 * rest_seconds / total:.1f}% | |")
    return "\n".join(out)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("log")
    parser.add_argument("--top", type=int, default=30)
    args = parser.parse_args()
    with open(args.log, errors="replace") as f:
        table = summarize(f.read().splitlines(), args.top)
    if table is None:
        print(f"{args.log}: no {TIME_METRIC} rows (did ncu run, and with --csv?)", file=sys.stderr)
        return 1
    print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
