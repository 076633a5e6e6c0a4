"""Reference networks for dlbench's models that torchvision does not ship whole, assembled from
torchvision's own parts (Debian's python3-torchvision 0.14).

DeepLabV3+ is examples/pytorch/deeplabv3plus.py's, the network the PyTorch example trains under
engine: command (one definition: the golden tests check it against dlbench-worker's).

BERT for pretraining (Devlin et al., 2019) in plain PyTorch, with HuggingFace's BertForPreTraining
module names: post-LayerNorm encoder layers with erf GELU, the masked-LM head (transform, then the
word embeddings as decoder weights plus a bias) on the masked positions only, and the pooler with
the next-sentence classifier on the first token. Initialised as BERT is: N(0, 0.02) weights and
embeddings, zero biases, LayerNorm 1 and 0.
"""
import math
import os
import sys

import torch
import torch.nn.functional as F
from torch import nn

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "examples", "pytorch"))
from deeplabv3plus import CLASSES as CITYSCAPES_CLASSES, IGNORED as IGNORE_LABEL, DeepLabV3Plus  # noqa: E402,F401


class BertConfig:
    def __init__(self, vocabulary=30522, hidden=768, layers=12, heads=12, intermediate=3072, max_positions=512,
                 token_types=2, dropout=0.1, epsilon=1e-12):
        self.vocabulary, self.hidden, self.layers, self.heads = vocabulary, hidden, layers, heads
        self.intermediate, self.max_positions, self.token_types = intermediate, max_positions, token_types
        self.dropout, self.epsilon = dropout, epsilon


