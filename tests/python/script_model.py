"""A model ddptrain has never seen, scripted in Python (#14): conv + GroupNorm + SiLU + Linear.

  script_model.py save PATH                  torch.jit.script(Net()).save(PATH) (seed 0)
  script_model.py load_weights MODEL_PT      load ddptrain's model.pt into Net (strict); prints LOADED
  script_model.py same SCRIPT_PT MODEL_PT    the scripted file's weights equal model.pt's (exit 1 if not)
"""
import sys

import torch
from torch import nn


class Net(nn.Module):
    def __init__(self, channels: int = 3, classes: int = 10):
        super().__init__()
        self.stem = nn.Conv2d(channels, 8, 3, padding=1)
        self.norm = nn.GroupNorm(2, 8)
        self.body = nn.Sequential(nn.Conv2d(8, 8, 3, padding=1), nn.SiLU())
        self.head = nn.Linear(8, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.nn.functional.silu(self.norm(self.stem(x)))
        h = self.body(h)
        return self.head(h.mean(dim=(2, 3)))


def main() -> None:
    what, path = sys.argv[1], sys.argv[2]
    if what == "save":
        torch.manual_seed(0)
        torch.jit.script(Net()).save(path)
    elif what == "load_weights":
        net = Net()
        state = torch.load(path, weights_only=True)
        net.load_state_dict(state, strict=True)
        print("LOADED", len(state), "tensors")
    elif what == "same":
        script = torch.jit.load(path).state_dict()
        trained = torch.load(sys.argv[3], weights_only=True)
        diff = max((script[k] - trained[k]).abs().max().item() for k in script)
        print("max diff", diff)
        sys.exit(0 if diff < 1e-12 and set(script) == set(trained) else 1)
    else:
        sys.exit("unknown command " + what)


if __name__ == "__main__":
    main()
