#!/usr/bin/env python3
"""PyTorch eager on bench/gpu_bench's throughput shape (b), for the side-by-side figure.

The same GPT as pipetrain's (pre-LayerNorm blocks, fused causal attention, GELU MLP, tied
head, learned positions), the same step: bf16 model, fp32 master weights stepped by the
fused AdamW, the loss in fp32 scaled by 1/M over M micro-batches copied from pinned memory.
Model TFLOP/s by Megatron's formula, as gpu_bench prints them.

    python3 bench/gpu_eager.py [--d-model 2048 --layers 8 --context 2048 ...]

The line it prints starts with "(b)" and names the shape as bench/gpu_bench does
("GPT d 2048, 8 layers, context 2048"); scripts/device-check pairs them by that name.
"""
import argparse
import statistics
import time

import torch
import torch.nn.functional as F


class Block(torch.nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.heads = heads
        self.attention_norm = torch.nn.LayerNorm(d)
        self.qkv = torch.nn.Linear(d, 3 * d)
        self.projection = torch.nn.Linear(d, d)
        self.mlp_norm = torch.nn.LayerNorm(d)
        self.expand = torch.nn.Linear(d, 4 * d)
        self.contract = torch.nn.Linear(4 * d, d)

    def forward(self, x):
        b, s, d = x.shape
        q, k, v = self.qkv(self.attention_norm(x)).view(b, s, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        attended = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        h = x + self.projection(attended.transpose(1, 2).reshape(b, s, d))
        return h + self.contract(F.gelu(self.expand(self.mlp_norm(h))))


class Gpt(torch.nn.Module):
    def __init__(self, vocab, context, d, heads, layers):
        super().__init__()
        self.tokens = torch.nn.Embedding(vocab, d)
        self.positions = torch.nn.Embedding(context, d)
        self.blocks = torch.nn.ModuleList(Block(d, heads) for _ in range(layers))
        self.final_norm = torch.nn.LayerNorm(d)

    def forward(self, ids):
        x = self.tokens(ids) + self.positions(torch.arange(ids.shape[1], device=ids.device))
        for block in self.blocks:
            x = block(x)
        return self.final_norm(x) @ self.tokens.weight.t()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--vocab", type=int, default=50304)
    p.add_argument("--context", type=int, default=2048)
    p.add_argument("--d-model", type=int, default=2048)
    p.add_argument("--heads", type=int, default=16)
    p.add_argument("--layers", type=int, default=8)
    p.add_argument("--micro-batch", type=int, default=8)
    p.add_argument("--micro-batches", type=int, default=4)
    p.add_argument("--repetitions", type=int, default=5)
    a = p.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = False
    model = Gpt(a.vocab, a.context, a.d_model, a.heads, a.layers).cuda().to(torch.bfloat16)
    params = list(model.parameters())
    masters = [q.detach().float().clone().requires_grad_(True) for q in params]
    adam = torch.optim.AdamW(masters, lr=1e-4, weight_decay=0.0, fused=True)
    samples = a.micro_batch * a.micro_batches
    inputs = torch.randint(a.vocab, (samples, a.context))
    labels = torch.randint(a.vocab, (samples, a.context))

    def step():
        total = torch.zeros((), dtype=torch.float64, device="cuda")
        for m in range(a.micro_batches):
            rows = slice(m * a.micro_batch, (m + 1) * a.micro_batch)
            x = inputs[rows].pin_memory().cuda(non_blocking=True)
            y = labels[rows].pin_memory().cuda(non_blocking=True)
            logits = model(x).float()
            loss = F.cross_entropy(logits.view(-1, logits.shape[-1]), y.view(-1))
            total += loss.detach().double()
            (loss / a.micro_batches).backward()
        with torch.no_grad():
            for q, master in zip(params, masters):
                master.grad = q.grad.float()
                q.grad = None
            adam.step()
            for q, master in zip(params, masters):
                q.copy_(master)
                master.grad = None
        return total.item() / a.micro_batches

    for _ in range(2):
        step()
    seconds = []
    for _ in range(a.repetitions):
        start = time.perf_counter()
        step()
        seconds.append(time.perf_counter() - start)
    b, s, l, h, v = samples, a.context, a.layers, a.d_model, a.vocab
    flops = 72 * b * s * l * h * h * (1 + s / (6 * h) + v / (12 * l * h))
    t = statistics.median(seconds)
    print(f"(b) GPT d {a.d_model}, {a.layers} layers, context {a.context}, bf16, "
          f"{a.micro_batches} micro-batches of {a.micro_batch}: "
          f"PyTorch {torch.__version__} eager {t:.4f} s per step, "
          f"{flops / t / 1e12:.1f} model TFLOP/s; peak memory "
          f"{torch.cuda.max_memory_allocated() / 2**30:.1f} GiB")


if __name__ == "__main__":
    main()
