"""dlbench's stability rule for other frameworks' benchmark scripts, so that their rows are
measured under the same methodology as dlbench-worker's (core/src/statistics.cpp: measure_again,
judge_stability): `repeats` repeats, then one more at a time while the last `repeats` spread by
more than `max_cv` (the coefficient of variation: sample standard deviation over the mean), at
most `extra_repeats` more; the last `repeats` are reported, the earlier ones kept as discarded.
The defaults are the worker's: max_cv 2% on a GPU and 5% on the CPU, up to 7 more repeats.
"""
import statistics

DEFAULT_MAX_CV = {"gpu": 0.02, "cpu": 0.05}
DEFAULT_EXTRA_REPEATS = 7


def cv(values):
    """Sample standard deviation over the mean (0 for one value or a zero mean)."""
    mean = statistics.fmean(values)
    if len(values) < 2 or mean == 0:
        return 0.0
    return statistics.stdev(values) / mean


def measure_again(throughputs, repeats, extra_repeats, max_cv):
    """Whether another repeat runs: all `repeats` measured, room left, and the last ones spread."""
    measured = len(throughputs)
    if repeats < 2 or measured < repeats or measured >= repeats + extra_repeats:
        return False
    return cv(throughputs[-repeats:]) > max_cv


def measure(run_repeat, repeats, extra_repeats, max_cv):
    """Calls run_repeat() (one repeat's throughput) under the rule; returns the result's fields:
    repeats (the reported ones), median, discarded, cv, max_cv and stability ("stable" or "unstable")."""
    throughputs = []
    while len(throughputs) < repeats or measure_again(throughputs, repeats, extra_repeats, max_cv):
        throughputs.append(run_repeat())
    reported = throughputs[-repeats:]
    spread = cv(reported)
    return {"repeats": reported, "median": statistics.median(reported), "discarded": throughputs[:-repeats],
            "cv": spread, "max_cv": max_cv, "stability": "unstable" if spread > max_cv else "stable"}


def add_arguments(parser):
    """--max-cv (unset: the device's default, which the script picks) and --extra-repeats."""
    parser.add_argument("--max-cv", type=float, default=None,
                        help=f"measure again while the last repeats' cv is above this (default: "
                             f"{DEFAULT_MAX_CV['gpu']} on a GPU, {DEFAULT_MAX_CV['cpu']} on the CPU, as dlbench-worker)")
    parser.add_argument("--extra-repeats", type=int, default=DEFAULT_EXTRA_REPEATS,
                        help="at most this many more repeats (0: judge only)")
