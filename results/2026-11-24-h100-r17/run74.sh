#!/usr/bin/env bash
# Run 74: step 08 (TMA and mbarriers under mma.sync) and the renumbered Hopper ladder.
#  1. build this tree; .ab-base (main before the new step and the renumbering, `git archive
#     684e898`, where today's step 09 was 08_wgmma_tma) by its own Makefile
#  2. scratch/verify_tma (where TMA's swizzle puts each element); step 08's decisions under every preset (--plan)
#  3. A/B in rounds at the bench shapes: steps 07, 08, 09, and 09's old self (08_wgmma_tma)
#  4. Nsight Compute at B4 H16 N4096 d128 fp16: steps 07 and 08 (what TMA took out of the
#     loop), steps 09 and 10 (the wgmma step and the warp-specialised one)
#  5. make test (every step, the presets, sanitize)
#  6. make compare SHAPES=bench in rounds, run from a copy of the tree under build/ (the
#     GPU machine's copy of the repository is replaced between commands, which removes files
#     written into results/ while it runs)
# usage: bash results/2026-11-24-h100-r17/run74.sh LOGDIR   (on the GPU machine, from the repo root)
set -uo pipefail
cd "$(dirname "$0")/../.."
log=${1:?usage: run74.sh LOGDIR}
mkdir -p "$log"
stage() { echo "$(date -u +%T) $*" | tee -a "$log/progress.txt"; }
stage "start on $(nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader)"
make -s -j16 all >"$log/build.log" 2>&1 || { stage "build FAILED"; exit 1; }
make -s -C .ab-base -j16 build/step08/fa2 >>"$log/build.log" 2>&1 || { stage "base build FAILED"; exit 1; }
make -s build/scratch/verify_tma >>"$log/build.log" 2>&1
build/scratch/verify_tma >"$log/verify_tma.txt" 2>&1; build/scratch/verify_tma --dim 64 --rows 16 >>"$log/verify_tma.txt" 2>&1
stage "plans"
for pr in "" h100 rtx5090 gb10 a100 rtx4090; do
  for d in 64 128; do
    FA2_EMULATE=$pr build/step08/fa2 --plan --dim $d
    FA2_EMULATE=$pr build/step08/fa2 --plan --dim $d --batch 16 --heads 16
  done
done >"$log/plans.txt" 2>&1
stage "A/B bench: 07, 08, 09, 09 before (08_wgmma_tma)"
bash tools/ab.sh "$log/ab-bench.csv" 3 bench s07=build/step07/fa2 s08=build/step08/fa2 s09=build/step09/fa2 \
  s09_before=.ab-base/build/step08/fa2 >"$log/ab-bench.log" 2>&1; stage "  exit $?"
stage "ncu"
for s in 07 08 09 10; do
  bash tools/profile.sh build/step$s/fa2 --batch 4 --heads 16 --seqlen 4096 --dim 128 >"$log/ncu-step$s.txt" 2>&1
done
stage "make test"
make test >"$log/make-test.log" 2>&1; stage "  exit $? : $(tail -n 1 "$log/make-test.log")"
cp build/test-logs/gpu-matrix.log "$log/gpu-matrix.log"
cat build/test-logs/sanitize-*.log >"$log/sanitize.log"
stage "make compare SHAPES=bench"
rm -rf build/tree && mkdir -p build/tree
tar --exclude=./build --exclude=./.ab-base -cf - . | tar -xf - -C build/tree
(cd build/tree && rm -f results/compare-*.csv && make -s -j16 all >/dev/null 2>&1 && make -s compare SHAPES=bench) >"$log/compare-bench.log" 2>&1
stage "  exit $?"
cp build/tree/results/compare-*.csv build/tree/results/ceiling-*.csv "$log/" 2>/dev/null
stage "done"
