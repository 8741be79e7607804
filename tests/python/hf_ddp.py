"""Python DDP training a Hugging Face model folder, as `ddptrain train --init_from_hf DIR --dataset
token_shards --optimizer adamw --lr_schedule constant` trains it (the parity test of #31).

Under torchrun (Gloo), float32, dropout 0:
  - data: ddptrain's token_shards windows (src/data/token_shards.cpp): sample i of a token file is
    tokens [i*T, i*T + T + 1), inputs its first T, targets its last T; (n - 1) // T samples.
    A file is nanoGPT's raw uint16 tokens, or llm.c's (a 1024-byte header, uint16 or uint32).
  - order: PyTorch's DistributedSampler (shuffle, seed 42, epochs numbered from 1: set_epoch(1)
    first, drop_last=False), DataLoader(drop_last=True) (ddptrain's --drop_last default);
  - loss: cross-entropy, the mean over all B*T positions of the logits (no shift: the window's
    targets are already the next tokens);
  - AdamW (betas 0.9, 0.95, eps 1e-8) in two groups: weight decay on tensors of 2 or more
    dimensions, 0 on the rest, the decayed group first (src/train/optimizer.cpp); constant lr,
    no gradient clipping.
Rank 0 prints each step's loss (the ranks' mean, as ddptrain's step lines at --log_interval 1)
and saves the trained weights in ddptrain's names and layout (model.pt's): GPT-2 without
"transformer." and with the Conv1D weights transposed, Llama-family without "model."; the tied
lm_head.weight is left out.
  torchrun --nproc_per_node 2 hf_ddp.py HF_DIR DATA_BIN OUT_PT --steps 5 --batch_size 4 --lr 1e-3
"""
import argparse
import os
import sys

import numpy as np
import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, Dataset, DistributedSampler


def read_tokens(path):
    """A token file's tokens as int64: llm.c's (header magic 20240520: uint16, 20240801: uint32)
    or nanoGPT's raw uint16."""
    head = np.fromfile(path, dtype="<i4", count=256)
    if len(head) == 256 and head[0] in (20240520, 20240801):
        dtype = "<u2" if head[0] == 20240520 else "<u4"
        return torch.from_numpy(np.fromfile(path, dtype=dtype, offset=1024, count=int(head[2])).astype(np.int64))
    return torch.from_numpy(np.fromfile(path, dtype="<u2").astype(np.int64))


class TokenWindows(Dataset):
    def __init__(self, path, block):
        self.tokens, self.block = read_tokens(path), block
        self.n = (len(self.tokens) - 1) // block if len(self.tokens) > block else 0

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        w = self.tokens[i * self.block:i * self.block + self.block + 1]
        return w[:-1], w[1:]


def ddptrain_names(model):
    """The model's state_dict as ddptrain's model.pt holds it (src/models/hf_gpt2.h, hf_llama.h)."""
    cfg = model.config
    tied = getattr(cfg, "tie_word_embeddings", True)
    out = {}
    for k, v in model.state_dict().items():
        v = v.detach().clone()
        if k == "lm_head.weight":
            if not tied:
                out[k] = v
            continue
        if cfg.model_type == "gpt2":
            k = k.removeprefix("transformer.")
            if k.endswith(("attn.bias", "attn.masked_bias")) and "c_" not in k:
                continue  # older files' causal-mask buffers
            if k.endswith(("c_attn.weight", "c_proj.weight", "c_fc.weight")):
                v = v.t().contiguous()  # Conv1D (in, out) -> Linear (out, in)
        else:
            k = k.removeprefix("model.")
            if k.endswith("rotary_emb.inv_freq"):
                continue
        out[k] = v
    return out


def main():
    p = argparse.ArgumentParser()
    p.add_argument("hf_dir")
    p.add_argument("data_bin")
    p.add_argument("out_pt")
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--batch_size", type=int, default=4)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--weight_decay", type=float, default=1e-4)  # ddptrain's default
    p.add_argument("--adam_beta1", type=float, default=0.9)
    p.add_argument("--adam_beta2", type=float, default=0.95)
    p.add_argument("--block_size", type=int, default=0, help="0: the model's positions")
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--attn", default="sdpa", help="attn_implementation: sdpa or eager")
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()

    from transformers import AutoConfig, AutoModelForCausalLM

    cfg = AutoConfig.from_pretrained(a.hf_dir)
    for drop in ("resid_pdrop", "embd_pdrop", "attn_pdrop", "attention_dropout", "summary_first_dropout"):
        if hasattr(cfg, drop):
            setattr(cfg, drop, 0.0)  # ddptrain's dropout (0), not the config's training setting
    model = AutoModelForCausalLM.from_pretrained(a.hf_dir, config=cfg, dtype=torch.float32,
                                                 attn_implementation=a.attn)
    model.train()
    positions = getattr(cfg, "n_positions", None) or cfg.max_position_embeddings
    block = a.block_size or positions
    ddp = DDP(model)

    data = TokenWindows(a.data_bin, block)
    sampler = DistributedSampler(data, world, rank, shuffle=True, seed=a.seed)
    loader = DataLoader(data, a.batch_size, sampler=sampler, drop_last=True)
    params = [q for q in model.parameters() if q.requires_grad]
    decay = [q for q in params if q.dim() >= 2]
    no_decay = [q for q in params if q.dim() < 2]
    groups = [g for g in ({"params": decay, "weight_decay": a.weight_decay},
                          {"params": no_decay, "weight_decay": 0.0}) if g["params"]]
    opt = torch.optim.AdamW(groups, lr=a.lr, betas=(a.adam_beta1, a.adam_beta2), eps=1e-8,
                            foreach=False, fused=False)
    step, epoch = 0, 1  # epochs count from 1, as in ddptrain
    while step < a.steps:
        sampler.set_epoch(epoch)
        for x, y in loader:
            logits = ddp(input_ids=x, use_cache=False).logits
            loss = F.cross_entropy(logits.reshape(-1, logits.size(-1)), y.reshape(-1))
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            step += 1
            mean = loss.detach().double().reshape(1)
            dist.all_reduce(mean)  # the ranks' mean, as ddptrain's step line (log_interval 1) shows it
            if rank == 0:
                print(f"step {step} loss {mean.item() / world:.4f}", flush=True)
            if step == a.steps:
                break
        epoch += 1
    if rank == 0:
        torch.save(ddptrain_names(model), a.out_pt)
    # Every rank past its last use of the group (rank 0's save included) before any tears it down:
    # a rank destroying its Gloo group while a peer is still in it aborted once at exit
    # ("terminate called without an active exception", torch 2.15).
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
    # Past the barrier and the group's destruction, the interpreter's own teardown still aborted
    # once more (torch 2.15, rank 1: "terminate called without an active exception", a thread of
    # torch's destroyed while joinable) after everything was written: leave without it.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)
