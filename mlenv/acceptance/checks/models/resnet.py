"""ResNet-18 and ResNet-50 (He et al., 2015), written here because torchvision is not
installable beside the CPU torch build the tests use.

The layer layout and initialisation follow torchvision's ``resnet18``/``resnet50`` so
parameter counts match the published figures (11,689,512 and 25,557,032 at 1000
classes, 3×224×224 input). For small images (below 64 px, e.g. CIFAR-10 or
FashionMNIST) the ``cifar`` stem replaces the 7×7/2 convolution and max-pool with one
3×3/1 convolution, the usual choice that keeps 32 px inputs from collapsing to 1×1
before the last stage.

torch is imported lazily by :func:`mlenv.acceptance.checks.models.build_model`; this module
imports it at the top because it is only ever imported from there.
"""

from __future__ import annotations

import torch
from torch import nn


def _conv3x3(cin: int, cout: int, stride: int = 1) -> nn.Conv2d:
    return nn.Conv2d(cin, cout, kernel_size=3, stride=stride, padding=1, bias=False)


def _conv1x1(cin: int, cout: int, stride: int = 1) -> nn.Conv2d:
    return nn.Conv2d(cin, cout, kernel_size=1, stride=stride, bias=False)


class BasicBlock(nn.Module):
    """Two 3×3 convolutions with a residual connection (ResNet-18/34)."""

    expansion = 1

    def __init__(
        self, cin: int, width: int, stride: int = 1, downsample: nn.Module | None = None
    ) -> None:
        super().__init__()
        self.conv1 = _conv3x3(cin, width, stride)
        self.bn1 = nn.BatchNorm2d(width)
        self.conv2 = _conv3x3(width, width)
        self.bn2 = nn.BatchNorm2d(width)
        self.relu = nn.ReLU(inplace=True)
        self.downsample = downsample

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Residual block forward."""
        identity = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        out = torch.relu(out + identity)
        return out


class Bottleneck(nn.Module):
    """1×1 reduce, 3×3, 1×1 expand (ResNet-50); stride on the 3×3 as in torchvision v1.5."""

    expansion = 4

    def __init__(
        self, cin: int, width: int, stride: int = 1, downsample: nn.Module | None = None
    ) -> None:
        super().__init__()
        self.conv1 = _conv1x1(cin, width)
        self.bn1 = nn.BatchNorm2d(width)
        self.conv2 = _conv3x3(width, width, stride)
        self.bn2 = nn.BatchNorm2d(width)
        self.conv3 = _conv1x1(width, width * self.expansion)
        self.bn3 = nn.BatchNorm2d(width * self.expansion)
        self.relu = nn.ReLU(inplace=True)
        self.downsample = downsample

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Residual block forward."""
        identity = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        out = torch.relu(out + identity)
        return out


class ResNet(nn.Module):
    """A ResNet for image classification: ``(N, C, H, W)`` in, ``(N, num_classes)`` logits out."""

    def __init__(
        self,
        block: type[BasicBlock] | type[Bottleneck],
        layers: list[int],
        num_classes: int = 1000,
        in_channels: int = 3,
        stem: str = "imagenet",
    ) -> None:
        super().__init__()
        if stem not in ("imagenet", "cifar"):
            raise ValueError(f"stem must be 'imagenet' or 'cifar', got {stem!r}")
        self.inplanes = 64
        if stem == "imagenet":
            self.stem: nn.Module = nn.Sequential(
                nn.Conv2d(in_channels, 64, kernel_size=7, stride=2, padding=3, bias=False),
                nn.BatchNorm2d(64),
                nn.ReLU(inplace=True),
                nn.MaxPool2d(kernel_size=3, stride=2, padding=1),
            )
        else:
            self.stem = nn.Sequential(
                _conv3x3(in_channels, 64), nn.BatchNorm2d(64), nn.ReLU(inplace=True)
            )
        self.layer1 = self._make_layer(block, 64, layers[0])
        self.layer2 = self._make_layer(block, 128, layers[1], stride=2)
        self.layer3 = self._make_layer(block, 256, layers[2], stride=2)
        self.layer4 = self._make_layer(block, 512, layers[3], stride=2)
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
        self.fc = nn.Linear(512 * block.expansion, num_classes)
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
            elif isinstance(m, nn.BatchNorm2d):
                nn.init.ones_(m.weight)
                nn.init.zeros_(m.bias)
        # Zero-init the last BN of each residual branch: every block starts as the
        # identity, which trains faster and more stably (Goyal et al., 2017).
        for m in self.modules():
            if isinstance(m, Bottleneck):
                nn.init.zeros_(m.bn3.weight)
            elif isinstance(m, BasicBlock):
                nn.init.zeros_(m.bn2.weight)

    def _make_layer(
        self, block: type[BasicBlock] | type[Bottleneck], width: int, blocks: int, stride: int = 1
    ) -> nn.Sequential:
        downsample: nn.Module | None = None
        if stride != 1 or self.inplanes != width * block.expansion:
            downsample = nn.Sequential(
                _conv1x1(self.inplanes, width * block.expansion, stride),
                nn.BatchNorm2d(width * block.expansion),
            )
        layers: list[nn.Module] = [block(self.inplanes, width, stride, downsample)]
        self.inplanes = width * block.expansion
        layers += [block(self.inplanes, width) for _ in range(1, blocks)]
        return nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Logits for a batch of images."""
        x = self.stem(x)
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        logits: torch.Tensor = self.fc(torch.flatten(self.avgpool(x), 1))
        return logits


def resnet18(num_classes: int = 1000, in_channels: int = 3, stem: str = "imagenet") -> ResNet:
    """ResNet-18: BasicBlock × [2, 2, 2, 2] (11.69 M parameters at 1000 classes)."""
    return ResNet(BasicBlock, [2, 2, 2, 2], num_classes, in_channels, stem)


def resnet50(num_classes: int = 1000, in_channels: int = 3, stem: str = "imagenet") -> ResNet:
    """ResNet-50: Bottleneck × [3, 4, 6, 3] (25.56 M parameters at 1000 classes)."""
    return ResNet(Bottleneck, [3, 4, 6, 3], num_classes, in_channels, stem)
