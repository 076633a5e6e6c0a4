#!/usr/bin/env python3
"""The Cityscapes input pipeline side by side with torchvision's segmentation reference, then
DeepLabV3+ on synthetic vs Cityscapes-layout data; prints markdown tables for bench/RESULTS.md.

    bench/segmentation_pipeline_vs_torchvision.py [--build build/default] [--threads 1,2] [--pairs 32]
        [--batch 8] [--batches 6] [--rounds 3] [--train-crop 128x256] [--train-batch 2] [--decode-threads 1]

1. Decode + augment, crops/s per core: `dlbench-input measure --data cityscapes` (libpng, the
   crop's window of Pillow's resamplers, C++ threads) against a torch DataLoader over the same
   pairs with torchvision's references/segmentation training transforms on PIL (RandomResize of
   the shorter side to 0.5-2x, RandomHorizontalFlip, RandomCrop 512 x 1024 padded with 0 / 255,
   PILToTensor + ConvertImageDtype, Normalize; the label ids mapped to the 19 training ids with a
   table) and as many worker processes as dlbench has threads, each at one torch thread. Both read
   the same generated 2048 x 1024 PNG pairs from the page cache, skip the first batch and time the
   next ones; the two alternate, round by round, and the median is kept.
2. DeepLabV3+ (fp32) with dlbench-worker on synthetic crops and on the same data set, with the
   share of the measured time the steps waited for input.
Run it with an interpreter that has torch and torchvision (Debian's /usr/bin/python3).
"""
import argparse
import json
import os
import platform
import random
import statistics
import subprocess
import tempfile
import time

import numpy as np
import torch
import torchvision
from PIL import Image
from torch.utils.data import DataLoader, Dataset
from torchvision.transforms import InterpolationMode
from torchvision.transforms import functional as F

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CROP = (512, 1024)
TRAIN_IDS = {7: 0, 8: 1, 11: 2, 12: 3, 13: 4, 17: 5, 19: 6, 20: 7, 21: 8, 22: 9, 23: 10, 24: 11, 25: 12, 26: 13,
             27: 14, 28: 15, 31: 16, 32: 17, 33: 18}
ID_TO_TRAIN = np.full(256, 255, dtype=np.int64)
for k, v in TRAIN_IDS.items():
    ID_TO_TRAIN[k] = v


def cpu_model():
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor()


class CityscapesPairs(Dataset):
    """torchvision's segmentation reference transforms (presets.SegmentationPresetTrain) on PIL."""

    def __init__(self, pairs):
        self.pairs = pairs

    def __len__(self):
        return len(self.pairs)

    def __getitem__(self, i):
        image = Image.open(self.pairs[i][0]).convert("RGB")
        target = Image.open(self.pairs[i][1])
        short = min(image.size)
        size = random.randint(int(0.5 * short), int(2.0 * short))
        image = F.resize(image, size)
        target = F.resize(target, size, interpolation=InterpolationMode.NEAREST)
        if random.random() < 0.5:
            image, target = F.hflip(image), F.hflip(target)
        w, h = image.size
        pad_h, pad_w = max(CROP[0] - h, 0), max(CROP[1] - w, 0)
        if pad_h or pad_w:
            image = F.pad(image, [0, 0, pad_w, pad_h], fill=0)
            target = F.pad(target, [0, 0, pad_w, pad_h], fill=255)
        w, h = image.size
        top, left = random.randint(0, h - CROP[0]), random.randint(0, w - CROP[1])
        image, target = F.crop(image, top, left, *CROP), F.crop(target, top, left, *CROP)
        pixels = F.convert_image_dtype(F.pil_to_tensor(image), torch.float)
        pixels = F.normalize(pixels, [0.485, 0.456, 0.406], [0.229, 0.224, 0.225])
        return pixels, torch.from_numpy(ID_TO_TRAIN[np.asarray(target)])


def dlbench_rate(tool, data, threads, args):
    out = subprocess.run([tool, "measure", data, "--data", "cityscapes", "--threads", str(threads), "--batch-size",
                          str(args.batch), "--batches", str(args.batches), "--prefetch-batches", "2"],
                         check=True, capture_output=True, text=True).stdout
    return json.loads(out)["imagesPerSecond"]


