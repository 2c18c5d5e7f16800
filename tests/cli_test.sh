#!/usr/bin/env bash
# CLI invocations and their exit codes: 0 ok, 1 verdict failed, 2 usage, 3 environment.
# Usage: cli_test.sh path/to/celtune
set -u
celtune=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export CELTUNE_DB="$tmp/default.sqlite"
fails=0 passes=0

expect() {  # expect CODE description -- command...
  local want=$1 what=$2; shift 3
  "$@" >"$tmp/out" 2>"$tmp/err"
  local got=$?
  if [ "$got" -eq "$want" ]; then
    passes=$((passes + 1))
  else
    fails=$((fails + 1))
    echo "FAIL: $what: exit $got, expected $want: $*"
    sed 's/^/  | /' "$tmp/out" "$tmp/err" | tail -15
  fi
}
contains() {  # contains FILE TEXT description
  if grep -qF -- "$2" "$tmp/$1"; then passes=$((passes + 1)); else
    fails=$((fails + 1)); echo "FAIL: $3: '$2' not in $1"; sed 's/^/  | /' "$tmp/$1" | tail -10; fi
}

# hold_lock DB SECONDS [write]: another writer's exclusive lock, held in the
# background ($locker); with `write`, a row written under it too (a rollback-
# journal database then has its journal beside it, as while a writer commits).
hold_lock() {
  rm -f "$tmp/locked"
  python3 - "$1" "$tmp/locked" "$2" "${3:-}" <<'PY' &
import sqlite3, sys, time
con = sqlite3.connect(sys.argv[1], isolation_level=None, timeout=0)
con.execute("BEGIN EXCLUSIVE")
if sys.argv[4] == "write":
    con.execute("INSERT INTO configs (json) VALUES ('{\"pad\":1}')")
open(sys.argv[2], "w").close()
time.sleep(float(sys.argv[3]))
con.execute("ROLLBACK")
PY
  locker=$!
  for _ in $(seq 50); do [ -e "$tmp/locked" ] && break; sleep 0.1; done
}

expect 0 "version" -- "$celtune" --version
contains out "celtune " "version text"
expect 0 "help" -- "$celtune" --help
for sub in devices validate tune bench db lookup; do
  expect 0 "$sub --help" -- "$celtune" "$sub" --help
done
expect 2 "no subcommand" -- "$celtune"
expect 2 "unknown flag" -- "$celtune" validate --frobnicate
expect 2 "unknown flag before any command" -- "$celtune" --frobnicate
contains err "unknown option '--frobnicate'" "the flag is named, not 'A subcommand is required'"
expect 2 "unknown flag of db before its verb" -- "$celtune" db --frobnicate
contains err "unknown option '--frobnicate' for db" "the flag and its command are named"
expect 2 "unknown subcommand" -- "$celtune" frobnicate
# An unexpected argument is quoted: an empty one was named as nothing at all.
expect 2 "an empty argument" -- "$celtune" lookup ''
contains err "celtune: unexpected argument ''" "the empty argument is shown quoted"
expect 2 "two unexpected arguments" -- "$celtune" devices a 'b c'
contains err "unexpected arguments 'a' 'b c'" "each argument is quoted"
# A flag given '=' and nothing was taken as set.
expect 2 "a flag given an empty value" -- "$celtune" devices --json=''
contains err "--json was given an empty value" "the flag is named"
# A newline in a quoted word is escaped: it forged a line of the message.
expect 2 "an argument holding a newline" -- "$celtune" lookup $'a\nb'
contains err "unexpected argument 'a\x0ab'" "the newline in the argument is escaped"
[ "$(wc -l <"$tmp/err")" = 2 ] && passes=$((passes + 1)) || { fails=$((fails + 1)); echo "FAIL: the argument split the message"; cat "$tmp/err"; }
expect 2 "a command holding a newline" -- "$celtune" db $'li\nst'
contains err "unknown command 'li\x0ast'" "the newline in the command is escaped"
expect 2 "db without a verb" -- "$celtune" db
contains err "celtune: db needs a command: list, export, import, merge" "the verbs are listed"
# --help after a word that is no command printed the level above's help, exit 0.
expect 2 "an unknown command with --help" -- "$celtune" frobnicate --help
contains err "unknown command 'frobnicate'" "the word is named"
expect 2 "an unknown db verb with --help" -- "$celtune" db frobnicate --help
expect 0 "db --help" -- "$celtune" db --help
expect 0 "db merge --help" -- "$celtune" db merge --help
expect 0 "tune --help after options" -- "$celtune" tune --shape 8,8,100 --mode fwd --help
expect 0 "devices" -- "$celtune" devices
contains out "cpu" "devices lists the cpu"
expect 0 "devices --json" -- "$celtune" devices --json
python3 -c "import json,sys; d=json.load(open('$tmp/out')); assert any(x['id']=='cpu' for x in d)" \
  && passes=$((passes + 1)) || { fails=$((fails + 1)); echo "FAIL: devices --json is not the device list"; }

# validate: the CPU matrix passes, table and JSON agree on the verdicts.
expect 0 "validate cpu matrix" -- "$celtune" validate --device cpu --seed 7
contains out "0 failed" "validate summary"
contains out "seed: 7" "validate prints its seed"
cp "$tmp/out" "$tmp/table"
expect 0 "validate cpu --json" -- "$celtune" validate --device cpu --seed 7 --json
python3 - "$tmp/out" "$tmp/table" <<'PY' && passes=$((passes + 1)) || { fails=$((fails + 1)); echo "FAIL: --json verdicts differ from the table"; }
import json, sys
j = json.load(open(sys.argv[1]))
table = {}
for line in open(sys.argv[2]):
    parts = line.split()
    if len(parts) > 3 and parts[0].count("/") >= 2:
        table[parts[0]] = None
for line in open(sys.argv[2]):
    for verdict in ("pass", "FAIL"):
        if f"  {verdict}  " in line:
            table[line.split()[0]] = verdict == "pass"
assert j["failed"] == 0 and j["passed"] == len(j["cases"]) == len(table), (j["passed"], len(table))
for c in j["cases"]:
    assert table[c["case"]] == c["pass"], c["case"]
PY
expect 0 "validate default device" -- "$celtune" validate --seed 3 --shape 5,16,300
contains out "device:" "validate says which device"
expect 0 "validate one shape with options" -- "$celtune" validate --device cpu --shape 33,24,517 --dtype bf16,fp32 \
  --label-smoothing 0.1 --softcap 20 --z-loss 1e-4 --bias --reduction none --config '{"block_size":64,"v_chunk":128,"row_chunk":10}'
expect 0 "validate ce family" -- "$celtune" validate --device cpu --family ce --shape 9,0,1000 --dtype fp16

# Usage errors: malformed shapes, unknown presets, out-of-range options.
expect 2 "malformed shape" -- "$celtune" validate --device cpu --shape 12,abc
expect 2 "shape with two fields" -- "$celtune" validate --device cpu --shape 12,64
expect 2 "zero tokens" -- "$celtune" validate --device cpu --shape 0,64,100
expect 2 "unknown preset" -- "$celtune" validate --device cpu --model gpt-17 --tokens 8
expect 2 "smoothing out of range" -- "$celtune" validate --device cpu --shape 4,8,100 --label-smoothing 1.5
contains err "celtune: --label-smoothing" "a flag's error starts like every other error"
expect 2 "smoothing not a number" -- "$celtune" validate --device cpu --shape 4,8,100 --label-smoothing abc
contains err "expected a number in [0, 1], got abc" "text that is no number is called so"
expect 2 "smoothing beyond a double" -- "$celtune" validate --device cpu --shape 4,8,100 --label-smoothing 1e400
# A problem whose true gradient is beyond the dtype's range fails as the
# dtype's overflow, not as a kernel's non-finite values.
expect 1 "fp16 gradient beyond fp16" -- "$celtune" validate --device cpu --family ce --shape 7,0,2 --dtype fp16 --z-loss 1e5 --seed 7
contains out "values overflow fp16" "the verdict names the dtype's range"
# dX within fp16's range, but not dZ on the way to it: the plain path is as
# non-finite as the kernel, and the verdict says so instead of blaming the kernel.
expect 1 "fp16 dZ beyond fp16" -- "$celtune" validate --device cpu --shape 16,8,100 --dtype fp16 --z-loss 1e6 \
  --seed 360723546
contains out "the plain path in fp16 is non-finite at each of them too" "the verdict names the intermediate's overflow"
expect 2 "flce with no hidden size" -- "$celtune" validate --device cpu --tokens 4 --vocab 100
contains err "no hidden size: give --hidden" "the refusal names the missing flag, not a 0 nobody gave"
# --gemm-algos read 040 as octal 32 and 0x20 as hex, unlike every other count.
expect 2 "--gemm-algos 040" -- "$celtune" tune --device cpu --shape 8,16,200 --mode fwd --gemm-algos 040 --db "$tmp/ga.sqlite"
expect 2 "--gemm-algos 0x20" -- "$celtune" tune --device cpu --shape 8,16,200 --mode fwd --gemm-algos 0x20 --db "$tmp/ga.sqlite"
[ ! -e "$tmp/ga.sqlite" ] && passes=$((passes + 1)) || { fails=$((fails + 1)); echo "FAIL: a refused tune made a database"; }
expect 2 "shard beyond int" -- "$celtune" tune --device cpu --shape 8,16,200 --shard 0/9223372036854775807 --db "$tmp/t.sqlite"
contains err "≤ 2147483647" "the shard message states the limit that refused it"
# Found by probing as a new user (2026-11-23): each once passed or crashed.
expect 2 "a token range up to 2^62 (doubling overflowed int64)" -- "$celtune" lookup --device cpu \
  --tokens 1..4611686018427387904 --hidden 16 --vocab 50
expect 2 "an empty --shape is not an absent one" -- "$celtune" validate --device cpu --shape ''
contains err "empty value" "the message says the value is empty"
expect 2 "an empty --config" -- "$celtune" validate --device cpu --shape 4,8,100 --config ''
expect 2 "--softcap nan (a NaN sentinel once meant: not given)" -- "$celtune" lookup --device cpu --shape 8,16,50 \
  --mode fwd --softcap nan
expect 0 "--softcap=-0" -- "$celtune" lookup --device cpu --shape 8,16,50 --mode fwd --softcap=-0
contains out ":cap0:" "-0 keys as 0"
expect 2 "a --max-scratch past 2^63 bytes" -- "$celtune" tune --device cpu --family ce --mode fwd --shape 8,0,64 \
  --db "$tmp/scratch.sqlite" --max-scratch 17179869185GiB
contains err "out of range" "the size is refused as out of range"
expect 2 "negative softcap" -- "$celtune" validate --device cpu --shape 4,8,100 --softcap -3
# Past a double's range as written: 1e-400 read as 0 switched the option off.
for opt in --softcap --z-loss --label-smoothing; do
  expect 2 "$opt 1e-400" -- "$celtune" lookup --device cpu --shape 8,8,100 $opt 1e-400
  contains err "1e-400 is out of the range of a double" "$opt: the refusal names the value as written"
done
expect 2 "--softcap 1e400" -- "$celtune" lookup --device cpu --shape 8,8,100 --softcap 1e400
contains err "1e400 is out of the range of a double" "the refusal names the value as written, not inf"
# λ near FLT_MAX made 1 + 2λ·LSE overflow and NaN gradients whose exact value is finite.
expect 2 "a z-loss scale past 1e6" -- "$celtune" validate --device cpu --shape 4,8,100 --z-loss 3.4e38
contains err "up to 1e+06" "the refusal names the largest scale"
expect 0 "z-loss scale 1e6" -- "$celtune" validate --device cpu --shape 4,8,100 --z-loss 1e6
# A token's z-loss below fp32's range (1.44e-70, computed as 0) is no failure.
expect 0 "validate at fp32's underflow" -- "$celtune" validate --device cpu --shape 1,1,1 --reduction none \
  --label-smoothing 1 --z-loss 1e6 --softcap 1.2e-38 --bias --seed 1
expect 2 "unknown dtype" -- "$celtune" validate --device cpu --shape 4,8,100 --dtype fp8
contains err "'fp8' is not one of bf16, fp16, fp32" "the refusal names the dtype and the choices"
# CLI11's delimiter dropped empty items: "bf16,,fp16" ran bf16 and fp16, "fwd," fwd.
expect 2 "an empty dtype in a list" -- "$celtune" lookup --device cpu --shape 4,8,100 --dtype bf16,,fp16
contains err "an empty item in 'bf16,,fp16'" "the refusal quotes the list"
expect 2 "a mode list ending in a comma" -- "$celtune" lookup --device cpu --shape 4,8,100 --mode fwd,
# A vocabulary of millions: not one cluster of tile rows fits without the GEMM
# workspace, and the fused seed divided by the 0 rows it found (SIGFPE, exit 136).
expect 0 "lookup at V = 3550273 (the fused seed's lean choice finds no rows)" -- \
  "$celtune" lookup --device cpu --shape 256,4096,3550273
expect 0 "dtypes as a list and as separate values" -- "$celtune" lookup --device cpu --shape 4,8,100 --dtype bf16,fp16 fp32 --mode fwd
contains out ":fp32:" "the separate value counts too"
contains out ":fp16:" "the listed values count"
expect 2 "unknown reference" -- "$celtune" validate --device cpu --shape 4,8,100 --reference fp32
expect 0 "explicit fp64 reference" -- "$celtune" validate --device cpu --shape 4,8,100 --reference fp64
contains out "fp64" "validate names its truth"
if ! "$celtune" devices | grep -q '^cuda'; then
  expect 3 "gpu reference without a GPU" -- "$celtune" validate --device cpu --shape 4,8,100 --reference gpu
  contains err "needs a CUDA GPU" "gpu reference error says why"
  [ ! -s "$tmp/out" ] && passes=$((passes + 1)) || { fails=$((fails + 1)); echo "FAIL: the refused run printed its header"; }
fi
expect 2 "bad config json" -- "$celtune" validate --device cpu --shape 4,8,100 --config '{"blok":1}'
expect 2 "config violates constraints" -- "$celtune" validate --device cpu --shape 4,8,100 --config '{"block_size":48}'
expect 2 "bad device name" -- "$celtune" validate --device gpu-please
expect 2 "ignore_index inside vocab" -- "$celtune" validate --device cpu --shape 4,8,100 --ignore-index 5
# Environment errors.
expect 3 "no such CUDA device" -- "$celtune" validate --device 99 --shape 4,8,100
# tune: usage errors, then a real (small) tune on the CPU backend, resumed.
expect 2 "tune without a problem" -- "$celtune" tune --device cpu --db "$tmp/t.sqlite"
expect 2 "random without budget" -- "$celtune" tune --device cpu --shape 8,16,200 --strategy random --db "$tmp/t.sqlite"
expect 2 "bad max-scratch" -- "$celtune" tune --device cpu --shape 8,16,200 --max-scratch 12XB --db "$tmp/t.sqlite"
contains err "KiB or K, MiB or M, GiB or G" "the refusal lists every unit the parser takes"
# CELTUNE_MAX_SCRATCH: refused when malformed or below 64 MiB, wherever it is
# read (lookup's resolver, tune's --max-scratch default), and followed by tune.
expect 2 "a malformed CELTUNE_MAX_SCRATCH" -- env CELTUNE_MAX_SCRATCH=12XB "$celtune" lookup --device cpu --shape 64,32,2000
contains err "CELTUNE_MAX_SCRATCH: unknown size unit 'XB'" "the refusal names the variable"
expect 2 "a CELTUNE_MAX_SCRATCH below 64 MiB" -- env CELTUNE_MAX_SCRATCH=1MiB "$celtune" tune --device cpu \
  --shape 8,16,200 --db "$tmp/ms.sqlite"
contains err "need at least 64MiB" "the refusal names the least budget"
expect 0 "tune within CELTUNE_MAX_SCRATCH" -- env CELTUNE_MAX_SCRATCH=64MiB "$celtune" tune --device cpu \
  --shape 8,16,200 --budget 2 --db "$tmp/ms.sqlite"
contains out "max scratch 64.0 MiB" "tune's --max-scratch default follows CELTUNE_MAX_SCRATCH"
# Refused too where the variable would bound no case of the run: validate's
# default matrix and a tune given --max-scratch (both ran with it malformed).
expect 2 "validate's default matrix refuses a malformed CELTUNE_MAX_SCRATCH" -- env CELTUNE_MAX_SCRATCH=garbage \
  "$celtune" validate --device cpu
expect 2 "tune with --max-scratch refuses a malformed CELTUNE_MAX_SCRATCH" -- env CELTUNE_MAX_SCRATCH=garbage \
  "$celtune" tune --device cpu --shape 8,16,200 --max-scratch 64MiB --db "$tmp/ms.sqlite"
# A default the rule cannot keep within it (the CPU's fp32 tile) runs, and bench says so.
expect 0 "bench a default over CELTUNE_MAX_SCRATCH" -- env CELTUNE_MAX_SCRATCH=64MiB "$celtune" bench --device cpu \
  --shape 16,128,131072 --mode fwdbwd --runs 20 --no-unfused --no-ce
contains err "over CELTUNE_MAX_SCRATCH's 64.0 MiB here; timing it" "bench warns as the runtime does"
# A database the run creates and leaves empty is not left behind.
expect 1 "tune with no candidate within --max-scratch" -- "$celtune" tune --device cpu --shape 48,16,700 \
  --max-scratch 1KiB --db "$tmp/empty-new.sqlite"
contains out "within --max-scratch 1.0 KiB: the least scratch a config of it needs is" "the message names the limit and the need"
[ -z "$(ls "$tmp" | grep '^empty-new')" ] && passes=$((passes + 1)) \
  || { fails=$((fails + 1)); echo "FAIL: a tune that stored nothing left its new database"; ls "$tmp" | grep '^empty-new'; }
# A new database is made whole before it appears: a write cut short while its
# schema went in (a full disk; here a file-size limit) left a 4 KiB file without
# one, which every later command refused as "not a celtune database".
(trap '' XFSZ; ulimit -f 2; "$celtune" tune --device cpu --shape 48,16,700 --db "$tmp/xfsz-new.sqlite" \
  --min-runs 3 --max-runs 3 >"$tmp/out" 2>"$tmp/err")
[ $? -eq 3 ] && [ -z "$(ls "$tmp" | grep '^xfsz-new')" ] && passes=$((passes + 1)) \
  || { fails=$((fails + 1)); echo "FAIL: a tune cut short by a full disk left files"; ls "$tmp" | grep '^xfsz-new'; cat "$tmp/err"; }
