#!/usr/bin/env bash
# Run 64: after run 63, the turns at the tensor cores (variants64.sh): the GPU matrix on
# both variants side by side, three rounds against step 11 at the benchmark shapes
# (tools/ab.sh); then Nsight Compute on step 11 at the shape furthest from its target,
# B16 H16 N1024 d64 fp16.
# usage: bash run64.sh RUN_NUMBER
set -uo pipefail
cd "$(dirname "$0")/../.."
run=${1:?usage: run64.sh RUN_NUMBER}
out=${OUT:-build/run$run}; mkdir -p "$out"
rm -rf steps/07_hopper_wgmma steps/08_hopper_wgmma
t0=$(date +%s)
make -s -j16 build/step11/fa2 build/tests/gpu_matrix harness >"$out/run$run-build.log" 2>&1 || { cat "$out/run$run-build.log"; exit 1; }
bash results/2026-11-22-h100-r13/variants64.sh | tee -a "$out/run$run-build.log"
for v in noturn64 noturn; do build/tests/gpu_matrix build/variants/$v/libfa2.so >"$out/run$run-matrix-$v.log" 2>&1 & done
wait
for v in noturn64 noturn; do
  echo "matrix $v: $(grep -c '^PASS' "$out/run$run-matrix-$v.log") passed, $(grep -c '^FAIL' "$out/run$run-matrix-$v.log") failed"
  grep '^FAIL' "$out/run$run-matrix-$v.log" | head -4
done
echo "matrices at $(( $(date +%s) - t0 )) s"
bash tools/ab.sh "$out/run$run-ab.csv" 3 bench s11=build/step11/fa2 noturn64=build/variants/noturn64/fa2 noturn=build/variants/noturn/fa2
echo "timed at $(( $(date +%s) - t0 )) s"
make -s step=11 profile ARGS="--batch 16 --heads 16 --seqlen 1024 --dim 64" >"$out/run$run-profile-b16-d64-step11.txt" 2>&1
tail -n 30 "$out/run$run-profile-b16-d64-step11.txt"
echo "done at $(( $(date +%s) - t0 )) s"
