"""Reads the table lines of `celtune bench --csv` output appended into one file
(several bench processes, each with its header, among bench's own messages):
one dict a table line, keyed by the header's column names."""
import csv


def table_rows(path):
    header = None
    with open(path) as f:
        for line in f:
            line = line.rstrip("\n")
            if not line:
                continue
            fields = next(csv.reader([line]))
            if "x floor" in fields:
                header = fields
                continue
            if header is None or len(fields) != len(header):
                continue  # a bench message, not a table line
            yield dict(zip(header, fields))
