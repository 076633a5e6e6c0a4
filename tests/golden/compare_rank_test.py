#!/usr/bin/env python3
"""dlbench compare's rank test against SciPy's Mann-Whitney U.

Usage: compare_rank_test.py DLBENCH

Writes two bare statuses whose cases hold chosen repeats, runs `dlbench compare --format json`
once, and checks every case's U and two-sided p-value against scipy.stats.mannwhitneyu: the exact
distribution where the repeats do not tie (sizes 1 to 12 and 20 against 20, dlbench's largest
exact count), and the normal approximation with the tie and continuity corrections where dlbench
approximates (21 against 21, 60 against 70 and 200 against 180, ties included). Then one mutation: the same
files with one repeat moved across the other sample must change the p-value, so the check can
fail.
"""
import json
import math
import os
import random
import subprocess
import sys
import tempfile

from scipy.stats import mannwhitneyu


def summary(values):
    n = len(values)
    ordered = sorted(values)
    median = ordered[n // 2] if n % 2 else (ordered[n // 2 - 1] + ordered[n // 2]) / 2
    mean = sum(values) / n
    stddev = math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1)) if n > 1 else 0.0
    return {"median": median, "mean": mean, "min": ordered[0], "max": ordered[-1], "stddev": stddev,
            "cv": stddev / mean}


def result(batch, values):
    throughput = {"unit": "samples/s", "repeats": values}
    throughput.update(summary(values))
    return {"case": {"nodes": 1, "gpusPerNode": 1, "batchSizePerDevice": batch, "precision": "fp32"},
            "state": "Succeeded", "attempts": 1, "throughput": throughput}


def pairs():
    rng = random.Random(20261129)
    out = []
    # Exact, no ties: continuous values; SciPy's exact method assumes none.
    for n1 in range(1, 13):
        for n2 in (1, 3, 7, 12):
            shift = rng.choice((0.0, 0.5, 1.5))
            out.append(("exact", [rng.gauss(100, 1) for _ in range(n1)], [rng.gauss(100 + shift, 1) for _ in range(n2)]))
    out.append(("exact", [rng.gauss(100, 1) for _ in range(20)], [rng.gauss(100.4, 1) for _ in range(20)]))
    # Approximated by dlbench: larger samples, on a coarse grid so that values tie.
    for n1, n2, shift in ((21, 21, 0.6), (60, 70, 0.3), (200, 180, 0.1), (60, 70, 0.0)):
        out.append(("asymptotic", [round(rng.gauss(100, 1), 1) for _ in range(n1)],
                    [round(rng.gauss(100 + shift, 1), 1) for _ in range(n2)]))
    return out


def compare(dlbench, directory, cases):
    before = {"phase": "Succeeded", "results": [result(i + 1, b) for i, (_, b, _) in enumerate(cases)]}
    after = {"phase": "Succeeded", "results": [result(i + 1, a) for i, (_, _, a) in enumerate(cases)]}
    for name, status in (("before.json", before), ("after.json", after)):
        with open(os.path.join(directory, name), "w") as f:
            json.dump(status, f)
    done = subprocess.run([dlbench, "compare", "before.json", "after.json", "--format", "json"], cwd=directory,
                          capture_output=True, text=True, timeout=300)
    if done.returncode not in (0, 1):
        sys.exit(f"dlbench compare exited {done.returncode}: {done.stderr}")
    return json.loads(done.stdout)["cases"]


def main():
    dlbench = sys.argv[1]
    chosen = pairs()
    with tempfile.TemporaryDirectory() as directory:
        got = compare(dlbench, directory, [(method, before, after) for method, before, after in chosen])
        failures = []
        for (method, before, after), row in zip(chosen, got):
            reference = mannwhitneyu(after, before, alternative="two-sided", method=method)
            exact = row["exactTest"]
            if exact != (method == "exact"):
                failures.append(f"{row['case']}: dlbench's test exact={exact}, expected the {method} method")
            if abs(row["u"] - reference.statistic) > 1e-9:
                failures.append(f"{row['case']}: U {row['u']} against SciPy's {reference.statistic}")
            if not math.isclose(row["pValue"], reference.pvalue, rel_tol=1e-9, abs_tol=1e-15):
                failures.append(f"{row['case']} ({len(before)} against {len(after)}, {method}): p {row['pValue']!r} "
                                f"against SciPy's {reference.pvalue!r}")
        print(f"{len(chosen)} cases compared with SciPy's mannwhitneyu: {len(failures)} differ")
        for failure in failures:
            print("  " + failure)
        if failures:
            sys.exit(1)

        # The check can fail: swap one repeat between the samples of a case SciPy agreed on.
        method, before, after = chosen[30]
        before, after = before[:], after[:]
        before[0], after[0] = after[0], before[0]
        mutated = compare(dlbench, directory, [(method, chosen[30][1], chosen[30][2]), (method, before, after)])
        if math.isclose(mutated[0]["pValue"], mutated[1]["pValue"], rel_tol=1e-9):
            sys.exit("swapping a repeat between the samples left the p-value as it was: the check cannot fail")
    print("ok")


if __name__ == "__main__":
    main()
