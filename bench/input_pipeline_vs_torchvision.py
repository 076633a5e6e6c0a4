#!/usr/bin/env python3
"""The real-data input pipeline side by side with torchvision's, then the model on synthetic vs
real data; prints markdown tables for bench/RESULTS.md.

    bench/input_pipeline_vs_torchvision.py [--data imagefolder|cityscapes] [--build build/default]
        [--threads 1,2] [--images 512] [--batch 64] [--batches 12] [--rounds 3] [--train-batch 16]
        [--decode-threads 1]

imagefolder (the default):
1. Decode + augment, images/s per core: `dlbench-input measure` (TurboJPEG, DCT-domain scaling,
   Pillow's resampler, C++ threads) against torchvision's ImageFolder + DataLoader with the same
   transforms (RandomResizedCrop(224), RandomHorizontalFlip, ToTensor, Normalize) and as many
   worker processes as dlbench has threads, each worker at one torch thread. Both read the same
   generated data set (ImageNet-like sizes, 500 × 375 and the like) from the page cache, skip the
   first batch and time the next ones; the two alternate, round by round, and the median is kept.
2. ResNet-50 (fp32, 224) with dlbench-worker on synthetic data and on the same data set, with the
   share of the measured time the steps waited for input.
cityscapes: the same two tables for Cityscapes-layout 2048 × 1024 PNG pairs (--images of them),
crops of 512 × 1024: `dlbench-input measure --data cityscapes` (libpng, the crop's window of
Pillow's resamplers) against examples/pytorch/deeplabv3plus.py's CityscapesTrain in a DataLoader
(torchvision's segmentation reference transforms on PIL), then DeepLabV3+ (fp32, --train-crop).
Run it with an interpreter that has torch and torchvision (Debian's /usr/bin/python3).
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

import torch
import torchvision
from torch.utils.data import DataLoader
from torchvision import transforms

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "examples", "pytorch"))


def cpu_model():
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor()


def dlbench_rate(tool, data, threads, args):
    extra = ["--data", "cityscapes"] if args.data == "cityscapes" else []
    out = subprocess.run([tool, "measure", data, "--threads", str(threads), "--batch-size", str(args.batch),
                          "--batches", str(args.batches), "--prefetch-batches", "2", *extra],
                         check=True, capture_output=True, text=True).stdout
    return json.loads(out)["imagesPerSecond"]


def torchvision_dataset(data, args):
    if args.data == "cityscapes":
        from deeplabv3plus import CityscapesTrain, cityscapes_pairs  # examples/pytorch
        return CityscapesTrain(cityscapes_pairs(data), 512, 1024)
    tf = transforms.Compose([transforms.RandomResizedCrop(224), transforms.RandomHorizontalFlip(), transforms.ToTensor(),
                             transforms.Normalize([0.485, 0.456, 0.406], [0.229, 0.224, 0.225])])
    return torchvision.datasets.ImageFolder(data, tf)


def one_torch_thread(_worker):
    torch.set_num_threads(1)


def torchvision_rate(data, threads, args):
    loader = DataLoader(torchvision_dataset(data, args), batch_size=args.batch, shuffle=True, num_workers=threads,
                        prefetch_factor=2, persistent_workers=False, worker_init_fn=one_torch_thread, drop_last=True)
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
    model, size = ("deeplabv3plus", args.train_crop) if args.data == "cityscapes" else ("resnet50", "224")
    out = subprocess.run([worker, "--model", model, "--batch-size", str(args.train_batch), "--image-size", size,
                          "--warmup-steps", "2", "--measure-steps", str(args.train_steps), "--repeats", "3", *data_args],
                         check=True, capture_output=True, text=True).stdout
    return json.loads(out)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", choices=("imagefolder", "cityscapes"), default="imagefolder")
    ap.add_argument("--build", default=os.path.join(ROOT, "build", "default"))
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--images", type=int, default=None, help="default: 512 JPEGs, or 32 Cityscapes pairs")
    ap.add_argument("--batch", type=int, default=None, help="default: 64, or 8 for cityscapes")
    ap.add_argument("--batches", type=int, default=None, help="default: 12, or 6 for cityscapes")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--train-batch", type=int, default=None, help="default: 16, or 2 for cityscapes")
    ap.add_argument("--train-crop", default="128x256", help="cityscapes: DeepLabV3+'s crop for the training table")
    ap.add_argument("--train-steps", type=int, default=4)
    ap.add_argument("--decode-threads", type=int, default=1)
    ap.add_argument("--skip-training", action="store_true")
    args = ap.parse_args()
    segmentation = args.data == "cityscapes"
    for name, image, street in (("images", 512, 32), ("batch", 64, 8), ("batches", 12, 6), ("train_batch", 16, 2)):
        if getattr(args, name) is None:
            setattr(args, name, street if segmentation else image)
    tool = os.path.join(args.build, "bin", "dlbench-input")
    worker = os.path.join(args.build, "bin", "dlbench-worker")
    threads = [int(t) for t in args.threads.split(",")]
    torch.set_num_threads(1)

    with tempfile.TemporaryDirectory(prefix="dlbench-bench-input-") as data:
        if segmentation:
            subprocess.run([tool, "generate", data, "--data", "cityscapes", "--cities", "2", "--per-city",
                            str(args.images // 2)], check=True, capture_output=True)
            what, unit = f"{args.images} generated 2048 × 1024 PNG pairs, crops 512 × 1024", "crops/s"
        else:
            classes = 8
            subprocess.run([tool, "generate", data, "--classes", str(classes), "--per-class", str(args.images // classes)],
                           check=True, capture_output=True)
            what, unit = f"{args.images} generated JPEGs (500 × 375 and the like)", "img/s"
        print(f"CPU: {cpu_model()}, {os.cpu_count()} cores; torch {torch.__version__}, torchvision "
              f"{torchvision.__version__}; {what}, batch {args.batch}, {args.batches} timed batches, {args.rounds} "
              f"rounds alternating\n")
        print(f"| threads (workers) | dlbench {unit} | torchvision {unit} | dlbench per core | torchvision per core | "
              f"ratio |")
        print("|---|---|---|---|---|---|")
        for t in threads:
            ours, theirs = [], []
            for r in range(args.rounds):
                order = [("dlbench", ours), ("torchvision", theirs)]
                if r % 2 == 1:
                    order.reverse()
                for name, into in order:
                    into.append(dlbench_rate(tool, data, t, args) if name == "dlbench" else torchvision_rate(data, t, args))
            a, b = statistics.median(ours), statistics.median(theirs)
            print(f"| {t} | {a:.1f} | {b:.1f} | {a / t:.1f} | {b / t:.1f} | {a / b:.2f}x |", flush=True)

        if args.skip_training:
            return
        model = f"DeepLabV3+ fp32 {args.train_crop}" if segmentation else "ResNet-50 fp32 224"
        print(f"\n{model}, batch {args.train_batch}, 2 warm-up + {args.train_steps} measured steps × 3 repeats, one "
              f"rank on all cores; {args.data} with {args.decode_threads} decoding thread(s)\n")
        print(f"| data | {unit} (median) | waited for input | pipeline alone {unit} | verdict |")
        print("|---|---|---|---|---|")
        for label, data_args in (("synthetic", []), (args.data, ["--data", args.data, "--data-path", data,
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
