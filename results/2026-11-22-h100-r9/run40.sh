#!/usr/bin/env bash
# Run 40 (H100): step 11 with units of equal work (a causal unit is q tiles
# m_blocks - 1 - k and k of one head), checked (the GPU matrix and compute-sanitizer
# on step 11) and timed at the benchmark shapes against step 10 and two earlier
# schedulers of step 11, rebuilt from their commits with `make variant`:
#   head-snake    009f807: one q tile per item, a head's tiles together, snake rounds
#   sorted-snake  8188a73: the same, but causal items q tile outer (sorted by length)
# tools/check.sh first, then tools/ab.sh (three rounds); then Nsight Compute on step 11 at the three causal benchmark shapes.
# Writes under $OUT (or build/run40).
# As it ran on the device, whose copy of the tree has no git history, `git show`
# found neither commit: the two variants were not built, and run 40 timed step 11
# against step 10 only (run 39 holds the same-run A/B of the two earlier orders).
set -uo pipefail
cd "$(dirname "$0")/../.."
out=${OUT:-build/run40}; mkdir -p "$out"
rm -rf steps/07_hopper_wgmma steps/08_hopper_wgmma  # folders the device may still hold from before a rename
mkdir -p build/ab
git show 009f807:steps/11_persistent/kernel.cu >build/ab/head-snake.cu    # build/ab/ is as deep as steps/11_*/:
git show 8188a73:steps/11_persistent/kernel.cu >build/ab/sorted-snake.cu  # the includes hold
make -s -j16 build/step10/fa2 >/dev/null
for v in head-snake sorted-snake; do make -s variant step=11 NAME="ab11-$v" SRC="build/ab/$v.cu" & done
wait
bash tools/check.sh "$out/run40" 11
bash tools/ab.sh "$out/run40-ab.csv" 3 bench step11=build/step11/fa2 step10=build/step10/fa2 \
  head-snake=build/variants/ab11-head-snake/fa2 sorted-snake=build/variants/ab11-sorted-snake/fa2
for shape in "causal|--batch 4 --heads 16 --seqlen 4096 --dim 128 --causal" \
             "long-causal|--batch 1 --heads 16 --seqlen 16384 --dim 128 --dtype bf16 --causal" \
             "gqa-causal|--batch 4 --heads 32 --kv-heads 8 --seqlen 4096 --dim 128 --dtype bf16 --causal"; do
  # shellcheck disable=SC2086
  bash tools/profile.sh build/step11/fa2 ${shape#*|} >"$out/run40-profile-${shape%%|*}-step11.txt" 2>&1
done
grep -H -E "gpu__time|hit_rate|hmma" "$out"/run40-profile-*.txt | sed 's/  */ /g'
