#!/usr/bin/env bash
# Builds the libFuzzer targets (clang, with AddressSanitizer and UBSan) and runs them.
#   scripts/fuzz.sh smoke            a short run of each (CI): 20000 executions
#   scripts/fuzz.sh full [RUNS]      each for RUNS executions (default 1000000);
#                                    prints executions, time and coverage per target
# Exit status: non-zero if a target crashed or a sanitizer reported.
set -euo pipefail
cd "$(dirname "$0")/.."
mode=${1:-smoke}
runs=${2:-1000000}
[ "$mode" = smoke ] && runs=20000
out=${FUZZ_DIR:-build-fuzz}
mkdir -p "$out/corpus"
python3 scripts/embed_text.py db/schema.sql "$out/schema_sql.hpp" kSchemaSql
mkdir -p "$out/db" && cp "$out/schema_sql.hpp" "$out/db/schema_sql.hpp"
CXX=${CXX:-clang++}
# The smoke compiles at -O0 (its 20000 runs take seconds either way; the
# builds were most of its time), full runs at -O1 as libFuzzer advises.
opt=-O1
[ "$mode" = smoke ] && opt=-O0
flags=(-std=c++20 "$opt" -g -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined -I. -Isrc -I"$out")
model=(src/model/types.cpp src/model/problem.cpp src/model/config.cpp src/model/device.cpp src/model/host_case.cpp)
build() {  # name sources...
  local name=$1; shift
  local newest
  newest=$(ls -t "tests/fuzz/$name.cpp" "$@" src/model/*.hpp db/*.hpp db/schema.sql src/cli/*.hpp | head -1)
  [ "$out/$name" -nt "$newest" ] || "$CXX" "${flags[@]}" "tests/fuzz/$name.cpp" "$@" -o "$out/$name" -lsqlite3
}
# The three builds are independent single-process clang runs (most of the smoke's
# time): side by side, so they use every core CI has.
pids=()
build fuzz_import "${model[@]}" db/records.cpp db/store.cpp & pids+=($!)
build fuzz_config "${model[@]}" & pids+=($!)
build fuzz_cli "${model[@]}" src/cli/problem_args.cpp & pids+=($!)
for pid in "${pids[@]}"; do wait "$pid"; done
# Seeds: a real export line, real configs, real command lines.
printf '%s\n' '{"block_size":2048,"v_chunk":8192,"row_chunk":1024,"threads":256,"dw_acc_fp32":false}' >"$out/seed_config"
head -3 db/tuned/*.jsonl >"$out/seed_import"
# Issue 12: a record whose median is -1 (it used to be stored and win every merge).
head -1 db/tuned/*.jsonl | sed 's/"median_ms":[0-9.e-]*/"median_ms":-1/' >>"$out/seed_import"
printf -- '--shape\0004096,4096,128256\0--dtype\000bf16,fp32\0--label-smoothing\0000.1' >"$out/seed_cli"
# Issue 12: a shape whose N x V overflows int64.
printf -- '\0--shape\0004611686018427387904,16,500' >>"$out/seed_cli"
status=0
rm -f "$out/fuzz_import.sqlite"*  # fuzz_import's database (every input rolled back)
for t in fuzz_import fuzz_config fuzz_cli; do
  seed=$out/seed_${t#fuzz_}
  mkdir -p "$out/corpus/$t"
  cp "$seed" "$out/corpus/$t/seed"
  log=$out/$t.log
  start=$(date +%s)
  if ASAN_OPTIONS=detect_leaks=1 CELTUNE_FUZZ_DB="$out/fuzz_import.sqlite" \
       "$out/$t" -runs="$runs" -max_len=4096 -timeout=10 -print_final_stats=1 \
       -artifact_prefix="$out/" \
       "$out/corpus/$t" >"$log" 2>&1; then
    execs=$(grep -E 'stat::number_of_executed_units' "$log" | awk '{print $2}')
    cov=$(grep -oE 'cov: [0-9]+' "$log" | tail -1)
    echo "$t: $execs executions in $(( $(date +%s) - start )) s, $cov, no crash"
  else
    status=1
    echo "$t: FAILED, see $log"
    grep -E 'ERROR|SUMMARY|==[0-9]+==' "$log" | head -20
  fi
done
exit $status
