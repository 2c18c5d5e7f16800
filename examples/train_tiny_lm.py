#!/usr/bin/env python3
"""Trains a small GPT-style model on synthetic tokens twice from the same seed:
once with F.cross_entropy on materialised logits, once with celtune's fused
linear cross-entropy (no [tokens x vocab] logits), and prints both loss curves,
the step time and the peak memory.

    python examples/train_tiny_lm.py                      # CUDA if present (bf16 autocast), else the CPU
    python examples/train_tiny_lm.py --device cpu --steps 60
    # from a build tree without installing:
    PYTHONPATH=python CELTUNE_LIBRARY=build/src/runtime/libceltune.so python examples/train_tiny_lm.py

The data: sequences from a fixed random bigram table whose rows put most of
their mass on a few successors, so the loss falls from ln(V) toward the
table's entropy and the two curves can be compared over a real descent.
"""
import argparse
import math
import statistics
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

import celtune.torch as ct


class Block(nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))

    def forward(self, x):
        B, T, D = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(B, T, 3, self.heads, D // self.heads).transpose(1, 3).unbind(2)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(a.transpose(1, 2).reshape(B, T, D))
        return x + self.mlp(self.ln2(x))


class TinyGPT(nn.Module):
    def __init__(self, vocab, d, layers, heads, seq):
        super().__init__()
        self.tok, self.pos = nn.Embedding(vocab, d), nn.Embedding(seq, d)
        self.blocks = nn.ModuleList(Block(d, heads) for _ in range(layers))
        self.ln = nn.LayerNorm(d)
        self.lm_head = nn.Linear(d, vocab, bias=False)

    def hidden(self, idx):
        x = self.tok(idx) + self.pos(torch.arange(idx.shape[1], device=idx.device))
        for b in self.blocks:
            x = b(x)
        return self.ln(x)


def bigram_table(vocab, fanout, gen):
    """Each token's successors: `fanout` favourites holding 90% of the mass."""
    succ = torch.randint(0, vocab, (vocab, fanout), generator=gen)
    return succ


def batch(succ, batch_size, seq, gen):
    vocab, fanout = succ.shape
    idx = torch.empty(batch_size, seq + 1, dtype=torch.long)
    idx[:, 0] = torch.randint(0, vocab, (batch_size,), generator=gen)
    for t in range(seq):
        fav = succ[idx[:, t], torch.randint(0, fanout, (batch_size,), generator=gen)]
        noise = torch.randint(0, vocab, (batch_size,), generator=gen)
        idx[:, t + 1] = torch.where(torch.rand(batch_size, generator=gen) < 0.9, fav, noise)
    return idx[:, :-1], idx[:, 1:]


def train(loss_kind, args, device, data):
    torch.manual_seed(args.seed)
    model = TinyGPT(args.vocab, args.hidden, args.layers, args.heads, args.seq).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr)
    amp = torch.autocast(device.type, dtype=torch.bfloat16, enabled=device.type == "cuda")
    losses, times = [], []
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    for step, (x, y) in enumerate(data):
        x, y = x.to(device), y.to(device)
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        t0 = time.perf_counter()
        with amp:
            h = model.hidden(x)
            if loss_kind == "celtune":
                loss = ct.linear_cross_entropy(h, model.lm_head.weight, y)
            else:
                # What eager training code does (Hugging Face's causal LM loss
                # upcasts the logits to fp32 as well).
                logits = model.lm_head(h)
                loss = F.cross_entropy(logits.float().reshape(-1, args.vocab), y.reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        times.append(time.perf_counter() - t0)
        losses.append(loss.item())
    if loss_kind == "celtune":
        # A target outside [0, V) raises at a later call on a GPU (the check
        # does not stall the stream): this waits for the last step's.
        ct.check_targets()
    peak = torch.cuda.max_memory_allocated(device) / 2**20 if device.type == "cuda" else float("nan")
    # The median step after 10 of warm-up: a step on a small model is mostly
    # the host's launch time, and a shared host's pauses would swing a mean.
    return losses, statistics.median(times[min(10, len(times) - 1):]) * 1e3, peak


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--steps", type=int, default=None, help="default: 300 on CUDA, 60 on the CPU")
    ap.add_argument("--vocab", type=int, default=None, help="default: 32768 on CUDA, 2048 on the CPU")
    ap.add_argument("--hidden", type=int, default=None, help="default: 512 on CUDA, 128 on the CPU")
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--heads", type=int, default=8)
    ap.add_argument("--seq", type=int, default=256)
    ap.add_argument("--batch", type=int, default=None, help="default: 32 on CUDA, 4 on the CPU")
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--every", type=int, default=None, help="print the curves every K steps")
    args = ap.parse_args()
    device = torch.device(args.device)
    gpu = device.type == "cuda"
    args.steps = args.steps or (300 if gpu else 60)
    args.vocab = args.vocab or (32768 if gpu else 2048)
    args.hidden = args.hidden or (512 if gpu else 128)
    args.batch = args.batch or (32 if gpu else 4)
    if not gpu:
        args.layers, args.seq = min(args.layers, 2), min(args.seq, 64)
    every = args.every or max(1, args.steps // 15)

    gen = torch.Generator().manual_seed(args.seed)
    succ = bigram_table(args.vocab, 4, gen)
    data = [batch(succ, args.batch, args.seq, gen) for _ in range(args.steps)]
    N = args.batch * args.seq
    print(f"device {device} ({torch.cuda.get_device_name(device) if gpu else 'CPU backend: for tests, not speed'}), "
          f"torch {torch.__version__}, celtune {ct._lib.version()}")
    print(f"model: {args.layers} layers, hidden {args.hidden}, vocab {args.vocab}; {N} tokens/step, "
          f"{args.steps} steps, {'bf16 autocast' if gpu else 'fp32'}; ln(V) = {math.log(args.vocab):.3f}")
    e = ct.explain(torch.empty(N, args.hidden, device=device,
                               dtype=torch.bfloat16 if gpu else torch.float32),
                   torch.empty(args.vocab, args.hidden, device=device, dtype=torch.bfloat16 if gpu else torch.float32),
                   torch.empty(N, dtype=torch.long, device=device))
    print(f"celtune config [{e['source']}]: {e['config']}")

    results = {kind: train(kind, args, device, data) for kind in ("pytorch", "celtune")}
    (lp, tp, mp), (lc, tc, mc) = results["pytorch"], results["celtune"]
    print(f"\n{'step':>6} {'F.cross_entropy':>16} {'celtune':>10} {'diff':>10}")
    for s in sorted(set(range(0, args.steps, every)) | {args.steps - 1}):  # the last step once
        print(f"{s:>6} {lp[s]:>16.4f} {lc[s]:>10.4f} {lc[s] - lp[s]:>+10.4f}")
    worst = max(abs(a - b) for a, b in zip(lp, lc))
    print(f"\nmax |loss difference| over {args.steps} steps: {worst:.2e}; "
          f"final: {lp[-1]:.4f} (F.cross_entropy) vs {lc[-1]:.4f} (celtune)")
    print(f"{'':>18} {'step time (ms, median)':>23} {'peak memory (MiB)':>18}")
    mem = lambda m: "n/a (CPU)" if math.isnan(m) else f"{m:.1f}"
    print(f"{'F.cross_entropy':>18} {tp:>23.2f} {mem(mp):>18}")
    print(f"{'celtune':>18} {tc:>23.2f} {mem(mc):>18}")


if __name__ == "__main__":
    main()