def torchvision_rate(pairs, threads, args):
    loader = DataLoader(CityscapesPairs(pairs), batch_size=args.batch, shuffle=True, num_workers=threads,
                        prefetch_factor=2, persistent_workers=False, worker_init_fn=lambda _: torch.set_num_threads(1),
                        drop_last=True)
    batches = iter(loader)
    next(batches)  # start-up: forking the workers, the first batch
    start = time.perf_counter()
    done = 0
    for _ in range(args.batches):
        try:
            next(batches)
        except StopIteration:  # a new epoch, as dlbench's stream wraps into one
            batches = iter(loader)
            next(batches)
        done += 1
    return done * args.batch / (time.perf_counter() - start)


def worker_case(worker, data_args, args):
    out = subprocess.run([worker, "--model", "deeplabv3plus", "--batch-size", str(args.train_batch), "--image-size",
                          args.train_crop, "--warmup-steps", "1", "--measure-steps", str(args.train_steps),
                          "--repeats", "3", *data_args], check=True, capture_output=True, text=True).stdout
    return json.loads(out)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build", default=os.path.join(ROOT, "build", "default"))
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--pairs", type=int, default=32)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--batches", type=int, default=6)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--train-crop", default="128x256")
    ap.add_argument("--train-batch", type=int, default=2)
    ap.add_argument("--train-steps", type=int, default=3)
    ap.add_argument("--decode-threads", type=int, default=1)
    ap.add_argument("--skip-training", action="store_true")
    args = ap.parse_args()
    tool = os.path.join(args.build, "bin", "dlbench-input")
    worker = os.path.join(args.build, "bin", "dlbench-worker")
    threads = [int(t) for t in args.threads.split(",")]
    torch.set_num_threads(1)

    with tempfile.TemporaryDirectory(prefix="dlbench-bench-cityscapes-") as data:
        subprocess.run([tool, "generate", data, "--data", "cityscapes", "--cities", "2", "--per-city",
                        str(args.pairs // 2)], check=True, capture_output=True)
        pairs = [tuple(line.split("\t")) for line in
                 subprocess.run([tool, "shard", data, "--data", "cityscapes"], check=True, capture_output=True,
                                text=True).stdout.splitlines()]
        print(f"CPU: {cpu_model()}, {os.cpu_count()} cores; torch {torch.__version__}, torchvision "
              f"{torchvision.__version__}; {len(pairs)} generated 2048 × 1024 PNG pairs, crops 512 × 1024, batch "
              f"{args.batch}, {args.batches} timed batches, {args.rounds} rounds alternating\n")
        print("| threads (workers) | dlbench crops/s | torchvision crops/s | dlbench per core | torchvision per core | ratio |")
        print("|---|---|---|---|---|---|")
        for t in threads:
            ours, theirs = [], []
            for r in range(args.rounds):
                order = [("dlbench", ours), ("torchvision", theirs)]
                if r % 2 == 1:
                    order.reverse()
                for name, into in order:
                    into.append(dlbench_rate(tool, data, t, args) if name == "dlbench" else
                                torchvision_rate(pairs, t, args))
            a, b = statistics.median(ours), statistics.median(theirs)
            print(f"| {t} | {a:.1f} | {b:.1f} | {a / t:.1f} | {b / t:.1f} | {a / b:.2f}x |", flush=True)

        if args.skip_training:
            return
        print(f"\nDeepLabV3+ fp32 {args.train_crop}, batch {args.train_batch}, 1 warm-up + {args.train_steps} measured "
              f"steps × 3 repeats, one rank on all cores; cityscapes with {args.decode_threads} decoding thread(s)\n")
        print("| data | crops/s (median) | waited for input | pipeline alone crops/s | verdict |")
        print("|---|---|---|---|---|")
        for label, data_args in (("synthetic", []), ("cityscapes", ["--data", "cityscapes", "--data-path", data,
                                                                   "--decode-threads", str(args.decode_threads)])):
            doc = worker_case(worker, data_args, args)
            tp = doc["throughput"]["median"]
            inp = doc.get("input")
            if inp:
                print(f"| {label} | {tp:.2f} | {100 * inp['waitShare']:.1f}% | {inp['pipelineThroughput']:.1f} | "
                      f"{inp['verdict']} |", flush=True)
            else:
                print(f"| {label} | {tp:.2f} | - | - | - |", flush=True)


if __name__ == "__main__":
    main()
