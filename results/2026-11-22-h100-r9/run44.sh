#!/usr/bin/env bash
# Run 44 (H100): one lever of issue 17 on step 11, A/B in rounds, and the profile of
# the shape furthest from the target.
#   stages3  three K/V stages instead of two at d64 (at d128 a third stage does not
#            fit next to Q and O: 32 + 32 + 3 x 64 KB > 227 KB)
# Step 11 and the variant at the two d64 benchmark shapes (tools/ab.sh, three rounds);
# then Nsight Compute on step 11
# at B16 H16 N1024 d64. Writes under $OUT (or build/run44).
set -uo pipefail
cd "$(dirname "$0")/../.."
out=${OUT:-build/run44}; mkdir -p "$out"
rm -rf steps/07_hopper_wgmma steps/08_hopper_wgmma  # folders the device may still hold from before a rename
mkdir -p build/ab  # as deep as steps/11_*/: the kernel's includes hold
python3 tools/variant_src.py steps/11_persistent/kernel.cu build/ab/stages3.cu \
  "static constexpr int STAGES = 2;" "static constexpr int STAGES = D == 64 ? 3 : 2;" || exit 1
make -s -j16 build/step11/fa2 >/dev/null
make -s variant step=11 NAME=ab11-stages3 SRC=build/ab/stages3.cu
bash tools/ab.sh "$out/run44-ab.csv" 3 "--batch 4 --heads 16 --seqlen 4096 --dim 64;--batch 16 --heads 16 --seqlen 1024 --dim 64" \
  step11=build/step11/fa2 stages3=build/variants/ab11-stages3/fa2
bash tools/profile.sh build/step11/fa2 --batch 16 --heads 16 --seqlen 1024 --dim 64 >"$out/run44-profile-b16-d64-step11.txt" 2>&1
grep -E "gpu__time|hit_rate|hmma|issue_active|stalled_(wait|barrier)|xu.sum|inst_executed.sum" "$out/run44-profile-b16-d64-step11.txt" | sed 's/  */ /g'
