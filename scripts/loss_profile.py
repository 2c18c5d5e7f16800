#!/usr/bin/env python3
"""Where a training step's loss time goes: celtune's linear_cross_entropy
against the eager F.linear + F.cross_entropy that training code writes, called
as examples/train_tiny_lm.py calls them (fp32 hidden states and weight under
bf16 autocast, so both paths include autocast's casts and the fp32 gradients).

For each path: the median time of forward+backward over 30 calls, measured
two ways (CUDA events around the GPU work, and the host's wall clock with a
synchronisation at the end, which also counts launch gaps and any
synchronisation inside the call). celtune runs with each
CELTUNE_CHECK_TARGETS mode: async (the default), sync (one stream
synchronisation a call) and 0 (none). Then the host's time a call at a small
shape (N=1024, H=256, V=4096) in each mode, where the GPU work cannot hide it,
and a torch.profiler table of the GPU kernels over 5 calls (eager, and celtune
under async), largest self time first.

Run on the GPU machine: python3 scripts/loss_profile.py [--shape N,H,V] [--rows 12]
(PYTHONPATH=python and CELTUNE_LIBRARY pointing at the staged libceltune.so).
"""
import argparse
import os
import statistics
import time

import torch
import torch.nn.functional as F
from torch.profiler import ProfilerActivity, profile

import celtune.torch as ct


def timed(fn, runs=30, warmup=5):
    gpu, wall = [], []
    for i in range(warmup + runs):
        torch.cuda.synchronize()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        t0 = time.perf_counter()
        start.record()
        fn()
        end.record()
        torch.cuda.synchronize()
        if i >= warmup:
            wall.append((time.perf_counter() - t0) * 1e3)
            gpu.append(start.elapsed_time(end))
    return statistics.median(gpu), statistics.median(wall)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--shape", default="8192,512,32768", help="N,H,V (default: the tiny-LM example's)")
    ap.add_argument("--rows", type=int, default=12, help="kernels listed per profile")
    args = ap.parse_args()
    n, h, v = map(int, args.shape.split(","))
    torch.manual_seed(20261129)
    x = torch.randn(n, h, device="cuda", requires_grad=True)
    w = (torch.randn(v, h, device="cuda") * h ** -0.5).requires_grad_()
    y = torch.randint(0, v, (n,), device="cuda")
    amp = torch.autocast("cuda", dtype=torch.bfloat16)

    def eager():
        x.grad = w.grad = None
        with amp:
            loss = F.cross_entropy(F.linear(x, w).float(), y)
        loss.backward()

    def fused():
        x.grad = w.grad = None
        with amp:
            loss = ct.linear_cross_entropy(x, w, y)
        loss.backward()

    with amp:
        e = ct.explain(x, w, y)
    print(f"# torch {torch.__version__}, {torch.cuda.get_device_name()}, celtune {ct._lib.version()}")
    print(f"# N={n} H={h} V={v}, fp32 leaves under bf16 autocast; celtune config [{e['source']}]: {e['config']}")
    cases = [("F.linear + F.cross_entropy", eager, None),
             ("celtune, target check async", fused, "async"),
             ("celtune, target check sync", fused, "sync"),
             ("celtune, target check off", fused, "0")]
    for name, fn, check in cases:
        if check is not None:
            os.environ["CELTUNE_CHECK_TARGETS"] = check
        gpu, wall = timed(fn)
        print(f"{name:29s} forward+backward: {gpu:7.3f} ms GPU (CUDA events), {wall:7.3f} ms wall")
    # The host's cost per call, where the GPU work is too small to hide it:
    # forward+backward back to back at a small shape, one synchronisation at
    # the end of each batch of calls.
    xs = torch.randn(1024, 256, device="cuda", requires_grad=True)
    ws = (torch.randn(4096, 256, device="cuda") * 256 ** -0.5).requires_grad_()
    ys = torch.randint(0, 4096, (1024,), device="cuda")

    def small():
        with amp:
            ct.linear_cross_entropy(xs, ws, ys).backward()

    for name, fn, check in [(c[0], small, c[2]) for c in cases[1:]]:
        os.environ["CELTUNE_CHECK_TARGETS"] = check
        walls = []
        for rep in range(6):
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            for _ in range(200):
                fn()
            torch.cuda.synchronize()
            walls.append((time.perf_counter() - t0) / 200 * 1e6)
        print(f"{name:29s} N=1024 H=256 V=4096, 200 calls back to back: {statistics.median(walls[1:]):7.1f} us a call (median of 5 batches)")
    for name, fn, check in cases[:2]:
        if check is not None:
            os.environ["CELTUNE_CHECK_TARGETS"] = check
        fn()
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for _ in range(5):
                fn()
            torch.cuda.synchronize()
        print(f"\n== {name}: GPU kernels over 5 calls")
        print(prof.key_averages().table(sort_by="self_device_time_total", row_limit=args.rows, max_name_column_width=70))


if __name__ == "__main__":
    main()
