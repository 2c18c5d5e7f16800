#!/usr/bin/env bash
# Runs on the lent GPU machine over binaries built here (scripts/gpu_stage.sh puts
# them in .gpu/): the gpu suite, celtune validate, celtune bench, optional extras.
# Logs go to $OUT; a short summary is printed last.
#   scripts/gpu_run.sh [suite] [validate] [validate-large] [python] [example] [tinylm] [c-example] [bench] [bench-fwd] [sanitize] [tune] [presets] [variants] [ab] [cetable] [ceprof] [ncu] [targets] [hosttime] …
#   GPU_NAME=H200  run nothing (exit 0, saying so) unless nvidia-smi's name for
#                  the GPU contains it: a call named nvidia-h200 may be given an
#                  H100, and an H200 re-tune run there would be the H100's.
set -u
cd "$(dirname "$0")/.."
if [ -n "${GPU_NAME:-}" ]; then
  gpu_name=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)
  case "$gpu_name" in
    *"$GPU_NAME"*) ;;
    *) echo "gpu_run: this is '${gpu_name:-no GPU}', not an $GPU_NAME: nothing run"; exit 0 ;;
  esac
fi
OUT=${OUT:-/tmp/celtune-out}
mkdir -p "$OUT"
export LD_LIBRARY_PATH=$PWD/.gpu/lib:${LD_LIBRARY_PATH:-}
export OMP_WAIT_POLICY=passive
B=.gpu
steps=${*:-suite validate bench}
summary=()
note() { summary+=("$1"); }
# The base build of an A/B (AB_BASE, default .gpu-old), its libraries unpacked
# (gpu_stage.sh gzips a base's): fails where none is staged.
staged_base() {
  base=${AB_BASE:-.gpu-old}
  [ -x "$base/celtune" ] || return 1
  [ -d "$base/lib" ] || tar xzf "$base/lib.tgz" -C "$base"
}
{
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,clocks.max.sm,power.draw,temperature.gpu --format=csv
  $B/celtune devices
} >"$OUT/device.txt" 2>&1
cat "$OUT/device.txt"
note "revision $(cat $B/REVISION 2>/dev/null | tr '\n' ' ')"
# The SM clock and the power draw, sampled every 500 ms while the steps run
# (CLOCKS=0: not): both GPUs run GEMMs at their power limit, so the clock is
# part of what a timing means. Read only; nothing is set.
clock_pid=""
if [ "${CLOCKS:-1}" = 1 ] && command -v nvidia-smi >/dev/null; then
  nvidia-smi --query-gpu=clocks.sm,power.draw --format=csv,noheader,nounits -lms 500 >"$OUT/clocks.csv" 2>/dev/null &
  clock_pid=$!
