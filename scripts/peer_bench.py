#!/usr/bin/env python3
"""celtune against the peers its users would pick instead, in one process.

Peers (--peers, comma-separated; each one that does not import or does not
support a shape says so on its line and the others go on):
  compile    torch.compile of the plain PyTorch code (the everyday peer)
  celtune    celtune.torch, as a training job calls it: the tuned database beside
             the staged library, else the built-in default (its source is printed)
  liger      Liger-Kernel's LigerFusedLinearCrossEntropyLoss / LigerCrossEntropyLoss
  cce        Apple's Cut Cross-Entropy, as shipped (filter_eps "high": gradient
             entries under a bf16-epsilon threshold are skipped)
  cce-exact  the same with filter_eps=None (no skipped gradient entries)
  quack      QuACK's chunked_linear_cross_entropy (chunks of 4096 rows, 2048
             where H = 4096; its Hopper pipeline where eligible) /
             cross_entropy; no softcap
  floor      the work no implementation avoids, timed the same way: flce the
             cuBLAS GEMMs of forward (1) or forward+backward (3) at bf16 and
             the problem's V (an odd V such as GPT-2's falls off cuBLAS's fast
             kernels, 15.6 ms at N = 8192: `celtune bench` pads its floor); ce
             a copy of the logits' bytes (forward: half of them each way)

flce: loss = CE(softcap(x @ w.T), y), gradients for x and w. ce: loss = CE(z, y)
on materialised bf16 logits, the gradient for z. Random bf16 inputs; every run
after a write of twice the L2 (as `celtune bench`), CUDA events, 3 warm-up
runs, median / p20 / p80 of --runs. Effective TFLOP/s as published FLCE
results count it: 6·N·H·V (forward+backward) or 2·N·H·V (forward) over the
median; ce: GB/s of the logits' bytes read (and written). "extra" is the peak
memory in torch's pool beyond the inputs and their gradients; "outside torch"
what the device holds beyond that pool since the process started, read after
the runs (celtune's scratch, which its library allocates and keeps, is there,
not in "extra"; it stays from the first shape that needed it). Forward runs on
detached inputs (evaluation), so no peer computes gradients there.

--queued puts about 5 ms of GEMMs (three 8192³ bf16 products) on the stream
ahead of each timed run, as a training step has its model's layers ahead of
the loss: the host's work for the call (celtune.torch's forward took 0.4-1.2 ms
of it at N = 8192 on the H200, fifty-ninth session) then overlaps the GPU's
instead of showing in the events' interval, which measures the GPU's time
alone. Without it an idle GPU waits for the call's first launch.

Accuracy (--check, default on): one forward+backward of each peer against an
fp32 PyTorch reference of the same inputs: |Δloss| and the relative Frobenius
error of each gradient (bf16's own rounding is ~2e-3).

Run on the GPU machine: python3 scripts/peer_bench.py [--peers ...]
  [--shapes N,H,V[,softcap] ...] [--ce-shapes N,V ...] [--modes fwdbwd,fwd]
  [--runs 20] [--queued] [--json FILE]; celtune needs PYTHONPATH=python and
  CELTUNE_LIBRARY=<staged libceltune.so>.
"""
import argparse
import json
import os
import statistics
import sys

import torch
import torch.nn.functional as F

L2_FLUSH_BYTES = 2 * 60 * 1024 * 1024


class Unsupported(Exception):
    """The peer cannot run this problem (said on its line, not a failure)."""


def capped(z, softcap):
    return softcap * torch.tanh(z / softcap) if softcap else z


def naive_flce(x, w, y, softcap):
    return F.cross_entropy(capped((x @ w.t()).float(), softcap), y)


def naive_ce(z, y):
    return F.cross_entropy(z.float(), y)


# ---- peers: each returns fn(x, w, y) for flce or fn(z, y) for ce -------------

def peer_compile(family, softcap):
    # A fresh compile a problem: dynamo keeps its graphs per code object, and
    # after 8 recompiles (static shapes, two modes, a softcap) it runs the
    # function eagerly from then on. So it did from the fifth shape of the
    # fifty-ninth session's first call (GPT-2: 21.2 ms eager against 4.5
    # compiled; 4.6 GiB of logits and their gradient).
    torch._dynamo.reset()
    if family == "flce":
        step = torch.compile(naive_flce, dynamic=False)
        return lambda x, w, y: step(x, w, y, softcap)
    step = torch.compile(naive_ce, dynamic=False)
    return lambda z, y: step(z, y)


def peer_celtune(family, softcap):
    import celtune.torch as ct
    if family == "flce":
        return lambda x, w, y: ct.linear_cross_entropy(x, w, y, softcap=softcap or None)
    return lambda z, y: ct.cross_entropy(z, y)


