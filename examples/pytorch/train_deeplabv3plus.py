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
import functools
import glob
import os
import random
import sys

import numpy as np
import torch
import torch.nn.functional as F
import torchvision
from torch import nn
from torchvision.models._utils import IntermediateLayerGetter
from torchvision.models.segmentation.deeplabv3 import ASPP

from dlbench_torch import launch, optimizer_for

CLASSES = 19
IGNORED = 255
# cityscapesScripts' labels.py: label id -> training id; every other id is ignored.
TRAIN_IDS = {7: 0, 8: 1, 11: 2, 12: 3, 13: 4, 17: 5, 19: 6, 20: 7, 21: 8, 22: 9, 23: 10, 24: 11, 25: 12, 26: 13,
             27: 14, 28: 15, 31: 16, 32: 17, 33: 18}


class DeepLabV3Plus(nn.Module):
    def __init__(self, num_classes=CLASSES, rates=(6, 12, 18)):
        super().__init__()
        resnet = torchvision.models.resnet50(replace_stride_with_dilation=[False, False, True])
        self.backbone = IntermediateLayerGetter(resnet, {"layer1": "low_level", "layer4": "out"})
        self.aspp = ASPP(2048, list(rates), 256)
        self.project = nn.Sequential(nn.Conv2d(256, 48, 1, bias=False), nn.BatchNorm2d(48), nn.ReLU())
        self.classifier = nn.Sequential(
            nn.Conv2d(304, 256, 3, padding=1, bias=False), nn.BatchNorm2d(256), nn.ReLU(),
            nn.Conv2d(256, 256, 3, padding=1, bias=False), nn.BatchNorm2d(256), nn.ReLU(),
            nn.Conv2d(256, num_classes, 1))

    def forward(self, x):
        features = self.backbone(x)
        low_level = features["low_level"]
        encoded = F.interpolate(self.aspp(features["out"]), size=low_level.shape[-2:], mode="bilinear",
                                align_corners=False)
        logits = self.classifier(torch.cat([encoded, self.project(low_level)], dim=1))
        return F.interpolate(logits, size=x.shape[-2:], mode="bilinear", align_corners=False)


def main():
    return launch(train)


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
    batches = (real_batches(case, process.rank, process.world_size, process.cuda)
               if case.data_source == "cityscapes" else None)

    half = {"amp": torch.float16, "bf16": torch.bfloat16}.get(case.precision)
    scaler = torch.cuda.amp.GradScaler() if case.precision == "amp" else None

    def train_step():
        nonlocal images, labels
        if batches is not None:  # the wait for the next batch is part of the step, as in dlbench-worker
            images, labels = next(batches)
            images = images.to(device, non_blocking=True)
            labels = labels.to(device, non_blocking=True)
        if process.cuda:
            images = images.contiguous(memory_format=torch.channels_last)
        optimizer.zero_grad()
        if half is not None:
            with torch.autocast(device_type=device.type, dtype=half):
                loss = criterion(model(images), labels)
        else:
            loss = criterion(model(images), labels)
        (scaler.scale(loss) if scaler is not None else loss).backward()
        optimizer.step(model, scaler)
        return loss

    process.run_steps(case, train_step)


def cityscapes_pairs(root):
    """leftImg8bit/train's images with their gtFine/train labelIds, sorted, as dlbench-worker pairs them."""
    pairs = []
    for image in sorted(glob.glob(os.path.join(root, "leftImg8bit", "train", "*", "*_leftImg8bit.png"))):
        city, name = os.path.basename(os.path.dirname(image)), os.path.basename(image)
        labels = os.path.join(root, "gtFine", "train", city, name[:-len("_leftImg8bit.png")] + "_gtFine_labelIds.png")
        if os.path.isfile(labels):
            pairs.append((image, labels))
    if not pairs:
        raise SystemExit(f"{root}: no leftImg8bit/train image with its gtFine/train labelIds")
    return pairs


class CityscapesTrain(torch.utils.data.Dataset):
    """torchvision's references/segmentation training transforms on PIL images, with crops of
    height x width; a pair PIL cannot read gives its place to the next one, as in dlbench-worker."""

    def __init__(self, pairs, height, width):
        self.pairs, self.crop = pairs, (height, width)
        self.train_ids = np.full(256, IGNORED, dtype=np.int64)
        for label_id, train_id in TRAIN_IDS.items():
            self.train_ids[label_id] = train_id

    def __len__(self):
        return len(self.pairs)

    def __getitem__(self, index):
        for attempt in range(len(self.pairs)):
            try:
                return self.sample(*self.pairs[(index + attempt) % len(self.pairs)])
            except OSError:  # PIL's UnidentifiedImageError and truncated files are OSErrors
                continue
        raise SystemExit("no pair of the data set can be read")

    def sample(self, image_path, label_path):
        from PIL import Image
        from torchvision.transforms import InterpolationMode
        from torchvision.transforms import functional as TF
        image, target = Image.open(image_path).convert("RGB"), Image.open(label_path)
        size = random.randint(int(0.5 * min(image.size)), int(2.0 * min(image.size)))
        image = TF.resize(image, size)
        target = TF.resize(target, size, interpolation=InterpolationMode.NEAREST)
        if random.random() < 0.5:
            image, target = TF.hflip(image), TF.hflip(target)
        height, width = self.crop
        pad_h, pad_w = max(height - image.size[1], 0), max(width - image.size[0], 0)
        if pad_h or pad_w:
            image = TF.pad(image, [0, 0, pad_w, pad_h], fill=0)
            target = TF.pad(target, [0, 0, pad_w, pad_h], fill=IGNORED)
        top, left = random.randint(0, image.size[1] - height), random.randint(0, image.size[0] - width)
        image, target = TF.crop(image, top, left, height, width), TF.crop(target, top, left, height, width)
        pixels = TF.normalize(TF.to_tensor(image), [0.485, 0.456, 0.406], [0.229, 0.224, 0.225])
        return pixels, torch.from_numpy(self.train_ids[np.asarray(target, dtype=np.uint8)])


def start_loader_worker(rank, worker):
    """A DataLoader worker: one torch thread, and its own draws. Module-level, so that processes
    started by spawn (one per device) can pickle it."""
    torch.set_num_threads(1)
    random.seed(42 + 1000 * rank + worker)


def real_batches(case, rank, world_size, cuda):
    """Endless batches of this rank's shard of Cityscapes' training pairs, epoch after epoch."""
    from torch.utils.data import DataLoader, DistributedSampler
    dataset = CityscapesTrain(cityscapes_pairs(case.data_path), case.image_height, case.image_width)
    sampler = DistributedSampler(dataset, num_replicas=world_size, rank=rank, shuffle=True, seed=42, drop_last=True)
    loader = DataLoader(dataset, batch_size=case.batch_size, sampler=sampler, num_workers=case.decode_threads,
                        prefetch_factor=case.prefetch_batches, persistent_workers=True, pin_memory=cuda,
                        drop_last=True, worker_init_fn=functools.partial(start_loader_worker, rank))
    epoch = 0
    while True:
        sampler.set_epoch(epoch)
        yielded = False
        for batch in loader:
            yielded = True
            yield batch
        if not yielded:
            raise SystemExit(f"{case.data_path}: fewer than {case.batch_size} pairs per rank, no full batch")
        epoch += 1


if __name__ == "__main__":
    sys.exit(main())
