#!/usr/bin/env bash
# Run 46 (H100): step 11 A/B at d64, in rounds: three consumer warpgroups when there are
# more 128-row items than SMs (step 11, the rule measured on the non-persistent step 09)
# against two everywhere (two-consumers). The d64 benchmark shapes and the same two
# causal (tools/ab.sh, three rounds). The variant also renumbers the static_assert that
# names the configurations (fa2_config then says 0 for both).
# Writes under $OUT (or build/run46).
set -uo pipefail
cd "$(dirname "$0")/../.."
out=${OUT:-build/run46}; mkdir -p "$out"
rm -rf steps/07_hopper_wgmma steps/08_hopper_wgmma  # folders the device may still hold from before a rename
mkdir -p build/ab  # as deep as steps/11_*/: the kernel's includes hold
python3 tools/variant_src.py steps/11_persistent/kernel.cu build/ab/two-consumers.cu \
  "using ManyItemsConfig = Config<D, D == 64 ? 3 : 2>;" "using ManyItemsConfig = Config<D, 2>;" \
  "ManyItemsConfig<64>::CONSUMERS == 3" "ManyItemsConfig<64>::CONSUMERS == 2" || exit 1
make -s -j16 build/step11/fa2 >/dev/null
make -s variant step=11 NAME=ab11-two-consumers SRC=build/ab/two-consumers.cu
shapes="--batch 4 --heads 16 --seqlen 4096 --dim 64;--batch 16 --heads 16 --seqlen 1024 --dim 64"
shapes+=";--batch 4 --heads 16 --seqlen 4096 --dim 64 --causal;--batch 16 --heads 16 --seqlen 1024 --dim 64 --causal"
bash tools/ab.sh "$out/run46-ab.csv" 3 "$shapes" \
  step11=build/step11/fa2 two-consumers=build/variants/ab11-two-consumers/fa2
