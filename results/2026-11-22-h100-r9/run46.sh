#!/usr/bin/env bash
# Run 46 (H100): step 11 A/B at d64, in rounds: three consumer warpgroups when there are
# more 128-row items than SMs (step 11, the rule measured on the non-persistent step 09)
# against two everywhere (two-consumers). The d64 benchmark shapes and the same two
# causal; once each per round, order rotated, three rounds (--check sample on the first).
# Writes under $OUT (or build/run46).
set -uo pipefail
cd "$(dirname "$0")/../.."
out=${OUT:-build/run46}; mkdir -p "$out"
t0=$(date +%s)
rm -rf steps/07_hopper_wgmma steps/08_hopper_wgmma  # folders the device may still hold from before a rename
src=steps/11_persistent/kernel.cu
mkdir -p build/ab
python3 - "$src" build/ab/two-consumers.cu <<'PY'
import sys
src, dst = sys.argv[1:]
text = open(src).read()
# the configuration, and the static_assert that numbers it (fa2_config then says 0 for both)
for old, new in [("using ManyItemsConfig = Config<D, D == 64 ? 3 : 2>;", "using ManyItemsConfig = Config<D, 2>;"),
                 ("ManyItemsConfig<64>::CONSUMERS == 3", "ManyItemsConfig<64>::CONSUMERS == 2")]:
    assert text.count(old) == 1, f"'{old}' is not in the kernel exactly once"
    text = text.replace(old, new)
open(dst, "w").write(text)  # build/ab/ is as deep as steps/11_*/: the includes hold
PY
make -s -j16 build/step11/fa2 >/dev/null
make -s variant step=11 NAME=ab11-two-consumers SRC=build/ab/two-consumers.cu
echo "built at $(( $(date +%s) - t0 )) s"
bins=(build/step11/fa2 build/variants/ab11-two-consumers/fa2); names=(step11 two-consumers)
shapes=("--batch 4 --heads 16 --seqlen 4096 --dim 64" "--batch 16 --heads 16 --seqlen 1024 --dim 64"
        "--batch 4 --heads 16 --seqlen 4096 --dim 64 --causal" "--batch 16 --heads 16 --seqlen 1024 --dim 64 --causal")
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
      [ -f "$out/run46-ab.csv" ] || head -n 1 "$out/one.csv" | awk '{print $0",variant,round"}' >"$out/run46-ab.csv"
      tail -n +2 "$out/one.csv" | awk -v v="${names[$j]}" -v r="$round" '{print $0","v","r}' >>"$out/run46-ab.csv"
    done
  done
done
rm -f "$out/one.csv"
awk -F, 'NR > 1 { printf "%-14s B%s N%s d%s c%s round %s %9.4f ms\n", $(NF-1), $5, $8, $10, $11, $NF, $12 }' "$out/run46-ab.csv"
echo "all done at $(( $(date +%s) - t0 )) s"