# ... and says so of the database it was given, not of its temporary name
# ("database xfsz-new.sqlite.jiJYld: database or disk is full").
contains err "database $tmp/xfsz-new.sqlite: " "a full disk is said of the new database's own name"
expect 0 "the same new database, once there is room" -- "$celtune" tune --device cpu --shape 48,16,700 \
  --db "$tmp/xfsz-new.sqlite" --min-runs 3 --max-runs 3
# Interrupted (SIGTERM; a background job ignores SIGINT, and so does celtune
# then) before it stores a row, a tune takes its new database away again
# (Ctrl-C left an empty database, its -wal and its -shm); once a row is stored,
# the database stays with what it holds.
"$celtune" tune --device cpu --shape 1024,512,32000 --dtype fp32 --db "$tmp/int-t.sqlite" --min-runs 3 \
  --max-runs 3 >/dev/null 2>&1 &
tuner=$!
for _ in $(seq 200); do [ -e "$tmp/int-t.sqlite-wal" ] && break; sleep 0.05; done
kill -TERM "$tuner" 2>/dev/null; wait "$tuner"
[ -z "$(ls "$tmp" | grep '^int-t')" ] && passes=$((passes + 1)) \
  || { fails=$((fails + 1)); echo "FAIL: a tune interrupted before its first row left files"; ls -la "$tmp" | grep 'int-t'; }
cp "$tmp/xfsz-new.sqlite" "$tmp/int-kept.sqlite"
"$celtune" tune --device cpu --shape 1024,512,32000 --dtype fp32 --db "$tmp/int-kept.sqlite" --min-runs 3 \
  --max-runs 3 >/dev/null 2>&1 &
tuner=$!
sleep 0.5; kill -TERM "$tuner" 2>/dev/null; wait "$tuner"
expect 0 "an interrupted tune leaves an existing database" -- "$celtune" db --db "$tmp/int-kept.sqlite" list
contains out "N48:H16:V700" "its stored row is still there"
expect 2 "bad shard" -- "$celtune" tune --device cpu --shape 8,16,200 --shard 4/4 --db "$tmp/t.sqlite"
expect 2 "unknown strategy" -- "$celtune" tune --device cpu --shape 8,16,200 --strategy annealing
expect 0 "tune cpu" -- "$celtune" tune --device cpu --shape 48,16,700 --dtype bf16 --db "$tmp/t.sqlite" --min-runs 3 --max-runs 3 --json
python3 - "$tmp/out" <<'PY' && passes=$((passes + 1)) || { fails=$((fails + 1)); echo "FAIL: tune --json lines"; cat "$tmp/out"; }
import json, sys
lines = [json.loads(l) for l in open(sys.argv[1])]
assert len(lines) == 2 and {l["problem"].split(":")[-1] for l in lines} == {"fwd", "fwdbwd"}, lines
assert all(l["evaluated"] >= 1 and l["stats"]["samples"] >= 3 and l["speedup"] > 0 for l in lines), lines
PY
# A resumed tune measures afresh only configs with no stored row: the earlier
# winner it now tries early can lead guided search to a config the first run
# never reached, so the check is that no stored row is measured again (rows
# are unique per config, so a re-measurement rewrites one instead of adding).
rows() { python3 -c 'import sqlite3, sys; print(sorted(sqlite3.connect(sys.argv[1]).execute("SELECT id, median_ms, created_at FROM measurements").fetchall()))' "$tmp/t.sqlite"; }
rows >"$tmp/rows-before"
expect 0 "tune resumes" -- "$celtune" tune --device cpu --shape 48,16,700 --dtype bf16 --db "$tmp/t.sqlite" --min-runs 3 --max-runs 3 --json
rows >"$tmp/rows-after"
python3 - "$tmp/out" "$tmp/rows-before" "$tmp/rows-after" <<'PY' && passes=$((passes + 1)) || { fails=$((fails + 1)); echo "FAIL: a second tune measured a stored config again"; cat "$tmp/out"; }
import ast, json, sys
lines = [json.loads(l) for l in open(sys.argv[1])]
before, after = (ast.literal_eval(open(f).read()) for f in sys.argv[2:4])
fresh = sum(l["evaluated"] - l["reused"] for l in lines)
assert all(l["reused"] >= 1 for l in lines), lines
assert set(before) <= set(after), "a stored measurement was rewritten"
assert len(after) == len(before) + fresh, (len(before), len(after), fresh)
PY
# An earlier database as --prior: its best configs for this device and problem
# are measured first; a missing one is refused before anything is created.
expect 0 "tune with --prior" -- "$celtune" tune --device cpu --shape 48,16,700 --dtype bf16 --db "$tmp/p.sqlite" \
  --prior "$tmp/t.sqlite" --min-runs 3 --max-runs 3 --budget 2 --json
python3 -c "import json,sys; l=[json.loads(x) for x in open('$tmp/out')]; assert len(l)==2 and all(x['prior']==1 for x in l), l" \
  && passes=$((passes + 1)) || { fails=$((fails + 1)); echo "FAIL: tune --prior did not measure the earlier winners"; cat "$tmp/out"; }
expect 3 "tune with a missing --prior" -- "$celtune" tune --device cpu --shape 48,16,700 --dtype bf16 \
  --db "$tmp/p2.sqlite" --prior "$tmp/nothing.sqlite"
[ ! -e "$tmp/p2.sqlite" ] && passes=$((passes + 1)) || { fails=$((fails + 1)); echo "FAIL: a refused --prior left a database"; }
expect 0 "db list after tune" -- "$celtune" db --db "$tmp/t.sqlite" list
contains out "2 best configs" "tune stored one best per problem"
expect 0 "validate --from-db" -- "$celtune" validate --device cpu --from-db "$tmp/t.sqlite"
contains out "2 passed, 0 failed" "validate checks every stored best config"
# Problem options with no problem to describe were ignored (validate --dtype fp32
# ran every dtype's default matrix and exited 0): refused, naming the option.
expect 2 "validate --dtype without a problem" -- "$celtune" validate --device cpu --dtype fp32
contains err "--dtype describes a problem" "the refusal names the option"
expect 2 "validate --from-db with --mode" -- "$celtune" validate --device cpu --from-db "$tmp/t.sqlite" --mode fwd
contains err "--mode describes a problem" "the refusal names the option"
expect 0 "validate --all-configs" -- "$celtune" validate --device cpu --shape 48,16,9000 --all-configs --seed 1
expect 3 "validate a shape too big for this machine's memory" -- "$celtune" validate --device cpu --family ce \
  --shape 100000000,0,256000
contains err "GiB of memory" "the refusal gives the sizes"
expect 3 "validate --from-db missing" -- "$celtune" validate --device cpu --from-db "$tmp/nothing.sqlite"
# A stored config the rules refuse (edited by hand: import never stores one) is a
# damaged database (exit 3, the row named), not a failed validation (exit 1).
cp "$tmp/t.sqlite" "$tmp/badcfg.sqlite"
python3 -c 'import sqlite3, sys; c = sqlite3.connect(sys.argv[1]); c.execute("UPDATE configs SET json = json_set(json, \"$.block_size\", 48) WHERE id = (SELECT config_id FROM best LIMIT 1)"); c.commit()' \
  "$tmp/badcfg.sqlite"
expect 3 "validate --from-db with a stored config the rules refuse" -- "$celtune" validate --device cpu --from-db "$tmp/badcfg.sqlite"
contains err "is invalid (block_size" "the refusal names the row and the rule"
# So is a row its device's rules refuse (impl fused on a cpu row), which db list
# marks INVALID and the runtime skips: it was run, failed, and counted as a
# failed validation (exit 1).
cp "$tmp/t.sqlite" "$tmp/badimpl.sqlite"
python3 -c 'import sqlite3, sys; c = sqlite3.connect(sys.argv[1]); c.execute("UPDATE configs SET json = json_set(json, \"$.impl\", \"fused\") WHERE id = (SELECT config_id FROM best LIMIT 1)"); c.commit()' \
  "$tmp/badimpl.sqlite"
expect 3 "validate --from-db with a stored row its device's rules refuse" -- "$celtune" validate --device cpu --from-db "$tmp/badimpl.sqlite"
contains err "is invalid (impl fused runs on sm_90 only" "the refusal names the row and the device's rule"
expect 0 "db list marks the same row" -- "$celtune" db --db "$tmp/badimpl.sqlite" list
contains out "INVALID" "list marks the row its device's rules refuse"
# db list, report and tune show or use such a row only with a word naming it and
# the rule (they once showed it, plotted it and seeded the search from it silently);
# --json stays JSON, the row marked there too.
expect 0 "db list with a stored config the rules refuse" -- "$celtune" db --db "$tmp/badcfg.sqlite" list
contains err "breaks a rule (block_size must be" "list names the row and the rule on stderr"
contains out "INVALID" "list marks the row in its table"
expect 0 "db list --json with a stored config the rules refuse" -- "$celtune" db --db "$tmp/badcfg.sqlite" list --json
python3 - "$tmp/out" "$tmp/err" <<'PY' && passes=$((passes + 1)) || { fails=$((fails + 1)); echo "FAIL: list --json does not mark the refused row"; cat "$tmp/out"; }
import json, sys
rows = json.load(open(sys.argv[1]))
bad = [r for r in rows if "invalid" in r]
assert bad and all(r["config"]["block_size"] == 48 and "block_size" in r["invalid"] for r in bad), rows
assert all(r["config"]["block_size"] != 48 for r in rows if "invalid" not in r), rows
assert open(sys.argv[2]).read().count("breaks a rule") == len(bad)
PY
nbad=$(grep -c "breaks a rule" "$tmp/err")
expect 0 "report with a stored config the rules refuse" -- "$celtune" report --db "$tmp/badcfg.sqlite" -o "$tmp/badrep"
contains err "breaks a rule (block_size must be" "report names the row and the rule"
grep -q "invalid config" "$tmp/badrep/speedup-1.svg" && ! grep -q "block_size 48" "$tmp/badrep"/vchunk-*.svg \
  && passes=$((passes + 1)) || { fails=$((fails + 1)); echo "FAIL: report plotted the refused config unmarked"; }
# A row with a time the rules refuse (a median of −1 ms, edited by hand) is marked
# as a refused config is, and the runtime skips it (list and lookup once showed it plain).
cp "$tmp/t.sqlite" "$tmp/badmed.sqlite"
python3 -c 'import sqlite3, sys; c = sqlite3.connect(sys.argv[1]); c.execute("UPDATE best SET median_ms = -1 WHERE rowid = (SELECT MIN(rowid) FROM best)"); c.commit()' \
  "$tmp/badmed.sqlite"
expect 0 "db list with a stored median of -1 ms" -- "$celtune" db --db "$tmp/badmed.sqlite" list
contains err "breaks a rule (" "list names the row with the damaged time"
contains out "1 INVALID" "list marks the row with the damaged time"
: >"$tmp/lookups"
for mode in fwd fwdbwd; do
  "$celtune" lookup --device cpu --db "$tmp/badmed.sqlite" --shape 48,16,700 --dtype bf16 --mode $mode >>"$tmp/lookups" 2>&1
done
grep -q "skipped .*the stored row is damaged" "$tmp/lookups" && passes=$((passes + 1)) \
  || { fails=$((fails + 1)); echo "FAIL: lookup used a row with a damaged time"; cat "$tmp/lookups"; }
# Damaged measurement rows (a missing median, one of −1 ms): list and report
# said nothing, exit 0, while export and merge refused the file. (A status
# neither ok nor failed breaks the schema's CHECK, which integrity_check finds.)
cp "$tmp/t.sqlite" "$tmp/badmeas.sqlite"
python3 - "$tmp/badmeas.sqlite" <<'PY'
import sqlite3, sys
c = sqlite3.connect(sys.argv[1])
ids = [r[0] for r in c.execute("SELECT rowid FROM measurements WHERE status = 'ok' ORDER BY rowid LIMIT 2")]
assert len(ids) == 2, ids
c.execute("UPDATE measurements SET median_ms = -1 WHERE rowid = ?", (ids[0],))
c.execute("UPDATE measurements SET median_ms = NULL WHERE rowid = ?", (ids[1],))
c.commit()
PY
expect 0 "db list with damaged measurement rows" -- "$celtune" db --db "$tmp/badmeas.sqlite" list
contains err "times must be within" "list names the first damaged measurement and its rule"
contains err "2 damaged measurement rows in all" "list counts them"
contains out "(2 damaged)" "list's summary counts them"
expect 0 "report with damaged measurement rows" -- "$celtune" report --db "$tmp/badmeas.sqlite" -o "$tmp/badmeas-rep"
contains err "2 measurement rows are damaged, left out of the v_chunk plots" "report leaves them out and says so"
expect 3 "export with damaged measurement rows" -- "$celtune" db --db "$tmp/badmeas.sqlite" export
contains err "damaged measurement row" "export names the damaged row"
contains err "--skip-damaged" "export's refusal names the way to save the rest"
expect 0 "export --skip-damaged" -- "$celtune" db --db "$tmp/badmeas.sqlite" export --skip-damaged -o "$tmp/salvaged.jsonl"
contains err "2 damaged rows left out of the export" "the rows left out are counted"
nmeas=$(python3 -c 'import sqlite3, sys; print(sqlite3.connect(sys.argv[1]).execute("SELECT COUNT(*) FROM measurements").fetchone()[0])' \
  "$tmp/badmeas.sqlite")
[ "$(grep -c '"record":"measurement"' "$tmp/salvaged.jsonl")" = "$((nmeas - 2))" ] && passes=$((passes + 1)) || { fails=$((fails + 1)); echo "FAIL: export --skip-damaged did not keep every sound measurement"; }
expect 0 "import what --skip-damaged saved" -- "$celtune" db --db "$tmp/salvaged.sqlite" import "$tmp/salvaged.jsonl"
# Rows that do not even read: a config that is no JSON, a problem row whose
# columns disagree with its key, a measurement whose config row is gone. Each
# failed the whole export, --skip-damaged too; now each row is named and left out.
cp "$tmp/t.sqlite" "$tmp/unread.sqlite"
python3 - "$tmp/unread.sqlite" <<'PY'
import sqlite3, sys
c = sqlite3.connect(sys.argv[1])
c.execute("PRAGMA foreign_keys = OFF")
m = c.execute("SELECT config_id, problem_id FROM measurements ORDER BY rowid").fetchall()
c.execute("UPDATE configs SET json = '{not json' WHERE id = ?", (m[0][0],))
c.execute("DELETE FROM configs WHERE id = ?", (m[-1][0],))
c.commit()
PY
expect 3 "export of rows that do not read" -- "$celtune" db --db "$tmp/unread.sqlite" export
expect 0 "export --skip-damaged of rows that do not read" -- "$celtune" db --db "$tmp/unread.sqlite" export \
  --skip-damaged -o "$tmp/unread.jsonl"
contains err "holds a damaged config: config is not valid JSON" "the row with the broken config is named"
contains err "measurement row" "the row whose config is gone is named by its id"
expect 0 "import what was saved of them" -- "$celtune" db --db "$tmp/unread-new.sqlite" import "$tmp/unread.jsonl"
# A device name holding a newline and a tab: db list's table kept its rows whole.
cp "$tmp/t.sqlite" "$tmp/nl.sqlite"
python3 -c 'import sqlite3, sys; c = sqlite3.connect(sys.argv[1]); c.execute("UPDATE devices SET name = ?", ("GPU\nX\tY",)); c.commit()' \
  "$tmp/nl.sqlite"
expect 0 "db list of a device name holding a newline" -- "$celtune" db --db "$tmp/nl.sqlite" list
contains out 'GPU\x0aX\x09Y' "the table escapes the newline and the tab"
cp "$tmp/badcfg.sqlite" "$tmp/badtune.sqlite"
expect 0 "tune over a stored config the rules refuse" -- "$celtune" tune --device cpu --shape 48,16,700 --dtype bf16 \
  --db "$tmp/badtune.sqlite" --min-runs 3 --max-runs 3 --json
