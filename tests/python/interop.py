"""Python's side of the interop tests (any python with torch 1.13 or 2.x; safetensors from .pydeps).

  interop.py save_init OUT WIDTH SEED      torch.save(MiniResNet(width).state_dict(), OUT), with
                                           random BatchNorm statistics too
  interop.py same_params A B ATOL          parameters (not running statistics) of two state_dict
                                           files agree within ATOL; exit 1 naming the first that differs
  interop.py check_export PT SAFETENSORS   the safetensors file holds exactly the tensors of PT,
                                           bitwise, read by the safetensors package itself
"""
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from reference import MiniResNet  # noqa: E402


def save_init(out, width, seed):
    torch.manual_seed(int(seed))
    model = MiniResNet(in_channels=3, num_classes=10, width=float(width))
    for name, buf in model.named_buffers():
        if name.endswith("running_mean") or name.endswith("running_var"):
            buf.copy_(torch.rand_like(buf) + 0.5)
    torch.save(model.state_dict(), out)
    print(f"saved {len(model.state_dict())} tensors to {out}")


def same_params(a, b, atol):
    sa, sb = torch.load(a, weights_only=True), torch.load(b, weights_only=True)
    ref = MiniResNet(in_channels=3, num_classes=10, width=1.0)
    param_suffixes = {n.rsplit(".", 1)[-1] for n, _ in ref.named_parameters()}
    assert sa.keys() == sb.keys(), (sorted(sa.keys() ^ sb.keys()))
    for k in sa:
        if k.rsplit(".", 1)[-1] not in param_suffixes or "running" in k:
            continue
        diff = (sa[k].double() - sb[k].double()).abs().max().item()
        if diff > float(atol):
            print(f"DIFFERENT {k}: max abs diff {diff}")
            sys.exit(1)
    print("SAME parameters")


def check_export(pt, st):
    from safetensors import safe_open
    from safetensors.torch import load_file
    sd = torch.load(pt, weights_only=True)
    loaded = load_file(st)
    assert set(loaded) == set(sd), sorted(set(loaded) ^ set(sd))
    for k, t in sd.items():
        a = loaded[k]
        assert a.shape == t.shape and a.dtype == t.dtype, (k, a.shape, t.shape, a.dtype, t.dtype)
        assert torch.equal(a, t), f"{k} differs"
    with safe_open(st, framework="pt") as f:
        meta = f.metadata()
    assert meta and meta.get("format") == "pt", meta
    print(f"EXPORT OK {len(sd)} tensors")


if __name__ == "__main__":
    {"save_init": save_init, "same_params": same_params, "check_export": check_export}[sys.argv[1]](*sys.argv[2:])
