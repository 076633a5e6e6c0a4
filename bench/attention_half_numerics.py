#!/usr/bin/env python3
"""How far the CUDA fused attention kernels (worker/cuda/attention_kernels.cu) can be from the CPU's
fp32 op in fp16 and bf16, before a GPU runs them: the roundings the kernels make, emulated in fp64
on the CPU, against fp64 on the same rounded inputs.

The kernels' roundings: Q, K, V and dContext are read in the half type; Q Kᵀ and dContext Vᵀ are
fp32 sums of exact products (tensor cores); the dropped probabilities and dS are stored in the half
type before their products; context, dQ, dK and dV are fp32 sums, then scaled and rounded once to
the half type. The CPU op computes in fp32 from the same rounded inputs: closer to fp64 than the
bounds by orders of magnitude, so fp64 stands in for it.

Prints, for the shapes of CudaBackendTest.FusedAttentionMatchesTheCpu* (values drawn N(0, 1.5²),
dropout 0.1), each output's error as that test measures it (the largest absolute difference over
the largest absolute expected value) and the test's bound, worst over the seeds.

    attention_half_numerics.py [--seeds 5]
"""
import argparse

import torch

SHAPES = [(2, 40, 3, 32), (3, 128, 4, 64)]  # sequences, tokens, heads, head size
BOUNDS = {torch.float16: 1e-2, torch.bfloat16: 5e-2}
DROPOUT = 0.1


def rounded(t, dtype):
    return t.to(dtype).to(torch.float64) if dtype else t


def attention(q, k, v, dout, mask, dtype):
    """Forward and backward of dropout(softmax(Q Kᵀ/√d)) V per head, rounding as the kernels do
    (dtype None: no rounding beyond the inputs'). q, k, v, dout: (heads, tokens, head size)."""
    scale = q.shape[-1] ** -0.5
    scores = q @ k.transpose(-1, -2)  # fp32 sums of exact products: fp64 here, rounded to fp32
    if dtype:
        scores = scores.float().double()
    p = torch.softmax(scores * scale, dim=-1)
    dropped = rounded(p * mask, dtype)
    context = rounded(dropped @ v, dtype)
    dp = dout @ v.transpose(-1, -2)
    if dtype:
        dp = dp.float().double()
    dp = dp * mask
    dot = (p * dp).sum(dim=-1, keepdim=True)
    ds = rounded(p * (dp - dot), dtype)
    dq = rounded((ds @ k) * scale, dtype)
    dk = rounded((ds.transpose(-1, -2) @ q) * scale, dtype)
    dv = rounded(dropped.transpose(-1, -2) @ dout, dtype)
    return {"context": context, "dQ": dq, "dK": dk, "dV": dv}


def error(actual, expected):
    return ((actual - expected).abs().max() / expected.abs().max()).item()


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seeds", type=int, default=5)
    args = parser.parse_args()
    for dtype in (torch.float16, torch.bfloat16):
        for sequences, tokens, heads, head_size in SHAPES:
            worst = {}
            for seed in range(args.seeds):
                g = torch.Generator().manual_seed(seed)
                shape = (sequences * heads, tokens, head_size)
                q, k, v, dout = (rounded(torch.randn(shape, generator=g, dtype=torch.float64) * 1.5, dtype)
                                 for _ in range(4))
                keep = (torch.rand((sequences * heads, tokens, tokens), generator=g) >= DROPOUT).double()
                mask = keep / (1.0 - DROPOUT)
                exact = attention(q, k, v, dout, mask, None)
                emulated = attention(q, k, v, dout, mask, dtype)
                for name in exact:
                    worst[name] = max(worst.get(name, 0.0), error(emulated[name], exact[name]))
            summary = ", ".join(f"{name} {value:.2e}" for name, value in worst.items())
            print(f"{str(dtype).removeprefix('torch.')}, {sequences} sequences of {tokens} tokens, {heads} heads of "
                  f"{head_size}: {summary} (bound {BOUNDS[dtype]:.0e}, worst of {args.seeds} seeds)")


if __name__ == "__main__":
    main()
