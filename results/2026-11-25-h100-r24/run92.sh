#!/usr/bin/env bash
# Run 92: main with step 14's 128-query d64 tile and step 15 (the Hopper backward) merged, on
# the GPU, in one call, in a copy of the tree (build/tree-r92; logs only to LOGDIR). Start it in
# a process session of its own, or the device call's end kills it:
#   mkdir -p build && setsid nohup bash results/2026-11-25-h100-r24/run92.sh build/run92 race15 check compare >build/run92.out 2>&1 </dev/null &
#   race15   racecheck on step 15 at the three shapes where run 91 found a hazard (a stage's LSE
#            overwritten while a lane that had not arrived could still read it); a FAIL here
#            stops the run, as the sanitizer in `test` would fail the same way
#   check    build/tests/gpu_matrix and tools/sanitize.sh on steps 14 and 15 (the parts of
#            `make test` these two steps' changes touch, for when `test` does not fit the run)
#   compare  make compare SHAPES=backward, 3 rounds; its CSVs into LOGDIR/backward
#   test     make test: every step's GPU matrix and sanitizer, the torch binding's runs on the GPU
#   mutants  MUTANT_STEPS="14 15" tests/mutants.sh, 8 at a time, each stopping at its first FAIL
# usage: bash results/2026-11-25-h100-r24/run92.sh LOGDIR STAGE...
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 2
log=$(realpath -m "${1:?usage: run92.sh LOGDIR STAGE...}"); shift
mkdir -p "$log"
stage() { echo "$(date -u +%T) $*" | tee -a "$log/progress.txt"; }
stage "start on $(nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader)"
. tools/tree_copy.sh
tree=$(tree_copy "$PWD/build/tree-r92" "$log/build.log")
stage "built: $([ -f "$tree/.built" ] && echo yes || echo NO, see build.log)"
cd "$tree" || exit 2
for what in "$@"; do
  case $what in
    race15)
      ok=1
      for args in "--batch 1 --heads 4 --kv-heads 2 --seqlen-q 97 --seqlen-k 161 --dim 128 --causal --dtype bf16" \
                  "--batch 1 --heads 1 --seqlen 600 --dim 128" "--batch 1 --heads 2 --kv-heads 1 --seqlen 200 --dim 64"; do
        # shellcheck disable=SC2086
        line=$(timeout 120 compute-sanitizer --tool racecheck --racecheck-report hazard build/step15/fa2 $args --backward \
               --iters 1 --warmup 0 2>&1 | tee -a "$log/race15.log" | grep 'RACECHECK SUMMARY')
        stage "racecheck step 15 $args --backward: $line"
        [[ $line == *"0 hazards displayed (0 errors, 0 warnings)"* ]] || ok=0
      done
      [ $ok = 1 ] || { stage "race15 failed: stopping"; break; } ;;
    check)
      for id in 14 15; do
        bash tools/sanitize.sh "build/step$id/fa2" >"$log/sanitize$id.log" 2>&1 &
        build/tests/gpu_matrix "build/step$id/libfa2.so" >"$log/matrix$id.log" 2>&1
        stage "gpu_matrix step $id: exit $?: $(grep -c "^PASS ${id}_" "$log/matrix$id.log") PASS $(grep -c "^FAIL ${id}_" "$log/matrix$id.log") FAIL"
        wait
        stage "  sanitize step $id: $(grep -c '^PASS' "$log/sanitize$id.log") PASS $(grep -c '^FAIL' "$log/sanitize$id.log") FAIL"
        gzip -f "$log/matrix$id.log"
      done ;;
    compare)
      rm -f results/compare-*.csv results/ceiling-*.csv results/bandwidth-*.csv
      PYTHONUNBUFFERED=1 make -s compare SHAPES=backward >"$log/compare-backward.log" 2>&1
      stage "compare backward: exit $?"
      mkdir -p "$log/backward" && cp results/compare-*.csv results/ceiling-*.csv "$log/backward/" 2>/dev/null ;;
    test)
      make -s test >"$log/test.log" 2>&1
      stage "make test: exit $?: $(tail -n 1 "$log/test.log")"
      grep -E '^(FAIL|SKIP)' "$log/test.log" | head -n 20 | tee -a "$log/progress.txt" ;;
    mutants)
      FA2_TEST_FAIL_LIMIT=1 MUTANT_JOBS=8 MUTANT_STEPS="14 15" bash tests/mutants.sh >"$log/mutants.log" 2>&1
      stage "mutants 14 15: exit $?: $(tail -n 1 "$log/mutants.log")" ;;
    *) stage "unknown stage $what (allowed: race15 check compare test mutants)" ;;
  esac
done
stage "done"
