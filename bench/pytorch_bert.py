#!/usr/bin/env python3
"""PyTorch's BERT-base pretraining under dlbench's methodology, for side-by-side runs with dlbench-worker.

The plain-PyTorch BertForPreTraining of tests/golden/reference_models.py (HuggingFace's layout,
masked LM on the masked positions only, next sentence), synthetic batches shaped as dlbench's
(15% of positions masked, rounded up), AdamW (lr 1e-4, betas 0.9/0.999, eps 1e-6, decay 0.01 on
matrices only) after clip_grad_norm_(1.0); warm up W steps, time M steps, R repeats, measured again
while the last R spread as dlbench-worker would (bench/stability.py), report the median
sequences/s. On CUDA the timed steps sit between two torch.cuda.synchronize().

    pytorch_bert.py --device cpu|cuda --batch 32 --precision fp32|tf32|amp|bf16 [--sequence-length 128]
                    [--warmup 20 --measure 100 --repeats 7] [--max-cv C --extra-repeats 7] [--threads N]
                    [--compile] [--tuned] [--profile STEPS]

amp: fp16 autocast with a GradScaler; bf16: bf16 autocast. On the CPU, PyTorch 1.13's layer_norm
refuses a bf16 input with fp32 weights and its CPU autocast does not cast for it, so layer norms
run in fp32 there, as later versions' autocast policy has it.
--tuned: PyTorch's fastest eager path, as dlbench's own is fused: AdamW with fused=True (one
kernel for the update, and under amp the GradScaler's inf check stays on the device instead of a
host sync every step) and attention through F.scaled_dot_product_attention (flash or
memory-efficient kernels, dropout inside). Needs PyTorch 2 on CUDA; refused otherwise, saying why.
--profile STEPS: after the repeats, STEPS more steps under PyTorch's profiler, and where they went
by op kind in the line's "profile" (bench/pytorch_profile.py, as pytorch_resnet50.py --profile;
its "linear" kind is the matrix products, aten::addmm/mm/bmm).

Prints one JSON line: {"engine": "pytorch" | "pytorch-compile" | "pytorch-tuned" | "pytorch-compile-tuned", "device", "batch", "sequence_length",
"precision", "repeats": [...], "median", "discarded": [...], "cv", "max_cv", "stability", "torch", ["gpu"], ["profile"]}.
"""
import argparse
import json
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "golden"))
import pytorch_measure  # noqa: E402
import reference_models  # noqa: E402

VOCABULARY = 30522


def tuned_refusal(cuda):
    """Why --tuned cannot run here (None where it can): it needs scaled_dot_product_attention
    (PyTorch 2.0) and AdamW's fused kernel, which this PyTorch has for CUDA only."""
    if not hasattr(torch.nn.functional, "scaled_dot_product_attention"):
        return f"needs torch.nn.functional.scaled_dot_product_attention (PyTorch 2.0 or later; this is {torch.__version__})"
    if not cuda:
        return "needs --device cuda (AdamW's fused kernel)"
    return None


def attention_through_sdpa(self, x, mask=None):
    """BertSelfAttention.forward with PyTorch's fused attention: the same scale (1/sqrt(head
    size), SDPA's default), the same additive padding mask and dropout on the probabilities while
    training."""
    q, k, v = self.split(self.query(x)), self.split(self.key(x)), self.split(self.value(x))
    context = torch.nn.functional.scaled_dot_product_attention(
        q, k, v, attn_mask=mask, dropout_p=self.dropout.p if self.training else 0.0)
    return context.transpose(1, 2).reshape(x.shape)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cuda")
    parser.add_argument("--batch", type=int, required=True)
    parser.add_argument("--sequence-length", type=int, default=128)
    parser.add_argument("--precision", choices=["fp32", "tf32", "amp", "bf16"], required=True)
    parser.add_argument("--threads", type=int, default=os.cpu_count())
    parser.add_argument("--compile", action="store_true", help="torch.compile the model")
    parser.add_argument("--tuned", action="store_true", help="fused AdamW and scaled_dot_product_attention")
    pytorch_measure.add_arguments(parser)
    args = parser.parse_args()
    if why_not := pytorch_measure.refusal(args):
        sys.exit(f"pytorch_bert.py: {why_not}")

    cuda = args.device == "cuda"
    if cuda:
        tf32 = args.precision == "tf32"
        torch.backends.cuda.matmul.allow_tf32 = tf32
        torch.backends.cudnn.allow_tf32 = tf32
    else:
        if args.precision in ("tf32", "amp"):
            sys.exit(f"pytorch_bert.py: {args.precision} is a GPU precision; on the CPU: fp32, bf16")
        torch.set_num_threads(args.threads)
        if args.precision == "bf16":
            torch.nn.LayerNorm.forward = lambda self, x: torch.nn.functional.layer_norm(
                x.float(), self.normalized_shape, self.weight, self.bias, self.eps)
    if args.tuned:
        why_not = tuned_refusal(cuda)
        if why_not:
            sys.exit(f"pytorch_bert.py: --tuned {why_not}")
        reference_models.BertSelfAttention.forward = attention_through_sdpa
    device = torch.device(args.device)
    torch.manual_seed(42)
    model = reference_models.BertForPreTraining().to(device)
    model.train()
    if args.compile:
        model = torch.compile(model)
    batch, length = args.batch, args.sequence_length
    predictions = (length * 15 + 99) // 100
    ids = torch.randint(999, VOCABULARY, (batch, length), device=device)
    types = (torch.arange(length, device=device) >= length // 2).long().expand(batch, length)
    positions = torch.stack([torch.randperm(length - 2)[:predictions].sort().values + 1 for _ in range(batch)]).to(device)
    masked_tokens = torch.randint(999, VOCABULARY, (batch, predictions), device=device)
    next_sentence = torch.randint(0, 2, (batch,), device=device)
    groups = [{"params": [p for p in model.parameters() if p.dim() >= 2]},
              {"params": [p for p in model.parameters() if p.dim() < 2], "weight_decay": 0.0}]
    optimizer = torch.optim.AdamW(groups, lr=1e-4, betas=(0.9, 0.999), eps=1e-6, weight_decay=0.01,
                                  **({"fused": True} if args.tuned else {}))
    autocast_dtype = {"amp": torch.float16, "bf16": torch.bfloat16}.get(args.precision)
    scaler = torch.cuda.amp.GradScaler(enabled=args.precision == "amp")

    def step():
        optimizer.zero_grad(set_to_none=True)
        with torch.autocast(args.device, dtype=autocast_dtype or torch.bfloat16, enabled=autocast_dtype is not None):
            mlm, nsp = model(ids, types, positions)
            loss = (torch.nn.functional.cross_entropy(mlm.reshape(-1, VOCABULARY), masked_tokens.flatten())
                    + torch.nn.functional.cross_entropy(nsp, next_sentence))
        scaler.scale(loss).backward()
        scaler.unscale_(optimizer)
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        scaler.step(optimizer)
        scaler.update()

    line = {"engine": pytorch_measure.engine(args), "device": args.device, "batch": batch,
            "sequence_length": length, "precision": args.precision}
    line.update(pytorch_measure.measure(step, device, batch, args))
    print(json.dumps(line))


if __name__ == "__main__":
    main()
