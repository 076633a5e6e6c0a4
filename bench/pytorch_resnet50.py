#!/usr/bin/env python3
"""PyTorch's ResNet-50 under dlbench's methodology, for side-by-side runs with dlbench-worker.

torchvision resnet50 (v1.5, as dlbench's), channels_last, synthetic data, SGD with momentum 0.9,
weight decay 1e-4, learning rate 0.1; warm up W steps, time M steps, R repeats, measured again
while the last R spread as dlbench-worker would (bench/stability.py), report the median images/s.
Timing: torch.cuda.synchronize() before and after the M steps, perf_counter between. --model
trains dlbench's other image models the same way (bench/pytorch_image_models.py: torchvision's,
InceptionV3 with its auxiliary loss, DeepLabV3+ the golden test's with per-pixel labels; give
InceptionV3 --image-size 299).

    pytorch_resnet50.py --batch 256 --precision amp [--model resnet50] [--image-size 224] [--compile] [--tuned]
                        [--warmup 20 --measure 100 --repeats 7] [--max-cv 0.02 --extra-repeats 7]
                        [--profile STEPS] [--device cuda|cpu]

--profile STEPS: after the repeats, STEPS more steps under PyTorch's profiler, and where they went
by op kind in the line's "profile" (bench/pytorch_profile.py), the side gpu_check.sh sets beside
dlbench-worker's --profile. --device cpu runs the same on the CPU (fp32 or bf16), as the tests do.

--tuned: SGD with fused=True, PyTorch's one-kernel update, under which amp's GradScaler keeps its
inf check on the device instead of a host sync every step; refused, saying why, by a PyTorch
without it.

Prints one JSON line: {"engine": "pytorch" | "pytorch-compile" | "pytorch-tuned" | "pytorch-compile-tuned", "model", "batch", "precision", "repeats": [...],
"median", "discarded": [...], "cv", "max_cv", "stability", "torch", "gpu", ["profile"]}.
"""
import argparse
import contextlib
import inspect
import json
import os
import sys

import torch

import pytorch_image_models
import pytorch_measure


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, required=True)
    parser.add_argument("--precision", choices=["fp32", "tf32", "amp", "bf16"], required=True)
    parser.add_argument("--model", choices=pytorch_image_models.MODELS, default="resnet50")
    parser.add_argument("--image-size", type=int, default=224)
    parser.add_argument("--compile", action="store_true", help="torch.compile the model")
    parser.add_argument("--tuned", action="store_true", help="SGD's fused kernel")
    parser.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    pytorch_measure.add_arguments(parser)
    args = parser.parse_args()

    if args.tuned and "fused" not in inspect.signature(torch.optim.SGD).parameters:
        sys.exit(f"pytorch_resnet50.py: --tuned needs torch.optim.SGD's fused kernel, which PyTorch {torch.__version__} lacks")
    if args.device == "cpu" and args.precision not in ("fp32", "bf16"):
        sys.exit(f"pytorch_resnet50.py: --precision {args.precision} needs --device cuda; the CPU runs fp32 or bf16")
    if why_not := pytorch_measure.refusal(args):
        sys.exit(f"pytorch_resnet50.py: {why_not}")
    torch.backends.cudnn.benchmark = True  # measured algorithm choice, as dlbench does
    tf32 = args.precision == "tf32"
    torch.backends.cuda.matmul.allow_tf32 = tf32
    torch.backends.cudnn.allow_tf32 = tf32
    device = torch.device(args.device)
    on_gpu = device.type == "cuda"
    if not on_gpu:
        # A thread per CPU it may run on, as dlbench-worker's default; PyTorch's own default is the
        # physical cores, one on a 2-vCPU VM, where it also sends small 1x1 convolutions to im2col.
        torch.set_num_threads(len(os.sched_getaffinity(0)))
    model, labels, loss_of = pytorch_image_models.build(args.model, args.batch, args.image_size, args.image_size, device)
    model = model.to(memory_format=torch.channels_last)
    if args.compile:
        model = torch.compile(model)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=1e-4,
                                **({"fused": True} if args.tuned else {}))
    images = torch.randn(args.batch, 3, args.image_size, args.image_size, device=device).to(
        memory_format=torch.channels_last)
    autocast_dtype = {"amp": torch.float16, "bf16": torch.bfloat16}.get(args.precision)
    # Only amp scales its loss (and only on a GPU), so the CPU's PyTorch 1.13 needs no torch.amp.GradScaler.
    scaler = torch.amp.GradScaler("cuda") if args.precision == "amp" else None

    def step():
        optimizer.zero_grad(set_to_none=True)
        with torch.autocast(device.type, dtype=autocast_dtype) if autocast_dtype else contextlib.nullcontext():
            loss = loss_of(model(images), labels)
        if scaler is None:
            loss.backward()
            optimizer.step()
        else:
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()

    line = {"engine": pytorch_measure.engine(args), "model": args.model, "batch": args.batch, "precision": args.precision}
    line.update(pytorch_measure.measure(step, device, args.batch, args))
    print(json.dumps(line))


if __name__ == "__main__":
    main()
