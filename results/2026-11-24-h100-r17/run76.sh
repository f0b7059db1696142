#!/usr/bin/env bash
# Run 76: run 74 again on a fresh machine (its first attempt built beside stale empty step
# folders of the old numbering; its second lost the machine during make
# test, the A/B medians only in its console), with run 75 inside it, and no compare:
#  1. build; .ab-base (main before the new step, `git archive 684e898`) by its own Makefile
#  2. scratch/verify_tma; step 08's decisions under presets (--plan)
#  3. A/B in rounds at the bench shapes: steps 07, 08, 09, and 09's old self (08_wgmma_tma)
#  4. Nsight Compute at B4 H16 N4096 d128 fp16: steps 07, 08, 09, 10
#  5. run75.sh: two variants of step 08, their A/B and Nsight Compute at B2 H8 N1024 d128
#  6. make test
# usage: bash results/2026-11-24-h100-r17/run76.sh LOGDIR   (on the GPU machine, from the repo root)
set -uo pipefail
cd "$(dirname "$0")/../.."
log=${1:?usage: run76.sh LOGDIR}
mkdir -p "$log"
stage() { echo "$(date -u +%T) $*" | tee -a "$log/progress.txt"; }
stage "start on $(nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader)"
make -s -j16 all >"$log/build.log" 2>&1 || { stage "build FAILED"; exit 1; }
make -s -C .ab-base -j16 build/step08/fa2 >>"$log/build.log" 2>&1 || { stage "base build FAILED"; exit 1; }
make -s build/scratch/verify_tma >>"$log/build.log" 2>&1
build/scratch/verify_tma >"$log/verify_tma.txt" 2>&1; build/scratch/verify_tma --dim 64 --rows 16 >>"$log/verify_tma.txt" 2>&1
for pr in "" h100 rtx5090 gb10 a100 rtx4090; do
  for d in 64 128; do
    FA2_EMULATE=$pr build/step08/fa2 --plan --dim $d
    FA2_EMULATE=$pr build/step08/fa2 --plan --dim $d --batch 16 --heads 16
  done
done >"$log/plans.txt" 2>&1
stage "A/B bench: 07, 08, 09, 09 before (08_wgmma_tma)"
bash tools/ab.sh "$log/ab-bench.csv" 3 bench s07=build/step07/fa2 s08=build/step08/fa2 s09=build/step09/fa2 \
  s09_before=.ab-base/build/step08/fa2 >"$log/ab-bench.log" 2>&1; stage "  exit $?"
for s in 07 08 09 10; do
  bash tools/profile.sh build/step$s/fa2 --batch 4 --heads 16 --seqlen 4096 --dim 128 >"$log/ncu-step$s.txt" 2>&1
done
stage "run 75"
bash results/2026-11-24-h100-r17/run75.sh "$log/run75"
stage "make test"
make test >"$log/make-test.log" 2>&1; stage "  exit $? : $(tail -n 1 "$log/make-test.log")"
cp build/test-logs/gpu-matrix.log "$log/gpu-matrix.log"
cat build/test-logs/sanitize-*.log >"$log/sanitize.log"
stage "done"
