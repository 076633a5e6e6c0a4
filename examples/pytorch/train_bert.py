#!/usr/bin/env python3
"""BERT-base pretraining in PyTorch, timed by dlbench's command engine.

The script trains BERT-base (12 layers, hidden 768, 12 heads, feed-forward 3072, GELU, post-norm,
a 30,522-word vocabulary tied to the masked-LM decoder, next-sentence head) built from
torch.nn.TransformerEncoderLayer, on a fixed synthetic batch shaped as dlbench-worker's: random
words, the second half of each sequence segment B, 15% of the positions (rounded up) predicted
as masked words, a random next-sentence label. The loss is the masked-LM loss over the predicted
positions plus the next-sentence loss, as in BERT's pretraining. The optimizer is the spec's, as
dlbench-worker runs it (dlbench_torch.py: adamw is BERT's recipe; sgd; lamb is reported
unsupported). It prints "@dlbench step <global sequences>" after every step. One command per
node:

    python3 train_bert.py          # starts DLBENCH_GPUS_PER_NODE processes itself
    torchrun ... train_bert.py     # or under torchrun, as train_resnet50.py says

Processes, devices and precisions as dlbench_torch.py describes; bf16 on the CPU needs PyTorch 2
(1.13's CPU autocast hands layer_norm a bf16 input with fp32 weights, which it refuses).
"""
import sys

import torch
from torch import nn

from dlbench_markers import fact, unsupported
from dlbench_torch import Precision, launch, optimizer_for

VOCABULARY = 30522


class BertForPreTraining(nn.Module):
    def __init__(self, vocabulary=VOCABULARY, hidden=768, layers=12, heads=12, intermediate=3072, positions=512,
                 dropout=0.1):
        super().__init__()
        self.words = nn.Embedding(vocabulary, hidden)
        self.positions = nn.Embedding(positions, hidden)
        self.segments = nn.Embedding(2, hidden)
        self.embedding_norm = nn.LayerNorm(hidden, eps=1e-12)
        self.dropout = nn.Dropout(dropout)
        layer = nn.TransformerEncoderLayer(hidden, heads, intermediate, dropout, activation="gelu",
                                           layer_norm_eps=1e-12, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        # Masked LM: a transform, then the word embeddings as the decoder (tied), plus a bias.
        self.transform = nn.Sequential(nn.Linear(hidden, hidden), nn.GELU(), nn.LayerNorm(hidden, eps=1e-12))
        self.decoder_bias = nn.Parameter(torch.zeros(vocabulary))
        self.pooler = nn.Linear(hidden, hidden)
        self.next_sentence = nn.Linear(hidden, 2)
        for module in self.modules():  # BERT's initialisation
            if isinstance(module, (nn.Linear, nn.Embedding)):
                nn.init.normal_(module.weight, std=0.02)
            if isinstance(module, nn.Linear) and module.bias is not None:
                nn.init.zeros_(module.bias)
        for layer in self.encoder.layers:  # attention's own projections are parameters, not Linears
            nn.init.normal_(layer.self_attn.in_proj_weight, std=0.02)
            nn.init.zeros_(layer.self_attn.in_proj_bias)

    def forward(self, words, segments, predicted):
        """Masked-LM logits at the `predicted` positions, and next-sentence logits."""
        length = words.shape[1]
        x = self.words(words) + self.positions.weight[:length] + self.segments(segments)
        x = self.encoder(self.dropout(self.embedding_norm(x)))
        at = torch.gather(x, 1, predicted.unsqueeze(-1).expand(-1, -1, x.shape[-1]))
        masked_lm = self.transform(at) @ self.words.weight.t() + self.decoder_bias
        return masked_lm, self.next_sentence(torch.tanh(self.pooler(x[:, 0])))


def main():
    return launch(train)


def train(case, process):
    if case.precision == "bf16" and not process.cuda and int(torch.__version__.split(".")[0]) < 2:
        if process.reporter:
            unsupported(f"bf16 BERT on the CPU needs PyTorch 2 (this is {torch.__version__}: its CPU autocast "
                        "leaves layer_norm a bf16 input with fp32 weights, which it refuses)")
        return
    device = process.device
    torch.manual_seed(1234 + process.rank)
    model = BertForPreTraining().to(device)
    if process.reporter:
        fact("parameters", sum(p.numel() for p in model.parameters()))
    model = process.parallel(model)
    optimizer = optimizer_for(case, model, process)

    batch, length = case.batch_size, case.sequence_length
    predictions = (length * 15 + 99) // 100
    words = torch.randint(999, VOCABULARY, (batch, length), device=device)
    segments = (torch.arange(length, device=device) >= length // 2).long().expand(batch, length)
    predicted = torch.stack([torch.randperm(length - 2)[:predictions].sort().values + 1 for _ in range(batch)])
    predicted = predicted.to(device)
    masked_words = torch.randint(999, VOCABULARY, (batch, predictions), device=device)
    next_sentence = torch.randint(0, 2, (batch,), device=device)

    precision = Precision(case, device)

    def compute_loss():
        masked_lm, nsp = model(words, segments, predicted)
        return (nn.functional.cross_entropy(masked_lm.reshape(-1, VOCABULARY), masked_words.flatten())
                + nn.functional.cross_entropy(nsp, next_sentence))

    def train_step():
        return precision.step(model, optimizer, compute_loss)

    process.run_steps(case, train_step)


if __name__ == "__main__":
    sys.exit(main())
