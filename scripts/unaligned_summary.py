#!/usr/bin/env python3
"""Issue 13 point 2's bar from `celtune bench --csv` tables that
scripts/gpu_run.sh's unaligned step appends, rounds interleaved: for each
mode, N and H, celtune's time at each odd vocabulary against the same problem
at V rounded up to a multiple of 128, the median of the rounds on each side
and the per-round ratios' range. The bar: within 5% (ratio at most 1.05).

One bench at a time gives 3-9% either way at these 1-4 ms shapes (the
forty-fourth session's single runs on an H200), so the rounds are what the bar
is read from."""
from bench_csv import table_rows
import statistics
import sys


def main(path):
    times = {}  # (mode, N, H, V) -> [median ms of each round, in order]
    for r in table_rows(path):
        if r.get("kernel") != "flce" or r.get("provider") != "celtune":
            continue
        key = (r["mode"], int(r["N"]), int(r["H"]), int(r["V"]))
        times.setdefault(key, []).append(float(r["median ms"]))
    lines, worst = [], 0.0
    for (mode, n, h, v), odd in sorted(times.items()):
        if v % 128 == 0:
            continue
        v_pad = (v + 127) // 128 * 128
        padded = times.get((mode, n, h, v_pad))
        if not padded or len(padded) != len(odd):
            lines.append(f"{mode} N={n} H={h} V={v}: no matching rounds at the padded width")
            worst = float("inf")
            continue
        ratio = statistics.median(odd) / statistics.median(padded)
        per = [a / b for a, b in zip(odd, padded)]
        worst = max(worst, ratio)
        lines.append(f"{mode} N={n} H={h} V={v}: {statistics.median(odd):.3f} ms against "
                     f"{statistics.median(padded):.3f} at V={v_pad}: {ratio:.3f}x "
                     f"(rounds {min(per):.3f}-{max(per):.3f}, {len(per)} rounds)")
    if not lines:
        print(f"unaligned_summary: no flce rows at an odd vocabulary in {path}")
        return 1
    print("\n".join(lines))
    print(f"worst median ratio {worst:.3f}x: {'within' if worst <= 1.05 else 'beyond'} the 5% bar")
    return 0


if __name__ == "__main__":
    if len(sys.argv) != 2:
        print("usage: unaligned_summary.py BENCH.csv", file=sys.stderr)
        sys.exit(2)
    sys.exit(main(sys.argv[1]))
