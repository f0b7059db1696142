#!/usr/bin/env bash
# Run 77 (H200): run 76's A/B of steps 07, 08, 09 and 09's old self (08_wgmma_tma, from
# .ab-base = `git archive 684e898`) in rounds at the bench shapes, and verify_tma.
# usage: bash results/2026-11-24-h200-r18/run77.sh LOGDIR   (on the GPU machine, from the repo root)
set -uo pipefail
cd "$(dirname "$0")/../.."
log=${1:?usage: run77.sh LOGDIR}
mkdir -p "$log"
stage() { echo "$(date -u +%T) $*" | tee -a "$log/progress.txt"; }
stage "start on $(nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader)"
make -s -j16 build/step07/fa2 build/step08/fa2 build/step09/fa2 build/scratch/verify_tma >"$log/build.log" 2>&1 || { stage "build FAILED"; exit 1; }
make -s -C .ab-base -j16 build/step08/fa2 >>"$log/build.log" 2>&1 || { stage "base build FAILED"; exit 1; }
build/scratch/verify_tma >"$log/verify_tma.txt" 2>&1
stage "A/B bench"
bash tools/ab.sh "$log/ab-bench.csv" 3 bench s07=build/step07/fa2 s08=build/step08/fa2 s09=build/step09/fa2 \
  s09_before=.ab-base/build/step08/fa2 >"$log/ab-bench.log" 2>&1; stage "  exit $?"
stage "done"
