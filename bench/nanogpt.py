"""PyTorch's side of #27's GPU comparison: GPT-2 124M as nanoGPT writes it (a nanoGPT-style
module: pre-LayerNorm blocks, fused qkv, SDPA with is_causal, GELU exact or in GPT-2's tanh
form (--gelu, as ddptrain's --gpt_activation), tied embeddings, GPT-2's init), trained as people
run it for speed: bf16
autocast, fused AdamW (weight decay on matrices only, as ddptrain), the vocabulary padded to
--vocab_multiple, gradient clipping, eager or torch.compile.

usage: python bench/nanogpt.py [--compile] [--device cuda] [--batch_size 64] [--block_size 1024]
           [--steps 30] [--warmup 10] [--vocab_multiple 64] [--preset gpt2-124m|debug] [--gelu none|tanh]
Prints one JSON line: tokens/s over the steps after the warm-up, ms/step, MFU against
--peak_tflops with ddptrain's FLOP count (6N + 12 L H d T; N without the position embedding
and the padded rows), the compile time (the first step's extra time), peak memory.
"""
import argparse
import json
import math
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

PRESETS = {"gpt2-124m": dict(n_layer=12, n_head=12, n_embd=768, vocab=50257),
           "debug": dict(n_layer=2, n_head=2, n_embd=64, vocab=256)}


class Block(nn.Module):
    def __init__(self, c, n_head, n_layer, gelu):
        super().__init__()
        self.n_head, self.gelu = n_head, gelu
        self.ln_1, self.ln_2 = nn.LayerNorm(c), nn.LayerNorm(c)
        self.c_attn, self.attn_proj = nn.Linear(c, 3 * c), nn.Linear(c, c)
        self.c_fc, self.mlp_proj = nn.Linear(c, 4 * c), nn.Linear(4 * c, c)
        for m in (self.c_attn, self.c_fc):
            nn.init.normal_(m.weight, 0, 0.02)
        for m in (self.attn_proj, self.mlp_proj):  # GPT-2's scaled residual projections
            nn.init.normal_(m.weight, 0, 0.02 / math.sqrt(2 * n_layer))
        for m in (self.c_attn, self.attn_proj, self.c_fc, self.mlp_proj):
            nn.init.zeros_(m.bias)

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.c_attn(self.ln_1(x)).split(C, dim=2)
        heads = lambda t: t.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)  # noqa: E731
        y = F.scaled_dot_product_attention(heads(q), heads(k), heads(v), is_causal=True)
        x = x + self.attn_proj(y.transpose(1, 2).contiguous().view(B, T, C))
        return x + self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x)), approximate=self.gelu))


class GPT(nn.Module):
    def __init__(self, n_layer, n_head, n_embd, vocab, block_size, vocab_multiple, gelu):
        super().__init__()
        self.vocab = vocab
        padded = (vocab + vocab_multiple - 1) // vocab_multiple * vocab_multiple
        self.wte, self.wpe = nn.Embedding(padded, n_embd), nn.Embedding(block_size, n_embd)
        nn.init.normal_(self.wte.weight, 0, 0.02)
        nn.init.normal_(self.wpe.weight, 0, 0.02)
        self.h = nn.ModuleList(Block(n_embd, n_head, n_layer, gelu) for _ in range(n_layer))
        self.ln_f = nn.LayerNorm(n_embd)

    def forward(self, idx, targets):
        pos = torch.arange(idx.size(1), device=idx.device)
        x = self.wte(idx) + self.wpe(pos)
        for block in self.h:
            x = block(x)
        # Over the padded vocabulary, as nanoGPT (targets are never padded rows): slicing the real
        # columns off first costs eager a zero-filled padded gradient and a copy in backward
        # (~8 ms a step on an H200), which nanoGPT does not pay.
        logits = F.linear(self.ln_f(x), self.wte.weight)
        return F.cross_entropy(logits.reshape(-1, logits.size(-1)), targets.reshape(-1))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--preset", default="gpt2-124m", choices=sorted(PRESETS))
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--batch_size", type=int, default=64)
    ap.add_argument("--block_size", type=int, default=1024)
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--vocab_multiple", type=int, default=64)
    ap.add_argument("--compile", action="store_true")
    ap.add_argument("--gelu", default="none", choices=["none", "tanh"])
    ap.add_argument("--amp", default="bf16", choices=["bf16", "none"])
    ap.add_argument("--peak_tflops", type=float, default=989.0)
    a = ap.parse_args()
    torch.manual_seed(0)
    dev = torch.device(a.device)
    p = PRESETS[a.preset]
    model = GPT(p["n_layer"], p["n_head"], p["n_embd"], p["vocab"], a.block_size, a.vocab_multiple,
                a.gelu).to(dev)
    decay = [t for t in model.parameters() if t.dim() >= 2]
    rest = [t for t in model.parameters() if t.dim() < 2]
    fused = dev.type == "cuda"
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": rest, "weight_decay": 0.0}],
                            lr=6e-4, betas=(0.9, 0.95), fused=fused)
    step_fn = torch.compile(model) if a.compile else model
    data = torch.randint(0, p["vocab"], (a.batch_size, a.block_size + 1), device=dev)
    x, y = data[:, :-1].contiguous(), data[:, 1:].contiguous()
    amp = torch.autocast(dev.type, dtype=torch.bfloat16, enabled=a.amp == "bf16")

    def step():
        with amp:
            loss = step_fn(x, y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss

    sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)
    t0 = time.perf_counter()
    step()
    sync()
    first_s = time.perf_counter() - t0
    for _ in range(a.warmup - 1):
        step()
    sync()
    t0 = time.perf_counter()
    for _ in range(a.steps):
        loss = step()
    sync()
    secs = (time.perf_counter() - t0) / a.steps
    tokens = a.batch_size * a.block_size
    n = sum(t.numel() for t in model.parameters()) - model.wpe.weight.numel() - \
        (model.wte.weight.size(0) - p["vocab"]) * p["n_embd"]
    flops_per_token = 6 * n + 12 * p["n_layer"] * p["n_embd"] * a.block_size
    print(json.dumps({
        "impl": "pytorch " + ("compile" if a.compile else "eager"), "torch": torch.__version__,
        "tokens_per_s": tokens / secs, "ms_per_step": 1000 * secs,
        "mfu": flops_per_token * tokens / secs / (a.peak_tflops * 1e12),
        "first_step_s": first_s, "loss": float(loss),
        "peak_mem_mib": torch.cuda.max_memory_allocated() / 2**20 if dev.type == "cuda" else None,
        # The caching allocator freed and retried (memory pressure slows a step): on an 80 GB card.
        "alloc_retries": torch.cuda.memory_stats().get("num_alloc_retries") if dev.type == "cuda" else None,
        "batch_size": a.batch_size, "block_size": a.block_size, "vocab_multiple": a.vocab_multiple,
        "gelu": a.gelu}))


if __name__ == "__main__":
    main()
