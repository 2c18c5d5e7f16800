#!/usr/bin/env python3
"""Summarises nvidia-smi samples of the SM clock and the power draw (CSV lines
"clock_mhz, power_w", as scripts/gpu_run.sh records them) over the samples
taken under load (power above a threshold): GEMMs on the H100 and the H200 run
at the power limit, so a timing means little without the clock it ran at."""
import sys


def main(path, threshold_w=300.0):
    rows = []
    with open(path) as f:
        for line in f:
            try:
                clock, power = (float(x) for x in line.split(","))
            except ValueError:
                continue  # a header or a "[N/A]" sample
            rows.append((clock, power))
    busy = [r for r in rows if r[1] > threshold_w]
    if not busy:
        print(f"clocks: no sample above {threshold_w:.0f} W ({len(rows)} samples)")
        return
    clocks = sorted(c for c, _ in busy)
    powers = sorted(p for _, p in busy)
    q = lambda a, f: a[int(f * (len(a) - 1))]
    print(f"clocks under load (> {threshold_w:.0f} W, {len(busy)} of {len(rows)} samples): "
          f"SM MHz p10/median/p90 {q(clocks, .1):.0f}/{q(clocks, .5):.0f}/{q(clocks, .9):.0f}; "
          f"power W {q(powers, .1):.0f}/{q(powers, .5):.0f}/{q(powers, .9):.0f}")


if __name__ == "__main__":
    main(sys.argv[1])
