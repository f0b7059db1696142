#!/usr/bin/env bash
# Run 72 (H100): why step 12 runs 12% slower at B2 H8 N1024 d128 than before (run 71), and
# whether the one-dimensional grid costs the Hopper steps anything; then make test.
#  1. build; .ab-base (main before the change, `git archive be31d05`) by its own Makefile;
#     variant grid3d: step 12 as it is now with the (tile x split, kv head, batch) grid of
#     before (grid3d.patch)
#  2. A/B in rounds, no emulation: steps 12 (base, now, grid3d) at the bench and decode
#     shapes; steps 08-10 (base, now) at three bench shapes
#  3. make test (the GPU matrix and sanitize under every preset in it)
# usage: bash results/2026-11-24-h100-r15/run72.sh LOGDIR   (on the GPU machine, from the repo root)
set -uo pipefail
cd "$(dirname "$0")/../.."
log=${1:?usage: run72.sh LOGDIR}
mkdir -p "$log"
stage() { echo "$(date -u +%T) $*" | tee -a "$log/progress.txt"; }
stage "start on $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader)"
make -s -j16 all >"$log/run72-build.log" 2>&1 || { stage "build FAILED"; exit 1; }
make -s -C .ab-base -j16 build/step08/fa2 build/step09/fa2 build/step10/fa2 build/step12/fa2 >>"$log/run72-build.log" 2>&1 || { stage "base build FAILED"; exit 1; }
mkdir -p build/mutants
patch -s -o build/mutants/grid3d.cu steps/12_split_kv/kernel.cu results/2026-11-24-h100-r15/grid3d.patch &&
  make -s variant step=12 NAME=grid3d SRC=build/mutants/grid3d.cu >>"$log/run72-build.log" 2>&1 || { stage "variant FAILED"; exit 1; }
stage "A/B step 12"
bash tools/ab.sh "$log/run72-ab12.csv" 3 bench base12=.ab-base/build/step12/fa2 new12=build/step12/fa2 grid3d=build/variants/grid3d/fa2 >"$log/run72-ab12.log" 2>&1
bash tools/ab.sh "$log/run72-ab12-decode.csv" 3 decode base12=.ab-base/build/step12/fa2 new12=build/step12/fa2 grid3d=build/variants/grid3d/fa2 >"$log/run72-ab12-decode.log" 2>&1
stage "A/B steps 08-10"
bash tools/ab.sh "$log/run72-ab-hopper.csv" 3 "--batch 2 --heads 8 --seqlen 1024 --dim 128;--batch 4 --heads 16 --seqlen 4096 --dim 128;--batch 16 --heads 16 --seqlen 1024 --dim 64" \
  base08=.ab-base/build/step08/fa2 new08=build/step08/fa2 base09=.ab-base/build/step09/fa2 new09=build/step09/fa2 \
  base10=.ab-base/build/step10/fa2 new10=build/step10/fa2 >"$log/run72-ab-hopper.log" 2>&1
stage "make test"
make test >"$log/run72-make-test.log" 2>&1; stage "  exit $? : $(tail -n 1 "$log/run72-make-test.log")"
cp build/test-logs/gpu-matrix.log "$log/run72-gpu-matrix.log"
cat build/test-logs/sanitize-*.log >"$log/run72-sanitize.log"
stage "done"
