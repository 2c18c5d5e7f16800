#!/usr/bin/env python3
"""Where a celtune.torch step's time goes, on the host and on the GPU.

Host: linear_cross_entropy(x, w, y).backward() with GEMMs queued ahead of each
step, so that no launch waits for the GPU and what is timed is the host's own
work; each layer is wrapped in a timer (the whole forward, the autograd
Function's forward, the C call celtune_flce; the whole backward, the
Function's backward, the celtune_scale calls). Medians of --steps steps, µs.
Beside them, this machine's speed: a torch launch, torch.empty, and a
10 000-addition Python loop (the sixtieth session's figures in
docs/results.md compare two machines by these).

GPU: torch.profiler's CUDA activity over five steps, each kernel's time a
step, the largest first: the GEMMs against the passes around them.

Run on the GPU machine with PYTHONPATH=python and CELTUNE_LIBRARY pointing at
the library (`scripts/gpu_run.sh hosttime` does):
  python3 scripts/probe/host_time.py [N,H,V ...] [--steps S] [--no-kernels]
Default shapes: GPT-2, Mistral-7B and Llama-3-8B at N = 8192, Mistral-7B at
N = 1024. bf16, random inputs, the shipped database's configs."""
import argparse
import statistics
import time

DEFAULT_SHAPES = ["8192,768,50257", "1024,4096,32768", "8192,4096,32768", "8192,4096,128256"]


def med_us(v):
    return statistics.median(v) * 1e6


def calibrate(torch, big):
    """This machine's host speed: one small launch, one allocation, a Python loop."""
    s = torch.zeros(16, device="cuda")
    s.add_(1)
    torch.cuda.synchronize()
    out = {}
    for name, fn in (("torch add_ (one launch)", lambda: s.add_(1)),
                     ("torch.empty(4096)", lambda: torch.empty(4096, device="cuda"))):
        for _ in range(20):
            big @ big  # busy: a launch does not wait
        v = []
        for _ in range(200):
            t = time.perf_counter()
            fn()
            v.append(time.perf_counter() - t)
        torch.cuda.synchronize()
        out[name] = med_us(v)

    def loop():
        acc = 0
        for i in range(10000):
            acc += i
    v = []
    for _ in range(50):
        t = time.perf_counter()
        loop()
        v.append(time.perf_counter() - t)
    out["python 10k-addition loop"] = med_us(v)
    return out


def wrap_layers(ct, lib, rec):
    """Times each layer of a call into rec[label] (lists of seconds)."""
    def timed(fn, label):
        def w(*a, **k):
            t = time.perf_counter()
            r = fn(*a, **k)
            rec.setdefault(label, []).append(time.perf_counter() - t)
            return r
        return w
    lib.Context.flce = timed(lib.Context.flce, "3 C call celtune_flce")
    lib.Context.scale = timed(lib.Context.scale, "6 C call celtune_scale (each)")
    f = ct._LinearCrossEntropy
    f.forward = staticmethod(timed(f.forward, "2 Function.forward"))
    f.backward = staticmethod(timed(f.backward, "5 Function.backward"))


def host_time(torch, ct, rec, big, shape, steps):
    n, h, v = shape
    x = (torch.randn(n, h, device="cuda", dtype=torch.bfloat16) * 0.5).requires_grad_()
    w = (torch.randn(v, h, device="cuda", dtype=torch.bfloat16) * 0.02).requires_grad_()
    y = torch.randint(0, v, (n,), device="cuda")
    for _ in range(3):
        ct.linear_cross_entropy(x, w, y).backward()
    torch.cuda.synchronize()
    rec.clear()
    for _ in range(steps):
        x.grad = w.grad = None  # as a training step's zero_grad(set_to_none=True)
        for _ in range(20):
            big @ big
        t0 = time.perf_counter()
        loss = ct.linear_cross_entropy(x, w, y)
        t1 = time.perf_counter()
        loss.backward()
        t2 = time.perf_counter()
        rec.setdefault("1 linear_cross_entropy (whole forward)", []).append(t1 - t0)
        rec.setdefault("4 loss.backward() (whole)", []).append(t2 - t1)
        torch.cuda.synchronize()
    return {k: med_us(rec[k]) for k in sorted(rec)}, (x, w, y)


def kernel_time(torch, ct, tensors):
    from torch.profiler import ProfilerActivity, profile
    x, w, y = tensors
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(5):
            x.grad = w.grad = None
            ct.linear_cross_entropy(x, w, y).backward()
        torch.cuda.synchronize()
    ev = [e for e in prof.key_averages() if e.self_device_time_total > 0]
    return sorted(((e.self_device_time_total / 5, e.count // 5, e.key) for e in ev), reverse=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("shapes", nargs="*", default=DEFAULT_SHAPES, help="N,H,V (bf16)")
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--no-kernels", action="store_true", help="skip torch.profiler's kernel table")
    args = ap.parse_args()
    import torch
    import celtune._lib as lib
    import celtune.torch as ct
    big = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    for name, us in calibrate(torch, big).items():
        print(f"machine: {name:32s} {us:8.1f} us")
    rec = {}
    wrap_layers(ct, lib, rec)
    for s in args.shapes:
        shape = tuple(int(t) for t in s.split(","))
        layers, tensors = host_time(torch, ct, rec, big, shape, args.steps)
        print(f"\nN={shape[0]} H={shape[1]} V={shape[2]}: host time a step, median of {args.steps}")
        for k, us in layers.items():
            print(f"  {k[2:]:42s} {us:8.1f} us")
        if not args.no_kernels:
            rows = kernel_time(torch, ct, tensors)
            print(f"  GPU: {sum(r[0] for r in rows):.0f} us of kernels a step")
            for us, count, key in rows[:14]:
                print(f"  {us:9.1f} us  x{count:<3d} {key[:100]}")
        del tensors
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
