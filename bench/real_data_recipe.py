#!/usr/bin/env python3
"""ResNet-50 trained by PyTorch itself, in fp32 on the CPU, on an image folder with dlbench's
default recipe (SGD, rate 0.1 at batch 256, momentum 0.9, weight decay 1e-4, torchvision's
training transform): the loss, the largest |logit| and the largest |activation| of any layer at
each step, and whether that activation is past fp16's largest finite value (65,504). An amp step
whose forward pass overflows computes an infinite loss whatever its loss scale, so the scaler
skips it and halves the scale; enough such steps in a row collapse the scale, as a real-data amp
run on an H200 did (2026-11-29: 42 of 400 steps skipped, scale 1.5e-8). This says, without a
GPU, whether the recipe on that data drives activations there.

    real_data_recipe.py DIR [--image 64] [--batch 256] [--steps 40] [--lr 0.1] [--warmup 0] [--threads 2]

DIR is `dlbench-input generate DIR --classes 16 --per-class 64` (or any ImageFolder tree).
"""
import argparse
import math
import time

import torch
import torchvision
from torchvision import datasets, transforms

FP16_MAX = 65504.0


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("data")
    ap.add_argument("--image", type=int, default=64)
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--lr", type=float, default=0.1)
    ap.add_argument("--warmup", type=int, default=0, help="linear warm-up over N updates, as dlbench's")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    tf = transforms.Compose([transforms.RandomResizedCrop(args.image), transforms.RandomHorizontalFlip(),
                             transforms.ToTensor(),
                             transforms.Normalize([0.485, 0.456, 0.406], [0.229, 0.224, 0.225])])
    loader = torch.utils.data.DataLoader(datasets.ImageFolder(args.data, tf), batch_size=args.batch, shuffle=True,
                                         drop_last=True, num_workers=0)
    model = torchvision.models.resnet50()
    opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9, weight_decay=1e-4)
    warm = torch.optim.lr_scheduler.LambdaLR(opt, lambda u: min(1.0, (u + 1) / args.warmup) if args.warmup else 1.0)
    largest = {"value": 0.0, "layer": ""}

    def watch(name):
        def hook(_module, _inputs, output):
            if isinstance(output, torch.Tensor):
                v = output.detach().abs().max().item()
                if v > largest["value"]:
                    largest.update(value=v, layer=name)
        return hook

    for name, module in model.named_modules():
        if name and not list(module.children()):  # the leaves: every convolution, batch norm, ReLU, pool, fc
            module.register_forward_hook(watch(name))
    print("step loss max|logit| max|activation| layer past-fp16-max seconds")
    step, start, past = 0, time.time(), 0
    while step < args.steps:
        for x, y in loader:
            largest.update(value=0.0, layer="")
            logits = model(x)
            loss = torch.nn.functional.cross_entropy(logits, y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            warm.step()
            step += 1
            over = largest["value"] > FP16_MAX or not math.isfinite(largest["value"])
            past += over
            print(f"{step} {loss.item():.3f} {logits.detach().abs().max().item():.1f} {largest['value']:.1f} "
                  f"{largest['layer']} {'yes' if over else 'no'} {time.time() - start:.0f}", flush=True)
            if step >= args.steps:
                break
    print(f"{past} of {step} steps had an activation past fp16's largest finite value")
    return past


if __name__ == "__main__":
    main()
