"""Python DDP training a scripted module file, as ddptrain trains it (#14's parity test).

Under torchrun (Gloo): the reference pipeline's synthetic data, PyTorch's DistributedSampler
(shuffle, seed, epochs numbered from 1: set_epoch(1) first), SGD with momentum and weight decay at a constant learning rate (ddptrain's
epoch cosine during its first epoch), cross-entropy; rank 0 saves the trained state_dict.
  torchrun --nproc_per_node 2 script_ddp.py SCRIPT_PT OUT_PT --steps 3 --batch_size 8 --image_size 8
Prints `python samples/s: N` (global, over the steps after the first --warmup) when there are any.
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

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from reference import SyntheticDataset  # noqa: E402


def main():
    p = argparse.ArgumentParser()
    p.add_argument("script_pt")
    p.add_argument("out_pt")
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--batch_size", type=int, default=8)
    p.add_argument("--image_size", type=int, default=8)
    p.add_argument("--dataset_size", type=int, default=64)
    p.add_argument("--lr", type=float, default=0.01)
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--num_workers", type=int, default=0)
    p.add_argument("--warmup", type=int, default=2)
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    data = SyntheticDataset(a.dataset_size, 3, a.image_size, 10)
    module = torch.jit.load(a.script_pt)
    # ddptrain's check of a module's output before training (train/objective_check.cpp): one
    # forward of the first two samples, in eval mode without gradients. It is the scripted
    # module's first call, its graph executor's profiling run: without it here, Python's executor
    # took TorchScript's autodiff formulas from the second call on (SiLU's backward rounds
    # otherwise than ATen's) while ddptrain's kept ATen's, and the weights parted at step 2.
    with torch.no_grad():
        module.eval()
        module(torch.stack([data[0][0], data[1][0]]))
        module.train()
    model = DDP(module)
    sampler = DistributedSampler(data, world, rank, shuffle=True, seed=a.seed)
    loader = DataLoader(data, a.batch_size, sampler=sampler, drop_last=True, num_workers=a.num_workers)
    opt = torch.optim.SGD(model.parameters(), lr=a.lr, momentum=0.9, weight_decay=1e-4)
    step, epoch, t0 = 0, 1, None  # epochs count from 1, as in the reference pipeline
    while step < a.steps:
        sampler.set_epoch(epoch)
        for x, y in loader:
            loss = F.cross_entropy(model(x), y)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            step += 1
            if step == a.warmup:
                t0 = time.perf_counter()
            if step == a.steps:
                break
        epoch += 1
    if t0 is not None and a.steps > a.warmup:
        rate = (a.steps - a.warmup) * a.batch_size * world / (time.perf_counter() - t0)
        if rank == 0:
            print(f"python samples/s: {rate:.1f}", flush=True)
    if rank == 0:
        torch.save(model.module.state_dict(), a.out_pt)
    # Every rank past its last use of the group (rank 0's save included), then out without
    # tearing the Gloo group down: its teardown at exit aborted now and then, after the barrier
    # too ("terminate called without an active exception", torch 2.15), and the test reads the
    # exit code.
    dist.barrier()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
