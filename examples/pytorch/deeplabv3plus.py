"""DeepLabV3+ and its Cityscapes data in PyTorch: the network dlbench-worker's deeplabv3plus is
(tests/golden/reference_models.py checks one against the other, weight for weight), and the
training pairs and transforms dlbench-worker's cityscapes pipeline reproduces.

DeepLabV3+ (Chen et al., 2018) with a ResNet-50 backbone: torchvision's resnet50 with layer4
dilated (output stride 16), torchvision's ASPP with rates 6/12/18, the paper's decoder (layer1's
features projected to 48 channels, concatenated with the ASPP output upsampled to their size, two
3x3 convolutions of 256, a 1x1 convolution to the classes) and bilinear upsampling to the input.
Module names are dlbench's parameter names.
"""
import glob
import os
import random

import numpy as np
import torch
import torch.nn.functional as F
import torchvision
from torch import nn
from torchvision.models._utils import IntermediateLayerGetter
from torchvision.models.segmentation.deeplabv3 import ASPP

__all__ = ["CLASSES", "IGNORED", "TRAIN_IDS", "DeepLabV3Plus", "cityscapes_pairs", "CityscapesTrain"]

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
    """torchvision's references/segmentation training transforms on PIL images (SegmentationPresetTrain:
    RandomResize of the shorter side to 0.5-2x, RandomHorizontalFlip, RandomCrop padded with 0 and
    255, ToTensor, Normalize), with crops of height x width and the label ids mapped to the 19
    training ids."""

    def __init__(self, pairs, height, width):
        self.pairs, self.crop = pairs, (height, width)
        self.train_ids = np.full(256, IGNORED, dtype=np.int64)
        for label_id, train_id in TRAIN_IDS.items():
            self.train_ids[label_id] = train_id

    def __len__(self):
        return len(self.pairs)

    def __getitem__(self, index):
        return self.sample(*self.pairs[index])

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
