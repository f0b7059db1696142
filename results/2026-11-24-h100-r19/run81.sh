#!/usr/bin/env bash
# Runs 81 and after: main and main with two branches merged in (the ladder rebuilt so that
# steps 10, 11 and 12 each add one technique, and step 14, the backward), from copies of
# the tree under build/, by stage.
#   main    build/main: the tree as committed (main)
#   combo   build/combo: main with the files in .ab-base/combo/ laid over it (the branches)
#   smoke   step 14's backward under compute-sanitizer memcheck on two shapes, 90 s at most
#           each; if either fails or runs out of time, make test runs without step 14
#           (a kernel that faults would end the whole GPU matrix's process)
#   test    make test in build/combo and, beside it, the mutants of steps 08 and 14
#           (those of 07 and 13 ran before, on code these branches do not change)
#   ab      tools/ab.sh, 3 rounds, bench shapes: steps 10, 11, 12 of build/combo against
#           those of build/main
#   backward  make compare SHAPES=backward in build/combo (step 14 and torch's backward)
#   compare   make compare SHAPES=bench in build/combo
# usage: bash results/2026-11-24-h100-r19/run81.sh LOGDIR STAGE...  (on the GPU machine, repo root)
set -uo pipefail
cd "$(dirname "$0")/../.."
root=$PWD
log=$(realpath -m "${1:?usage: run81.sh LOGDIR STAGE...}"); shift
mkdir -p "$log"
stage() { echo "$(date -u +%T) $*" | tee -a "$log/progress.txt"; }
stage "start on $(nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader)"
rm -rf build/main build/combo && mkdir -p build/main build/combo
tar --exclude=./build --exclude=./.ab-base -cf - . | tar -xf - -C build/main
tar --exclude=./build --exclude=./.ab-base -cf - . | tar -xf - -C build/combo
cp -r .ab-base/combo/. build/combo/
(cd build/main && make -s -j8 all >"$log/build-main.log" 2>&1; echo "main build exit $?" >>"$log/progress.txt") &
(cd build/combo && make -s -j8 all >"$log/build-combo.log" 2>&1; echo "combo build exit $?" >>"$log/progress.txt") &
wait
stage "built"
for what in "$@"; do
  case $what in
    smoke)
      stage "smoke: step 14 backward under memcheck"
      ok=1
      for shape in "--batch 1 --heads 4 --kv-heads 2 --seqlen-q 97 --seqlen-k 161 --dim 128 --causal --dtype bf16" \
                   "--batch 2 --heads 8 --kv-heads 2 --seqlen 1000 --dim 64"; do
        # shellcheck disable=SC2086
        timeout 90 compute-sanitizer --tool memcheck --error-exitcode 9 build/combo/build/step14/fa2 $shape --backward \
          --warmup 0 --iters 1 >>"$log/smoke.log" 2>&1; rc=$?
        stage "  exit $rc: $shape"; [ $rc -eq 0 ] || [ $rc -eq 1 ] || ok=0
      done
      grep -E '\| (PASS|FAIL)' "$log/smoke.log" | tee -a "$log/progress.txt"
      if [ $ok = 0 ]; then
        stage "  step 14 faults or hangs: make test runs without it"
        rm -rf build/combo/steps/14_backward build/combo/build/step14
        cp tests/mutants.sh build/combo/tests/mutants.sh
      fi ;;
    test)
      stage "make test in build/combo, tests/mutants.sh beside it"
      (cd build/combo && MUTANT_STEPS="08 14" bash tests/mutants.sh >"$log/mutants.log" 2>&1) &
      (cd build/combo && make test >"$log/make-test.log" 2>&1); stage "  make test exit $? : $(tail -n 1 "$log/make-test.log")"
      wait; stage "  mutants: $(grep -c '^PASS' "$log/mutants.log") caught, $(grep -c '^FAIL' "$log/mutants.log") not"
      cp build/combo/build/test-logs/gpu-matrix.log "$log/gpu-matrix.log"
      cat build/combo/build/test-logs/sanitize-*.log >"$log/sanitize.log" ;;
    ab)
      stage "A/B steps 10-12, rebuilt against main's"
      rm -f "$log/ab-ladder.csv"
      (cd build/combo && bash tools/ab.sh "$log/ab-ladder.csv" 3 bench \
        new10=build/step10/fa2 old10="$root/build/main/build/step10/fa2" \
        new11=build/step11/fa2 old11="$root/build/main/build/step11/fa2" \
        new12=build/step12/fa2 old12="$root/build/main/build/step12/fa2") >"$log/ab-ladder.log" 2>&1
      stage "  exit $?" ;;
    backward|compare)
      set_name=$([ "$what" = backward ] && echo backward || echo bench)
      stage "make compare SHAPES=$set_name in build/combo"
      rm -f build/combo/results/compare-*.csv build/combo/results/ceiling-*.csv
      (cd build/combo && PYTHONUNBUFFERED=1 make -s compare SHAPES=$set_name) >"$log/compare-$set_name.log" 2>&1; stage "  exit $?"
      mkdir -p "$log/$set_name"; cp build/combo/results/compare-*.csv build/combo/results/ceiling-*.csv "$log/$set_name/" 2>/dev/null ;;
    *) stage "unknown stage $what" ;;
  esac
done
stage "done"
