#!/usr/bin/env python3
"""Tabulates ce against its floor from `celtune bench --csv` tables (one bench
process a shape, as scripts/gpu_run.sh's cetable step appends them): one line
per vocabulary, dtype and mode, the "x floor" of the device default at each
token count. Issue 13's bars read off it: forward at
most 1.18x (85% of the copy bandwidth), forward+backward at most 1.3x."""
from bench_csv import table_rows
import sys


def main(path):
    table, tokens = {}, []
    for r in table_rows(path):
        if r.get("kernel") != "ce" or r.get("provider") != "celtune":
            continue
        n, v = int(r["N"]), int(r["V"])
        if n not in tokens:
            tokens.append(n)
        table.setdefault((v, r["dtype"], r["mode"]), {})[n] = r["x floor"]
    if not table:
        print(f"ce_table: no ce rows in {path}")
        return 1
    tokens.sort()
    print("V | dtype | mode | " + " | ".join(f"N={n}" for n in tokens))
    for (v, dtype, mode), row in sorted(table.items()):
        print(f"{v} | {dtype} | {mode} | " + " | ".join(row.get(n, "-") for n in tokens))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
