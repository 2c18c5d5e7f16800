#!/usr/bin/env python3
"""How long an idle GPU waits for a step's first kernel, celtune against torch.compile.

A loss called on an idle GPU (the first work of a step, an evaluation loop, a
small model whose host is the bottleneck) adds the host's time before its first
launch to the step. peer_bench.py's idle runs against its --queued runs show it
as a whole; this says where it goes:

1. torch.profiler over idle steps (the stream drained before each): the time
   from the step's start on the host to its first CUDA API launch and to its
   first kernel on the GPU, for celtune.torch and for torch.compile of the
   plain code.
2. Without the profiler, celtune.torch's own layers stamped on the host in the
   same idle steps (each internal function wrapped in a timer): when each
   starts and how long it takes, medians, µs from the step's start.

3. --brief: celtune.torch's idle steps alone, as peer_bench.py times them (the
   L2 flushed, CUDA events around the step, no sleep), with the host's
   forward and backward: one line a shape, for A/B runs of two packages
   (PYTHONPATH naming each in turn).

Run on the GPU machine with PYTHONPATH=python and CELTUNE_LIBRARY set:
  python3 scripts/probe/idle_latency.py [N,H,V ...] [--steps S] [--brief]"""
import argparse
import statistics
import time

DEFAULT_SHAPES = ["8192,4096,32768", "8192,768,50257"]
LAUNCHES = ("cudaLaunchKernel", "cudaLaunchKernelExC", "cuLaunchKernelEx", "cuLaunchKernel", "cudaMemsetAsync",
            "cudaMemcpyAsync", "cudaLaunchCooperativeKernel")


def med(v):
    return statistics.median(v) if v else float("nan")


def step_fn(torch, F, peer, x, w, y):
    if peer == "celtune":
        import celtune.torch as ct

        def f():
            x.grad = w.grad = None
            ct.linear_cross_entropy(x, w, y).backward()
        return f
    torch._dynamo.reset()
    comp = torch.compile(lambda a, b, t: F.cross_entropy((a @ b.t()).float(), t), dynamic=False)

    def g():
        x.grad = w.grad = None
        comp(x, w, y).backward()
    return g


def profiled(torch, fn, steps, lib=None):
    """Per idle step, µs from its start on the host: (the C call's start, its first
    launch API, the first kernel's start on the GPU, the last kernel's end), and
    one step's CUDA API calls in order (name, start, duration)."""
    from torch.profiler import ProfilerActivity, profile, record_function
    saved = None
    if lib is not None:  # the C call marked on the timeline
        saved = lib.Context.flce

        def marked(*a, **k):
            with record_function("celtune_flce"):
                return saved(*a, **k)
        lib.Context.flce = marked
    try:
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            for _ in range(steps):
                torch.cuda.synchronize()
                time.sleep(0.002)
                with record_function("idle_step"):
                    fn()
                torch.cuda.synchronize()
    finally:
        if saved is not None:
            lib.Context.flce = saved
    cpu, gpu = torch.autograd.DeviceType.CPU, torch.autograd.DeviceType.CUDA
    ev = prof.events()
    starts = sorted(e.time_range.start for e in ev if e.name == "idle_step" and e.device_type == cpu)
    calls = sorted(e.time_range.start for e in ev if e.name == "celtune_flce" and e.device_type == cpu)
    apis = sorted((e.time_range.start, e.name, e.time_range.end - e.time_range.start) for e in ev
                  if e.device_type == cpu and (e.name.startswith("cuda") or e.name.startswith("cu")))
    kern = sorted((e.time_range.start, e.time_range.end) for e in ev
                  if e.device_type == gpu and e.name not in ("idle_step", "celtune_flce"))
    out, listing = [], []
    for i, s in enumerate(starts):
        nxt = starts[i + 1] if i + 1 < len(starts) else float("inf")
        a = [t for t in apis if s <= t[0] < nxt]
        la = [t for t in a if t[1] in LAUNCHES]
        k = [t for t in kern if s <= t[0] < nxt]
        c = [t - s for t in calls if s <= t < nxt]
        if la and k:
            out.append((c[0] if c else float("nan"), la[0][0] - s, k[0][0] - s, max(e for _, e in k) - s))
        if i == len(starts) // 2:
            listing = [(n, t - s, d) for t, n, d in a]
    return out, listing


