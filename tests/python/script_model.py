"""Models ddptrain has never seen, scripted in Python (#14), and Python's side of their tests.
Any python with torch 1.13 or 2.x (the build's: each file is made by the torch it is tested with).

  script_model.py save PATH [KIND]         torch.jit.script(KIND()).save(PATH), seed 0. KIND:
      net (default)  conv + GroupNorm + SiLU + Linear: (B, 3, H, W) -> (B, 10)
      bn             conv + BatchNorm + dropout + Linear: (B, 3, H, W) -> (B, 10)
      lm             a small causal transformer: (B, T) int64 -> (B, T, 256); T <= 64
      regressor      conv + Linear: (B, 3, H, W) -> (B, 2), for --loss mse
      no_params      a forward without parameters
      two_inputs     forward(x, y)
      few_classes    (B, 3, H, W) -> (B, 4) logits
      many_classes   (B, 3, H, W) -> (B, 12) logits
      ema            net with a buffer `ema` its forward assigns anew in training
  script_model.py save_mini_resnet PATH WIDTH   the reference MiniResNet (tests/python/reference.py), scripted
  script_model.py newer PATH OUT           PATH with its archive's version records set to 99 (a file
                                           as a newer torch would write it)
  script_model.py load_weights MODEL_PT [KIND]  load ddptrain's model.pt into KIND (strict); prints LOADED
  script_model.py same SCRIPT_PT MODEL_PT  the scripted file's weights equal model.pt's (exit 1 if not)
  script_model.py buffer MODEL_PT NAME     prints VALUE and the one-element tensor NAME of model.pt
  script_model.py close A_PT B_PT ATOL     two state_dict files agree within ATOL (exit 1 naming the first
                                           tensor that does not)
  script_model.py regression_data DIR      DIR/train.pt and test.pt: images and float targets (N, 2)
"""
import os
import sys
import zipfile

import torch
from torch import nn
import torch.nn.functional as F