def peer_liger(family, softcap):
    from liger_kernel.transformers import LigerCrossEntropyLoss, LigerFusedLinearCrossEntropyLoss
    if family == "flce":
        loss = LigerFusedLinearCrossEntropyLoss(softcap=softcap or None)
        return lambda x, w, y: loss(w, x, y)
    # Liger's ce writes the gradient over the logits in forward: the timed runs
    # read what the run before left there (the same bytes and work).
    loss = LigerCrossEntropyLoss()
    return lambda z, y: loss(z, y)


def peer_cce(filter_eps):
    def make(family, softcap):
        if family != "flce":
            raise Unsupported("Cut Cross-Entropy takes the linear layer's inputs, not logits")
        from cut_cross_entropy import linear_cross_entropy
        return lambda x, w, y: linear_cross_entropy(x, w, y, softcap=softcap or None, filter_eps=filter_eps)
    return make


def peer_quack(family, softcap):
    if softcap:
        raise Unsupported("no softcap")
    if family == "flce":
        from quack.linear_cross_entropy import chunked_linear_cross_entropy
        # Its default chunk of 4096 rows, but 2048 where H = 4096: QuACK 0.6.5
        # refuses an epilogue whose m equals n ("row/col inference ambiguous").
        return lambda x, w, y: chunked_linear_cross_entropy(x, w, y, chunk_size=4096 if x.shape[-1] != 4096 else 2048)
    from quack.cross_entropy import cross_entropy
    return lambda z, y: cross_entropy(z, y)


PEERS = {
    "compile": peer_compile,
    "celtune": peer_celtune,
    "liger": peer_liger,
    "cce": peer_cce("high"),
    "cce-exact": peer_cce(None),
    "quack": peer_quack,
}


def versions():
    from importlib.metadata import PackageNotFoundError, version
    out = {"torch": torch.__version__}
    for name in ("triton", "liger-kernel", "cut-cross-entropy", "quack-kernels"):
        try:
            out[name] = version(name)
        except PackageNotFoundError:  # not installed: the peer will say so
            pass
    return out


# ---- timing -----------------------------------------------------------------

_flush = None
_outside0 = 0


def outside_torch():
    """Device memory in use beyond torch's pool, less what the process held at its start, in bytes: celtune's
    scratch (the library allocates it itself), cuBLAS workspaces, modules loaded since."""
    torch.cuda.synchronize()
    free, total = torch.cuda.mem_get_info()
    return total - free - torch.cuda.memory_reserved() - _outside0


