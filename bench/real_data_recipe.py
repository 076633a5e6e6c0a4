#!/usr/bin/env python3
"""ResNet-50 trained by PyTorch itself on an image folder with dlbench's default recipe (SGD, rate
0.1 at batch 256, momentum 0.9, weight decay 1e-4, torchvision's training transform): the loss,
the largest |logit| and the largest |activation| of any layer at each step, and whether that
activation is past fp16's largest finite value (65,504). An amp step whose forward pass overflows
computes an infinite loss whatever its loss scale, so the scaler skips it and halves the scale;
enough such steps in a row collapse the scale, as a real-data amp run on an H200 did (2026-11-29:
42 of 400 steps skipped, scale 1.5e-8).

    real_data_recipe.py DIR [--image 64] [--batch 256] [--steps 40] [--lr 0.1] [--warmup 0] [--threads 2]
                            [--precision fp32|amp] [--device cpu|cuda] [--workers 0]

--precision amp on cuda: torch.autocast in fp16 with torch.amp.GradScaler (PyTorch's defaults:
2^16, halved on an overflow, doubled after 2,000 clean steps), the side gpu_check.sh sets beside
dlbench's real-data amp run on the same JPEGs. On the CPU (no fp16 autocast in PyTorch 1.13) amp
is emulated for its range: fp32 arithmetic, but the batch, every layer's output, the gradient
flowing back into it and the convolutions' and linear layer's weight gradients pass through fp16
(a value past 65,504 becomes inf there, a tiny one a subnormal or 0, as amp stores them), and the
loss is scaled, checked, unscaled and skipped by GradScaler's rule written out. Each line then
says the scale the step ran at and whether it was skipped.

DIR is `dlbench-input generate DIR --classes 16 --per-class 64` (or any ImageFolder tree).
"""
import argparse
import math
import time

import torch
import torchvision
from torchvision import datasets, transforms

FP16_MAX = 65504.0
# GradScaler's defaults, which dlbench's LossScalingConfig shares.
INITIAL_SCALE, GROWTH, BACKOFF, GROWTH_INTERVAL = 65536.0, 2.0, 0.5, 2000


def through_fp16(t):
    """t as amp stores it: rounded to fp16 (inf past its range) and back, so that autograd rounds
    the gradient flowing back through it to fp16 as well."""
    return t.half().float()


class EmulatedScaler:
    """torch.amp.GradScaler's rule on the host, for the CPU's emulated amp."""

    def __init__(self):
        self.scale, self.streak = INITIAL_SCALE, 0

    def step(self, optimizer, parameters):
        """Unscales the gradients and applies the update unless one holds an inf or NaN; then the
        scale's update. Returns whether the step was skipped."""
        grads = [p.grad for p in parameters if p.grad is not None]
        skipped = not all(torch.isfinite(g).all() for g in grads)
        if skipped:
            self.scale *= BACKOFF
            self.streak = 0
            return True
        for g in grads:
            g.div_(self.scale)
        optimizer.step()
        self.streak += 1
        if self.streak == GROWTH_INTERVAL:
            self.scale *= GROWTH
            self.streak = 0
        return False


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("data")
    ap.add_argument("--image", type=int, default=64)
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--lr", type=float, default=0.1)
    ap.add_argument("--warmup", type=int, default=0, help="linear warm-up over N applied updates, as dlbench's")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--precision", choices=["fp32", "amp"], default="fp32")
    ap.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    ap.add_argument("--workers", type=int, default=0, help="the DataLoader's decoding processes")
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    device = torch.device(args.device)
    amp = args.precision == "amp"
    emulated = amp and device.type == "cpu"
    tf = transforms.Compose([transforms.RandomResizedCrop(args.image), transforms.RandomHorizontalFlip(),
                             transforms.ToTensor(),
                             transforms.Normalize([0.485, 0.456, 0.406], [0.229, 0.224, 0.225])])
    loader = torch.utils.data.DataLoader(datasets.ImageFolder(args.data, tf), batch_size=args.batch, shuffle=True,
                                         drop_last=True, num_workers=args.workers,
                                         persistent_workers=args.workers > 0, pin_memory=device.type == "cuda")
    model = torchvision.models.resnet50().to(device, memory_format=torch.channels_last)
    opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9, weight_decay=1e-4)
    warm = torch.optim.lr_scheduler.LambdaLR(opt, lambda u: min(1.0, (u + 1) / args.warmup) if args.warmup else 1.0)
    largest = {"value": 0.0, "layer": ""}

    def watch(name):
        def hook(_module, _inputs, output):
            if not isinstance(output, torch.Tensor):
                return None
            if emulated:
                output = through_fp16(output)
            v = output.detach().abs().max().item()
            # The largest so far, or the first layer whose output is not finite (kept from then on).
            if math.isfinite(largest["value"]) and (v > largest["value"] or not math.isfinite(v)):
                largest.update(value=v, layer=name)
            return output if emulated else None
        return hook

    for name, module in model.named_modules():
        if name and not list(module.children()):  # the leaves: every convolution, batch norm, ReLU, pool, fc
            module.register_forward_hook(watch(name))
            if emulated and isinstance(module, (torch.nn.Conv2d, torch.nn.Linear)):
                for p in module.parameters(recurse=False):  # autocast's fp16 copies get fp16 gradients
                    p.register_hook(through_fp16)
    scaler = None
    if amp:
        scaler = EmulatedScaler() if emulated else torch.amp.GradScaler("cuda")
    print("step loss max|logit| max|activation| layer past-fp16-max scale skipped seconds")
    step, start, past, skipped = 0, time.time(), 0, 0
    while step < args.steps:
        for x, y in loader:
            x = x.to(device, non_blocking=True).to(memory_format=torch.channels_last)
            y = y.to(device, non_blocking=True)
            if emulated:
                x = through_fp16(x)  # amp's batch is fp16
            largest.update(value=0.0, layer="")
            with torch.autocast("cuda", dtype=torch.float16, enabled=amp and not emulated):
                logits = model(x)
                loss = torch.nn.functional.cross_entropy(logits, y)
            opt.zero_grad()
            ran_at = "-"
            if scaler is None:
                loss.backward()
                opt.step()
                skip = False
            elif emulated:
                ran_at = scaler.scale
                (loss * scaler.scale).backward()
                skip = scaler.step(opt, list(model.parameters()))
            else:
                ran_at = scaler.get_scale()
                scaler.scale(loss).backward()
                scaler.step(opt)
                scaler.update()
                skip = scaler.get_scale() < ran_at
            if not skip:
                warm.step()  # skipped steps do not count as updates, as dlbench's warm-up counts them
            step += 1
            over = largest["value"] > FP16_MAX or not math.isfinite(largest["value"])
            past += over
            skipped += skip
            why = ("forward" if over else "backward") if skip else "no"
            print(f"{step} {loss.item():.3f} {logits.detach().abs().max().item():.1f} {largest['value']:.1f} "
                  f"{largest['layer']} {'yes' if over else 'no'} {ran_at if ran_at == '-' else f'{ran_at:g}'} "
                  f"{why} {time.time() - start:.0f}", flush=True)
            if step >= args.steps:
                break
    print(f"{past} of {step} steps had an activation past fp16's largest finite value")
    if scaler is not None:
        final = scaler.scale if emulated else scaler.get_scale()
        print(f"{skipped} of {step} steps skipped by loss scaling ({'emulated on the CPU' if emulated else 'GradScaler'}), "
              f"the scale ended at {final:g}")
    return past


if __name__ == "__main__":
    main()
