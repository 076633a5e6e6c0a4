#!/usr/bin/env python3
"""How far a ResNet bottleneck's gradients can be from exact in fp16, bf16 and tf32, as PyTorch computes
them: the self-test's "bottleneck with projection" shape (input 8x32x16x16, width 16, stride 2,
every parameter, input and output gradient uniform in [-1, 1]), in fp64 as the reference, then
  - emulated: fp64 arithmetic with every activation, gradient and filter rounded to the half type
    at each op's boundary (what a half network stores between ops), on the CPU; for tf32, values
    stored as fp32 and each convolution's two operands rounded to TF32 (10 mantissa bits), forward
    and in both backward products, as tensor cores take them;
  - cuda: PyTorch's own half (or TF32) computation on the GPU, channels_last, fp32 batch-norm
    parameters (cuDNN's kernels, as dlbench's amp, bf16 and tf32 call them), where a GPU is present.
Prints each output's normwise relative error against fp64, in the order dlbench's self-test
numbers the gradients (conv1, bn1 scale, bn1 shift, conv2, ..., projection conv, its bn).

    bottleneck_half_numerics.py [--seeds 3]
"""
import argparse

import torch
import torch.nn.functional as F

NAMES = ["c1", "g1", "b1", "c2", "g2", "b2", "c3", "g3", "b3", "cd", "gd", "bd"]
SHAPES = {"c1": (16, 32, 1, 1), "c2": (16, 16, 3, 3), "c3": (64, 16, 1, 1), "cd": (64, 32, 1, 1)}


class Rounded(torch.autograd.Function):
    """Rounds a value to `dtype` and its gradient too (None: leaves both)."""

    @staticmethod
    def forward(ctx, t, dtype):
        ctx.dtype = dtype
        return t.to(dtype).to(t.dtype) if dtype else t

    @staticmethod
    def backward(ctx, g):
        return (g.to(ctx.dtype).to(g.dtype) if ctx.dtype else g), None


def to_tf32(t):
    """t rounded to TF32 (fp32 with 10 mantissa bits, to nearest), in t's dtype."""
    bits = t.float().view(torch.int32)
    rounded = (bits + 0x0FFF + ((bits >> 13) & 1)) & ~0x1FFF
    return rounded.view(torch.float32).to(t.dtype)


class Tf32Conv(torch.autograd.Function):
    """conv2d whose operands are rounded to TF32 in forward and in both backward products."""

    @staticmethod
    def forward(ctx, x, w, stride, padding):
        ctx.save_for_backward(x, w)
        ctx.stride, ctx.padding = stride, padding
        return F.conv2d(to_tf32(x), to_tf32(w), stride=stride, padding=padding)

    @staticmethod
    def backward(ctx, g):
        x, w = ctx.saved_tensors
        g = to_tf32(g)
        kw = dict(stride=ctx.stride, padding=ctx.padding)
        dx = torch.nn.grad.conv2d_input(x.shape, to_tf32(w), g, **kw)
        dw = torch.nn.grad.conv2d_weight(to_tf32(x), w.shape, g, **kw)
        return dx, dw, None, None


def data(seed):
    g = torch.Generator().manual_seed(seed)

    def uniform(*shape):
        return torch.rand(*shape, generator=g, dtype=torch.float64) * 2 - 1

    params = {k: uniform(*SHAPES.get(k, (16 if k[1] in "12" else 64,))) for k in NAMES}
    return params, uniform(8, 32, 16, 16), uniform(8, 64, 8, 8)


def block(params, x, dy, compute, rounding=None, device="cpu", channels_last=False, tf32_convs=False):
    """The bottleneck's forward and backward: outputs y, dx and each parameter's gradient, in fp64."""
    p = {k: v.to(device, compute if k[0] == "c" else torch.float64 if compute == torch.float64 else torch.float32)
         .detach().clone().requires_grad_(True) for k, v in params.items()}
    fmt = torch.channels_last if channels_last else torch.contiguous_format
    xr = x.to(device, compute).contiguous(memory_format=fmt).detach().clone().requires_grad_(True)

    def r(t):
        return Rounded.apply(t, rounding)

    def conv(t, k, stride=1, padding=0):
        if tf32_convs:
            return r(Tf32Conv.apply(t, r(p[k]), stride, padding))
        return r(F.conv2d(t, r(p[k]), stride=stride, padding=padding))

    def bn(t, k):
        return r(F.batch_norm(t, None, None, p["g" + k], p["b" + k], training=True, eps=1e-5))

    h = r(xr)
    a = r(F.relu(bn(conv(h, "c1"), "1")))
    a = r(F.relu(bn(conv(a, "c2", stride=2, padding=1), "2")))
    a = bn(conv(a, "c3"), "3")
    s = bn(conv(h, "cd", stride=2), "d")
    y = r(F.relu(a + s))
    y.backward(r(dy.to(device, compute).contiguous(memory_format=fmt)))
    out = {"y": y.detach(), "dx": xr.grad}
    out.update({k: p[k].grad for k in NAMES})
    return {k: v.double().cpu() for k, v in out.items()}


def errors(got, want):
    return {k: ((got[k] - want[k]).norm() / want[k].norm()).item() for k in want}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=3)
    args = parser.parse_args()
    keys = ["y", "dx"] + NAMES
    print("dtype  how       seed  " + "  ".join(f"{k:>8}" for k in keys))
    for seed in range(args.seeds):
        params, x, dy = data(seed)
        exact = block(params, x, dy, torch.float64)
        for name, dtype in (("fp16", torch.float16), ("bf16", torch.bfloat16), ("tf32", torch.float32)):
            tf32 = name == "tf32"
            rows = [("emulated", block(params, x, dy, torch.float64, rounding=dtype, tf32_convs=tf32))]
            if torch.cuda.is_available():
                torch.backends.cudnn.allow_tf32 = tf32
                rows.append(("cuda", block(params, x, dy, dtype, device="cuda", channels_last=True)))
            for how, got in rows:
                e = errors(got, exact)
                print(f"{name}   {how:8}  {seed:4d}  " + "  ".join(f"{e[k]:8.2e}" for k in keys), flush=True)


if __name__ == "__main__":
    main()
