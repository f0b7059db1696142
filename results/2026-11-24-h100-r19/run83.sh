#!/usr/bin/env bash
# The next device run: main with branches laid over it (the files under .ab-base/combo/,
# as run81.sh), by stage, from copies of the tree under build/. Start it in a session of
# its own, or the device call's end kills it:
#   mkdir -p build && setsid nohup bash results/2026-11-24-h100-r19/run83.sh build/run83 STAGE... >build/run83.out 2>&1 </dev/null &
#   smoke     under compute-sanitizer memcheck, 90 s each: step 13 with a KV cache (pages of
#             16 and 256 keys, per-sequence lengths) and step 14's backward with
#             FA2_DETERMINISTIC=1; a fault or hang drops that step from make test
#   test      make test in build/combo, with MUTANT_STEPS (default "13 14") beside it
#   compare   make compare SHAPES=bench (the README's H100 table: steps 10-12 rebuilt)
#   backward  make compare SHAPES=backward, then again with FA2_DETERMINISTIC=1 (the dQ
#             atomics against the deterministic splits, each against torch in its own rounds)
#   decode    make compare SHAPES=decode
#   train     python/train.py with step 14 on the GPU, its loss CSV
# usage: bash results/2026-11-24-h100-r19/run83.sh LOGDIR STAGE...  (on the GPU machine, from the repo root)
set -uo pipefail
cd "$(dirname "$0")/../.."
log=$(realpath -m "${1:?usage: run83.sh LOGDIR STAGE...}"); shift
mkdir -p "$log"
stage() { echo "$(date -u +%T) $*" | tee -a "$log/progress.txt"; }
stage "start on $(nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader)"
rm -rf build/combo && mkdir -p build/combo
tar --exclude=./build --exclude=./.ab-base -cf - . | tar -xf - -C build/combo
[ -d .ab-base/combo ] && cp -r .ab-base/combo/. build/combo/
cd build/combo
make -s -j16 all >"$log/build.log" 2>&1; stage "built: exit $?"
compare_set() { # compare_set SET NAME [ENV=VALUE]: make compare SHAPES=SET, its CSVs into $log/NAME
  rm -f results/compare-*.csv results/ceiling-*.csv results/bandwidth-*.csv
  (env ${3:+"$3"} PYTHONUNBUFFERED=1 make -s compare SHAPES="$1") >"$log/compare-$2.log" 2>&1; stage "  $2: exit $?"
  mkdir -p "$log/$2"; cp results/compare-*.csv results/ceiling-*.csv results/bandwidth-*.csv "$log/$2/" 2>/dev/null
}
for what in "$@"; do
  case $what in
    smoke)
      stage "smoke"
      for run in "13|--batch 3 --heads 8 --kv-heads 2 --seqlen-q 2 --seqlen-k 700 --seqlens-k 0,300,700 --page-size 16 --causal --dtype bf16|" \
                 "13|--batch 2 --heads 4 --kv-heads 1 --seqlen-q 1 --seqlen-k 3000 --seqlens-k 257,3000 --page-size 256 --dim 64|" \
                 "14|--batch 2 --heads 8 --kv-heads 2 --seqlen 1000 --dim 128 --causal --backward|FA2_DETERMINISTIC=1"; do
        IFS='|' read -r id args env_set <<<"$run"
        # shellcheck disable=SC2086
        timeout 90 env $env_set compute-sanitizer --tool memcheck --error-exitcode 9 build/step$id/fa2 $args \
          --warmup 0 --iters 1 >>"$log/smoke.log" 2>&1; rc=$?
        stage "  step $id exit $rc: $env_set $args"
        if [ $rc -ne 0 ] && [ $rc -ne 1 ]; then
          stage "  step $id faults or hangs: make test runs without it"
          rm -rf steps/"$id"_* build/step$id
        fi
      done
      grep -E '\| (PASS|FAIL)' "$log/smoke.log" | tee -a "$log/progress.txt" ;;
    test)
      stage "make test, the mutants of ${MUTANT_STEPS:-13 14} beside it"
      (MUTANT_STEPS="${MUTANT_STEPS:-13 14}" bash tests/mutants.sh >"$log/mutants.log" 2>&1) &
      make test >"$log/make-test.log" 2>&1; stage "  make test exit $? : $(tail -n 1 "$log/make-test.log")"
      wait; stage "  mutants: $(grep -c '^PASS' "$log/mutants.log") caught, $(grep -c '^FAIL' "$log/mutants.log") not"
      gzip -c build/test-logs/gpu-matrix.log >"$log/gpu-matrix.log.gz"
      cat build/test-logs/sanitize-*.log | gzip -c >"$log/sanitize.log.gz"
      cp build/test-logs/train-step*.csv "$log/" 2>/dev/null ;;
    compare) stage "make compare SHAPES=bench"; compare_set bench bench ;;
    backward)
      stage "make compare SHAPES=backward, atomics then FA2_DETERMINISTIC=1"
      compare_set backward backward
      compare_set backward backward-deterministic FA2_DETERMINISTIC=1 ;;
    decode) stage "make compare SHAPES=decode"; compare_set decode decode ;;
    train)
      stage "python/train.py --step 14"
      python3 python/train.py --step 14 --device cuda --csv "$log/train-step14.csv" >"$log/train.log" 2>&1
      stage "  exit $?: $(grep -c '^PASS' "$log/train.log") PASS, $(grep -c '^FAIL' "$log/train.log") FAIL" ;;
    *) stage "unknown stage $what" ;;
  esac
done
stage "done"
