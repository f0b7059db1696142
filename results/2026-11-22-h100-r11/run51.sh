#!/usr/bin/env bash
# Run 51 (H100): step 12's pipeline depth and split count. (1) keys per tile x K/V
# stages, splits chosen by choose_splits; (2) fixed split counts at 2 and 4 stages;
# both at the decode shapes in rounds (steps/12_split_kv/sweep.sh). Then Nsight Compute
# on both kernels of step 12 at B1 Hq32 Hkv8 Nk32768 and B8 H16 Nk16384 d64.
# usage: bash run51.sh RUN_NUMBER
set -uo pipefail
cd "$(dirname "$0")/../.."
run=${1:?usage: run51.sh RUN_NUMBER}
out=${OUT:-build/run$run}; mkdir -p "$out"
rm -rf steps/07_hopper_wgmma steps/08_hopper_wgmma
t0=$(date +%s)
make -s -j16 ARCH=90 build/step12/fa2 >/dev/null 2>&1 || exit 1
SWEEP_BLOCK_N="64 128" SWEEP_STAGES="2 3 4 6" bash steps/12_split_kv/sweep.sh "$out/run$run-stages.csv" 2
echo "stages done at $(( $(date +%s) - t0 )) s"
SWEEP_BLOCK_N=64 SWEEP_STAGES="2 4" SWEEP_SPLITS="4 8 16 32 64 128" bash steps/12_split_kv/sweep.sh "$out/run$run-splits.csv" 2
echo "splits done at $(( $(date +%s) - t0 )) s"
KERNELS=2 bash tools/profile.sh build/step12/fa2 --batch 1 --heads 32 --kv-heads 8 --seqlen-q 1 --seqlen-k 32768 --dtype bf16 >"$out/run$run-profile-b1.txt" 2>&1
KERNELS=2 bash tools/profile.sh build/step12/fa2 --batch 8 --heads 16 --seqlen-q 1 --seqlen-k 16384 --dim 64 >"$out/run$run-profile-d64.txt" 2>&1
grep -E "kernel|time_duration|dram__|warps_active|issue_active|long_scoreboard|barrier" "$out/run$run-profile-b1.txt" "$out/run$run-profile-d64.txt"
echo "done at $(( $(date +%s) - t0 )) s"
