#!/usr/bin/env bash
# Run 70: Nsight Compute on step 11 as it is after run 66 (one launch each, tools/profile.sh):
# B4 H16 N4096 fp16 at d128 and d64 (the shapes of run 45's profiles) and B16 H16 N1024 d64
# (run 64's).  usage: bash run70.sh RUN_NUMBER
set -uo pipefail
cd "$(dirname "$0")/../.."
run=${1:?usage: run70.sh RUN_NUMBER}
out=${OUT:-build/run$run}; mkdir -p "$out"
rm -rf steps/07_hopper_wgmma steps/08_hopper_wgmma
make -s -j16 build/step11/fa2 >/dev/null 2>&1 || exit 1
make -s step=11 profile ARGS="--batch 4 --heads 16 --seqlen 4096 --dim 128" >"$out/run$run-profile-d128-step11.txt" 2>&1
make -s step=11 profile ARGS="--batch 4 --heads 16 --seqlen 4096 --dim 64" >"$out/run$run-profile-d64-step11.txt" 2>&1
make -s step=11 profile ARGS="--batch 16 --heads 16 --seqlen 1024 --dim 64" >"$out/run$run-profile-b16-d64-step11.txt" 2>&1
for f in "$out"/run$run-profile-*.txt; do
  echo "== $(basename "$f")"
  grep -E "gpu__time_duration|hmma_cycles_active|issue_active|stalled_wait|stalled_barrier|hit_rate|dram__bytes_read|pipe_xu.sum|smsp__inst_executed.sum" "$f"
done
