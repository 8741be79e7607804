"""Runs torch.distributed.run (torchrun) from Debian's python3-torch (or any torch 2.x).

torch 1.13's torchrun dies at start on Python 3.11 in Std.from_str: Python 3.11's IntFlag no
longer yields the zero member when iterated. This wrapper patches that one function and
then calls torchrun's main() with the given arguments, unchanged otherwise.
"""
import sys

import torch
from torch.distributed.elastic.multiprocessing import api


def _from_str(vm):
    def to_std(v):
        s = api.Std(v)
        if s in api.Std:
            return s
        raise ValueError(f"{v} not a valid Std")

    if ":" not in vm and "," not in vm:
        return to_std(int(vm))
    d = {}
    for m in vm.split(","):
        i, v = m.split(":")
        d[int(i)] = to_std(int(v))
    return d


if torch.__version__.startswith("1."):  # 2.x's own from_str works
    api.Std.from_str = staticmethod(_from_str)

from torch.distributed.run import main  # noqa: E402

if __name__ == "__main__":
    main(sys.argv[1:])
