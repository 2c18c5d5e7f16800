#!/usr/bin/env python3
"""Summarises an A/B of two staged builds (scripts/gpu_run.sh ab): CSV tables
from `celtune bench --csv`, each preceded by a line "## BUILD ROUND", as the
step appends them. Prints one line per measured row (kernel, mode, shape,
dtype, config): each build's medians over the rounds, and the ratio of the
medians' medians (B over A; below 1: B is faster). The rounds are shown, not
only their median, because a difference smaller than the spread between rounds
of one build is noise (METHOD.md)."""
import csv
import statistics
import sys


def read(path):
    """{row key: {build: [median ms, one per round]}}, and the builds in the order first seen."""
    runs, builds = {}, []
    build, header = None, None
    with open(path) as f:
        for line in f:
            line = line.rstrip("\n")
            if line.startswith("## "):
                build, header = line.split()[1], None
                if build not in builds:
                    builds.append(build)
                continue
            if build is None or not line:
                continue
            fields = next(csv.reader([line]))
            if header is None:
                header = fields
                continue
            if len(fields) != len(header):
                continue  # not a table line (a bench message on stdout)
            r = dict(zip(header, fields))
            try:
                ms = float(r["median ms"])
            except (KeyError, ValueError):
                continue
            key = (r["kernel"], r["provider"], r["mode"], f'{r["N"]},{r["H"]},{r["V"]}', r["dtype"], r["config"])
            runs.setdefault(key, {}).setdefault(build, []).append(ms)
    return runs, builds


def main(path):
    runs, builds = read(path)
    if len(builds) != 2:
        print(f"ab: expected two builds in {path}, found {builds}")
        return 1
    a, b = builds
    print(f"A = {a}, B = {b}; median ms per round; B/A = ratio of the medians over rounds")
    for key, by in runs.items():
        if a not in by or b not in by:
            continue
        ma, mb = statistics.median(by[a]), statistics.median(by[b])
        kernel, provider, mode, shape, dtype, config = key
        label = f"{kernel} {provider} {mode} {shape} {dtype}" + (f" {config}" if config not in ("", "-") else "")
        fa = "/".join(f"{x:.3f}" for x in by[a])
        fb = "/".join(f"{x:.3f}" for x in by[b])
        print(f"{label}: A {fa}  B {fb}  B/A {mb / ma:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
