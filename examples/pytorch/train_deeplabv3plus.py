#!/usr/bin/env python3
"""DeepLabV3+ training in PyTorch, timed by dlbench's command engine.

The network is dlbench-worker's deeplabv3plus built from torchvision's parts: resnet50 with
layer4 dilated (output stride 16), torchvision's ASPP with rates 6/12/18, the paper's decoder on
layer1's features, bilinear upsampling to the input, 19 classes. It trains with a per-pixel
cross-entropy that ignores label 255, on a fixed random batch of data.imageHeight x imageWidth
crops (synthetic: uniform labels with about 1 pixel in 20 ignored, as dlbench-worker's) or, with
data.source cityscapes, on Cityscapes' training pairs through a DataLoader (DLBENCH_DECODE_THREADS
worker processes per rank, a DistributedSampler per epoch) with torchvision's segmentation
reference transforms, as dlbench-worker's pipeline applies them: RandomResize of the shorter side
to 0.5-2x, RandomHorizontalFlip, RandomCrop padded with 0 and 255, ToTensor, Normalize; label ids
to the 19 training ids. The optimizer is the spec's, as dlbench-worker runs it (dlbench_torch.py).
It prints "@dlbench step <global samples>" after every step. One command per node:

    python3 train_deeplabv3plus.py     # starts DLBENCH_GPUS_PER_NODE processes itself

Processes, devices, precisions and optimizers as dlbench_torch.py describes.
"""
import sys

import torch
from torch import nn

from deeplabv3plus import CLASSES, IGNORED, CityscapesTrain, DeepLabV3Plus, cityscapes_pairs
from dlbench_torch import Precision, SkippingUnreadable, batch_source, endless_batches, launch, optimizer_for


def main():
    return launch(train, ("deeplabv3plus",))


def train(case, process):
    device = process.device
    torch.manual_seed(1234 + process.rank)
    model = DeepLabV3Plus().to(device)
    if process.cuda:
        model = model.to(memory_format=torch.channels_last)
    model = process.parallel(model)
    optimizer = optimizer_for(case, model, process)
    criterion = nn.CrossEntropyLoss(ignore_index=IGNORED)
    images = torch.randn(case.batch_size, 3, case.image_height, case.image_width, device=device)
    labels = torch.randint(0, CLASSES + 1, (case.batch_size, case.image_height, case.image_width), device=device)
    labels[labels == CLASSES] = IGNORED  # about 1 in 20
    batches = None
    if case.data_source == "cityscapes":
        pairs = CityscapesTrain(cityscapes_pairs(case.data_path), case.image_height, case.image_width)
        process.states_input(*pairs.crop)
        batches = endless_batches(SkippingUnreadable(pairs), case, process)
    else:
        process.states_input(*images.shape[2:])

    if process.cuda:  # the fixed batch in the model's layout once, not each step
        images = images.contiguous(memory_format=torch.channels_last)
    next_batch = batch_source(batches, images, labels, device, channels_last=process.cuda)
    precision = Precision(case, process)

    def train_step():
        x, y = next_batch()
        return precision.step(model, optimizer, lambda: criterion(model(x), y))

    process.run_steps(case, train_step)


if __name__ == "__main__":
    sys.exit(main())
