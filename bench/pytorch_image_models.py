"""The image models dlbench-worker trains, as PyTorch builds them, with the loss dlbench computes:
the one place the PyTorch side of bench/'s comparisons makes them (bench/pytorch_resnet50.py on a
GPU, bench/cpu_models_vs_pytorch.py on the CPU).

The classifiers (resnet50, resnet152, vgg16, alexnet, inception_v3 with its auxiliary loss) are
examples/pytorch/image_classifiers.py's, the networks the command engine's example trains;
DeepLabV3+ is tests/golden/reference_models.py's network (torchvision's resnet50 and ASPP, 19
classes) with per-pixel labels of which about 1 in 20 is the ignore index 255, as dlbench's
synthetic labels.
"""
import os
import sys

import torch

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
sys.path.insert(0, os.path.join(ROOT, "examples", "pytorch"))
import image_classifiers  # noqa: E402 (examples/pytorch, found above)

MODELS = image_classifiers.CLASSIFIERS + ("deeplabv3plus",)
IGNORE_INDEX = 255


def build(name, batch, height, width, device):
    """(model, labels, loss) for `name`: the model in train mode, synthetic labels for a batch of
    `batch` images of height x width on `device`, and loss(output, labels)."""
    if name not in MODELS:
        raise ValueError(f"model {name!r}: allowed {', '.join(MODELS)}")
    if name == "deeplabv3plus":
        golden = os.path.join(ROOT, "tests", "golden")
        if golden not in sys.path:
            sys.path.insert(0, golden)
        import reference_models  # noqa: E402 (tests/golden, found above)
        model = reference_models.DeepLabV3Plus()
        labels = torch.randint(0, reference_models.CITYSCAPES_CLASSES + 1, (batch, height, width))
        labels[labels == reference_models.CITYSCAPES_CLASSES] = IGNORE_INDEX

        def loss(out, y):
            return torch.nn.functional.cross_entropy(out, y, ignore_index=IGNORE_INDEX)
    else:
        model, loss = image_classifiers.classifier(name)
        labels = torch.randint(0, image_classifiers.CLASSES, (batch,))
    model.train()
    return model.to(device), labels.to(device), loss
