#!/usr/bin/env bash
# Run 86: step 13's work queue and small-page ring (branch wip/30-queue-and-pages, its files
# laid over the tree from .ab-base/combo/, carried beside the work tree), and step 14's
# profile. The tree is copied to build/combo, the branch's files over it, and built there;
# main's own step 13 is kept as old13.cu and built by `make variant` as "old".
# Start it in a process session of its own, or the device call's end kills it:
#   mkdir -p build && setsid nohup bash results/2026-11-24-h100-r22/run86.sh build/run86 STAGE... >build/run86.out 2>&1 </dev/null &
#   branch13   build/tests/gpu_matrix on every step's library (the workspace's counters grew
#              16 bytes for every step); tools/ab.sh, 3 rounds, old against new at the decode
#              set and at B8 Nk8192 given as 8 equal lengths; tools/sanitize.sh on step 13.
#              Writes $log/branch13.ok when step 13's matrix passes: the stages after it that
#              time or test the branch run only then
#   profile14  step 14's backward at B4 H16 N4096 d128: tools/profile.sh on its three kernels,
#              then per-SASS-opcode stall samples of the main kernel (tools/sass_stalls.py)
#   decode     make compare SHAPES=decode with the branch's step 13 (the README's decode table)
#   mutants    MUTANT_STEPS="13 14" tests/mutants.sh
#   det14      tools/ab.sh, 3 rounds, step 14 against itself with FA2_DETERMINISTIC=1, backward set
# usage: bash results/2026-11-24-h100-r22/run86.sh LOGDIR STAGE...  (on the GPU machine, from the repo root)
set -uo pipefail
cd "$(dirname "$0")/../.."
log=$(realpath -m "${1:?usage: run86.sh LOGDIR STAGE...}"); shift
mkdir -p "$log"
stage() { echo "$(date -u +%T) $*" | tee -a "$log/progress.txt"; }
stage "start on $(nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader)"
rm -rf build/combo && mkdir -p build/combo
tar --exclude=./build --exclude=./.ab-base -cf - . | tar -xf - -C build/combo
cp steps/13_split_kv/kernel.cu build/combo/old13.cu
[ -d .ab-base/combo ] && cp -r .ab-base/combo/. build/combo/
cd build/combo
make -s -j16 all >"$log/build.log" 2>&1; stage "built: exit $?"
branch_ok() { [ -f "$log/branch13.ok" ] || { stage "  skipped: step 13's matrix did not pass"; return 1; }; }
for what in "$@"; do
  case $what in
    branch13)
      stage "gpu_matrix, every step"
      build/tests/gpu_matrix $(ls build/step*/libfa2.so | grep -v step00) >"$log/gpu-matrix.log" 2>&1; rc=$?  # step 00 is the CPU
      stage "  exit $rc: $(tail -n 1 "$log/gpu-matrix.log"); step 13: $(grep -c '^PASS 13_' "$log/gpu-matrix.log") PASS $(grep -c '^FAIL 13_' "$log/gpu-matrix.log") FAIL"
      grep '^FAIL' "$log/gpu-matrix.log" | head -n 20 | tee -a "$log/progress.txt"
      [ "$(grep -c '^FAIL 13_' "$log/gpu-matrix.log")" = 0 ] && [ "$(grep -c '^PASS 13_' "$log/gpu-matrix.log")" -gt 0 ] && touch "$log/branch13.ok"
      gzip -f "$log/gpu-matrix.log"
      make -s variant step=13 NAME=old SRC=old13.cu >"$log/variant-old.log" 2>&1; stage "variant old: exit $?"
      b8="--batch 8 --heads 32 --kv-heads 8 --seqlen-q 1 --seqlen-k 8192 --dim 128 --dtype bf16"
      bash tools/ab.sh "$log/ab13-decode.csv" 3 decode old=build/variants/old/fa2 new=build/step13/fa2 >"$log/ab13-decode.log" 2>&1
      stage "  ab decode set: exit $?"
      bash tools/ab.sh "$log/ab13-lens.csv" 3 "$b8;$b8 --seqlens-k 8192,8192,8192,8192,8192,8192,8192,8192" old=build/variants/old/fa2 new=build/step13/fa2 >"$log/ab13-lens.log" 2>&1
      stage "  ab B8 as lengths: exit $?"
      bash tools/sanitize.sh build/step13/fa2 >"$log/sanitize-step13.log" 2>&1
      stage "  sanitize exit $?: $(grep -c ^PASS "$log/sanitize-step13.log") PASS $(grep -c ^FAIL "$log/sanitize-step13.log") FAIL" ;;
    profile14)
      args="--batch 4 --heads 16 --seqlen 4096 --dim 128 --backward"
      KERNELS=3 bash tools/profile.sh build/step14/fa2 $args >"$log/profile14.log" 2>&1; stage "profile14: exit $?"
      ncu --clock-control none --kernel-name regex:fa2_bwd_kernel --launch-count 1 --section SourceCounters -f \
        -o "$log/src14" build/step14/fa2 $args --iters 1 --warmup 0 --check off >"$log/src14.log" 2>&1
      ncu -i "$log/src14.ncu-rep" --page source --csv --print-source sass >"$log/src14.csv" 2>>"$log/src14.log"
      python3 tools/sass_stalls.py "$log/src14.csv" 30 >"$log/stalls14.txt" 2>&1; stage "  stalls: exit $?"
      rm -f "$log/src14.ncu-rep"; gzip -f "$log/src14.csv" ;;
    decode)
      branch_ok || continue
      stage "make compare SHAPES=decode"
      rm -f results/compare-*.csv results/ceiling-*.csv results/bandwidth-*.csv
      PYTHONUNBUFFERED=1 make -s compare SHAPES=decode >"$log/compare-decode.log" 2>&1; stage "  exit $?"
      mkdir -p "$log/decode"; cp results/compare-*.csv results/ceiling-*.csv results/bandwidth-*.csv "$log/decode/" 2>/dev/null ;;
    mutants)
      stage "mutants of steps 13 and 14"
      MUTANT_STEPS="13 14" bash tests/mutants.sh >"$log/mutants.log" 2>&1
      stage "  exit $?: $(grep -c '^PASS' "$log/mutants.log") caught, $(grep -c '^FAIL' "$log/mutants.log") not"
      grep '^FAIL' "$log/mutants.log" | tee -a "$log/progress.txt" ;;
    det14)
      printf '#!/bin/sh\nFA2_DETERMINISTIC=1 exec build/step14/fa2 "$@"\n' >det14.sh; chmod +x det14.sh
      bash tools/ab.sh "$log/ab14-det.csv" 3 "backward --backward" atomic=build/step14/fa2 det=./det14.sh >"$log/ab14-det.log" 2>&1
      stage "det14: exit $?" ;;
    *) stage "unknown stage $what" ;;
  esac
done
stage "done"
