"""The reference pipeline's pieces in Python PyTorch, for golden files and interop tests.

MiniResNet and the synthetic dataset here define what ddptrain must reproduce exactly.
Run with Debian's /usr/bin/python3 (python3-torch).
"""
import torch
import torch.nn as nn
import torch.nn.functional as F


def scaled(c, width):
    return max(1, int(c * width + 0.5))


class BasicBlock(nn.Module):
    def __init__(self, in_ch, out_ch, stride=1):
        super().__init__()
        self.conv1 = nn.Conv2d(in_ch, out_ch, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(out_ch)
        self.conv2 = nn.Conv2d(out_ch, out_ch, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(out_ch)
        self.shortcut = nn.Sequential()
        if stride != 1 or in_ch != out_ch:
            self.shortcut = nn.Sequential(
                nn.Conv2d(in_ch, out_ch, 1, stride, bias=False), nn.BatchNorm2d(out_ch))

    def forward(self, x):
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return F.relu(out + self.shortcut(x))


class MiniResNet(nn.Module):
    def __init__(self, in_channels=3, num_classes=10, width=1.0):
        super().__init__()
        c1, c2, c3 = scaled(64, width), scaled(128, width), scaled(256, width)
        self.stem = nn.Sequential(nn.Conv2d(in_channels, c1, 3, 1, 1, bias=False),
                                  nn.BatchNorm2d(c1), nn.ReLU(inplace=True))
        self.stages = nn.Sequential(BasicBlock(c1, c1), BasicBlock(c1, c1),
                                    BasicBlock(c1, c2, 2), BasicBlock(c2, c2),
                                    BasicBlock(c2, c3, 2), BasicBlock(c3, c3))
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(c3, num_classes)

    def forward(self, x):
        x = self.stages(self.stem(x))
        return self.fc(torch.flatten(self.pool(x), 1))


class SyntheticDataset(torch.utils.data.Dataset):
    def __init__(self, size=50000, in_channels=3, image_size=32, num_classes=10):
        self.size, self.c, self.s, self.k = size, in_channels, image_size, num_classes

    def __len__(self):
        return self.size

    def __getitem__(self, idx):
        g = torch.Generator().manual_seed(idx)
        x = torch.randn(self.c, self.s, self.s, generator=g)
        y = torch.randint(0, self.k, (1,), generator=g).item()
        return x, y


def tensor_digest(t):
    """Position-sensitive float64 digest: sum, weighted sum, first and last value."""
    v = t.detach().reshape(-1).double()
    w = (torch.arange(v.numel(), dtype=torch.float64) % 97) + 1
    return (float(v.sum()), float((v * w).sum()), float(v[0]), float(v[-1]))
