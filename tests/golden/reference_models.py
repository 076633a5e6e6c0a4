"""Reference networks for dlbench's models that torchvision does not ship whole, assembled from
torchvision's own parts (Debian's python3-torchvision 0.14).

DeepLabV3+ (Chen et al., 2018) with a ResNet-50 backbone: torchvision's resnet50 with layer4
dilated (output stride 16), torchvision's ASPP with rates 6/12/18, the paper's decoder (layer1's
features projected to 48 channels, concatenated with the ASPP output upsampled to their size, two
3x3 convolutions of 256, a 1x1 convolution to the classes) and bilinear upsampling to the input.
Module names are dlbench's parameter names.
"""
import torch
import torch.nn.functional as F
import torchvision
from torch import nn
from torchvision.models._utils import IntermediateLayerGetter
from torchvision.models.segmentation.deeplabv3 import ASPP

CITYSCAPES_CLASSES = 19
IGNORE_LABEL = 255


class DeepLabV3Plus(nn.Module):
    def __init__(self, num_classes=CITYSCAPES_CLASSES, rates=(6, 12, 18)):
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
    net = DeepLabV3Plus()
    print("deeplabv3plus parameters", sum(p.numel() for p in net.parameters()))
    for h, w in ((512, 1024), (65, 97)):
        print(f"deeplabv3plus forward MACs at {h}x{w}", forward_macs(net, h, w))
