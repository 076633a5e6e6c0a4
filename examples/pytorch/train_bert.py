#!/usr/bin/env python3
"""BERT-base pretraining in PyTorch, timed by dlbench's command engine.

The script trains BERT-base (12 layers, hidden 768, 12 heads, feed-forward 3072, GELU, post-norm,
a 30,522-word vocabulary tied to the masked-LM decoder, next-sentence head) built from
torch.nn.TransformerEncoderLayer, on a fixed synthetic batch shaped as dlbench-worker's: random
words, the second half of each sequence segment B, 15% of the positions (rounded up) predicted
as masked words, a random next-sentence label. With DLBENCH_DATA_SOURCE=bertpretraining it reads
NVIDIA's HDF5 pretraining shards at DLBENCH_DATA_PATH (h5py) as NVIDIA's run_pretraining.py does:
shards shuffled each epoch and dealt out to the processes (or every world-th sequence of each,
with fewer shards than processes), one shard loaded at a time and its sequences shuffled, the
padding masked out of attention (src_key_padding_mask) and the masked-LM labels -1 (ignored)
past each prediction list's end. The loss is the masked-LM loss over the predicted positions
plus the next-sentence loss, as in BERT's pretraining. The optimizer is the spec's, as
dlbench-worker runs it (dlbench_torch.py: adamw is BERT's recipe; sgd; lamb is reported
unsupported). It prints "@dlbench step <global sequences>" after every step. One command per
node:

    python3 train_bert.py          # starts DLBENCH_GPUS_PER_NODE processes itself
    torchrun ... train_bert.py     # or under torchrun, as train_image_classifier.py says

Processes, devices and precisions as dlbench_torch.py describes; bf16 on the CPU needs PyTorch 2
(1.13's CPU autocast hands layer_norm a bf16 input with fp32 weights, which it refuses).
"""
import itertools
import os
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

    def forward(self, words, segments, predicted, padding=None):
        """Masked-LM logits at the `predicted` positions, and next-sentence logits; `padding`
        (batch, length) is True where a token is padding, which no token attends to."""
        length = words.shape[1]
        x = self.words(words) + self.positions.weight[:length] + self.segments(segments)
        x = self.encoder(self.dropout(self.embedding_norm(x)), src_key_padding_mask=padding)
        at = torch.gather(x, 1, predicted.unsqueeze(-1).expand(-1, -1, x.shape[-1]))
        masked_lm = self.transform(at) @ self.words.weight.t() + self.decoder_bias
        return masked_lm, self.next_sentence(torch.tanh(self.pooler(x[:, 0])))


def main():
    return launch(train, ("bert-base",))


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
    if case.data_source == "bertpretraining":
        batches = shard_batches(case, process)
    else:
        predictions = (length * 15 + 99) // 100
        words = torch.randint(999, VOCABULARY, (batch, length), device=device)
        segments = (torch.arange(length, device=device) >= length // 2).long().expand(batch, length)
        predicted = torch.stack([torch.randperm(length - 2)[:predictions].sort().values + 1 for _ in range(batch)])
        predicted = predicted.to(device)
        masked_words = torch.randint(999, VOCABULARY, (batch, predictions), device=device)
        next_sentence = torch.randint(0, 2, (batch,), device=device)
        fixed = (words, segments, predicted, masked_words, next_sentence, None)
        batches = iter(lambda: fixed, None)
    # The length the steps take is the data's: a shard's sequences may be longer than the case's.
    first = next(batches)
    process.states_sequence_length(first[0].shape[-1])
    batches = itertools.chain([first], batches)

    precision = Precision(case, process)
    current = {}

    def compute_loss():
        words, segments, predicted, masked_words, next_sentence, padding = current["batch"]
        masked_lm, nsp = model(words, segments, predicted, padding)
        return (nn.functional.cross_entropy(masked_lm.reshape(-1, VOCABULARY), masked_words.flatten(), ignore_index=-1)
                + nn.functional.cross_entropy(nsp, next_sentence))

    def train_step():
        current["batch"] = [t.to(device, non_blocking=True) if t is not None else None for t in next(batches)]
        return precision.step(model, optimizer, compute_loss)

    process.run_steps(case, train_step)


def shard_batches(case, process):
    """Endless batches from NVIDIA's pretraining shards, as its run_pretraining.py reads them:
    (ids, segment ids, masked positions, masked-LM labels with -1 past each list's end,
    next-sentence labels, padding)."""
    import h5py
    import numpy as np

    root = case.data_path
    files = sorted(os.path.join(root, f) for f in os.listdir(root) if f.endswith((".hdf5", ".h5", ".hdf"))) \
        if os.path.isdir(root) else [root]
    rng = np.random.default_rng(42)  # the same shard order on every process
    world, rank = process.world_size, process.rank
    pending = []
    for epoch in itertools.count():
        order = rng.permutation(len(files))
        dealt = len(files) >= world
        for position, index in enumerate(order):
            if dealt and position % world != rank:
                continue
            try:
                with h5py.File(files[index], "r") as f:
                    shard = {key: np.asarray(f[key][:]) for key in (
                        "input_ids", "segment_ids", "input_mask", "masked_lm_positions", "masked_lm_ids",
                        "next_sentence_labels")}
            except OSError:  # not a shard h5py can read: skipped, as dlbench-worker skips it
                continue
            rows = np.random.default_rng(epoch * 7919 + int(index)).permutation(len(shard["input_ids"]))
            if not dealt:
                rows = rows[rank::world]
            for row in rows:
                ids = shard["input_ids"][row]
                if ids.min() < 0 or ids.max() >= VOCABULARY:  # dlbench-worker skips such a sequence too
                    continue
                positions = shard["masked_lm_positions"][row]
                count = int(np.argmax(positions == 0)) if (positions == 0).any() else len(positions)
                labels = np.full(len(positions), -1, np.int64)
                labels[:count] = shard["masked_lm_ids"][row][:count]
                pending.append((ids, shard["segment_ids"][row], positions, labels, shard["next_sentence_labels"][row],
                                shard["input_mask"][row] == 0))
                if len(pending) == case.batch_size:
                    columns = list(zip(*pending))
                    pending = []
                    yield [torch.as_tensor(np.stack(c)).long() if i < 5 else torch.as_tensor(np.stack(c))
                           for i, c in enumerate(columns)]


if __name__ == "__main__":
    sys.exit(main())
