"""The Python PyTorch DDP reference for throughput comparison (same model, data, flags).

Run under torchrun (Debian's needs tests/python/torchrun_wrapper.py on Python 3.11):
  /usr/bin/python3 tests/python/torchrun_wrapper.py --nproc_per_node 2 bench/reference_ddp.py \
      --width 1.0 --image_size 32 --batch_size 32 --steps 30
Prints `reference samples/s: N` (global, over the steps after the first log interval).
"""
import argparse
import os
import sys
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "python"))
from reference import MiniResNet, SyntheticDataset  # noqa: E402


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--width", type=float, default=1.0)
    p.add_argument("--image_size", type=int, default=32)
    p.add_argument("--batch_size", type=int, default=32)
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--warmup", type=int, default=10)
    p.add_argument("--num_workers", type=int, default=1)
    a = p.parse_args()
    world = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    local_world = int(os.environ.get("LOCAL_WORLD_SIZE", "1"))
    torch.set_num_threads(max(1, os.cpu_count() // local_world))
    if world > 1:
        dist.init_process_group("gloo")
    torch.manual_seed(42)
    model = MiniResNet(3, 10, a.width)
    if world > 1:
        model = DDP(model)
    ds = SyntheticDataset(size=50000, image_size=a.image_size)
    sampler = DistributedSampler(ds, num_replicas=world, rank=rank, seed=42)
    sampler.set_epoch(1)
    loader = DataLoader(ds, batch_size=a.batch_size, sampler=sampler, num_workers=a.num_workers,
                        drop_last=True, persistent_workers=False)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, weight_decay=1e-4)
    it = iter(loader)
    t0 = None
    for step in range(a.steps):
        if step == a.warmup:
            t0 = time.perf_counter()
        x, y = next(it)
        loss = F.cross_entropy(model(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    dt = time.perf_counter() - t0
    if rank == 0:
        print(f"reference samples/s: {(a.steps - a.warmup) * a.batch_size * world / dt:.1f}", flush=True)
    if world > 1:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
