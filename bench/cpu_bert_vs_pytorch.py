#!/usr/bin/env python3
"""BERT-base pretraining on the CPU, dlbench-worker next to plain PyTorch 1.13 (bench/pytorch_bert.py) in one run: the same
network (tests/golden/reference_models.py's BertForPreTraining: HuggingFace's layout, masked LM on
the masked positions only, next sentence), batch, sequence length, threads, synthetic data and
AdamW after global-norm clipping. Rounds alternate the engines (A B A B ...); each run is its own
process (warm-up steps, then timed steps: sequences/s), its peak resident set from wait4(). PyTorch
runs twice a round: as it comes, and on transparent huge pages (GLIBC_TUNABLES=glibc.malloc.hugetlb=1,
bench_process.py): it frees its tensors every step, and each step's large ones are fresh pages again.

Where the time goes, from one more run of each after the rounds:
  dlbench: ONEDNN_VERBOSE's per-primitive execution times, summed by kind (matmul and
           inner_product are the matrix products); the rest of the step (dlbench's own loops:
           embedding gather and scatter, dropout, loss, AdamW) is the wall time they do not cover;
  PyTorch: torch.profiler's self CPU time of aten::addmm, aten::mm, aten::bmm against the step's.

    bench/cpu_bert_vs_pytorch.py [--build build/default] [--batch 8] [--sequence-length 128]
                                 [--rounds 3] [--warmup 1] [--measure 3] [--precision fp32|bf16]

bf16: dlbench-worker --precision bf16 next to PyTorch's bf16 autocast of the forward and the loss
(torch.autocast("cpu", torch.bfloat16); its layer norms in fp32, which PyTorch 1.13's CPU
layer_norm needs with fp32 weights), fp32 master weights and optimizer on both sides.

Needs /usr/bin/python3 with python3-torch. Prints a markdown section for bench/RESULTS.md.
"""
import argparse
import collections
import datetime
import json
import os
import statistics
import subprocess
import sys
import tempfile

from bench_process import PYTORCH_HUGE_PAGES, huge_pages_environment, machine, run_measured

HERE = os.path.dirname(os.path.abspath(__file__))



def worker_command(worker, args, output):
    return [worker, "--model", "bert-base", "--batch-size", str(args.batch), "--sequence-length",
            str(args.sequence_length), "--optimizer", "adamw", "--learning-rate", "0.0001", "--weight-decay", "0.01",
            "--threads", str(args.threads), "--warmup-steps", str(args.warmup), "--measure-steps", str(args.measure),
            "--repeats", "1", "--precision", args.precision, "--output", output]


def dlbench(worker, args, work):
    output = os.path.join(work, "result.json")
    _, rss = run_measured(worker_command(worker, args, output))
    with open(output) as f:
        result = json.load(f)
    if result["state"] != "Succeeded":
        sys.exit(f"dlbench-worker: {result.get('reason')}: {result.get('message')}")
    return result["throughput"]["median"], rss


def pytorch(python, args, profile=False, huge_pages=False):
    """bench/pytorch_bert.py on the CPU: (its JSON line, peak resident bytes)."""
    command = [python, os.path.join(HERE, "pytorch_bert.py"), "--device", "cpu", "--batch", str(args.batch),
               "--sequence-length", str(args.sequence_length), "--precision", args.precision, "--warmup",
               str(args.warmup), "--measure", str(args.measure), "--repeats", "1", "--threads", str(args.threads)]
    out, rss = run_measured(command + (["--profile", str(args.measure)] if profile else []),
                            huge_pages_environment() if huge_pages else None)
    return json.loads(out.strip().splitlines()[-1]), rss


