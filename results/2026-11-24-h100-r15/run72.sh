#!/usr/bin/env bash
# Run 72 (H100): after run 71 measured step 12 12% slower at B2 H8 N1024 d128 with the grid
# folded into x (and steps 02-06 moved by the same fold), every kernel is back on its
# (query tile, head, batch) grid and a call past 65,535 batches or heads runs as several
# launches (fa2_for_each_grid_chunk). This run:
#  1. build; .ab-base (main before the change, `git archive be31d05`) by its own Makefile
#  2. A/B in rounds, no emulation: steps 07 and 12 against their versions before the change,
#     each at the bench and the decode shapes (tools/ab.sh, 3 rounds)
#  3. make test (the GPU matrix and sanitize under every preset in it)
# usage: bash results/2026-11-24-h100-r15/run72.sh LOGDIR   (on the GPU machine, from the repo root)
set -uo pipefail
cd "$(dirname "$0")/../.."
log=${1:?usage: run72.sh LOGDIR}
mkdir -p "$log"
stage() { echo "$(date -u +%T) $*" | tee -a "$log/progress.txt"; }
stage "start on $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader)"
make -s -j16 all >"$log/run72-build.log" 2>&1 || { stage "build FAILED"; exit 1; }
make -s -C .ab-base -j16 build/step07/fa2 build/step12/fa2 >>"$log/run72-build.log" 2>&1 || { stage "base build FAILED"; exit 1; }
stage "A/B steps 07 and 12"
bash tools/ab.sh "$log/run72-ab-bench.csv" 3 bench base07=.ab-base/build/step07/fa2 new07=build/step07/fa2 \
  base12=.ab-base/build/step12/fa2 new12=build/step12/fa2 >"$log/run72-ab-bench.log" 2>&1
bash tools/ab.sh "$log/run72-ab-decode.csv" 3 decode base07=.ab-base/build/step07/fa2 new07=build/step07/fa2 \
  base12=.ab-base/build/step12/fa2 new12=build/step12/fa2 >"$log/run72-ab-decode.log" 2>&1
stage "make test"
make test >"$log/run72-make-test.log" 2>&1; stage "  exit $? : $(tail -n 1 "$log/run72-make-test.log")"
cp build/test-logs/gpu-matrix.log "$log/run72-gpu-matrix.log"
cat build/test-logs/sanitize-*.log >"$log/run72-sanitize.log"
stage "done"