[ "$nbad" -ge 1 ] && [ "$(grep -c "breaks a rule (block_size must be" "$tmp/err")" = "$nbad" ] && passes=$((passes + 1)) \
  || { fails=$((fails + 1)); echo "FAIL: tune did not warn once per refused row"; cat "$tmp/err"; }
expect 0 "tune with a --prior holding a config the rules refuse" -- "$celtune" tune --device cpu --shape 48,16,700 \
  --dtype bf16 --db "$tmp/badprior.sqlite" --prior "$tmp/badcfg.sqlite" --min-runs 3 --max-runs 3 --budget 2 --json
contains err "badcfg.sqlite: the best config stored for" "tune names the prior database holding the row"
expect 0 "report" -- "$celtune" report --db "$tmp/t.sqlite" -o "$tmp/report"
test -s "$tmp/report/speedup-1.svg" && test -s "$tmp/report/vchunk-1.svg" && passes=$((passes + 1)) || { fails=$((fails + 1)); echo "FAIL: report wrote no SVG"; }
# A refused report takes away the output folder it made (an empty one stayed).
expect 2 "report of a problem not in the database" -- "$celtune" report --db "$tmp/t.sqlite" -o "$tmp/norep" \
  --problem "flce:N48:H16:V701:bf16:int64:ign-100:mean:ls0:cap0:z0:nobias:fwd"
[ ! -e "$tmp/norep" ] && passes=$((passes + 1)) || { fails=$((fails + 1)); echo "FAIL: a refused report left its folder"; }
# A second report into the folder leaves no plot of the first behind.
# Folders of such names are the user's, not plots: kept, empty or not (the probe
# saw an empty one removed, and a full one fail the report after it had written).
echo '<svg/>' >"$tmp/report/vchunk-99.svg" && echo keep >"$tmp/report/notes.txt"
mkdir -p "$tmp/report/vchunk-97.svg" "$tmp/report/vchunk-98.svg" && echo keep >"$tmp/report/vchunk-98.svg/keep"
expect 0 "report again, one problem" -- "$celtune" report --db "$tmp/t.sqlite" -o "$tmp/report" \
  --problem "flce:N48:H16:V700:bf16:int64:ign-100:mean:ls0:cap0:z0:nobias:fwd"
[ ! -e "$tmp/report/vchunk-99.svg" ] && [ ! -e "$tmp/report/vchunk-2.svg" ] && [ -s "$tmp/report/vchunk-1.svg" ] &&
  [ -e "$tmp/report/notes.txt" ] && passes=$((passes + 1)) || { fails=$((fails + 1)); echo "FAIL: report left stale plots"; ls "$tmp/report"; }
[ -d "$tmp/report/vchunk-97.svg" ] && [ -e "$tmp/report/vchunk-98.svg/keep" ] && ! grep -q "vchunk-9[78]" "$tmp/out" &&
  passes=$((passes + 1)) || { fails=$((fails + 1)); echo "FAIL: report removed or named a folder of the user's"; cat "$tmp/out"; }
rm -rf "$tmp/report/vchunk-97.svg" "$tmp/report/vchunk-98.svg"
# A plot that cannot be written changes nothing: no "wrote", no half report.
mkdir -p "$tmp/half/vchunk-1.svg" && echo OLD >"$tmp/half/speedup-1.svg"
expect 3 "report where a plot's name is a directory" -- "$celtune" report --db "$tmp/t.sqlite" -o "$tmp/half"
contains err "is not a regular file; the folder is unchanged" "report says why and that nothing changed"
[ ! -s "$tmp/out" ] && [ "$(cat "$tmp/half/speedup-1.svg")" = OLD ] && [ "$(ls "$tmp/half" | wc -l)" = 2 ] &&
  passes=$((passes + 1)) || { fails=$((fails + 1)); echo "FAIL: a failed report changed the folder"; ls -la "$tmp/half"; }
expect 3 "report of a missing database" -- "$celtune" report --db "$tmp/nothing.sqlite" -o "$tmp/report2"
# Medians one ulp apart: the tick step no longer moved the tick, and report
# ran until memory ran out. Ticks are as many as drawn, each label distinct.
"$celtune" db --db "$tmp/t.sqlite" export -o "$tmp/ulp.jsonl" 2>/dev/null
python3 - "$tmp/ulp.jsonl" <<'PY'
import json, math, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
rows = [r for r in rows if r["record"] == "measurement" and r["status"] == "ok"]
b0 = min(r["config"]["block_size"] for r in rows)
with open(sys.argv[1], "w") as out:
    for r in rows:
        v = 1.0 if r["config"]["block_size"] == b0 else math.nextafter(1.0, math.inf)
        r["stats"].update(median_ms=v, p20_ms=v, p80_ms=v, spread=0.0)
        out.write(json.dumps(r) + "\n")
PY
expect 0 "import medians one ulp apart" -- "$celtune" db --db "$tmp/ulp.sqlite" import "$tmp/ulp.jsonl"
expect 0 "report of medians one ulp apart" -- timeout 60 "$celtune" report --db "$tmp/ulp.sqlite" -o "$tmp/ulp-rep"
python3 - "$tmp/ulp-rep" <<'PY' && passes=$((passes + 1)) || { fails=$((fails + 1)); echo "FAIL: the ulp report's ticks"; }
import glob, re, sys, xml.dom.minidom as m
files = glob.glob(sys.argv[1] + "/vchunk-*.svg"); assert files
for f in files:
    m.parse(f)
    ticks = re.findall(r"text-anchor='end'>([^<]*)<", open(f).read())
    assert 3 <= len(ticks) <= 12 and len(set(ticks)) == len(ticks), ticks
PY
# One plot a problem, device and kernel build, each named so: problems that
# differ in softcap alone had one title, another build's rows set the axis of
# this build's plot, and every device's bars shared one unlabelled chart.
expect 0 "tune the same shape with a softcap" -- "$celtune" tune --device cpu --shape 48,16,700 --dtype bf16 \
  --softcap 30 --mode fwd --db "$tmp/mix.sqlite" --min-runs 3 --max-runs 3 --budget 2
"$celtune" db --db "$tmp/t.sqlite" export -o "$tmp/mix.jsonl" 2>/dev/null
python3 - "$tmp/mix.jsonl" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
with open(sys.argv[1], "a") as out:
    for r in rows:  # another build's measurements, and another device's rows
        if r["record"] == "measurement":
            out.write(json.dumps(dict(r, kernel_hash="0123456789abcdef")) + "\n")
        r["device"]["name"] = "cpu: another"
        out.write(json.dumps(r) + "\n")
PY
expect 0 "import another kernel build's rows" -- "$celtune" db --db "$tmp/mix.sqlite" import "$tmp/mix.jsonl"
mkdir -p "$tmp/mix-rep" && echo OLD >"$tmp/mix-rep/speedup.svg"
expect 0 "report problems, builds and a softcap" -- "$celtune" report --db "$tmp/mix.sqlite" -o "$tmp/mix-rep"
python3 - "$tmp/mix-rep" <<'PY' && passes=$((passes + 1)) || { fails=$((fails + 1)); echo "FAIL: report's plots mix problems or builds"; ls "$tmp/mix-rep"; }
import glob, os, re, sys
d = sys.argv[1]
title = lambda f: re.search(r"font-weight='bold'>([^<]*)<", open(f).read()).group(1)
v = [title(f) for f in glob.glob(d + "/vchunk-*.svg")]
assert len(v) == len(set(v)) == 7, v
assert sum("cap30" in t for t in v) == 1 and sum("(kernels 01234567)" in t for t in v) == 2, v
assert sum("cpu: another" in t for t in v) == 2, v
sp = sorted(title(f) for f in glob.glob(d + "/speedup-*.svg"))
assert len(sp) == 2 and sum("cpu: another" in t for t in sp) == 1, sp
assert not os.path.exists(d + "/speedup.svg")
PY
contains out "removed $tmp/mix-rep/speedup.svg (an earlier report's)" "the old report's one chart is removed"
expect 3 "db list of a missing file" -- "$celtune" db --db "$tmp/absent.sqlite" list
expect 3 "lookup --db a missing file" -- "$celtune" lookup --device cpu --db "$tmp/absent.sqlite" --shape 8,16,50
test ! -e "$tmp/absent.sqlite" && passes=$((passes + 1)) || { fails=$((fails + 1)); echo "FAIL: db list created a file"; }
head -c 5000 /dev/urandom >"$tmp/junk.sqlite"
cp "$tmp/junk.sqlite" "$tmp/junk.copy"
expect 3 "db list of random bytes" -- "$celtune" db --db "$tmp/junk.sqlite" list
contains err "junk.sqlite is not an SQLite database" "the message says what the file is not"
expect 3 "db import into random bytes" -- "$celtune" db --db "$tmp/junk.sqlite" import /dev/null
expect 3 "tune into random bytes" -- "$celtune" tune --device cpu --shape 8,16,200 --db "$tmp/junk.sqlite"
cmp -s "$tmp/junk.sqlite" "$tmp/junk.copy" && passes=$((passes + 1)) || { fails=$((fails + 1)); echo "FAIL: a damaged database was modified"; }
# A database with a page torn (its second page overwritten) is said to be damaged.
cp "$tmp/t.sqlite" "$tmp/torn.sqlite"
python3 -c 'import sys; f = open(sys.argv[1], "r+b"); h = f.read(100); ps = int.from_bytes(h[16:18], "big") or 65536; f.seek(ps); f.write(b"\xff" * ps)' \
  "$tmp/torn.sqlite"
expect 3 "db export of a torn database" -- "$celtune" db --db "$tmp/torn.sqlite" export -o "$tmp/torn.jsonl"
contains err "torn.sqlite is damaged" "the message says the database is damaged"
# A copy short by its last 100 bytes (an index missing a row) was listed,
# exported, merged, looked up in and reported with exit 0 and no word; writers
# refused it. Every reader refuses it now, and it stays as it was.
head -c $(( $(stat -c %s "$tmp/t.sqlite") - 100 )) "$tmp/t.sqlite" >"$tmp/short.sqlite"
cp "$tmp/short.sqlite" "$tmp/short.copy"
expect 3 "db list of a database short by 100 bytes" -- "$celtune" db --db "$tmp/short.sqlite" list
contains err "short.sqlite is damaged" "list says the short database is damaged"
expect 3 "db export of a database short by 100 bytes" -- "$celtune" db --db "$tmp/short.sqlite" export
expect 3 "db merge from a database short by 100 bytes" -- \
  "$celtune" db merge "$tmp/short.sqlite" "$tmp/t.sqlite" -o "$tmp/short-m.sqlite"
expect 3 "lookup in a database short by 100 bytes" -- "$celtune" lookup --db "$tmp/short.sqlite" --shape 8,16,200
expect 3 "report of a database short by 100 bytes" -- "$celtune" report --db "$tmp/short.sqlite" -o "$tmp/short-rep"
# The runtime's resolver (here through CELTUNE_DB) read the same file with no
# word, answering from its rows: one warning now, and the next source.
expect 0 "lookup through CELTUNE_DB of a database short by 100 bytes" -- \
  env CELTUNE_DB="$tmp/short.sqlite" "$celtune" lookup --device cpu --shape 8,16,200
contains err "short.sqlite is damaged (truncated" "the runtime's one warning names the file and why"
[ "$(grep -c 'short.sqlite is damaged' "$tmp/err")" = 1 ] && passes=$((passes + 1)) || {
  fails=$((fails + 1)); echo "FAIL: the short database was warned about more than once"; cat "$tmp/err"; }
cmp -s "$tmp/short.sqlite" "$tmp/short.copy" && [ ! -e "$tmp/short-m.sqlite" ] && [ ! -e "$tmp/short-rep" ] \
  && passes=$((passes + 1)) || { fails=$((fails + 1)); echo "FAIL: reading a short database changed or wrote something"; }

# db: import → list → export → merge round trip through the CLI.
cat >"$tmp/in.jsonl" <<'JL'
{"record":"best","device":{"name":"GTX fictional","arch":"sm_90","sm_count":132,"memory_bytes":85899345920,"driver":"580.1","runtime":"13.0","cublaslt":"13.0.0","cublaslt_version":130000},"problem":{"family":"flce","tokens":4096,"hidden":4096,"vocab":128256,"dtype":"bf16","target_type":"int64","ignore_index":-100,"reduction":"mean","label_smoothing":0.0,"softcap":0.0,"z_loss":0.0,"bias":false,"mode":"fwdbwd"},"config":{"block_size":2048,"v_chunk":0,"row_chunk":512,"threads":256,"rows_per_block":1,"dw_acc_fp32":true,"dx_acc_fp32":true,"fused":false},"stats":{"median_ms":10.5,"p20_ms":10.4,"p80_ms":10.7,"samples":40,"spread":0.02857142857142847},"default_ms":12.0,"speedup":1.1428571428571428,"celtune_version":"0.1.0","kernel_hash":"abc","cublaslt":"13.0.0","created_at":"2026-11-22T00:00:00Z"}
JL
sed 's/"median_ms":10.5/"median_ms":9.5/; s/"p20_ms":10.4/"p20_ms":9.4/; s/"spread":0.02857142857142847/"spread":0.1368421052631578/; s/"block_size":2048/"block_size":1024/; s/"speedup":1.1428571428571428/"speedup":1.263157894736842/' "$tmp/in.jsonl" >"$tmp/faster.jsonl"
expect 0 "db import" -- "$celtune" db --db "$tmp/a.sqlite" import "$tmp/in.jsonl"
expect 0 "db list" -- "$celtune" db --db "$tmp/a.sqlite" list
contains out "GTX fictional" "db list shows the entry"
expect 0 "db export" -- "$celtune" db --db "$tmp/a.sqlite" export --jsonl -o "$tmp/a.jsonl"
expect 0 "db import faster into b" -- "$celtune" db --db "$tmp/b.sqlite" import "$tmp/faster.jsonl"
expect 0 "db merge" -- "$celtune" db merge "$tmp/a.sqlite" "$tmp/b.sqlite" -o "$tmp/m.sqlite"
expect 0 "db export merged" -- "$celtune" db --db "$tmp/m.sqlite" export
contains out '"block_size":1024' "merge kept the faster config"
# The summaries count each record once, as what became of it: an empty file read
# "0 of 0", one best record given twice "2 best configs (1 kept)", and a merge
# whose inputs shared a key "2 won" where one row was stored.
expect 0 "import an empty file" -- "$celtune" db --db "$tmp/sum.sqlite" import /dev/null
contains out "nothing imported" "an empty import says so"
[ ! -e "$tmp/sum.sqlite" ] && passes=$((passes + 1)) \
  || { fails=$((fails + 1)); echo "FAIL: importing nothing created a new database"; }
expect 0 "import an empty standard input" -- bash -c '"$0" db --db "$1" import - </dev/null' "$celtune" "$tmp/sum.sqlite"
contains out "standard input holds no records" "standard input is named as such"
grep -q "0 of 0" "$tmp/out" && { fails=$((fails + 1)); echo "FAIL: an empty import printed '0 of 0'"; } || passes=$((passes + 1))
cat "$tmp/in.jsonl" "$tmp/in.jsonl" >"$tmp/twice.jsonl"
expect 0 "import one best record twice" -- "$celtune" db --db "$tmp/sum.sqlite" import "$tmp/twice.jsonl"
contains out "imported 2 records into $tmp/sum.sqlite: 1 best config added, 1 best config left out for another in the input (one a device and problem)" \
  "a repeated record is counted once, as a repeat"
expect 0 "import it again" -- "$celtune" db --db "$tmp/sum.sqlite" import "$tmp/in.jsonl"
contains out "imported 1 record into $tmp/sum.sqlite: 1 best config left out: the stored one is kept" "a stored record is not counted as new"
expect 0 "merge two inputs that share a key into a new database" -- "$celtune" db merge "$tmp/a.sqlite" "$tmp/b.sqlite" \
  -o "$tmp/sum-m.sqlite"
contains out "1 best config added, 1 best config left out for another in the inputs (one a device and problem)" "the merge counts one row added, one lost"
expect 0 "merge them into a database holding the key" -- "$celtune" db merge "$tmp/a.sqlite" "$tmp/b.sqlite" -o "$tmp/sum.sqlite"
contains out "1 best config replaced the stored one, 1 best config left out for another in the inputs (one a device and problem)" \
  "the merge counts the faster one as replacing the stored row"
expect 2 "malformed import line" -- "$celtune" db --db "$tmp/a.sqlite" import <(echo '{"record":"best"}')
expect 2 "merge needs -o" -- "$celtune" db merge "$tmp/a.sqlite" "$tmp/b.sqlite"
expect 2 "merge -o '' (once: success, nothing written)" -- "$celtune" db merge "$tmp/a.sqlite" "$tmp/b.sqlite" -o ''
# export -o - and import - make a pipe: the same rows arrive.
expect 0 "export -o - | import -" -- bash -c '"$0" db --db "$1/a.sqlite" export --jsonl -o - | "$0" db --db "$1/piped.sqlite" import -' \
  "$celtune" "$tmp"
contains out "1 best config added" "import - read the exported row from standard input"
expect 0 "merge a database with itself into itself" -- "$celtune" db merge "$tmp/a.sqlite" "$tmp/a.sqlite" -o "$tmp/a.sqlite"
contains out "both inputs are $tmp/a.sqlite itself" "merging OUT with itself says so, not that it is empty"
# Dates the calendar lacks, dates before celtune, and times no call takes.
sed 's/"created_at":"[^"]*"/"created_at":"2026-02-31T00:00:00Z"/' "$tmp/in.jsonl" >"$tmp/feb31.jsonl"
expect 2 "import 31 February" -- "$celtune" db --db "$tmp/a.sqlite" import "$tmp/feb31.jsonl"
sed 's/"created_at":"[^"]*"/"created_at":"0000-01-01T00:00:00Z"/' "$tmp/in.jsonl" >"$tmp/year0.jsonl"
expect 2 "import the year 0" -- "$celtune" db --db "$tmp/a.sqlite" import "$tmp/year0.jsonl"
contains err "a real UTC time from 2000 on" "a well-formed date before 2000 is refused for its range, not its form"
sed 's/"median_ms":10.5/"median_ms":1e300/; s/"p80_ms":[0-9.e+]*/"p80_ms":1e300/' "$tmp/in.jsonl" >"$tmp/huge.jsonl"
expect 2 "import a median of 1e300 ms" -- "$celtune" db --db "$tmp/a.sqlite" import "$tmp/huge.jsonl"
contains err "within [1e-4, 1e7] ms" "the refusal gives the bound"
expect 0 "db list after failed import" -- "$celtune" db --db "$tmp/a.sqlite" list
contains out "1 best config, " "a failed import lost nothing (and one is singular)"
# Names SQLite would read as special are files like any other: ":memory:" (a
# database in memory) and "file:…" (a URI) once reported rows stored in no file.
expect 0 "import into ':memory:'" -- "$celtune" db --db "$tmp/:memory:" import "$tmp/in.jsonl"
expect 0 "merge into 'file:…?mode=memory'" -- env -C "$tmp" "$(realpath "$celtune")" db merge ':memory:' b.sqlite -o 'file:m.sqlite?mode=memory'
expect 0 "list 'file:…?mode=memory'" -- env -C "$tmp" "$(realpath "$celtune")" db --db 'file:m.sqlite?mode=memory' list
contains out "1 best config" "the merge's rows are in the file named"
expect 0 "both are files" -- test -s "$tmp/:memory:" -a -s "$tmp/file:m.sqlite?mode=memory"
# A failed measurement's config is checked like any other (it is exported, merged
# and printed): block_size 3 with 7 threads is refused, and nothing is stored.
echo '{"clock_end_mhz":0,"clock_start_mhz":0,"config":{"block_size":3,"threads":7,"v_chunk":0,"row_chunk":0,"logits_kernel":"x"},"created_at":"2026-11-24T13:01:32Z","device":{"arch":"sm_90","cublaslt":"13.1.0","cublaslt_version":130100,"driver":"13.0","memory_bytes":150109880320,"name":"GTX fictional","runtime":"13.0","sm_count":132},"kernel_hash":"abf1bc2df40b97fa","problem":{"bias":false,"dtype":"bf16","family":"flce","hidden":2304,"ignore_index":-100,"label_smoothing":0.0,"mode":"fwd","reduction":"mean","softcap":30.0,"target_type":"int64","tokens":1024,"vocab":256000,"z_loss":0.0},"reason":"out of memory","record":"measurement","stats":{"median_ms":0,"p20_ms":0,"p80_ms":0,"samples":0,"spread":0},"status":"failed"}' >"$tmp/failed.jsonl"
expect 2 "import a failed measurement with an impossible config" -- "$celtune" db --db "$tmp/a.sqlite" import "$tmp/failed.jsonl"
contains err "line 1" "the refusal names the line"

# A best entry tuned with this build's kernels is never displaced by a faster one
# from other kernels (which the runtime skips): import and merge alike.
"$celtune" tune --device cpu --shape 64,32,1000 --mode fwd --max-runs 3 --min-runs 3 --db "$tmp/h.sqlite" >/dev/null 2>&1
expect 0 "export a tuned entry" -- "$celtune" db --db "$tmp/h.sqlite" export -o "$tmp/h.jsonl"
python3 - "$tmp/h.jsonl" "$tmp/stale.jsonl" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
b = next(r for r in rows if r["record"] == "best")
b["kernel_hash"] = "0123abcd"
b["stats"].update(median_ms=0.001, p20_ms=0.0005, p80_ms=0.002, spread=(0.002 - 0.0005) / 0.001)
b["speedup"] = b["default_ms"] / 0.001
open(sys.argv[2], "w").write(json.dumps(b) + "\n")
PY
expect 0 "import a faster entry of other kernels" -- "$celtune" db --db "$tmp/h.sqlite" import "$tmp/stale.jsonl"
contains out "1 best config left out: the stored one is kept" "the stale entry was not kept"
expect 0 "lookup after the import" -- "$celtune" lookup --device cpu --db "$tmp/h.sqlite" --shape 64,32,1000 --mode fwd
contains out "exact" "the runtime still finds this build's entry"
# bench --tuned times what the runtime would run: the database's entry, tagged,
# beside the default; none where the runtime would run the default; a --db
# without --tuned, or one that is missing, is refused before anything is timed.
# The entry h.sqlite's tuning stored, with a config other than the default
# (tuning may find the default best, which bench times once).
python3 - "$tmp/h.jsonl" "$tmp/tuned.jsonl" <<'PY'
import json, sys
b = next(r for r in map(json.loads, open(sys.argv[1])) if r["record"] == "best")
b["config"] = {"block_size": 1024, "threads": 128, "v_chunk": 0, "row_chunk": 0}
open(sys.argv[2], "w").write(json.dumps(b) + "\n")
PY
"$celtune" db --db "$tmp/tuned.sqlite" import "$tmp/tuned.jsonl" >/dev/null 2>&1
# The user's own database and $CELTUNE_DB stay out of these: only --db is read.
solo=(env -u CELTUNE_DB -u XDG_DATA_HOME -u CELTUNE_CONFIG HOME="$tmp/nohome")
expect 0 "bench --tuned with a tuned entry" -- "${solo[@]}" "$celtune" bench --device cpu --db "$tmp/tuned.sqlite" \
  --tuned --shape 64,32,1000 --mode fwd --runs 20 --no-unfused --csv
contains out "celtune-tuned" "bench --tuned adds the tuned row"
contains out "bs1024 vcV rcN t128 [exact]" "the tuned row is the entry's config with the resolver's tag"
expect 0 "bench --tuned where nothing is tuned" -- "${solo[@]}" "$celtune" bench --device cpu --db "$tmp/tuned.sqlite" \
  --tuned --shape 64,32,1000 --mode fwdbwd --runs 20 --no-unfused --csv
contains err "no tuned entry" "bench says the runtime would run the default"
if grep -q "celtune-tuned" "$tmp/out"; then fails=$((fails + 1)); echo "FAIL: bench --tuned timed the default twice"; else passes=$((passes + 1)); fi
# With another config given and nothing tuned, what the runtime would run is the
# default: it is the tuned row, tagged so.
expect 0 "bench --tuned --config where nothing is tuned" -- "${solo[@]}" "$celtune" bench --device cpu \
  --db "$tmp/tuned.sqlite" --tuned --config '{"block_size":256}' --shape 64,32,1000 --mode fwdbwd --runs 20 \
  --no-unfused --csv
contains out "[default]" "the default is timed as what the runtime would run"
tuned_json=$("${solo[@]}" "$celtune" lookup --device cpu --db "$tmp/tuned.sqlite" --shape 64,32,1000 --mode fwd --json |
  python3 -c 'import json, sys; print(json.dumps(json.load(sys.stdin)[0]["config"]))')
expect 0 "bench --tuned with the tuned config also given" -- "${solo[@]}" "$celtune" bench --device cpu \
  --db "$tmp/tuned.sqlite" --tuned --config "$tuned_json" --shape 64,32,1000 --mode fwd --runs 20 --no-unfused --csv
contains err "is a row above" "a tuned config already timed is not timed twice"
if grep -q "celtune-tuned" "$tmp/out"; then fails=$((fails + 1)); echo "FAIL: bench --tuned timed the given config twice"; else passes=$((passes + 1)); fi
expect 0 "bench --tuned --json" -- "${solo[@]}" "$celtune" bench --device cpu --db "$tmp/tuned.sqlite" --tuned \
  --shape 64,32,1000 --mode fwd --runs 20 --no-unfused --json
contains out '"kernel_provider": "celtune-tuned"' "the Liger records name the tuned row's provider"
expect 0 "bench --tuned under CELTUNE_CONFIG" -- env -u CELTUNE_DB -u XDG_DATA_HOME HOME="$tmp/nohome" \
  CELTUNE_CONFIG='{"block_size":1024,"threads":128,"dw_acc_fp32":false}' "$celtune" bench --device cpu \
  --db "$tmp/tuned.sqlite" --tuned --shape 64,32,1000 --mode fwd --runs 20 --no-unfused --csv
contains out "[env]" "CELTUNE_CONFIG is what the runtime would run, and is tagged so"
expect 2 "bench --tuned under a CELTUNE_CONFIG the CPU cannot run" -- env CELTUNE_CONFIG='{"impl":"fused"}' \
  "$celtune" bench --device cpu --tuned --shape 64,32,1000 --mode fwd --runs 20
contains err "CELTUNE_CONFIG cannot run" "the refusal names CELTUNE_CONFIG"
expect 2 "bench --db without --tuned" -- "$celtune" bench --device cpu --db "$tmp/h.sqlite" --shape 64,32,1000 --runs 20
contains err "give --tuned" "bench says what --db is for"
expect 3 "bench --tuned --db a missing file" -- "$celtune" bench --device cpu --tuned --db "$tmp/absent.sqlite" \
  --shape 64,32,1000 --runs 20
if grep -q "^bench:" "$tmp/err"; then fails=$((fails + 1)); echo "FAIL: bench timed before refusing its --db"; else passes=$((passes + 1)); fi
printf 'not a database at all, but long enough to have a header of sorts..................................' >"$tmp/notdb.sqlite"
expect 3 "bench --tuned --db a file that is not SQLite" -- "$celtune" bench --device cpu --tuned \
  --db "$tmp/notdb.sqlite" --shape 64,32,1000 --runs 20
if grep -q "^bench:" "$tmp/err"; then fails=$((fails + 1)); echo "FAIL: bench timed before refusing a damaged --db"; else passes=$((passes + 1)); fi
# A config the device cannot run is refused as the call would refuse it, from
# --config and from CELTUNE_CONFIG; one it can run is printed.
expect 2 "lookup --config with impl fused on the CPU" -- "$celtune" lookup --device cpu --shape 64,32,1000 --mode fwd \
  --config '{"impl":"fused"}'
contains err "cannot run" "the refusal says the config cannot run here"
expect 2 "lookup with CELTUNE_CONFIG impl fused on the CPU" -- env CELTUNE_CONFIG='{"impl":"fused"}' \
  "$celtune" lookup --device cpu --shape 64,32,1000 --mode fwd
contains err "CELTUNE_CONFIG cannot run" "the refusal names CELTUNE_CONFIG"
# A whole number past 64 bits is out of range (it read "must be an integer, got 1e+20").
expect 2 "lookup with CELTUNE_CONFIG's row_chunk past 64 bits" -- env CELTUNE_CONFIG='{"row_chunk":99999999999999999999}' \
  "$celtune" lookup --device cpu --shape 64,32,1000 --mode fwd
contains err "'row_chunk' is out of range" "the refusal says out of range"
expect 0 "lookup --config that runs on the CPU" -- "$celtune" lookup --device cpu --shape 64,32,1000 --mode fwd \
  --config '{"block_size":512}'
contains out "explicit" "an explicit config that runs is printed with its tag"
"$celtune" db --db "$tmp/s.sqlite" import "$tmp/stale.jsonl" >/dev/null 2>&1
expect 0 "merge a stale database into a fresh one" -- "$celtune" db merge "$tmp/s.sqlite" "$tmp/h.sqlite" -o "$tmp/hs.sqlite"
expect 0 "lookup after the merge" -- "$celtune" lookup --device cpu --db "$tmp/hs.sqlite" --shape 64,32,1000 --mode fwd
contains out "exact" "the merge kept this build's entry"
# Exported files get the usual mode (0666 less the umask), or keep the one they replace.
(umask 022 && "$celtune" db --db "$tmp/h.sqlite" export -o "$tmp/mode.jsonl")
[ "$(stat -c %a "$tmp/mode.jsonl")" = 644 ] && passes=$((passes + 1)) || { fails=$((fails + 1)); echo "FAIL: export mode $(stat -c %a "$tmp/mode.jsonl")"; }
chmod 640 "$tmp/mode.jsonl" && "$celtune" db --db "$tmp/h.sqlite" export -o "$tmp/mode.jsonl"
[ "$(stat -c %a "$tmp/mode.jsonl")" = 640 ] && passes=$((passes + 1)) || { fails=$((fails + 1)); echo "FAIL: export changed an existing file's mode"; }
# report replaces its SVGs atomically: a write cut short leaves the old file whole.
expect 0 "report" -- "$celtune" report --db "$tmp/h.sqlite" -o "$tmp/rep"
svg=$(ls "$tmp/rep"/*.svg | head -1); size=$(stat -c %s "$svg")
(trap '' XFSZ; ulimit -f 1; "$celtune" report --db "$tmp/h.sqlite" -o "$tmp/rep" >/dev/null 2>&1)
[ "$(stat -c %s "$svg")" = "$size" ] && [ -z "$(ls "$tmp/rep" | grep -v '\.svg$')" ] && passes=$((passes + 1)) \
  || { fails=$((fails + 1)); echo "FAIL: a cut-short report damaged $svg or left a temporary"; ls -la "$tmp/rep"; }
# Damaged stored rows: an infinite speedup is refused by merge; a config or key
# that no longer parses is a damaged database (exit 3, named), not a usage error.
cp "$tmp/h.sqlite" "$tmp/inf.sqlite"
python3 -c 'import sqlite3, sys; c = sqlite3.connect(sys.argv[1]); c.execute("UPDATE best SET speedup = 9e999"); c.commit()' "$tmp/inf.sqlite"
expect 3 "merge refuses an infinite speedup" -- "$celtune" db merge "$tmp/inf.sqlite" "$tmp/h.sqlite" -o "$tmp/inf-m.sqlite"
cp "$tmp/h.sqlite" "$tmp/badcfg.sqlite"
python3 -c 'import sqlite3, sys; c = sqlite3.connect(sys.argv[1]); c.execute("UPDATE configs SET json = ? || id", (sys.argv[2],)); c.commit()' \
  "$tmp/badcfg.sqlite" 'not json '
expect 3 "list a database with a damaged config" -- "$celtune" db --db "$tmp/badcfg.sqlite" list
contains err "badcfg.sqlite holds a damaged config" "the message names the database"
cp "$tmp/h.sqlite" "$tmp/utf.sqlite"
python3 -c 'import sqlite3, sys; c = sqlite3.connect(sys.argv[1]); c.execute("UPDATE devices SET driver = CAST(x'"'"'ff'"'"' AS TEXT)"); c.commit()' "$tmp/utf.sqlite"
expect 0 "export a database holding bytes that are not UTF-8" -- "$celtune" db --db "$tmp/utf.sqlite" export
expect 3 "merge refuses text that is not UTF-8" -- "$celtune" db merge "$tmp/utf.sqlite" "$tmp/h.sqlite" -o "$tmp/utf-m.sqlite"
expect 2 "lookup refuses a malformed CELTUNE_BUSY_TIMEOUT_MS" -- env CELTUNE_BUSY_TIMEOUT_MS=abc \
  "$celtune" lookup --device cpu --db "$tmp/h.sqlite" --shape 64,32,1000 --mode fwd
# Import refuses what the project says it validates.
for bad in 's/"speedup":[0-9.e+-]*/"speedup":-5/' 's/"spread":[0-9.e+-]*/"spread":-1/' 's/"sm_count":[0-9]*/"sm_count":-3/' \
           's/"celtune_version":"[^"]*"/"celtune_version":"\\u001b[2J"/' 's/"created_at":"[^"]*"/"created_at":"2026-99-99T99:99:99Z"/' \
           's/"cublaslt_version":/"cublaslt_verison":/' 's/"key":"flce:N64:/"key":"flce:N65:/' 's/"speedup":/"spedup":/' \
           's/"config":{/"config":{"impl":"fused",/' 's/"speedup":[0-9.e+-]*/"speedup":1e308/' \
           's/"default_ms":[0-9.e+-]*/"default_ms":0/' 's/"sm_count":[0-9]*/"sm_count":0/' \
           's/"celtune_version":"[^"]*"/"celtune_version":""/' 's/"samples":[0-9]*/"samples":1000000000000000/'; do
  grep '"record":"best"' "$tmp/h.jsonl" | sed "$bad" >"$tmp/bad.jsonl"
  expect 2 "import refuses ($bad)" -- "$celtune" db --db "$tmp/h.sqlite" import "$tmp/bad.jsonl"
done
for bad in 's/"clock_start_mhz":[0-9.e+-]*/"clock_start_mhz":-1/' 's/"clock_end_mhz":[0-9.e+-]*/"clock_end_mhz":1e308/' \
           's/"reason":""/"reason":"but it failed"/'; do
  grep '"record":"measurement"' "$tmp/h.jsonl" | grep '"status":"ok"' | head -1 | sed "$bad" >"$tmp/bad.jsonl"
  expect 2 "import refuses ($bad)" -- "$celtune" db --db "$tmp/h.sqlite" import "$tmp/bad.jsonl"
done
# A field of the wrong type is named, with the object that holds it: nlohmann's
# own message names only the types, which left a user to search ~40 fields.
while IFS='|' read -r bad said; do
  grep '"record":"best"' "$tmp/h.jsonl" | head -1 | sed "$bad" >"$tmp/bad.jsonl"
  expect 2 "import refuses ($bad)" -- "$celtune" db --db "$tmp/h.sqlite" import "$tmp/bad.jsonl"
  contains err "$said" "the message names the field"
done <<'EOF_CASES'
s/"softcap":[0-9.e+-]*/"softcap":"abc"/|problem: 'softcap' must be a number, got "abc"
s/"name":"[^"]*"/"name":5/|device: 'name' must be a string, got 5
s/"median_ms":[0-9.e+-]*/"median_ms":"x"/|stats: 'median_ms' must be a number
s/"fused":false/"fused":"yes"/|config: 'fused' must be true or false
s/"created_at":"[^"]*"/"created_at":7/|'created_at' must be a string, got 7
s/"problem":{[^}]*}/"problem":[1]/|'problem' must be an object
EOF_CASES
# Library internals stay out of the message of a line that is no record.
while IFS='|' read -r line said; do
  echo "$line" >"$tmp/bad.jsonl"
  expect 2 "import refuses $line" -- "$celtune" db --db "$tmp/h.sqlite" import "$tmp/bad.jsonl"
  contains err "$said" "the message says what is wrong"
  if grep -qE 'json.exception|cannot use at|key .* not found' "$tmp/err"; then fails=$((fails + 1));
    echo "FAIL: the message names the JSON library's internals"; else passes=$((passes + 1)); fi
done <<'EOF_CASES'
[1,2]|import line 1: a record is a JSON object, not array
{}|import line 1: no 'record' field
{"record":"best"|import line 1: parse error at line 1
EOF_CASES
expect 2 "a config that is not JSON" -- "$celtune" validate --device cpu --shape 4,8,100 --config '{'
contains err "config is not valid JSON: parse error at line 1, column 2" "the parse error, without the library's tag"
# A device's arch is "cpu" or sm_ and its compute capability: an empty or
# made-up one made a second device row, listed as a twin of the first.
for arch in '' 'sm_abc' 'gpu'; do
  grep '"record":"best"' "$tmp/h.jsonl" | head -1 | sed "s/\"arch\":\"[^\"]*\"/\"arch\":\"$arch\"/" >"$tmp/bad.jsonl"
  expect 2 "import refuses arch '$arch'" -- "$celtune" db --db "$tmp/h.sqlite" import "$tmp/bad.jsonl"
  contains err "device arch must be" "the message names the arch"
done
# A read error on standard input is an error (exit 3), not an empty import.
expect 3 "import from standard input that is a directory" -- sh -c '"$0" db --db "$1" import - <"$2"' \
  "$celtune" "$tmp/h.sqlite" "$tmp"
contains err "error reading standard input" "the message says the input failed"
expect 3 "import from a closed standard input" -- sh -c '"$0" db --db "$1" import - <&-' "$celtune" "$tmp/h.sqlite"
expect 3 "import a file that does not exist" -- "$celtune" db --db "$tmp/h.sqlite" import "$tmp/nope.jsonl"
contains err "No such file" "the message gives the reason"

# A config the backend cannot run is refused with the reason (exit 2), not a failed verdict.
expect 2 "validate a fused config on the CPU" -- "$celtune" validate --device cpu --shape 4,8,100 --config '{"impl":"fused"}'
contains err "sm_90 GPU path" "validate says why the backend cannot run it"

# Malformed tune flags are refused (exit 2) before any database is created.
for bad in "--max-scratch 1.2.3MiB" "--max-scratch 1..MiB" "--shard 0/2junk" "--shard 0junk/2" "--budget -1" \
           "--budget 18446744073709551616" "--seed -1" "--seed 18446744073709551616" "--budget 0x10" \
           "--min-runs 010 --max-runs 9" \
           "--device cpu --devices cpu" "--devices cpu,,cpu" "--devices ," "--device bogus" "--strategy exhaustive --budget 3"; do
  # shellcheck disable=SC2086
  expect 2 "tune refuses $bad" -- "$celtune" tune --shape 64,32,1000 --mode fwd --db "$tmp/flags.sqlite" $bad
done
[ ! -e "$tmp/flags.sqlite" ] && passes=$((passes + 1)) || { fails=$((fails + 1)); echo "FAIL: a refused tune created its database"; }
# A whole number beyond its option's range is refused with that range: H and V
# are int64 (18446744073709551615 was reported back as 9223372036854775807),
# --runs 20 to 10000 (the message said 0 to 2^64 − 1).
expect 2 "--hidden beyond int64" -- "$celtune" validate --device cpu --tokens 4 --hidden 18446744073709551615 --vocab 100
contains err "--hidden: expected a whole number from 0 to 9223372036854775807" "the message gives H's range"
expect 2 "--runs far beyond its range" -- "$celtune" bench --device cpu --shape 4,8,100 --runs 99999999999999999999
contains err "expected a whole number from 20 to 10000" "the message gives --runs' range"
# Whole numbers are decimal: CLI11 alone read a leading 0 as octal (H 010 was 8,
# V 0500 was 320, stored under that key) and 0x as hex.
expect 0 "--hidden 010 --vocab 0500 are decimal" -- "$celtune" lookup --device cpu --tokens 16 --hidden 010 --vocab 0500 --mode fwd
contains out ":H10:V500:" "the problem is H 10, V 500"
expect 2 "--vocab 0x1f4" -- "$celtune" lookup --device cpu --tokens 16 --hidden 32 --vocab 0x1f4 --mode fwd
for opt in --label-smoothing --softcap --z-loss; do
  expect 2 "$opt 0x1p-1" -- "$celtune" lookup --device cpu --tokens 16 --hidden 32 --vocab 500 --mode fwd $opt 0x1p-1
  contains err "expected a decimal number, got 0x1p-1" "$opt names the hex number"
done
expect 2 "--tokens 5," -- "$celtune" lookup --device cpu --tokens 5, --hidden 32 --vocab 500 --mode fwd
contains err "an empty item in token list '5,'" "the empty item is named"
expect 0 "validate --seed 010 is seed 10" -- "$celtune" validate --device cpu --shape 4,8,100 --seed 010
contains out "seed: 10" "the seed replayed is the one typed"

# A database locked by another writer past the busy timeout: tune says so and
# exits 3; what was stored stays; readers (lookup) are not blocked.
before=$("$celtune" db --db "$tmp/t.sqlite" export | sort | md5sum)
hold_lock "$tmp/t.sqlite" 6
CELTUNE_BUSY_TIMEOUT_MS=300 expect 3 "tune into a locked database" -- env CELTUNE_BUSY_TIMEOUT_MS=300 \
  "$celtune" tune --device cpu --shape 40,16,600 --dtype fp32 --db "$tmp/t.sqlite" --min-runs 3 --max-runs 3
contains err "locked" "the message says the database is locked"
expect 0 "lookup while locked" -- "$celtune" lookup --device cpu --shape 48,16,700 --dtype bf16 --db "$tmp/t.sqlite"
wait $locker
after=$("$celtune" db --db "$tmp/t.sqlite" export | sort | md5sum)
[ "$before" = "$after" ] && passes=$((passes + 1)) || { fails=$((fails + 1)); echo "FAIL: the locked database changed"; }
# A location where no file can be created.
expect 3 "tune into an uncreatable path" -- "$celtune" tune --device cpu --shape 8,16,200 --db /proc/celtune-test.sqlite

# Issue 12: a rollback-journal database (as the shipped one is) with a write
# lock held elsewhere: import waits the one busy deadline, then exit 3 naming
# the lock, nothing lost (it used to abort on an uncaught Busy at open).
cp "$tmp/a.sqlite" "$tmp/rj.sqlite"
python3 -c "import sqlite3,sys; c=sqlite3.connect(sys.argv[1]); c.execute('PRAGMA journal_mode=DELETE'); c.close()" "$tmp/rj.sqlite"
before=$(md5sum <"$tmp/rj.sqlite")
hold_lock "$tmp/rj.sqlite" 4
start=$(date +%s%N)
expect 3 "import into a locked rollback-journal database" -- env CELTUNE_BUSY_TIMEOUT_MS=600 \
  "$celtune" db --db "$tmp/rj.sqlite" import "$tmp/faster.jsonl"
elapsed_ms=$(( ($(date +%s%N) - start) / 1000000 ))
contains err "locked" "the busy-at-open message names the lock"
# One total deadline (600 ms), not one per attempt: well under 4 x 600 ms.
[ "$elapsed_ms" -lt 2000 ] && passes=$((passes + 1)) || { fails=$((fails + 1)); echo "FAIL: busy wait took $elapsed_ms ms for a 600 ms deadline"; }
expect 3 "tune into a locked rollback-journal database" -- env CELTUNE_BUSY_TIMEOUT_MS=300 \
  "$celtune" tune --device cpu --shape 8,16,200 --db "$tmp/rj.sqlite" --min-runs 3 --max-runs 3
wait $locker
[ "$before" = "$(md5sum <"$tmp/rj.sqlite")" ] && passes=$((passes + 1)) || { fails=$((fails + 1)); echo "FAIL: the locked database changed"; }
# Creators of a new database take turns on a lock of its folder, within the same
# deadline: a holder that never lets go (a writer stopped with Ctrl-Z) delays a
# new database by the wait, then it goes ahead without a turn.
mkdir -p "$tmp/turn" && rm -f "$tmp/turn-held"
python3 -c "import fcntl,os,sys,time; fd=os.open(sys.argv[1], os.O_RDONLY); fcntl.flock(fd, fcntl.LOCK_EX)
open(sys.argv[2], 'w').close(); time.sleep(6)" "$tmp/turn" "$tmp/turn-held" &
turner=$!
for _ in $(seq 100); do [ -e "$tmp/turn-held" ] && break; sleep 0.05; done
start=$(date +%s%N)
expect 0 "import into a new database while its folder's turn is held" -- env CELTUNE_BUSY_TIMEOUT_MS=400 \
  "$celtune" db --db "$tmp/turn/new.sqlite" import "$tmp/faster.jsonl"
elapsed_ms=$(( ($(date +%s%N) - start) / 1000000 ))
[ "$elapsed_ms" -lt 3000 ] && passes=$((passes + 1)) || { fails=$((fails + 1)); echo "FAIL: a held folder turn stalled a new database $elapsed_ms ms for a 400 ms wait"; }
kill $turner 2>/dev/null; wait $turner 2>/dev/null
# A reader inside a transaction on a rollback-journal database when an import
# commits: the COMMIT waits for it (the summary, printed before the commit so
# that one which cannot be written rolls back, comes once) and the rows arrive.
cp "$tmp/rj.sqlite" "$tmp/rj-read.sqlite"
rm -f "$tmp/reading"
python3 - "$tmp/rj-read.sqlite" "$tmp/reading" <<'PY' &
import sqlite3, sys, time
con = sqlite3.connect(sys.argv[1], isolation_level=None)
con.execute("BEGIN")
con.execute("SELECT count(*) FROM best").fetchall()
open(sys.argv[2], "w").close()
time.sleep(1.5)
con.execute("COMMIT")
PY
reading_pid=$!
for _ in $(seq 50); do [ -e "$tmp/reading" ] && break; sleep 0.1; done
expect 0 "import while a reader holds a rollback-journal database" -- env CELTUNE_BUSY_TIMEOUT_MS=10000 \
  "$celtune" db --db "$tmp/rj-read.sqlite" import "$tmp/h.jsonl"
wait $reading_pid
[ "$(grep -c '^imported' "$tmp/out")" = 1 ] && "$celtune" db --db "$tmp/rj-read.sqlite" list | grep -q "^cpu" \
  && passes=$((passes + 1)) || { fails=$((fails + 1)); echo "FAIL: an import that waited for a reader"; cat "$tmp/out"; }
# A rollback-journal database whose writer died mid-transaction (a hot journal,
# pages already spilled into the file): readers roll it back first and see the
# committed rows. They used to open it immutable, skip the journal, and list
# (and merge) rows that were never committed.
cp "$tmp/rj.sqlite" "$tmp/hot.sqlite"
python3 - "$tmp/hot.sqlite" <<'PY'
import os, sqlite3, sys
c = sqlite3.connect(sys.argv[1], isolation_level=None)
c.execute("PRAGMA cache_size = 1")
c.execute("BEGIN")
c.execute("UPDATE best SET median_ms = median_ms / 1000, p20_ms = p20_ms / 1000")
for i in range(3000):
    c.execute("INSERT INTO configs (json) VALUES (?)", ('{"pad":%d,"x":"%s"}' % (i, "p" * 200),))
os._exit(9)
PY
[ -e "$tmp/hot.sqlite-journal" ] && passes=$((passes + 1)) || { fails=$((fails + 1)); echo "FAIL: the hot-journal set-up left no journal"; }
expect 0 "export a database with a hot journal" -- "$celtune" db --db "$tmp/hot.sqlite" export
mv "$tmp/out" "$tmp/hot.txt"
expect 0 "export the committed copy" -- "$celtune" db --db "$tmp/rj.sqlite" export
cmp -s "$tmp/out" "$tmp/hot.txt" && passes=$((passes + 1)) || { fails=$((fails + 1)); echo "FAIL: a hot journal's uncommitted rows were read"; }
# A live writer's exclusive lock on a rollback-journal database, its journal
# beside it (as while an import commits): readers wait the busy deadline for it
# like any lock and read the committed rows once it lets go; past the deadline
# they say it is locked. They used to fail at once, calling it an interrupted
# write that needed rolling back (116 of 190 lookups during one import: a
# helper's probe, sixty-third session).
cp "$tmp/rj.sqlite" "$tmp/live.sqlite"
hold_lock "$tmp/live.sqlite" 1 write
[ -e "$tmp/live.sqlite-journal" ] && passes=$((passes + 1)) || { fails=$((fails + 1)); echo "FAIL: the live writer left no journal"; }
expect 0 "export while a live writer holds a rollback-journal database" -- env CELTUNE_BUSY_TIMEOUT_MS=10000 \
  "$celtune" db --db "$tmp/live.sqlite" export
wait $locker
mv "$tmp/out" "$tmp/live.txt"
expect 0 "export the committed copy" -- "$celtune" db --db "$tmp/rj.sqlite" export
cmp -s "$tmp/out" "$tmp/live.txt" && passes=$((passes + 1)) || { fails=$((fails + 1)); echo "FAIL: the export that waited for a live writer"; }
hold_lock "$tmp/live.sqlite" 3 write
expect 3 "export past the busy deadline of a live writer" -- env CELTUNE_BUSY_TIMEOUT_MS=300 \
  "$celtune" db --db "$tmp/live.sqlite" export
contains err "stayed locked by another process" "a live writer's lock is named as a lock"
wait $locker
expect 2 "malformed CELTUNE_BUSY_TIMEOUT_MS" -- env CELTUNE_BUSY_TIMEOUT_MS=abc "$celtune" db --db "$tmp/a.sqlite" list
contains err "CELTUNE_BUSY_TIMEOUT_MS" "the message names the variable"

# A foreign SQLite file: refused before any setting changes (no WAL switch).
python3 -c "import sqlite3,sys; c=sqlite3.connect(sys.argv[1]); c.execute('CREATE TABLE t(x)'); c.commit(); c.close()" "$tmp/foreign.sqlite"
cp "$tmp/foreign.sqlite" "$tmp/foreign.copy"
expect 3 "tune into a foreign sqlite file" -- "$celtune" tune --device cpu --shape 8,16,200 --db "$tmp/foreign.sqlite"
contains err "refusing to touch it" "the foreign file is named as such"
cmp -s "$tmp/foreign.sqlite" "$tmp/foreign.copy" && [ ! -e "$tmp/foreign.sqlite-wal" ] && passes=$((passes + 1)) \
  || { fails=$((fails + 1)); echo "FAIL: a foreign sqlite file was changed"; }
mkdir "$tmp/dir.sqlite"
expect 3 "a directory as the database" -- "$celtune" tune --device cpu --shape 8,16,200 --db "$tmp/dir.sqlite"
contains err "is a directory" "a directory is named as one, not a disk I/O error"

# db export -o: never over the input database or its journal files, a symlink, a FIFO or a device;
# a failed export leaves OUT as it was.
cp "$tmp/a.sqlite" "$tmp/keep.sqlite"
expect 2 "export over its own database" -- "$celtune" db --db "$tmp/a.sqlite" export -o "$tmp/a.sqlite"
cmp -s "$tmp/a.sqlite" "$tmp/keep.sqlite" && passes=$((passes + 1)) || { fails=$((fails + 1)); echo "FAIL: export replaced its own database"; }
for j in -wal -journal; do
  expect 2 "export over its own database's $j file" -- "$celtune" db --db "$tmp/a.sqlite" export -o "$tmp/a.sqlite$j"
  [ ! -e "$tmp/a.sqlite$j" ] && passes=$((passes + 1)) || { fails=$((fails + 1)); echo "FAIL: export wrote $j"; }
done
# No --db, no CELTUNE_DB, no HOME: exit 3 saying what to set (it wrote a
# ./celtune.sqlite that the runtime never reads).
expect 3 "tune with no place for the user's database" -- env -C "$tmp" -u HOME -u XDG_DATA_HOME -u CELTUNE_DB \
  "$(realpath "$celtune")" tune --device cpu --shape 8,16,200 --min-runs 3 --max-runs 3
contains err "CELTUNE_DB" "the refusal says what to set"
[ ! -e "$tmp/celtune.sqlite" ] && passes=$((passes + 1)) || { fails=$((fails + 1)); echo "FAIL: tune wrote ./celtune.sqlite"; }
expect 0 "db list after the refused exports" -- "$celtune" db --db "$tmp/a.sqlite" list
# A merge into a new OUT that fails writing (a file-size limit standing in for a
# full disk): exit 3 naming OUT, not the temporary file the user never saw, and
# no OUT left behind.
expect 3 "merge into a new OUT past a file-size limit" -- bash -c 'trap "" XFSZ; ulimit -f 16; "$0" db merge "$1" "$2" -o "$3"' \
  "$celtune" "$tmp/a.sqlite" "$tmp/b.sqlite" "$tmp/lim.sqlite"
contains err "database $tmp/lim.sqlite:" "the error names OUT"
[ -z "$(ls "$tmp" | grep '^lim')" ] && passes=$((passes + 1)) || { fails=$((fails + 1)); echo "FAIL: a failed merge left OUT or its temporary file"; ls "$tmp"; }
# Nor over another database (meant the other way round, or mistyped): b's rows
# were replaced by JSON text.
cp "$tmp/b.sqlite" "$tmp/other.sqlite" && cp "$tmp/b.sqlite" "$tmp/other.copy"
expect 2 "export over another database" -- "$celtune" db --db "$tmp/a.sqlite" export -o "$tmp/other.sqlite"
contains err "an SQLite database" "the refusal says what OUT is"
cmp -s "$tmp/other.sqlite" "$tmp/other.copy" && passes=$((passes + 1)) \
  || { fails=$((fails + 1)); echo "FAIL: export replaced another database"; }
# A damaged stored best row (a median of -1 ms) loses to a sound imported one;
# it once "won" as the faster and the sound record was dropped.
cp "$tmp/b.sqlite" "$tmp/damaged.sqlite"
python3 -c 'import sqlite3,sys; c=sqlite3.connect(sys.argv[1]); c.execute("UPDATE best SET median_ms=-1, p20_ms=-1"); c.commit()' \
  "$tmp/damaged.sqlite"
"$celtune" db --db "$tmp/b.sqlite" export -o "$tmp/sound.jsonl"
expect 0 "db list of the damaged rows" -- "$celtune" db --db "$tmp/damaged.sqlite" list
contains out "INVALID" "the damaged rows are marked"
expect 0 "import sound rows over damaged ones" -- "$celtune" db --db "$tmp/damaged.sqlite" import "$tmp/sound.jsonl"
contains out "replaced the stored one" "the import says the damaged rows were replaced"
expect 0 "db list after the import" -- "$celtune" db --db "$tmp/damaged.sqlite" list
if grep -q INVALID "$tmp/out"; then fails=$((fails + 1)); echo "FAIL: a damaged best row survived a sound import"; else passes=$((passes + 1)); fi
echo precious >"$tmp/precious" && ln -s "$tmp/precious" "$tmp/link"
expect 2 "export to a symlink" -- "$celtune" db --db "$tmp/a.sqlite" export -o "$tmp/link"
contains err "is a symbolic link" "the refusal says the name is a link, not that its target is no regular file"
grep -qx precious "$tmp/precious" && [ -L "$tmp/link" ] && passes=$((passes + 1)) || { fails=$((fails + 1)); echo "FAIL: export followed a symlink"; }
mkfifo "$tmp/fifo"
expect 2 "export to a FIFO" -- timeout 10 "$celtune" db --db "$tmp/a.sqlite" export -o "$tmp/fifo"
expect 2 "export to a device" -- "$celtune" db --db "$tmp/a.sqlite" export -o /dev/full
[ -z "$(ls "$tmp" | grep -E '\.(jsonl|fifo|link)\.' )" ] && passes=$((passes + 1)) || { fails=$((fails + 1)); echo "FAIL: export left a temporary file"; ls "$tmp"; }
# --db after the verb, as tune and lookup take it.
expect 0 "db list --db after the verb" -- "$celtune" db list --db "$tmp/a.sqlite"
contains out "GTX fictional" "db list --db reads that database"
expect 0 "db export --db after the verb" -- "$celtune" db export --db "$tmp/a.sqlite"
expect 2 "--db twice, different files" -- "$celtune" db --db "$tmp/a.sqlite" list --db "$tmp/b.sqlite"

# Write errors reach the exit code (a full disk).
if [ -w /dev/full ]; then
  for cmd in "--help" "--version" "tune --help" "db --db $tmp/a.sqlite export" "db --db $tmp/a.sqlite list" \
             "lookup --device cpu --shape 48,16,700 --db $tmp/t.sqlite" "validate --device cpu --shape 4,8,100 --json"; do
    # shellcheck disable=SC2086
    expect 3 "$cmd > /dev/full" -- bash -c "\"\$0\" $cmd >/dev/full" "$celtune"
    # The reason too, when the write that failed was an earlier buffer's, not
    # the last flush's (an export of the shipped rows, below, said none).
    contains err "error writing standard output: No space left on device" "$cmd > /dev/full says why"
  done
  expect 0 "import the shipped H200 rows" -- "$celtune" db --db "$tmp/shipped.sqlite" import "$(dirname "$0")/../db/tuned/nvidia-h200.jsonl"
  expect 3 "a 580 KB export > /dev/full" -- bash -c '"$0" db --db "$1" export >/dev/full' "$celtune" "$tmp/shipped.sqlite"
  contains err "error writing standard output: No space left on device" "a long export to /dev/full says why"
  # A write whose summary cannot be written is not done: a new merge OUT does not
  # appear, an existing one and an import's database stay as they were (a merge
  # once exited 3 and left OUT merged).
  expect 3 "merge into a new OUT > /dev/full" -- bash -c '"$0" db merge "$1" "$2" -o "$3" >/dev/full' "$celtune" \
    "$tmp/a.sqlite" "$tmp/b.sqlite" "$tmp/full-new.sqlite"
  [ -z "$(ls "$tmp" | grep '^full-new')" ] && passes=$((passes + 1)) || { fails=$((fails + 1)); echo "FAIL: a merge that exited 3 left OUT"; }
  for verb in merge import; do
    cp "$tmp/a.sqlite" "$tmp/full-$verb.sqlite"
    before=$("$celtune" db --db "$tmp/full-$verb.sqlite" export | md5sum)
    if [ $verb = merge ]; then
      expect 3 "merge into an existing OUT > /dev/full" -- bash -c '"$0" db merge "$1" "$2" -o "$3" >/dev/full' \
        "$celtune" "$tmp/a.sqlite" "$tmp/b.sqlite" "$tmp/full-$verb.sqlite"
    else
      expect 3 "import > /dev/full" -- bash -c '"$0" db --db "$1" import "$2" >/dev/full' "$celtune" \
        "$tmp/full-$verb.sqlite" "$tmp/faster.jsonl"
    fi
    contains err "error writing standard output" "the $verb names the write error"
    [ "$before" = "$("$celtune" db --db "$tmp/full-$verb.sqlite" export | md5sum)" ] && passes=$((passes + 1)) \
      || { fails=$((fails + 1)); echo "FAIL: a $verb that exited 3 changed its database"; }
  done
  # report likewise: no plot written, none of an earlier report removed.
  mkdir -p "$tmp/full-rep" && echo '<svg/>' >"$tmp/full-rep/vchunk-99.svg"
  expect 3 "report > /dev/full" -- bash -c '"$0" report --db "$1" -o "$2" >/dev/full' "$celtune" "$tmp/t.sqlite" \
    "$tmp/full-rep"
  contains err "error writing standard output" "report names the write error"
  [ "$(ls "$tmp/full-rep")" = "vchunk-99.svg" ] && passes=$((passes + 1)) \
    || { fails=$((fails + 1)); echo "FAIL: a report that exited 3 changed its folder"; ls "$tmp/full-rep"; }
  "$celtune" db --db "$tmp/full-import.sqlite" import "$tmp/faster.jsonl" >/dev/null
  # A warning that cannot be written is no success either: export --skip-damaged
  # left a row out, said so only on standard error, and exited 0 into /dev/full.
  cp "$tmp/t.sqlite" "$tmp/full-warn.sqlite"
  python3 -c 'import sqlite3, sys; c = sqlite3.connect(sys.argv[1])
c.execute("UPDATE measurements SET median_ms = -1 WHERE rowid = (SELECT min(rowid) FROM measurements)"); c.commit()' \
    "$tmp/full-warn.sqlite"
  expect 0 "export --skip-damaged" -- "$celtune" db --db "$tmp/full-warn.sqlite" export --skip-damaged -o "$tmp/fw.jsonl"
  contains err "1 damaged row left out of the export" "the warning says a row was left out"
  expect 3 "export --skip-damaged 2> /dev/full" -- bash -c '"$0" db --db "$1" export --skip-damaged -o "$2" 2>/dev/full' \
    "$celtune" "$tmp/full-warn.sqlite" "$tmp/fw2.jsonl"
  expect 0 "a command with nothing to warn of 2> /dev/full" -- bash -c '"$0" db --db "$1" list >/dev/null 2>/dev/full' \
    "$celtune" "$tmp/t.sqlite"
  # A reader that went away (a pipe whose read end is closed before the command
  # starts, so no race with the reader): SIGPIPE killed the process, exit 141,
  # leaving a report's staged plots and an import's new database.
  closed_pipe() { python3 -c 'import os, subprocess, sys
r, w = os.pipe(); os.close(r)
sys.exit(subprocess.run(sys.argv[1:], stdout=w).returncode)' "$@"; }
  expect 3 "report into a closed pipe" -- closed_pipe "$celtune" report --db "$tmp/t.sqlite" -o "$tmp/pipe-rep"
  contains err "error writing standard output: Broken pipe" "the closed pipe is named"
  [ -z "$(ls "$tmp/pipe-rep" 2>/dev/null)" ] && passes=$((passes + 1)) \
    || { fails=$((fails + 1)); echo "FAIL: a report into a closed pipe left files"; ls "$tmp/pipe-rep"; }
  expect 3 "import into a new database, into a closed pipe" -- closed_pipe "$celtune" db --db "$tmp/pipe-new.sqlite" \
    import "$tmp/faster.jsonl"
  [ ! -e "$tmp/pipe-new.sqlite" ] && passes=$((passes + 1)) \
    || { fails=$((fails + 1)); echo "FAIL: an import into a closed pipe kept its new database"; }
  [ "$before" != "$("$celtune" db --db "$tmp/full-import.sqlite" export | md5sum)" ] && passes=$((passes + 1)) \
    || { fails=$((fails + 1)); echo "FAIL: the /dev/full import tests do not change the database when they succeed"; }
fi

# db import checks every record: impossible timings, p20 > median, a config the
# kernels refuse, an unknown family; the whole file is refused, naming the line.
cp "$tmp/b.sqlite" "$tmp/b.keep"
for bad in 's/"median_ms":10.5/"median_ms":-1/' 's/"median_ms":10.5/"median_ms":0/' 's/"p20_ms":10.4/"p20_ms":11/' \
           's/"block_size":2048/"block_size":48/' 's/"family":"flce"/"family":"xce"/' 's/"samples":40/"samples":0/' \
           's/"kernel_hash":"abc"/"kernel_hash":""/' 's/"kernel_hash":"abc"/"kernel_hash":"ZZ-1"/' 's/"kernel_hash":"abc"/"kernel_hash":"zz"/' \
           's/"created_at":"[^"]*"/"created_at":"yesterday"/' 's/"created_at":"[^"]*"/"created_at":"9999-01-01T00:00:00Z"/' 's/"name":"GTX fictional"/"name":"GTX\\u001b[31m"/'; do
  { cat "$tmp/faster.jsonl"; sed "$bad" "$tmp/in.jsonl"; } >"$tmp/bad.jsonl"
  expect 2 "import refuses ($bad)" -- "$celtune" db --db "$tmp/b.sqlite" import "$tmp/bad.jsonl"
  contains err "line 2" "the refusal names the line ($bad)"
done
expect 3 "import a directory" -- "$celtune" db --db "$tmp/b.sqlite" import "$tmp"
cmp -s "$tmp/b.sqlite" "$tmp/b.keep" && passes=$((passes + 1)) || { fails=$((fails + 1)); echo "FAIL: a refused import changed the database"; }

# db merge is all or nothing: a B that is no database leaves OUT as it was, and
# a new OUT is not left behind.
cp "$tmp/m.sqlite" "$tmp/m.keep"
expect 3 "merge with a junk input into an existing OUT" -- "$celtune" db merge "$tmp/a.sqlite" "$tmp/junk.copy" -o "$tmp/m.sqlite"
[ "$("$celtune" db --db "$tmp/m.sqlite" export | md5sum)" = "$("$celtune" db --db "$tmp/m.keep" export | md5sum)" ] \
  && passes=$((passes + 1)) || { fails=$((fails + 1)); echo "FAIL: a failed merge changed OUT"; }
expect 3 "merge with a junk input into a new OUT" -- "$celtune" db merge "$tmp/a.sqlite" "$tmp/junk.copy" -o "$tmp/new-m.sqlite"
[ -z "$(ls "$tmp" | grep '^new-m')" ] && passes=$((passes + 1)) || { fails=$((fails + 1)); echo "FAIL: a failed merge left a new OUT"; }
# Nor does an interrupted one (Ctrl-C left an empty schema and an 11 MB -wal as
# OUT): a new OUT is written under a temporary name, linked into place when done.
"$celtune" db --db "$tmp/a.sqlite" export -o "$tmp/a-int.jsonl"
# Rows enough that the merge is still running when it is killed: 20000, or 4000
# under the sanitizers (ASAN_OPTIONS set: scripts/bootstrap's second run), whose
# -O0 build took 80 s to import 20000, a quarter of that run's cli test.
big_rows=20000
[ -n "${ASAN_OPTIONS:-}" ] && big_rows=4000
python3 - "$tmp/a-int.jsonl" "$tmp/big.jsonl" "$big_rows" <<'PY'
import json, sys
m = next(map(json.loads, open(sys.argv[1])))  # a best entry: a.sqlite holds no measurements
n0 = m["problem"]["tokens"]
with open(sys.argv[2], "w") as out:
    for n in range(1, int(sys.argv[3]) + 1):
        m["problem"]["tokens"] = n
        m["problem"]["key"] = m["problem"]["key"].replace(f":N{n0}:", f":N{n}:")
        n0 = n
        out.write(json.dumps(m) + "\n")
PY
# (Until the thirty-fourth session this picked a measurement, which a.sqlite
# lacks: big.jsonl came out empty and the merge failed on a missing input, so
# the check below passed without a merge to interrupt.)
expect 0 "import $big_rows rows to merge" -- "$celtune" db --db "$tmp/big.sqlite" import "$tmp/big.jsonl"
"$celtune" db merge "$tmp/big.sqlite" "$tmp/a.sqlite" -o "$tmp/int-m.sqlite" >/dev/null 2>&1 &
merger=$!
for _ in $(seq 200); do ls "$tmp" | grep -qE '^int-m\.sqlite\..*-(wal|journal)$' && break; sleep 0.05; done
kill -TERM "$merger" 2>/dev/null; wait "$merger"
[ -z "$(ls "$tmp" | grep '^int-m')" ] && passes=$((passes + 1)) \
  || { fails=$((fails + 1)); echo "FAIL: an interrupted merge left files"; ls "$tmp" | grep '^int-m'; }
# Where hard links fail (vfat, some network mounts) the new OUT is renamed into
# place instead: link() made to fail with EPERM, as such a file system does.
if command -v cc >/dev/null 2>&1; then
  printf '#include <errno.h>\nint link(const char *a, const char *b) { (void)a; (void)b; errno = EPERM; return -1; }\n' \
    >"$tmp/nolink.c"
  if cc -shared -fPIC -o "$tmp/nolink.so" "$tmp/nolink.c" 2>/dev/null; then
    expect 0 "merge into a new OUT where hard links fail" -- env LD_PRELOAD="$tmp/nolink.so" \
      ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}verify_asan_link_order=0" \
      "$celtune" db merge "$tmp/a.sqlite" "$tmp/b.sqlite" -o "$tmp/nolink-m.sqlite"
    [ "$(ls "$tmp" | grep -c '^nolink-m')" = 1 ] && "$celtune" db --db "$tmp/nolink-m.sqlite" list >/dev/null 2>&1 \
      && passes=$((passes + 1)) || { fails=$((fails + 1)); echo "FAIL: no sound OUT without hard links"; ls "$tmp" | grep nolink; }
  fi
fi
# Nor is OUT (or import's and tune's --db) a database's journal file: merge wrote
# a database as base.sqlite-wal, and base.sqlite's next reader deleted it.
cp "$tmp/a.sqlite" "$tmp/jbase.sqlite" && : >"$tmp/jbase.sqlite-wal"
expect 2 "merge -o a database's -wal" -- "$celtune" db merge "$tmp/a.sqlite" "$tmp/b.sqlite" -o "$tmp/jbase.sqlite-wal"
contains err "journal file of database" "merge names the journal file it refuses"
expect 2 "import --db a database's -wal" -- "$celtune" db --db "$tmp/jbase.sqlite-wal" import /dev/null
[ ! -s "$tmp/jbase.sqlite-wal" ] && passes=$((passes + 1)) || { fails=$((fails + 1)); echo "FAIL: a -wal was written"; }
rm -f "$tmp/jbase.sqlite-wal"
# A log left at a name by a deleted database (its writer killed before the log
# was folded in) is replayed by SQLite into the next file of that name: a merge
# into a new OUT there lost every measurement, an import left it malformed, and
# both exited 0. Refused (exit 3); nothing is placed and the log stays.
python3 - "$tmp/stale.sqlite" <<'PY'
import os, shutil, sqlite3, sys
db = sys.argv[1]
c = sqlite3.connect(db)
c.execute("PRAGMA journal_mode=WAL")
c.execute("CREATE TABLE t(x)")
c.execute("INSERT INTO t VALUES (1)")
c.commit()
shutil.copy(db + "-wal", db + ".log")  # before the close folds the log in
c.close()
os.remove(db)
os.rename(db + ".log", db + "-wal")
PY
expect 3 "merge into a new OUT beside a deleted database's log" -- \
  "$celtune" db merge "$tmp/a.sqlite" "$tmp/b.sqlite" -o "$tmp/stale.sqlite"
contains err "is still there from an earlier database" "merge names the leftover log"
expect 3 "import into a new database beside a deleted database's log" -- \
  "$celtune" db --db "$tmp/stale.sqlite" import "$tmp/a-int.jsonl"
[ ! -e "$tmp/stale.sqlite" ] && [ -s "$tmp/stale.sqlite-wal" ] && [ ! -s "$tmp/out" ] && passes=$((passes + 1)) \
  || { fails=$((fails + 1)); echo "FAIL: a database was placed over a leftover log, or success was said"; }
rm -f "$tmp/stale.sqlite-wal" "$tmp/stale.sqlite-shm"
# A new database's summary is printed once it is in place; one that cannot be
# printed takes the new database away again (it had been printed before the
# database was placed: a full disk at the close, or a signal, left "imported …"
# and no database).
expect 3 "import into a new database, standard output full" -- \
  bash -c '"$0" db --db "$1" import "$2" >/dev/full' "$celtune" "$tmp/full-new.sqlite" "$tmp/a-int.jsonl"
[ -z "$(ls "$tmp" | grep '^full-new')" ] && passes=$((passes + 1)) \
  || { fails=$((fails + 1)); echo "FAIL: a new database stayed though its summary was not written"; ls "$tmp" | grep full-new; }
# Success lines escape the names they echo, as errors do.
esc="$tmp/esc$(printf '\033')[2J.sqlite"
expect 0 "import into a database whose name holds an escape" -- "$celtune" db --db "$esc" import "$tmp/a-int.jsonl"
contains out '\x1b[2J' "the summary escapes the name"
! grep -q "$(printf '\033')" "$tmp/out" && passes=$((passes + 1)) || { fails=$((fails + 1)); echo "FAIL: a raw escape on stdout"; }
expect 0 "db list of a database whose name holds an escape" -- "$celtune" db --db "$esc" list
contains out '\x1b[2J' "db list's summary escapes the name"
! grep -q "$(printf '\033')" "$tmp/out" && passes=$((passes + 1)) || { fails=$((fails + 1)); echo "FAIL: db list: a raw escape on stdout"; }
# report's "removed" lines too (its "wrote" lines were escaped).
escdir="$tmp/rep$(printf '\033')[31mX"
mkdir -p "$escdir" && echo '<svg/>' >"$escdir/vchunk-7.svg"
expect 0 "report into a folder whose name holds an escape" -- "$celtune" report --db "$esc" -o "$escdir"
contains out 'removed ' "report says what it removed"
! grep -q "$(printf '\033')" "$tmp/out" && passes=$((passes + 1)) || { fails=$((fails + 1)); echo "FAIL: report: a raw escape on stdout"; }
rm -rf "$esc" "$escdir"
# An interrupt leaves no temporary of export's or report's behind: OUT.XXXXXX
# and *.svg.XXXXXX stayed, and no later run removed them. The shipped rows under
# sixteen kernel hashes make an export of ~0.5 s.
python3 - "$(dirname "$0")/../db/tuned/nvidia-h100-80gb-hbm3.jsonl" "$tmp/many.jsonl" <<'PY2'
import json, sys
rows = [json.loads(line) for line in open(sys.argv[1])]
with open(sys.argv[2], "w") as f:
    for k in range(16):
        for r in rows:
            r["kernel_hash"] = "%016x" % (k + 1)
            f.write(json.dumps(r) + "\n")
PY2
"$celtune" db --db "$tmp/many.sqlite" import "$tmp/many.jsonl" >/dev/null
mkdir -p "$tmp/intr"
interrupted=0
for d in 0.1 0.2 0.3; do
  for sig in INT TERM HUP; do
    timeout --preserve-status -s $sig $d "$celtune" db --db "$tmp/many.sqlite" export -o "$tmp/intr/out.jsonl" >/dev/null 2>&1
    case $? in 130 | 143 | 129) interrupted=$((interrupted + 1)) ;; esac
    timeout --preserve-status -s $sig 0.05 "$celtune" report --db "$tmp/many.sqlite" -o "$tmp/intr/rep" >/dev/null 2>&1
  done
done
[ "$interrupted" -gt 0 ] && passes=$((passes + 1)) || { fails=$((fails + 1)); echo "FAIL: no export was interrupted (too fast to judge)"; }
left=$(find "$tmp/intr" -name '*.??????' | head -5)
[ -z "$left" ] && passes=$((passes + 1)) || { fails=$((fails + 1)); echo "FAIL: an interrupt left temporaries: $left"; }
# SQLite opens databases whose absolute path is at most 504 bytes: past that,
# say so (it said "unable to open database file").
deep="$tmp"
while [ ${#deep} -lt 480 ]; do deep="$deep/dddddddddddddddddddddddddddddddddddddddd"; done
mkdir -p "$deep" && cp "$tmp/a.sqlite" "$deep/a-long-name-for-a-database.sqlite"
expect 3 "a database past SQLite's path length" -- "$celtune" db --db "$deep/a-long-name-for-a-database.sqlite" list
contains err "SQLite opens databases of at most 504" "the path's length is named"
rm -rf "$tmp/dddddddddddddddddddddddddddddddddddddddd"
# A database whose row import would refuse (a median of −1 ms once won the merge).
cp "$tmp/b.sqlite" "$tmp/damaged.sqlite"
python3 -c 'import sqlite3, sys; c = sqlite3.connect(sys.argv[1]); c.execute("UPDATE best SET median_ms = -1"); c.commit()' \
  "$tmp/damaged.sqlite"
expect 2 "merge without -o" -- "$celtune" db merge "$tmp/a.sqlite" "$tmp/b.sqlite"
contains err "--output is required" "merge without -o says -o is required (not 'unknown command')"
expect 2 "merge with --db" -- "$celtune" db --db "$tmp/a.sqlite" merge "$tmp/a.sqlite" "$tmp/b.sqlite" -o "$tmp/never.sqlite"
[ ! -e "$tmp/never.sqlite" ] && passes=$((passes + 1)) || { fails=$((fails + 1)); echo "FAIL: a refused merge wrote OUT"; }
expect 3 "merge refuses a damaged row" -- "$celtune" db merge "$tmp/a.sqlite" "$tmp/damaged.sqlite" -o "$tmp/m.sqlite"
contains err "nothing was merged" "the refusal says nothing was merged"
[ "$("$celtune" db --db "$tmp/m.sqlite" export | md5sum)" = "$("$celtune" db --db "$tmp/m.keep" export | md5sum)" ] \
  && passes=$((passes + 1)) || { fails=$((fails + 1)); echo "FAIL: a refused merge changed OUT"; }
# Nor does export write what import would refuse: no file, no line on stdout.
expect 3 "export -o refuses a damaged row" -- "$celtune" db --db "$tmp/damaged.sqlite" export -o "$tmp/damaged.jsonl"
contains err "nothing was exported" "the refusal says nothing was exported"
[ ! -e "$tmp/damaged.jsonl" ] && passes=$((passes + 1)) || { fails=$((fails + 1)); echo "FAIL: a refused export left a file"; }
expect 3 "export to stdout refuses a damaged row" -- "$celtune" db --db "$tmp/damaged.sqlite" export
[ ! -s "$tmp/out" ] && passes=$((passes + 1)) || { fails=$((fails + 1)); echo "FAIL: a refused export printed lines"; }

# report: an output path that is a file, an unknown --problem.
expect 3 "report -o a file" -- "$celtune" report --db "$tmp/t.sqlite" -o "$tmp/precious"
contains err "output folder" "report says the output is not a folder"
expect 2 "report --problem nonsense" -- "$celtune" report --db "$tmp/t.sqlite" -o "$tmp/report3" --problem nonsense
expect 2 "report --device nobody-has" -- "$celtune" report --db "$tmp/t.sqlite" -o "$tmp/report3" --device nobody-has
contains err "for the --problem/--device given" "an unmatched --device is named as the filter"

# Sizes that overflow: one checked-size rule, exit 2 naming the limit, in every command.
for cmd in validate "lookup --db $tmp/size.sqlite" "tune --db $tmp/size.sqlite" bench; do
  # shellcheck disable=SC2086
  expect 2 "$cmd: N x V overflows int64" -- "$celtune" $cmd --device cpu --shape 4611686018427387904,16,500
  contains err "too large" "$cmd names the size limit"
done
expect 2 "a 1e12-token shape" -- "$celtune" validate --device cpu --shape 1000000000000,32,2000
contains err "2^48 bytes" "the limit is stated"
[ ! -e "$tmp/size.sqlite" ] && passes=$((passes + 1)) || { fails=$((fails + 1)); echo "FAIL: a refused tune created its database"; }

# Conflicting or out-of-range options: exit 2 with a message, or the documented winner.
expect 2 "--shape with --model" -- "$celtune" lookup --device cpu --shape 4,8,100 --model llama3-8b
expect 2 "--shape with --tokens" -- "$celtune" lookup --device cpu --shape 4,8,100 --tokens 8
expect 2 "--shape with --vocab" -- "$celtune" lookup --device cpu --shape 4,8,100 --vocab 300
expect 0 "--softcap 0 wins over the preset's" -- "$celtune" lookup --device cpu --model gemma2-2b --tokens 64 --softcap 0
contains out ":cap0:" "an explicit --softcap 0 turns the preset's softcap off"
expect 2 "an unknown command" -- "$celtune" bogus
contains err "unknown command 'bogus' (commands: devices," "the refusal names the word and the commands"
expect 2 "an unknown db verb" -- "$celtune" db --db "$tmp/a.sqlite" bogus
contains err "unknown command 'bogus' (commands: list, export" "the refusal lists db's verbs"
expect 0 "a preset for the ce family gives V only" -- "$celtune" lookup --device cpu --family ce --model llama3-8b --tokens 8
contains out "ce:N8:H0:V128256:" "ce takes the preset's vocabulary and no hidden size"
expect 0 "a value given twice names one problem" -- "$celtune" lookup --device cpu --shape 8,16,200 --dtype bf16,bf16 --mode fwd,fwd
[ "$(grep -c '^problem' "$tmp/out")" = 1 ] && passes=$((passes + 1)) || { fails=$((fails + 1)); echo "FAIL: duplicate values made duplicate problems"; }
expect 2 "--all-configs with --from-db" -- "$celtune" validate --device cpu --all-configs --from-db "$tmp/t.sqlite"
expect 2 "--min-runs above --max-runs" -- "$celtune" tune --device cpu --shape 8,16,200 --min-runs 50 --max-runs 10 --db "$tmp/x.sqlite"
expect 2 "--budget 0" -- "$celtune" tune --device cpu --shape 8,16,200 --budget 0 --db "$tmp/x.sqlite"
expect 2 "--max-scratch 0" -- "$celtune" tune --device cpu --shape 8,16,200 --max-scratch 0 --db "$tmp/x.sqlite"
contains err "fits no config" "a zero scratch budget is refused as such"
# A database whose every candidate is stored as failed: tune runs nothing, and
# says the failures were read back, not found here, and how to re-measure.
expect 0 "tune every candidate" -- "$celtune" tune --device cpu --shape 64,32,2000 --mode fwd --strategy exhaustive \
  --min-runs 3 --max-runs 3 --db "$tmp/allfail-src.sqlite"
"$celtune" db --db "$tmp/allfail-src.sqlite" export --jsonl -o - | python3 -c '
import json, sys
for l in sys.stdin:
    j = json.loads(l)
    if j["record"] == "measurement":
        j["status"], j["reason"] = "failed", "imported failure"
        j["stats"] = {"median_ms": 0, "p20_ms": 0, "p80_ms": 0, "samples": 0, "spread": 0}
        print(json.dumps(j))' >"$tmp/allfail.jsonl"
expect 0 "import them as failed" -- "$celtune" db --db "$tmp/allfail.sqlite" import "$tmp/allfail.jsonl"
expect 1 "tune over stored failures" -- "$celtune" tune --device cpu --shape 64,32,2000 --mode fwd --strategy exhaustive \
  --min-runs 3 --max-runs 3 --db "$tmp/allfail.sqlite"
contains out "as stored in the database, not run here: --force measures them again" "tune says the failures were stored ones"
expect 2 "--ignore-index beyond int64" -- "$celtune" lookup --device cpu --shape 4,8,100 --ignore-index 99999999999999999999
contains err "out of range" "the ignore-index message says out of range"
# Days of CPU work (N·V = 2^40, ~9e14 operations; over ten minutes even on 256
# cores) are refused up front, not started; small inputs keep it off the memory check.
expect 2 "validate refuses days of CPU work" -- "$celtune" validate --device cpu --shape 1048576,64,1048576
contains err "--reference fp64" "the refusal says how to run it anyway"
# The estimate counts no more evaluations than the space has candidates: a
# huge --budget at a tiny problem is neither refused nor noted as years of work.
expect 0 "tune a tiny problem with a huge --budget" -- "$celtune" tune --shape 4,8,100 --mode fwd \
  --budget 18446744073709551615 --min-runs 3 --max-runs 3 --db "$tmp/budget.sqlite"
if grep -q "minutes" "$tmp/err"; then fails=$((fails + 1)); echo "FAIL: tune estimated minutes of work"; else
  passes=$((passes + 1)); fi
# The seed is on disk before the first case runs: a run killed mid-case (here a
# full-size shape on the CPU) still leaves what replays it.
expect 137 "validate killed mid-case" -- timeout -s KILL 3 "$celtune" validate --device cpu --model llama3-8b \
  --tokens 64 --seed 4242
contains out "seed: 4242" "a killed validate has printed its seed"
expect 2 "--softcap -1" -- "$celtune" validate --device cpu --shape 4,8,100 --softcap -1
[ "$(wc -c <"$tmp/err")" -lt 200 ] && passes=$((passes + 1)) || { fails=$((fails + 1)); echo "FAIL: the softcap message is $(wc -c <"$tmp/err") bytes"; }
expect 2 "a zero vocabulary in --shape" -- "$celtune" validate --device cpu --shape 64,32,0
contains err "vocab (V) must be positive" "a zero V is named as such"
expect 2 "--vocab 0 beside --model" -- "$celtune" lookup --device cpu --tokens 4 --model llama3-8b --vocab 0
contains err "--vocab (V) must be positive, got 0" "a zero --vocab is named as such, not as missing"
"$celtune" tune --help >"$tmp/out" 2>&1
contains out "default both" "tune's --mode help says it does both"

# The runtime reads where tune writes: with no --db and no CELTUNE_DB, a tune
# into the user's database is what lookup finds (exact), including cpu rows.
expect 0 "tune into the user's database" -- env -u CELTUNE_DB XDG_DATA_HOME="$tmp/xdg" "$celtune" tune --device cpu \
  --shape 8,16,200 --mode fwd --min-runs 3 --max-runs 3 --label-smoothing 0.1 --z-loss 1e-4
test -s "$tmp/xdg/celtune/celtune.sqlite" && passes=$((passes + 1)) || { fails=$((fails + 1)); echo "FAIL: tune did not write the user's database"; }
# Piped, as in a batch job's log: a line per finished problem on stderr as it
# finishes, and the header first on stdout (a killed job left empty logs).
contains err "[1/1] flce:N8:H16:V200:" "piped tune reports each finished problem on stderr"
head -1 "$tmp/out" | grep -q '^devices: ' && passes=$((passes + 1)) || { fails=$((fails + 1)); echo "FAIL: tune's header is not first"; }
# A relative XDG_DATA_HOME is ignored (the XDG spec): the user's database is
# then HOME's, the same from every folder.
expect 0 "tune with a relative XDG_DATA_HOME" -- bash -c 'c=$(realpath "$0") && cd "$1" && env -u CELTUNE_DB \
  XDG_DATA_HOME=rel HOME="$1/home" "$c" tune --device cpu --shape 8,16,200 --mode fwd --min-runs 3 --max-runs 3' \
  "$celtune" "$tmp"
[ ! -e "$tmp/rel" ] && [ -s "$tmp/home/.local/share/celtune/celtune.sqlite" ] && passes=$((passes + 1)) ||
  { fails=$((fails + 1)); echo "FAIL: a relative XDG_DATA_HOME placed the database"; }
# A relative HOME likewise (it put the database under ./relhome, a different one
# from every folder): with no absolute one, a writer needs --db (exit 3).
expect 3 "tune with only a relative HOME" -- bash -c 'c=$(realpath "$0") && cd "$1" && env -u CELTUNE_DB   -u XDG_DATA_HOME HOME=relhome "$c" tune --device cpu --shape 8,16,200 --mode fwd --min-runs 3 --max-runs 3'   "$celtune" "$tmp"
contains err "neither an absolute HOME nor an absolute XDG_DATA_HOME" "a relative HOME is said to be no HOME"
[ ! -e "$tmp/relhome" ] && passes=$((passes + 1)) || { fails=$((fails + 1)); echo "FAIL: a relative HOME placed the database"; }
expect 0 "lookup finds the user's database" -- env -u CELTUNE_DB XDG_DATA_HOME="$tmp/xdg" "$celtune" lookup --device cpu \
  --shape 8,16,200 --mode fwd --label-smoothing 0.1 --z-loss 1e-4
contains out "exact" "lookup reads the user's database by default"
contains out "$tmp/xdg/celtune/celtune.sqlite" "lookup names the database the entry came from"
# CELTUNE_DB as a bare file name: relative to the working directory, no folder
# to make (create_directories("") once threw an internal error).
expect 0 "tune into CELTUNE_DB=name.sqlite" -- bash -c 'c=$(realpath "$0") && cd "$1" && CELTUNE_DB=rel.sqlite "$c" tune --device cpu \
  --shape 8,16,200 --mode fwd --min-runs 3 --max-runs 3' "$celtune" "$tmp"
test -s "$tmp/rel.sqlite" && passes=$((passes + 1)) || { fails=$((fails + 1)); echo "FAIL: CELTUNE_DB=rel.sqlite not written"; }

# bench on the CPU says what it cannot do instead of printing zeros.
expect 0 "bench on the cpu" -- "$celtune" bench --device cpu --shape 8,16,200 --runs 20
# With no GPU, bench's default (Llama-3-8B at N = 4096…16384) would time for days
# on the CPU: refused, saying how to ask for it.
expect 2 "bench with no GPU refuses days of CPU work" -- env CUDA_VISIBLE_DEVICES= "$celtune" bench
contains err "pass --device cpu" "the refusal says how to time on the CPU anyway"
# tune likewise, before it creates the database.
expect 2 "tune with no GPU refuses days of CPU work" -- \
  env CUDA_VISIBLE_DEVICES= "$celtune" tune --model llama3-8b --tokens 4096 --db "$tmp/cpu-tune.sqlite"
contains err "pass --device cpu to tune" "the refusal says how to tune on the CPU anyway"
# At H = 1 the CE work over the logits is the call: 20·N·V counts, not the GEMMs'
# 2·N·H·V alone (that ran 2 min 19 s at N = 8192 and was not refused at 65536).
expect 2 "bench with no GPU refuses a small-H call of hours" -- \
  env CUDA_VISIBLE_DEVICES= "$celtune" bench --shape 65536,1,65536 --mode fwd
contains err "pass --device cpu" "the small-H refusal says how to time on the CPU anyway"
[ ! -e "$tmp/cpu-tune.sqlite" ] && passes=$((passes + 1)) || { fails=$((fails + 1)); echo "FAIL: a refused tune left a database"; }
expect 3 "bench with every row skipped" -- "$celtune" bench --device cpu --family ce --shape 8,0,200 --runs 20
contains err "nothing was benchmarked" "an empty benchmark is an error, not a table"
contains err "ce rows skipped" "bench says why the ce rows are missing"
expect 2 "bench --family ce --no-ce" -- "$celtune" bench --device cpu --family ce --shape 8,0,200 --no-ce
contains err "--no-ce with --family ce leaves nothing to time" "bench says the flags leave nothing"
if grep -q "L2 flushed" "$tmp/out"; then fails=$((fails + 1)); echo "FAIL: bench on the CPU claims an L2 flush"; else passes=$((passes + 1)); fi
# A bad --config is refused before anything is timed or printed.
expect 2 "bench with a config that is not JSON" -- "$celtune" bench --device cpu --shape 8,16,200 --runs 20 --config '{bad'
# One JSON object a --config: a value in brackets was split at its commas by the
# argument parser (two configs timed from one array; an object cut in half).
expect 2 "bench --config with a JSON array" -- "$celtune" bench --device cpu --shape 8,16,200 --runs 20 --no-unfused \
  --config '[{"block_size":1024},{"block_size":2048}]'
contains err "a config must be a JSON object" "an array is said to be no config"
expect 2 "bench with two configs after one --config" -- "$celtune" bench --device cpu --shape 8,16,200 --runs 20 \
  --no-unfused --config '{}' '{"block_size":512}'
if grep -q "^bench:" "$tmp/err"; then fails=$((fails + 1)); echo "FAIL: bench printed progress before refusing its config"; else passes=$((passes + 1)); fi
# Messages echo their input escaped: no raw invalid byte or escape sequence.
expect 2 "an unknown preset with a 0xff byte and an escape sequence" -- \
  "$celtune" bench --device cpu --model $'ll\xffama\x1b[31m' --tokens 8
contains err 'll\xffama\x1b[31m' "the message shows the bytes escaped"
if LC_ALL=C grep -q $'\xff\|\x1b' "$tmp/err"; then fails=$((fails + 1)); echo "FAIL: a raw byte reached the message"; else passes=$((passes + 1)); fi
expect 2 "a flag value with a 0xff byte" -- "$celtune" bench --runs $'x\xff'
if LC_ALL=C grep -q $'\xff' "$tmp/err"; then fails=$((fails + 1)); echo "FAIL: CLI11's message printed a raw byte"; else passes=$((passes + 1)); fi
# A pinned cuBLASLt algorithm that import would refuse is refused here too.
expect 2 "bench with a gemm_algos entry that is no serialised algorithm" -- "$celtune" bench --device cpu \
  --shape 8,16,200 --runs 20 --config '{"gemm_algos":["x","",""],"gemm_algos_cublaslt":1}'
contains err "not a serialised cuBLASLt algorithm" "bench names the bad gemm_algos entry"
if grep -q "^bench:" "$tmp/err"; then fails=$((fails + 1)); echo "FAIL: bench printed progress before refusing gemm_algos"; else passes=$((passes + 1)); fi
# The same config given twice is timed once; CSV gives the extra memory in bytes.
expect 0 "bench --csv with a config given twice" -- \
  "$celtune" bench --device cpu --shape 8,16,200 --runs 20 --no-unfused --config '{}' --config '{ }' --csv
if [ "$(grep -c '^flce,celtune,' "$tmp/out")" -eq 1 ]; then passes=$((passes + 1)); else
  fails=$((fails + 1)); echo "FAIL: a config given twice gave $(grep -c '^flce,celtune,' "$tmp/out") rows"; fi
contains out "extra bytes" "bench --csv names its memory column in bytes"
if awk -F, 'NR > 1 && $NF !~ /^[0-9]+$/ { bad = 1 } END { exit !bad }' "$tmp/out"; then
  fails=$((fails + 1)); echo "FAIL: bench --csv wrote a size that is not a number of bytes"; sed 's/^/  | /' "$tmp/out"
else passes=$((passes + 1)); fi

# Progress: a piped validate prints each case as it finishes (line by line).
expect 0 "validate progress when piped" -- "$celtune" validate --device cpu --shape 5,16,300 --dtype bf16,fp32 --seed 1
contains err "[1/2]" "validate reports progress per case on stderr"

# A database in a read-only directory (a deployment's read-only mount): lookup
# reads it, tune exits 3 and changes nothing, and no new file appears. Root
# ignores file modes, so as root these commands run as nobody (setpriv).
ro="$tmp/ro"
mkdir "$ro" && cp "$tmp/t.sqlite" "$ro/tuned.sqlite"
chmod 711 "$tmp" && chmod 555 "$ro" && chmod 444 "$ro/tuned.sqlite"
reader=()
rocel=$celtune
if [ "$(id -u)" -eq 0 ]; then
  # nobody cannot reach the build tree when the clone sits in a private (0700)
  # directory such as /root or a mktemp -d folder: run copies of the CLI and
  # libceltune from $tmp (mode 711, the copies world-readable) instead.
  mkdir "$tmp/bin" && cp "$celtune" "$tmp/bin/celtune"
  # The path after "=>", whole: awk's $3 cut a clone in "/tmp/ci 3/" at its space.
  lib=$(ldd "$celtune" | sed -n 's/^[[:space:]]*libceltune[^ ]* => \(.*\) (0x[0-9a-f]*)$/\1/p')
  [ -n "$lib" ] && cp "$lib" "$tmp/bin/"
  chmod 755 "$tmp/bin" && chmod a+rx "$tmp/bin"/*
  rocel="$tmp/bin/celtune"
  reader=(setpriv --reuid=65534 --regid=65534 --clear-groups env LD_LIBRARY_PATH="$tmp/bin")
fi
before=$(md5sum <"$ro/tuned.sqlite")
expect 3 "tune into a read-only directory" -- "${reader[@]}" "$rocel" tune --device cpu --shape 48,16,700 \
  --dtype bf16 --db "$ro/tuned.sqlite" --min-runs 3 --max-runs 3 --force
contains err "is not writable" "the message says the database is not writable"
expect 3 "a new database in a read-only directory" -- "${reader[@]}" "$rocel" tune --device cpu --shape 8,16,200 \
  --db "$ro/new.sqlite"
contains err "folder of database" "the message names the folder that is not writable"
# Export over a read-only file replaces it, keeping 0444 (the mode was set
# before the write and the reopen failed, reported as "disk full?"). As root,
# the copies above run as nobody, for whom modes count.
mkdir "$tmp/rodir" && cp "$tmp/h.sqlite" "$tmp/rodir/h.sqlite" && echo old >"$tmp/rodir/ro.jsonl"
chmod 777 "$tmp/rodir" && chmod 644 "$tmp/rodir/h.sqlite" && chmod 444 "$tmp/rodir/ro.jsonl"
[ "$(id -u)" -eq 0 ] && chown 65534 "$tmp/rodir/ro.jsonl"
expect 0 "export over a read-only file" -- "${reader[@]}" "$rocel" db --db "$tmp/rodir/h.sqlite" export -o "$tmp/rodir/ro.jsonl"
[ "$(stat -c %a "$tmp/rodir/ro.jsonl")" = 444 ] && grep -q '"record"' "$tmp/rodir/ro.jsonl" && passes=$((passes + 1)) ||
  { fails=$((fails + 1)); echo "FAIL: export over a read-only file: mode $(stat -c %a "$tmp/rodir/ro.jsonl")"; }
expect 0 "lookup from a read-only directory" -- "${reader[@]}" "$rocel" lookup --device cpu --shape 48,16,700 \
  --dtype bf16 --mode fwdbwd --db "$ro/tuned.sqlite"
contains out "exact" "the stored config is found in a read-only directory"
[ "$before" = "$(md5sum <"$ro/tuned.sqlite")" ] && [ ! -e "$ro/new.sqlite" ] && [ -z "$(ls "$ro" | grep -v '^tuned.sqlite$')" ] \
  && passes=$((passes + 1)) || { fails=$((fails + 1)); echo "FAIL: the read-only directory changed"; ls -la "$ro"; }
# WAL databases whose -wal has no -shm beside it (a copy of the two files, a
# writer that died closing): one whose log holds no frame is read without
# creating a -shm (lookup created one), in a read-only folder too; one whose log
# holds commits cannot be read there (SQLite needs the -shm for the log), and
# says why instead of "unable to open database file".
mkdir "$tmp/rowal" && cp "$tmp/t.sqlite" "$tmp/rowal/empty.sqlite" && : >"$tmp/rowal/empty.sqlite-wal"
cp "$tmp/t.sqlite" "$tmp/rowal/full.sqlite"
python3 - "$tmp/rowal/full.sqlite" <<'PY'
import os, sqlite3, sys
c = sqlite3.connect(sys.argv[1], isolation_level=None)
c.execute("PRAGMA wal_autocheckpoint = 0")
c.execute("UPDATE best SET spread = spread * 1.5")
os._exit(0)  # no checkpoint: the commit stays in the -wal
PY
rm -f "$tmp/rowal/full.sqlite-shm"
[ -s "$tmp/rowal/full.sqlite-wal" ] && passes=$((passes + 1)) || { fails=$((fails + 1)); echo "FAIL: the WAL set-up left no log"; }
expect 0 "lookup in a WAL database with an empty -wal and no -shm" -- "$celtune" lookup --device cpu --shape 48,16,700 \
  --dtype bf16 --mode fwdbwd --db "$tmp/rowal/empty.sqlite"
contains out "exact" "the stored config is found"
[ ! -e "$tmp/rowal/empty.sqlite-shm" ] && passes=$((passes + 1)) || { fails=$((fails + 1)); echo "FAIL: lookup created a -shm"; }
chmod 555 "$tmp/rowal" && chmod 444 "$tmp/rowal"/*
expect 0 "db list of a WAL database with an empty -wal in a read-only folder" -- "${reader[@]}" "$rocel" db list \
  --db "$tmp/rowal/empty.sqlite"
expect 3 "db list of a WAL database whose -wal holds commits, no -shm, read-only folder" -- "${reader[@]}" "$rocel" \
  db list --db "$tmp/rowal/full.sqlite"
contains err "full.sqlite-shm" "the refusal names the -shm SQLite would need"
[ "$(ls "$tmp/rowal" | tr '\n' ' ')" = "empty.sqlite empty.sqlite-wal full.sqlite full.sqlite-wal " ] \
  && passes=$((passes + 1)) || { fails=$((fails + 1)); echo "FAIL: readers changed the read-only folder"; ls -la "$tmp/rowal"; }
chmod 755 "$tmp/rowal"
# A refused write to a read-only database leaves no -wal/-shm behind, so once it is
# writable again the next write works (the side files, read-only, once kept every
# later writer out).
if [ ${#reader[@]} -gt 0 ]; then
  chmod 777 "$ro" && cp "$tmp/a.sqlite" "$ro/ro.sqlite" && chmod 444 "$ro/ro.sqlite"
  expect 3 "import into a read-only database" -- "${reader[@]}" "$rocel" db --db "$ro/ro.sqlite" import "$tmp/faster.jsonl"
  [ ! -e "$ro/ro.sqlite-wal" ] && [ ! -e "$ro/ro.sqlite-shm" ] && passes=$((passes + 1)) \
    || { fails=$((fails + 1)); echo "FAIL: a refused write left side files"; ls -la "$ro"; }
  chmod 666 "$ro/ro.sqlite"
  expect 0 "import once the database is writable" -- "${reader[@]}" "$rocel" db --db "$ro/ro.sqlite" import "$tmp/faster.jsonl"
  rm -f "$ro/ro.sqlite"*
fi
chmod 755 "$ro" && chmod 700 "$tmp"

# Found probing as a new user (thirtieth session). A NUL byte on a line ended
# nlohmann's input there: the rest of the line was dropped and import said 0.
python3 -c "import sys; a=open(sys.argv[1],'rb').readline().rstrip(b'\n'); open(sys.argv[2],'wb').write(a+b'\0GARBAGE{{{\n')" \
  "$tmp/in.jsonl" "$tmp/nul.jsonl"
expect 2 "import a line with a NUL byte" -- "$celtune" db --db "$tmp/nul.sqlite" import "$tmp/nul.jsonl"
contains err "NUL byte" "the NUL byte is named"
[ ! -e "$tmp/nul.sqlite" ] && passes=$((passes + 1)) || { fails=$((fails + 1)); echo "FAIL: a refused import left a database"; }
# A line is read with a cap (import /dev/zero grew one line until memory ran out).
head -c 2000000 /dev/zero | tr '\0' ' ' >"$tmp/long.jsonl"
expect 2 "import a 2 MB line" -- "$celtune" db --db "$tmp/long.sqlite" import "$tmp/long.jsonl"
contains err "longer than 1 MiB" "the long line is named"
# --devices takes CUDA ordinals, each once: "cpu,cpu" went round the CPU-work
# guard, and two workers on one device time each other.
expect 2 "tune --devices cpu,cpu" -- "$celtune" tune --devices cpu,cpu --shape 8,16,200 --db "$tmp/dev.sqlite"
expect 2 "tune --devices 0,0" -- "$celtune" tune --devices 0,0 --shape 8,16,200 --db "$tmp/dev.sqlite"
contains err "twice" "a repeated device is named"
# A fresh account: import makes the per-user database's folder, as tune does; a
# named path's missing folder is said plainly.
expect 0 "import on a fresh account" -- env -u CELTUNE_DB -u XDG_DATA_HOME HOME="$tmp/fresh" "$celtune" db import "$tmp/in.jsonl"
[ -f "$tmp/fresh/.local/share/celtune/celtune.sqlite" ] && passes=$((passes + 1)) \
  || { fails=$((fails + 1)); echo "FAIL: import on a fresh account made no database"; }
expect 3 "import into a missing folder" -- "$celtune" db --db "$tmp/nodir/x.sqlite" import "$tmp/in.jsonl"
contains err "does not exist" "the missing folder is named"
expect 3 "merge into a missing folder" -- "$celtune" db merge "$tmp/a.sqlite" "$tmp/b.sqlite" -o "$tmp/nodir/m.sqlite"
expect 3 "export into a missing folder" -- "$celtune" db --db "$tmp/a.sqlite" export -o "$tmp/nodir/x.jsonl"
contains err "its folder $tmp/nodir does not exist" "export names the missing folder"
# A UTF-16 file read as "a NUL byte in JSON text", and no more.
head -1 "$tmp/in.jsonl" | python3 -c 'import sys; sys.stdout.buffer.write(sys.stdin.read().encode("utf-16"))' \
  >"$tmp/utf16.jsonl"
expect 2 "import of a UTF-16 file" -- "$celtune" db --db "$tmp/u16.sqlite" import "$tmp/utf16.jsonl"
contains err "a NUL byte in JSON text (JSON is UTF-8 text: a UTF-16 file holds one" "the refusal says what a NUL means"
# A database given where JSON lines belong read as "a NUL byte in JSON text".
"$celtune" db --db "$tmp/a.sqlite" export >"$tmp/a_before.jsonl"
expect 2 "import of an SQLite database" -- "$celtune" db --db "$tmp/a.sqlite" import "$tmp/b.sqlite"
contains err "is an SQLite database, not JSON lines" "the refusal says what the input is"
contains err "db merge" "and names the command that takes it"
"$celtune" db --db "$tmp/a.sqlite" export | cmp -s - "$tmp/a_before.jsonl" && passes=$((passes + 1)) \
  || { fails=$((fails + 1)); echo "FAIL: a refused import changed the database's rows"; }
# Damage the readers used to pass on: an int column past its range (sm_count
# 4294967297 read as 1) and rows whose device was deleted (dropped by the joins).
cp "$tmp/a.sqlite" "$tmp/sm.sqlite"
python3 -c "import sqlite3,sys; c=sqlite3.connect(sys.argv[1]); c.execute('UPDATE devices SET sm_count=4294967297'); c.commit()" "$tmp/sm.sqlite"
expect 3 "export a database with sm_count past int" -- "$celtune" db --db "$tmp/sm.sqlite" export
contains err "out of range" "the damaged column is named"
cp "$tmp/a.sqlite" "$tmp/orphan.sqlite"
python3 -c "import sqlite3,sys; c=sqlite3.connect(sys.argv[1]); c.execute('PRAGMA foreign_keys=OFF'); c.execute('DELETE FROM devices'); c.commit()" "$tmp/orphan.sqlite"
expect 3 "list a database with orphaned rows" -- "$celtune" db --db "$tmp/orphan.sqlite" list
contains err "refers to a missing row" "the orphaned rows are reported"
expect 3 "merge a database with orphaned rows" -- "$celtune" db merge "$tmp/orphan.sqlite" "$tmp/b.sqlite" -o "$tmp/om.sqlite"
[ ! -e "$tmp/om.sqlite" ] && passes=$((passes + 1)) || { fails=$((fails + 1)); echo "FAIL: a refused merge left a database"; }
# The version text and number must agree: the device row is keyed by the text,
# so a record's number 999 stood for every later record of that device.
sed 's/"cublaslt_version":130000/"cublaslt_version":999/' "$tmp/in.jsonl" >"$tmp/ver.jsonl"
expect 2 "import a cublaslt version that contradicts its text" -- "$celtune" db --db "$tmp/ver.sqlite" import "$tmp/ver.jsonl"
contains err "does not match cublaslt_version" "the contradiction is named"
# The same rows export the same bytes whatever order they were imported in.
expect 0 "import a then b" -- "$celtune" db --db "$tmp/ab.sqlite" import "$tmp/in.jsonl"
sed 's/"memory_bytes":85899345920/"memory_bytes":85899345921/' "$tmp/in.jsonl" >"$tmp/in2.jsonl"
"$celtune" db --db "$tmp/ab.sqlite" import "$tmp/in2.jsonl" >/dev/null
"$celtune" db --db "$tmp/ba.sqlite" import "$tmp/in2.jsonl" >/dev/null
"$celtune" db --db "$tmp/ba.sqlite" import "$tmp/in.jsonl" >/dev/null
cmp -s <("$celtune" db --db "$tmp/ab.sqlite" export) <("$celtune" db --db "$tmp/ba.sqlite" export) && passes=$((passes + 1)) \
  || { fails=$((fails + 1)); echo "FAIL: export order depends on import order"; }

# JSON nested 60 000 deep crashed the error path (a recursive dump): refused
# at parse, as an import line, a --config and CELTUNE_CONFIG alike.
python3 -c "d=60000;print('{\"record\":'+'['*d+']'*d+'}')" >"$tmp/deep.jsonl"
deep_cfg=$(python3 -c "d=60000;print('{\"threads\":'+'['*d+']'*d+'}')")
expect 2 "import JSON nested 60 000 deep" -- "$celtune" db --db "$tmp/deep.sqlite" import "$tmp/deep.jsonl"
contains err "nested deeper than" "the nesting is named"
expect 2 "a --config nested 60 000 deep" -- "$celtune" lookup --device cpu --shape 8,16,50 --config "$deep_cfg"
expect 2 "CELTUNE_CONFIG nested 60 000 deep" -- env CELTUNE_CONFIG="$deep_cfg" "$celtune" lookup --device cpu --shape 8,16,50
# A --db whose damage showed only when its rows were read: exit 3, as at open
# (since the readers' integrity_check, at open).
cp "$tmp/a.sqlite" "$tmp/pages.sqlite"
python3 -c "
import sys; b=bytearray(open(sys.argv[1],'rb').read()); b[4096:]=bytes(len(b)-4096); open(sys.argv[1],'wb').write(b)" "$tmp/pages.sqlite"
expect 3 "lookup --db with its pages past the first zeroed" -- "$celtune" lookup --device cpu --shape 8,16,50 --db "$tmp/pages.sqlite"
contains err "pages.sqlite is damaged" "the damaged --db is refused"
# A writer's database through a link to nothing: the summary was printed, then
# the write failed (or went through the link as "created by another process").
ln -s "$tmp/nodir/x.sqlite" "$tmp/dangling.sqlite"
ln -s "$tmp/not-yet.sqlite" "$tmp/dangling2.sqlite"
for l in dangling dangling2; do
  expect 3 "import through a link to nothing ($l)" -- "$celtune" db --db "$tmp/$l.sqlite" import "$tmp/in.jsonl"
  contains err "through a symbolic link" "the link is named ($l)"
  [ ! -s "$tmp/out" ] && passes=$((passes + 1)) || { fails=$((fails + 1)); echo "FAIL: import through a dangling link printed a summary"; }
  expect 3 "merge through a link to nothing ($l)" -- "$celtune" db merge "$tmp/a.sqlite" "$tmp/b.sqlite" -o "$tmp/$l.sqlite"
done
[ ! -e "$tmp/not-yet.sqlite" ] && passes=$((passes + 1)) || { fails=$((fails + 1)); echo "FAIL: a database was made through the link"; }
# C1 controls (U+009B, the 8-bit CSI) are control characters too.
python3 - "$tmp/in.jsonl" "$tmp/c1.jsonl" <<'PY'
import json, sys
r = json.loads(open(sys.argv[1]).readline()); r["device"]["name"] = "gpu\u009b2J"
open(sys.argv[2], "w").write(json.dumps(r) + "\n")
PY
expect 2 "import a device name holding U+009B" -- "$celtune" db --db "$tmp/c1.sqlite" import "$tmp/c1.jsonl"
# Text from a damaged database reaches the terminal escaped (lookup, report),
# and report's SVG stays XML: a database with measurements, whose v_chunk plots
# name the device.
"$celtune" tune --device cpu --shape 64,32,2000 --budget 2 --db "$tmp/m.sqlite" >/dev/null 2>&1
cp "$tmp/m.sqlite" "$tmp/esc.sqlite"
python3 -c "import sqlite3,sys; c=sqlite3.connect(sys.argv[1]); c.execute(\"UPDATE devices SET name='x\x1b[2J'\"); c.commit()" "$tmp/esc.sqlite"
"$celtune" lookup --device cpu --shape 64,32,2000 --db "$tmp/esc.sqlite" >"$tmp/out" 2>"$tmp/err"
"$celtune" report --db "$tmp/esc.sqlite" -o "$tmp/esc-report" >>"$tmp/out" 2>>"$tmp/err"
contains err 'x\x1b[2J' "the name is printed escaped"
! grep -q $'\x1b' "$tmp/out" "$tmp/err" && passes=$((passes + 1)) || { fails=$((fails + 1)); echo "FAIL: a raw ESC reached the terminal"; }
# Not UTF-8 in a stored name: export replaces it and says so.
cp "$tmp/m.sqlite" "$tmp/u8.sqlite"
python3 -c "import sqlite3,sys; c=sqlite3.connect(sys.argv[1]); c.execute(\"UPDATE devices SET name=CAST(x'ff41efbfbf' AS TEXT)\"); c.commit()" "$tmp/u8.sqlite"
expect 0 "export a name that is not UTF-8" -- "$celtune" db --db "$tmp/u8.sqlite" export -o "$tmp/u8.jsonl"
contains err "exported with '?' in place of each" "the replacement is said"
expect 0 "the salvaged export imports" -- "$celtune" db --db "$tmp/u8-back.sqlite" import "$tmp/u8.jsonl"
# C1 text stored before import refused it (or by another tool): salvaged alike.
cp "$tmp/m.sqlite" "$tmp/c1db.sqlite"
python3 -c "import sqlite3,sys; c=sqlite3.connect(sys.argv[1]); c.execute(\"UPDATE devices SET name=CAST(x'78c29b79' AS TEXT)\"); c.commit()" "$tmp/c1db.sqlite"
expect 0 "export a name holding U+009B" -- "$celtune" db --db "$tmp/c1db.sqlite" export -o "$tmp/c1db.jsonl"
contains err "exported with '?' in place of each" "the C1 replacement is said"
expect 0 "report a name that is not UTF-8" -- "$celtune" report --db "$tmp/u8.sqlite" -o "$tmp/u8-report"
python3 -c "
import glob, sys, xml.dom.minidom as m
files = glob.glob(sys.argv[1] + '/*.svg'); assert files
for f in files: m.parse(f)" "$tmp/u8-report" && passes=$((passes + 1)) || { fails=$((fails + 1)); echo "FAIL: report wrote SVG that is not XML"; }
# Names up to NAME_MAX: the temporary's ".XXXXXX" pushed a 250-byte name past it.
long=$(printf 'a%.0s' $(seq 244)).jsonl
expect 0 "export to a 250-byte file name" -- "$celtune" db --db "$tmp/a.sqlite" export -o "$tmp/$long"
long_db=$(printf 'b%.0s' $(seq 240)).sqlite
expect 0 "import into a new database of 247 bytes" -- "$celtune" db --db "$tmp/$long_db" import "$tmp/in.jsonl"
expect 2 "a new database of 248 bytes (no room for -journal)" -- "$celtune" db --db "$tmp/b$long_db" import "$tmp/in.jsonl"

echo "$passes passed, $fails failed"
[ "$fails" -eq 0 ]
