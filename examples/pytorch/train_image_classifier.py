#!/usr/bin/env python3
"""Image classifier training in PyTorch, timed by dlbench's command engine: the network the case
names (DLBENCH_MODEL: resnet50, resnet152, vgg16, alexnet or inception_v3, as torchvision builds
them, image_classifiers.py), so that each model dlbench-worker trains has its PyTorch peer.

The script trains on a fixed random batch (synthetic data, as tf_cnn_benchmarks and dlbench-worker
do) or, with data.source imagefolder, on torchvision's ImageFolder through a DataLoader
(DLBENCH_DECODE_THREADS worker processes per rank, the same transforms as dlbench-worker's
pipeline, a DistributedSampler per epoch) with the spec's optimizer as dlbench-worker runs it
(dlbench_torch.py: sgd, or adamw; lamb is reported unsupported), for the case dlbench gives it in
DLBENCH_* variables, and prints "@dlbench step <global samples>" after every step. Another model
(bert-base, deeplabv3plus) is reported unsupported, naming the script that trains it. One command
per node:

    python3 train_image_classifier.py   # starts DLBENCH_GPUS_PER_NODE processes itself (torch.multiprocessing)
    torchrun --nnodes $DLBENCH_NODES --nproc_per_node $DLBENCH_GPUS_PER_NODE \
             --node_rank $DLBENCH_NODE_RANK --master_addr $MASTER_ADDR --master_port $MASTER_PORT \
             train_image_classifier.py  # or under torchrun, which starts them

Processes, devices, precisions and optimizers as dlbench_torch.py describes.
"""
import sys

import torch
import torchvision

from dlbench_torch import Precision, SkippingUnreadable, batch_source, endless_batches, launch, optimizer_for
from image_classifiers import CLASSES, CLASSIFIERS, classifier


def main():
    return launch(train, CLASSIFIERS)


def train(case, process):
    device = process.device
    torch.manual_seed(1234 + process.rank)
    network, criterion = classifier(case.model)
    model = process.parallel(network.to(device).to(memory_format=torch.channels_last))
    optimizer = optimizer_for(case, model, process)
    images = torch.randn(case.batch_size, 3, case.image_height, case.image_width, device=device)
    images = images.contiguous(memory_format=torch.channels_last)
    labels = torch.randint(0, CLASSES, (case.batch_size,), device=device)
    batches = real_batches(case, process) if case.data_source == "imagefolder" else None
    if batches is None:
        process.states_input(*images.shape[2:])

    next_batch = batch_source(batches, images, labels, device, channels_last=True)
    precision = Precision(case, process)

    def train_step():
        x, y = next_batch()
        return precision.step(model, optimizer, lambda: criterion(model(x), y))

    process.run_steps(case, train_step)


def real_batches(case, process):
    """Endless batches of this process's shard of the ImageFolder."""
    from torchvision import transforms
    crop = transforms.RandomResizedCrop(case.image_size)
    process.states_input(*crop.size)
    transform = transforms.Compose([crop, transforms.RandomHorizontalFlip(), transforms.ToTensor(),
                                    transforms.Normalize([0.485, 0.456, 0.406], [0.229, 0.224, 0.225])])
    return endless_batches(SkippingUnreadable(torchvision.datasets.ImageFolder(case.data_path, transform)), case, process)


if __name__ == "__main__":
    sys.exit(main())
