#!/usr/bin/env python3
"""Each kernel's median time from `ncu --metrics gpu__time_duration.sum --csv`
(scripts/gpu_run.sh ncu): one line, "name median µs ×launches; …", the names
cut to the function (short template arguments kept, namespaces dropped). ncu runs
the kernels at its base clocks with caches flushed: the times compare kernels,
not steps."""
import collections
import csv
import statistics
import sys

UNIT_US = {"ns": 1e-3, "nsecond": 1e-3, "us": 1.0, "usecond": 1.0, "ms": 1e3, "msecond": 1e3}


def times(path):
    """{short kernel name: [µs, one per profiled launch]}, in the order first seen."""
    with open(path) as f:
        rows = [line for line in f if line.startswith('"')]  # ncu's own messages start with ==
    out = collections.OrderedDict()
    for r in csv.DictReader(rows):
        if r.get("Metric Name") != "gpu__time_duration.sum":
            continue
        full = r["Kernel Name"].replace("<unnamed>::", "").replace("(anonymous namespace)::", "")
        head, lt, args = full.split("(")[0].partition("<")
        name = head.split("::")[-1].split()[-1] + (lt + args if len(args) < 40 else "<…>")
        out.setdefault(name, []).append(float(r["Metric Value"].replace(",", "")) * UNIT_US[r["Metric Unit"]])
    return out


def main():
    t = times(sys.argv[1])
    print("; ".join(f"{k} {statistics.median(v):.1f} us x{len(v)}" for k, v in t.items()) or "no kernel profiled")


if __name__ == "__main__":
    main()
