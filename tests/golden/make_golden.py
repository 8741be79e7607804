"""Regenerates the golden files from Python PyTorch (Debian python3-torch):

    /usr/bin/python3 tests/golden/make_golden.py

sampler.txt: DistributedSampler indices over a grid of (len, world, rank, shuffle, seed,
epoch, drop_last). model_seed42.txt: digests of MiniResNet's initial tensors after
torch.manual_seed(42). synthetic.txt: digests of synthetic samples.
"""
import os
import sys

import torch
from torch.utils.data import DistributedSampler

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "python"))
from reference import MiniResNet, SyntheticDataset, tensor_digest  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))


class _Len:
    def __init__(self, n):
        self.n = n

    def __len__(self):
        return self.n


def sampler():
    lines = []
    for n in (0, 1, 7, 10, 1001):
        for world in (1, 2, 3, 4):
            for rank in range(world):
                for shuffle in (True, False):
                    for seed in (0, 42):
                        for epoch in (1, 2):
                            for drop_last in (False, True):
                                s = DistributedSampler(_Len(n), num_replicas=world, rank=rank,
                                                       shuffle=shuffle, seed=seed, drop_last=drop_last)
                                s.set_epoch(epoch)
                                idx = " ".join(str(i) for i in s)
                                lines.append(f"{n} {world} {rank} {int(shuffle)} {seed} {epoch} {int(drop_last)}: {idx}")
    with open(os.path.join(HERE, "sampler.txt"), "w") as f:
        f.write("\n".join(lines) + "\n")


def model():
    lines = []
    for width in (1.0, 0.25):
        torch.manual_seed(42)
        m = MiniResNet(in_channels=3, num_classes=10, width=width)
        for k, v in m.state_dict().items():
            d = tensor_digest(v)
            lines.append(f"{width} {k} {'x'.join(str(s) for s in v.shape) or 'scalar'} " + " ".join(repr(x) for x in d))
    with open(os.path.join(HERE, "model_seed42.txt"), "w") as f:
        f.write("\n".join(lines) + "\n")


def synthetic():
    ds = SyntheticDataset(size=100000, in_channels=3, image_size=32, num_classes=10)
    lines = []
    for i in (0, 1, 7, 4242, 99999):
        x, y = ds[i]
        lines.append(f"{i} {y} " + " ".join(repr(v) for v in tensor_digest(x)))
    with open(os.path.join(HERE, "synthetic.txt"), "w") as f:
        f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    sampler()
    model()
    synthetic()
