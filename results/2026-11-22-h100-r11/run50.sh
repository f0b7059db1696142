#!/usr/bin/env bash
# Run 50 (H100): the split-KV decode step (12) first on a GPU. The GPU matrix and
# compute-sanitizer on step 12; then step 12 against step 07 at the decode shapes in
# rounds (tools/ab.sh), torch SDPA (default, flash, cuDNN) at the same shapes, and the
# streaming-read bandwidth probe. Writes logs and CSVs under $OUT (or build/runNN).
# usage: bash run50.sh RUN_NUMBER
set -uo pipefail
cd "$(dirname "$0")/../.."
run=${1:?usage: run50.sh RUN_NUMBER}
out=${OUT:-build/run$run}; mkdir -p "$out"
rm -rf steps/07_hopper_wgmma steps/08_hopper_wgmma
t0=$(date +%s)
make -s -j16 ARCH=90 build/step12/fa2 build/step12/libfa2.so build/step07/fa2 build/tests/gpu_matrix \
  build/reference/bandwidth_ceiling >"$out/run$run-build.log" 2>&1 || { tail -20 "$out/run$run-build.log"; exit 1; }
echo "built at $(( $(date +%s) - t0 )) s"
for s in 12; do build/step$s/fa2 --batch 8 --heads 32 --kv-heads 8 --seqlen-q 1 --seqlen-k 8192 --dtype bf16 --iters 20; done
bash tools/check.sh "$out/run$run" 12
bash tools/ab.sh "$out/run$run-decode-ab.csv" 3 decode s12=build/step12/fa2 s07=build/step07/fa2
python3 reference/sdpa.py --shapes decode --backends default,flash,cudnn --warmup 3 --iters 30 --csv "$out/run$run-decode-sdpa.csv" 2>&1 | grep -v "^$"
build/reference/bandwidth_ceiling --csv "$out/run$run-bandwidth.csv"
echo "done at $(( $(date +%s) - t0 )) s"
