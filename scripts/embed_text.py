#!/usr/bin/env python3
"""Writes a C++ header holding a text file as a string constant.

Used by the build to embed db/schema.sql, so the schema stays one reviewable SQL
file and the binary needs nothing beside it at run time."""
import sys

src, out, name = sys.argv[1], sys.argv[2], sys.argv[3]
text = open(src, encoding="utf-8").read()
delim = "celtune_sql"
assert ")" + delim + '"' not in text
with open(out, "w", encoding="utf-8") as f:
    f.write("// Generated from %s by scripts/embed_text.py. Do not edit.\n#pragma once\n" % src.split("/")[-1])
    f.write("inline constexpr const char* %s = R\"%s(%s)%s\";\n" % (name, delim, text, delim))
