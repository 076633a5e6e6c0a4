#!/usr/bin/env python3
"""BERT's pretraining shards: dlbench's reader side by side with NVIDIA's PyTorch loader, then
BERT-base on synthetic vs real data; prints markdown tables for bench/RESULTS.md.

    bench/bert_shards_vs_pytorch.py [--build build/ci] [--shards 4] [--per-shard 4096]
        [--sequence-length 128] [--batch 64] [--rounds 3] [--train-batch 4] [--train-length 64]

1. Shards to batches, sequences/s: `dlbench-input measure --data bertpretraining` (libhdf5, one
   shard loaded whole while the next loads in the background, the batch laid out for the trainer)
   against NVIDIA's `pretraining_dataset` as DeepLearningExamples' run_pretraining.py has it (h5py
   loads a shard whole into numpy; a DataLoader with a RandomSampler makes tensors of each
   sequence and collates them), both over the same generated shards (NVIDIA's format, written by
   `dlbench-input generate`) from the page cache, each through every shard once; the two
   alternate, round by round, and the median is kept.
2. BERT-base (fp32) with dlbench-worker on synthetic sequences and on the same shards (at
   --train-length tokens), with the share of the measured time the steps waited for input.
Run it with an interpreter that has torch and h5py (Debian's /usr/bin/python3 with python3-h5py).
"""
import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time

import h5py
import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset, RandomSampler

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class PretrainingDataset(Dataset):
    """NVIDIA DeepLearningExamples' pretraining_dataset (BERT/run_pretraining.py): the shard's six
    datasets loaded whole with h5py; a sample is its tensors, with the masked-LM labels -1 except
    at the positions before the first 0."""

    keys = ["input_ids", "input_mask", "segment_ids", "masked_lm_positions", "masked_lm_ids", "next_sentence_labels"]

    def __init__(self, path):
        with h5py.File(path, "r") as f:
            self.inputs = [np.asarray(f[key][:]) for key in self.keys]

    def __len__(self):
        return len(self.inputs[0])

    def __getitem__(self, index):
        input_ids, input_mask, segment_ids, positions, ids, next_sentence = [
            torch.from_numpy(x[index].astype(np.int64)) if i < 5 else torch.from_numpy(np.asarray(x[index].astype(np.int64)))
            for i, x in enumerate(self.inputs)]
        labels = torch.ones(input_ids.shape, dtype=torch.long) * -1
        padded = (positions == 0).nonzero()
        index = len(positions) if len(padded) == 0 else padded[0].item()
        labels[positions[:index]] = ids[:index]
        return [input_ids, segment_ids, input_mask, labels, next_sentence]


def pytorch_rate(files, batch):
    """Sequences/s through every shard once, as run_pretraining.py's loop takes them."""
    start, sequences = time.perf_counter(), 0
    for path in files:
        data = PretrainingDataset(path)
        loader = DataLoader(data, sampler=RandomSampler(data), batch_size=batch, num_workers=0, drop_last=True)
        for batch_tensors in loader:
            sequences += batch_tensors[0].shape[0]
    return sequences / (time.perf_counter() - start)


def dlbench_rate(inputs, root, batch, batches):
    """Sequences/s of dlbench-input measure over the same number of sequences (after its first batch)."""
    out = subprocess.run([inputs, "measure", root, "--data", "bertpretraining", "--batch-size", str(batch),
                          "--batches", str(batches)], check=True, capture_output=True, text=True).stdout
    return json.loads(out)["sequencesPerSecond"]


def worker_case(worker, data, length, batch, root=None):
    command = [worker, "--model", "bert-base", "--sequence-length", str(length), "--batch-size", str(batch),
               "--optimizer", "adamw", "--learning-rate", "0.0001", "--weight-decay", "0.01",
               "--warmup-steps", "1", "--measure-steps", "3", "--repeats", "3"]
    if data != "synthetic":
        command += ["--data", data, "--data-path", root]
    out = subprocess.run(command, check=True, capture_output=True, text=True).stdout
    return json.loads(out)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--build", default="build/ci")
    parser.add_argument("--shards", type=int, default=4)
    parser.add_argument("--per-shard", type=int, default=4096)
    parser.add_argument("--sequence-length", type=int, default=128)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--train-batch", type=int, default=4)
    parser.add_argument("--train-length", type=int, default=64)
    args = parser.parse_args()
    bin_dir = os.path.join(ROOT, args.build, "bin")
    inputs, worker = os.path.join(bin_dir, "dlbench-input"), os.path.join(bin_dir, "dlbench-worker")
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory(prefix="dlbench-bert-shards-") as tmp:
        root = os.path.join(tmp, "shards")
        subprocess.run([inputs, "generate", root, "--data", "bertpretraining", "--shards", str(args.shards),
                        "--per-shard", str(args.per_shard), "--sequence-length", str(args.sequence_length)],
                       check=True, capture_output=True)
        files = sorted(os.path.join(root, f) for f in os.listdir(root))
        size = sum(os.path.getsize(f) for f in files)
        batches = args.shards * args.per_shard // args.batch - 1  # every shard once, after the first batch
        ours, theirs = [], []
        for _ in range(args.rounds):
            ours.append(dlbench_rate(inputs, root, args.batch, batches))
            theirs.append(pytorch_rate(files, args.batch))
        print(f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs; torch {torch.__version__}, "
              f"h5py {h5py.__version__}, HDF5 {h5py.version.hdf5_version}")
        print(f"{args.shards} shards of {args.per_shard} sequences of {args.sequence_length} tokens "
              f"({size / 2**20:.1f} MiB gzip-compressed), batch {args.batch}, {args.rounds} rounds, medians\n")
        print("| reader | sequences/s | rounds |")
        print("|---|---|---|")
        a, b = statistics.median(ours), statistics.median(theirs)
        print(f"| dlbench (`dlbench-input measure`) | {a:,.0f} | {', '.join(f'{x:,.0f}' for x in ours)} |")
        print(f"| NVIDIA's pretraining_dataset + DataLoader | {b:,.0f} | {', '.join(f'{x:,.0f}' for x in theirs)} |")
        print(f"\ndlbench / PyTorch: {a / b:.1f}x\n")

        short = os.path.join(tmp, "short")
        subprocess.run([inputs, "generate", short, "--data", "bertpretraining", "--shards", "2", "--per-shard", "256",
                        "--sequence-length", str(args.train_length)], check=True, capture_output=True)
        print(f"BERT-base fp32, sequence {args.train_length}, batch {args.train_batch}, one rank on every core, "
              "1 warm-up + 3 measured steps x 3 repeats:\n")
        print("| data | sequences/s (median) | steps waited for input | reader alone, sequences/s | verdict |")
        print("|---|---|---|---|---|")
        for data in ("synthetic", "bertpretraining"):
            doc = worker_case(worker, data, args.train_length, args.train_batch, short)
            median = doc["throughput"]["median"]
            if data == "synthetic":
                print(f"| synthetic | {median:.2f} | – | – | – |")
            else:
                i = doc["input"]
                print(f"| bertpretraining | {median:.2f} | {100 * i['waitShare']:.2f} % | {i['pipelineThroughput']:,.0f} | "
                      f"{i['verdict']} |")


if __name__ == "__main__":
    sys.exit(main())
