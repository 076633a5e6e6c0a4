#!/usr/bin/env python3
"""How well-conditioned a ResNet-50 training step is at the GPU tests' shape, measured with PyTorch
itself: the same steps in fp32 and fp64 (and fp64 from weights perturbed by 1e-7), free-running, and
one step's gradient in fp32 against fp64. It is why tests/gpu compares ResNet-50 steps each started
from one state (tests/worker/same_state_steps.hpp) instead of free-running loss trajectories.

    resnet50_conditioning.py [--batch 4] [--image 64] [--steps 10] [--threads 2]

Prints, per step, the losses and their relative differences, then the gradient's relative error
over all weights and in the worst tensor.
"""
import argparse

import torch
import torchvision


def model(dtype, perturbation=0.0):
    torch.manual_seed(42)
    m = torchvision.models.resnet50().to(dtype)
    if perturbation:
        with torch.no_grad():
            for p in m.parameters():
                p.mul_(1 + perturbation * torch.randn_like(p))
    return m


def batch(dtype, size, image):
    g = torch.Generator().manual_seed(1)
    return torch.randn(size, 3, image, image, generator=g).to(dtype), torch.randint(0, 1000, (size,), generator=g)


def losses(dtype, args, perturbation=0.0):
    m = model(dtype, perturbation)
    x, y = batch(dtype, args.batch, args.image)
    opt = torch.optim.SGD(m.parameters(), lr=0.01, momentum=0.9, weight_decay=1e-4)
    out = []
    for _ in range(args.steps):
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(m(x), y)
        loss.backward()
        opt.step()
        out.append(loss.item())
    return out


def gradients(dtype, args):
    m = model(dtype)
    x, y = batch(dtype, args.batch, args.image)
    torch.nn.functional.cross_entropy(m(x), y).backward()
    return {n: p.grad.double() for n, p in m.named_parameters()}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--image", type=int, default=64)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    exact, single, perturbed = losses(torch.float64, args), losses(torch.float32, args), losses(torch.float64, args, 1e-7)
    print("step  fp64        fp32        fp64 (weights x (1 + 1e-7 N(0,1)))  fp32 off  perturbed off")
    for i, (e, s, p) in enumerate(zip(exact, single, perturbed)):
        print(f"{i:4d}  {e:10.6f}  {s:10.6f}  {p:10.6f}  {abs(s - e) / abs(e):9.2e}  {abs(p - e) / abs(e):9.2e}")
    g32, g64 = gradients(torch.float32, args), gradients(torch.float64, args)
    total = (sum(((g32[k] - g64[k]) ** 2).sum() for k in g64) / sum((g ** 2).sum() for g in g64.values())).sqrt()
    worst = max(((g32[k] - g64[k]).norm() / g64[k].norm()).item() for k in g64)
    worst_name = max(g64, key=lambda k: ((g32[k] - g64[k]).norm() / g64[k].norm()).item())
    print(f"one step's gradient, fp32 against fp64: {total.item():.2e} over all weights, {worst:.2e} in {worst_name}")


if __name__ == "__main__":
    main()
