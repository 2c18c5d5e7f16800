#!/usr/bin/env python3
"""The peer users compare celtune with: torch.compile of the plain PyTorch FLCE.

Times forward+backward (and forward) of loss = F.cross_entropy(softcap(x @ w.T), y)
under torch.compile, as a training step computes it (gradients for x and w), on
random bf16 inputs, with the same method as `celtune bench`: warm-up, CUDA
events, L2 flushed before every run, median/p20/p80 of 20 runs. Prints one line
per shape with the time, effective TFLOP/s (6·N·H·V or 2·N·H·V over the time)
and the peak extra memory beyond inputs and gradients.

Run on the GPU machine (torch is there): python3 scripts/peer_bench.py [--shapes N,H,V[,softcap] ...]
"""
import argparse
import statistics

import torch
import torch.nn.functional as F


def naive(x, w, y, softcap):
    z = (x @ w.t()).float()
    if softcap:
        z = softcap * torch.tanh(z / softcap)
    return F.cross_entropy(z, y)


def bench(fn, runs=20, warmup=3):
    l2 = torch.empty(2 * 60 * 1024 * 1024 // 4, device="cuda", dtype=torch.float32)
    times = []
    for i in range(warmup + runs):
        l2.fill_(1.0)  # flush L2 (twice its size written), as celtune bench does
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        torch.cuda.synchronize()
        if i >= warmup:
            times.append(start.elapsed_time(end))
    times.sort()
    return statistics.median(times), times[len(times) // 5], times[4 * len(times) // 5]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shapes", nargs="*",
                    default=["4096,4096,128256", "8192,4096,128256", "16384,4096,128256", "4096,2304,256000,30",
                             "8192,768,50257"])
    args = ap.parse_args()
    torch.manual_seed(20261122)
    step = torch.compile(naive, dynamic=False)
    print(f"# torch {torch.__version__}, {torch.cuda.get_device_name()}")
    for spec in args.shapes:
        parts = spec.split(",")
        n, h, v = map(int, parts[:3])
        cap = float(parts[3]) if len(parts) > 3 else 0.0
        x = (torch.randn(n, h, device="cuda") * 0.5).bfloat16().requires_grad_()
        w = (torch.randn(v, h, device="cuda") * h ** -0.5).bfloat16().requires_grad_()
        y = torch.randint(0, v, (n,), device="cuda")

        def fwdbwd():
            x.grad = w.grad = None
            step(x, w, y, cap).backward()

        def fwd():
            with torch.no_grad():
                step(x, w, y, cap)

        for mode, fn, gemms in (("fwdbwd", fwdbwd, 3), ("fwd", fwd, 1)):
            fn()  # compile
            torch.cuda.synchronize()
            base = torch.cuda.memory_allocated()
            torch.cuda.reset_peak_memory_stats()
            med, p20, p80 = bench(fn)
            extra = (torch.cuda.max_memory_allocated() - base) / 2**20
            tflops = 2 * gemms * n * h * v / (med * 1e-3) / 1e12
            print(f"torch.compile {mode:6s} N={n} H={h} V={v} softcap={cap:g}: median {med:.3f} ms "
                  f"(p20 {p20:.3f}, p80 {p80:.3f}), {tflops:.0f} TFLOP/s, peak extra {extra:.0f} MiB")
        del x, w, y
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
