#!/usr/bin/env bash
# Several tuning processes write one database at once (CPU backend): every
# problem gets exactly one best row, every measurement a process reports landed
# exactly once, and processes tuning the same problems lose nothing. Then
# several imports into one database that does not exist yet: all succeed and
# every record lands.
# Usage: concurrency_test.sh path/to/celtune [records.jsonl: a shipped file, for the imports]
set -u
celtune=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
db="$tmp/shared.sqlite"
export OMP_NUM_THREADS=1 OMP_WAIT_POLICY=passive
args=(--device cpu --hidden 32 --vocab 1500 --tokens 16..128 --dtype fp32 --min-runs 3 --max-runs 3
      --strategy exhaustive --db "$db" --json)
pids=()
for k in 0 1 2 3; do
  "$celtune" tune "${args[@]}" --shard "$k/4" >"$tmp/shard$k.jsonl" 2>"$tmp/shard$k.err" & pids+=($!)
done
# Two more processes on the same problems as shard 0, at the same time.
for k in a b; do
  "$celtune" tune "${args[@]}" --shard 0/4 --force >"$tmp/dup$k.jsonl" 2>"$tmp/dup$k.err" & pids+=($!)
done
rc=0
for p in "${pids[@]}"; do wait "$p" || rc=1; done
if [ $rc -ne 0 ]; then echo "FAIL: a tuning process failed"; cat "$tmp"/*.err; exit 1; fi
python3 - "$db" "$tmp" <<'PY'
import glob, json, sqlite3, sys
db, tmp = sys.argv[1], sys.argv[2]
con = sqlite3.connect(db)
problems = {}
for f in sorted(glob.glob(tmp + "/shard*.jsonl")):
    for line in open(f):
        r = json.loads(line)
        assert "error" not in r, r
        assert r["problem"] not in problems, "two shards tuned " + r["problem"]
        problems[r["problem"]] = r
expected = 5 * 2  # tokens 16, 32, 64, 128 … 16..128 is 4 counts × 2 modes; checked below
tokens = {16, 32, 64, 128}
assert len(problems) == len(tokens) * 2, sorted(problems)
best = con.execute("SELECT p.key, count(*) FROM best b JOIN problems p ON p.id = b.problem_id GROUP BY p.key").fetchall()
assert sorted(k for k, _ in best) == sorted(problems), (best, sorted(problems))
assert all(n == 1 for _, n in best), best
# Every (problem, config) a shard process evaluated is stored exactly once.
rows = con.execute("SELECT p.key, count(*), count(DISTINCT m.config_id) FROM measurements m "
                   "JOIN problems p ON p.id = m.problem_id GROUP BY p.key").fetchall()
by_key = {k: (n, d) for k, n, d in rows}
for key, r in problems.items():
    n, d = by_key[key]
    assert n == d, f"{key}: duplicate measurement rows"
    assert n == r["candidates"], f"{key}: {n} rows, {r['candidates']} candidates evaluated"
print(f"concurrency: {len(problems)} problems from 4 shards + 2 overlapping writers, "
      f"{sum(n for n, _ in by_key.values())} measurements, all exactly once")
PY
[ $? -eq 0 ] || exit 1
# Imports started together into a new database: each writes its own under a
# temporary name, one links it into place, and the others' records go into
# that one (they once exited 3, "File exists", after printing a summary).
# A few hundred records (a shipped file), so that each import outlasts the
# others' start: the tuned database's 80 rows imported too fast to race.
if [ -n "${2:-}" ]; then cp "$2" "$tmp/all.jsonl"; else "$celtune" db --db "$db" export -o "$tmp/all.jsonl" || exit 1; fi
split -n l/4 "$tmp/all.jsonl" "$tmp/part."
for round in 1 2 3; do
  new="$tmp/new$round.sqlite"
  pids=()
  for f in "$tmp"/part.a?; do "$celtune" db --db "$new" import "$f" >"$f.out$round" 2>&1 & pids+=($!); done
  for p in "${pids[@]}"; do
    wait "$p" || { echo "FAIL: an import into a new database failed (round $round)"; cat "$tmp"/part.a?.out$round; exit 1; }
  done
  "$celtune" db --db "$new" export -o "$tmp/back$round.jsonl" || exit 1
  cmp -s <(sort "$tmp/all.jsonl") <(sort "$tmp/back$round.jsonl") ||
    { echo "FAIL: records lost or changed by imports into a new database (round $round)"; exit 1; }
done
echo "concurrency: 4 imports at once into a new database, 3 rounds: every record landed"
# Each import's one line is true: the import that lost the race to create the
# database once printed a summary of its own copy, then discarded that copy and
# printed a second. Two whole files under two kernel hashes, so that each import
# writes long enough to race (the parts above rarely did).
for k in 1 2; do sed "s/\"kernel_hash\":\"[0-9a-f]*\"/\"kernel_hash\":\"000000000000000$k\"/" "$tmp/all.jsonl" >"$tmp/hash$k.jsonl"; done
"$celtune" db --db "$tmp/two-seq.sqlite" import "$tmp/hash1.jsonl" >/dev/null &&
  "$celtune" db --db "$tmp/two-seq.sqlite" import "$tmp/hash2.jsonl" >/dev/null || exit 1
rows=$("$celtune" db --db "$tmp/two-seq.sqlite" export | wc -l)  # one after the other
for round in 1 2 3; do
  new="$tmp/two$round.sqlite"
  "$celtune" db --db "$new" import "$tmp/hash1.jsonl" >"$tmp/two1.out" 2>&1 & p1=$!
  "$celtune" db --db "$new" import "$tmp/hash2.jsonl" >"$tmp/two2.out" 2>&1 & p2=$!
  for p in $p1 $p2; do
    wait "$p" || { echo "FAIL: an import into a new database failed (round $round)"; cat "$tmp"/two?.out; exit 1; }
  done
  for f in "$tmp"/two?.out; do
    if [ "$(grep -c "^imported " "$f")" != 1 ] || grep -q "did not happen\|meanwhile" "$f"; then
      echo "FAIL: an import into a new database said more than its one summary (round $round)"; cat "$tmp"/two?.out; exit 1
    fi
  done
  [ "$("$celtune" db --db "$new" export | wc -l)" = "$rows" ] ||
    { echo "FAIL: records lost by two imports into a new database (round $round)"; exit 1; }
done
echo "concurrency: 2 whole-file imports at once into a new database, 3 rounds: one true summary each"
