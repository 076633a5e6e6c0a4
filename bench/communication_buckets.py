#!/usr/bin/env python3
"""What a data-parallel case's gradient reduction costs its step, by bucket size and by build:
dlbench-worker under mpirun with N ranks, once per --bucket-mb and build, each case's
`communication` block (the whole gradient reduced alone and its bus bandwidth, steps with and
without their reduction, the share of a step the reduction added) beside its throughput and rank 0's peak resident memory. Rounds
alternate the builds and bucket sizes, so that a shared machine's drift falls on all of them;
medians over the rounds. Two builds compare a change with the commit before it.

    communication_buckets.py BUILD_DIR [BUILD_DIR...] [--model resnet50] [--image-size 64]
                             [--sequence-length 16] [--batch-size 4] [--ranks 2]
                             [--buckets 1,25,1024] [--rounds 3] [--measure-steps 10]

--image-size is the image models', --sequence-length bert-base's (which trains with AdamW here).

Prints a markdown table for bench/RESULTS.md.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile


def one_case(worker, args, bucket_mb):
    shape = (["--sequence-length", str(args.sequence_length), "--optimizer", "adamw"] if args.model == "bert-base"
             else ["--image-size", str(args.image_size)])
    env = {**os.environ, "OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"}
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "result.json")
        subprocess.run(["mpirun", "-np", str(args.ranks), "--oversubscribe", "--bind-to", "none", worker,
                        "--model", args.model, *shape, "--batch-size", str(args.batch_size),
                        "--warmup-steps", "2", "--measure-steps", str(args.measure_steps), "--repeats", "3",
                        "--extra-repeats", "0", "--bucket-mb", str(bucket_mb), "--output", path],
                       env=env, check=True, timeout=3600, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        with open(path) as f:
            result = json.load(f)
    if result["state"] != "Succeeded":
        sys.exit(f"communication_buckets.py: {worker} --bucket-mb {bucket_mb}: {result['state']} {result.get('message')}")
    c = result["communication"]
    return {"throughput": result["throughput"]["median"], "buckets": c["buckets"],
            "gradient_mb": c["gradientBytes"] / 1e6, "allreduce_ms": c["allreduceSeconds"] * 1e3,
            "bus_gbs": c["busBandwidth"] / 1e9, "with_ms": c["stepSeconds"] * 1e3,
            "without_ms": c["stepSecondsWithoutReduction"] * 1e3, "exposed": c["exposedShare"],
            "resident_gib": result["memory"]["peakResidentBytes"] / 2**30}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("builds", nargs="+", metavar="BUILD_DIR")
    parser.add_argument("--model", default="resnet50")
    parser.add_argument("--image-size", type=int, default=64)
    parser.add_argument("--sequence-length", type=int, default=16)
    parser.add_argument("--batch-size", type=int, default=4)
    parser.add_argument("--ranks", type=int, default=2)
    parser.add_argument("--buckets", default="1,25,1024")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--measure-steps", type=int, default=10)
    args = parser.parse_args()
    sizes = [int(b) for b in args.buckets.split(",")]
    cases = [(build, b) for b in sizes for build in args.builds]
    runs = {case: [] for case in cases}
    for _ in range(args.rounds):
        for build, b in cases:
            runs[(build, b)].append(one_case(os.path.join(build, "bin", "dlbench-worker"), args, b))
    unit = "sequences/s" if args.model == "bert-base" else "samples/s"
    build_column = "build | " if len(args.builds) > 1 else ""
    print(f"| {build_column}--bucket-mb | buckets | {unit} | allreduce alone (ms) | bus bandwidth (GB/s) | "
          f"step with (ms) | without (ms) | share of a step | rank 0's peak resident (GiB) |")
    print("|---" * (9 + bool(build_column)) + "|")
    for case in cases:
        median = lambda key: statistics.median(r[key] for r in runs[case])
        build_cell = f"{case[0]} | " if build_column else ""
        print(f"| {build_cell}{case[1]} | {runs[case][0]['buckets']} | {median('throughput'):.2f} | "
              f"{median('allreduce_ms'):.1f} | {median('bus_gbs'):.2f} | {median('with_ms'):.1f} | "
              f"{median('without_ms'):.1f} | {100 * median('exposed'):.1f}% | {median('resident_gib'):.2f} |")
    shape = (f"sequence length {args.sequence_length}" if args.model == "bert-base" else f"{args.image_size} px")
    print(f"\n{args.model} at {shape}, batch {args.batch_size} a rank, {args.ranks} ranks; "
          f"{runs[cases[0]][0]['gradient_mb']:.1f} MB of gradient; medians of {args.rounds} rounds")


if __name__ == "__main__":
    main()
