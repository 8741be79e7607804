"""The Python PyTorch DDP reference for throughput comparison (same model, data, flags).

Run under torchrun (Debian's needs tests/python/torchrun_wrapper.py on Python 3.11):
  /usr/bin/python3 tests/python/torchrun_wrapper.py --nproc_per_node 2 bench/reference_ddp.py \
      --width 1.0 --image_size 32 --batch_size 32 --steps 30
Prints `reference samples/s: N` (global, over the steps after the first log interval), on
rank 0 `reference first_step_unix_time: T` (when the first optimizer step ended), and on
every rank `reference rank R peak_rss_mib: M` (the process's peak resident set, VmHWM).
On a GPU (scripts/gpu-check.sh): --device cuda [--amp bf16|fp16] under torchrun, NCCL, DDP even
at world 1 (as ddptrain --backend nccl), pinned-memory loader, fp16 with torch.amp.GradScaler.
"""
import argparse
import contextlib
import os
import sys
import time


def peak_rss_mib():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return float("nan")

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
    p.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    p.add_argument("--amp", choices=["none", "bf16", "fp16"], default="none")
    p.add_argument("--channels_last", action="store_true", help="NHWC weights and images (ddptrain's default)")
    a = p.parse_args()
    cuda = a.device == "cuda"
    world = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    local_world = int(os.environ.get("LOCAL_WORLD_SIZE", "1"))
    torch.set_num_threads(max(1, os.cpu_count() // local_world))
    distributed = world > 1 or (cuda and "RANK" in os.environ)
    if cuda:
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
    if distributed:
        dist.init_process_group("nccl" if cuda else "gloo")
    torch.manual_seed(42)
    model = MiniResNet(3, 10, a.width).to(a.device)
    fmt = torch.channels_last if a.channels_last else torch.contiguous_format
    model = model.to(memory_format=fmt)
    if distributed:
        model = DDP(model)
    amp_dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(a.amp)
    scaler = torch.amp.GradScaler("cuda") if a.amp == "fp16" else None
    ds = SyntheticDataset(size=50000, image_size=a.image_size)
    sampler = DistributedSampler(ds, num_replicas=world, rank=rank, seed=42)
    sampler.set_epoch(1)
    loader = DataLoader(ds, batch_size=a.batch_size, sampler=sampler, num_workers=a.num_workers,
                        drop_last=True, persistent_workers=False, pin_memory=cuda)
    # Fused on a GPU, as ddptrain's --fused_optimizer auto there (the loop on CPU, as ddptrain's).
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, weight_decay=1e-4, fused=cuda or None)
    it = iter(loader)
    t0 = None
    for step in range(a.steps):
        if step == a.warmup:
            if cuda:
                torch.cuda.synchronize()
            t0 = time.perf_counter()
        x, y = next(it)
        x, y = x.to(a.device, non_blocking=True).contiguous(memory_format=fmt), y.to(a.device, non_blocking=True)
        with torch.autocast(a.device, dtype=amp_dtype) if amp_dtype else contextlib.nullcontext():
            loss = F.cross_entropy(model(x), y)
        opt.zero_grad(set_to_none=True)
        if scaler:
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
        else:
            loss.backward()
            opt.step()
        if step == 0 and rank == 0:
            if cuda:
                torch.cuda.synchronize()
            print(f"reference first_step_unix_time: {time.time():.3f}", flush=True)
    if cuda:
        torch.cuda.synchronize()
    dt = time.perf_counter() - t0
    if rank == 0:
        print(f"reference samples/s: {(a.steps - a.warmup) * a.batch_size * world / dt:.1f}", flush=True)
    print(f"reference rank {rank} peak_rss_mib: {peak_rss_mib():.0f}", flush=True)
    if distributed:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