fi
for s in $steps; do
  case $s in
    suite)
      t0=$(date +%s)
      $B/gpu_tests >"$OUT/gpu_suite.log" 2>&1; rc=$?
      note "gpu suite: exit $rc ($(( $(date +%s) - t0 )) s): $(grep -E 'test cases:' "$OUT/gpu_suite.log" | tail -1)"
      grep -E 'ERROR|FAILED|values:|CAPTURE|with context' -A0 "$OUT/gpu_suite.log" | head -30
      ;;
    validate)
      t0=$(date +%s)
      $B/celtune validate --seed 20261122 >"$OUT/validate.log" 2>&1; rc=$?
      note "validate: exit $rc ($(( $(date +%s) - t0 )) s): $(tail -1 "$OUT/validate.log")"
      grep -A12 '^FAIL' "$OUT/validate.log" | head -40
      ;;
    validate-large)
      # Shapes only the GPU reference can judge: Llama-3-8B and Gemma-2-2B
      # (softcap 30) at N=4096 under the default this device runs (the fused
      # path on sm_90); the tuned configs' full shapes would follow the same path.
      for m in llama3-8b gemma2-2b; do
        t0=$(date +%s)
        $B/celtune validate --model $m --tokens 4096 --seed 20261122 --verbose >"$OUT/validate_$m.log" 2>&1; rc=$?
        note "validate $m N=4096: exit $rc ($(( $(date +%s) - t0 )) s): $(tail -1 "$OUT/validate_$m.log")"
        grep -E '^ +(loss|token_loss|lse|dx|dw|db|truth)' -A1 "$OUT/validate_$m.log" | head -24
      done
      ;;
    python)
      # celtune.torch's pytest suite (CPU and CUDA cases) and the tiny-LM example,
      # from the source tree over the staged libceltune; needs python3 with torch.
      # pytest, when the machine's image lacks it, travels as wheels in .whl/
      # (carry it; the device README says how they are downloaded).
      site=""
      if ! python3 -c 'import pytest' 2>/dev/null && ls .whl/*.whl >/dev/null 2>&1; then
        python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl && site=/tmp/site
      fi
      export PYTHONPATH=$PWD/python${site:+:$site} CELTUNE_LIBRARY=$PWD/$B/lib/libceltune.so
      t0=$(date +%s)
      python3 -m pytest tests/python -q -p no:cacheprovider -rfE --junitxml="$OUT/pytest.xml" >"$OUT/pytest.log" 2>&1; rc=$?
      note "python tests: exit $rc ($(( $(date +%s) - t0 )) s): $(tail -1 "$OUT/pytest.log")"
      grep -E '^(FAILED|ERROR)' "$OUT/pytest.log" | head -20
      ;;
    example)
      export PYTHONPATH=$PWD/python CELTUNE_LIBRARY=$PWD/$B/lib/libceltune.so
      python3 examples/train_tiny_lm.py >"$OUT/train_tiny_lm.txt" 2>&1; note "train_tiny_lm: exit $?"
      cat "$OUT/train_tiny_lm.txt"
      ;;
    tinylm)
      # The tiny-LM example's loss at its own shape (N = 8192, H = 512, V = 32768,
      # bf16; in no shipped database, so the default config runs): the default
      # and a quickly tuned config against the unfused path and the GEMM floor;
      # torch.compile's time (peer_bench.py); and the example's step with each
      # CELTUNE_CHECK_TARGETS mode (sync: one stream synchronisation a call), and with
      # the tuned row; and loss_profile.py's GPU and wall times and kernel table
      # of the loss alone. One log file. (On the H200 the fifty-fourth session saw
      # the example step in 14.12 ms with celtune against 11.47; the fifty-fifth
      # traced it to the check's synchronisation and the host's noise.)
      export PYTHONPATH=$PWD/python CELTUNE_LIBRARY=$PWD/$B/lib/libceltune.so
      shape=8192,512,32768 log=$OUT/tinylm.txt
      tiny() { python3 examples/train_tiny_lm.py 2>&1 | grep -E '^celtune config|^max|step time|^ +(F.cross_entropy|celtune) +[0-9]'; }
      {
        echo "== host CPU: $(lscpu 2>/dev/null | sed -n 's/^Model name: *//p'), $(nproc) cores"
        echo "== loss_profile.py (the loss alone, as the example calls it)"; python3 scripts/loss_profile.py --shape $shape 2>&1
        echo "== celtune bench --shape $shape"; $B/celtune bench --shape $shape 2>&1
        echo "== peer_bench.py (torch.compile)"; python3 scripts/peer_bench.py --shapes $shape 2>&1
        echo "== celtune tune --budget 12"
        $B/celtune tune --shape $shape --db "$OUT/tinylm.sqlite" --budget 12 2>&1 | tail -8
        echo "== celtune bench --tuned"; $B/celtune bench --shape $shape --tuned --db "$OUT/tinylm.sqlite" 2>&1
        for v in async sync 0; do
          echo "== train_tiny_lm.py, CELTUNE_CHECK_TARGETS=$v"
          CELTUNE_CHECK_TARGETS=$v tiny
        done
        echo "== train_tiny_lm.py, the tuned row (CELTUNE_DB)"
        CELTUNE_DB=$OUT/tinylm.sqlite tiny
      } >"$log"
      note "tinylm: $(grep -cE '^== ' "$log") parts, log tinylm.txt"
      cat "$log"
      ;;
    bench)
      $B/celtune bench >"$OUT/bench.txt" 2>"$OUT/bench.err"; note "bench: exit $?"
      tail -5 "$OUT/bench.err"; cat "$OUT/bench.txt"
      ;;
    bench-fwd)
      $B/celtune bench --mode fwd --no-ce >"$OUT/bench_fwd.txt" 2>&1; note "bench fwd: exit $?"; cat "$OUT/bench_fwd.txt"
      ;;
    sanitize)
      # compute-sanitizer over the gpu suite (all but the 2^31-element and the
      # Llama-sized cases, too large for instrumented runs) and over every config
      # of the ce space (no GEMMs). racecheck prints every report and counts those
      # outside cuBLASLt's own GEMM kernels (nvjet*), which we cannot change;
      # --kernel-name-exclude kns=nvjet made the sanitizer stop on a hardware
      # exception on the H100, and so did the include filter (kns=celtune), so
      # every kernel stays instrumented and the reports are filtered instead.
      #   SAN_TOOLS    tools to run (default memcheck racecheck initcheck synccheck)
      #   SAN_RUNS     doctest -tc patterns, one sanitizer run per ';'-separated group,
      #                so that slow groups each get their own SAN_TIMEOUT
      #   SAN_EXCLUDE  doctest -tce patterns (default: the 2^31 and [large] cases)
      #   SAN_CE=0     skip the ce --all-configs runs
      # One log per tool (runs appended, each under a header), gzipped: $OUT
      # brings back only a few files.
      export CELTUNE_POISON_SCRATCH=1
      IFS=';' read -r -a runs <<<"${SAN_RUNS:-*}"
      for tool in ${SAN_TOOLS:-memcheck racecheck initcheck synccheck}; do
        log="$OUT/san_$tool.log"
        targets=("${runs[@]}")
        [ "${SAN_CE:-1}" = 1 ] && [ $tool != synccheck ] && targets+=(ce-all-configs)
        for r in "${targets[@]}"; do
          t0=$(date +%s)
          if [ "$r" = ce-all-configs ]; then
            cmd=($B/celtune validate --device 0 --family ce --shape 37,0,10007 --dtype bf16,fp32 --all-configs --seed 1)
          else
            cmd=($B/gpu_tests -tce="${SAN_EXCLUDE-*2^31*,*[large]*}" -tc="$r")
          fi
          timeout ${SAN_TIMEOUT:-170} compute-sanitizer --tool $tool --print-limit 100000 --error-exitcode 9 \
            "${cmd[@]}" >/tmp/san_run.log 2>&1
          rc=$?
          ours=""
          [ $tool = racecheck ] && ours=" reports outside cuBLASLt: $(grep -E 'Race reported|access at' /tmp/san_run.log | grep -vc nvjet) of $(grep -c 'Race reported' /tmp/san_run.log);"
          note "compute-sanitizer $tool [$r]: exit $rc in $(( $(date +%s) - t0 )) s —$ours $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' /tmp/san_run.log | tail -1); $(grep -E 'test cases:|passed, .* failed' /tmp/san_run.log | tail -1)"
          { echo "==== $tool [$r] exit $rc ===="; cat /tmp/san_run.log; } >>"$log"
        done
        gzip -f "$log"
      done
      ;;
    fused)
      # The fused sm_90 path against the cuBLASLt path, one process per shape so
      # each table has its own floor: Llama-3-8B fwdbwd within 256 and 512 MiB,
      # forward, Gemma-2-2B (softcap 30), and GPT-2's odd vocabulary.
      # The ping-pong rows of both GEMMs, as the defaults and the tuned rows
      # take them: a config that names none runs the cooperative row 0, which
      # read Gemma-2-2B at 1.25x within 512 MiB where the ping-pong rows run
      # 1.00-1.02x (thirty-sixth session).
      fw='"impl":"fused","block_size":2048,"threads":256,"logits_kernel":"128x192x64_2x1x1_pp"'
      # Fused row chunks are whole 256-row clusters of the logits GEMM, no GEMM
      # workspace (as the default and the tuned rows: 1024 rows within 256 MiB,
      # 2048 within 512 at Llama-3-8B); dW on CUTLASS (ping-pong) or cuBLASLt.
      fc() { echo "{\"v_chunk\":0,\"row_chunk\":$1,\"dw_acc_fp32\":false,\"workspace_mib\":0,$fw,\"dw_kernel\":\"${2:-192x128x64_1x2x1_pp}\"}"; }
      for n in ${FUSED_TOKENS:-4096 8192}; do
        $B/celtune bench --shape $n,4096,128256 --no-ce --no-unfused \
          --config "$(fc 1024)" --config "$(fc 1024 cublaslt)" --config "$(fc 2048)" --config "$(fc 2048 cublaslt)" \
          --config "{\"v_chunk\":0,\"row_chunk\":896,\"dw_acc_fp32\":false,\"block_size\":2048,\"threads\":256}" \
          >"$OUT/fused_llama_$n.txt" 2>&1
        note "fused llama3-8b N=$n fwdbwd: exit $?"; cat "$OUT/fused_llama_$n.txt"
      done
      for shape in "--shape 4096,4096,128256" "--shape 16384,4096,128256" "--model gemma2-2b --tokens 4096" \
                   "--shape 8192,768,50257"; do
        $B/celtune bench $shape --mode fwd --no-ce --no-unfused --config "{$fw}" --config '{}' \
          >>"$OUT/fused_fwd.txt" 2>&1
        note "fused fwd $shape: exit $?"
      done
      cat "$OUT/fused_fwd.txt"
      $B/celtune bench --model gemma2-2b --tokens 4096 --no-ce --no-unfused \
        --config "$(fc 512)" --config "$(fc 512 cublaslt)" --config "$(fc 1024)" --config "$(fc 1024 cublaslt)" \
        --config '{"v_chunk":0,"row_chunk":384,"dw_acc_fp32":false}' >"$OUT/fused_gemma.txt" 2>&1
      note "fused gemma2-2b: exit $?"; cat "$OUT/fused_gemma.txt"
      $B/celtune bench --shape 8192,768,50257 --no-ce \
        --config '{}' --config '{"v_chunk":8192}' --config "{$fw}" >"$OUT/fused_gpt2.txt" 2>&1
      note "gpt2 odd V: exit $?"; cat "$OUT/fused_gpt2.txt"
      ;;
    variants)
      # The logits GEMM's table rows side by side (sm90/variants.hpp): each checked
      # against the GPU reference at Llama-3-8B and at Gemma-2-2B with bias and
      # label smoothing, then timed forward (N = 4096, 16384; Gemma-2-2B) and
      # forward+backward (768 and 1536-row chunks, dW on cuBLASLt).
      vs=$(awk '/define CELTUNE_SM90_LOGITS_VARIANTS/,/define CELTUNE_SM90_DW_VARIANTS/' kernels/flce/sm90/variants.hpp |
           grep -v DW_VARIANTS | grep -o '"[^"]*"' | tr -d '"')
      fw() { echo "{\"impl\":\"fused\",\"logits_kernel\":\"$1\"${2:+,\"row_chunk\":$2}}"; }
      fb() { echo "{\"v_chunk\":0,\"row_chunk\":$2,\"dw_acc_fp32\":false,\"impl\":\"fused\",\"block_size\":2048,\"threads\":256,\"dw_kernel\":\"cublaslt\",\"logits_kernel\":\"$1\"}"; }
      fwc=(); fbc=(); fbc2=(); fgc=()
      for v in $vs; do
        $B/celtune validate --model llama3-8b --tokens 4096 --mode fwd fwdbwd --config "$(fb $v 768)" --seed 7 \
          >"$OUT/variants_validate_$v.txt" 2>&1
        note "variant $v validate llama3-8b: exit $? $(tail -1 "$OUT/variants_validate_$v.txt")"
        $B/celtune validate --model gemma2-2b --tokens 2048 --mode fwd fwdbwd --bias --label-smoothing 0.1 \
          --config "$(fb $v 512)" --seed 7 >"$OUT/variants_validate_gemma_$v.txt" 2>&1
        note "variant $v validate gemma2-2b: exit $? $(tail -1 "$OUT/variants_validate_gemma_$v.txt")"
        fwc+=(--config "$(fw $v)"); fbc+=(--config "$(fb $v 768)") fbc2+=(--config "$(fb $v 1536)")
        fgc+=(--config "$(fb $v 1024)")
      done
      for n in 4096 16384; do
        $B/celtune bench --shape $n,4096,128256 --mode fwd --no-ce --no-unfused --runs 30 "${fwc[@]}" \
          >>"$OUT/variants_fwd.txt" 2>&1; note "variants fwd N=$n: exit $?"
      done
      $B/celtune bench --model gemma2-2b --tokens 4096 --mode fwd --no-ce --no-unfused --runs 30 "${fwc[@]}" \
        >>"$OUT/variants_fwd.txt" 2>&1; note "variants fwd gemma2-2b: exit $?"
      for n in 4096 8192; do
        $B/celtune bench --shape $n,4096,128256 --no-ce --no-unfused "${fbc[@]}" "${fbc2[@]}" \
          >>"$OUT/variants_fwdbwd.txt" 2>&1; note "variants fwdbwd N=$n: exit $?"
      done
      $B/celtune bench --model gemma2-2b --tokens 4096 --no-ce --no-unfused "${fgc[@]}" \
        >>"$OUT/variants_fwdbwd.txt" 2>&1; note "variants fwdbwd gemma2-2b: exit $?"
      cat "$OUT/variants_fwd.txt" "$OUT/variants_fwdbwd.txt"
      ;;
    peers)
      # celtune against the peers (scripts/peer_bench.py, one process, the same
      # method): PEERS (default torch.compile alone; "compile,celtune,liger,cce,
      # cce-exact,quack,floor" for all), PEERS_SHAPES, PEERS_CE_SHAPES,
      # PEERS_MODES, PEERS_RUNS, PEERS_QUEUED=1 (--queued: GPU work ahead of
      # each timed run, as a training step has). Peers missing from the machine's image travel
      # as wheels in .whl/ (carry it), unpacked into PEERS_SITE (default
      # /tmp/peers/site-packages: QuACK fingerprints the source of any function
      # outside a folder of that name as its own, and refused the CUTLASS DSL's
      # module globals) with python3 -m zipfile, not pip: the CUTLASS DSL's three
      # wheels share one package folder, which pip --target replaces where
      # unzipping merges, and a folder an earlier call filled on the same warm
      # machine (its 88 MB wheel, too large to carry with the rest) keeps what
      # it holds. The DSL's .pth file is not read from PYTHONPATH: its folder
      # is added here.
      site=${PEERS_SITE:-/tmp/peers/site-packages}
      mkdir -p "$site"
      for w in .whl/*.whl; do [ -e "$w" ] && python3 -m zipfile -e "$w" "$site"; done
      pypath=$PWD/python:$site
      [ -d "$site/nvidia_cutlass_dsl/dsl_packages" ] && pypath=$pypath:$site/nvidia_cutlass_dsl/dsl_packages
      PYTHONPATH=$pypath CELTUNE_LIBRARY=$PWD/$B/lib/libceltune.so PYTHONUNBUFFERED=1 \
        timeout ${PEERS_TIMEOUT:-400} python3 scripts/peer_bench.py --peers "${PEERS:-compile}" \
        ${PEERS_SHAPES:+--shapes $PEERS_SHAPES} ${PEERS_CE_SHAPES:+--ce-shapes $PEERS_CE_SHAPES} \
        ${PEERS_MODES:+--modes $PEERS_MODES} ${PEERS_RUNS:+--runs $PEERS_RUNS} ${PEERS_QUEUED:+--queued} --json "$OUT/peers.json" \
        >"$OUT/peers.txt" 2>"$OUT/peers.err"; note "peers (${PEERS:-compile}): exit $?"
      tail -3 "$OUT/peers.err"; cat "$OUT/peers.txt"
      ;;
    lookup)
      # The shipped database beside libceltune, as a deployment finds it.
      for n in 4096 6000; do
        $B/celtune lookup --model llama3-8b --tokens $n --mode fwdbwd >>"$OUT/lookup.txt" 2>&1
      done
      CELTUNE_LOG=1 $B/celtune lookup --model gemma2-2b --tokens 16384 --mode fwdbwd >>"$OUT/lookup.txt" 2>&1
      note "lookup: $(grep -E '^tag' "$OUT/lookup.txt" | tr '\n' ' ')"
      cat "$OUT/lookup.txt"
      ;;
    unaligned)
      # Issue 13's unaligned-V bar: the default config at GPT-2's V = 50257
      # against V rounded up to a multiple of 128 (50304), same N and H, in
      # UNALIGNED_ROUNDS interleaved rounds (default 6) of UNALIGNED_RUNS timed
      # runs (default 40): one bench each moves 3-9% either way at these shapes
      # (scripts/unaligned_summary.py reads the bar off the rounds' medians).
      : >"$OUT/unaligned.csv"
      for r in $(seq ${UNALIGNED_ROUNDS:-6}); do
        for N in 8192 32768; do
          for V in 50257 50304; do
            $B/celtune bench --shape $N,768,$V --mode fwdbwd,fwd --no-ce --no-unfused --runs ${UNALIGNED_RUNS:-40} --csv \
              >>"$OUT/unaligned.csv" 2>>"$OUT/unaligned.err" || note "unaligned: bench $N,768,$V failed"
          done
        done
      done
      python3 scripts/unaligned_summary.py "$OUT/unaligned.csv" | tee "$OUT/unaligned.txt"
      note "unaligned: $(tail -1 "$OUT/unaligned.txt")"
      # And tuned at each V (same budget as the shipped databases): the bar holds
      # for tuned times too. UNALIGNED_TUNE=0 skips it.
      if [ "${UNALIGNED_TUNE:-1}" = 1 ]; then
        t0=$(date +%s)
        for V in 50257 50304; do
          $B/celtune tune --hidden 768 --vocab $V --tokens 8192,32768 --budget ${PRESET_BUDGET:-10} \
            --db "$OUT/unaligned.sqlite" >>"$OUT/unaligned_tuned.txt" 2>&1
        done
        note "unaligned tuned: $(( $(date +%s) - t0 )) s"
        cat "$OUT/unaligned_tuned.txt"
      fi
      ;;
    cesweep)
      # ce configs at few and many rows, for the ce default: the device default
      # (no --config), the portable two-pass default (rows read twice; split into
      # segments at few rows), and the fused cluster kernel (rows held in shared
      # memory by a cluster of 1…8 blocks; one launch at ≤ 512 rows) at two
      # tile widths, and the spread kernel (one tile of 2048 or 4096 a block, more
      # than 8 a row, at ≤ 512 rows; bench skips it, saying why, where the grid is
      # too large to be resident), both modes.
      #   CE_VOCABS, CE_TOKENS, CE_RUNS override the shapes and the timed runs.
      seg() { echo $(( (($1 + $2 - 1) / $2 + 255) / 256 * 256 )); }  # V split in $2, rounded up to 256
      for V in ${CE_VOCABS:-32000 50257 128256 256000}; do
        t0=$(date +%s)
        cf=(--config '{"block_size":4096,"threads":256}')
        for sp in 4 16; do
          [ $(seg $V $sp) -ge 4096 ] && cf+=(--config "{\"block_size\":4096,\"threads\":256,\"v_chunk\":$(seg $V $sp)}")
        done
        for sp in 1 2 4 8; do
          [ $(( $(seg $V $sp) * 2 )) -gt 200000 ] && continue  # bf16 segment beyond shared memory
          [ $sp -gt 1 ] && [ $(seg $V $sp) -ge $V ] && continue
          for c in 2048:256 4096:256; do
            vc=$(seg $V $sp); [ $sp = 1 ] && vc=0
            cf+=(--config "{\"block_size\":${c%%:*},\"threads\":${c##*:},\"v_chunk\":$vc,\"fused\":true}")
          done
        done
        spread=()
        for t in 2048 4096; do
          [ $(( (V + t - 1) / t )) -gt 8 ] && spread+=(--config "{\"block_size\":$t,\"threads\":256,\"v_chunk\":$t,\"fused\":true}")
        done
        for N in ${CE_TOKENS:-1 16 256 4096 32768}; do
          $B/celtune bench --family ce --shape $N,0,$V --mode fwd,fwdbwd --runs ${CE_RUNS:-30} >>"$OUT/cesweep_$V.txt" 2>&1
          # The spread kernel runs in one launch, so only up to 512 rows
          # (kCeOneLaunchTokens); bench refuses the whole call past that.
          more=("${cf[@]}"); [ "$N" -le 512 ] && more+=("${spread[@]}")
          $B/celtune bench --family ce --shape $N,0,$V --mode fwd,fwdbwd --runs ${CE_RUNS:-30} "${more[@]}" >>"$OUT/cesweep_$V.txt" 2>&1 ||
            note "cesweep: bench $N,0,$V with the configs failed: $(tail -1 "$OUT/cesweep_$V.txt")"
        done
        note "cesweep V=$V: $(( $(date +%s) - t0 )) s"
      done
      ;;
    cetable)
      # ce's device default against its floor, each shape a fresh bench process
      # (inside one process, after other rows have allocated and freed memory,
      # the same kernels ran up to 30% slower): issue 13's table of x floor by
      # vocabulary, mode and token count (scripts/ce_table.py).
      #   CE_VOCABS, CE_TOKENS, CE_RUNS override the shapes and the timed runs.
      t0=$(date +%s)
      : >"$OUT/cetable.csv"
      for V in ${CE_VOCABS:-32000 50257 128256 256000}; do
        for N in ${CE_TOKENS:-1 4 16 64 256 512 1024 2048 4096 8192 16384 32768}; do
          $B/celtune bench --family ce --shape $N,0,$V --mode fwd,fwdbwd --runs ${CE_RUNS:-30} --csv \
            >>"$OUT/cetable.csv" 2>>"$OUT/cetable.err" || note "cetable: bench $N,0,$V failed"
        done
      done
      note "cetable: $(( $(date +%s) - t0 )) s"
      python3 scripts/ce_table.py "$OUT/cetable.csv" | tee "$OUT/cetable.txt"
      ;;
    ceprof)
      # Where the ce kernels' time goes (ncu, clocks as found): time, DRAM, issue
      # slots, instructions and the stall reasons of each kernel whose name
      # matches CEPROF_KERNELS (default: the fused one), two launches after four
      # warm-ups, at each of CEPROF_SHAPES (N,0,V) in CEPROF_MODE (default
      # forward+backward). The thirty-ninth session's pairs and chains came from
      # this profile's "wait" and "short scoreboard" stalls.
      m=gpu__time_duration.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed,sm__inst_executed.sum
      m=$m,smsp__issue_active.avg.pct_of_peak_sustained_active,sm__warps_active.avg.pct_of_peak_sustained_active
      m=$m,sm__inst_executed_pipe_xu.avg.pct_of_peak_sustained_active,lts__ltcfabric2ltc_cycles_active.avg.pct_of_peak_sustained_elapsed
      for r in barrier wait long_scoreboard short_scoreboard mio_throttle math_pipe_throttle not_selected selected no_instruction; do
        m=$m,smsp__average_warp_latency_issue_stalled_$r.ratio
      done
      : >"$OUT/ceprof.txt"
      for shape in ${CEPROF_SHAPES:-8192,0,256000 4096,0,50257 8192,0,128256}; do
        echo "## $shape ${CEPROF_MODE:-fwdbwd}" >>"$OUT/ceprof.txt"
        ncu --clock-control none -k regex:"${CEPROF_KERNELS:-cluster_kernel}" --launch-skip 4 --launch-count 2 \
          --metrics "$m" $B/celtune bench --family ce --shape "$shape" --mode "${CEPROF_MODE:-fwdbwd}" --runs 20 \
          >>"$OUT/ceprof.txt" 2>&1 || note "ceprof: ncu at $shape failed"
      done
      note "ceprof: $(grep -c gpu__time_duration "$OUT/ceprof.txt") kernels profiled"
      ;;
    cencu)
      # Kernel time (ncu, clocks as found) of the ce kernels at a few rows, spread
      # (tiles of 2048, one a block) against the cluster (8 segments), inside the
      # bench that times them end to end: V = 128256, N = 1 and 4, both modes.
      for N in 1 4; do
        for mode in fwd fwdbwd; do
          for c in '{"block_size":2048,"threads":256,"v_chunk":2048,"fused":true}' \
            '{"block_size":2048,"threads":256,"v_chunk":16128,"fused":true}'; do
            echo "## N=$N $mode $c" >>"$OUT/cencu.txt"
            ncu --clock-control none -k regex:"spread_kernel|cluster_kernel" --launch-skip 3 --launch-count 10 \
              --metrics gpu__time_duration.sum $B/celtune bench --family ce --shape $N,0,128256 --mode $mode \
              --runs 20 --config "$c" 2>&1 | grep -E "gpu__time_duration|^ce " >>"$OUT/cencu.txt"
          done
        done
      done
      note "cencu: $(grep -c gpu__time_duration "$OUT/cencu.txt") kernels profiled"
      ;;
    sweep)
      # Config grid for choosing defaults: ce tile widths and thread counts, fused
      # or not; flce one pass vs two, accumulation in fp32 vs the output dtype.
      ce=()
      for c in 2048:256 4096:512 8192:1024; do
        ce+=(--config "{\"block_size\":${c%%:*},\"threads\":${c##*:}}")
      done
      for c in 8192:512 16384:512 8192:1024 16384:1024; do
        ce+=(--config "{\"block_size\":${c%%:*},\"threads\":${c##*:},\"fused\":true}")
      done
      $B/celtune bench --family ce --shape 8192,0,128256 --mode fwd,fwdbwd "${ce[@]}" >"$OUT/sweep_ce.txt" 2>&1
      note "sweep ce: exit $?"; cat "$OUT/sweep_ce.txt"
      fl=()
      for c in '"v_chunk":0,"row_chunk":896,"dw_acc_fp32":false' '"v_chunk":0,"row_chunk":896,"dw_acc_fp32":false,"fused":true' \
               '"v_chunk":0,"row_chunk":2048,"dw_acc_fp32":false' '"v_chunk":0,"row_chunk":4096,"dw_acc_fp32":false' \
               '"v_chunk":16384,"row_chunk":4096,"dw_acc_fp32":false'; do
        fl+=(--config "{$c,\"block_size\":8192,\"threads\":256}")
      done
      $B/celtune bench --shape 16384,4096,128256 --no-ce --no-unfused "${fl[@]}" >"$OUT/sweep_flce.txt" 2>&1
      note "sweep flce: exit $?"; cat "$OUT/sweep_flce.txt"
      $B/celtune bench --shape 16384,4096,128256 --mode fwd --no-ce --no-unfused \
        --config '{"v_chunk":0,"row_chunk":896,"block_size":2048}' --config '{"v_chunk":0,"row_chunk":2048,"block_size":2048}' \
        --config '{"v_chunk":0,"row_chunk":4096,"block_size":2048}' >"$OUT/sweep_fwd.txt" 2>&1
      note "sweep fwd: exit $?"; cat "$OUT/sweep_fwd.txt"
      ;;
    tune)
      # The tune issue's bar: llama3-8b at three token counts, both modes, guided.
      t0=$(date +%s)
      $B/celtune tune --model llama3-8b --tokens 4096,8192,16384 --db "$OUT/tuned.sqlite" >"$OUT/tune.txt" 2>&1
      note "tune llama3-8b 4096,8192,16384 fwd+fwdbwd guided: exit $? in $(( $(date +%s) - t0 )) s"
      cat "$OUT/tune.txt"
      $B/celtune validate --from-db "$OUT/tuned.sqlite" >"$OUT/validate_db.txt" 2>&1
      note "validate --from-db: exit $?: $(tail -1 "$OUT/validate_db.txt")"
      ;;
    exhaustive)
      # Exhaustive over the same database: guided's measurements are reused, the
      # rest measured, so both searches are judged on the same numbers.
      note "exhaustive starts at $(date -u +%Y-%m-%dT%H:%M:%SZ) (rows created before were guided's)"
      t0=$(date +%s)
      $B/celtune tune --model llama3-8b --tokens ${EXH_TOKENS:-4096} --strategy exhaustive --db "$OUT/tuned.sqlite" \
        >"$OUT/exhaustive.txt" 2>&1
      note "tune exhaustive: exit $? in $(( $(date +%s) - t0 )) s"
      cat "$OUT/exhaustive.txt"
      ;;
    c-example)
      LD_LIBRARY_PATH=$PWD/.gpu/lib $B/flce_example >"$OUT/example.txt" 2>&1
      note "example: exit $?: $(tail -1 "$OUT/example.txt")"
      cat "$OUT/example.txt"
      ;;
    presets)
      # The shipped database: every model preset at N = 1024…32768, forward+
      # backward (the training step), guided with a budget of 12 evaluations,
      # the staged shipped database's winners (the previous tune) measured first.
      #   PRESET_MODELS, PRESET_TOKENS, PRESET_MODES, PRESET_BUDGET, PRESET_RUNS
      #   override the defaults; PRESET_TAG names the output (several calls
      #   share one GPU's rows: merge their JSONL with celtune db import).
      # The JSONL is named after the GPU, as db/tuned/ names it.
      t0=$(date +%s)
      gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1 | tr 'A-Z ' 'a-z-')
      # Each model's rows are exported as soon as it is tuned, so a call cut
      # short by its time limit still brings back what it finished; a model
      # that would start after PRESET_DEADLINE seconds is left for the next call.
      for m in ${PRESET_MODELS:-llama3-8b llama3-70b qwen2.5-7b gemma2-2b mistral-7b}; do
        if [ $(( $(date +%s) - t0 )) -gt ${PRESET_DEADLINE:-100000} ]; then note "tune $m skipped (deadline)"; continue; fi
        for mode in ${PRESET_MODES:-fwdbwd}; do
          $B/celtune tune --model $m --tokens ${PRESET_TOKENS:-1024..32768} --mode $mode --prior $B/lib/celtune.sqlite \
            --budget ${PRESET_BUDGET:-12} --max-runs ${PRESET_RUNS:-10} --db "$OUT/presets.sqlite" >>"$OUT/presets.txt" 2>&1 ||
            note "tune $m $mode failed"
        done
        $B/celtune db --db "$OUT/presets.sqlite" export --jsonl -o "$OUT/$gpu${PRESET_TAG:+-$PRESET_TAG}.jsonl"
        note "tuned $m (${PRESET_MODES:-fwdbwd}): $(( $(date +%s) - t0 )) s"
      done
      if [ "${PRESET_VALIDATE:-1}" = 1 ]; then
        $B/celtune validate --from-db "$OUT/presets.sqlite" >"$OUT/validate_presets.txt" 2>&1
        note "validate --from-db presets: exit $?: $(tail -1 "$OUT/validate_presets.txt")"
      fi
      rm -f "$OUT/presets.sqlite"*
      grep -E '^flce' "$OUT/presets.txt"
      ;;
    ab)
      # Two staged builds against each other: AB_BASE (default .gpu-old, the
      # base, staged with `scripts/gpu_stage.sh .gpu-old` at the base commit)
      # against .gpu, each bench a fresh process, the builds interleaved for
      # AB_ROUNDS rounds (default 2) so drift over the call reaches both alike,
      # in the order A B, B A, A B, ...: always A first left a steady 0.3-0.6% on
      # B's long cases where the kernels differed only in scheduling (8167981).
      #   AB_CASES   ';'-separated `celtune bench` argument lists (default: ce
      #              forward and forward+backward at the shapes the ce bars and
      #              the split-statistics forward turn on)
      #   AB_RUNS    timed runs a measurement (default 30)
      if ! staged_base; then note "ab: no staged base at $base"; continue; fi
      IFS=';' read -r -a cases <<<"${AB_CASES:---family ce --mode fwd --shape 1024,0,32000;--family ce --mode fwd --shape 512,0,50257;--family ce --mode fwd --shape 1024,0,50257;--family ce --mode fwd --shape 512,0,128256;--family ce --mode fwd --shape 1024,0,32000 --dtype fp16;--family ce --mode fwd,fwdbwd --shape 4096,0,32000;--family ce --mode fwd,fwdbwd --shape 32768,0,32000;--family ce --mode fwd,fwdbwd --shape 2048,0,128256;--family ce --mode fwd,fwdbwd --shape 32768,0,128256;--family ce --mode fwd,fwdbwd --shape 1024,0,256000;--family ce --mode fwd,fwdbwd --shape 32768,0,256000}"
      t0=$(date +%s)
      : >"$OUT/ab.csv"
      for round in $(seq ${AB_ROUNDS:-2}); do
        order=("$base" "$B")
        [ $((round % 2)) -eq 0 ] && order=("$B" "$base")
        for build in "${order[@]}"; do
          echo "## $(paste -sd '' $build/REVISION 2>/dev/null)@$build $round" >>"$OUT/ab.csv"
          for c in "${cases[@]}"; do
            # shellcheck disable=SC2086  # each case is a list of arguments
            LD_LIBRARY_PATH=$PWD/$build/lib $build/celtune bench $c --runs ${AB_RUNS:-30} --csv \
              >>"$OUT/ab.csv" 2>>"$OUT/ab.err" || note "ab: $build bench $c failed"
          done
        done
      done
      note "ab: ${#cases[@]} cases x ${AB_ROUNDS:-2} rounds in $(( $(date +%s) - t0 )) s"
      python3 scripts/ab_summary.py "$OUT/ab.csv" | tee "$OUT/ab.txt"
      ;;
    ncu)
      # Each named kernel's time under `celtune bench` (ncu's gpu__time_duration,
      # at ncu's base clocks with caches flushed: it compares kernels, not steps).
      #   NCU_KERNELS  a regex of kernel names (default: the fused path's target
      #                terms, its scaled_dz_rows, CUB's sort)
      #   NCU_CASES    ';'-separated `celtune bench` argument lists (default:
      #                Mistral-7B N = 1024 and Llama-3-8B N = 8192, the default config)
      IFS=';' read -r -a cases <<<"${NCU_CASES:---model mistral-7b --tokens 1024;--model llama3-8b --tokens 8192}"
      i=0
      for c in "${cases[@]}"; do
        i=$((i + 1))
        # shellcheck disable=SC2086  # each case is a list of arguments
        ncu --kernel-name "regex:${NCU_KERNELS:-target_|scaled_dz|Radix}" --metrics gpu__time_duration.sum \
          --launch-count 40 --csv $B/celtune bench $c --runs 20 --no-ce --no-unfused >"$OUT/ncu_$i.csv" 2>"$OUT/ncu_$i.err"
        note "ncu [$c]: exit $? — $(python3 scripts/ncu_summary.py "$OUT/ncu_$i.csv")"
      done
      ;;
    targets)
      # What the targets' distribution costs (scripts/probe/target_cost.py):
      # uniform, Zipf and Zipf with counted padding, forward+backward through
      # the package with each build's built-in default (its libraries copied
      # without the database beside them); .gpu alone, or AB_BASE (default
      # .gpu-old, when staged) and .gpu in the order A B B A.
      #   TARGET_SHAPES  N,H,V ... (default: Mistral-7B N = 1024 and 4096,
      #                  Llama-3-8B N = 4096 and 16384)
      builds=("$B")
      staged_base && builds=("$base" "$B" "$B" "$base")
      : >"$OUT/target_cost.csv"
      for b in "${builds[@]}"; do
        lib=/tmp/target_cost_lib/$b
        mkdir -p "$lib" && cp -P "$b"/lib/libceltune.so* "$b"/lib/libgomp* "$lib/" 2>/dev/null
        # shellcheck disable=SC2086  # the shapes are a list
        PYTHONPATH=$PWD/python CELTUNE_LIBRARY=$lib/libceltune.so python3 scripts/probe/target_cost.py \
          "$(paste -sd '' "$b/REVISION")@$b" ${TARGET_SHAPES:-1024,4096,32768 4096,4096,32768 4096,4096,128256 16384,4096,128256} \
          --runs 20 >>"$OUT/target_cost.csv" 2>>"$OUT/target_cost.err" || note "targets: $b failed"
      done
      python3 scripts/probe/target_cost.py --summarize "$OUT/target_cost.csv" | tee "$OUT/target_cost.txt"
      note "targets: ${#builds[@]} runs"
      ;;
    hosttime)
      # Where a celtune.torch step's time goes (scripts/probe/host_time.py): the
      # host's layers with the GPU kept busy, and the GPU's kernels, at the
      # default shapes or HOST_SHAPES (N,H,V ...).
      t0=$(date +%s)
      # shellcheck disable=SC2086  # the shapes are a list
      PYTHONPATH=$PWD/python CELTUNE_LIBRARY=$PWD/$B/lib/libceltune.so python3 scripts/probe/host_time.py \
        ${HOST_SHAPES:-} >"$OUT/host_time.txt" 2>"$OUT/host_time.err"; rc=$?
      note "hosttime: exit $rc ($(( $(date +%s) - t0 )) s)"
      grep -E '^(machine|N=)|whole|C call' "$OUT/host_time.txt"
      ;;
    *) echo "unknown step $s" ;;
  esac
done
if [ -n "$clock_pid" ]; then
  kill "$clock_pid" 2>/dev/null; wait "$clock_pid" 2>/dev/null
  note "$(python3 scripts/clock_summary.py "$OUT/clocks.csv")"
  rm -f "$OUT/clocks.csv"
fi
# The device tool brings back at most 8 files from $OUT and leaves the rest
# out, in an order of its own: the thirty-fourth session lost a re-tune's JSONL
# that way. So past 6 files everything but the JSONL (the tuned rows) goes
# into one logs.tgz, and the summary says so.
# A file this script is writing its own output to (a caller's `>$OUT/run.txt`)
# stays apart too: packed and removed, it lost the summary printed below.
if [ "$(find "$OUT" -maxdepth 1 -type f | wc -l)" -gt 6 ]; then
  (cd "$OUT" && find . -maxdepth 1 -type f ! -name '*.jsonl' -printf '%P\n' | while read -r f; do
    [ "$f" -ef /proc/$$/fd/1 ] || [ "$f" -ef /proc/$$/fd/2 ] || echo "$f"
  done | tar czf logs.tgz -T - --remove-files) &&
    note "logs packed into logs.tgz (the device tool returns 8 files at most); kept apart: $(cd "$OUT" && ls *.jsonl 2>/dev/null | tr '\n' ' ')"
fi
echo
echo "==== summary ===="
printf '%s\n' "${summary[@]}"
