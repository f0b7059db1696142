#!/usr/bin/env bash
# Run 44 (H100): one lever of issue 17 on step 11, A/B in rounds, and the profile of
# the shape furthest from the target.
#   stages3  three K/V stages instead of two at d64 (at d128 a third stage does not
#            fit next to Q and O: 32 + 32 + 3 x 64 KB > 227 KB)
# Step 11 and the variant at the two d64 benchmark shapes, once each per round, order
# rotated, three rounds (--check sample on the first); then Nsight Compute on step 11
# at B16 H16 N1024 d64. Writes under $OUT (or build/run44).
set -uo pipefail
cd "$(dirname "$0")/../.."
out=${OUT:-build/run44}; mkdir -p "$out"
t0=$(date +%s)
rm -rf steps/07_hopper_wgmma steps/08_hopper_wgmma  # folders the device may still hold from before a rename
src=steps/11_persistent/kernel.cu
mkdir -p build/ab
python3 - "$src" build/ab/stages3.cu <<'PY'
import sys
src, dst = sys.argv[1:]
old = "static constexpr int STAGES = 2;"
text = open(src).read()
assert text.count(old) == 1, "the STAGES line is not in the kernel exactly once"
open(dst, "w").write(text.replace(old, "static constexpr int STAGES = D == 64 ? 3 : 2;"))  # build/ab/: includes hold
PY
make -s -j16 build/step11/fa2 >/dev/null
make -s variant step=11 NAME=ab11-stages3 SRC=build/ab/stages3.cu
echo "built at $(( $(date +%s) - t0 )) s"
bins=(build/step11/fa2 build/variants/ab11-stages3/fa2); names=(step11 stages3)
shapes=("--batch 4 --heads 16 --seqlen 4096 --dim 64" "--batch 16 --heads 16 --seqlen 1024 --dim 64")
for round in 0 1 2; do
  for shape in "${shapes[@]}"; do
    check=off; [ "$round" = 0 ] && check=sample
    for k in 0 1; do
      j=$(( (k + round) % 2 ))
      rm -f "$out/one.csv"
      # shellcheck disable=SC2086
      line=$("${bins[$j]}" $shape --warmup 3 --iters 30 --check $check --csv "$out/one.csv" 2>&1 | tail -n 1)
      case $line in *FAIL*) echo "FAIL ${names[$j]} $shape: $line";; esac
      [ -f "$out/one.csv" ] || { echo "no result: ${names[$j]} $shape: $line"; continue; }
      [ -f "$out/run44-ab.csv" ] || head -n 1 "$out/one.csv" | awk '{print $0",variant,round"}' >"$out/run44-ab.csv"
      tail -n +2 "$out/one.csv" | awk -v v="${names[$j]}" -v r="$round" '{print $0","v","r}' >>"$out/run44-ab.csv"
    done
  done
done
rm -f "$out/one.csv"
awk -F, 'NR > 1 { printf "%-10s B%s N%s d%s round %s %9.4f ms\n", $(NF-1), $5, $8, $10, $NF, $12 }' "$out/run44-ab.csv"
bash tools/profile.sh build/step11/fa2 --batch 16 --heads 16 --seqlen 1024 --dim 64 >"$out/run44-profile-b16-d64-step11.txt" 2>&1
grep -E "gpu__time|hit_rate|hmma|issue_active|stalled_(wait|barrier)|xu.sum|inst_executed.sum" "$out/run44-profile-b16-d64-step11.txt" | sed 's/  */ /g'
echo "all done at $(( $(date +%s) - t0 )) s"
