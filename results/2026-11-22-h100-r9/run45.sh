#!/usr/bin/env bash
# Run 45 (H100): Nsight Compute on the final step 11 at B4 H16 N4096, d128 and d64
# (run 37 profiled its first scheduler). Writes under $OUT (or build/run45).
set -uo pipefail
cd "$(dirname "$0")/../.."
out=${OUT:-build/run45}; mkdir -p "$out"
rm -rf steps/07_hopper_wgmma steps/08_hopper_wgmma  # folders the device may still hold from before a rename
make -s -j16 build/step11/fa2 >/dev/null
for d in 128 64; do
  bash tools/profile.sh build/step11/fa2 --batch 4 --heads 16 --seqlen 4096 --dim $d >"$out/run45-profile-d$d-step11.txt" 2>&1
  echo "d$d rc $?: $(grep -E 'gpu__time|hmma|hit_rate|dram__bytes' "$out/run45-profile-d$d-step11.txt" | awk '{print $NF}' | tr '\n' ' ')"
done
