"""Loads a ddptrain model.pt the safe way and checks it against the reference MiniResNet.

usage: check_state_dict.py MODEL_PT WIDTH [FIRST_TENSOR_SUM]
Exit 0 and print OK when: torch.load(weights_only=True) accepts the file, every key of the
reference module is present with the right shape (strict load_state_dict), in the same order.
"""
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from reference import MiniResNet  # noqa: E402

path, width = sys.argv[1], float(sys.argv[2])
sd = torch.load(path, weights_only=True)
assert isinstance(sd, dict), type(sd)
ref = MiniResNet(in_channels=int(sd["stem.0.weight"].shape[1]), num_classes=int(sd["fc.bias"].shape[0]),
                 width=width)
ref.load_state_dict(sd, strict=True)
assert list(sd.keys()) == list(ref.state_dict().keys()), "key order differs"
if len(sys.argv) > 3:
    first = next(iter(sd.values())).double().sum().item()
    assert abs(first - float(sys.argv[3])) <= 1e-4 * (1 + abs(first)), (first, sys.argv[3])
print(f"OK {len(sd)} tensors, {sum(v.numel() for v in sd.values())} values")
