#!/usr/bin/env python3
"""What the targets' distribution costs the fused path: forward+backward of
celtune.torch.linear_cross_entropy with uniform targets (what `celtune bench`
and `celtune tune` draw) and with targets as real text repeats them, since
flce-target-terms.patch's dW pass sorts the tokens by target and walks each
target's tokens in turn (docs/results.md, fifty-seventh session).

  uniform   torch.randint over V
  zipf      rank k drawn with probability ∝ 1/k^1.1, ranks mapped to random ids
  zipf+pad  the same with a quarter of the tokens one padding id the loss counts

One CSV line per (shape, distribution): build, N, H, V, dist, median / p20 / p80
ms (CUDA events, L2 flushed before every run, peer_bench.py's timing), and the
longest run of one target. Run one process per library so an A/B interleaves
them; the database beside the library is read as the runtime reads it (remove
it to time the built-in default).

Run on the GPU machine: python3 scripts/probe/target_cost.py LABEL N,H,V ... [--runs R],
with PYTHONPATH=python and CELTUNE_LIBRARY pointing at the library to time
(`scripts/gpu_run.sh targets` runs it over two staged builds);
python3 scripts/probe/target_cost.py --summarize CSV prints one line a problem
and distribution: each build's medians and the ratio of their means (the
second build seen over the first)."""
import argparse
import os
import sys


def targets(kind, n, v, gen):
    import torch

    if kind == "uniform":
        return torch.randint(0, v, (n,), device="cuda", generator=gen)
    ranks = torch.arange(1, v + 1, device="cuda", dtype=torch.float64)
    p = ranks.pow(-1.1)
    y = torch.multinomial(p / p.sum(), n, replacement=True, generator=gen)
    y = torch.randperm(v, device="cuda", generator=gen)[y]
    if kind == "zipf+pad":
        y[torch.rand(n, device="cuda", generator=gen) < 0.25] = v - 1
    return y


def summarize(path):
    runs, builds = {}, []
    with open(path) as f:
        for line in f:
            label, n, h, v, kind, med = line.strip().split(",")[:6]
            if label not in builds:
                builds.append(label)
            runs.setdefault((int(n), int(h), int(v), kind), {}).setdefault(label, []).append(float(med))
    print("builds: " + ", ".join(f"{'AB'[i] if i < 2 else i} = {b}" for i, b in enumerate(builds)))
    for (n, h, v, kind), by in runs.items():
        cols = "  ".join(f"{'AB'[i] if i < 2 else i} " + "/".join(f"{m:.3f}" for m in by.get(b, [])) for i, b in enumerate(builds))
        ratio = ""
        if len(builds) > 1 and by.get(builds[0]) and by.get(builds[1]):
            ratio = f"  B/A {sum(by[builds[1]]) / len(by[builds[1]]) / (sum(by[builds[0]]) / len(by[builds[0]])):.3f}"
        print(f"N={n} H={h} V={v} {kind:9s} {cols}{ratio}")


def main():
    if len(sys.argv) == 3 and sys.argv[1] == "--summarize":
        return summarize(sys.argv[2])
    # Imported here, so that --summarize runs where torch is not installed.
    import torch
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    from peer_bench import measure  # the scripts folder, not a package
    import celtune.torch as ct

    ap = argparse.ArgumentParser()
    ap.add_argument("label")
    ap.add_argument("shapes", nargs="+")
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--dists", default="uniform,zipf,zipf+pad")
    a = ap.parse_args()
    gen = torch.Generator(device="cuda")
    for spec in a.shapes:
        n, h, v = map(int, spec.split(","))
        gen.manual_seed(20261129)
        x = (torch.randn(n, h, device="cuda", generator=gen) * 0.5).bfloat16().requires_grad_()
        w = (torch.randn(v, h, device="cuda", generator=gen) * h ** -0.5).bfloat16().requires_grad_()
        for kind in a.dists.split(","):
            y = targets(kind, n, v, gen)
            longest = int(torch.unique(y, return_counts=True)[1].max())

            def call():
                x.grad = w.grad = None
                ct.linear_cross_entropy(x, w, y).backward()

            med, p20, p80, _ = measure(call, a.runs)
            src = ct.explain(x, w, y)["source"]
            print(f"{a.label},{n},{h},{v},{kind},{med:.4f},{p20:.4f},{p80:.4f},{longest},{src}", flush=True)
        del x, w
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