def dlbench_time_split(worker, args, work):
    """(measured seconds, seconds in oneDNN by primitive kind) of one verbose run's timed steps."""
    output = os.path.join(work, "verbose.json")
    env = dict(os.environ, ONEDNN_VERBOSE="1")
    done = subprocess.run(worker_command(worker, args, output), capture_output=True, text=True, env=env, check=True)
    executions = [line.split(",") for line in done.stdout.splitlines() if line.startswith("onednn_verbose,exec,")]
    with open(output) as f:
        result = json.load(f)
    steps = args.warmup + args.measure
    # The timed steps are the last `measure` of the run's steps; every step executes the same
    # primitives, so they are the last measure/steps of the executions.
    timed = executions[len(executions) - len(executions) * args.measure // steps:]
    by_kind = collections.Counter()
    for fields in timed:
        by_kind[fields[3]] += float(fields[-1]) / 1e3  # milliseconds
    measured = args.batch * args.measure / result["throughput"]["median"]
    return measured, by_kind


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--build", default="build/default")
    parser.add_argument("--python", default="/usr/bin/python3")
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--sequence-length", type=int, default=128)
    parser.add_argument("--threads", type=int, default=os.cpu_count())
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--measure", type=int, default=3)
    parser.add_argument("--precision", choices=["fp32", "bf16"], default="fp32")
    args = parser.parse_args()
    worker = os.path.join(args.build, "bin", "dlbench-worker")

    ours = f"dlbench-worker {args.precision}"
    theirs = ("PyTorch 1.13 fp32" if args.precision == "fp32" else "PyTorch 1.13 bf16 autocast") + \
        " (plain BertForPreTraining)"
    theirs_on_huge_pages = f"{theirs}, {PYTORCH_HUGE_PAGES}"
    rows = {ours: ([], []), theirs: ([], []), theirs_on_huge_pages: ([], [])}
    with tempfile.TemporaryDirectory(prefix="dlbench-bench-") as work:
        for round_ in range(args.rounds):
            speed, rss = dlbench(worker, args, work)
            rows[ours][0].append(speed)
            rows[ours][1].append(rss)
            said = [f"dlbench {speed:.2f}"]
            for name, huge_pages in ((theirs, False), (theirs_on_huge_pages, True)):
                line, rss = pytorch(args.python, args, huge_pages=huge_pages)
                rows[name][0].append(line["median"])
                rows[name][1].append(rss)
                said.append(f"PyTorch{' on huge pages' if huge_pages else ''} {line['median']:.2f}")
            print(f"round {round_ + 1}: " + ", ".join(said) + " sequences/s", file=sys.stderr)
        measured, by_kind = dlbench_time_split(worker, args, work)
        # PyTorch's profile on huge pages: the peer the ratios below take.
        profiled = pytorch(args.python, args, profile=True, huge_pages=True)[0]
        kinds = {k["kind"]: k["seconds"] for k in profiled["profile"]["kinds"]}
        torch_wall, torch_matmul = (profiled["profile"]["stepSeconds"] * args.measure,
                                   kinds.get("linear", 0.0) * args.measure)

    print(f"### bert-base on the CPU, dlbench-worker vs PyTorch — {datetime.date.today().isoformat()}\n")
    print(f"Machine: {machine()}, {args.threads} threads each. Sequence length {args.sequence_length}, "
          f"batch {args.batch}, AdamW after clipping, {args.precision}.")
    print(f"Command: `bench/cpu_bert_vs_pytorch.py --batch {args.batch} --sequence-length {args.sequence_length} "
          f"--rounds {args.rounds} --warmup {args.warmup} --measure {args.measure} --precision {args.precision}` "
          f"(rounds alternate the engines; "
          f"medians over the rounds).\n")
    print("| configuration | sequences/s, median (min–max) | peak RSS GiB |")
    print("|---|---|---|")
    for name, (speeds, rss) in rows.items():
        print(f"| {name} | {statistics.median(speeds):.2f} ({min(speeds):.2f}–{max(speeds):.2f}) | "
              f"{statistics.median(rss) / 2**30:.2f} |")
    our_speed, our_rss = (statistics.median(v) for v in rows[ours])
    print()
    for name, on in ((theirs_on_huge_pages, "on huge pages"), (theirs, "as it comes")):
        their_speed, their_rss = (statistics.median(v) for v in rows[name])
        print(f"- dlbench-worker {our_speed / their_speed:.2f}× PyTorch's speed {on}, {our_rss / their_rss:.2f}× its "
              f"peak RSS.")
    matmul = by_kind["matmul"] + by_kind["inner_product"]
    onednn = sum(by_kind.values())
    print(f"- dlbench's timed steps ({measured:.2f} s, one verbose run): matrix products (oneDNN matmul and "
          f"inner_product) {100 * matmul / measured:.0f}%, other oneDNN primitives {100 * (onednn - matmul) / measured:.0f}% "
          f"({', '.join(f'{k} {100 * v / measured:.0f}%' for k, v in by_kind.most_common() if k not in ('matmul', 'inner_product'))}), "
          f"dlbench's own loops and the rest {100 * (measured - onednn) / measured:.0f}%.")
    print(f"- PyTorch's timed steps on huge pages ({torch_wall:.2f} s, profiled): matrix products (aten::addmm/mm/bmm) "
          f"{100 * torch_matmul / torch_wall:.0f}%.")


if __name__ == "__main__":
    main()