def flush_buffer():
    """Written before every run to flush the L2; allocated once, before any baseline is read."""
    global _flush
    if _flush is None:
        _flush = torch.empty(L2_FLUSH_BYTES // 4, device="cuda", dtype=torch.float32)
    return _flush


_queue = None  # (a, out) for --queued, set in main


def bench(fn, runs, warmup=3):
    flush = flush_buffer()
    times = []
    for i in range(warmup + runs):
        flush.fill_(1.0)
        if _queue is not None:
            for _ in range(3):
                torch.matmul(_queue[0], _queue[0], out=_queue[1])
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        torch.cuda.synchronize()
        if i >= warmup:
            times.append(start.elapsed_time(end))
    times.sort()
    return statistics.median(times), times[len(times) // 5], times[4 * len(times) // 5]


def measure(fn, runs):
    """(median, p20, p80, peak extra MiB in torch's pool) of fn after one warm call."""
    flush_buffer()  # outside what is measured
    fn()
    torch.cuda.synchronize()
    base = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    med, p20, p80 = bench(fn, runs)
    extra = (torch.cuda.max_memory_allocated() - base) / 2**20
    return med, p20, p80, extra


def rel(a, ref):
    return ((a.float() - ref).norm() / ref.norm().clamp_min(1e-30)).item()


def said(e, limit):
    return f"{type(e).__name__}: {str(e).splitlines()[0][:limit] if str(e) else ''}"


def make_peer(peer, family, softcap, name):
    """The peer's callable for this problem, or None once its line says why not."""
    try:
        return PEERS[peer](family, softcap)
    except Unsupported as e:
        print(f"{peer:9s} {name}: not run ({e})", flush=True)
    except Exception as e:  # not installed, or fails to import on this machine
        print(f"{peer:9s} {name}: not available ({said(e, 160)})", flush=True)
    return None


# ---- one problem --------------------------------------------------------------

def run_flce(args, spec, rows):
    parts = spec.split(",")
    n, h, v = map(int, parts[:3])
    cap = float(parts[3]) if len(parts) > 3 else 0.0
    x = (torch.randn(n, h, device="cuda") * 0.5).bfloat16().requires_grad_()
    w = (torch.randn(v, h, device="cuda") * h ** -0.5).bfloat16().requires_grad_()
    y = torch.randint(0, v, (n,), device="cuda")
    ref = None
    if args.check:
        xf, wf = x.detach().float().requires_grad_(), w.detach().float().requires_grad_()
        lf = naive_flce(xf, wf, y, cap)
        lf.backward()
        ref = (lf.item(), xf.grad, wf.grad)
        del xf, wf, lf
    name = f"flce N={n} H={h} V={v} softcap={cap:g}"
    for peer in args.peers:
        if peer == "floor":
            continue
        fn = make_peer(peer, "flce", cap, name)
        if fn is None:
            continue
        err = {}
        try:
            if ref is not None:
                x.grad = w.grad = None
                loss = fn(x, w, y)
                loss.backward()
                err = {"loss": abs(loss.item() - ref[0]), "dx": rel(x.grad, ref[1]), "dw": rel(w.grad, ref[2])}
            for mode in args.modes:
                if mode == "fwdbwd":
                    def call():
                        x.grad = w.grad = None
                        fn(x, w, y).backward()
                    gemms = 3
                else:
                    xd, wd = x.detach(), w.detach()

                    def call():
                        with torch.no_grad():
                            fn(xd, wd, y)
                    gemms = 1
                med, p20, p80, extra = measure(call, args.runs)
                tflops = 2 * gemms * n * h * v / (med * 1e-3) / 1e12
                row = {"family": "flce", "peer": peer, "mode": mode, "N": n, "H": h, "V": v, "softcap": cap,
                       "median_ms": med, "p20_ms": p20, "p80_ms": p80, "tflops": tflops, "extra_mib": extra,
                       "outside_mib": outside_torch() / 2**20, **err}
                if peer == "celtune":
                    import celtune.torch as ct
                    row["config"] = ct.explain(x, w, y, softcap=cap or None, backward=mode == "fwdbwd")
                rows.append(row)
                acc = f"; err loss {err['loss']:.1e} dx {err['dx']:.1e} dw {err['dw']:.1e}" if err else ""
                src = f" [{row['config']['source']}]" if "config" in row else ""
                print(f"{peer:9s} {mode:6s} {name}: median {med:.3f} ms (p20 {p20:.3f}, p80 {p80:.3f}), "
                      f"{tflops:.0f} TFLOP/s, extra {extra:.0f} MiB (outside torch {row['outside_mib']:.0f})"
                      f"{acc}{src}", flush=True)
        except Exception as e:
            print(f"{peer:9s} {name}: failed ({said(e, 200)})", flush=True)
        x.grad = w.grad = None
        torch.cuda.empty_cache()
    if "floor" in args.peers:
        g = torch.randn(n, v, device="cuda").bfloat16()
        xd, wd = x.detach(), w.detach()
        z = torch.empty(n, v, device="cuda", dtype=torch.bfloat16)

        def gemms3():
            torch.matmul(xd, wd.t(), out=z)
            torch.matmul(g, wd)
            torch.matmul(g.t(), xd)

        for mode in args.modes:
            k = 3 if mode == "fwdbwd" else 1
            med, p20, p80, _ = measure(gemms3 if k == 3 else (lambda: torch.matmul(xd, wd.t(), out=z)), args.runs)
            tflops = 2 * k * n * h * v / (med * 1e-3) / 1e12
            rows.append({"family": "flce", "peer": "floor", "mode": mode, "N": n, "H": h, "V": v, "softcap": cap,
                         "median_ms": med, "p20_ms": p20, "p80_ms": p80, "tflops": tflops})
            print(f"{'floor':9s} {mode:6s} {name}: median {med:.3f} ms (p20 {p20:.3f}, p80 {p80:.3f}), "
                  f"{tflops:.0f} TFLOP/s ({k} cuBLAS GEMM{'s' if k > 1 else ''})", flush=True)
        del g, z
    del x, w, y, ref
    torch.cuda.empty_cache()


def run_ce(args, spec, rows):
    n, v = map(int, spec.split(",")[:2])
    z0 = torch.randn(n, v, device="cuda").bfloat16()
    y = torch.randint(0, v, (n,), device="cuda")
    ref = None
    if args.check:
        zf = z0.float().requires_grad_()
        lf = naive_ce(zf, y)
        lf.backward()
        ref = (lf.item(), zf.grad)
        del zf, lf
    name = f"ce N={n} V={v}"
    nbytes = n * v * 2
    for peer in args.peers:
        if peer == "floor":
            continue
        fn = make_peer(peer, "ce", 0.0, name)
        if fn is None:
            continue
        z = z0.clone().requires_grad_()
        err = {}
        try:
            if ref is not None:
                zc = z0.clone().requires_grad_()
                loss = fn(zc, y)
                loss.backward()
                err = {"loss": abs(loss.item() - ref[0]), "dz": rel(zc.grad, ref[1])}
                del zc, loss
            for mode in args.modes:
                if mode == "fwdbwd":
                    def call():
                        z.grad = None
                        fn(z, y).backward()
                    moved = 2 * nbytes
                else:
                    zd = z.detach()

                    def call():
                        with torch.no_grad():
                            fn(zd, y)
                    moved = nbytes
                med, p20, p80, extra = measure(call, args.runs)
                gbs = moved / (med * 1e-3) / 1e9
                row = {"family": "ce", "peer": peer, "mode": mode, "N": n, "V": v, "median_ms": med, "p20_ms": p20,
                       "p80_ms": p80, "gbs": gbs, "extra_mib": extra, "outside_mib": outside_torch() / 2**20, **err}
                rows.append(row)
                acc = f"; err loss {err['loss']:.1e} dz {err['dz']:.1e}" if err else ""
                print(f"{peer:9s} {mode:6s} {name}: median {med:.3f} ms (p20 {p20:.3f}, p80 {p80:.3f}), "
                      f"{gbs:.0f} GB/s, extra {extra:.0f} MiB (outside torch {row['outside_mib']:.0f}){acc}",
                      flush=True)
        except Exception as e:
            print(f"{peer:9s} {name}: failed ({said(e, 200)})", flush=True)
        del z
        torch.cuda.empty_cache()
    if "floor" in args.peers:
        src = z0.view(-1)
        dst = torch.empty_like(src)
        half = src.numel() // 2
        for mode in args.modes:
            full = mode == "fwdbwd"
            fn = (lambda: dst.copy_(src)) if full else (lambda: dst[:half].copy_(src[half:2 * half]))
            med, p20, p80, _ = measure(fn, args.runs)
            moved = 2 * nbytes if full else nbytes
            rows.append({"family": "ce", "peer": "floor", "mode": mode, "N": n, "V": v, "median_ms": med,
                         "p20_ms": p20, "p80_ms": p80, "gbs": moved / (med * 1e-3) / 1e9})
            print(f"{'floor':9s} {mode:6s} {name}: median {med:.3f} ms (p20 {p20:.3f}, p80 {p80:.3f}), "
                  f"{moved / (med * 1e-3) / 1e9:.0f} GB/s (copy)", flush=True)
        del dst
    del z0, y, ref
    torch.cuda.empty_cache()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--peers", default="compile", help="comma-separated: " + ", ".join([*PEERS, "floor"]))
    ap.add_argument("--shapes", nargs="*",
                    default=["4096,4096,128256", "8192,4096,128256", "16384,4096,128256", "4096,2304,256000,30",
                             "8192,768,50257"])
    ap.add_argument("--ce-shapes", nargs="*", default=[])
    ap.add_argument("--modes", default="fwdbwd,fwd")
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--check", action=argparse.BooleanOptionalAction, default=True)
    ap.add_argument("--queued", action="store_true", help="GPU work ahead of each timed run (see above)")
    ap.add_argument("--json", help="write every row here as JSON")
    args = ap.parse_args()
    args.peers = [p for p in args.peers.split(",") if p]
    args.modes = [m for m in args.modes.split(",") if m]
    unknown = [p for p in args.peers if p not in PEERS and p != "floor"]
    bad_modes = [m for m in args.modes if m not in ("fwdbwd", "fwd")]
    if unknown or bad_modes or args.runs < 1:
        ap.error(f"unknown peers {unknown} or modes {bad_modes}, or --runs < 1")
    torch.manual_seed(20261122)
    global _outside0
    torch.ones(1, device="cuda")  # the context, before anything is counted
    _outside0 = outside_torch()
    if args.queued:  # before the inputs: outside every peer's measured peak
        global _queue
        a = torch.randn(8192, 8192, device="cuda").bfloat16()
        _queue = (a, torch.empty_like(a))
    info = {"device": torch.cuda.get_device_name(), **versions(), "queued": args.queued}
    print("# " + ", ".join(f"{k} {v}" for k, v in info.items()), flush=True)
    rows = []
    for spec in args.shapes:
        run_flce(args, spec, rows)
    for spec in args.ce_shapes:
        run_ce(args, spec, rows)
    if args.json:
        with open(args.json + ".tmp", "w") as f:
            json.dump({"info": info, "rows": rows}, f, indent=1)
        os.replace(args.json + ".tmp", args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
