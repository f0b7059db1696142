#!/usr/bin/env bash
# Run 52 (H100): step 12 after run 51 -- 128 keys per tile, K/V stages from a 128 KB
# budget, the combine kernel's loads side by side. Every binary built; the GPU matrix
# and compute-sanitizer on step 12; the split count swept (choose_splits's against fixed
# counts 1 to 32) at the decode shapes in rounds; Nsight Compute on both kernels at B1 and B8.
# usage: bash run52.sh RUN_NUMBER
set -uo pipefail
cd "$(dirname "$0")/../.."
run=${1:?usage: run52.sh RUN_NUMBER}
out=${OUT:-build/run$run}; mkdir -p "$out"
rm -rf steps/07_hopper_wgmma steps/08_hopper_wgmma
t0=$(date +%s)
make -s -j16 ARCH=90 all >"$out/run$run-build.log" 2>&1 || { tail -20 "$out/run$run-build.log"; exit 1; }
echo "built at $(( $(date +%s) - t0 )) s"
bash tools/check.sh "$out/run$run" 12
SWEEP_BLOCK_N=128 SWEEP_STAGES=auto SWEEP_SPLITS="auto 1 2 4 8 16 32" bash steps/12_split_kv/sweep.sh "$out/run$run-splits.csv" 2
echo "splits done at $(( $(date +%s) - t0 )) s"
KERNELS=2 bash tools/profile.sh build/step12/fa2 --batch 1 --heads 32 --kv-heads 8 --seqlen-q 1 --seqlen-k 32768 --dtype bf16 >"$out/run$run-profile-b1.txt" 2>&1
KERNELS=2 bash tools/profile.sh build/step12/fa2 --batch 8 --heads 32 --kv-heads 8 --seqlen-q 1 --seqlen-k 8192 --dtype bf16 >"$out/run$run-profile-b8.txt" 2>&1
grep -E "kernel|time_duration|dram__|issue_active|long_scoreboard" "$out/run$run-profile-b1.txt" "$out/run$run-profile-b8.txt"
echo "done at $(( $(date +%s) - t0 )) s"
