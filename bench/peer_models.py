"""The models of the PyTorch-peer benchmark (issue #12), each with its loss in forward(x, target).

GPT decoder: d=384, 6 heads, 4 layers, seq 64, batch 16, vocab 1000, tied head, exact GELU,
causal mask (test/fixtures/torch2_models.Decoder); CIFAR ResNet-20: 16/32/64 channels, 3 basic
blocks a stage, BatchNorm, batch 64; the 1024-wide MLP at batch 256.
"""
import os
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "test", "fixtures"))
import torch2_models  # noqa: E402
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_models import WideMLP  # noqa: E402  (the wide MLP of bench/run.py)


class BasicBlock(nn.Module):
    def __init__(self, cin, cout, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.short = None
        if stride != 1 or cin != cout:
            self.short = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x):
        h = F.relu(self.bn1(self.conv1(x)))
        h = self.bn2(self.conv2(h))
        return F.relu(h + (x if self.short is None else self.short(x)))


class ResNet20(nn.Module):
    def __init__(self, classes=10):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 16, 3, 1, 1, bias=False), nn.BatchNorm2d(16), nn.ReLU())
        layers, cin = [], 16
        for cout, stride in ((16, 1), (32, 2), (64, 2)):
            for i in range(3):
                layers.append(BasicBlock(cin, cout, stride if i == 0 else 1))
                cin = cout
        self.layers = nn.Sequential(*layers)
        self.fc = nn.Linear(64, classes)

    def forward(self, x, target):
        h = self.layers(self.stem(x)).mean(dim=(2, 3))
        return F.cross_entropy(self.fc(h), target)


BATCH = {"gpt": 16, "resnet20": 64, "wide_mlp": 256}  # the CPU benchmark's batches


def build(name, batch=None):
    """(model, (x, target)), seeded; `batch` overrides the CPU benchmark's batch."""
    torch.manual_seed(0)
    b = batch or BATCH[name]
    if name == "gpt":
        model = torch2_models.Decoder(vocab=1000, d=384, heads=6, layers=4, seq=64)
        return model, (torch.randint(0, 1000, (b, 64)), torch.randint(0, 1000, (b, 64)))
    if name == "resnet20":
        return ResNet20(), (torch.randn(b, 3, 32, 32), torch.randint(0, 10, (b,)))
    if name == "wide_mlp":
        return WideMLP(), (torch.randn(b, 1024), torch.randint(0, 10, (b,)))
    raise ValueError(name)


NAMES = ["gpt", "resnet20", "wide_mlp"]