class Net(nn.Module):
    def __init__(self, channels: int = 3, classes: int = 10):
        super().__init__()
        self.stem = nn.Conv2d(channels, 8, 3, padding=1)
        self.norm = nn.GroupNorm(2, 8)
        self.body = nn.Sequential(nn.Conv2d(8, 8, 3, padding=1), nn.SiLU())
        self.head = nn.Linear(8, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = F.silu(self.norm(self.stem(x)))
        h = self.body(h)
        return self.head(h.mean(dim=(2, 3)))


class EmaNet(nn.Module):
    """Net with a buffer its forward assigns anew (not in place): the inputs' running mean."""

    def __init__(self):
        super().__init__()
        self.net = Net()
        self.register_buffer("ema", torch.zeros(()))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.training:
            self.ema = 0.5 * self.ema + 0.5 * x.mean()
        return self.net(x)


class BnNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = nn.Conv2d(3, 8, 3, padding=1, bias=False)
        self.bn = nn.BatchNorm2d(8)
        self.drop = nn.Dropout(0.3)
        self.head = nn.Linear(8, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = F.relu(self.bn(self.stem(x))).mean(dim=(2, 3))
        return self.head(self.drop(h))


class Block(nn.Module):
    def __init__(self, dim: int, heads: int):
        super().__init__()
        self.heads = heads
        self.ln1 = nn.LayerNorm(dim)
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        self.ln2 = nn.LayerNorm(dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, c = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(c, dim=2)
        q = q.view(b, t, self.heads, c // self.heads).transpose(1, 2)
        k = k.view(b, t, self.heads, c // self.heads).transpose(1, 2)
        v = v.view(b, t, self.heads, c // self.heads).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) / float(c // self.heads) ** 0.5
        causal = torch.ones(t, t, dtype=torch.bool, device=x.device).tril()
        att = att.masked_fill(~causal, float("-inf")).softmax(dim=-1)
        y = (att @ v).transpose(1, 2).reshape(b, t, c)
        x = x + self.proj(y)
        return x + self.mlp(self.ln2(x))


class TinyLM(nn.Module):
    def __init__(self, vocab: int = 256, block: int = 64, dim: int = 32, heads: int = 2, layers: int = 2):
        super().__init__()
        self.tok = nn.Embedding(vocab, dim)
        self.pos = nn.Embedding(block, dim)
        self.blocks = nn.ModuleList([Block(dim, heads) for _ in range(layers)])
        self.ln = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, vocab)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        t = idx.size(1)
        x = self.tok(idx) + self.pos(torch.arange(t, device=idx.device))
        for block in self.blocks:
            x = block(x)
        return self.head(self.ln(x))


class Regressor(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)
        self.head = nn.Linear(4, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(torch.tanh(self.conv(x)).mean(dim=(2, 3)))


class NoParams(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.flatten(1)[:, :10]


class TwoInputs(nn.Module):
    def __init__(self):
        super().__init__()
        self.head = nn.Linear(3, 10)

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return self.head(x.mean(dim=(2, 3)) + y)


class FlatLinear(nn.Module):
    """A classifier of Cx28x28 images, flattened: it does not fit 3x8x8 inputs."""
    def __init__(self, channels: int = 3):
        super().__init__()
        self.head = nn.Linear(channels * 28 * 28, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(x.flatten(1))


KINDS = {"flat_linear": FlatLinear, "fmnist_linear": lambda: FlatLinear(1), "net": Net, "bn": BnNet, "lm": TinyLM, "regressor": Regressor, "no_params": NoParams,
         "two_inputs": TwoInputs, "few_classes": lambda: Net(classes=4),
         "many_classes": lambda: Net(classes=12), "ema": EmaNet}


def newer(path, out):
    """The archive with every version record raised: what torch.jit.load of a file from a newer
    torch sees (the producer's serialization format version is what it checks)."""
    with zipfile.ZipFile(path) as src, zipfile.ZipFile(out, "w", zipfile.ZIP_STORED) as dst:
        for info in src.infolist():
            data = src.read(info.filename)
            if info.filename.endswith("/version") or info.filename.endswith("/.data/version"):
                data = b"99\n"
            dst.writestr(info.filename, data)


def regression_data(out_dir):
    os.makedirs(out_dir, exist_ok=True)
    g = torch.Generator().manual_seed(0)
    for split, n in (("train", 64), ("test", 32)):
        x = torch.randn(n, 3, 8, 8, generator=g)
        y = torch.stack([x.mean(dim=(1, 2, 3)), x[:, 0].std(dim=(1, 2))], dim=1)
        torch.save({"images": x, "labels": y}, f"{out_dir}/{split}.pt")


def parts(key, t, key_bias_atol):
    """(name, tensor, bound) to compare: GPT's fused q/k/v bias (c_attn.bias) with its key third
    apart when key_bias_atol is given. The key bias's gradient is zero up to rounding (the
    softmax ignores a shift common to a row), and Adam divides a gradient by its own magnitude:
    that third steps by up to the learning rate on rounding alone, which differs by CPU."""
    if key_bias_atol is None or not key.endswith("attn.c_attn.bias") or t.numel() % 3:
        return [(key, t, None)]
    c = t.numel() // 3
    return [(key + "[q]", t[:c], None), (key + "[k]", t[c : 2 * c], float(key_bias_atol)),
            (key + "[v]", t[2 * c :], None)]


def close(a, b, atol, key_bias_atol=None):
    sa, sb = torch.load(a, weights_only=True), torch.load(b, weights_only=True)
    if set(sa) != set(sb):
        sys.exit(f"different keys: {sorted(set(sa) ^ set(sb))}")
    worst = 0.0
    for k in sorted(sa):
        for (name, x, bound), (_, y, _) in zip(parts(k, sa[k], key_bias_atol), parts(k, sb[k], key_bias_atol)):
            diff = (x.double() - y.double()).abs().max().item() if x.numel() else 0.0
            if bound is None:
                worst = max(worst, diff)
            else:
                print(f"{name}: max abs diff {diff} (bound {bound})")
            if not diff <= (float(atol) if bound is None else bound):  # NaN fails too
                sys.exit(f"DIFFERENT {name}: max abs diff {diff}")
    print(f"CLOSE max abs diff {worst}")


def main() -> None:
    what, path = sys.argv[1], sys.argv[2]
    if what == "save":
        torch.manual_seed(0)
        torch.jit.script(KINDS[sys.argv[3] if len(sys.argv) > 3 else "net"]()).save(path)
    elif what == "save_mini_resnet":
        sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
        from reference import MiniResNet
        torch.manual_seed(0)
        torch.jit.script(MiniResNet(3, 10, float(sys.argv[3]))).save(path)
    elif what == "newer":
        newer(path, sys.argv[3])
    elif what == "load_weights":
        net = KINDS[sys.argv[3] if len(sys.argv) > 3 else "net"]()
        state = torch.load(path, weights_only=True)
        net.load_state_dict(state, strict=True)
        print("LOADED", len(state), "tensors")
    elif what == "same":
        script = torch.jit.load(path).state_dict()
        trained = torch.load(sys.argv[3], weights_only=True)
        diff = max((script[k] - trained[k]).abs().max().item() for k in script)
        print("max diff", diff)
        sys.exit(0 if diff < 1e-12 and set(script) == set(trained) else 1)
    elif what == "buffer":
        print("VALUE", torch.load(path, weights_only=True)[sys.argv[3]].item())
    elif what == "close":
        close(path, sys.argv[3], sys.argv[4], sys.argv[5] if len(sys.argv) > 5 else None)
    elif what == "regression_data":
        regression_data(path)
    else:
        sys.exit("unknown command " + what)


if __name__ == "__main__":
    main()