class BertSelfAttention(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.heads, self.head_size = c.heads, c.hidden // c.heads
        self.query, self.key, self.value = (nn.Linear(c.hidden, c.hidden) for _ in range(3))
        self.dropout = nn.Dropout(c.dropout)
        self.scale = 1.0 / math.sqrt(self.head_size)

    def split(self, x):  # (N, L, H) -> (N, heads, L, head size)
        n, length, _ = x.shape
        return x.view(n, length, self.heads, self.head_size).transpose(1, 2)

    def forward(self, x, mask=None):  # mask: (N, 1, 1, L), 0 on real tokens and -10000 on padding
        q, k, v = self.split(self.query(x)), self.split(self.key(x)), self.split(self.value(x))
        scores = q @ k.transpose(-1, -2) * self.scale
        if mask is not None:
            scores = scores + mask
        probabilities = self.dropout(torch.softmax(scores, dim=-1))
        context = probabilities @ v
        return context.transpose(1, 2).reshape(x.shape)


class BertSelfOutput(nn.Module):  # also BertOutput: dense, dropout, residual, LayerNorm
    def __init__(self, c, inputs):
        super().__init__()
        self.dense = nn.Linear(inputs, c.hidden)
        self.LayerNorm = nn.LayerNorm(c.hidden, eps=c.epsilon)
        self.dropout = nn.Dropout(c.dropout)

    def forward(self, x, residual):
        return self.LayerNorm(self.dropout(self.dense(x)) + residual)


class BertAttention(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.self = BertSelfAttention(c)
        self.output = BertSelfOutput(c, c.hidden)

    def forward(self, x, mask=None):
        return self.output(self.self(x, mask), x)


class BertIntermediate(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.dense = nn.Linear(c.hidden, c.intermediate)

    def forward(self, x):
        return F.gelu(self.dense(x))


class BertLayer(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.attention = BertAttention(c)
        self.intermediate = BertIntermediate(c)
        self.output = BertSelfOutput(c, c.intermediate)

    def forward(self, x, mask=None):
        h = self.attention(x, mask)
        return self.output(self.intermediate(h), h)


class BertEncoder(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.layer = nn.ModuleList(BertLayer(c) for _ in range(c.layers))

    def forward(self, x, mask=None):
        for layer in self.layer:
            x = layer(x, mask)
        return x


class BertEmbeddings(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.word_embeddings = nn.Embedding(c.vocabulary, c.hidden)
        self.position_embeddings = nn.Embedding(c.max_positions, c.hidden)
        self.token_type_embeddings = nn.Embedding(c.token_types, c.hidden)
        self.LayerNorm = nn.LayerNorm(c.hidden, eps=c.epsilon)
        self.dropout = nn.Dropout(c.dropout)

    def forward(self, ids, types):
        positions = torch.arange(ids.shape[1], device=ids.device).unsqueeze(0)
        x = self.word_embeddings(ids) + self.position_embeddings(positions) + self.token_type_embeddings(types)
        return self.dropout(self.LayerNorm(x))


class BertPooler(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.dense = nn.Linear(c.hidden, c.hidden)

    def forward(self, x):
        return torch.tanh(self.dense(x[:, 0]))


class BertModel(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.embeddings = BertEmbeddings(c)
        self.encoder = BertEncoder(c)
        self.pooler = BertPooler(c)


class BertPredictionHeadTransform(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.dense = nn.Linear(c.hidden, c.hidden)
        self.LayerNorm = nn.LayerNorm(c.hidden, eps=c.epsilon)

    def forward(self, x):
        return self.LayerNorm(F.gelu(self.dense(x)))


class BertLMPredictionHead(nn.Module):
    def __init__(self, c, word_embeddings):
        super().__init__()
        self.transform = BertPredictionHeadTransform(c)
        self.decoder = nn.Linear(c.hidden, c.vocabulary, bias=False)
        self.decoder.weight = word_embeddings.weight  # tied
        self.bias = nn.Parameter(torch.zeros(c.vocabulary))

    def forward(self, x):
        return self.decoder(self.transform(x)) + self.bias


class BertPreTrainingHeads(nn.Module):
    def __init__(self, c, word_embeddings):
        super().__init__()
        self.predictions = BertLMPredictionHead(c, word_embeddings)
        self.seq_relationship = nn.Linear(c.hidden, 2)


class BertForPreTraining(nn.Module):
    """forward(input_ids, token_type_ids, masked_positions[, real_tokens]) -> (masked-LM logits (N, P,
    vocabulary), next-sentence logits (N, 2)); masked_positions (N, P) index each sequence's tokens;
    real_tokens (N) where padding starts, masked out of attention as BERT's input_mask does."""

    def __init__(self, config=None):
        super().__init__()
        c = config or BertConfig()
        self.bert = BertModel(c)
        self.cls = BertPreTrainingHeads(c, self.bert.embeddings.word_embeddings)
        for module in self.modules():
            if isinstance(module, (nn.Linear, nn.Embedding)):
                nn.init.normal_(module.weight, std=0.02)
            if isinstance(module, nn.Linear) and module.bias is not None:
                nn.init.zeros_(module.bias)

    def forward(self, input_ids, token_type_ids, masked_positions, real_tokens=None):
        mask = None
        if real_tokens is not None:  # BERT's extended attention mask: (1 - input_mask) * -10000
            input_mask = torch.arange(input_ids.shape[1]).unsqueeze(0) < real_tokens.unsqueeze(1)
            mask = (1.0 - input_mask.to(self.bert.embeddings.word_embeddings.weight.dtype))[:, None, None, :] * -10000.0
        states = self.bert.encoder(self.bert.embeddings(input_ids, token_type_ids), mask)
        index = masked_positions.unsqueeze(-1).expand(-1, -1, states.shape[-1])
        masked = torch.gather(states, 1, index)
        return self.cls.predictions(masked), self.cls.seq_relationship(self.bert.pooler(states))


def forward_macs(net, height, width):
    """Multiply-accumulates of one sample's forward pass in its convolutions and linear layers."""
    total = [0]

    def count(module, inputs, output):
        if isinstance(module, nn.Conv2d):
            kh, kw = module.kernel_size
            total[0] += output[0].numel() * module.in_channels // module.groups * kh * kw
        elif isinstance(module, nn.Linear):
            total[0] += module.in_features * module.out_features

    hooks = [m.register_forward_hook(count) for m in net.modules() if isinstance(m, (nn.Conv2d, nn.Linear))]
    net.train()
    with torch.no_grad():
        net(torch.zeros(2, 3, height, width))
    for h in hooks:
        h.remove()
    return total[0]


if __name__ == "__main__":
    bert = BertForPreTraining()
    print("bert-base parameters (the tied decoder once)", sum(p.numel() for p in bert.parameters()))
    net = DeepLabV3Plus()
    print("deeplabv3plus parameters", sum(p.numel() for p in net.parameters()))
    for h, w in ((512, 1024), (65, 97)):
        print(f"deeplabv3plus forward MACs at {h}x{w}", forward_macs(net, h, w))