def stamped(torch, ct, lib, x, w, y, steps):
    """celtune.torch's layers in idle steps, no profiler: {label: (start, time)} medians in µs."""
    rec, t0 = {}, [0.0]

    def timed(fn, label):
        def wrapper(*a, **k):
            t = time.perf_counter()
            try:
                return fn(*a, **k)
            finally:
                rec.setdefault(label, []).append(((t - t0[0]) * 1e6, (time.perf_counter() - t) * 1e6))
        return wrapper

    saved = {}
    names = ["_reduction_code", "_ignore_index", "_prepare_flce", "_options", "_flce_args", "_check_before_copy",
             "_gemm_operand", "_kernel_targets", "_f32", "_one", "_dense_like", "_check_mode", "_run",
             "_raise_bad_target", "_scaled", "_refuse_double_backward", "_settle", "_context", "_ptr", "_tracing"]
    for n in names:
        saved[n] = getattr(ct, n)
        setattr(ct, n, timed(saved[n], n))
    op = ct._flce_forward
    saved_op = op.fn
    op.fn = timed(op.fn, "op body")
    f = ct._LinearCrossEntropy
    saved_fb = (f.forward, f.backward)
    f.forward = staticmethod(timed(f.forward, "Function.forward"))
    f.backward = staticmethod(timed(f.backward, "Function.backward"))
    saved_c = lib.Context.flce
    lib.Context.flce = timed(lib.Context.flce, "C celtune_flce")
    whole = []
    try:
        for i in range(steps + 3):
            torch.cuda.synchronize()
            time.sleep(0.002)
            x.grad = w.grad = None
            t0[0] = time.perf_counter()
            loss = ct.linear_cross_entropy(x, w, y)
            t1 = time.perf_counter()
            loss.backward()
            t2 = time.perf_counter()
            whole.append(((t1 - t0[0]) * 1e6, (t2 - t1) * 1e6))
            if i == 2:  # warm-up steps out
                rec.clear()
                whole.clear()
    finally:
        for n, fn in saved.items():
            setattr(ct, n, fn)
        op.fn = saved_op
        f.forward, f.backward = saved_fb
        lib.Context.flce = saved_c
    rows = []
    for label, v in rec.items():
        per = len(v) // steps  # calls a step
        firsts = [v[i * per] for i in range(steps)] if per else []
        rows.append((med([s for s, _ in firsts]), label, per, med([d for _, d in v]) * max(per, 1)))
    rows.sort()
    return rows, med([a for a, _ in whole]), med([b for _, b in whole])


def brief(torch, ct, x, w, y, steps):
    """(idle step ms, host forward µs, host backward µs), medians of steps."""
    flush = torch.empty(64 * 2**20 // 4, device="cuda")
    ms, fwd, bwd = [], [], []
    for i in range(steps + 5):
        flush.fill_(1.0)
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        x.grad = w.grad = None
        t0 = time.perf_counter()
        loss = ct.linear_cross_entropy(x, w, y)
        t1 = time.perf_counter()
        loss.backward()
        t2 = time.perf_counter()
        end.record()
        torch.cuda.synchronize()
        if i >= 5:
            ms.append(start.elapsed_time(end))
            fwd.append((t1 - t0) * 1e6)
            bwd.append((t2 - t1) * 1e6)
    return med(ms), med(fwd), med(bwd)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("shapes", nargs="*", default=DEFAULT_SHAPES)
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--brief", action="store_true", help="celtune's idle steps alone, one line a shape")
    args = ap.parse_args()
    import torch
    import torch.nn.functional as F
    import celtune.torch as ct
    from celtune import _lib as lib
    print(f"machine: {torch.cuda.get_device_name()}, torch {torch.__version__}")
    for spec in args.shapes:
        n, h, v = map(int, spec.split(","))
        x = (torch.randn(n, h, device="cuda") * 0.5).bfloat16().requires_grad_()
        w = (torch.randn(v, h, device="cuda") * h ** -0.5).bfloat16().requires_grad_()
        y = torch.randint(0, v, (n,), device="cuda")
        if args.brief:
            step, fwd, bwd = brief(torch, ct, x, w, y, args.steps)
            print(f"brief N={n} H={h} V={v}: idle step {step:.3f} ms, host forward {fwd:.1f} µs, "
                  f"backward {bwd:.1f} µs ({ct.__file__})")
            continue
        print(f"N={n} H={h} V={v}")
        for peer in ("celtune", "compile"):
            fn = step_fn(torch, F, peer, x, w, y)
            for _ in range(5):
                fn()
            torch.cuda.synchronize()
            r, listing = profiled(torch, fn, args.steps, lib if peer == "celtune" else None)
            print(f"  {peer:8s} profiled idle steps ({len(r)}), µs from the step's start: C call "
                  f"{med([c for c, _, _, _ in r]):7.1f}, first launch API {med([a for _, a, _, _ in r]):7.1f}, "
                  f"first kernel {med([k for _, _, k, _ in r]):7.1f}, last kernel's end "
                  f"{med([e for _, _, _, e in r]):8.1f}")
            print(f"    one step's CUDA API calls ({len(listing)}): " +
                  ", ".join(f"{n} @{t:.0f}+{d:.0f}" for n, t, d in listing[:40]))
        rows, fwd, bwd = stamped(torch, ct, lib, x, w, y, args.steps)
        print(f"  celtune host, idle steps without the profiler: forward {fwd:.1f} µs, backward {bwd:.1f} µs")
        print(f"  {'layer':26s} {'calls':>5s} {'starts at':>9s} {'takes':>8s}  (µs, medians; nested layers overlap)")
        for start, label, per, took in rows:
            print(f"  {label:26s} {per:5d} {start:9.1f} {took:8.1f}")
        del x, w, y
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
